/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchContainerd"

#include "config.h"

#include "shimwatch-containerd.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <sys/stat.h>

#include "shimwatch-containerd-config.h"
#include "shimwatch-containerd-connection.h"
#include "shimwatch-containerd-watcher.h"
#include "shimwatch-records.h"
#include "shimwatch-task-object.h"

struct _ShimwatchContainerd
{
  GObject                     parent_instance;

  ShimwatchConfig            *config;
  ShimwatchContainerdEnv      env;
  ShimwatchRecordCommitter   *committer;
  char                       *records_dir;
  char                       *ttrpc_address;
  GDBusObjectManagerServer   *object_manager;
  ShimwatchContainerdWatcher *watcher;
  GHashTable                 *tasks;        /* "ns/id" → ShimwatchContainerdTask */
  GHashTable                 *connections;  /* address → ShimwatchContainerdConnection */
  GHashTable                 *done;         /* "ns/id" → record path: TaskDelete went out, bundle left */
};

enum {
  SIGNAL_DISCONNECTED,
  SIGNAL_FINISHED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

G_DEFINE_TYPE (ShimwatchContainerd, shimwatch_containerd, G_TYPE_OBJECT)

ShimwatchContainerdTask *
shimwatch_containerd_lookup (ShimwatchContainerd *self,
                             const char          *namespace_,
                             const char          *id)
{
  g_autofree char *key = NULL;

  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD (self), NULL);

  key = shimwatch_task_key (namespace_, id);
  return g_hash_table_lookup (self->tasks, key);
}

void
shimwatch_containerd_list (ShimwatchContainerd *self,
                           GPtrArray           *paths)
{
  GHashTableIter iter;
  ShimwatchContainerdTask *task;

  g_return_if_fail (SHIMWATCH_IS_CONTAINERD (self));

  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &task))
    g_ptr_array_add (paths, g_strdup (shimwatch_containerd_task_get_path (task)));
}

void
shimwatch_containerd_count_tasks (ShimwatchContainerd *self,
                                  GHashTable          *supervised)
{
  GHashTableIter iter;
  ShimwatchContainerdTask *task;

  g_return_if_fail (SHIMWATCH_IS_CONTAINERD (self));

  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &task))
    {
      char *key = g_strconcat ("containerd\n", shimwatch_containerd_task_get_namespace (task),
                               NULL);

      g_hash_table_insert (supervised, key,
                           GUINT_TO_POINTER (GPOINTER_TO_UINT (g_hash_table_lookup (supervised,
                                                                                    key)) + 1));
    }
}

guint
shimwatch_containerd_get_n_tasks (ShimwatchContainerd *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD (self), 0);

  return g_hash_table_size (self->tasks);
}

/* -- tasks ----------------------------------------------------------------------------- */

static void
drop_connection_task (ShimwatchContainerd     *self,
                      ShimwatchContainerdTask *task)
{
  const char *address =
    shimwatch_dbus_shim_get_address (SHIMWATCH_DBUS_SHIM (task));
  ShimwatchContainerdConnection *connection;

  if (address == NULL || *address == '\0')
    return;
  connection = g_hash_table_lookup (self->connections, address);
  if (connection == NULL)
    return;
  shimwatch_containerd_connection_remove_task (connection, shimwatch_containerd_task_get_id (task));
  if (shimwatch_containerd_connection_get_n_tasks (connection) == 0)
    {
      g_signal_handlers_disconnect_by_data (connection, self);
      shimwatch_containerd_connection_close (connection);
      g_hash_table_remove (self->connections, address);
    }
}

static void
task_disconnected_cb (ShimwatchContainerdTask *task,
                      ShimwatchContainerd     *self)
{
  g_signal_emit (self, signals[SIGNAL_DISCONNECTED], 0);
}

static void
task_finished_cb (ShimwatchContainerdTask *task,
                  gboolean                 took_over,
                  gboolean                 cleanup_failed,
                  ShimwatchContainerd     *self)
{
  g_autoptr(ShimwatchContainerdTask) keep G_GNUC_UNUSED = g_object_ref (task);
  g_autofree char *key = shimwatch_task_key (shimwatch_containerd_task_get_namespace (task),
                                             shimwatch_containerd_task_get_id (task));
  gboolean bundle_left = g_file_test (shimwatch_containerd_task_get_bundle (task),
                                      G_FILE_TEST_EXISTS);

  g_signal_handlers_disconnect_by_data (task, self);
  drop_connection_task (self, task);
  /* after TaskDelete: InterfacesRemoved */
  g_dbus_object_manager_server_unexport (self->object_manager,
                                         shimwatch_containerd_task_get_path (task));
  g_hash_table_remove (self->tasks, key);
  /* a bundle our takeover could not remove: not a new task when it is seen again */
  if (bundle_left && took_over)
    g_hash_table_add (self->done, g_strdup (key));
  g_signal_emit (self, signals[SIGNAL_FINISHED], 0, shimwatch_containerd_task_get_namespace (task),
                 shimwatch_containerd_task_get_id (task),
                 shimwatch_containerd_task_get_exit_status (task), took_over, cleanup_failed);
}

static void
add_task (ShimwatchContainerd     *self,
          ShimwatchContainerdTask *task)
{
  char *key = shimwatch_task_key (shimwatch_containerd_task_get_namespace (task),
                                  shimwatch_containerd_task_get_id (task));

  g_hash_table_insert (self->tasks, key, task);
  g_signal_connect (task, "disconnected", G_CALLBACK (task_disconnected_cb), self);
  g_signal_connect (task, "finished", G_CALLBACK (task_finished_cb), self);
  shimwatch_task_object_export (self->object_manager, shimwatch_containerd_task_get_path (task),
                                SHIMWATCH_DBUS_SHIM (task));
}

/* -- connections ----------------------------------------------------------------------- */

typedef void (*TaskFunc) (ShimwatchContainerdTask *task,
                          gpointer                 data);

static void
for_tasks_of (ShimwatchContainerd           *self,
              ShimwatchContainerdConnection *connection,
              TaskFunc                       func,
              gpointer                       data)
{
  g_autoptr(GPtrArray) matching = g_ptr_array_new_with_free_func (g_object_unref);
  const char *address = shimwatch_containerd_connection_get_address (connection);
  GHashTableIter iter;
  ShimwatchContainerdTask *task;

  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &task))
    if (g_strcmp0 (shimwatch_dbus_shim_get_address (SHIMWATCH_DBUS_SHIM (task)), address) == 0)
      g_ptr_array_add (matching, g_object_ref (task));
  /* a callback may finish (and drop) a task */
  for (guint i = 0; i < matching->len; i++)
    func (g_ptr_array_index (matching, i), data);
}

static void
task_connected_cb (ShimwatchContainerdConnection *connection,
                   const char                    *namespace_,
                   const char                    *id,
                   guint                          shim_pid,
                   guint                          task_pid,
                   ShimwatchContainerd           *self)
{
  ShimwatchContainerdTask *task = shimwatch_containerd_lookup (self, namespace_, id);

  if (task != NULL)
    shimwatch_containerd_task_connected (task, shim_pid, task_pid);
}

static void
task_exited_cb (ShimwatchContainerdConnection *connection,
                const char                    *namespace_,
                const char                    *id,
                guint                          pid,
                guint                          exit_status,
                gint64                         exited_at,
                ShimwatchContainerd           *self)
{
  ShimwatchContainerdTask *task = shimwatch_containerd_lookup (self, namespace_, id);

  if (task != NULL)
    shimwatch_containerd_task_exited (task, pid, exit_status, exited_at);
}

static void
task_unknown_cb (ShimwatchContainerdConnection *connection,
                 const char                    *namespace_,
                 const char                    *id,
                 ShimwatchContainerd           *self)
{
  /* deleted while its shim runs on (a grouped shim): its bundle goes next, which is what
   * tells TaskDelete */
  g_debug ("containerd: the shim does not know %s/%s (any more)", namespace_, id);
}

static void
died_func (ShimwatchContainerdTask *task,
           gpointer                 data)
{
  shimwatch_containerd_task_shim_died (task, GPOINTER_TO_UINT (data));
}

static void
shim_died_cb (ShimwatchContainerdConnection *connection,
              guint                          shim_pid,
              ShimwatchContainerd           *self)
{
  for_tasks_of (self, connection, died_func, GUINT_TO_POINTER (shim_pid));
}

static void
exited_func (ShimwatchContainerdTask *task,
             gpointer                 data)
{
  shimwatch_containerd_task_shim_exited (task);
}

static void
shim_exited_cb (ShimwatchContainerdConnection *connection,
                ShimwatchContainerd           *self)
{
  for_tasks_of (self, connection, exited_func, NULL);
}

static ShimwatchContainerdConnection *
connection_for (ShimwatchContainerd *self,
                const char          *address,
                const char          *bundle)
{
  ShimwatchContainerdConnection *connection = g_hash_table_lookup (self->connections, address);
  g_autofree char *bootstrap = NULL;

  if (connection != NULL)
    return connection;
  /* containerd 2.x bundles carry bootstrap.json (Task API v3); 1.x ones speak v2 */
  bootstrap = g_build_filename (bundle, "bootstrap.json", NULL);
  connection = shimwatch_containerd_connection_new (address,
                                                    g_file_test (bootstrap, G_FILE_TEST_EXISTS) ? 3 : 2);
  g_signal_connect (connection, "task-connected", G_CALLBACK (task_connected_cb), self);
  g_signal_connect (connection, "task-exited", G_CALLBACK (task_exited_cb), self);
  g_signal_connect (connection, "task-unknown", G_CALLBACK (task_unknown_cb), self);
  g_signal_connect (connection, "shim-died", G_CALLBACK (shim_died_cb), self);
  g_signal_connect (connection, "shim-exited", G_CALLBACK (shim_exited_cb), self);
  g_hash_table_insert (self->connections, g_strdup (address), connection);
  return connection;
}

/* -- the watcher ----------------------------------------------------------------------- */

static void
bundle_ready_cb (ShimwatchContainerdWatcher *watcher,
                 const char                 *namespace_,
                 const char                 *id,
                 const char                 *bundle,
                 ShimwatchContainerd        *self)
{
  g_autofree char *key = shimwatch_task_key (namespace_, id);
  g_autofree char *address_file = g_build_filename (bundle, "address", NULL);
  g_autofree char *address = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchContainerdTask *task;
  ShimwatchContainerdConnection *connection;

  if (g_hash_table_contains (self->done, key))
    return;
  if (!g_file_get_contents (address_file, &address, NULL, &error))
    {
      g_message ("containerd: %s/%s: %s", namespace_, id, error->message);
      return;
    }
  g_strstrip (address);
  if (!g_str_has_prefix (address, "unix://"))
    {
      /* vsock and the like: nothing a companion on this host can reach */
      g_message ("containerd: %s/%s: shim address %s is not a unix socket; not watched",
                 namespace_, id, address);
      return;
    }
  task = g_hash_table_lookup (self->tasks, key);
  if (task == NULL)
    {
      task = shimwatch_containerd_task_new (&self->env, namespace_, id, bundle);
      add_task (self, task);
      g_message ("containerd: %s/%s discovered (%s)", namespace_, id, bundle);
    }
  connection = connection_for (self, address, bundle);
  shimwatch_containerd_task_attach (task, connection);
  shimwatch_containerd_connection_add_task (connection, namespace_, id);
}

static void
bundle_removed_cb (ShimwatchContainerdWatcher *watcher,
                   const char                 *namespace_,
                   const char                 *id,
                   ShimwatchContainerd        *self)
{
  g_autofree char *key = shimwatch_task_key (namespace_, id);
  ShimwatchContainerdTask *task = g_hash_table_lookup (self->tasks, key);

  if (g_hash_table_remove (self->done, key))
    shimwatch_record_committer_remove (self->committer, namespace_, id);
  if (task != NULL)
    shimwatch_containerd_task_bundle_removed (task);
}

/* -- start and stop -------------------------------------------------------------------- */

/* what an earlier run left: tasks still there are known again with the signals they had;
 * a task whose bundle went while the service was down gets what it still lacks now */
static void
load_records (ShimwatchContainerd *self)
{
  g_autoptr(GPtrArray) broken = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) records = shimwatch_records_load (self->records_dir, broken);
  g_autoptr(GPtrArray) gone = g_ptr_array_new_with_free_func (g_object_unref);

  for (guint i = 0; i < records->len; i++)
    {
      ShimwatchRecord *record = g_ptr_array_index (records, i);
      g_autofree char *bundle = shimwatch_containerd_watcher_bundle_path (self->watcher,
                                                                          record->namespace_,
                                                                          record->id);
      gboolean present = g_file_test (bundle, G_FILE_TEST_IS_DIR);
      ShimwatchContainerdTask *task;

      /* a namespace no longer watched: its record waits, untouched */
      if (!shimwatch_containerd_watcher_wants (self->watcher, record->namespace_))
        continue;
      if (g_strcmp0 (record->owner, SHIMWATCH_OWNER_CONTAINERD) != 0 ||
          g_strcmp0 (record->task_dir, bundle) != 0)
        {
          /* written for another containerd (state directory changed): not ours now */
          shimwatch_records_set_aside (self->records_dir, record->namespace_, record->id,
                                       "the record is for another containerd state directory");
          continue;
        }
      if (record->delete_emitted)
        {
          if (present)
            g_hash_table_add (self->done, shimwatch_task_key (record->namespace_, record->id));
          else
            shimwatch_record_committer_remove (self->committer, record->namespace_, record->id);
          continue;
        }
      task = shimwatch_containerd_task_new_from_record (&self->env, record);
      add_task (self, task);
      if (!present)
        g_ptr_array_add (gone, g_object_ref (task));
    }
  for (guint i = 0; i < broken->len; i++)
    g_warning ("containerd: the record of %s could not be read; set aside",
               (char *) g_ptr_array_index (broken, i));
  for (guint i = 0; i < gone->len; i++)
    shimwatch_containerd_task_bundle_removed (g_ptr_array_index (gone, i));
}

gboolean
shimwatch_containerd_start (ShimwatchContainerd  *self,
                            GError              **error)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD (self), FALSE);

  g_message ("containerd companion: watching %s/%s (containerd at %s, cleanup timeout %u ms "
             "+ Grace %u ms)", self->config->containerd_state_dir, SHIMWATCH_CONTAINERD_TASK_DIR,
             self->config->containerd_address, self->env.cleanup_timeout_ms, self->env.grace_ms);
  load_records (self);
  return shimwatch_containerd_watcher_start (self->watcher, error);
}

void
shimwatch_containerd_shutdown (ShimwatchContainerd *self)
{
  GHashTableIter iter;
  gpointer value;

  g_return_if_fail (SHIMWATCH_IS_CONTAINERD (self));

  shimwatch_containerd_watcher_stop (self->watcher);
  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    shimwatch_containerd_task_detach (value);
  g_hash_table_iter_init (&iter, self->connections);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      g_signal_handlers_disconnect_by_data (value, self);
      shimwatch_containerd_connection_close (value);
    }
}

gboolean
shimwatch_containerd_records_settled (ShimwatchContainerd *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD (self), TRUE);

  return shimwatch_record_committer_is_idle (self->committer);
}

ShimwatchContainerd *
shimwatch_containerd_new (const ShimwatchConfig    *config,
                          ShimwatchPublisher       *publisher,
                          GDBusObjectManagerServer *object_manager,
                          GDBusConnection          *connection,
                          ShimwatchSignalLedger    *ledger,
                          ShimwatchHistory         *history,
                          GError                  **error)
{
  g_autoptr(ShimwatchContainerd) self = g_object_new (SHIMWATCH_TYPE_CONTAINERD, NULL);
  ShimwatchLauncherConfig launcher_config = { 0 };
  g_autoptr(ShimwatchLauncher) launcher = NULL;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (SHIMWATCH_IS_HISTORY (history), NULL);

  self->config = shimwatch_config_copy (config);
  self->records_dir = g_build_filename (config->runtime_dir, "containerd-records", NULL);
  if (g_mkdir_with_parents (self->records_dir, 0700) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "%s: %s",
                   self->records_dir, g_strerror (saved_errno));
      return NULL;
    }
  self->object_manager = g_object_ref (object_manager);
  self->watcher = shimwatch_containerd_watcher_new (
    self->config->containerd_state_dir, (const char * const *) self->config->containerd_namespaces);
  g_signal_connect (self->watcher, "bundle-ready", G_CALLBACK (bundle_ready_cb), self);
  g_signal_connect (self->watcher, "bundle-removed", G_CALLBACK (bundle_removed_cb), self);

  /* `shim delete` for a takeover runs as containerd runs it: with its addresses */
  self->ttrpc_address = g_strconcat (self->config->containerd_address, ".ttrpc", NULL);
  launcher_config.runtime_dirs = (const char * const *) self->config->runtime_path;
  launcher_config.shim_address = self->config->containerd_address;
  launcher_config.ttrpc_address = self->ttrpc_address;
  launcher_config.runc_root = NULL;

  /* records of containerd's tasks apart from the service's own, written and marked as
   * theirs are */
  self->committer = shimwatch_record_committer_new (self->records_dir, ledger);
  if (connection != NULL)
    shimwatch_record_committer_set_connection (self->committer, connection);
  self->env.publisher = publisher;
  self->env.manager = shimwatch_publisher_get_signals (publisher);
  self->env.committer = self->committer;
  self->env.history = g_object_ref (history);
  launcher = shimwatch_launcher_new (&launcher_config);
  /* The takeovers are cleanups of their own kind (containerd's bundles), in a cleanup of
   * their own: its `shim delete` runs with containerd's addresses, which a launcher holds
   * for all it runs, and it needs no cgroups. As many at once as the service's own
   * cleanups (CleanupConcurrency), in a queue apart: a burst of containerd's deaths with
   * containerd down waits behind none of the service's own, nor holds them up. */
  self->env.cleanup = shimwatch_cleanup_new (launcher, NULL, self->config->cleanup_concurrency);
  self->env.runtime_dirs = (const char * const *) self->config->runtime_path;
  self->env.containerd_socket = self->config->containerd_address;
  self->env.cleanup_timeout_ms =
    shimwatch_containerd_config_cleanup_timeout_ms (self->config->containerd_config);
  self->env.grace_ms = self->config->containerd_grace_ms;
  self->env.delete_timeout_ms = self->config->cleanup_timeout_ms;
  return g_steal_pointer (&self);
}

static void
shimwatch_containerd_dispose (GObject *object)
{
  ShimwatchContainerd *self = SHIMWATCH_CONTAINERD (object);

  if (self->watcher != NULL)
    {
      g_signal_handlers_disconnect_by_data (self->watcher, self);
      shimwatch_containerd_watcher_stop (self->watcher);
    }
  if (self->connections != NULL)
    {
      GHashTableIter iter;
      gpointer value;

      g_hash_table_iter_init (&iter, self->connections);
      while (g_hash_table_iter_next (&iter, NULL, &value))
        g_signal_handlers_disconnect_by_data (value, self);
      g_hash_table_remove_all (self->connections);
    }
  if (self->tasks != NULL)
    {
      GHashTableIter iter;
      gpointer value;

      g_hash_table_iter_init (&iter, self->tasks);
      while (g_hash_table_iter_next (&iter, NULL, &value))
        {
          g_signal_handlers_disconnect_by_data (value, self);
          shimwatch_containerd_task_detach (value);
        }
      g_hash_table_remove_all (self->tasks);
    }
  g_clear_object (&self->watcher);
  g_clear_object (&self->object_manager);

  G_OBJECT_CLASS (shimwatch_containerd_parent_class)->dispose (object);
}

static void
shimwatch_containerd_finalize (GObject *object)
{
  ShimwatchContainerd *self = SHIMWATCH_CONTAINERD (object);

  g_hash_table_unref (self->tasks);
  g_hash_table_unref (self->connections);
  g_hash_table_unref (self->done);
  /* a takeover under way holds the cleanup, and finishes */
  g_clear_object (&self->env.cleanup);
  g_clear_object (&self->env.history);
  g_clear_pointer (&self->committer, shimwatch_record_committer_free);
  g_free (self->records_dir);
  g_free (self->ttrpc_address);
  shimwatch_config_free (self->config);

  G_OBJECT_CLASS (shimwatch_containerd_parent_class)->finalize (object);
}

static void
shimwatch_containerd_class_init (ShimwatchContainerdClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_containerd_dispose;
  object_class->finalize = shimwatch_containerd_finalize;

  /* a task's ShimDisconnected went out */
  signals[SIGNAL_DISCONNECTED] =
    g_signal_new ("disconnected", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 0);
  /* (namespace, id, exit status, took over, cleanup failed): a task's TaskDelete went out */
  signals[SIGNAL_FINISHED] =
    g_signal_new ("finished", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 5, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_UINT,
                  G_TYPE_BOOLEAN, G_TYPE_BOOLEAN);
}

static void
shimwatch_containerd_init (ShimwatchContainerd *self)
{
  self->tasks = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);
  self->connections = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);
  self->done = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
}
