/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchManager: start-up (records loaded, shims reached again, orphans cleaned)
 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <string.h>
#include <time.h>

#include "shimwatch-log-store.h"
#include "shimwatch-manager-private.h"
#include "shimwatch-records.h"
#include "shimwatch-shim.h"
#include "shimwatch-task-object.h"

/* -- start-up: take over what an earlier run left ------------------------------------- */

static void
load_done (ShimwatchManager *self)
{
  if (--self->n_loading > 0)
    return;
  g_message ("all recorded tasks are loaded: %u supervised",
             g_hash_table_size (self->tasks->shims));
  /* what earlier runs left: the namespace parents of tasks cleaned up at start-up */
  shimwatch_task_table_remove_all_unused_cgroup_parents (self->tasks);
  /* and runc's directories of namespaces without a task */
  {
    g_autoptr(GDir) runc = g_dir_open (self->runc_root, 0, NULL);
    const char *name;

    while (runc != NULL && (name = g_dir_read_name (runc)) != NULL)
      if (shimwatch_identifier_validate ("namespace", name, NULL))
        shimwatch_task_table_remove_unused_runc_dir (self->tasks, name);
  }
}

typedef struct {
  ShimwatchManager *self;     /* not owned: waits for every shim it reaches (n_loading) */
  ShimwatchShim    *shim;
} ReachData;

static void
load_connected_cb (GObject      *source,
                   GAsyncResult *result,
                   gpointer      user_data)
{
  g_autofree ReachData *reach = user_data;
  g_autoptr(ShimwatchShim) shim = reach->shim;
  ShimwatchManager *self = reach->self;
  g_autoptr(GError) error = NULL;
  ShimwatchShimHandle *handle;

  handle = shimwatch_launcher_connect_finish (SHIMWATCH_LAUNCHER (source), result, &error);
  if (handle != NULL)
    shimwatch_shim_readopt (shim, handle);
  else
    shimwatch_shim_mark_dead (shim, error->message);
  load_done (self);
}

static void
orphan_done_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  g_autoptr(ShimwatchCleanupResult) outcome = NULL;

  outcome = shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);
  load_done (user_data);
}

/* Every path in a record is checked as a caller's input would be: a record is a file on
 * disk, not a promise. FALSE (and why) when it cannot be this task's record at all; a
 * shim binary or address that does not hold is dropped, with a warning, and the task is
 * still taken over (its signals are owed to clients), as one without them. */
static gboolean
record_trusted (ShimwatchManager  *self,
                ShimwatchRecord   *record,
                GError           **error)
{
  g_autofree char *task_dir = g_build_filename (self->tasks_dir, record->namespace_, record->id, NULL);
  g_autofree char *address = NULL;

  if (!g_str_equal (record->task_dir, task_dir))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "its task directory %s is not %s", record->task_dir, task_dir);
      return FALSE;
    }
  if (record->shim_binary[0] != '\0' &&
      !shimwatch_orphans_trusted_shim_binary (&self->orphans, record->shim_binary))
    {
      g_warning ("%s/%s: the recorded shim %s is not an executable containerd-shim-* in the "
                 "runtime directories; it is not run", record->namespace_, record->id,
                 record->shim_binary);
      record->shim_binary[0] = '\0';
    }
  if (record->address[0] != '\0')
    {
      /* the address the shim itself wrote into its task directory, or none */
      address = shimwatch_orphans_read_task_file (task_dir, "address");
      if (address == NULL || !g_str_equal (address, record->address) ||
          !g_str_has_prefix (address, "unix:///") || strstr (address, "/..") != NULL)
        {
          g_warning ("%s/%s: the recorded shim address %s is not the one in %s/address; "
                     "the shim is taken for gone", record->namespace_, record->id,
                     record->address, task_dir);
          record->address[0] = '\0';
        }
    }
  return TRUE;
}

static void
load_record (ShimwatchManager *self,
             ShimwatchRecord  *record)
{
  g_autofree char *key = shimwatch_task_key (record->namespace_, record->id);
  g_autoptr(ShimwatchShim) shim = NULL;

  if (g_hash_table_contains (self->tasks->shims, key) || record->delete_emitted)
    return;      /* one whose TaskDelete went out: only files are left (reach_shims) */

  /* the object appears now, as the record describes the task; its shim is reached once
   * the name is owned, and calls that need the shim wait until then */
  shim = shimwatch_shim_new_from_record (&self->shim_services, record);
  /* its output is drained again at once: a full FIFO would block the task */
  {
    g_autoptr(ShimwatchTaskLog) task_log = shimwatch_log_store_reopen (self->logs,
                                                                       record->namespace_,
                                                                       record->id,
                                                                       record->task_dir);

    shimwatch_shim_set_task_log (shim, task_log);
  }
  g_hash_table_insert (self->tasks->shims, g_strdup (key), g_object_ref (shim));
  if (shimwatch_shim_get_cgroup_path (shim) != NULL)
    shimwatch_cgroup_claims_set (self->tasks->cgroup_users, shimwatch_shim_get_cgroup_path (shim),
                                 key);
  shimwatch_task_table_watch (self->tasks, shim);
  shimwatch_task_table_export (self->tasks, shim);
  g_ptr_array_add (self->to_reach, g_steal_pointer (&shim));
}

void
shimwatch_manager_load (ShimwatchManager *self)
{
  gint64 started = g_get_monotonic_time ();
  struct timespec cpu_started, cpu_done;

  g_return_if_fail (SHIMWATCH_IS_MANAGER (self));
  g_return_if_fail (self->records == NULL);

  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &cpu_started);
  /* one pass over what is on disk now: no shim is contacted, nothing is sent */
  self->recorded = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->broken = g_ptr_array_new_with_free_func (g_free);
  self->to_reach = g_ptr_array_new_with_free_func (g_object_unref);
  self->records = shimwatch_records_load (self->records_dir, self->broken);
  for (guint i = 0; i < self->records->len; i++)
    {
      ShimwatchRecord *record = g_ptr_array_index (self->records, i);
      g_autoptr(GError) error = NULL;

      if (!record_trusted (self, record, &error))
        {
          /* as a broken one: its task directory, if any, is cleaned as an orphan later */
          shimwatch_records_set_aside (self->records_dir, record->namespace_, record->id,
                                       error->message);
          g_ptr_array_add (self->broken, shimwatch_task_key (record->namespace_, record->id));
          g_ptr_array_remove_index (self->records, i--);
          continue;
        }
      g_hash_table_add (self->recorded, shimwatch_task_key (record->namespace_, record->id));
      load_record (self, record);
    }
  /* All the objects go on the bus at once, without an InterfacesAdded each: nobody can
   * hear those yet. They would come from our unique name, and a client follows the well-
   * known one, which we do not own yet; it learns these objects from GetManagedObjects
   * once the name appears (as the D-Bus specification's ObjectManager says). */
  g_dbus_object_manager_server_set_connection (self->object_manager,
                                               shimwatch_publisher_get_connection (self->publisher));
  shimwatch_task_table_update_count (self->tasks);
  /* the CPU time too: on a busy machine the wall time says more of the others' load */
  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &cpu_done);
  g_message ("%u recorded tasks loaded in %.1f ms (%.1f ms of CPU); their shims are reached "
             "once the bus name is owned", self->to_reach->len,
             (double) (g_get_monotonic_time () - started) / 1000.0,
             (double) (cpu_done.tv_sec - cpu_started.tv_sec) * 1000.0 +
             (double) (cpu_done.tv_nsec - cpu_started.tv_nsec) / 1e6);
}

void
shimwatch_manager_reach_shims (ShimwatchManager *self)
{
  g_autoptr(GPtrArray) to_reach = NULL;
  g_autoptr(GPtrArray) records = NULL;
  g_autoptr(GPtrArray) broken = NULL;
  g_autoptr(GHashTable) recorded = NULL;
  g_autoptr(GDir) namespaces = NULL;
  const char *ns;

  g_return_if_fail (SHIMWATCH_IS_MANAGER (self));
  g_return_if_fail (self->records != NULL);

  to_reach = g_steal_pointer (&self->to_reach);
  records = g_steal_pointer (&self->records);
  broken = g_steal_pointer (&self->broken);
  recorded = g_steal_pointer (&self->recorded);
  self->n_loading++;
  /* every shim at once: each connect is asynchronous with its own deadline */
  for (guint i = 0; i < to_reach->len; i++)
    {
      ShimwatchShim *shim = g_ptr_array_index (to_reach, i);
      ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (shim);
      const char *address = shimwatch_dbus_shim_get_address (iface);

      self->n_loading++;
      if (address[0] == '\0')
        {
          shimwatch_shim_mark_dead (shim, "no shim address was recorded");
          load_done (self);
          continue;
        }
      {
        ReachData *reach = g_new0 (ReachData, 1);

        reach->self = self;
        reach->shim = g_object_ref (shim);
        shimwatch_launcher_connect_async (self->launcher, shimwatch_shim_get_namespace (shim),
                                          shimwatch_shim_get_id (shim),
                                          shimwatch_shim_get_task_dir (shim), address,
                                          load_connected_cb, reach);
      }
    }

  /* clients already heard the end of these: only files are left */
  for (guint i = 0; i < records->len; i++)
    {
      ShimwatchRecord *record = g_ptr_array_index (records, i);
      g_autofree char *key = shimwatch_task_key (record->namespace_, record->id);
      g_autoptr(GError) error = NULL;

      if (!record->delete_emitted || g_hash_table_contains (self->tasks->shims, key))
        continue;
      self->n_loading++;
      if (!shimwatch_orphans_start_cleanup (&self->orphans, record->namespace_, record->id,
                                            self->config->cleanup_timeout_ms, orphan_done_cb,
                                            self))
        load_done (self);
      if (!shimwatch_records_remove (self->records_dir, record->namespace_, record->id, &error))
        g_warning ("%s", error->message);
    }

  /* task directories that no record explains: their shim, if any, goes too */
  namespaces = g_dir_open (self->tasks_dir, 0, NULL);
  while (namespaces != NULL && (ns = g_dir_read_name (namespaces)) != NULL)
    {
      g_autofree char *ns_dir = g_build_filename (self->tasks_dir, ns, NULL);
      g_autoptr(GDir) tasks = g_dir_open (ns_dir, 0, NULL);
      const char *id;

      while (tasks != NULL && (id = g_dir_read_name (tasks)) != NULL)
        {
          g_autofree char *key = shimwatch_task_key (ns, id);
          g_autofree char *path = g_build_filename (ns_dir, id, NULL);
          g_autoptr(GError) error = NULL;

          if (id[0] == '.')
            {
              /* a task directory half deleted by an interrupted cleanup */
              g_autofree char *real = g_build_filename (ns_dir, id + 1, NULL);

              if (!shimwatch_cleanup_remove_task_dir (real, &error) ||
                  !shimwatch_cleanup_remove_task_dir (path, &error))
                g_warning ("%s: %s", path, error->message);
              continue;
            }
          if (g_hash_table_contains (recorded, key) ||
              !shimwatch_identifier_validate ("namespace", ns, NULL) ||
              !shimwatch_identifier_validate ("id", id, NULL))
            continue;
          g_message ("%s has no task record%s; cleaning it up", path,
                     g_ptr_array_find_with_equal_func (broken, key, g_str_equal, NULL)
                       ? " (it was broken)" : "");
          self->n_loading++;
          if (!shimwatch_orphans_start_cleanup (&self->orphans, ns, id,
                                                self->config->cleanup_timeout_ms, orphan_done_cb,
                                                self))
            load_done (self);
        }
    }
  /* every recorded task has its log again: the others age from now */
  shimwatch_log_store_start_expiry (self->logs);
  /* companion mode: containerd's tasks, once the name is ours */
  if (self->containerd != NULL)
    {
      g_autoptr(GError) error = NULL;

      if (!shimwatch_containerd_start (self->containerd, &error))
        g_warning ("containerd companion: %s", error->message);
    }
  load_done (self);
}
