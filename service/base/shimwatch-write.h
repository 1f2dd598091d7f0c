/* SPDX-License-Identifier: Apache-2.0
 *
 * Writing a buffer to an fd whole: the one loop the history and the task log share.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Writes @length bytes of @data to @fd, again after a short write or EINTR. FALSE when a
 * write fails, with errno set (EIO for a write that wrote nothing); what went before is
 * written. A non-blocking @fd that is full fails with EAGAIN: this is for files, pipes
 * and sockets that block. */
gboolean shimwatch_write_all (int         fd,
                              const void *data,
                              gsize       length);

G_END_DECLS
