/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShim: what happens to a task: its shim attached, the shim's events, the
 * dead-shim cleanup, and taking a task over again after a restart of the service. Status,
 * its record and the lifecycle signals go through its ShimwatchTaskLifecycle.
 */
#define G_LOG_DOMAIN "ShimwatchShim"

#include "config.h"

#include <errno.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include "shimwatch-crash-point.h"
#include "shimwatch-shim-private.h"

/* ExitReason of an exit the runtime reported, where the lifecycle cannot tell: SIGKILL
 * with an OOM kill in the task's cgroup is the OOM killer's; NULL: as its status says */
static const char *
classify_exit (ShimwatchShim *self,
               guint32        exit_status)
{
  if (exit_status == 128 + SIGKILL &&
      (self->oom || (self->cgroup != NULL && shimwatch_task_cgroup_oom_kills (self->cgroup) > 0)))
    return "oom-killed";
  return NULL;
}

/* TaskExit exactly once per task; reason NULL: from the exit status */
static void
shimwatch_shim_emit_task_exit (ShimwatchShim *self,
                               guint32        pid,
                               guint32        exit_status,
                               gint64         exited_at,
                               const char    *reason)
{
  /* sent already: the state still moves on (a late exit is only reported once) */
  if (shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT))
    {
      shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_EXITED);
      return;
    }
  if (!shimwatch_task_lifecycle_emit_exit (&self->lifecycle, pid, exit_status, exited_at,
                                           reason != NULL ? reason
                                                          : classify_exit (self, exit_status)))
    return;
  shimwatch_shim_complete_stops (self);
}

/* TaskDelete exactly once per task, then the manager drops the object */
static void
emit_task_delete_and_finish (ShimwatchShim *self,
                             gboolean       reaped,
                             gboolean       cleanup_failed)
{
  /* nothing changed is left unsent when the object goes */
  if (self->changes_held)
    shimwatch_shim_flush_changes (self);
  shimwatch_task_lifecycle_emit_delete (&self->lifecycle);
  /* nothing is left to do for this task: its record goes (also one whose TaskDelete went
   * out before the service died) once TaskDelete is written to the bus; a TaskDelete
   * that never went out stays in the record for the next start to send */
  shimwatch_task_lifecycle_forget (&self->lifecycle);
  if (self->delete_invocation != NULL)
    shimwatch_dbus_shim_complete_delete (SHIMWATCH_DBUS_SHIM (self),
                                         g_steal_pointer (&self->delete_invocation),
                                         self->lifecycle.exit.exit_status,
                                         (guint64) self->lifecycle.exit.exited_at);
  /* the output is complete: followers get EOF, the retention period starts */
  if (self->task_log != NULL)
    shimwatch_task_log_finish (self->task_log);
  g_signal_emit (self, shimwatch_shim_signals[SIGNAL_FINISHED], 0, reaped, cleanup_failed);
}

/* -- the dead-shim path ------------------------------------------------------------------ */

/* The cleanup is over. Who writes to the task's FIFOs (its output, the shim's log) is
 * the shim, and what runs in the task: once the shim's pidfd said it was dead and the
 * cleanup saw the task's cgroup empty, nobody does any more, and the last read of each
 * FIFO can be left out where the poller has seen it empty since. Otherwise (a death
 * never seen, a child of the shim that kept its socket, a task without a cgroup,
 * processes that outlived the kill) they are read as before. */
static void
outputs_ended (ShimwatchShim                *self,
               const ShimwatchCleanupResult *outcome)
{
  gint64 gone_at;

  shimwatch_shim_watch_look_again (&self->watch, TRUE);
  if (self->watch.dead_at <= 0 || outcome->emptied_at == 0)
    return;
  gone_at = MAX (self->watch.dead_at, outcome->emptied_at);
  if (self->task_log != NULL)
    shimwatch_task_log_set_writers_gone (self->task_log, gone_at);
  if (self->handle != NULL && self->handle->log != NULL)
    shimwatch_shim_log_set_writers_gone (self->handle->log, gone_at);
}

static void
killed_cb (guint32  pid,
           gint64   when,
           gpointer user_data)
{
  ShimwatchShim *self = user_data;

  shimwatch_shim_watch_look_again (&self->watch, FALSE);
  /* the container is really dead now: tell clients at once, delete can take its time */
  shimwatch_shim_emit_task_exit (self, pid, 128 + SIGKILL, when, "shim-died");
}

static void
crash_cleanup_done_cb (GObject      *source,
                       GAsyncResult *result,
                       gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome = NULL;
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  outcome = shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);
  shimwatch_crash_point ("cleaned");
  outputs_ended (self, outcome);
  if (outcome->delete_timed_out && shimwatch_publisher_get_metrics (self->services.publisher) != NULL)
    shimwatch_metrics_count_cleanup_timeout (shimwatch_publisher_get_metrics (self->services.publisher));
  if (!shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT))
    {
      /* runc's delete --force ended what the dead shim left running */
      if (outcome->delete_ok)
        shimwatch_shim_emit_task_exit (self, outcome->deleted.pid, outcome->deleted.exit_status,
                                       outcome->deleted.exited_at != 0 ? outcome->deleted.exited_at
                                                        : g_get_real_time (),
                        "shim-died");
      else
        shimwatch_shim_emit_task_exit (self, shimwatch_dbus_shim_get_task_pid (iface), 255, g_get_real_time (),
                                       "unknown");
    }
  shimwatch_log_task (outcome->delete_ok ? G_LOG_LEVEL_MESSAGE : G_LOG_LEVEL_WARNING,
                      LOG_EVENT (self, "cleaned"),
                      "cleanup after dead shim finished%s%s",
                      outcome->delete_ok ? "" : ": delete failed: ",
                      outcome->delete_ok ? "" : outcome->delete_error);
  emit_task_delete_and_finish (self, TRUE, !outcome->delete_ok);
}

static void
normal_cleanup_done_cb (GObject      *source,
                        GAsyncResult *result,
                        gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome = NULL;

  outcome = shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);
  shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_EVENT (self, "cleaned"), "shim torn down after delete");
  emit_task_delete_and_finish (self, FALSE, !outcome->delete_ok);
}

/* the connection to the shim is gone (or, after a restart, could not be made again) */
/* The shim itself, if it still runs (hung, or its pidfd saw it die before the socket
 * closed): through the pidfd taken when it was attached, or, for a shim that was never
 * reached again after a restart, its recorded pid if that process still works in the
 * task directory (one readlink, not a scan). */
static void
kill_shim_process (ShimwatchShim *self)
{
  guint32 pid = shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self));
  g_autofree char *cwd_link = NULL;
  g_autofree char *cwd = NULL;
  gboolean killed = FALSE;
  int pidfd;

  if (shimwatch_shim_watch_has_pidfd (&self->watch))
    killed = shimwatch_shim_watch_kill (&self->watch);
  else if (pid > 0)
    {
      pidfd = pidfd_open ((pid_t) pid, 0);
      cwd_link = g_strdup_printf ("/proc/%u/cwd", pid);
      cwd = g_file_read_link (cwd_link, NULL);
      /* a pidfd turns readable once its process has exited: a dead shim is left alone */
      if (pidfd >= 0 && g_strcmp0 (cwd, self->task_dir) == 0 &&
          poll (&(struct pollfd) { .fd = pidfd, .events = POLLIN }, 1, 0) == 0)
        killed = pidfd_send_signal (pidfd, SIGKILL, NULL, 0) == 0;
      if (pidfd >= 0)
        close (pidfd);
    }
  if (killed)
    shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "disconnected"),
                        "sent SIGKILL to shim process %u, still there at the disconnection",
                        pid);
}

static void
shimwatch_shim_on_disconnected (ShimwatchShim *self,
                                const char    *reason)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  ShimwatchCleanupRequest *request;

  if (shimwatch_shim_is_detached (self) || shimwatch_shim_is_cleaning (self))
    return;
  /* a dead shim's task whose exit the cleanup's kill will report (below): its Status
   * ("cleaning") goes out with the exit properties, in the one PropertiesChanged before
   * TaskExit, a few milliseconds later, not in one of its own. A Get sees it at once */
  if (self->exported && !shimwatch_shim_is_deleted (self) && self->task_pidfd >= 0 &&
      !shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT))
    shimwatch_shim_hold_changes (self);
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST);

  /* a crash (not the end of a normal Delete; during CreateTask the task is nobody's yet):
   * Status "disconnected", and ShimDisconnected only once, also across restarts. It goes
   * out first, before anything else this death costs: only its mark comes before it, and
   * Status is published right after it (in the same dispatch, so no caller of the bus
   * can tell; its PropertiesChanged goes out later anyway) */
  if (self->exported && self->lifecycle.machine.state != SHIMWATCH_SHIM_STATE_DELETED)
    shimwatch_task_lifecycle_emit_disconnected (
      &self->lifecycle, shimwatch_dbus_shim_get_shim_pid (iface), reason, FALSE);

  if (!shimwatch_shim_is_deleted (self) && self->exported && self->cgroup_path != NULL)
    kill_shim_process (self);
  /* a shim dying as its connection closed may not have said so through its pidfd yet:
   * it is asked again at the end of the cleanup */
  shimwatch_shim_watch_stop (&self->watch, self->exported &&
                             self->lifecycle.machine.state != SHIMWATCH_SHIM_STATE_DELETED);
  /* during CreateTask the task is nobody's yet: the failing create cleans up, silently */
  if (!self->exported)
    return;

  if (self->lifecycle.machine.state == SHIMWATCH_SHIM_STATE_DELETED)
    {
      /* the end of a normal Delete: the task directory and the cgroup go, no crash
       * signals; the shim's Delete already did what `shim delete` would */
      shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_SHIM_GONE);
      request = shimwatch_shim_cleanup_request (self, FALSE);
      request->deleted = TRUE;
      shimwatch_cleanup_run_async (self->services.cleanup, request,
                                   NULL, NULL, normal_cleanup_done_cb, g_object_ref (self));
      return;
    }

  shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "disconnected"),
                      "shim disconnected (%s)", reason);
  g_signal_emit (self, shimwatch_shim_signals[SIGNAL_DISCONNECTED], 0);
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED);

  /* a hung shim was killed above; what runs in the task's cgroup is killed by the
   * cleanup. A record from before per-task cgroups knows no cgroup: only then are all
   * processes of the machine looked at, for those working in the task directory. */
  if (self->cgroup_path == NULL &&
      shimwatch_cleanup_kill_processes_in (self->task_dir) > 0)
    shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "disconnected"),
                        "killed what was still running in %s", self->task_dir);

  /* a task whose exit is already known is not killed again: its real status stays */
  request = shimwatch_shim_cleanup_request (
    self, !shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT));
  request->kill_cgroup = TRUE;
  shimwatch_cleanup_run_async (self->services.cleanup, request,
                               killed_cb, self, crash_cleanup_done_cb, g_object_ref (self));
}

void
shimwatch_shim_set_created (ShimwatchShim *self,
                            guint32        pid)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  shimwatch_dbus_shim_set_task_pid (iface, pid);
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_CREATED);
  /* a pidfd taken now lets a dead shim's task be killed at once, without pid reuse */
  if (self->task_pidfd < 0 && pid > 0)
    {
      self->task_pidfd = pidfd_open ((pid_t) pid, 0);
      self->task_start_time = shimwatch_process_start_time (pid);
      if (self->task_pidfd < 0)
        shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "create"),
                            "cannot watch task process %u: %s", pid,
                            g_strerror (errno));
    }
  shimwatch_shim_find_cgroup (self, pid);
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "create"), "task created: pid %u", pid);
}

/* -- events forwarded by the shim ------------------------------------------------------- */

void
shimwatch_shim_handle_event (ShimwatchShim        *self,
                             const ShimwatchEvent *event)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  if (!self->exported || shimwatch_shim_is_loading (self))
    {
      g_ptr_array_add (self->early_events, shimwatch_event_copy (event));
      return;
    }

  switch (event->kind)
    {
    case SHIMWATCH_EVENT_TASK_CREATE:
      if (shimwatch_dbus_shim_get_task_pid (iface) == 0)
        shimwatch_dbus_shim_set_task_pid (iface, event->pid);
      shimwatch_publisher_emit_task_create (self->services.publisher, self->path,
                                            self->namespace_, self->id,
                                            event->bundle != NULL ? event->bundle : "",
                                            event->pid);
      break;
    case SHIMWATCH_EVENT_TASK_START:
      shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_STARTED);
      shimwatch_publisher_emit_task_start (self->services.publisher, self->path,
                                           self->namespace_, self->id, event->pid);
      break;
    case SHIMWATCH_EVENT_TASK_EXIT:
      /* exits of exec'd processes are not the task's */
      if (event->exec_id != NULL && *event->exec_id != '\0' &&
          g_strcmp0 (event->exec_id, self->id) != 0)
        break;
      shimwatch_shim_emit_task_exit (self, event->pid, event->exit_status,
                                     event->exited_at != 0 ? event->exited_at : g_get_real_time (), NULL);
      break;
    case SHIMWATCH_EVENT_TASK_OOM:
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "oom"),
                          "task hit its memory limit");
      self->oom = TRUE;
      /* the OOM event may come after the exit it caused */
      if (shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) &&
          self->lifecycle.exit.exit_status == 128 + SIGKILL &&
          g_strcmp0 (shimwatch_dbus_shim_get_exit_reason (iface), "signaled") == 0)
        shimwatch_dbus_shim_set_exit_reason (iface, "oom-killed");
      shimwatch_task_lifecycle_save (&self->lifecycle);
      shimwatch_publisher_emit_task_oom (self->services.publisher, self->path, self->namespace_,
                                         self->id);
      shimwatch_task_lifecycle_add_history (&self->lifecycle, "oom",
                                            shimwatch_dbus_shim_get_task_pid (iface), FALSE, 0,
                                            NULL);
      break;
    case SHIMWATCH_EVENT_TASK_PAUSED:
      shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_PAUSED);
      break;
    case SHIMWATCH_EVENT_TASK_RESUMED:
      shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_RESUMED);
      break;
    case SHIMWATCH_EVENT_TASK_DELETE:       /* we emit our own TaskDelete, exactly once */
    case SHIMWATCH_EVENT_TASK_EXEC_ADDED:
    case SHIMWATCH_EVENT_TASK_EXEC_STARTED:
    case SHIMWATCH_EVENT_OTHER:
    default:
      g_debug ("%s/%s: event %s not forwarded", self->namespace_, self->id, event->topic);
      break;
    }
}

static void
shimwatch_shim_replay_early_events (ShimwatchShim *self)
{
  g_autoptr(GPtrArray) early = g_steal_pointer (&self->early_events);

  self->early_events = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_event_free);
  for (guint i = 0; i < early->len; i++)
    shimwatch_shim_handle_event (self, g_ptr_array_index (early, i));
}

void
shimwatch_shim_set_exported (ShimwatchShim *self)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  self->exported = TRUE;
  if (!shimwatch_shim_is_loading (self))
    shimwatch_shim_replay_early_events (self);
}

void
shimwatch_shim_make_persistent (ShimwatchShim *self)
{
  guint32 pid;

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  pid = shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self));
  self->lifecycle.persistent = TRUE;
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_task_lifecycle_add_history (&self->lifecycle, "create", pid, FALSE, 0, NULL);
  if (shimwatch_dbus_shim_get_started_at (SHIMWATCH_DBUS_SHIM (self)) != 0)
    shimwatch_task_lifecycle_add_history (&self->lifecycle, "start", pid, FALSE, 0, NULL);
}

/* -- the shim's connection ---------------------------------------------------------- */

/* no keepalive in ttrpc: a hung shim is only seen by asking it (the health scheduler
 * does, for every shim, and tells when the answer changes) */
static void
health_changed_cb (gboolean responsive,
                   gpointer user_data)
{
  ShimwatchShim *self = user_data;
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  ShimwatchMetrics *metrics = shimwatch_publisher_get_metrics (self->services.publisher);

  if (responsive == shimwatch_dbus_shim_get_responsive (iface))
    return;
  shimwatch_dbus_shim_set_responsive (iface, responsive);
  if (responsive)
    shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "responsive"), "shim answers again");
  else
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "unresponsive"),
                        "shim does not answer within %u ms; Reap can clean it up",
                        SHIMWATCH_HEALTH_TIMEOUT_MS);
  if (!responsive && metrics != NULL)
    shimwatch_metrics_count_unresponsive (metrics);
}

static void
connection_closed_cb (ShimwatchTtrpc *ttrpc,
                      GError         *reason,
                      gpointer        user_data)
{
  shimwatch_shim_on_disconnected (user_data, reason->message);
}

void
shimwatch_shim_attach (ShimwatchShim       *self,
                       ShimwatchShimHandle *handle)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  ShimwatchTtrpc *ttrpc;

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));
  g_return_if_fail (self->handle == NULL);

  self->handle = handle;
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_ATTACHED);
  shimwatch_dbus_shim_set_address (iface, handle->address);
  shimwatch_dbus_shim_set_shim_pid (iface, handle->shim_pid);
  shimwatch_dbus_shim_set_responsive (iface, TRUE);
  ttrpc = shimwatch_task_client_get_ttrpc (handle->client);
  self->closed_id = g_signal_connect (ttrpc, "closed", G_CALLBACK (connection_closed_cb), self);
  /* its hang-up is the shim's death: told before whatever else the same death makes ready
   * (the shim's connection to the events socket, its pidfd, task output) */
  shimwatch_ttrpc_set_priority (ttrpc, G_PRIORITY_HIGH);
  /* the shim's pidfd (the start time read after it, as in shimwatch_shim_is_shim_process())
   * and its health */
  if (handle->shim_pid > 0)
    self->shim_start_time = shimwatch_process_start_time (handle->shim_pid);
  shimwatch_shim_watch_start (&self->watch, handle->client, handle->shim_pid,
                              self->services.config->health_interval_ms > 0
                                ? self->services.health : NULL,
                              health_changed_cb, self);
  if (shimwatch_ttrpc_is_closed (ttrpc))
    {
      g_autoptr(GError) error = g_error_new_literal (SHIMWATCH_TTRPC_ERROR,
                                                     SHIMWATCH_TTRPC_ERROR_CLOSED,
                                                     "closed before it was watched");

      connection_closed_cb (ttrpc, error, self);
    }
}

/* -- taking a task over again after a restart of the service ------------------------- */

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

  /* until its shim answers again: what runs under the recorded pid at its first event */
  self->shim_start_time = SHIM_START_TIME_UNREAD;
  self->task_start_time = record->task_start_time;
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
                                     state.exited_at != 0 ? state.exited_at : g_get_real_time (),
                                     NULL);
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
