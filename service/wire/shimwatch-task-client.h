/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskClient: the runtime-v2 Task API (containerd.task.v3.Task, falling back to
 * containerd.task.v2.Task) over one ShimwatchTtrpc connection, for one task id.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-ttrpc.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_TASK_CLIENT (shimwatch_task_client_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchTaskClient, shimwatch_task_client, SHIMWATCH, TASK_CLIENT, GObject)

ShimwatchTaskClient *shimwatch_task_client_new          (ShimwatchTtrpc              *ttrpc,
                                                         const char                  *namespace_,
                                                         const char                  *id,
                                                         int                          version);
ShimwatchTtrpc      *shimwatch_task_client_get_ttrpc    (ShimwatchTaskClient         *self);
int                  shimwatch_task_client_get_version  (ShimwatchTaskClient         *self);

/* Connect: tries v3 first when the bootstrap said 3, and v2 on UNIMPLEMENTED */
void     shimwatch_task_client_connect_async  (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_connect_finish (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               guint32                     *shim_pid,
                                               guint32                     *task_pid,
                                               GError                     **error);
/* Probe: Connect as a health check; the answer is not awaited promptly: it is read with
 * shimwatch_ttrpc_collect() on the client's connection. No timer of its own: the caller
 * ends it at its deadline (timeout_ms > 0) with shimwatch_ttrpc_expire_deferred() */
void     shimwatch_task_client_probe_async    (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_probe_finish   (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               GError                     **error);
void     shimwatch_task_client_create_async   (ShimwatchTaskClient         *self,
                                               const ShimwatchCreateParams *params,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_create_finish  (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               guint32                     *pid,
                                               GError                     **error);
void     shimwatch_task_client_start_async    (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_start_finish   (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               guint32                     *pid,
                                               GError                     **error);
void     shimwatch_task_client_state_async    (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_state_finish   (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               ShimwatchTaskState          *state,
                                               GError                     **error);
void     shimwatch_task_client_pids_async     (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
GArray  *shimwatch_task_client_pids_finish    (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               GError                     **error);
void     shimwatch_task_client_kill_async     (ShimwatchTaskClient         *self,
                                               guint32                      signal_number,
                                               gboolean                     all,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_kill_finish    (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               GError                     **error);
/* Pause / Resume: freeze and thaw every process of the task */
void     shimwatch_task_client_pause_async    (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_pause_finish   (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               GError                     **error);
void     shimwatch_task_client_resume_async   (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_resume_finish  (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               GError                     **error);
/* Wait blocks until the task exits: pass timeout_ms = 0 for no deadline */
void     shimwatch_task_client_wait_async     (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_wait_finish    (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               ShimwatchExit               *exit_info,
                                               GError                     **error);
void     shimwatch_task_client_delete_async   (ShimwatchTaskClient         *self,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_delete_finish  (ShimwatchTaskClient         *self,
                                               GAsyncResult                *result,
                                               ShimwatchExit               *exit_info,
                                               GError                     **error);
void     shimwatch_task_client_shutdown_async (ShimwatchTaskClient         *self,
                                               gboolean                     now,
                                               guint                        timeout_ms,
                                               GAsyncReadyCallback          callback,
                                               gpointer                     user_data);
gboolean shimwatch_task_client_shutdown_finish (ShimwatchTaskClient        *self,
                                                GAsyncResult               *result,
                                                GError                    **error);

G_END_DECLS
