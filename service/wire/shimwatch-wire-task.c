/* SPDX-License-Identifier: Apache-2.0
 *
 * wire: the Task API
 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shimwatch-wire-private.h"

GBytes *
shimwatch_wire_encode_runc_options (const char *runc_root,
                                    gboolean    systemd_cgroup)
{
  Containerd__Runc__V1__Options options = CONTAINERD__RUNC__V1__OPTIONS__INIT;
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  g_autoptr(GBytes) value = NULL;
  gsize length;

  if (runc_root != NULL)
    options.root = (char *) runc_root;
  options.systemd_cgroup = systemd_cgroup;
  value = shimwatch_wire_pack_message (&options.base);
  any.type_url = (char *) TYPE_URL_RUNC_OPTIONS;
  any.value.data = (guint8 *) shimwatch_wire_bytes_data (value, &length);
  any.value.len = length;
  return shimwatch_wire_pack_message (&any.base);
}

const char *
shimwatch_task_status_to_string (ShimwatchTaskStatus status)
{
  switch (status)
    {
    case SHIMWATCH_TASK_STATUS_CREATED:
      return "created";
    case SHIMWATCH_TASK_STATUS_RUNNING:
      return "running";
    case SHIMWATCH_TASK_STATUS_STOPPED:
      return "stopped";
    case SHIMWATCH_TASK_STATUS_PAUSED:
      return "paused";
    case SHIMWATCH_TASK_STATUS_PAUSING:
      return "pausing";
    case SHIMWATCH_TASK_STATUS_UNKNOWN:
    default:
      return "unknown";
    }
}

GBytes *
shimwatch_wire_encode_connect_request (const char *id)
{
  Containerd__Task__V2__ConnectRequest request = CONTAINERD__TASK__V2__CONNECT_REQUEST__INIT;

  request.id = (char *) id;
  return shimwatch_wire_pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_pids_request (const char *id)
{
  Containerd__Task__V2__PidsRequest request = CONTAINERD__TASK__V2__PIDS_REQUEST__INIT;

  request.id = (char *) id;
  return shimwatch_wire_pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_process_request (const char *id,
                                       const char *exec_id)
{
  /* State, Start, Delete and Wait requests share the layout {id = 1, exec_id = 2} */
  Containerd__Task__V2__StateRequest request = CONTAINERD__TASK__V2__STATE_REQUEST__INIT;

  request.id = (char *) id;
  if (exec_id != NULL)
    request.exec_id = (char *) exec_id;
  return shimwatch_wire_pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_create_request (const ShimwatchCreateParams *params)
{
  Containerd__Task__V2__CreateTaskRequest request = CONTAINERD__TASK__V2__CREATE_TASK_REQUEST__INIT;
  Google__Protobuf__Any *options = NULL;
  g_autoptr(GBytes) options_bytes = NULL;
  g_autofree Containerd__Types__Mount *mounts = g_new0 (Containerd__Types__Mount, params->n_rootfs);
  g_autofree Containerd__Types__Mount **mount_ptrs = g_new0 (Containerd__Types__Mount *,
                                                            params->n_rootfs);
  GBytes *result;

  request.id = (char *) params->id;
  request.bundle = (char *) params->bundle;
  for (gsize i = 0; i < params->n_rootfs; i++)
    {
      const ShimwatchMount *m = &params->rootfs[i];

      containerd__types__mount__init (&mounts[i]);
      mounts[i].type = (char *) (m->type != NULL ? m->type : "");
      mounts[i].source = (char *) (m->source != NULL ? m->source : "");
      mounts[i].target = (char *) (m->target != NULL ? m->target : "");
      mounts[i].options = (char **) m->options;
      mounts[i].n_options = m->options != NULL ? g_strv_length ((char **) m->options) : 0;
      mount_ptrs[i] = &mounts[i];
    }
  request.rootfs = mount_ptrs;
  request.n_rootfs = params->n_rootfs;
  request.terminal = params->terminal;
  if (params->stdin_path != NULL)
    request.stdin = (char *) params->stdin_path;
  if (params->stdout_path != NULL)
    request.stdout = (char *) params->stdout_path;
  if (params->stderr_path != NULL)
    request.stderr = (char *) params->stderr_path;
  if (params->runc_root != NULL)
    {
      gsize length;
      const guint8 *data;

      options_bytes = shimwatch_wire_encode_runc_options (params->runc_root,
                                                          params->systemd_cgroup);
      data = shimwatch_wire_bytes_data (options_bytes, &length);
      options = google__protobuf__any__unpack (NULL, length, data);
      request.options = options;
    }
  result = shimwatch_wire_pack_message (&request.base);
  if (options != NULL)
    google__protobuf__any__free_unpacked (options, NULL);
  return result;
}

GBytes *
shimwatch_wire_encode_kill_request (const char *id,
                                    const char *exec_id,
                                    guint32     signal_number,
                                    gboolean    all)
{
  Containerd__Task__V2__KillRequest request = CONTAINERD__TASK__V2__KILL_REQUEST__INIT;

  request.id = (char *) id;
  if (exec_id != NULL)
    request.exec_id = (char *) exec_id;
  request.signal = signal_number;
  request.all = all;
  return shimwatch_wire_pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_shutdown_request (const char *id,
                                        gboolean    now)
{
  Containerd__Task__V2__ShutdownRequest request = CONTAINERD__TASK__V2__SHUTDOWN_REQUEST__INIT;

  request.id = (char *) id;
  request.now = now;
  return shimwatch_wire_pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_pause_request (const char *id)
{
  Containerd__Task__V2__PauseRequest request = CONTAINERD__TASK__V2__PAUSE_REQUEST__INIT;

  request.id = (char *) id;
  return shimwatch_wire_pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_resume_request (const char *id)
{
  Containerd__Task__V2__ResumeRequest request = CONTAINERD__TASK__V2__RESUME_REQUEST__INIT;

  request.id = (char *) id;
  return shimwatch_wire_pack_message (&request.base);
}

gboolean
shimwatch_wire_decode_connect_response (GBytes   *payload,
                                        guint32  *shim_pid,
                                        guint32  *task_pid,
                                        GError  **error)
{
  Containerd__Task__V2__ConnectResponse *response;

  response = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__connect_response__descriptor,
                                                       payload, error);
  if (response == NULL)
    return FALSE;
  *shim_pid = response->shim_pid;
  *task_pid = response->task_pid;
  containerd__task__v2__connect_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_pid_response (GBytes   *payload,
                                    guint32  *pid,
                                    GError  **error)
{
  /* CreateTaskResponse and StartResponse are both {pid = 1} */
  Containerd__Task__V2__StartResponse *response;

  response = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__start_response__descriptor,
                                                       payload, error);
  if (response == NULL)
    return FALSE;
  *pid = response->pid;
  containerd__task__v2__start_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_state_response (GBytes              *payload,
                                      ShimwatchTaskState  *state,
                                      GError             **error)
{
  Containerd__Task__V2__StateResponse *response;

  response = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__state_response__descriptor,
                                                       payload, error);
  if (response == NULL)
    return FALSE;
  state->status = (int) response->status <= (int) SHIMWATCH_TASK_STATUS_PAUSING
                    ? (ShimwatchTaskStatus) response->status : SHIMWATCH_TASK_STATUS_UNKNOWN;
  state->pid = response->pid;
  state->exit_status = response->exit_status;
  state->exited_at = shimwatch_wire_timestamp_usec (response->exited_at);
  containerd__task__v2__state_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_wait_response (GBytes         *payload,
                                     ShimwatchExit  *exit_info,
                                     GError        **error)
{
  Containerd__Task__V2__WaitResponse *response;

  response = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__wait_response__descriptor,
                                                       payload, error);
  if (response == NULL)
    return FALSE;
  exit_info->pid = 0;
  exit_info->exit_status = response->exit_status;
  exit_info->exited_at = shimwatch_wire_timestamp_usec (response->exited_at);
  containerd__task__v2__wait_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_delete_response (GBytes         *payload,
                                       ShimwatchExit  *exit_info,
                                       GError        **error)
{
  Containerd__Task__V2__DeleteResponse *response;

  response = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__delete_response__descriptor,
                                                       payload, error);
  if (response == NULL)
    return FALSE;
  exit_info->pid = response->pid;
  exit_info->exit_status = response->exit_status;
  exit_info->exited_at = shimwatch_wire_timestamp_usec (response->exited_at);
  containerd__task__v2__delete_response__free_unpacked (response, NULL);
  return TRUE;
}

GArray *
shimwatch_wire_decode_pids_response (GBytes  *payload,
                                     GError **error)
{
  Containerd__Task__V2__PidsResponse *response;
  GArray *pids;

  response = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__pids_response__descriptor,
                                                       payload, error);
  if (response == NULL)
    return NULL;
  pids = g_array_sized_new (FALSE, FALSE, sizeof (guint32), response->n_processes);
  for (gsize i = 0; i < response->n_processes; i++)
    g_array_append_val (pids, response->processes[i]->pid);
  containerd__task__v2__pids_response__free_unpacked (response, NULL);
  return pids;
}

gboolean
shimwatch_wire_decode_empty (GBytes  *payload,
                             GError **error)
{
  /* google.protobuf.Empty: anything that parses as a message (unknown fields) is fine */
  Containerd__Task__V2__PidsRequest *message;

  message = (gpointer) shimwatch_wire_unpack_message (&containerd__task__v2__pids_request__descriptor,
                                                      payload, error);
  if (message == NULL)
    return FALSE;
  containerd__task__v2__pids_request__free_unpacked (message, NULL);
  return TRUE;
}
