/* SPDX-License-Identifier: Apache-2.0
 *
 * One shimwatchd per runtime directory: a second instance would take over (and unlink)
 * the live events socket of the first. The lock is an flock(2) on <runtime-dir>/shimwatchd.lock,
 * taken before anything in the directory is touched and held for the life of the process;
 * the kernel drops it when the process ends, however it ends.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* Returns the fd that holds the lock (close-on-exec; keep it open), or -1 with @error:
 * G_IO_ERROR_BUSY when another process holds the lock (the message names its pid), any
 * other code when the directory or the lock file cannot be made. */
int shimwatch_instance_lock_acquire (const char  *runtime_dir,
                                     GError     **error);

G_END_DECLS
