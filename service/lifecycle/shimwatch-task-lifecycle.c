/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskLifecycle: a task's Status, record and lifecycle signals (see
 * shimwatch-task-lifecycle.h)
 */
#define G_LOG_DOMAIN "ShimwatchTaskLifecycle"

#include "config.h"

#include "shimwatch-task-lifecycle.h"

#include "shimwatch-logging.h"

/* (tests) where a crash may be asked for: before each signal, once the ones before it are
 * on the bus and its own mark says pending; and once it is settled */
static const struct {
  ShimwatchLifecycleSignal signal;
  const char              *prepared;
  const char              *settled;
} crash_points[] = {
  { SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED, "disconnected-prepared", "disconnected" },
  { SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT, "exit-prepared", "exit-emitted" },
  { SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE, "delete-prepared", "delete-emitted" },
};

static void
publish_state (ShimwatchTaskLifecycle *self)
{
  const char *status = shimwatch_shim_state_to_status (self->machine.state);

  if (g_strcmp0 (shimwatch_dbus_shim_get_status (self->setup.iface), status) != 0)
    shimwatch_dbus_shim_set_status (self->setup.iface, status);
}

void
shimwatch_task_lifecycle_init (ShimwatchTaskLifecycle            *self,
                               const ShimwatchTaskLifecycleSetup *setup)
{
  g_return_if_fail (setup->iface != NULL);

  *self = (ShimwatchTaskLifecycle) {
    .setup = *setup,
    .namespace_ = setup->namespace_,
    .id = setup->id,
  };
  shimwatch_shim_machine_init (&self->machine);
  publish_state (self);
}

void
shimwatch_task_lifecycle_restore (ShimwatchTaskLifecycle *self,
                                  const ShimwatchRecord  *record)
{
  ShimwatchDbusShim *iface = self->setup.iface;

  shimwatch_shim_machine_restore (&self->machine, record);
  self->exit = record->exit;
  self->persistent = TRUE;
  publish_state (self);
  shimwatch_dbus_shim_set_address (iface, record->address);
  shimwatch_dbus_shim_set_shim_pid (iface, record->shim_pid);
  shimwatch_dbus_shim_set_task_pid (iface, record->task_pid);
  shimwatch_dbus_shim_set_created_at (iface, (guint64) record->created_at);
  shimwatch_dbus_shim_set_started_at (iface, (guint64) record->started_at);
  if (record->owner != NULL && record->owner[0] != '\0')
    shimwatch_dbus_shim_set_owner (iface, record->owner);
  shimwatch_dbus_shim_set_exit_reason (iface, record->exit_reason != NULL ? record->exit_reason
                                                                          : "");
  if (record->exit_emitted)
    {
      shimwatch_dbus_shim_set_exit_status (iface, record->exit.exit_status);
      shimwatch_dbus_shim_set_exited_at (iface, (guint64) record->exit.exited_at);
    }
  if (record->pending_signal != NULL && !record->pending_sent)
    shimwatch_log_task_full (self->setup.log_domain, G_LOG_LEVEL_MESSAGE, __FILE__,
                             G_STRINGIFY (__LINE__), G_STRFUNC,
                             LOG_EVENT_OF (self->setup.iface, self->namespace_, self->id, "record",
                                           self->setup.log_prefix),
                             "%s was about to go out when the service stopped, but did "
                             "not: it is sent now", record->pending_signal);
}

/* the transition; Status is the caller's to publish, when @changed */
static ShimwatchLifecycleSignal
step (ShimwatchTaskLifecycle *self,
      ShimwatchShimInput      input,
      gboolean               *changed)
{
  ShimwatchLifecycleSignal emit = SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
  ShimwatchShimState from = self->machine.state;

  *changed = FALSE;
  switch (shimwatch_shim_machine_step (&self->machine, input, &emit))
    {
    case SHIMWATCH_SHIM_STEP_ILLEGAL:
      g_debug ("%s/%s: %s in state %s changes nothing", self->namespace_, self->id,
               shimwatch_shim_input_to_string (input), shimwatch_shim_state_to_status (from));
      return SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
    case SHIMWATCH_SHIM_STEP_IGNORED:
      return SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
    case SHIMWATCH_SHIM_STEP_CHANGED:
    default:
      *changed = TRUE;
      return emit;
    }
}

ShimwatchLifecycleSignal
shimwatch_task_lifecycle_transition (ShimwatchTaskLifecycle *self,
                                     ShimwatchShimInput      input)
{
  gboolean changed;
  ShimwatchLifecycleSignal emit = step (self, input, &changed);

  if (changed)
    publish_state (self);
  return emit;
}

static void
fill_record (ShimwatchTaskLifecycle *self,
             ShimwatchRecord        *record)
{
  ShimwatchDbusShim *iface = self->setup.iface;

  if (self->setup.owner != NULL && self->setup.owner->fill_record != NULL)
    self->setup.owner->fill_record (self->setup.owner_data, record);
  record->namespace_ = (char *) self->setup.namespace_;
  record->id = (char *) self->setup.id;
  record->address = (char *) shimwatch_dbus_shim_get_address (iface);
  record->shim_pid = shimwatch_dbus_shim_get_shim_pid (iface);
  record->task_pid = shimwatch_dbus_shim_get_task_pid (iface);
  record->created_at = (gint64) shimwatch_dbus_shim_get_created_at (iface);
  record->started_at = (gint64) shimwatch_dbus_shim_get_started_at (iface);
  record->owner = (char *) shimwatch_dbus_shim_get_owner (iface);
  record->exit_reason = (char *) shimwatch_dbus_shim_get_exit_reason (iface);
  record->exit = self->exit;
  shimwatch_shim_machine_fill_record (&self->machine, record);
}

static void
log_record_error (ShimwatchTaskLifecycle *self,
                  const GError           *error)
{
  shimwatch_log_task_full (self->setup.log_domain, G_LOG_LEVEL_WARNING, __FILE__,
                           G_STRINGIFY (__LINE__), G_STRFUNC,
                           LOG_EVENT_OF (self->setup.iface, self->namespace_, self->id, "record",
                                         self->setup.log_prefix),
                           "cannot write task record: %s", error->message);
}

void
shimwatch_task_lifecycle_save (ShimwatchTaskLifecycle *self)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };

  if (!self->persistent || self->setup.committer == NULL)
    return;
  fill_record (self, &record);
  /* supervision goes on */
  if (!shimwatch_record_committer_save (self->setup.committer, &record, &error))
    log_record_error (self, error);
}

void
shimwatch_task_lifecycle_forget (ShimwatchTaskLifecycle *self)
{
  if (self->persistent && self->setup.committer != NULL)
    shimwatch_record_committer_remove (self->setup.committer, self->setup.namespace_,
                                       self->setup.id);
  self->persistent = FALSE;
}

/* Exactly once across restarts, even a SIGKILL of the service: the task's marks say a
 * signal was sent if and only if it reached the bus. The record as it is to be, the
 * signal's flag already set, goes with the signal to the publisher, whose record
 * committer writes the signal's mark ("pending", with the status and exit that go with
 * it) into the task's marks file, without writing the record; the signal ledger's
 * filter holds the signal until that mark is durable, and marks it sent in the very
 * thread that writes the signal to the bus, right before it does (see
 * shimwatch-publisher.h). Nothing on the main thread waits for the disk or the bus. A
 * restarted service takes a flag whose mark does not say sent for unset. Marks that
 * cannot be made are logged: the signal goes out unmarked, and a restart sends it
 * again. A task without a record (during CreateTask, or no records kept) sends its
 * signals unmarked. */
static void
emit_signal (ShimwatchTaskLifecycle  *self,
             ShimwatchLifecycleSignal signal,
             guint32                  pid,
             const char              *reason)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };
  ShimwatchSignalMark mark = { .committer = self->setup.committer, .record = &record };
  gboolean marked = self->persistent && self->setup.committer != NULL;
  const ShimwatchLifecycleEvent event = {
    .member = shimwatch_lifecycle_signal_member (signal),
    .path = self->setup.path,
    .namespace_ = self->setup.namespace_,
    .id = self->setup.id,
    .pid = pid,
    .exit_status = self->exit.exit_status,
    .exited_at = self->exit.exited_at,
    .reason = reason,
  };

  if (marked)
    {
      fill_record (self, &record);
      record.pending_signal = (char *) event.member;
      for (guint i = 0; self->setup.crash_points && i < G_N_ELEMENTS (crash_points); i++)
        if (crash_points[i].signal == signal)
          {
            mark.prepared = crash_points[i].prepared;
            mark.settled = crash_points[i].settled;
          }
    }
  if (!shimwatch_publisher_emit_lifecycle (self->setup.publisher, &event,
                                           marked ? &mark : NULL, &error))
    log_record_error (self, error);
}

void
shimwatch_task_lifecycle_add_history (ShimwatchTaskLifecycle *self,
                                      const char             *event,
                                      guint32                 pid,
                                      gboolean                has_exit_status,
                                      guint32                 exit_status,
                                      const char             *reason)
{
  if (self->setup.history != NULL)
    shimwatch_history_add_task_event (self->setup.history, self->setup.namespace_,
                                      self->setup.id, event, pid, has_exit_status,
                                      exit_status, reason);
}

static void
flush_changes (ShimwatchTaskLifecycle *self)
{
  if (self->setup.owner != NULL && self->setup.owner->flush_changes != NULL)
    self->setup.owner->flush_changes (self->setup.owner_data);
  else
    g_dbus_interface_skeleton_flush (G_DBUS_INTERFACE_SKELETON (self->setup.iface));
}

gboolean
shimwatch_task_lifecycle_emit_disconnected (ShimwatchTaskLifecycle *self,
                                            guint32                 shim_pid,
                                            const char             *reason,
                                            gboolean                flush)
{
  gboolean changed;
  ShimwatchLifecycleSignal emit = step (self, SHIMWATCH_SHIM_INPUT_SHIM_GONE, &changed);

  if (changed && flush)
    {
      publish_state (self);
      flush_changes (self);
    }
  /* it goes out first, before anything else this death costs: only its mark comes
   * before it (Status, unless flushed, right after it: in the same dispatch, so no
   * caller of the bus can tell; its PropertiesChanged goes out later anyway) */
  if (emit == SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED)
    {
      emit_signal (self, emit, shim_pid, reason);
    }
  if (changed && !flush)
    publish_state (self);
  return emit == SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED;
}

gboolean
shimwatch_task_lifecycle_emit_exit (ShimwatchTaskLifecycle *self,
                                    guint32                 pid,
                                    guint32                 exit_status,
                                    gint64                  exited_at,
                                    const char             *reason)
{
  ShimwatchDbusShim *iface = self->setup.iface;
  ShimwatchLifecycleSignal signal = SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT;

  /* the task is stopped (unless it is being cleaned up) */
  if (shimwatch_task_lifecycle_transition (self, SHIMWATCH_SHIM_INPUT_EXITED) != signal)
    return FALSE;
  /* the shell convention: 128 + signal for a process a signal killed */
  if (reason == NULL)
    reason = exit_status > 128 && exit_status <= 128 + 64 ? "signaled" : "exited";
  if (exited_at == 0)
    exited_at = g_get_real_time ();
  self->exit.pid = pid;
  self->exit.exit_status = exit_status;
  self->exit.exited_at = exited_at;
  shimwatch_dbus_shim_set_exit_status (iface, exit_status);
  shimwatch_dbus_shim_set_exited_at (iface, (guint64) exited_at);
  shimwatch_dbus_shim_set_exit_reason (iface, reason);
  /* a client that sees TaskExit already sees the properties that go with it (after a
   * dead shim, with Status: one PropertiesChanged) */
  flush_changes (self);
  shimwatch_log_task_full (self->setup.log_domain, G_LOG_LEVEL_MESSAGE, __FILE__,
                           G_STRINGIFY (__LINE__), G_STRFUNC,
                           LOG_EVENT_OF (self->setup.iface, self->namespace_, self->id, "exit",
                                         self->setup.log_prefix),
                           "task exited: pid %u, status %u (%s)", pid, exit_status, reason);
  emit_signal (self, signal, pid, reason);
  return TRUE;
}

gboolean
shimwatch_task_lifecycle_emit_delete (ShimwatchTaskLifecycle *self)
{
  ShimwatchLifecycleSignal signal = SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE;

  if (shimwatch_task_lifecycle_transition (self, SHIMWATCH_SHIM_INPUT_FINISHED) != signal)
    return FALSE;
  shimwatch_log_task_full (self->setup.log_domain, G_LOG_LEVEL_MESSAGE, __FILE__,
                           G_STRINGIFY (__LINE__), G_STRFUNC,
                           LOG_EVENT_OF (self->setup.iface, self->namespace_, self->id, "delete",
                                         self->setup.log_prefix),
                           "task deleted: pid %u, status %u", self->exit.pid,
                           self->exit.exit_status);
  emit_signal (self, signal, self->exit.pid, NULL);
  return TRUE;
}
