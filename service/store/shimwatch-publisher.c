/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchPublisher"

#include "config.h"

#include "shimwatch-names.h"
#include "shimwatch-publisher.h"

struct _ShimwatchPublisher
{
  GObject                   parent_instance;

  ShimwatchDbusManager     *signals;   /* not owned: the manager owns the publisher */
  char                     *records_dir;
  ShimwatchHistory         *history;
  ShimwatchMetrics         *metrics;   /* or NULL */
  ShimwatchSignalLedger    *ledger;
  ShimwatchRecordCommitter *committer;
  GDBusConnection          *connection;
  guint                     filter_id;
  GPtrArray                *kept_types; /* GVariant: one empty value of each type below */
};

G_DEFINE_TYPE (ShimwatchPublisher, shimwatch_publisher, G_TYPE_OBJECT)

/* GLib keeps what it knows of a container type (each member's size, alignment and
 * offset, worked out from the type string) only while a value of that type exists, and
 * works it out again, with a dozen allocations, for the next one. Every message of a
 * death went through that: GDBus builds each one's header fields as an a{yv} (and reads
 * those of incoming messages as one), and the bodies of the lifecycle signals,
 * PropertiesChanged and InterfacesRemoved are values of their own types, gone as soon
 * as they are sent. One empty value of each type (Nothing of its maybe type), kept as
 * long as the publisher, keeps that knowledge for every thread. */
static const char * const kept_types[] = {
  "a{yv}",              /* every message's header fields */
  "(osssuut)",          /* TaskExit, TaskDelete */
  "(ossu)",             /* ShimDisconnected */
  "(sa{sv}as)",         /* PropertiesChanged (and a{sv}, as) */
  "(oas)",              /* InterfacesRemoved */
  "(oa{sa{sv}})",       /* InterfacesAdded */
};

ShimwatchPublisher *
shimwatch_publisher_new (ShimwatchDbusManager *signals,
                         const char           *records_dir,
                         ShimwatchHistory     *history)
{
  ShimwatchPublisher *self = g_object_new (SHIMWATCH_TYPE_PUBLISHER, NULL);

  self->signals = signals;
  self->records_dir = g_strdup (records_dir);
  self->history = history != NULL ? g_object_ref (history) : NULL;
  self->committer = shimwatch_record_committer_new (records_dir, self->ledger);
  return self;
}

void
shimwatch_publisher_attach (ShimwatchPublisher *self,
                            GDBusConnection    *connection)
{
  g_return_if_fail (SHIMWATCH_IS_PUBLISHER (self));
  g_return_if_fail (self->connection == NULL);

  self->connection = g_object_ref (connection);
  self->filter_id = shimwatch_signal_ledger_attach (self->ledger, connection);
  shimwatch_record_committer_set_connection (self->committer, connection);
}

GDBusConnection *
shimwatch_publisher_get_connection (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->connection;
}

ShimwatchDbusManager *
shimwatch_publisher_get_signals (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->signals;
}

/* What the generated shimwatch_dbus_manager_emit_*() do, without what they do first: a
 * GObject signal emission by name, its arguments collected into GValues and handed
 * through libffi's generic marshaller to the class handler that emits. Nothing connects
 * to those GObject signals. Like the generated code, it sends nothing while the
 * Manager is not exported. */
void
shimwatch_publisher_emit (ShimwatchPublisher *self,
                          const char         *member,
                          GVariant           *parameters)
{
  GDBusInterfaceSkeleton *skeleton = G_DBUS_INTERFACE_SKELETON (self->signals);
  g_autoptr(GVariant) sunk = g_variant_ref_sink (parameters);
  g_autoptr(GError) error = NULL;
  GDBusConnection *connection = g_dbus_interface_skeleton_get_connection (skeleton);

  if (connection == NULL)
    return;
  if (!g_dbus_connection_emit_signal (connection, NULL,
                                      g_dbus_interface_skeleton_get_object_path (skeleton),
                                      SHIMWATCH_DBUS_MANAGER_IFACE, member, sunk, &error))
    g_debug ("%s not sent: %s", member, error->message);
}

/* the history's name of each lifecycle signal */
static const struct {
  const char *member;
  const char *event;
} lifecycle_signals[] = {
  { "ShimDisconnected", "disconnected" },
  { "TaskExit", "exit" },
  { "TaskDelete", "delete" },
};

gboolean
shimwatch_publisher_emit_lifecycle (ShimwatchPublisher           *self,
                                    const ShimwatchLifecycleEvent *event,
                                    const ShimwatchSignalMark    *mark,
                                    GError                      **error)
{
  gboolean marked = TRUE;
  gboolean disconnected;
  guint i;

  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), FALSE);
  for (i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    if (g_str_equal (lifecycle_signals[i].member, event->member))
      break;
  g_return_val_if_fail (i < G_N_ELEMENTS (lifecycle_signals), FALSE);
  disconnected = i == 0;

  if (mark != NULL)
    {
      marked = shimwatch_record_committer_expect (mark->committer, mark->record, event->path,
                                                  mark->settled, error);
      /* (tests) the signals before this one are on the bus, its own mark says pending */
      if (mark->prepared != NULL)
        shimwatch_signal_ledger_crash_point_after_earlier (self->ledger, mark->prepared);
    }
  shimwatch_publisher_emit (self, event->member,
                            disconnected
                            ? g_variant_new ("(ossu)", event->path, event->namespace_, event->id,
                                             event->pid)
                            : shimwatch_publisher_task_exit_args (event->path, event->namespace_,
                                                                  event->id, event->pid,
                                                                  event->exit_status,
                                                                  (guint64) event->exited_at));
  if (self->history != NULL)
    shimwatch_history_add_task_event (self->history, event->namespace_, event->id,
                                      lifecycle_signals[i].event, event->pid, !disconnected,
                                      disconnected ? 0 : event->exit_status, event->reason);
  return marked;
}

void
shimwatch_publisher_emit_task_create (ShimwatchPublisher *self,
                                      const char         *path,
                                      const char         *namespace_,
                                      const char         *id,
                                      const char         *bundle,
                                      guint32             pid)
{
  shimwatch_publisher_emit (self, "TaskCreate",
                            g_variant_new ("(osssu)", path, namespace_, id, bundle, pid));
}

void
shimwatch_publisher_emit_task_start (ShimwatchPublisher *self,
                                     const char         *path,
                                     const char         *namespace_,
                                     const char         *id,
                                     guint32             pid)
{
  shimwatch_publisher_emit (self, "TaskStart",
                            g_variant_new ("(ossu)", path, namespace_, id, pid));
}

void
shimwatch_publisher_emit_task_oom (ShimwatchPublisher *self,
                                   const char         *path,
                                   const char         *namespace_,
                                   const char         *id)
{
  shimwatch_publisher_emit (self, "TaskOOM", g_variant_new ("(oss)", path, namespace_, id));
}

GVariant *
shimwatch_publisher_task_exit_args (const char *path,
                                    const char *namespace_,
                                    const char *id,
                                    guint32     pid,
                                    guint32     exit_status,
                                    guint64     exited_at)
{
  /* the members as they are: no format string parsed, no va_list walked */
  GVariant *members[] = {
    g_variant_new_object_path (path),
    g_variant_new_string (namespace_),
    g_variant_new_string (id),
    g_variant_new_string (id),
    g_variant_new_uint32 (pid),
    g_variant_new_uint32 (exit_status),
    g_variant_new_uint64 (exited_at),
  };

  return g_variant_new_tuple (members, G_N_ELEMENTS (members));
}

ShimwatchSignalLedger *
shimwatch_publisher_get_ledger (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->ledger;
}

const char *
shimwatch_publisher_get_records_dir (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->records_dir;
}

ShimwatchRecordCommitter *
shimwatch_publisher_get_committer (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->committer;
}

ShimwatchHistory *
shimwatch_publisher_get_history (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->history;
}

void
shimwatch_publisher_set_metrics (ShimwatchPublisher *self,
                                 ShimwatchMetrics   *metrics)
{
  g_return_if_fail (SHIMWATCH_IS_PUBLISHER (self));
  g_set_object (&self->metrics, metrics);
}

ShimwatchMetrics *
shimwatch_publisher_get_metrics (ShimwatchPublisher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_PUBLISHER (self), NULL);
  return self->metrics;
}

static void
shimwatch_publisher_finalize (GObject *object)
{
  ShimwatchPublisher *self = SHIMWATCH_PUBLISHER (object);

  if (self->connection != NULL)
    g_dbus_connection_remove_filter (self->connection, self->filter_id);
  /* what is still queued is synced */
  g_clear_pointer (&self->committer, shimwatch_record_committer_free);
  g_clear_object (&self->connection);
  g_clear_pointer (&self->ledger, shimwatch_signal_ledger_unref);
  g_clear_object (&self->history);
  g_clear_object (&self->metrics);
  g_free (self->records_dir);
  g_ptr_array_unref (self->kept_types);
  G_OBJECT_CLASS (shimwatch_publisher_parent_class)->finalize (object);
}

static void
shimwatch_publisher_class_init (ShimwatchPublisherClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_publisher_finalize;
}

static void
shimwatch_publisher_init (ShimwatchPublisher *self)
{
  self->ledger = shimwatch_signal_ledger_new (SHIMWATCH_DBUS_MANAGER_IFACE);
  self->kept_types = g_ptr_array_new_full (G_N_ELEMENTS (kept_types),
                                           (GDestroyNotify) g_variant_unref);
  for (guint i = 0; i < G_N_ELEMENTS (kept_types); i++)
    g_ptr_array_add (self->kept_types,
                     g_variant_ref_sink (g_variant_new_maybe (G_VARIANT_TYPE (kept_types[i]),
                                                              NULL)));
}
