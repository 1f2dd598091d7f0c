/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShim: the object, its D-Bus methods, and what its task is made of
 */
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
#include "shimwatch-names.h"
#include "shimwatch-shim-private.h"
#include "shimwatch-task-log.h"
#include "shimwatch-task-object.h"
#include "shimwatch-task-stats.h"

#define STOP_DEFAULT_S      10
#define STOP_MAX_S          3600
/* after Stop's SIGKILL: a task that still has not exited is reported, not waited for */
#define STOP_KILL_GRACE_MS  30000
#define LABELS_MAX          256
#define LABEL_MAX_BYTES     4096

guint shimwatch_shim_signals[N_SIGNALS];

static void shimwatch_shim_iface_init (ShimwatchDbusShimIface *iface);

G_DEFINE_TYPE_WITH_CODE (ShimwatchShim, shimwatch_shim, SHIMWATCH_DBUS_TYPE_SHIM_SKELETON,
                         G_IMPLEMENT_INTERFACE (SHIMWATCH_DBUS_TYPE_SHIM, shimwatch_shim_iface_init))

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
  if (shimwatch_shim_is_loading (self))
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
void
shimwatch_shim_resume_waiting_calls (ShimwatchShim *self,
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
  shimwatch_authority_check_async (self->services.authority, invocation,
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
  if (shimwatch_shim_is_connected (self) && !shimwatch_shim_is_deleted (self) && self->delete_invocation == NULL)
    return TRUE;
  g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                                         "task %s/%s is %s", self->namespace_, self->id,
                                         shimwatch_shim_is_deleted (self) ||
                                         self->delete_invocation != NULL
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

/* the state machine decides; the Status string is only what the caller is told */
static gboolean
allows (ShimwatchShim      *self,
        ShimwatchShimAction action)
{
  return shimwatch_shim_state_allows (self->lifecycle.machine.state, action);
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
      shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_EVENT (self, "record"),
                          "%s refused by the runtime: %s", operation,
                          error->message);
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "cannot %s task %s/%s: it is %s", operation,
                                             self->namespace_, self->id,
                                             shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT)
                                               ? "stopped"
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
require_state (ShimwatchShim         *self,
               GDBusMethodInvocation *invocation,
               const char            *why,
               ShimwatchShimAction    action)
{
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  if (allows (self, action))
    return TRUE;
  g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                                         "task %s/%s is %s: %s", self->namespace_, self->id,
                                         shimwatch_dbus_shim_get_status (iface), why);
  return FALSE;
}

static void
start_authorized (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation,
                  gpointer               data)
{
  if (!require_connected (self, invocation) ||
      !require_state (self, invocation, "only a created task can be started",
                      SHIMWATCH_SHIM_ACTION_START))
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
  GVariant *parameters = g_dbus_method_invocation_get_parameters (invocation);
  guint32 signal_number;
  gboolean all;

  if (!require_connected (self, invocation) ||
      !require_state (self, invocation, "it has no process to signal",
                      SHIMWATCH_SHIM_ACTION_KILL))
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

void
shimwatch_shim_shutdown_rpc_cb (GObject      *source,
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
          shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "delete"),
                              "delete found the shim gone (%s); cleaning up", error->message);
          if (!shimwatch_shim_is_cleaning (self))
            shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
          return;
        }
      return_rpc_error (g_steal_pointer (&self->delete_invocation), error);
      return;
    }

  /* registered no more: the close that follows is not a crash (containerd #4784) */
  if (!shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT))
    {
      /* a task deleted before it ever ran or exited has no TaskExit of its own */
      self->lifecycle.exit = exit_info;
    }
  else
    {
      /* the real exit status stays; fill in what delete knows better */
      if (self->lifecycle.exit.pid == 0)
        self->lifecycle.exit.pid = exit_info.pid;
    }
  if (self->lifecycle.exit.exited_at == 0)
    self->lifecycle.exit.exited_at = g_get_real_time ();
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_DELETED);
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_crash_point ("deleted");
  shimwatch_task_client_shutdown_async (self->handle->client, FALSE, SHUTDOWN_TIMEOUT_MS,
                                        shimwatch_shim_shutdown_rpc_cb, g_object_ref (self));
}

static void
delete_authorized (ShimwatchShim         *self,
                   GDBusMethodInvocation *invocation,
                   gpointer               data)
{
  if (!require_connected (self, invocation) ||
      !require_state (self, invocation, "kill it first", SHIMWATCH_SHIM_ACTION_DELETE))
    return;
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
void
shimwatch_shim_complete_stops (ShimwatchShim *self)
{
  g_autoptr(GPtrArray) waiters = g_steal_pointer (&self->stop_waiters);

  self->stop_waiters = g_ptr_array_new ();
  clear_stop (self);
  for (guint i = 0; i < waiters->len; i++)
    shimwatch_dbus_shim_complete_stop (SHIMWATCH_DBUS_SHIM (self), g_ptr_array_index (waiters, i),
                                       self->lifecycle.exit.exit_status);
}

void
shimwatch_shim_fail_stops (ShimwatchShim  *self,
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
  shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "exit"), "Stop: %s", error->message);
  if (!self->stop_killed)
    {
      /* SIGTERM did not go through: SIGKILL at once */
      g_clear_handle_id (&self->stop_timer, g_source_remove);
      stop_timer_cb (self);
      return;
    }
  {
    g_autoptr(GError) converted = shimwatch_error_convert (error);

    shimwatch_shim_fail_stops (self, converted->code, converted->message);
  }
}

static gboolean
stop_timer_cb (gpointer user_data)
{
  ShimwatchShim *self = user_data;

  self->stop_timer = 0;
  if (self->stop_killed)
    {
      shimwatch_shim_fail_stops (self, SHIMWATCH_ERROR_FAILED,
                                 "the task did not exit within 30 s of SIGKILL");
      return G_SOURCE_REMOVE;
    }
  self->stop_killed = TRUE;
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "exit"),
                      "Stop: still running, sending SIGKILL");
  self->stop_timer = g_timeout_add (STOP_KILL_GRACE_MS, stop_timer_cb, self);
  if (shimwatch_shim_is_connected (self) && self->handle != NULL)
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
      !require_state (self, invocation,
                      "only a created or running task can be stopped (resume a paused one first)",
                      SHIMWATCH_SHIM_ACTION_STOP))
    return;
  g_ptr_array_add (self->stop_waiters, invocation);
  if (self->stop_waiters->len > 1)
    return;      /* a Stop is under way: its end answers this one too */
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "exit"),
                      "Stop: SIGTERM, SIGKILL in %u s", timeout);
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
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_PAUSED);
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "record"), "task paused");
  shimwatch_dbus_shim_complete_pause (SHIMWATCH_DBUS_SHIM (self), context->invocation);
}

static void
pause_authorized (ShimwatchShim         *self,
                  GDBusMethodInvocation *invocation,
                  gpointer               data)
{
  if (!require_connected (self, invocation) ||
      !require_state (self, invocation, "only a running task can be paused",
                      SHIMWATCH_SHIM_ACTION_PAUSE))
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
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_RESUMED);
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "record"), "task resumed");
  shimwatch_dbus_shim_complete_resume (SHIMWATCH_DBUS_SHIM (self), context->invocation);
}

static void
resume_authorized (ShimwatchShim         *self,
                   GDBusMethodInvocation *invocation,
                   gpointer               data)
{
  if (!require_connected (self, invocation) ||
      !require_state (self, invocation, "only a paused task can be resumed",
                      SHIMWATCH_SHIM_ACTION_RESUME))
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

  if (shimwatch_shim_is_deleted (self) ||
      shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE))
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "task %s/%s is being deleted", self->namespace_,
                                             self->id);
      return;
    }
  g_variant_get (g_dbus_method_invocation_get_parameters (invocation), "(@a{ss})", &labels);
  shimwatch_dbus_shim_set_labels (SHIMWATCH_DBUS_SHIM (self), labels);
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_EVENT (self, "record"),
                      "labels replaced (%" G_GSIZE_FORMAT ")",
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
  if (!shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) &&
      !shimwatch_shim_is_cleaning (self) && !shimwatch_shim_is_deleted (self) &&
      allows (self, SHIMWATCH_SHIM_ACTION_PROCESSES))
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

  if (!require_processes (self, invocation))
    return G_DBUS_METHOD_INVOCATION_HANDLED;
  shimwatch_shim_find_cgroup (self, shimwatch_dbus_shim_get_task_pid (iface));
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
  shimwatch_dbus_shim_complete_get_stats (iface, invocation,
                                          shimwatch_task_stats_to_variant (&stats));
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

static void
list_pids (ShimwatchShim         *self,
           GDBusMethodInvocation *invocation,
           gpointer               data)
{
  if (shimwatch_shim_has_sent (self, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) ||
      shimwatch_shim_state_is_stopped (self->lifecycle.machine.state))
    {
      shimwatch_dbus_shim_complete_list_pids (SHIMWATCH_DBUS_SHIM (self), invocation,
                                              g_variant_new_fixed_array (G_VARIANT_TYPE_UINT32,
                                                                         NULL, 0,
                                                                         sizeof (guint32)));
      return;
    }
  if (!require_connected (self, invocation))
    return;
  shimwatch_task_client_pids_async (self->handle->client, RPC_TIMEOUT_MS, pids_rpc_cb,
                                    call_context_new (self, invocation));
}

static gboolean
handle_list_pids (ShimwatchDbusShim     *iface,
                  GDBusMethodInvocation *invocation)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (iface);

  if (shimwatch_shim_is_loading (self))
    {
      /* after a restart, its shim not reached yet: answered once it is (or found dead),
       * like the calls that need authorization */
      AuthData *wait = g_new0 (AuthData, 1);

      wait->self = g_object_ref (self);
      wait->invocation = invocation;
      wait->func = list_pids;
      g_ptr_array_add (self->waiting_calls, wait);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  list_pids (self, invocation, NULL);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- what the task is made of ----------------------------------------------------------- */

ShimwatchCleanupRequest *
shimwatch_shim_cleanup_request (ShimwatchShim *self,
                                gboolean       kill_task)
{
  ShimwatchCleanupRequest *request = shimwatch_cleanup_request_new ();
  const ShimwatchConfig *config = self->services.config;

  request->namespace_ = g_strdup (self->namespace_);
  request->id = g_strdup (self->id);
  request->task_dir = g_strdup (self->task_dir);
  request->shim_binary = g_strdup (self->shim_binary);
  request->runc_state_dir = g_build_filename (self->services.runc_root,
                                              self->namespace_, self->id, NULL);
  if (g_str_has_prefix (shimwatch_dbus_shim_get_address (SHIMWATCH_DBUS_SHIM (self)), "unix://"))
    request->socket_path = g_strdup (shimwatch_dbus_shim_get_address (SHIMWATCH_DBUS_SHIM (self)) +
                                     strlen ("unix://"));
  request->task_pid = shimwatch_dbus_shim_get_task_pid (SHIMWATCH_DBUS_SHIM (self));
  request->kill_task = kill_task && self->task_pidfd >= 0;
  /* the task's end is the cleanup's to watch from now on: its pidfd goes with it (a
   * cleanup request is made once, at the task's end) */
  request->pidfd = self->task_pidfd;
  self->task_pidfd = -1;
  request->cgroup_path = g_strdup (self->cgroup_path);
  request->timeout_ms = config->cleanup_timeout_ms;
  return request;
}

/* the task's cgroup, for GetStats and the OOM kill counter: found while it has a process */
void
shimwatch_shim_find_cgroup (ShimwatchShim *self,
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
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "create"),
                        "cannot find the cgroup of task process %u: %s",
                        pid, error->message);
}

void
shimwatch_shim_set_started (ShimwatchShim *self,
                            guint32        pid)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_STARTED);
  shimwatch_dbus_shim_set_started_at (SHIMWATCH_DBUS_SHIM (self), (guint64) g_get_real_time ());
  shimwatch_task_lifecycle_save (&self->lifecycle);
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "start"), "task started: pid %u", pid);
  /* during CreateTask the history hears of it with the create, once the task is handed out */
  if (self->lifecycle.persistent)
    shimwatch_task_lifecycle_add_history (&self->lifecycle, "start", pid, FALSE, 0, NULL);
}

/* -- lifecycle helpers ---------------------------------------------------------------- */

gboolean
shimwatch_shim_kill_shim (ShimwatchShim  *self,
                          GError        **error)
{
  guint32 pid;

  g_return_val_if_fail (SHIMWATCH_IS_SHIM (self), FALSE);

  pid = shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self));
  if (shimwatch_shim_is_loading (self))
    {
      /* not reached yet after a restart: killed once it is (a dead one is cleaned anyway) */
      self->kill_when_reached = TRUE;
      return TRUE;
    }
  if (!shimwatch_shim_is_connected (self))
    return TRUE;          /* already on its way out */
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "reap"), "killing shim %u", pid);
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

  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_DETACHED);
  shimwatch_shim_watch_stop (&self->watch, FALSE);
  if (self->task_log != NULL)
    shimwatch_task_log_detach (self->task_log);
  shimwatch_shim_resume_waiting_calls (self, TRUE);
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
  shimwatch_task_lifecycle_transition (&self->lifecycle, SHIMWATCH_SHIM_INPUT_ABANDONED);
  if (self->handle != NULL)
    shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
  /* a shim that never answered Connect never told its pid: only then is every process
   * looked at, for one working in the task directory */
  if (shim_pid > 0)
    kill ((pid_t) shim_pid, SIGKILL);
  else if (shimwatch_cleanup_kill_processes_in (self->task_dir) > 0)
    shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "create-failed"),
                        "killed the shim that never answered in %s", self->task_dir);
  request = shimwatch_shim_cleanup_request (self, TRUE);
  request->kill_cgroup = TRUE;
  shimwatch_cleanup_run_async (self->services.cleanup, request, NULL,
                               NULL, abandon_done_cb, task);
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
  /* a recorded shim not reached again yet: whatever runs under its pid now, once */
  if (self->shim_start_time == SHIM_START_TIME_UNREAD)
    self->shim_start_time = shimwatch_process_start_time (shim_pid);
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
  return self->lifecycle.exit.exit_status;
}

/* the record's fields only the shim knows */
static void
fill_record (gpointer         owner,
             ShimwatchRecord *record)
{
  ShimwatchShim *self = owner;
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  record->runtime = self->runtime;
  record->shim_binary = self->shim_binary;
  record->task_dir = self->task_dir;
  record->task_start_time = self->task_start_time;
  record->cgroup_path = self->cgroup_path;
  record->bundle_source = (char *) shimwatch_dbus_shim_get_bundle_source (iface);
  record->command = (GStrv) shimwatch_dbus_shim_get_command (iface);
  record->labels = shimwatch_dbus_shim_get_labels (iface);
  record->oom = self->oom;
}

static void
flush_changes (gpointer owner)
{
  shimwatch_shim_flush_changes (owner);
}

static const ShimwatchTaskLifecycleOwner lifecycle_owner = {
  .fill_record = fill_record,
  .flush_changes = flush_changes,
};

ShimwatchShim *
shimwatch_shim_new (const ShimwatchShimServices *services,
                    const char                  *namespace_,
                    const char                  *id,
                    const char                  *runtime,
                    const char                  *shim_binary,
                    const char                  *task_dir)
{
  ShimwatchShim *self = g_object_new (SHIMWATCH_TYPE_SHIM, NULL);
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  self->services = (ShimwatchShimServices) {
    .config = services->config,
    .cleanup = g_object_ref (services->cleanup),
    .authority = services->authority != NULL ? g_object_ref (services->authority) : NULL,
    .publisher = g_object_ref (services->publisher),
    .runc_root = g_strdup (services->runc_root),
    .health = services->health != NULL ? g_object_ref (services->health) : NULL,
  };
  self->namespace_ = g_strdup (namespace_);
  self->id = g_strdup (id);
  self->runtime = g_strdup (runtime);
  self->shim_binary = g_strdup (shim_binary);
  self->task_dir = g_strdup (task_dir);
  self->path = shimwatch_task_object_path (SHIMWATCH_DBUS_SHIMS_PATH, namespace_, id);
  self->watch.namespace_ = self->namespace_;
  self->watch.id = self->id;

  shimwatch_dbus_shim_set_namespace (iface, namespace_);
  shimwatch_dbus_shim_set_id (iface, id);
  shimwatch_dbus_shim_set_bundle (iface, task_dir);
  shimwatch_dbus_shim_set_runtime (iface, runtime);
  shimwatch_dbus_shim_set_address (iface, "");
  shimwatch_dbus_shim_set_cgroup_path (iface, "");
  shimwatch_task_lifecycle_init (&self->lifecycle, &(ShimwatchTaskLifecycleSetup) {
    .iface = iface,
    .path = self->path,
    .namespace_ = self->namespace_,
    .id = self->id,
    .publisher = self->services.publisher,
    .committer = shimwatch_publisher_get_committer (self->services.publisher),
    .history = shimwatch_publisher_get_history (self->services.publisher),
    .log_domain = G_LOG_DOMAIN,
    .crash_points = TRUE,
    .owner = &lifecycle_owner,
    .owner_data = self,
  });
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
  shimwatch_shim_fail_stops (self, SHIMWATCH_ERROR_FAILED, "the service is stopping");
  g_clear_pointer (&self->handle, shimwatch_shim_handle_free);
  G_OBJECT_CLASS (shimwatch_shim_parent_class)->dispose (object);
}

static void
shimwatch_shim_finalize (GObject *object)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (object);

  if (self->task_pidfd >= 0)
    close (self->task_pidfd);
  shimwatch_shim_watch_clear (&self->watch);
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
  g_clear_object (&self->services.cleanup);
  g_clear_object (&self->services.authority);
  g_clear_object (&self->services.publisher);
  g_clear_object (&self->services.health);
  g_free ((char *) self->services.runc_root);
  g_clear_pointer (&self->all_properties, g_variant_unref);
  G_OBJECT_CLASS (shimwatch_shim_parent_class)->finalize (object);
}

/* GetManagedObjects (and InterfacesAdded) ask every object for all its properties. The
 * generated skeleton builds each value anew from its GValue every time: 19 variants per
 * task, and most of the cost of listing 1,000 tasks. The dictionary is kept until a
 * property changes: the generated set_property notifies every change of value (and only
 * those), and notify drops it, so the next call sees the change at once, before the
 * PropertiesChanged that reports it. Everything here runs on the main thread. */
static GVariant *
shimwatch_shim_get_properties (GDBusInterfaceSkeleton *skeleton)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (skeleton);
  GDBusInterfaceSkeletonClass *parent =
    G_DBUS_INTERFACE_SKELETON_CLASS (shimwatch_shim_parent_class);

  if (self->all_properties == NULL)
    {
      self->all_properties = g_variant_ref_sink (parent->get_properties (skeleton));
      /* kept serialised: ~800 bytes, where the tree the skeleton built is ~80 GVariants
       * (9 MB more RSS with 1,000 tasks, which every fork of a shim then copies) */
      (void) g_variant_get_data (self->all_properties);
    }
  /* a full reference: g_dbus_interface_skeleton_get_properties() takes floating ones */
  return g_variant_ref (self->all_properties);
}

/* The generated skeleton sends a PropertiesChanged from an idle it attaches at the first
 * notify, or at once on g_dbus_interface_skeleton_flush(), which sends only if that idle
 * is there. While changes are held the skeleton is not told (it still keeps what
 * changed, with the values clients saw last); flushing tells it once, then flushes. */
static void
shimwatch_shim_notify (GObject    *object,
                       GParamSpec *pspec)
{
  ShimwatchShim *self = SHIMWATCH_SHIM (object);

  g_clear_pointer (&self->all_properties, g_variant_unref);
  if (self->changes_held)
    {
      self->held_pspec = pspec;
      return;
    }
  G_OBJECT_CLASS (shimwatch_shim_parent_class)->notify (object, pspec);
}

void
shimwatch_shim_hold_changes (ShimwatchShim *self)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  self->changes_held = TRUE;
}

void
shimwatch_shim_flush_changes (ShimwatchShim *self)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM (self));

  if (self->changes_held)
    {
      GParamSpec *pspec = g_steal_pointer (&self->held_pspec);

      self->changes_held = FALSE;
      if (pspec != NULL)
        G_OBJECT_CLASS (shimwatch_shim_parent_class)->notify (G_OBJECT (self), pspec);
    }
  g_dbus_interface_skeleton_flush (G_DBUS_INTERFACE_SKELETON (self));
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
  object_class->notify = shimwatch_shim_notify;
  G_DBUS_INTERFACE_SKELETON_CLASS (klass)->get_properties = shimwatch_shim_get_properties;

  /* the connection closed and cleanup started (not after a normal delete) */
  shimwatch_shim_signals[SIGNAL_DISCONNECTED] = g_signal_new ("disconnected", G_TYPE_FROM_CLASS (klass),
                                               G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                               G_TYPE_NONE, 0);
  /* TaskDelete was emitted: drop the object. Arguments: whether this was a cleanup after
   * a dead shim (not a normal delete), and whether its delete command failed */
  shimwatch_shim_signals[SIGNAL_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass),
                                           G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                           G_TYPE_NONE, 2, G_TYPE_BOOLEAN, G_TYPE_BOOLEAN);
}

static void
shimwatch_shim_init (ShimwatchShim *self)
{
  self->task_pidfd = -1;
  shimwatch_shim_watch_init (&self->watch, NULL, NULL, SHIMWATCH_DBUS_SHIM (self));
  self->early_events = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_event_free);
  self->waiting_calls = g_ptr_array_new ();
  self->stop_waiters = g_ptr_array_new ();
}
