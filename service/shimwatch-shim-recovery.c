/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShim: taking a task over again after a restart of the service
 */
#define G_LOG_DOMAIN "ShimwatchShim"

#include "config.h"

#include <sys/pidfd.h>
#include <unistd.h>

#include "shimwatch-shim-private.h"

ShimwatchShim *
shimwatch_shim_new_from_record (const ShimwatchShimServices *services,
                                const ShimwatchRecord       *record)
{
  ShimwatchShim *self = shimwatch_shim_new (services, record->namespace_, record->id,
                                            record->runtime,
                                            record->shim_binary[0] != '\0' ? record->shim_binary
                                                                            : NULL,
                                            record->task_dir);
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  self->task_start_time = record->task_start_time;
  /* until its shim answers again: whatever runs under the recorded pid when an event
   * first comes from it (read then, not for every record before the name is owned) */
  self->shim_start_time = SHIM_START_TIME_UNREAD;
  /* Status, which signals went out, the exit and what every task's record holds */
  shimwatch_task_lifecycle_restore (&self->lifecycle, record);
  if (record->cgroup_path != NULL && shimwatch_cgroup_path_is_valid (record->cgroup_path))
    shimwatch_shim_set_cgroup_path (self, record->cgroup_path);
  else if (record->cgroup_path != NULL)
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "record"),
                        "ignoring the record's cgroup \"%s\"",
                        record->cgroup_path);
  shimwatch_dbus_shim_set_bundle_source (iface, record->bundle_source);
  shimwatch_dbus_shim_set_command (iface, (const char * const *) record->command);
  shimwatch_dbus_shim_set_labels (iface, record->labels);
  self->oom = record->oom;
  /* the task's init may still run: watch it again, unless its pid now names another
   * process. The pidfd first: the start time read after it is the process it holds. */
  if (record->task_pid > 0 && !record->exit_emitted && record->task_start_time != 0)
    {
      self->task_pidfd = pidfd_open ((pid_t) record->task_pid, 0);
      if (self->task_pidfd >= 0 &&
          shimwatch_process_start_time (record->task_pid) != record->task_start_time)
        {
          close (self->task_pidfd);
          self->task_pidfd = -1;
        }
    }
  if (self->task_pidfd >= 0)
    shimwatch_shim_find_cgroup (self, record->task_pid);
  return self;
}

static void
readopt_state_cb (GObject      *source,
                  GAsyncResult *result,
                  gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(GError) error = NULL;
  ShimwatchTaskState state = { 0 };

  if (!shimwatch_task_client_state_finish (SHIMWATCH_TASK_CLIENT (source), result, &state,
                                           &error))
    {
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "readopt"),
                          "State after reconnecting: %s",
                          error->message);
      return;
    }
  /* whatever happened while the service was down: a real exit is reported now, once */
  if (state.status == SHIMWATCH_TASK_STATUS_STOPPED)
    {
      shimwatch_shim_emit_task_exit (self, state.pid, state.exit_status,
                                     state.exited_at != 0 ? state.exited_at : g_get_real_time (), NULL);
    }
  else if (state.status == SHIMWATCH_TASK_STATUS_CREATED)
    shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_RUNTIME_CREATED);
  else if (state.status == SHIMWATCH_TASK_STATUS_RUNNING)
    shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING);
  else if (state.status == SHIMWATCH_TASK_STATUS_PAUSING)
    shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSING);
  else if (state.status == SHIMWATCH_TASK_STATUS_PAUSED)
    shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED);
  shimwatch_task_lifecycle_save (&self->lifecycle);
}

void
shimwatch_shim_readopt (ShimwatchShim       *self,
                        ShimwatchShimHandle *handle)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  shimwatch_shim_attach (self, handle);
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "readopt"), "shim %u taken over again",
                      handle->shim_pid);
  /* what arrived while it was being reached: the shim's events, then the calls */
  shimwatch_shim_replay_early_events (self);
  shimwatch_shim_resume_waiting_calls (self, FALSE);
  if (self->kill_when_reached)
    {
      shimwatch_shim_kill_shim (self, NULL);
      return;
    }
  if (self->lifecycle.machine.state == SHIMWATCH_SHIM_STATE_DELETED)
    {
      /* the service died between Delete and the shim's shutdown: finish the teardown */
      shimwatch_task_client_shutdown_async (self->handle->client, FALSE, SHUTDOWN_TIMEOUT_MS,
                                            shimwatch_shim_shutdown_rpc_cb, g_object_ref (self));
      return;
    }
  shimwatch_task_client_state_async (self->handle->client, RPC_TIMEOUT_MS, readopt_state_cb,
                                     g_object_ref (self));
}

void
shimwatch_shim_mark_dead (ShimwatchShim *self,
                          const char    *reason)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));
  /* what arrived while it was being reached (its exit, maybe) counts, then the cleanup */
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST);
  shimwatch_shim_replay_early_events (self);
  shimwatch_shim_on_disconnected (self, reason);
  shimwatch_shim_resume_waiting_calls (self, FALSE);
}
