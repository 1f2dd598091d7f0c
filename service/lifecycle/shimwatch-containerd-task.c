/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchContainerd"

#include "config.h"

#include "shimwatch-containerd-task.h"

#include <errno.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shimwatch-bundle.h"
#include "shimwatch-crash-point.h"
#include "shimwatch-error.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-records.h"
#include "shimwatch-task-lifecycle.h"
#include "shimwatch-task-object.h"
#include "shimwatch-task-stats.h"

/* how often containerd's socket is asked whether anyone answers while a dead shim's
 * bundle waits for containerd's cleanup */
#define CONTAINERD_PROBE_MS 1000

struct _ShimwatchContainerdTask
{
  ShimwatchDbusShimSkeleton     parent_instance;

  const ShimwatchContainerdEnv *env;
  char                         *namespace_;
  char                         *id;
  char                         *path;
  char                         *bundle;
  char                         *shim_binary;   /* as the bundle names it, for the record */
  ShimwatchContainerdConnection *connection;
  gboolean                      detached;

  guint64                       task_start_time;
  int                           task_pidfd;
  guint                         task_pidfd_source;
  ShimwatchTaskCgroup          *cgroup;        /* the task's, read for GetStats */

  /* Status, the signals, the exit and the record, as for the service's own tasks. The
   * machine's link is the shim's: GONE once it died. Containerd's delete (its shim
   * exited, the bundle goes) is DELETED, its cleanup after a dead shim or ours is
   * CLEANUP_STARTED, TaskDelete is FINISHED. */
  ShimwatchTaskLifecycle lifecycle;
  gboolean               bundle_gone;
  gboolean               took_over;            /* the cleanup was ours (a takeover) */
  gboolean               cleanup_failed;
  gint64                        died_at;       /* monotonic */
  guint                         probe_source;
  GPtrArray                    *reaps;         /* GDBusMethodInvocation */
};

enum {
  SIGNAL_DISCONNECTED,
  SIGNAL_FINISHED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

static void shimwatch_containerd_task_iface_init (ShimwatchDbusShimIface *iface);

G_DEFINE_TYPE_WITH_CODE (ShimwatchContainerdTask, shimwatch_containerd_task,
                         SHIMWATCH_DBUS_TYPE_SHIM_SKELETON,
                         G_IMPLEMENT_INTERFACE (SHIMWATCH_DBUS_TYPE_SHIM,
                                                shimwatch_containerd_task_iface_init))

static ShimwatchDbusManager *
manager (ShimwatchContainerdTask *self)
{
  return self->env->manager;
}

/* -- the lifecycle, as the machine knows it ---------------------------------------- */

static gboolean
has_sent (ShimwatchContainerdTask *self,
          ShimwatchLifecycleSignal signal)
{
  return shimwatch_task_lifecycle_has_sent (&self->lifecycle, signal);
}

/* TaskDelete went out */
static gboolean
finished (ShimwatchContainerdTask *self)
{
  return has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE);
}

/* the shim died (this run saw it: a recorded death is seen again) */
static gboolean
shim_died (ShimwatchContainerdTask *self)
{
  return self->lifecycle.machine.link == SHIMWATCH_SHIM_LINK_GONE;
}

/* containerd deleted the task: its shim exited without dying */
static gboolean
shim_exited (ShimwatchContainerdTask *self)
{
  return shimwatch_task_lifecycle_is_deleted (&self->lifecycle);
}

/* ours: containerd did not clean up after the dead shim */
static gboolean
takeover_started (ShimwatchContainerdTask *self)
{
  return self->lifecycle.machine.state == SHIMWATCH_SHIM_STATE_CLEANING &&
         !self->lifecycle.machine.restored;
}

static void
transition (ShimwatchContainerdTask *self,
            ShimwatchShimInput       input)
{
  shimwatch_task_lifecycle_transition (&self->lifecycle, input);
}

/* the record's fields only the companion's task knows */
static void
fill_record (gpointer         owner,
             ShimwatchRecord *record)
{
  ShimwatchContainerdTask *self = owner;

  record->runtime = (char *) shimwatch_dbus_shim_get_runtime (SHIMWATCH_DBUS_SHIM (self));
  record->shim_binary = self->shim_binary;
  record->task_dir = self->bundle;
  record->task_start_time = self->task_start_time;
}

static const ShimwatchTaskLifecycleOwner lifecycle_owner = {
  .fill_record = fill_record,
};

/* TaskExit, once (reason NULL: from the exit status); the task's pidfd has told all */
static void
report_exit (ShimwatchContainerdTask *self,
             guint32                  pid,
             guint32                  exit_status,
             gint64                   exited_at,
             const char              *reason)
{
  if (shimwatch_task_lifecycle_emit_exit (&self->lifecycle, pid, exit_status, exited_at, reason))
    g_clear_handle_id (&self->task_pidfd_source, g_source_remove);
}

static void
complete_reaps (ShimwatchContainerdTask *self)
{
  g_autoptr(GPtrArray) reaps = g_steal_pointer (&self->reaps);

  self->reaps = g_ptr_array_new ();
  for (guint i = 0; reaps != NULL && i < reaps->len; i++)
    shimwatch_dbus_manager_complete_reap (manager (self), g_ptr_array_index (reaps, i),
                                          self->lifecycle.exit.exit_status);
}

static void
remove_dead_socket (ShimwatchContainerdTask *self)
{
  const char *socket_path;

  if (self->connection == NULL)
    return;
  socket_path = shimwatch_containerd_connection_get_socket_path (self->connection);
  /* containerd leaves a dead shim's socket file behind; nothing may answer on it, and no
   * other task may still use the shim */
  if (socket_path != NULL && shim_died (self) &&
      shimwatch_containerd_connection_get_n_tasks (self->connection) <= 1 &&
      !shimwatch_containerd_socket_answers (socket_path) && g_unlink (socket_path) == 0)
    shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_CONTAINERD_EVENT (self, "cleaned"),
                        "removed the dead shim's socket %s",
                        socket_path);
}

/* containerd's delete, containerd's cleanup after a dead shim, or ours, is over: the
 * machine goes where FINISHED ends it */
static void
end_states (ShimwatchContainerdTask *self)
{
  ShimwatchShimMachine *machine = &self->lifecycle.machine;

  /* a recorded death (the exit known already): this run's first */
  if (machine->restored)
    shimwatch_task_lifecycle_emit_disconnected (
      &self->lifecycle, shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self)), NULL,
      TRUE);
  switch (machine->state)
    {
    case SHIMWATCH_SHIM_STATE_DISCONNECTED:
      transition (self, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED);
      break;
    case SHIMWATCH_SHIM_STATE_CLEANING:
    case SHIMWATCH_SHIM_STATE_TEARDOWN:
      break;
    case SHIMWATCH_SHIM_STATE_DELETED:
      transition (self, SHIMWATCH_SHIM_INPUT_SHIM_GONE);
      break;
    default:
      transition (self, SHIMWATCH_SHIM_INPUT_DELETED);
      transition (self, SHIMWATCH_SHIM_INPUT_SHIM_GONE);
      break;
    }
}

/* TaskDelete exactly once, then the companion drops the object */
static void
finish (ShimwatchContainerdTask *self)
{
  g_autoptr(ShimwatchContainerdTask) keep G_GNUC_UNUSED = g_object_ref (self);

  if (finished (self))
    return;
  /* never a TaskDelete without its TaskExit */
  if (!has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT))
    {
      guint32 pid = shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self));

      if (shim_died (self) || has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED))
        report_exit (self, pid, 128 + SIGKILL, 0, "shim-died");
      else
        report_exit (self, pid, 255, 0, "unknown");
    }
  g_clear_handle_id (&self->probe_source, g_source_remove);
  g_clear_handle_id (&self->task_pidfd_source, g_source_remove);
  end_states (self);
  shimwatch_task_lifecycle_emit_delete (&self->lifecycle);
  /* a bundle left behind (a failed takeover) keeps its record until it is gone, so that
   * a restarted service does not report the task again */
  if (self->bundle_gone)
    shimwatch_task_lifecycle_forget (&self->lifecycle);
  remove_dead_socket (self);
  complete_reaps (self);
  g_signal_emit (self, signals[SIGNAL_FINISHED], 0, self->took_over, self->cleanup_failed);
}

/* -- a dead shim: containerd's job first, ours only if it does not do it ------------- */

static void
takeover_cb (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  g_autoptr(ShimwatchContainerdTask) self = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome =
    shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);

  if (self->detached)
    return;
  self->took_over = TRUE;
  if (outcome->delete_ok)
    {
      shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_CONTAINERD_EVENT (self, "cleaned"),
                          "took over containerd's cleanup: shim delete reported pid %u, "
                          "status %u%s%s%s",
                          outcome->deleted.pid, outcome->deleted.exit_status,
                          outcome->removed ? "; bundle and work directory removed" : "; ",
                          outcome->removed ? "" : "bundle not removed: ",
                          outcome->removed ? "" : outcome->remove_error);
      report_exit (self, outcome->deleted.pid != 0 ? outcome->deleted.pid :
                   shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self)),
                   outcome->deleted.exit_status,
                   outcome->deleted.exited_at, "shim-died");
      self->cleanup_failed = !outcome->removed;
      self->bundle_gone = outcome->removed;
    }
  else
    {
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_CONTAINERD_EVENT (self, "cleaned"),
                          "took over containerd's cleanup, but shim delete failed: %s; the "
                          "bundle is left for containerd", outcome->delete_error);
      report_exit (self, shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self)), 255, 0,
                   "shim-died");
      self->cleanup_failed = TRUE;
    }
  finish (self);
}

static void
start_takeover (ShimwatchContainerdTask *self,
                const char              *why)
{
  g_autoptr(ShimwatchCleanupRequest) request = NULL;
  g_autoptr(GError) error = NULL;

  if (takeover_started (self) || finished (self) || self->bundle_gone)
    return;
  g_clear_handle_id (&self->probe_source, g_source_remove);
  transition (self, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED);
  request = shimwatch_cleanup_request_new ();
  request->containerd_bundle = TRUE;
  request->namespace_ = g_strdup (self->namespace_);
  request->id = g_strdup (self->id);
  request->task_dir = g_strdup (self->bundle);
  request->shim_binary = shimwatch_bundle_shim_binary (self->bundle, self->env->runtime_dirs,
                                                       &error);
  if (request->shim_binary == NULL)
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_CONTAINERD_EVENT (self, "cleaned"),
                        "no shim delete: %s", error->message);
  if (self->connection != NULL &&
      shimwatch_containerd_connection_get_socket_path (self->connection) != NULL)
    request->socket_path =
      g_strdup (shimwatch_containerd_connection_get_socket_path (self->connection));
  request->timeout_ms = self->env->delete_timeout_ms;
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_CONTAINERD_EVENT (self, "reap"),
                      "taking over containerd's cleanup: %s", why);
  shimwatch_cleanup_run_async (self->env->cleanup, g_steal_pointer (&request), NULL, NULL,
                               takeover_cb, g_object_ref (self));
}

static gboolean
bundle_exists (ShimwatchContainerdTask *self)
{
  struct stat st;

  return lstat (self->bundle, &st) == 0;
}

static gboolean
containerd_answers (ShimwatchContainerdTask *self)
{
  return shimwatch_containerd_socket_answers (self->env->containerd_socket);
}

/* while containerd is expected to clean up: it must answer, and be done by its deadline */
static gboolean
probe_cb (gpointer user_data)
{
  ShimwatchContainerdTask *self = user_data;
  gint64 waited_ms = (g_get_monotonic_time () - self->died_at) / 1000;

  if (self->bundle_gone || !bundle_exists (self))
    {
      self->probe_source = 0;
      return G_SOURCE_REMOVE;   /* bundle-removed reports it */
    }
  if (!containerd_answers (self))
    {
      self->probe_source = 0;
      start_takeover (self, "containerd does not answer on its socket");
      return G_SOURCE_REMOVE;
    }
  if (waited_ms >= (gint64) self->env->cleanup_timeout_ms + self->env->grace_ms)
    {
      g_autofree char *why =
        g_strdup_printf ("the bundle is still there %u ms after the shim died (containerd's "
                         "cleanup timeout %u ms + Grace %u ms)", (guint) waited_ms,
                         self->env->cleanup_timeout_ms, self->env->grace_ms);

      self->probe_source = 0;
      start_takeover (self, why);
      return G_SOURCE_REMOVE;
    }
  return G_SOURCE_CONTINUE;
}

static void
watch_cleanup (ShimwatchContainerdTask *self)
{
  guint deadline_ms = self->env->cleanup_timeout_ms + self->env->grace_ms;

  if (self->probe_source != 0 || takeover_started (self) || finished (self))
    return;
  self->died_at = g_get_monotonic_time ();
  if (!containerd_answers (self))
    {
      start_takeover (self, "containerd does not answer on its socket");
      return;
    }
  self->probe_source = g_timeout_add (MIN (CONTAINERD_PROBE_MS, MAX (deadline_ms, 1)), probe_cb,
                                      self);
}

/* the task's init died: with a dead shim that is containerd's `shim delete` at work */
static gboolean
task_pidfd_cb (int          fd,
               GIOCondition condition,
               gpointer     user_data)
{
  ShimwatchContainerdTask *self = user_data;

  self->task_pidfd_source = 0;
  if (shim_died (self))
    report_exit (self, shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self)),
                 128 + SIGKILL, 0, "shim-died");
  return G_SOURCE_REMOVE;
}

/* -- what the connection and the watcher report --------------------------------------- */

void
shimwatch_containerd_task_attach (ShimwatchContainerdTask       *self,
                                  ShimwatchContainerdConnection *connection)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  g_set_object (&self->connection, connection);
  shimwatch_dbus_shim_set_address (SHIMWATCH_DBUS_SHIM (self),
                                   shimwatch_containerd_connection_get_address (connection));
}

void
shimwatch_containerd_task_connected (ShimwatchContainerdTask *self,
                                     guint32                  shim_pid,
                                     guint32                  task_pid)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  guint32 recorded_pid = shimwatch_dbus_shim_get_task_pid (iface);
  guint64 start_time;

  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  shimwatch_dbus_shim_set_shim_pid (iface, shim_pid);
  if (task_pid > 0)
    {
      start_time = shimwatch_process_start_time (task_pid);
      if (recorded_pid != task_pid || start_time != self->task_start_time)
        {
          shimwatch_dbus_shim_set_task_pid (iface, task_pid);
          self->task_start_time = start_time;
        }
      if (self->task_pidfd < 0)
        self->task_pidfd = pidfd_open ((pid_t) task_pid, 0);
      if (self->cgroup == NULL)
        {
          self->cgroup = shimwatch_task_cgroup_new_for_pid (task_pid, NULL);
          if (self->cgroup != NULL)
            shimwatch_dbus_shim_set_cgroup_path (iface,
                                                 shimwatch_task_cgroup_get_path (self->cgroup));
        }
    }
  if (self->lifecycle.machine.link != SHIMWATCH_SHIM_LINK_CONNECTED)
    transition (self, SHIMWATCH_SHIM_INPUT_ATTACHED);
  if (!has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) &&
      !has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED))
    transition (self, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING);
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_CONTAINERD_EVENT (self, "readopt"),
                      "watching containerd's task (shim %u, task %u)",
                      shim_pid, task_pid);
}

void
shimwatch_containerd_task_exited (ShimwatchContainerdTask *self,
                                  guint32                  pid,
                                  guint32                  exit_status,
                                  gint64                   exited_at)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  /* Wait answers with the status only: the pid is the task's init */
  if (pid == 0)
    pid = shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self));
  report_exit (self, pid, exit_status, exited_at, NULL);
}

void
shimwatch_containerd_task_shim_died (ShimwatchContainerdTask *self,
                                     guint32                  shim_pid)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  if (shim_died (self) || finished (self))
    return;
  transition (self, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST);
  if (shim_pid != 0)
    shimwatch_dbus_shim_set_shim_pid (SHIMWATCH_DBUS_SHIM (self), shim_pid);
  shim_pid = shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self));
  if (shimwatch_task_lifecycle_emit_disconnected (&self->lifecycle, shim_pid, NULL, TRUE))
    {
      shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_CONTAINERD_EVENT (self, "disconnected"),
                          "shim %u died; containerd is expected to clean up", shim_pid);
      g_signal_emit (self, signals[SIGNAL_DISCONNECTED], 0);
    }
  if (self->bundle_gone || !bundle_exists (self))
    {
      self->bundle_gone = TRUE;
      shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_CONTAINERD_EVENT (self, "cleaned"),
                          "containerd cleaned up after the dead shim; no delete of ours ran");
      finish (self);
      return;
    }
  if (!has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) && self->task_pidfd >= 0)
    {
      struct pollfd pfd = { .fd = self->task_pidfd, .events = POLLIN };

      if (poll (&pfd, 1, 0) == 1)
        task_pidfd_cb (self->task_pidfd, G_IO_IN, self);
      else
        self->task_pidfd_source = g_unix_fd_add (self->task_pidfd, G_IO_IN, task_pidfd_cb, self);
    }
  watch_cleanup (self);
}

void
shimwatch_containerd_task_shim_exited (ShimwatchContainerdTask *self)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  /* known dead (an earlier run of the service saw it die): its socket file is gone now,
   * but what is left is still a dead shim's */
  if (has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED))
    {
      shimwatch_containerd_task_shim_died (self, 0);
      return;
    }
  if (!shim_exited (self))
    transition (self, SHIMWATCH_SHIM_INPUT_DELETED);
  /* a normal delete: the bundle goes next (TaskDelete then); nothing of ours runs */
  if (self->bundle_gone || !bundle_exists (self))
    {
      self->bundle_gone = TRUE;
      finish (self);
    }
}

void
shimwatch_containerd_task_bundle_removed (ShimwatchContainerdTask *self)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  if (self->bundle_gone && finished (self))
    return;
  if (finished (self))
    {
      /* the bundle a failed takeover left went after all: so does the record */
      self->bundle_gone = TRUE;
      shimwatch_task_lifecycle_forget (&self->lifecycle);
      return;
    }
  self->bundle_gone = TRUE;
  if (takeover_started (self))
    return;   /* ours: takeover_cb reports */
  /* a busy main loop may see containerd's cleanup (the bundle gone) before the EOF of the
   * shim whose death caused it: a shim gone while its task had not exited died */
  if (!shim_died (self) && !shim_exited (self) &&
      !has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) && self->connection != NULL &&
      shimwatch_containerd_connection_shim_is_gone (self->connection))
    {
      shimwatch_containerd_task_shim_died (self, 0);
      return;
    }
  if (shim_died (self))
    shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_CONTAINERD_EVENT (self, "cleaned"),
                        "containerd cleaned up after the dead shim; no delete of ours ran");
  finish (self);
}

void
shimwatch_containerd_task_reap (ShimwatchContainerdTask *self,
                                GDBusMethodInvocation   *invocation)
{
  g_autoptr(GError) error = NULL;

  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  if (finished (self))
    {
      shimwatch_dbus_manager_complete_reap (manager (self), invocation,
                                            self->lifecycle.exit.exit_status);
      return;
    }
  g_ptr_array_add (self->reaps, invocation);
  if (shim_died (self) || shim_exited (self))
    return;   /* the cleanup is under way: the reply comes with TaskDelete */
  if (self->connection == NULL ||
      !shimwatch_containerd_connection_kill_shim (self->connection, &error))
    {
      g_ptr_array_remove (self->reaps, invocation);
      if (error == NULL)
        g_set_error (&error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                     "the task's shim was not reached yet");
      g_dbus_method_invocation_return_gerror (invocation, error);
      return;
    }
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_CONTAINERD_EVENT (self, "reap"),
                      "Reap: killed the shim; containerd is left to clean up");
}

void
shimwatch_containerd_task_detach (ShimwatchContainerdTask *self)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self));

  self->detached = TRUE;
  transition (self, SHIMWATCH_SHIM_INPUT_DETACHED);
  /* its record stays as it is, for the next start */
  self->lifecycle.persistent = FALSE;
  g_clear_handle_id (&self->probe_source, g_source_remove);
  g_clear_handle_id (&self->task_pidfd_source, g_source_remove);
}

/* -- read-only D-Bus object ------------------------------------------------------------ */

static gboolean
refuse_owned (ShimwatchDbusShim     *iface,
              GDBusMethodInvocation *invocation)
{
  g_dbus_method_invocation_return_error_literal (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_BAD_STATE,
                                                 "owned by containerd");
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static gboolean
handle_kill (ShimwatchDbusShim     *iface,
             GDBusMethodInvocation *invocation,
             guint                  signal_number,
             gboolean               all)
{
  return refuse_owned (iface, invocation);
}

static gboolean
handle_stop (ShimwatchDbusShim     *iface,
             GDBusMethodInvocation *invocation,
             guint                  timeout)
{
  return refuse_owned (iface, invocation);
}

static gboolean
handle_set_labels (ShimwatchDbusShim     *iface,
                   GDBusMethodInvocation *invocation,
                   GVariant              *labels)
{
  return refuse_owned (iface, invocation);
}

static gboolean
handle_read_log (ShimwatchDbusShim     *iface,
                 GDBusMethodInvocation *invocation,
                 GVariant              *options)
{
  /* the task's output goes to containerd's own FIFO, which is never opened here */
  g_dbus_method_invocation_return_error_literal (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_NOT_SUPPORTED,
                                                 "a containerd task's output is containerd's");
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static gboolean
handle_open_log (ShimwatchDbusShim     *iface,
                 GDBusMethodInvocation *invocation,
                 GUnixFDList           *fd_list,
                 GVariant              *options)
{
  return handle_read_log (iface, invocation, options);
}

/* the task's cgroup is only read, as for the service's own tasks */
static gboolean
handle_get_stats (ShimwatchDbusShim     *iface,
                  GDBusMethodInvocation *invocation)
{
  ShimwatchContainerdTask *self = SHIMWATCH_CONTAINERD_TASK (iface);
  g_autoptr(GError) error = NULL;
  ShimwatchTaskStats stats;

  if (self->cgroup == NULL || has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) ||
      shim_died (self) ||
      !shimwatch_task_cgroup_read_stats (self->cgroup, &stats, &error))
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "containerd task %s/%s has no processes%s%s",
                                             self->namespace_, self->id,
                                             error != NULL ? ": " : "",
                                             error != NULL ? error->message : "");
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  shimwatch_dbus_shim_complete_get_stats (iface, invocation,
                                          shimwatch_task_stats_to_variant (&stats));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
pids_cb (GObject      *source,
         GAsyncResult *result,
         gpointer      user_data)
{
  g_autoptr(GDBusMethodInvocation) invocation = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids =
    shimwatch_containerd_connection_pids_finish (SHIMWATCH_CONTAINERD_CONNECTION (source), result,
                                                 &error);

  if (pids == NULL)
    {
      if (error->domain != SHIMWATCH_ERROR)
        {
          g_autofree char *message = g_strdup (error->message);

          g_clear_error (&error);
          g_set_error (&error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED, "%s", message);
        }
      g_dbus_method_invocation_return_gerror (invocation, error);
      return;
    }
  g_dbus_method_invocation_return_value (
    invocation, g_variant_new ("(@au)", g_variant_new_fixed_array (G_VARIANT_TYPE_UINT32,
                                                                   pids->data, pids->len,
                                                                   sizeof (guint32))));
}

static gboolean
handle_list_pids (ShimwatchDbusShim     *iface,
                  GDBusMethodInvocation *invocation)
{
  ShimwatchContainerdTask *self = SHIMWATCH_CONTAINERD_TASK (iface);

  if (self->connection == NULL || shim_died (self) || shim_exited (self) ||
      has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT))
    {
      g_dbus_method_invocation_return_error_literal (invocation, SHIMWATCH_ERROR,
                                                     SHIMWATCH_ERROR_BAD_STATE,
                                                     "the task is not running");
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  shimwatch_containerd_connection_pids_async (self->connection, self->id, pids_cb,
                                              g_object_ref (invocation));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
shimwatch_containerd_task_iface_init (ShimwatchDbusShimIface *iface)
{
  iface->handle_start = (gpointer) refuse_owned;
  iface->handle_kill = handle_kill;
  iface->handle_delete = (gpointer) refuse_owned;
  iface->handle_stop = handle_stop;
  iface->handle_pause = (gpointer) refuse_owned;
  iface->handle_resume = (gpointer) refuse_owned;
  iface->handle_set_labels = handle_set_labels;
  iface->handle_read_log = handle_read_log;
  iface->handle_open_log = handle_open_log;
  iface->handle_get_stats = handle_get_stats;
  iface->handle_list_pids = handle_list_pids;
}

/* -- construction ---------------------------------------------------------------------- */

/* containerd-shim-runc-v2 → io.containerd.runc.v2 */
static char *
runtime_from_binary (const char *binary)
{
  g_autofree char *base = binary != NULL ? g_path_get_basename (binary) : NULL;
  g_auto(GStrv) parts = NULL;

  if (base == NULL || !g_str_has_prefix (base, "containerd-shim-"))
    return g_strdup ("");
  parts = g_strsplit (base + strlen ("containerd-shim-"), "-", 2);
  if (g_strv_length (parts) != 2)
    return g_strdup ("");
  return g_strdup_printf ("io.containerd.%s.%s", parts[0], parts[1]);
}

static void
describe_from_bundle (ShimwatchContainerdTask *self)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  g_autofree char *binary_file = g_build_filename (self->bundle, "shim-binary-path", NULL);
  g_autofree char *config_file = g_build_filename (self->bundle, "config.json", NULL);
  g_autofree char *pid_file = g_build_filename (self->bundle, "init.pid", NULL);
  g_autofree char *binary = NULL;
  g_autofree char *runtime = NULL;
  g_autofree char *config = NULL;
  gsize length;
  struct stat st;

  if (g_file_get_contents (binary_file, &binary, NULL, NULL))
    {
      g_strstrip (binary);
      g_free (self->shim_binary);
      self->shim_binary = g_strdup (binary);
    }
  runtime = runtime_from_binary (self->shim_binary);
  shimwatch_dbus_shim_set_runtime (iface, runtime);
  if (g_file_get_contents (config_file, &config, &length, NULL))
    {
      g_auto(GStrv) command = shimwatch_wire_oci_process_args (config, length, NULL);

      if (command != NULL)
        shimwatch_dbus_shim_set_command (iface, (const char * const *) command);
    }
  if (stat (self->bundle, &st) == 0 && shimwatch_dbus_shim_get_created_at (iface) == 0)
    shimwatch_dbus_shim_set_created_at (iface, (guint64) st.st_mtim.tv_sec * G_USEC_PER_SEC +
                                        st.st_mtim.tv_nsec / 1000);
  if (stat (pid_file, &st) == 0 && shimwatch_dbus_shim_get_started_at (iface) == 0)
    shimwatch_dbus_shim_set_started_at (iface, (guint64) st.st_mtim.tv_sec * G_USEC_PER_SEC +
                                        st.st_mtim.tv_nsec / 1000);
}

static ShimwatchContainerdTask *
task_new (const ShimwatchContainerdEnv *env,
          const char                   *namespace_,
          const char                   *id,
          const char                   *bundle)
{
  ShimwatchContainerdTask *self = g_object_new (SHIMWATCH_TYPE_CONTAINERD_TASK, NULL);
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  const char *no_labels[] = { NULL };

  self->env = env;
  self->namespace_ = g_strdup (namespace_);
  self->id = g_strdup (id);
  self->bundle = g_strdup (bundle);
  self->path = shimwatch_task_object_path (SHIMWATCH_DBUS_CONTAINERD_PATH, namespace_, id);
  shimwatch_dbus_shim_set_namespace (iface, namespace_);
  shimwatch_dbus_shim_set_id (iface, id);
  shimwatch_dbus_shim_set_bundle (iface, bundle);
  shimwatch_dbus_shim_set_bundle_source (iface, "");
  shimwatch_dbus_shim_set_owner (iface, SHIMWATCH_OWNER_CONTAINERD);
  shimwatch_dbus_shim_set_exit_reason (iface, "");
  shimwatch_dbus_shim_set_cgroup_path (iface, "");
  shimwatch_dbus_shim_set_address (iface, "");
  shimwatch_dbus_shim_set_command (iface, no_labels);
  shimwatch_dbus_shim_set_labels (iface, g_variant_new_array (G_VARIANT_TYPE ("{ss}"), NULL, 0));
  shimwatch_task_lifecycle_init (&self->lifecycle, &(ShimwatchTaskLifecycleSetup) {
    .iface = iface,
    .path = self->path,
    .namespace_ = self->namespace_,
    .id = self->id,
    .publisher = env->publisher,
    .committer = env->committer,
    .history = env->history,
    .log_domain = G_LOG_DOMAIN,
    .log_prefix = "containerd ",
    .owner = &lifecycle_owner,
    .owner_data = self,
  });
  /* a record follows every change from the start */
  self->lifecycle.persistent = TRUE;
  return self;
}

ShimwatchContainerdTask *
shimwatch_containerd_task_new (const ShimwatchContainerdEnv *env,
                               const char                   *namespace_,
                               const char                   *id,
                               const char                   *bundle)
{
  ShimwatchContainerdTask *self;

  g_return_val_if_fail (env != NULL, NULL);

  self = task_new (env, namespace_, id, bundle);
  describe_from_bundle (self);
  return self;
}

ShimwatchContainerdTask *
shimwatch_containerd_task_new_from_record (const ShimwatchContainerdEnv *env,
                                           const ShimwatchRecord        *record)
{
  ShimwatchContainerdTask *self;
  ShimwatchDbusShim *iface;

  g_return_val_if_fail (env != NULL, NULL);

  self = task_new (env, record->namespace_, record->id, record->task_dir);
  iface = SHIMWATCH_DBUS_SHIM (self);
  self->shim_binary = g_strdup (record->shim_binary);
  shimwatch_dbus_shim_set_runtime (iface, record->runtime);
  self->task_start_time = record->task_start_time;
  /* Status, the signals that went out and the exit; a dead shim stays dead, but what
   * happens to its task now is still ours to report: this run sees it die again */
  shimwatch_task_lifecycle_restore (&self->lifecycle, record);
  if (record->task_pid > 0 && !record->exit_emitted && record->task_start_time != 0 &&
      shimwatch_process_start_time (record->task_pid) == record->task_start_time)
    self->task_pidfd = pidfd_open ((pid_t) record->task_pid, 0);
  describe_from_bundle (self);
  return self;
}

/* what callers of the companion know a task by: its object path, the Namespace and Id
 * it shows on the bus, and its bundle */
const char *
shimwatch_containerd_task_get_path (ShimwatchContainerdTask *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self), NULL);
  return self->lifecycle.setup.path;
}

const char *
shimwatch_containerd_task_get_namespace (ShimwatchContainerdTask *self)
{
  return shimwatch_dbus_shim_get_namespace (SHIMWATCH_DBUS_SHIM (self));
}

const char *
shimwatch_containerd_task_get_id (ShimwatchContainerdTask *self)
{
  return shimwatch_dbus_shim_get_id (SHIMWATCH_DBUS_SHIM (self));
}

const char *
shimwatch_containerd_task_get_bundle (ShimwatchContainerdTask *self)
{
  return shimwatch_dbus_shim_get_bundle (SHIMWATCH_DBUS_SHIM (self));
}

guint32
shimwatch_containerd_task_get_exit_status (ShimwatchContainerdTask *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self), 0);
  return self->lifecycle.exit.exit_status;
}

gboolean
shimwatch_containerd_task_is_finished (ShimwatchContainerdTask *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_TASK (self), TRUE);
  return finished (self);
}

static void
shimwatch_containerd_task_dispose (GObject *object)
{
  ShimwatchContainerdTask *self = SHIMWATCH_CONTAINERD_TASK (object);

  g_clear_handle_id (&self->probe_source, g_source_remove);
  g_clear_handle_id (&self->task_pidfd_source, g_source_remove);
  g_clear_object (&self->connection);

  G_OBJECT_CLASS (shimwatch_containerd_task_parent_class)->dispose (object);
}

static void
shimwatch_containerd_task_finalize (GObject *object)
{
  ShimwatchContainerdTask *self = SHIMWATCH_CONTAINERD_TASK (object);

  if (self->task_pidfd >= 0)
    close (self->task_pidfd);
  g_clear_pointer (&self->cgroup, shimwatch_task_cgroup_free);
  g_ptr_array_unref (self->reaps);
  g_free (self->namespace_);
  g_free (self->id);
  g_free (self->path);
  g_free (self->bundle);
  g_free (self->shim_binary);

  G_OBJECT_CLASS (shimwatch_containerd_task_parent_class)->finalize (object);
}

static void
shimwatch_containerd_task_class_init (ShimwatchContainerdTaskClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_containerd_task_dispose;
  object_class->finalize = shimwatch_containerd_task_finalize;

  /* ShimDisconnected went out */
  signals[SIGNAL_DISCONNECTED] =
    g_signal_new ("disconnected", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 0);
  /* (took over, cleanup failed): TaskDelete went out */
  signals[SIGNAL_FINISHED] =
    g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 2, G_TYPE_BOOLEAN, G_TYPE_BOOLEAN);
}

static void
shimwatch_containerd_task_init (ShimwatchContainerdTask *self)
{
  self->task_pidfd = -1;
  self->reaps = g_ptr_array_new ();
}
