/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchShim"

#include "config.h"

#include <errno.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <glib-unix.h>

#include "shimwatch-crash-point.h"
#include "shimwatch-error.h"
#include "shimwatch-records.h"
#include "shimwatch-manager.h"
#include "shimwatch-names.h"
#include "shimwatch-shim.h"
#include "shimwatch-task-log.h"
#include "shimwatch-task-stats.h"

#define RPC_TIMEOUT_MS      10000
#define STOP_DEFAULT_S      10
#define STOP_MAX_S          3600
/* after Stop's SIGKILL: a task that still has not exited is reported, not waited for */
#define STOP_KILL_GRACE_MS  30000
#define LABELS_MAX          256
#define LABEL_MAX_BYTES     4096
#define SHUTDOWN_TIMEOUT_MS 3000
#define HEALTH_TIMEOUT_MS   5000

struct _ShimwatchShim
{
  ShimwatchDbusShimSkeleton parent_instance;

  ShimwatchManager    *manager;        /* not owned: the manager outlives its shims */
  char                *namespace_;
  char                *id;
  char                *path;
  char                *runtime;
  char                *shim_binary;
  char                *task_dir;
  char                *cgroup_path;      /* NULL: unknown (a record from before) */
  guint64              task_start_time;
  guint64              shim_start_time;  /* tells the shim from a later process with its pid */

  ShimwatchShimHandle *handle;
  gulong               closed_id;
  int                  task_pidfd;
  int                  shim_pidfd;       /* sees the shim die even if a child keeps its socket */
  guint                shim_pidfd_watch;
  guint                health_timer;
  gboolean             health_pending;

  gboolean             exported;
  gboolean             persistent;       /* a record exists and follows every change */
  gboolean             loading;          /* from a record, its shim not reached yet */
  GPtrArray           *waiting_calls;    /* AuthData: authorized while loading */
  gboolean             kill_when_reached; /* Reap while loading */
  gboolean             disconnected;     /* ShimDisconnected went out (maybe before a restart) */
  GPtrArray           *early_events;   /* arrived before export, or while loading */
  gboolean             connected;
  gboolean             detached;
  gboolean             deleted;        /* a normal Delete completed: no crash semantics */
  gboolean             cleaning;
  gboolean             exit_emitted;
  gboolean             delete_emitted;
  ShimwatchExit        exit;           /* the real or synthesized exit, once known */
  GDBusMethodInvocation *delete_invocation;
  ShimwatchTaskLog     *task_log;       /* NULL: the service does not keep its output */

  gboolean             oom;            /* the shim reported an OOM kill */
  ShimwatchTaskCgroup *cgroup;         /* the task's cgroup, once it has a process */
  GPtrArray           *stop_waiters;   /* Stop invocations waiting for the exit */
  guint                stop_timer;     /* SIGKILL when it fires, then give up */
  gboolean             stop_killed;
};

enum {
  SIGNAL_DISCONNECTED,
  SIGNAL_FINISHED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

static void shimwatch_shim_iface_init (ShimwatchDbusShimIface *iface);

G_DEFINE_TYPE_WITH_CODE (ShimwatchShim, shimwatch_shim, SHIMWATCH_DBUS_TYPE_SHIM_SKELETON,
                         G_IMPLEMENT_INTERFACE (SHIMWATCH_DBUS_TYPE_SHIM, shimwatch_shim_iface_init))

static const struct {
  const char *event;
  const char *message_id;
} message_ids[] = {
  { "create", SHIMWATCH_MESSAGE_ID_CREATE },
  { "start", SHIMWATCH_MESSAGE_ID_START },
  { "exit", SHIMWATCH_MESSAGE_ID_EXIT },
  { "disconnected", SHIMWATCH_MESSAGE_ID_DISCONNECTED },
  { "cleaned", SHIMWATCH_MESSAGE_ID_CLEANED },
  { "delete", SHIMWATCH_MESSAGE_ID_DELETE },
  { "readopt", SHIMWATCH_MESSAGE_ID_READOPT },
  { "unresponsive", SHIMWATCH_MESSAGE_ID_UNRESPONSIVE },
  { "responsive", SHIMWATCH_MESSAGE_ID_RESPONSIVE },
  { "oom", SHIMWATCH_MESSAGE_ID_OOM },
  { "reap", SHIMWATCH_MESSAGE_ID_REAP },
  { "create-failed", SHIMWATCH_MESSAGE_ID_CREATE_FAILED },
  { "record", SHIMWATCH_MESSAGE_ID_RECORD },
};

static void
log_event (ShimwatchShim  *self,
           GLogLevelFlags  level,
           const char     *event,
           const char     *format,
           ...) G_GNUC_PRINTF (4, 5);

/* one structured line per lifecycle event */
static void
log_event (ShimwatchShim  *self,
           GLogLevelFlags  level,
           const char     *event,
           const char     *format,
           ...)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  g_autofree char *text = NULL;
  g_autofree char *shim_pid = g_strdup_printf ("%u", shimwatch_dbus_shim_get_shim_pid (iface));
  g_autofree char *task_pid = g_strdup_printf ("%u", shimwatch_dbus_shim_get_task_pid (iface));
  const char *message_id = NULL;
  va_list args;

  va_start (args, format);
  text = g_strdup_vprintf (format, args);
  va_end (args);
  for (guint i = 0; i < G_N_ELEMENTS (message_ids) && message_id == NULL; i++)
    if (g_str_equal (message_ids[i].event, event))
      message_id = message_ids[i].message_id;
  if (message_id == NULL)
    message_id = SHIMWATCH_MESSAGE_ID_RECORD;   /* every event is in the table; never crash */
  g_log_structured (G_LOG_DOMAIN, level,
                    "MESSAGE_ID", message_id,
                    SHIMWATCH_LOG_FIELD_NAMESPACE, self->namespace_,
                    SHIMWATCH_LOG_FIELD_TASK_ID, self->id,
                    SHIMWATCH_LOG_FIELD_SHIM_PID, shim_pid,
                    SHIMWATCH_LOG_FIELD_TASK_PID, task_pid,
                    SHIMWATCH_LOG_FIELD_EVENT, event,
                    "MESSAGE", "%s/%s: %s", self->namespace_, self->id, text);
}

static ShimwatchDbusManager *
manager_iface (ShimwatchShim *self)
{
  return SHIMWATCH_DBUS_MANAGER (self->manager);
}

static void
set_status (ShimwatchShim *self,
            const char    *status)
{
  shimwatch_dbus_shim_set_status (SHIMWATCH_DBUS_SHIM (self), status);
}

static void
fill_record (ShimwatchShim   *self,
             ShimwatchRecord *record)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  record->namespace_ = self->namespace_;
  record->id = self->id;
  record->runtime = self->runtime;
  record->shim_binary = self->shim_binary;
  record->task_dir = self->task_dir;
  record->address = (char *) shimwatch_dbus_shim_get_address (iface);
  record->shim_pid = shimwatch_dbus_shim_get_shim_pid (iface);
  record->task_pid = shimwatch_dbus_shim_get_task_pid (iface);
  record->task_start_time = self->task_start_time;
  record->created_at = (gint64) shimwatch_dbus_shim_get_created_at (iface);
  record->status = (char *) shimwatch_dbus_shim_get_status (iface);
  record->cgroup_path = self->cgroup_path;
  record->exit_known = self->exit_emitted;
  record->exit = self->exit;
  record->exit_emitted = self->exit_emitted;
  record->disconnected = self->disconnected;
  record->deleted = self->deleted;
  record->delete_emitted = self->delete_emitted;
  record->owner = (char *) shimwatch_dbus_shim_get_owner (iface);
  record->bundle_source = (char *) shimwatch_dbus_shim_get_bundle_source (iface);
  record->command = (GStrv) shimwatch_dbus_shim_get_command (iface);
  record->labels = shimwatch_dbus_shim_get_labels (iface);
  record->started_at = (gint64) shimwatch_dbus_shim_get_started_at (iface);
  record->exit_reason = (char *) shimwatch_dbus_shim_get_exit_reason (iface);
  record->oom = self->oom;
}

static void
add_history (ShimwatchShim *self,
             const char    *event,
             guint32        pid,
             gboolean       has_exit_status,
             guint32        exit_status,
             const char    *reason)
{
  ShimwatchHistoryEvent entry = {
    .event = event,
    .namespace_ = self->namespace_,
    .id = self->id,
    .pid = pid,
    .has_exit_status = has_exit_status,
    .exit_status = exit_status,
    .reason = reason,
  };

  shimwatch_history_add (shimwatch_manager_get_history (self->manager), &entry);
}

/* ExitReason of an exit the runtime reported: the shell convention of 128 + signal for a
 * process a signal killed; SIGKILL with an OOM kill in the task's cgroup is the OOM
 * killer's */
static const char *
classify_exit (ShimwatchShim *self,
               guint32        exit_status)
{
  if (exit_status == 128 + SIGKILL &&
      (self->oom || (self->cgroup != NULL && shimwatch_task_cgroup_oom_kills (self->cgroup) > 0)))
    return "oom-killed";
  if (exit_status > 128 && exit_status <= 128 + 64)
    return "signaled";
  return "exited";
}

static void
save (ShimwatchShim *self)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };

  if (!self->persistent)
    return;
  fill_record (self, &record);
  /* a record that cannot be written is logged, never fatal: supervision goes on */
  if (!shimwatch_records_write (shimwatch_manager_get_records_dir (self->manager), &record,
                                &error))
    log_event (self, G_LOG_LEVEL_WARNING, "record", "cannot write task record: %s",
               error->message);
}

/* Exactly once across restarts, even a SIGKILL of the service: the record says a signal
 * was sent if and only if it reached the bus. before_signal() writes the record with the
 * signal's flag already set but marked "not sent"; the signal ledger marks it sent in
 * the very thread that writes the signal to the bus, right before it does (see
 * shimwatch-signal-ledger.h); a restarted service takes a flag whose signal is not
 * marked sent for unset. after_signal() waits until the signal is written and tells
 * whether it went out. A record that cannot be written leaves the old one, logged. */
static gboolean
before_signal (ShimwatchShim *self,
               const char    *member,
               const char    *crash_point)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };
  ShimwatchRecordCommit *commit;

  if (!self->persistent)
    return FALSE;
  fill_record (self, &record);
  record.pending_signal = (char *) member;
  commit = shimwatch_records_prepare (shimwatch_manager_get_records_dir (self->manager),
                                      &record, &error);
  if (commit == NULL)
    {
      log_event (self, G_LOG_LEVEL_WARNING, "record", "cannot write task record: %s",
                 error->message);
      return FALSE;
    }
  shimwatch_signal_ledger_expect (shimwatch_manager_get_signal_ledger (self->manager),
                                  member, self->path, commit);
  shimwatch_crash_point (crash_point);
  return TRUE;
}

/* FALSE only if a signal whose record the ledger was to mark never went out */
static gboolean
after_signal (ShimwatchShim *self,
              const char    *member,
              gboolean       marked,
              const char    *crash_point)
{
  GDBusConnection *connection =
    g_dbus_interface_skeleton_get_connection (G_DBUS_INTERFACE_SKELETON (self->manager));
  g_autoptr(GError) error = NULL;
  gboolean sent = TRUE;

  if (connection != NULL && !g_dbus_connection_flush_sync (connection, NULL, &error))
    {
      g_debug ("flushing the bus connection: %s", error->message);
      g_clear_error (&error);
    }
  if (marked)
    sent = shimwatch_signal_ledger_settle (shimwatch_manager_get_signal_ledger (self->manager),
                                           member, self->path);
  shimwatch_crash_point (crash_point);
  return sent;
}

/* TaskExit exactly once per task */
static void complete_stops (ShimwatchShim *self);

/* TaskExit exactly once per task; reason NULL: from the exit status */
static void
emit_task_exit (ShimwatchShim *self,
                guint32        pid,
                guint32        exit_status,
                gint64         exited_at,
                const char    *reason)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  gboolean marked;

  if (self->exit_emitted)
    return;
  if (reason == NULL)
    reason = classify_exit (self, exit_status);
  self->exit_emitted = TRUE;
  self->exit.pid = pid;
  self->exit.exit_status = exit_status;
  self->exit.exited_at = exited_at;
  shimwatch_dbus_shim_set_exit_status (iface, exit_status);
  shimwatch_dbus_shim_set_exited_at (iface, (guint64) exited_at);
  shimwatch_dbus_shim_set_exit_reason (iface, reason);
  /* a client that sees TaskExit already sees the properties that go with it */
  g_dbus_interface_skeleton_flush (G_DBUS_INTERFACE_SKELETON (self));
  log_event (self, G_LOG_LEVEL_MESSAGE, "exit", "task exited: pid %u, status %u (%s)", pid,
             exit_status, reason);
  marked = before_signal (self, "TaskExit", "exit-prepared");
  shimwatch_dbus_manager_emit_task_exit (manager_iface (self), self->path, self->namespace_,
                                         self->id, self->id, pid, exit_status,
                                         (guint64) exited_at);
  after_signal (self, "TaskExit", marked, "exit-emitted");
  add_history (self, "exit", pid, TRUE, exit_status, reason);
  complete_stops (self);
}

/* TaskDelete exactly once per task, then the manager drops the object */
static void
emit_task_delete_and_finish (ShimwatchShim *self,
                             gboolean       reaped,
                             gboolean       cleanup_failed)
{
  if (!self->delete_emitted)
    {
      gboolean marked;

      self->delete_emitted = TRUE;
      log_event (self, G_LOG_LEVEL_MESSAGE, "delete", "task deleted: pid %u, status %u",
                 self->exit.pid, self->exit.exit_status);
      marked = before_signal (self, "TaskDelete", "delete-prepared");
      shimwatch_dbus_manager_emit_task_delete (manager_iface (self), self->path,
                                               self->namespace_, self->id, self->id,
                                               self->exit.pid, self->exit.exit_status,
                                               (guint64) self->exit.exited_at);
      /* a TaskDelete that never went out stays in the record for the next start to send */
      if (!after_signal (self, "TaskDelete", marked, "delete-emitted"))
        self->persistent = FALSE;
      add_history (self, "delete", self->exit.pid, TRUE, self->exit.exit_status, NULL);
    }
  /* nothing is left to do for this task: its record goes (also one whose TaskDelete went
   * out before the service died) */
  if (self->persistent)
    {
      g_autoptr(GError) error = NULL;

      if (!shimwatch_records_remove (shimwatch_manager_get_records_dir (self->manager),
                                     self->namespace_, self->id, &error))
        log_event (self, G_LOG_LEVEL_WARNING, "record", "%s", error->message);
      self->persistent = FALSE;
    }
  if (self->delete_invocation != NULL)
    shimwatch_dbus_shim_complete_delete (SHIMWATCH_DBUS_SHIM (self),
                                         g_steal_pointer (&self->delete_invocation),
                                         self->exit.exit_status, (guint64) self->exit.exited_at);
  /* the output is complete: followers get EOF, the retention period starts */
  if (self->task_log != NULL)
    shimwatch_task_log_finish (self->task_log);
  g_signal_emit (self, signals[SIGNAL_FINISHED], 0, reaped, cleanup_failed);
}

static ShimwatchCleanupRequest *
cleanup_request (ShimwatchShim *self,
                 gboolean       kill_task)
{
  ShimwatchCleanupRequest *request = shimwatch_cleanup_request_new ();
  const ShimwatchConfig *config = shimwatch_manager_get_config (self->manager);

  request->namespace_ = g_strdup (self->namespace_);
  request->id = g_strdup (self->id);
  request->task_dir = g_strdup (self->task_dir);
  request->shim_binary = g_strdup (self->shim_binary);
  request->runc_state_dir = g_build_filename (shimwatch_manager_get_runc_root (self->manager),
                                              self->namespace_, self->id, NULL);
  if (g_str_has_prefix (shimwatch_dbus_shim_get_address (SHIMWATCH_DBUS_SHIM (self)), "unix://"))
    request->socket_path = g_strdup (shimwatch_dbus_shim_get_address (SHIMWATCH_DBUS_SHIM (self)) +
                                     strlen ("unix://"));
  request->task_pid = shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self));
  request->kill_task = kill_task && self->task_pidfd >= 0;
  if (self->task_pidfd >= 0)
    request->pidfd = dup (self->task_pidfd);
  request->cgroup_path = g_strdup (self->cgroup_path);
  request->timeout_ms = config->cleanup_timeout_ms;
  return request;
}

/* -- the dead-shim path ------------------------------------------------------------------ */

static void
killed_cb (guint32  pid,
           gint64   when,
           gpointer user_data)
{
  ShimwatchShim *self = user_data;

  /* the container is really dead now: tell clients at once, delete can take its time */
  emit_task_exit (self, pid, 128 + SIGKILL, when, "shim-died");
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
  if (!self->exit_emitted)
    {
      /* runc's delete --force ended what the dead shim left running */
      if (outcome->delete_ok)
        emit_task_exit (self, outcome->deleted.pid, outcome->deleted.exit_status,
                        outcome->deleted.exited_at != 0 ? outcome->deleted.exited_at
                                                        : g_get_real_time (),
                        "shim-died");
      else
        emit_task_exit (self, shimwatch_dbus_shim_get_task_pid (iface), 255, g_get_real_time (),
                        "unknown");
    }
  log_event (self, outcome->delete_ok ? G_LOG_LEVEL_MESSAGE : G_LOG_LEVEL_WARNING, "cleaned",
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
  log_event (self, G_LOG_LEVEL_INFO, "cleaned", "shim torn down after delete");
  emit_task_delete_and_finish (self, FALSE, !outcome->delete_ok);
}

static void
stop_watching (ShimwatchShim *self)
{
  g_clear_handle_id (&self->shim_pidfd_watch, g_source_remove);
  g_clear_handle_id (&self->health_timer, g_source_remove);
  if (self->shim_pidfd >= 0)
    {
      close (self->shim_pidfd);
      self->shim_pidfd = -1;
    }
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
  int pidfd = self->shim_pidfd;

  if (pidfd < 0 && pid > 0)
    {
      pidfd = pidfd_open ((pid_t) pid, 0);
      cwd_link = g_strdup_printf ("/proc/%u/cwd", pid);
      cwd = g_file_read_link (cwd_link, NULL);
      if (pidfd >= 0 && g_strcmp0 (cwd, self->task_dir) != 0)
        {
          close (pidfd);
          pidfd = -1;
        }
    }
  /* a pidfd turns readable once its process has exited: a dead shim is left alone */
  if (pidfd >= 0 && poll (&(struct pollfd) { .fd = pidfd, .events = POLLIN }, 1, 0) == 0 &&
      pidfd_send_signal (pidfd, SIGKILL, NULL, 0) == 0)
    log_event (self, G_LOG_LEVEL_MESSAGE, "disconnected", "killed shim process %u", pid);
  if (pidfd >= 0 && pidfd != self->shim_pidfd)
    close (pidfd);
}

static void
on_disconnected (ShimwatchShim *self,
                 const char    *reason)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  ShimwatchCleanupRequest *request;

  if (self->detached || self->cleaning)
    return;
  self->connected = FALSE;
  self->loading = FALSE;
  if (!self->deleted && self->exported && self->cgroup_path != NULL)
    kill_shim_process (self);
  stop_watching (self);
  /* during CreateTask the task is nobody's yet: the failing create cleans up, silently */
  if (!self->exported)
    return;
  self->cleaning = TRUE;

  if (self->deleted)
    {
      /* the end of a normal Delete: the task directory and the cgroup go, no crash
       * signals; the shim's Delete already did what `shim delete` would */
      request = cleanup_request (self, FALSE);
      request->deleted = TRUE;
      shimwatch_cleanup_run_async (shimwatch_manager_get_cleanup (self->manager), request,
                                   NULL, NULL, normal_cleanup_done_cb, g_object_ref (self));
      return;
    }

  log_event (self, G_LOG_LEVEL_WARNING, "disconnected", "shim disconnected (%s)", reason);
  set_status (self, "disconnected");
  if (!self->disconnected)
    {
      gboolean marked;

      self->disconnected = TRUE;
      marked = before_signal (self, "ShimDisconnected", "disconnected-prepared");
      shimwatch_dbus_manager_emit_shim_disconnected (manager_iface (self), self->path,
                                                     self->namespace_, self->id,
                                                     shimwatch_dbus_shim_get_shim_pid (iface));
      after_signal (self, "ShimDisconnected", marked, "disconnected");
      add_history (self, "disconnected", shimwatch_dbus_shim_get_shim_pid (iface), FALSE, 0,
                   reason);
    }
  g_signal_emit (self, signals[SIGNAL_DISCONNECTED], 0);
  set_status (self, "cleaning");

  /* a hung shim was killed above; what runs in the task's cgroup is killed by the
   * cleanup. A record from before per-task cgroups knows no cgroup: only then are all
   * processes of the machine looked at, for those working in the task directory. */
  if (self->cgroup_path == NULL &&
      shimwatch_cleanup_kill_processes_in (self->task_dir) > 0)
    log_event (self, G_LOG_LEVEL_MESSAGE, "disconnected",
               "killed what was still running in %s", self->task_dir);

  /* a task whose exit is already known is not killed again: its real status stays */
  request = cleanup_request (self, !self->exit_emitted);
  request->kill_cgroup = TRUE;
  shimwatch_cleanup_run_async (shimwatch_manager_get_cleanup (self->manager), request,
                               killed_cb, self, crash_cleanup_done_cb, g_object_ref (self));
}

static void
connection_closed_cb (ShimwatchTtrpc *ttrpc,
                      GError         *reason,
                      gpointer        user_data)
{
  on_disconnected (user_data, reason->message);
}

static gboolean
shim_process_exited_cb (int          fd,
                        GIOCondition condition,
                        gpointer     user_data)
{
  ShimwatchShim *self = user_data;

  self->shim_pidfd_watch = 0;
  /* normally the socket's EOF comes first; if not, a child inherited the socket */
  if (self->connected && self->handle != NULL)
    {
      log_event (self, G_LOG_LEVEL_WARNING, "disconnected",
                 "shim process %u is dead but its connection is still open (a child of the "
                 "shim holds the socket); treating the shim as gone",
                 shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self)));
      shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
    }
  return G_SOURCE_REMOVE;
}

static void
health_cb (GObject      *source,
           GAsyncResult *result,
           gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(GError) error = NULL;
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  gboolean answered;

  self->health_pending = FALSE;
  answered = shimwatch_task_client_connect_finish (SHIMWATCH_TASK_CLIENT (source), result, NULL,
                                                   NULL, &error);
  if (!answered && !g_error_matches (error, SHIMWATCH_TTRPC_ERROR,
                                     SHIMWATCH_GRPC_DEADLINE_EXCEEDED))
    return;      /* closed: the disconnect path has it */
  if (answered == shimwatch_dbus_shim_get_responsive (iface))
    return;
  shimwatch_dbus_shim_set_responsive (iface, answered);
  if (answered)
    log_event (self, G_LOG_LEVEL_MESSAGE, "responsive", "shim answers again");
  else
    log_event (self, G_LOG_LEVEL_WARNING, "unresponsive",
               "shim does not answer within %u ms; Reap can clean it up", HEALTH_TIMEOUT_MS);
}

/* no keepalive in ttrpc: a hung shim is only seen by asking it */
static gboolean
health_timer_cb (gpointer user_data)
{
  ShimwatchShim *self = user_data;

  if (self->connected && !self->health_pending && self->handle != NULL)
    {
      self->health_pending = TRUE;
      shimwatch_task_client_connect_async (self->handle->client, HEALTH_TIMEOUT_MS, health_cb,
                                           g_object_ref (self));
    }
  return G_SOURCE_CONTINUE;
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
  self->connected = TRUE;
  shimwatch_dbus_shim_set_address (iface, handle->address);
  shimwatch_dbus_shim_set_shim_pid (iface, handle->shim_pid);
  shimwatch_dbus_shim_set_responsive (iface, TRUE);
  ttrpc = shimwatch_task_client_get_ttrpc (handle->client);
  self->closed_id = g_signal_connect (ttrpc, "closed", G_CALLBACK (connection_closed_cb), self);
  if (handle->shim_pid > 0)
    {
      self->shim_pidfd = pidfd_open ((pid_t) handle->shim_pid, 0);
      self->shim_start_time = shimwatch_process_start_time (handle->shim_pid);
      if (self->shim_pidfd >= 0)
        self->shim_pidfd_watch = g_unix_fd_add (self->shim_pidfd, G_IO_IN,
                                                shim_process_exited_cb, self);
    }
  if (shimwatch_manager_get_config (self->manager)->health_interval_ms > 0)
    self->health_timer = g_timeout_add (shimwatch_manager_get_config (self->manager)->health_interval_ms,
                                        health_timer_cb, self);
  if (shimwatch_ttrpc_is_closed (ttrpc))
    {
      g_autoptr(GError) error = g_error_new_literal (SHIMWATCH_TTRPC_ERROR,
                                                     SHIMWATCH_TTRPC_ERROR_CLOSED,
                                                     "closed before it was watched");

      connection_closed_cb (ttrpc, error, self);
    }
}

/* the task's cgroup, for GetStats and the OOM kill counter: found while it has a process */
static void
find_cgroup (ShimwatchShim *self,
             guint32        pid)
{
  g_autoptr(GError) error = NULL;

  if (self->cgroup != NULL)
    return;
  /* the task's own cgroup (CgroupPath); a record from before knows only its process */
  if (self->cgroup_path != NULL)
    {
      self->cgroup = shimwatch_task_cgroup_new_for_path (SHIMWATCH_CGROUP_ROOT, self->cgroup_path);
      return;
    }
  if (pid == 0)
    return;
  self->cgroup = shimwatch_task_cgroup_new_for_pid (pid, &error);
  if (self->cgroup == NULL)
    log_event (self, G_LOG_LEVEL_WARNING, "create", "cannot find the cgroup of task process %u: %s",
               pid, error->message);
}

void
shimwatch_shim_set_created (ShimwatchShim *self,
                            guint32        pid)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  shimwatch_dbus_shim_set_task_pid (iface, pid);
  if (g_strcmp0 (shimwatch_dbus_shim_get_status (iface), "running") != 0)
    set_status (self, "created");
  /* a pidfd taken now lets a dead shim's task be killed at once, without pid reuse */
  if (self->task_pidfd < 0 && pid > 0)
    {
      self->task_pidfd = pidfd_open ((pid_t) pid, 0);
      self->task_start_time = shimwatch_process_start_time (pid);
      if (self->task_pidfd < 0)
        log_event (self, G_LOG_LEVEL_WARNING, "create", "cannot watch task process %u: %s", pid,
                   g_strerror (errno));
    }
  find_cgroup (self, pid);
  log_event (self, G_LOG_LEVEL_MESSAGE, "create", "task created: pid %u", pid);
}

void
shimwatch_shim_set_started (ShimwatchShim *self,
                            guint32        pid)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  if (!self->exit_emitted)
    set_status (self, "running");
  shimwatch_dbus_shim_set_started_at (SHIMWATCH_DBUS_SHIM (self), (guint64) g_get_real_time ());
  save (self);
  log_event (self, G_LOG_LEVEL_MESSAGE, "start", "task started: pid %u", pid);
  /* during CreateTask the history hears of it with the create, once the task is handed out */
  if (self->persistent)
    add_history (self, "start", pid, FALSE, 0, NULL);
}

/* -- events forwarded by the shim ------------------------------------------------------- */

void
shimwatch_shim_handle_event (ShimwatchShim        *self,
                             const ShimwatchEvent *event)
{
  ShimwatchDbusManager *manager = manager_iface (self);
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  if (!self->exported || self->loading)
    {
      g_ptr_array_add (self->early_events, shimwatch_event_copy (event));
      return;
    }

  switch (event->kind)
    {
    case SHIMWATCH_EVENT_TASK_CREATE:
      if (shimwatch_dbus_shim_get_task_pid (iface) == 0)
        shimwatch_dbus_shim_set_task_pid (iface, event->pid);
      shimwatch_dbus_manager_emit_task_create (manager, self->path, self->namespace_, self->id,
                                               event->bundle != NULL ? event->bundle : "",
                                               event->pid);
      break;
    case SHIMWATCH_EVENT_TASK_START:
      if (!self->exit_emitted && !self->cleaning)
        set_status (self, "running");
      shimwatch_dbus_manager_emit_task_start (manager, self->path, self->namespace_, self->id,
                                              event->pid);
      break;
    case SHIMWATCH_EVENT_TASK_EXIT:
      /* exits of exec'd processes are not the task's */
      if (event->exec_id != NULL && *event->exec_id != '\0' &&
          g_strcmp0 (event->exec_id, self->id) != 0)
        break;
      if (!self->cleaning)
        set_status (self, "stopped");
      emit_task_exit (self, event->pid, event->exit_status,
                      event->exited_at != 0 ? event->exited_at : g_get_real_time (), NULL);
      break;
    case SHIMWATCH_EVENT_TASK_OOM:
      log_event (self, G_LOG_LEVEL_WARNING, "oom", "task hit its memory limit");
      self->oom = TRUE;
      /* the OOM event may come after the exit it caused */
      if (self->exit_emitted && self->exit.exit_status == 128 + SIGKILL &&
          g_strcmp0 (shimwatch_dbus_shim_get_exit_reason (iface), "signaled") == 0)
        shimwatch_dbus_shim_set_exit_reason (iface, "oom-killed");
      save (self);
      shimwatch_dbus_manager_emit_task_oom (manager, self->path, self->namespace_, self->id);
      add_history (self, "oom", shimwatch_dbus_shim_get_task_pid (iface), FALSE, 0, NULL);
      break;
    case SHIMWATCH_EVENT_TASK_PAUSED:
      if (!self->cleaning)
        set_status (self, "paused");
      break;
    case SHIMWATCH_EVENT_TASK_RESUMED:
      if (!self->cleaning)
        set_status (self, "running");
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
replay_early_events (ShimwatchShim *self)
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
  if (!self->loading)
    replay_early_events (self);
}

/* -- D-Bus methods -------------------------------------------------------------------- */

typedef void (*AuthorizedFunc) (ShimwatchShim         *self,
                                GDBusMethodInvocation *invocation,
                                gpointer               data);

typedef struct {
  ShimwatchShim         *self;
  GDBusMethodInvocation *invocation;
  AuthorizedFunc         func;
  gpointer               data;
} AuthData;

static void
authorized_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  g_autofree AuthData *auth = user_data;
  g_autoptr(ShimwatchShim) self = auth->self;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_authority_check_finish (SHIMWATCH_AUTHORITY (source), result, &error))
    {
      g_dbus_method_invocation_return_gerror (auth->invocation, error);
      return;
    }
  if (self->loading)
    {
      /* loaded from its record after a restart, its shim not reached yet: the call is
       * answered once it is, or once the shim is known to be dead */
      ShimwatchShim *shim = g_steal_pointer (&self);

      g_ptr_array_add (shim->waiting_calls, g_steal_pointer (&auth));
      return;
    }
  auth->func (self, auth->invocation, auth->data);
}

/* the loading is over (shim reached or found dead): what waited for it goes on */
static void
resume_waiting_calls (ShimwatchShim *self,
                      gboolean       stopping)
{
  g_autoptr(GPtrArray) waiting = g_steal_pointer (&self->waiting_calls);

  self->waiting_calls = g_ptr_array_new ();
  for (guint i = 0; i < waiting->len; i++)
    {
      g_autofree AuthData *auth = g_ptr_array_index (waiting, i);
      g_autoptr(ShimwatchShim) keep G_GNUC_UNUSED = auth->self;

      if (stopping)
        g_dbus_method_invocation_return_error (auth->invocation, SHIMWATCH_ERROR,
                                               SHIMWATCH_ERROR_FAILED, "the service is stopping");
      else
        auth->func (auth->self, auth->invocation, auth->data);
    }
}

static void
authorize_action (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation,
                  const char            *action_id,
                  AuthorizedFunc         func,
                  gpointer               data)
{
  AuthData *auth = g_new0 (AuthData, 1);

  auth->self = g_object_ref (self);
  auth->invocation = invocation;
  auth->func = func;
  auth->data = data;
  shimwatch_authority_check_async (shimwatch_manager_get_authority (self->manager), invocation,
                                   action_id, self->namespace_, self->id, authorized_cb, auth);
}

static void
authorize (ShimwatchShim         *self,
           GDBusMethodInvocation *invocation,
           AuthorizedFunc         func,
           gpointer               data)
{
  authorize_action (self, invocation, SHIMWATCH_ACTION_MANAGE, func, data);
}

static gboolean
require_connected (ShimwatchShim         *self,
                   GDBusMethodInvocation *invocation)
{
  if (self->connected && !self->deleted && self->delete_invocation == NULL)
    return TRUE;
  g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                                         "task %s/%s is %s", self->namespace_, self->id,
                                         self->deleted || self->delete_invocation != NULL
                                           ? "being deleted" : "being cleaned up");
  return FALSE;
}

static void
return_rpc_error (GDBusMethodInvocation *invocation,
                  const GError          *error)
{
  g_autoptr(GError) converted = shimwatch_error_convert (error);

  g_dbus_method_invocation_return_gerror (invocation, converted);
}

static gboolean
status_is (ShimwatchShim *self,
           const char    *status)
{
  return g_strcmp0 (shimwatch_dbus_shim_get_status (SHIMWATCH_DBUS_SHIM (self)), status) == 0;
}

/* the runtime refused because of the task's state (it exited meanwhile, it is not
 * paused, ...): BadState in our words; anything else as the runtime said it */
static void
return_lifecycle_error (ShimwatchShim         *self,
                        GDBusMethodInvocation *invocation,
                        const char            *operation,
                        const GError          *error)
{
  if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_NOT_FOUND) ||
      g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_FAILED_PRECONDITION))
    {
      log_event (self, G_LOG_LEVEL_INFO, "record", "%s refused by the runtime: %s", operation,
                 error->message);
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "cannot %s task %s/%s: it is %s", operation,
                                             self->namespace_, self->id,
                                             self->exit_emitted ? "stopped"
                                               : shimwatch_dbus_shim_get_status (SHIMWATCH_DBUS_SHIM (self)));
      return;
    }
  return_rpc_error (invocation, error);
}

typedef struct {
  ShimwatchShim         *self;
  GDBusMethodInvocation *invocation;
} CallContext;

static CallContext *
call_context_new (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation)
{
  CallContext *context = g_new0 (CallContext, 1);

  context->self = g_object_ref (self);
  context->invocation = invocation;
  return context;
}

static void
call_context_free (CallContext *context)
{
  g_object_unref (context->self);
  g_free (context);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC (CallContext, call_context_free)

static void
start_rpc_cb (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  g_autoptr(CallContext) context = user_data;
  GDBusMethodInvocation *invocation = context->invocation;
  ShimwatchShim *self = context->self;
  g_autoptr(GError) error = NULL;
  guint32 pid = 0;

  if (!shimwatch_task_client_start_finish (SHIMWATCH_TASK_CLIENT (source), result, &pid, &error))
    {
      /* the task changed state since the check: in our words, with the shim's after them */
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_FAILED_PRECONDITION) ||
          g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_ALREADY_EXISTS))
        g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                               SHIMWATCH_ERROR_BAD_STATE,
                                               "task %s/%s cannot be started: it is not in "
                                               "state \"created\" (shim: %s)", self->namespace_,
                                               self->id, error->message);
      else
        return_rpc_error (invocation, error);
      return;
    }
  shimwatch_shim_set_started (self, pid);
  shimwatch_dbus_shim_complete_start (SHIMWATCH_DBUS_SHIM (self), invocation, pid);
}

/* Start and Kill of a task in the wrong state are the caller's mistake, not the shim's:
 * BadState, before the shim is asked (it would answer in runc's words, as a failure) */
static gboolean
require_status (ShimwatchShim         *self,
                GDBusMethodInvocation *invocation,
                const char            *action,
                const char * const    *allowed)
{
  const char *status = shimwatch_dbus_shim_get_status (SHIMWATCH_DBUS_SHIM (self));

  if (g_strv_contains (allowed, status))
    return TRUE;
  g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                                         "task %s/%s is %s: %s", self->namespace_, self->id,
                                         status, action);
  return FALSE;
}

static void
start_authorized (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation,
                  gpointer               data)
{
  static const char * const startable[] = { "created", NULL };

  if (!require_connected (self, invocation) ||
      !require_status (self, invocation, "only a created task can be started", startable))
    return;
  shimwatch_task_client_start_async (self->handle->client, RPC_TIMEOUT_MS, start_rpc_cb,
                                     call_context_new (self, invocation));
}

static gboolean
handle_start (ShimwatchDbusShim     *iface,
              GDBusMethodInvocation *invocation)
{
  authorize (SHIMWATCH_SHIM (iface), invocation, start_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
kill_rpc_cb (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  g_autoptr(CallContext) context = user_data;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_task_client_kill_finish (SHIMWATCH_TASK_CLIENT (source), result, &error))
    {
      /* "process already finished": it exited since the check */
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_NOT_FOUND) ||
          g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_FAILED_PRECONDITION))
        g_dbus_method_invocation_return_error (context->invocation, SHIMWATCH_ERROR,
                                               SHIMWATCH_ERROR_BAD_STATE,
                                               "task %s/%s has no running process to signal "
                                               "(shim: %s)", context->self->namespace_,
                                               context->self->id, error->message);
      else
        return_rpc_error (context->invocation, error);
      return;
    }
  shimwatch_dbus_shim_complete_kill (SHIMWATCH_DBUS_SHIM (context->self), context->invocation);
}

static void
kill_authorized (ShimwatchShim         *self,
                 GDBusMethodInvocation *invocation,
                 gpointer               data)
{
  static const char * const killable[] = { "created", "running", "paused", NULL };
  GVariant *parameters = g_dbus_method_invocation_get_parameters (invocation);
  guint32 signal_number;
  gboolean all;

  if (!require_connected (self, invocation) ||
      !require_status (self, invocation, "it has no process to signal", killable))
    return;
  g_variant_get (parameters, "(ub)", &signal_number, &all);
  shimwatch_task_client_kill_async (self->handle->client, signal_number, all, RPC_TIMEOUT_MS,
                                    kill_rpc_cb, call_context_new (self, invocation));
}

static gboolean
handle_kill (ShimwatchDbusShim     *iface,
             GDBusMethodInvocation *invocation,
             guint                  signal_number,
             gboolean               all)
{
  if (signal_number < 1 || signal_number > 64)
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                             "signal %u is not a signal number (1 to 64)",
                                             signal_number);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  authorize (SHIMWATCH_SHIM (iface), invocation, kill_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
shutdown_rpc_cb (GObject      *source,
                 GAsyncResult *result,
                 gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(GError) error = NULL;

  /* the shim may close before it answers; either way the connection ends now, and the
   * closed handler runs shim delete and removes the task directory */
  if (!shimwatch_task_client_shutdown_finish (SHIMWATCH_TASK_CLIENT (source), result, &error))
    g_debug ("%s/%s: shutdown: %s", self->namespace_, self->id, error->message);
  shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
}

static void
delete_rpc_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(GError) error = NULL;
  ShimwatchExit exit_info = { 0 };

  if (!shimwatch_task_client_delete_finish (SHIMWATCH_TASK_CLIENT (source), result, &exit_info,
                                            &error))
    {
      /* closed or NotFound: the shim is gone, the dead-shim cleanup answers the caller */
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED) ||
          g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_NOT_FOUND))
        {
          log_event (self, G_LOG_LEVEL_WARNING, "delete",
                     "delete found the shim gone (%s); cleaning up", error->message);
          if (!self->cleaning)
            shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
          return;
        }
      return_rpc_error (g_steal_pointer (&self->delete_invocation), error);
      return;
    }

  /* registered no more: the close that follows is not a crash (containerd #4784) */
  self->deleted = TRUE;
  if (!self->exit_emitted)
    {
      /* a task deleted before it ever ran or exited has no TaskExit of its own */
      self->exit = exit_info;
    }
  else
    {
      /* the real exit status stays; fill in what delete knows better */
      if (self->exit.pid == 0)
        self->exit.pid = exit_info.pid;
    }
  if (self->exit.exited_at == 0)
    self->exit.exited_at = g_get_real_time ();
  set_status (self, "stopped");
  save (self);
  shimwatch_crash_point ("deleted");
  shimwatch_task_client_shutdown_async (self->handle->client, FALSE, SHUTDOWN_TIMEOUT_MS,
                                        shutdown_rpc_cb, g_object_ref (self));
}

static void
delete_authorized (ShimwatchShim         *self,
                   GDBusMethodInvocation *invocation,
                   gpointer               data)
{
  const char *status = shimwatch_dbus_shim_get_status (SHIMWATCH_DBUS_SHIM (self));

  if (!require_connected (self, invocation))
    return;
  if (g_strcmp0 (status, "running") == 0 || g_strcmp0 (status, "paused") == 0)
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "task %s/%s is %s: kill it first", self->namespace_,
                                             self->id, status);
      return;
    }
  self->delete_invocation = invocation;
  shimwatch_task_client_delete_async (self->handle->client, RPC_TIMEOUT_MS, delete_rpc_cb,
                                      g_object_ref (self));
}

static gboolean
handle_delete (ShimwatchDbusShim     *iface,
               GDBusMethodInvocation *invocation)
{
  authorize (SHIMWATCH_SHIM (iface), invocation, delete_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- the task's output ---------------------------------------------------------------- */

static gboolean
require_task_log (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation)
{
  if (self->task_log != NULL)
    return TRUE;
  g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_FOUND,
                                         "the service keeps no log of task %s/%s: its creator "
                                         "gave its own stdout and stderr, or the option log "
                                         "false", self->namespace_, self->id);
  return FALSE;
}

static void
read_log_done_cb (GObject      *source,
                  GAsyncResult *result,
                  gpointer      user_data)
{
  g_autoptr(CallContext) context = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) lines = NULL;

  lines = shimwatch_task_log_read_finish (SHIMWATCH_TASK_LOG (source), result, &error);
  if (lines == NULL)
    {
      return_rpc_error (context->invocation, error);
      return;
    }
  shimwatch_dbus_shim_complete_read_log (SHIMWATCH_DBUS_SHIM (context->self),
                                         context->invocation, lines);
}

static void
read_log_authorized (ShimwatchShim         *self,
                     GDBusMethodInvocation *invocation,
                     gpointer               data)
{
  g_autoptr(GVariant) options = NULL;
  guint tail;
  gint64 since;
  gboolean follow;

  if (!require_task_log (self, invocation))
    return;
  /* checked before the authorization */
  g_variant_get (g_dbus_method_invocation_get_parameters (invocation), "(@a{sv})", &options);
  shimwatch_task_log_parse_options (options, FALSE, &tail, &since, &follow, NULL);
  shimwatch_task_log_read_async (self->task_log, tail, since, read_log_done_cb,
                                 call_context_new (self, invocation));
}

static gboolean
handle_read_log (ShimwatchDbusShim     *iface,
                 GDBusMethodInvocation *invocation,
                 GVariant              *arg_options)
{
  g_autoptr(GError) error = NULL;
  guint tail;
  gint64 since;
  gboolean follow;

  if (!shimwatch_task_log_parse_options (arg_options, FALSE, &tail, &since, &follow, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  authorize_action (SHIMWATCH_SHIM (iface), invocation, SHIMWATCH_ACTION_READ_LOGS,
                    read_log_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
open_log_authorized (ShimwatchShim         *self,
                     GDBusMethodInvocation *invocation,
                     gpointer               data)
{
  g_autoptr(GVariant) options = NULL;
  g_autoptr(GUnixFDList) fds = NULL;
  g_autoptr(GError) error = NULL;
  guint tail;
  gint64 since;
  gboolean follow;
  int fd;

  if (!require_task_log (self, invocation))
    return;
  g_variant_get (g_dbus_method_invocation_get_parameters (invocation), "(@a{sv})", &options);
  shimwatch_task_log_parse_options (options, TRUE, &tail, &since, &follow, NULL);
  fd = shimwatch_task_log_open_reader (self->task_log, tail, since, follow, &error);
  if (fd < 0)
    {
      return_rpc_error (invocation, error);
      return;
    }
  fds = g_unix_fd_list_new_from_array (&fd, 1);      /* owns fd now */
  shimwatch_dbus_shim_complete_open_log (SHIMWATCH_DBUS_SHIM (self), invocation, fds,
                                         g_variant_new_handle (0));
}

static gboolean
handle_open_log (ShimwatchDbusShim     *iface,
                 GDBusMethodInvocation *invocation,
                 GUnixFDList           *fd_list,
                 GVariant              *arg_options)
{
  g_autoptr(GError) error = NULL;
  guint tail;
  gint64 since;
  gboolean follow;

  if (!shimwatch_task_log_parse_options (arg_options, TRUE, &tail, &since, &follow, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  authorize_action (SHIMWATCH_SHIM (iface), invocation, SHIMWATCH_ACTION_READ_LOGS,
                    open_log_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

void
shimwatch_shim_set_task_log (ShimwatchShim    *self,
                             ShimwatchTaskLog *task_log)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  g_set_object (&self->task_log, task_log);
}

/* -- Stop: SIGTERM, then SIGKILL once the timeout passed --------------------------------- */

static void
clear_stop (ShimwatchShim *self)
{
  g_clear_handle_id (&self->stop_timer, g_source_remove);
  self->stop_killed = FALSE;
}

/* the exit is known: every Stop waiting for it returns its status */
static void
complete_stops (ShimwatchShim *self)
{
  g_autoptr(GPtrArray) waiters = g_steal_pointer (&self->stop_waiters);

  self->stop_waiters = g_ptr_array_new ();
  clear_stop (self);
  for (guint i = 0; i < waiters->len; i++)
    shimwatch_dbus_shim_complete_stop (SHIMWATCH_DBUS_SHIM (self),
                                       g_ptr_array_index (waiters, i), self->exit.exit_status);
}

static void
fail_stops (ShimwatchShim  *self,
            ShimwatchError  code,
            const char     *message)
{
  g_autoptr(GPtrArray) waiters = g_steal_pointer (&self->stop_waiters);

  self->stop_waiters = g_ptr_array_new ();
  clear_stop (self);
  for (guint i = 0; i < waiters->len; i++)
    g_dbus_method_invocation_return_error_literal (g_ptr_array_index (waiters, i),
                                                   SHIMWATCH_ERROR, code, message);
}

static gboolean stop_timer_cb (gpointer user_data);

static void
stop_signal_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  g_autoptr(ShimwatchShim) self = user_data;
  g_autoptr(GError) error = NULL;

  if (shimwatch_task_client_kill_finish (SHIMWATCH_TASK_CLIENT (source), result, &error) ||
      self->stop_waiters->len == 0)
    return;
  /* "not found": the process is gone already, and its exit is on its way */
  if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_NOT_FOUND))
    return;
  log_event (self, G_LOG_LEVEL_WARNING, "exit", "Stop: %s", error->message);
  if (!self->stop_killed)
    {
      /* SIGTERM did not go through: SIGKILL at once */
      g_clear_handle_id (&self->stop_timer, g_source_remove);
      stop_timer_cb (self);
      return;
    }
  {
    g_autoptr(GError) converted = shimwatch_error_convert (error);

    fail_stops (self, converted->code, converted->message);
  }
}

static gboolean
stop_timer_cb (gpointer user_data)
{
  ShimwatchShim *self = user_data;

  self->stop_timer = 0;
  if (self->stop_killed)
    {
      fail_stops (self, SHIMWATCH_ERROR_FAILED,
                  "the task did not exit within 30 s of SIGKILL");
      return G_SOURCE_REMOVE;
    }
  self->stop_killed = TRUE;
  log_event (self, G_LOG_LEVEL_MESSAGE, "exit", "Stop: still running, sending SIGKILL");
  self->stop_timer = g_timeout_add (STOP_KILL_GRACE_MS, stop_timer_cb, self);
  if (self->connected && self->handle != NULL)
    shimwatch_task_client_kill_async (self->handle->client, SIGKILL, TRUE, RPC_TIMEOUT_MS,
                                      stop_signal_cb, g_object_ref (self));
  return G_SOURCE_REMOVE;
}

static void
stop_authorized (ShimwatchShim         *self,
                 GDBusMethodInvocation *invocation,
                 gpointer               data)
{
  guint timeout = GPOINTER_TO_UINT (data);

  if (!require_connected (self, invocation) ||
      !require_status (self, invocation,
                       "only a created or running task can be stopped (resume a paused one first)",
                       (const char *[]) { "created", "running", NULL }))
    return;
  g_ptr_array_add (self->stop_waiters, invocation);
  if (self->stop_waiters->len > 1)
    return;      /* a Stop is under way: its end answers this one too */
  log_event (self, G_LOG_LEVEL_MESSAGE, "exit", "Stop: SIGTERM, SIGKILL in %u s", timeout);
  self->stop_timer = g_timeout_add (timeout * 1000, stop_timer_cb, self);
  shimwatch_task_client_kill_async (self->handle->client, SIGTERM, FALSE, RPC_TIMEOUT_MS,
                                    stop_signal_cb, g_object_ref (self));
}

static gboolean
handle_stop (ShimwatchDbusShim     *iface,
             GDBusMethodInvocation *invocation,
             guint                  timeout)
{
  if (timeout > STOP_MAX_S)
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                             "timeout %u is longer than %u s", timeout,
                                             STOP_MAX_S);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  authorize (SHIMWATCH_SHIM (iface), invocation, stop_authorized,
             GUINT_TO_POINTER (timeout != 0 ? timeout : STOP_DEFAULT_S));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- Pause / Resume ---------------------------------------------------------------------- */

static void
pause_rpc_cb (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  g_autoptr(CallContext) context = user_data;
  ShimwatchShim *self = context->self;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_task_client_pause_finish (SHIMWATCH_TASK_CLIENT (source), result, &error))
    {
      return_lifecycle_error (self, context->invocation, "pause", error);
      return;
    }
  if (!self->exit_emitted && !self->cleaning)
    set_status (self, "paused");
  save (self);
  log_event (self, G_LOG_LEVEL_MESSAGE, "record", "task paused");
  shimwatch_dbus_shim_complete_pause (SHIMWATCH_DBUS_SHIM (self), context->invocation);
}

static void
pause_authorized (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation,
                  gpointer               data)
{
  if (!require_connected (self, invocation) ||
      !require_status (self, invocation, "only a running task can be paused",
                       (const char *[]) { "running", NULL }))
    return;
  shimwatch_task_client_pause_async (self->handle->client, RPC_TIMEOUT_MS, pause_rpc_cb,
                                     call_context_new (self, invocation));
}

static gboolean
handle_pause (ShimwatchDbusShim     *iface,
              GDBusMethodInvocation *invocation)
{
  authorize (SHIMWATCH_SHIM (iface), invocation, pause_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
resume_rpc_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  g_autoptr(CallContext) context = user_data;
  ShimwatchShim *self = context->self;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_task_client_resume_finish (SHIMWATCH_TASK_CLIENT (source), result, &error))
    {
      return_lifecycle_error (self, context->invocation, "resume", error);
      return;
    }
  if (!self->exit_emitted && !self->cleaning)
    set_status (self, "running");
  save (self);
  log_event (self, G_LOG_LEVEL_MESSAGE, "record", "task resumed");
  shimwatch_dbus_shim_complete_resume (SHIMWATCH_DBUS_SHIM (self), context->invocation);
}

static void
resume_authorized (ShimwatchShim         *self,
                   GDBusMethodInvocation *invocation,
                   gpointer               data)
{
  if (!require_connected (self, invocation) ||
      !require_status (self, invocation, "only a paused task can be resumed",
                       (const char *[]) { "paused", NULL }))
    return;
  shimwatch_task_client_resume_async (self->handle->client, RPC_TIMEOUT_MS, resume_rpc_cb,
                                      call_context_new (self, invocation));
}

static gboolean
handle_resume (ShimwatchDbusShim     *iface,
               GDBusMethodInvocation *invocation)
{
  authorize (SHIMWATCH_SHIM (iface), invocation, resume_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- Labels ------------------------------------------------------------------------------- */

gboolean
shimwatch_shim_validate_labels (GVariant  *labels,
                                GError   **error)
{
  GVariantIter iter;
  const char *key;
  const char *value;

  g_return_val_if_fail (g_variant_is_of_type (labels, G_VARIANT_TYPE ("a{ss}")), FALSE);

  if (g_variant_n_children (labels) > LABELS_MAX)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "%" G_GSIZE_FORMAT " labels are more than %u", g_variant_n_children (labels),
                   LABELS_MAX);
      return FALSE;
    }
  g_variant_iter_init (&iter, labels);
  while (g_variant_iter_next (&iter, "{&s&s}", &key, &value))
    {
      if (key[0] == '\0')
        {
          g_set_error_literal (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                               "a label key is empty");
          return FALSE;
        }
      if (strlen (key) + strlen (value) > LABEL_MAX_BYTES)
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "label \"%.64s\" is longer than %u bytes (key and value)", key,
                       LABEL_MAX_BYTES);
          return FALSE;
        }
    }
  return TRUE;
}

static void
set_labels_authorized (ShimwatchShim         *self,
                       GDBusMethodInvocation *invocation,
                       gpointer               data)
{
  g_autoptr(GVariant) labels = NULL;

  if (self->deleted || self->delete_emitted)
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "task %s/%s is being deleted", self->namespace_,
                                             self->id);
      return;
    }
  g_variant_get (g_dbus_method_invocation_get_parameters (invocation), "(@a{ss})", &labels);
  shimwatch_dbus_shim_set_labels (SHIMWATCH_DBUS_SHIM (self), labels);
  save (self);
  log_event (self, G_LOG_LEVEL_INFO, "record", "labels replaced (%" G_GSIZE_FORMAT ")",
             g_variant_n_children (labels));
  shimwatch_dbus_shim_complete_set_labels (SHIMWATCH_DBUS_SHIM (self), invocation);
}

static gboolean
handle_set_labels (ShimwatchDbusShim     *iface,
                   GDBusMethodInvocation *invocation,
                   GVariant              *labels)
{
  g_autoptr(GError) error = NULL;

  if (!shimwatch_shim_validate_labels (labels, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  authorize (SHIMWATCH_SHIM (iface), invocation, set_labels_authorized, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

void
shimwatch_shim_set_description (ShimwatchShim      *self,
                                const char         *bundle_source,
                                const char * const *command,
                                GVariant           *labels)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  shimwatch_dbus_shim_set_bundle_source (iface, bundle_source);
  if (command != NULL)
    shimwatch_dbus_shim_set_command (iface, command);
  if (labels != NULL)
    shimwatch_dbus_shim_set_labels (iface, labels);
}

/* -- what runs: GetStats, ListPids ------------------------------------------------------ */

static gboolean
require_processes (ShimwatchShim         *self,
                   GDBusMethodInvocation *invocation)
{
  if (!self->exit_emitted && !self->cleaning && !self->deleted &&
      (status_is (self, "created") || status_is (self, "running") || status_is (self, "paused")))
    return TRUE;
  g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                                         "task %s/%s has no processes: it is %s",
                                         self->namespace_, self->id,
                                         shimwatch_dbus_shim_get_status (SHIMWATCH_DBUS_SHIM (self)));
  return FALSE;
}

static gboolean
handle_get_stats (ShimwatchDbusShim     *iface,
                  GDBusMethodInvocation *invocation)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (iface);
  g_autoptr(GError) error = NULL;
  ShimwatchTaskStats stats;
  GVariantBuilder builder;

  if (!require_processes (self, invocation))
    return G_DBUS_METHOD_INVOCATION_HANDLED;
  find_cgroup (self, shimwatch_dbus_shim_get_task_pid (iface));
  if (self->cgroup == NULL)
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_FAILED,
                                             "the cgroup of task %s/%s is not known",
                                             self->namespace_, self->id);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  if (!shimwatch_task_cgroup_read_stats (self->cgroup, &stats, &error))
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "task %s/%s has no processes: %s",
                                             self->namespace_, self->id, error->message);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "memory_current",
                         g_variant_new_uint64 (stats.memory_current));
  g_variant_builder_add (&builder, "{sv}", "memory_max", g_variant_new_uint64 (stats.memory_max));
  g_variant_builder_add (&builder, "{sv}", "cpu_usage_usec",
                         g_variant_new_uint64 (stats.cpu_usage_usec));
  g_variant_builder_add (&builder, "{sv}", "pids_current",
                         g_variant_new_uint32 (stats.pids_current));
  shimwatch_dbus_shim_complete_get_stats (iface, invocation, g_variant_builder_end (&builder));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static void
pids_rpc_cb (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  g_autoptr(CallContext) context = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids = NULL;

  pids = shimwatch_task_client_pids_finish (SHIMWATCH_TASK_CLIENT (source), result, &error);
  if (pids == NULL)
    {
      return_lifecycle_error (context->self, context->invocation, "list the processes of",
                              error);
      return;
    }
  shimwatch_dbus_shim_complete_list_pids (SHIMWATCH_DBUS_SHIM (context->self),
                                          context->invocation,
                                          g_variant_new_fixed_array (G_VARIANT_TYPE_UINT32,
                                                                     pids->data, pids->len,
                                                                     sizeof (guint32)));
}

static gboolean
handle_list_pids (ShimwatchDbusShim     *iface,
                  GDBusMethodInvocation *invocation)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (iface);

  if (self->exit_emitted || status_is (self, "stopped"))
    {
      shimwatch_dbus_shim_complete_list_pids (iface, invocation,
                                              g_variant_new_fixed_array (G_VARIANT_TYPE_UINT32,
                                                                         NULL, 0,
                                                                         sizeof (guint32)));
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  if (!require_connected (self, invocation))
    return G_DBUS_METHOD_INVOCATION_HANDLED;
  shimwatch_task_client_pids_async (self->handle->client, RPC_TIMEOUT_MS, pids_rpc_cb,
                                    call_context_new (self, invocation));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- lifecycle helpers ---------------------------------------------------------------- */

gboolean
shimwatch_shim_kill_shim (ShimwatchShim  *self,
                          GError        **error)
{
  guint32 pid;

  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), FALSE);

  pid = shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self));
  if (self->loading)
    {
      /* not reached yet after a restart: killed once it is (a dead one is cleaned anyway) */
      self->kill_when_reached = TRUE;
      return TRUE;
    }
  if (!self->connected)
    return TRUE;          /* already on its way out */
  log_event (self, G_LOG_LEVEL_MESSAGE, "reap", "killing shim %u", pid);
  if (pid == 0 || kill ((pid_t) pid, SIGKILL) != 0)
    {
      /* no process to kill: end the connection, which starts the same cleanup */
      shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
    }
  return TRUE;
}

void
shimwatch_shim_detach (ShimwatchShim *self)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  self->detached = TRUE;
  stop_watching (self);
  if (self->task_log != NULL)
    shimwatch_task_log_detach (self->task_log);
  resume_waiting_calls (self, TRUE);
  if (self->handle != NULL)
    g_clear_signal_handler (&self->closed_id, shimwatch_task_client_get_ttrpc (self->handle->client));
}

static void
abandon_done_cb (GObject      *source,
                 GAsyncResult *result,
                 gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome = NULL;

  outcome = shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);
  g_task_return_boolean (task, TRUE);
}

void
shimwatch_shim_abandon_async (ShimwatchShim       *self,
                              GAsyncReadyCallback  callback,
                              gpointer             user_data)
{
  GTask *task = g_task_new (self, NULL, callback, user_data);
  guint32 shim_pid = shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self));
  ShimwatchCleanupRequest *request;

  g_task_set_source_tag (task, shimwatch_shim_abandon_async);
  /* no events: the task was never handed to a client */
  shimwatch_shim_detach (self);
  self->cleaning = TRUE;
  if (self->handle != NULL)
    shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
  /* a shim that never answered Connect never told its pid: only then is every process
   * looked at, for one working in the task directory */
  if (shim_pid > 0)
    kill ((pid_t) shim_pid, SIGKILL);
  else if (shimwatch_cleanup_kill_processes_in (self->task_dir) > 0)
    log_event (self, G_LOG_LEVEL_MESSAGE, "create-failed",
               "killed the shim that never answered in %s", self->task_dir);
  request = cleanup_request (self, TRUE);
  request->kill_cgroup = TRUE;
  shimwatch_cleanup_run_async (shimwatch_manager_get_cleanup (self->manager), request, NULL,
                               NULL, abandon_done_cb, task);
}

void
shimwatch_shim_make_persistent (ShimwatchShim *self)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  self->persistent = TRUE;
  save (self);
  add_history (self, "create", shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self)),
               FALSE, 0, NULL);
  if (shimwatch_dbus_shim_get_started_at (SHIMWATCH_DBUS_SHIM (self)) != 0)
    add_history (self, "start", shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self)),
                 FALSE, 0, NULL);
}

ShimwatchShim *
shimwatch_shim_new_from_record (ShimwatchManager      *manager,
                                const ShimwatchRecord *record)
{
  ShimwatchShim *self = shimwatch_shim_new (manager, record->namespace_, record->id,
                                            record->runtime,
                                            record->shim_binary[0] != '\0' ? record->shim_binary
                                                                            : NULL,
                                            record->task_dir);
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  self->persistent = TRUE;
  self->loading = TRUE;
  self->task_start_time = record->task_start_time;
  /* until its shim answers again: whatever runs under the recorded pid now */
  self->shim_start_time = shimwatch_process_start_time (record->shim_pid);
  self->exit_emitted = record->exit_emitted;
  self->exit = record->exit;
  self->disconnected = record->disconnected;
  self->deleted = record->deleted;
  self->delete_emitted = record->delete_emitted;
  if (record->pending_signal != NULL && !record->pending_sent)
    log_event (self, G_LOG_LEVEL_MESSAGE, "record",
               "%s was about to go out when the service stopped, but did not: it is sent now",
               record->pending_signal);
  if (record->cgroup_path != NULL && shimwatch_cgroup_path_is_valid (record->cgroup_path))
    shimwatch_shim_set_cgroup_path (self, record->cgroup_path);
  else if (record->cgroup_path != NULL)
    log_event (self, G_LOG_LEVEL_WARNING, "record", "ignoring the record's cgroup \"%s\"",
               record->cgroup_path);
  shimwatch_dbus_shim_set_address (iface, record->address);
  shimwatch_dbus_shim_set_shim_pid (iface, record->shim_pid);
  shimwatch_dbus_shim_set_task_pid (iface, record->task_pid);
  shimwatch_dbus_shim_set_created_at (iface, (guint64) record->created_at);
  shimwatch_dbus_shim_set_status (iface, record->status[0] != '\0' ? record->status : "created");
  if (record->owner != NULL && record->owner[0] != '\0')
    shimwatch_dbus_shim_set_owner (iface, record->owner);
  shimwatch_dbus_shim_set_bundle_source (iface, record->bundle_source);
  shimwatch_dbus_shim_set_command (iface, (const char * const *) record->command);
  shimwatch_dbus_shim_set_labels (iface, record->labels);
  shimwatch_dbus_shim_set_started_at (iface, (guint64) record->started_at);
  shimwatch_dbus_shim_set_exit_reason (iface, record->exit_reason);
  self->oom = record->oom;
  if (record->exit_emitted)
    {
      shimwatch_dbus_shim_set_exit_status (iface, record->exit.exit_status);
      shimwatch_dbus_shim_set_exited_at (iface, (guint64) record->exit.exited_at);
    }
  /* the task's init may still run: watch it again, unless its pid now names another process */
  if (record->task_pid > 0 && !record->exit_emitted &&
      shimwatch_process_start_time (record->task_pid) == record->task_start_time &&
      record->task_start_time != 0)
    self->task_pidfd = pidfd_open ((pid_t) record->task_pid, 0);
  if (self->task_pidfd >= 0)
    find_cgroup (self, record->task_pid);
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
      log_event (self, G_LOG_LEVEL_WARNING, "readopt", "State after reconnecting: %s",
                 error->message);
      return;
    }
  /* whatever happened while the service was down: a real exit is reported now, once */
  if (state.status == SHIMWATCH_TASK_STATUS_STOPPED)
    {
      if (!self->cleaning)
        set_status (self, "stopped");
      emit_task_exit (self, state.pid, state.exit_status,
                      state.exited_at != 0 ? state.exited_at : g_get_real_time (), NULL);
    }
  else if (state.status != SHIMWATCH_TASK_STATUS_UNKNOWN && !self->cleaning)
    set_status (self, shimwatch_task_status_to_string (state.status));
  save (self);
}

void
shimwatch_shim_readopt (ShimwatchShim       *self,
                        ShimwatchShimHandle *handle)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  self->loading = FALSE;
  shimwatch_shim_attach (self, handle);
  log_event (self, G_LOG_LEVEL_MESSAGE, "readopt", "shim %u taken over again",
             handle->shim_pid);
  /* what arrived while it was being reached: the shim's events, then the calls */
  replay_early_events (self);
  resume_waiting_calls (self, FALSE);
  if (self->kill_when_reached)
    {
      shimwatch_shim_kill_shim (self, NULL);
      return;
    }
  if (self->deleted)
    {
      /* the service died between Delete and the shim's shutdown: finish the teardown */
      shimwatch_task_client_shutdown_async (self->handle->client, FALSE, SHUTDOWN_TIMEOUT_MS,
                                            shutdown_rpc_cb, g_object_ref (self));
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
  self->loading = FALSE;
  replay_early_events (self);
  on_disconnected (self, reason);
  resume_waiting_calls (self, FALSE);
}

const char *
shimwatch_shim_get_object_path (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), NULL);
  return self->path;
}

const char *
shimwatch_shim_get_namespace (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), NULL);
  return self->namespace_;
}

const char *
shimwatch_shim_get_id (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), NULL);
  return self->id;
}

const char *
shimwatch_shim_get_task_dir (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), NULL);
  return self->task_dir;
}

ShimwatchTaskClient *
shimwatch_shim_get_client (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), NULL);
  return self->handle != NULL ? self->handle->client : NULL;
}

/* the process @pid, started at @start_time, is this task's shim: its events are the task's */
gboolean
shimwatch_shim_is_shim_process (ShimwatchShim *self,
                                guint32        pid,
                                guint64        start_time)
{
  guint32 shim_pid;

  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), FALSE);

  shim_pid = shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self));
  if (shim_pid == 0 || pid != shim_pid)
    return FALSE;
  /* a shim already gone when it was attached has no start time: its pid is all there is */
  return self->shim_start_time == 0 || start_time == self->shim_start_time;
}

gboolean
shimwatch_shim_is_exported (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), FALSE);
  return self->exported;
}

void
shimwatch_shim_set_cgroup_path (ShimwatchShim *self,
                                const char    *path)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  g_free (self->cgroup_path);
  self->cgroup_path = g_strdup (path);
  shimwatch_dbus_shim_set_cgroup_path (SHIMWATCH_DBUS_SHIM (self), path != NULL ? path : "");
}

const char *
shimwatch_shim_get_cgroup_path (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), NULL);
  return self->cgroup_path;
}

guint32
shimwatch_shim_get_last_exit_status (ShimwatchShim *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), 255);
  return self->exit.exit_status;
}

ShimwatchShim *
shimwatch_shim_new (ShimwatchManager *manager,
                    const char       *namespace_,
                    const char       *id,
                    const char       *runtime,
                    const char       *shim_binary,
                    const char       *task_dir)
{
  ShimwatchShim *self = g_object_new (SHIMWATCH_TYPE_SHIM, NULL);
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);
  g_autofree char *ns_part = g_dbus_escape_object_path (namespace_);
  g_autofree char *id_part = g_dbus_escape_object_path (id);

  self->manager = manager;
  self->namespace_ = g_strdup (namespace_);
  self->id = g_strdup (id);
  self->runtime = g_strdup (runtime);
  self->shim_binary = g_strdup (shim_binary);
  self->task_dir = g_strdup (task_dir);
  self->path = g_strconcat (SHIMWATCH_DBUS_SHIMS_PATH "/", ns_part, "/", id_part, NULL);

  shimwatch_dbus_shim_set_namespace (iface, namespace_);
  shimwatch_dbus_shim_set_id (iface, id);
  shimwatch_dbus_shim_set_bundle (iface, task_dir);
  shimwatch_dbus_shim_set_runtime (iface, runtime);
  shimwatch_dbus_shim_set_address (iface, "");
  shimwatch_dbus_shim_set_cgroup_path (iface, "");
  shimwatch_dbus_shim_set_status (iface, "created");
  shimwatch_dbus_shim_set_created_at (iface, (guint64) g_get_real_time ());
  shimwatch_dbus_shim_set_owner (iface, "shimwatch");
  shimwatch_dbus_shim_set_bundle_source (iface, "");
  shimwatch_dbus_shim_set_command (iface, (const char * const []) { NULL });
  shimwatch_dbus_shim_set_labels (iface, g_variant_new ("a{ss}", NULL));
  shimwatch_dbus_shim_set_exit_reason (iface, "");
  return self;
}

static void
shimwatch_shim_dispose (GObject *object)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (object);

  shimwatch_shim_detach (self);
  if (self->delete_invocation != NULL)
    g_dbus_method_invocation_return_error (g_steal_pointer (&self->delete_invocation),
                                           SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                                           "the service is stopping");
  fail_stops (self, SHIMWATCH_ERROR_FAILED, "the service is stopping");
  g_clear_pointer (&self->handle, shimwatch_shim_handle_free);
  G_OBJECT_CLASS (shimwatch_shim_parent_class)->dispose (object);
}

static void
shimwatch_shim_finalize (GObject *object)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (object);

  if (self->task_pidfd >= 0)
    close (self->task_pidfd);
  g_ptr_array_unref (self->early_events);
  g_ptr_array_unref (self->waiting_calls);
  g_clear_object (&self->task_log);
  g_ptr_array_unref (self->stop_waiters);
  shimwatch_task_cgroup_free (self->cgroup);
  g_free (self->runtime);
  g_free (self->namespace_);
  g_free (self->id);
  g_free (self->path);
  g_free (self->shim_binary);
  g_free (self->task_dir);
  g_free (self->cgroup_path);
  G_OBJECT_CLASS (shimwatch_shim_parent_class)->finalize (object);
}

static void
shimwatch_shim_iface_init (ShimwatchDbusShimIface *iface)
{
  iface->handle_start = handle_start;
  iface->handle_kill = handle_kill;
  iface->handle_delete = handle_delete;
  iface->handle_read_log = handle_read_log;
  iface->handle_open_log = handle_open_log;
  iface->handle_stop = handle_stop;
  iface->handle_pause = handle_pause;
  iface->handle_resume = handle_resume;
  iface->handle_set_labels = handle_set_labels;
  iface->handle_get_stats = handle_get_stats;
  iface->handle_list_pids = handle_list_pids;
}

static void
shimwatch_shim_class_init (ShimwatchShimClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_shim_dispose;
  object_class->finalize = shimwatch_shim_finalize;

  /* the connection closed and cleanup started (not after a normal delete) */
  signals[SIGNAL_DISCONNECTED] = g_signal_new ("disconnected", G_TYPE_FROM_CLASS (klass),
                                               G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                               G_TYPE_NONE, 0);
  /* TaskDelete was emitted: drop the object. Arguments: whether this was a cleanup after
   * a dead shim (not a normal delete), and whether its delete command failed */
  signals[SIGNAL_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass),
                                           G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                           G_TYPE_NONE, 2, G_TYPE_BOOLEAN, G_TYPE_BOOLEAN);
}

static void
shimwatch_shim_init (ShimwatchShim *self)
{
  self->task_pidfd = -1;
  self->shim_pidfd = -1;
  self->early_events = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_event_free);
  self->waiting_calls = g_ptr_array_new ();
  self->stop_waiters = g_ptr_array_new ();
}
