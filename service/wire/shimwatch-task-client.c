/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchTask"

#include "config.h"

#include "shimwatch-task-client.h"

struct _ShimwatchTaskClient
{
  GObject         parent_instance;

  ShimwatchTtrpc *ttrpc;
  char           *namespace_;
  char           *id;
  int             version;     /* 2 or 3: containerd.task.v<version>.Task */
};

G_DEFINE_TYPE (ShimwatchTaskClient, shimwatch_task_client, G_TYPE_OBJECT)

static const char *
service_name (ShimwatchTaskClient *self)
{
  return self->version >= 3 ? "containerd.task.v3.Task" : "containerd.task.v2.Task";
}

typedef struct {
  char    *method;
  GBytes  *payload;
  guint    timeout_ms;
  gboolean may_fall_back;
  ShimwatchTtrpcCallFlags flags;
} CallData;

static void
call_data_free (CallData *data)
{
  g_free (data->method);
  g_bytes_unref (data->payload);
  g_free (data);
}

static void call_cb (GObject      *source,
                     GAsyncResult *result,
                     gpointer      user_data);

static void
send_call (GTask *task)
{
  ShimwatchTaskClient *self = g_task_get_source_object (task);
  CallData *data = g_task_get_task_data (task);

  shimwatch_ttrpc_call_full_async (self->ttrpc, service_name (self), data->method,
                                   data->payload, self->namespace_, data->timeout_ms,
                                   data->flags, call_cb, task);
}

static void
call_cb (GObject      *source,
         GAsyncResult *result,
         gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  ShimwatchTaskClient *self = g_task_get_source_object (task);
  CallData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;
  GBytes *payload;

  payload = shimwatch_ttrpc_call_finish (SHIMWATCH_TTRPC (source), result, &error);
  if (payload == NULL)
    {
      /* containerd's bridge: a v3 client retries as v2 when the shim only has v2 */
      if (data->may_fall_back && self->version >= 3 &&
          g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_UNIMPLEMENTED))
        {
          g_debug ("task %s/%s: %s is unimplemented, falling back to v2",
                   self->namespace_, self->id, service_name (self));
          self->version = 2;
          data->may_fall_back = FALSE;
          send_call (g_steal_pointer (&task));
          return;
        }
      g_prefix_error (&error, "%s: ", data->method);
      g_task_return_error (task, g_steal_pointer (&error));
      return;
    }
  g_task_return_pointer (task, payload, (GDestroyNotify) g_bytes_unref);
}

static void
call_full (ShimwatchTaskClient     *self,
           gpointer                 source_tag,
           const char              *method,
           GBytes                  *payload,
           guint                    timeout_ms,
           gboolean                 may_fall_back,
           ShimwatchTtrpcCallFlags  flags,
           GAsyncReadyCallback      callback,
           gpointer                 user_data)
{
  GTask *task = g_task_new (self, NULL, callback, user_data);
  CallData *data = g_new0 (CallData, 1);

  g_task_set_source_tag (task, source_tag);
  data->method = g_strdup (method);
  data->payload = payload;
  data->timeout_ms = timeout_ms;
  data->may_fall_back = may_fall_back;
  data->flags = flags;
  g_task_set_task_data (task, data, (GDestroyNotify) call_data_free);
  send_call (task);
}

static void
call (ShimwatchTaskClient *self,
      gpointer             source_tag,
      const char          *method,
      GBytes              *payload,
      guint                timeout_ms,
      gboolean             may_fall_back,
      GAsyncReadyCallback  callback,
      gpointer             user_data)
{
  call_full (self, source_tag, method, payload, timeout_ms, may_fall_back,
             SHIMWATCH_TTRPC_CALL_NONE, callback, user_data);
}

static GBytes *
call_finish (ShimwatchTaskClient  *self,
             GAsyncResult         *result,
             gpointer              source_tag,
             GError              **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  g_return_val_if_fail (g_task_get_source_tag (G_TASK (result)) == source_tag, NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

void
shimwatch_task_client_connect_async (ShimwatchTaskClient *self,
                                     guint                timeout_ms,
                                     GAsyncReadyCallback  callback,
                                     gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_connect_async, "Connect",
        shimwatch_wire_encode_connect_request (self->id), timeout_ms, TRUE, callback, user_data);
}

/* a health check: Connect, its answer collected with the others (SHIMWATCH_TTRPC_CALL_DEFERRED),
 * its deadline kept by the caller with those of the others (..._CALLER_DEADLINE) */
void
shimwatch_task_client_probe_async (ShimwatchTaskClient *self,
                                   guint                timeout_ms,
                                   GAsyncReadyCallback  callback,
                                   gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  g_return_if_fail (timeout_ms > 0);
  call_full (self, shimwatch_task_client_probe_async, "Connect",
             shimwatch_wire_encode_connect_request (self->id), timeout_ms, TRUE,
             SHIMWATCH_TTRPC_CALL_DEFERRED | SHIMWATCH_TTRPC_CALL_CALLER_DEADLINE,
             callback, user_data);
}

gboolean
shimwatch_task_client_probe_finish (ShimwatchTaskClient  *self,
                                    GAsyncResult         *result,
                                    GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_probe_async, error);
  guint32 shim_pid, task_pid;

  return payload != NULL &&
         shimwatch_wire_decode_connect_response (payload, &shim_pid, &task_pid, error);
}

gboolean
shimwatch_task_client_connect_finish (ShimwatchTaskClient  *self,
                                      GAsyncResult         *result,
                                      guint32              *shim_pid,
                                      guint32              *task_pid,
                                      GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_connect_async, error);
  guint32 shim = 0, task = 0;

  if (payload == NULL || !shimwatch_wire_decode_connect_response (payload, &shim, &task, error))
    return FALSE;
  if (shim_pid != NULL)
    *shim_pid = shim;
  if (task_pid != NULL)
    *task_pid = task;
  return TRUE;
}

void
shimwatch_task_client_create_async (ShimwatchTaskClient         *self,
                                    const ShimwatchCreateParams *params,
                                    guint                        timeout_ms,
                                    GAsyncReadyCallback          callback,
                                    gpointer                     user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_create_async, "Create",
        shimwatch_wire_encode_create_request (params), timeout_ms, FALSE, callback, user_data);
}

gboolean
shimwatch_task_client_create_finish (ShimwatchTaskClient  *self,
                                     GAsyncResult         *result,
                                     guint32              *pid,
                                     GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_create_async, error);

  return payload != NULL && shimwatch_wire_decode_pid_response (payload, pid, error);
}

void
shimwatch_task_client_start_async (ShimwatchTaskClient *self,
                                   guint                timeout_ms,
                                   GAsyncReadyCallback  callback,
                                   gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_start_async, "Start",
        shimwatch_wire_encode_process_request (self->id, NULL), timeout_ms, FALSE,
        callback, user_data);
}

gboolean
shimwatch_task_client_start_finish (ShimwatchTaskClient  *self,
                                    GAsyncResult         *result,
                                    guint32              *pid,
                                    GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_start_async, error);

  return payload != NULL && shimwatch_wire_decode_pid_response (payload, pid, error);
}

void
shimwatch_task_client_state_async (ShimwatchTaskClient *self,
                                   guint                timeout_ms,
                                   GAsyncReadyCallback  callback,
                                   gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_state_async, "State",
        shimwatch_wire_encode_process_request (self->id, NULL), timeout_ms, FALSE,
        callback, user_data);
}

gboolean
shimwatch_task_client_state_finish (ShimwatchTaskClient  *self,
                                    GAsyncResult         *result,
                                    ShimwatchTaskState   *state,
                                    GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_state_async, error);

  return payload != NULL && shimwatch_wire_decode_state_response (payload, state, error);
}

void
shimwatch_task_client_pids_async (ShimwatchTaskClient *self,
                                  guint                timeout_ms,
                                  GAsyncReadyCallback  callback,
                                  gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_pids_async, "Pids",
        shimwatch_wire_encode_pids_request (self->id), timeout_ms, FALSE, callback, user_data);
}

GArray *
shimwatch_task_client_pids_finish (ShimwatchTaskClient  *self,
                                   GAsyncResult         *result,
                                   GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_pids_async, error);

  return payload != NULL ? shimwatch_wire_decode_pids_response (payload, error) : NULL;
}

void
shimwatch_task_client_kill_async (ShimwatchTaskClient *self,
                                  guint32              signal_number,
                                  gboolean             all,
                                  guint                timeout_ms,
                                  GAsyncReadyCallback  callback,
                                  gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_kill_async, "Kill",
        shimwatch_wire_encode_kill_request (self->id, NULL, signal_number, all), timeout_ms,
        FALSE, callback, user_data);
}

gboolean
shimwatch_task_client_kill_finish (ShimwatchTaskClient  *self,
                                   GAsyncResult         *result,
                                   GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_kill_async, error);

  return payload != NULL && shimwatch_wire_decode_empty (payload, error);
}

void
shimwatch_task_client_pause_async (ShimwatchTaskClient *self,
                                   guint                timeout_ms,
                                   GAsyncReadyCallback  callback,
                                   gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_pause_async, "Pause",
        shimwatch_wire_encode_pause_request (self->id), timeout_ms, FALSE, callback, user_data);
}

gboolean
shimwatch_task_client_pause_finish (ShimwatchTaskClient  *self,
                                    GAsyncResult         *result,
                                    GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_pause_async, error);

  return payload != NULL && shimwatch_wire_decode_empty (payload, error);
}

void
shimwatch_task_client_resume_async (ShimwatchTaskClient *self,
                                    guint                timeout_ms,
                                    GAsyncReadyCallback  callback,
                                    gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_resume_async, "Resume",
        shimwatch_wire_encode_resume_request (self->id), timeout_ms, FALSE, callback, user_data);
}

gboolean
shimwatch_task_client_resume_finish (ShimwatchTaskClient  *self,
                                     GAsyncResult         *result,
                                     GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_resume_async,
                                           error);

  return payload != NULL && shimwatch_wire_decode_empty (payload, error);
}

void
shimwatch_task_client_wait_async (ShimwatchTaskClient *self,
                                  guint                timeout_ms,
                                  GAsyncReadyCallback  callback,
                                  gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_wait_async, "Wait",
        shimwatch_wire_encode_process_request (self->id, NULL), timeout_ms, FALSE,
        callback, user_data);
}

gboolean
shimwatch_task_client_wait_finish (ShimwatchTaskClient  *self,
                                   GAsyncResult         *result,
                                   ShimwatchExit        *exit_info,
                                   GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_wait_async, error);

  return payload != NULL && shimwatch_wire_decode_wait_response (payload, exit_info, error);
}

void
shimwatch_task_client_delete_async (ShimwatchTaskClient *self,
                                    guint                timeout_ms,
                                    GAsyncReadyCallback  callback,
                                    gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_delete_async, "Delete",
        shimwatch_wire_encode_process_request (self->id, NULL), timeout_ms, FALSE,
        callback, user_data);
}

gboolean
shimwatch_task_client_delete_finish (ShimwatchTaskClient  *self,
                                     GAsyncResult         *result,
                                     ShimwatchExit        *exit_info,
                                     GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_delete_async, error);

  return payload != NULL && shimwatch_wire_decode_delete_response (payload, exit_info, error);
}

void
shimwatch_task_client_shutdown_async (ShimwatchTaskClient *self,
                                      gboolean             now,
                                      guint                timeout_ms,
                                      GAsyncReadyCallback  callback,
                                      gpointer             user_data)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_CLIENT (self));
  call (self, shimwatch_task_client_shutdown_async, "Shutdown",
        shimwatch_wire_encode_shutdown_request (self->id, now), timeout_ms, FALSE,
        callback, user_data);
}

gboolean
shimwatch_task_client_shutdown_finish (ShimwatchTaskClient  *self,
                                       GAsyncResult         *result,
                                       GError              **error)
{
  g_autoptr(GBytes) payload = call_finish (self, result, shimwatch_task_client_shutdown_async,
                                           error);

  return payload != NULL && shimwatch_wire_decode_empty (payload, error);
}

ShimwatchTtrpc *
shimwatch_task_client_get_ttrpc (ShimwatchTaskClient *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_TASK_CLIENT (self), NULL);
  return self->ttrpc;
}

int
shimwatch_task_client_get_version (ShimwatchTaskClient *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_TASK_CLIENT (self), 0);
  return self->version;
}

ShimwatchTaskClient *
shimwatch_task_client_new (ShimwatchTtrpc *ttrpc,
                           const char     *namespace_,
                           const char     *id,
                           int             version)
{
  ShimwatchTaskClient *self;

  g_return_val_if_fail (SHIMWATCH_IS_TTRPC (ttrpc), NULL);

  self = g_object_new (SHIMWATCH_TYPE_TASK_CLIENT, NULL);
  self->ttrpc = g_object_ref (ttrpc);
  self->namespace_ = g_strdup (namespace_);
  self->id = g_strdup (id);
  self->version = version >= 3 ? 3 : 2;
  return self;
}

static void
shimwatch_task_client_finalize (GObject *object)
{
  ShimwatchTaskClient *self = SHIMWATCH_TASK_CLIENT (object);

  g_clear_object (&self->ttrpc);
  g_free (self->namespace_);
  g_free (self->id);

  G_OBJECT_CLASS (shimwatch_task_client_parent_class)->finalize (object);
}

static void
shimwatch_task_client_class_init (ShimwatchTaskClientClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_task_client_finalize;
}

static void
shimwatch_task_client_init (ShimwatchTaskClient *self)
{
}
