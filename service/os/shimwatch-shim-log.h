/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShimLog: the reader end of a task directory's `log` FIFO. A runtime-v2 shim
 * opens it write-only as its stderr and blocks until a reader exists; every line it
 * writes ends up in our log with the task's namespace and id.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_SHIM_LOG (shimwatch_shim_log_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchShimLog, shimwatch_shim_log, SHIMWATCH, SHIM_LOG, GObject)

ShimwatchShimLog *shimwatch_shim_log_open (const char  *task_dir,
                                           const char  *namespace_,
                                           const char  *id,
                                           GError     **error);
void              shimwatch_shim_log_close (ShimwatchShimLog *self);
/* every process that wrote to the FIFO was gone at @when (g_get_monotonic_time()): the
 * close need not read what the poller has already seen is not there */
void              shimwatch_shim_log_set_writers_gone (ShimwatchShimLog *self,
                                                       gint64            when);

G_END_DECLS
