/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchManager: start-up (records, shims reached again) and orphaned task state
 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <glib/gstdio.h>

#include "shimwatch-bundle.h"
#include "shimwatch-error.h"
#include "shimwatch-events-server.h"
#include "shimwatch-file.h"
#include "shimwatch-log-store.h"
#include "shimwatch-history.h"
#include "shimwatch-manager-private.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-records.h"
#include "shimwatch-shim.h"
#include "shimwatch-stdio.h"
#include "shimwatch-task-object.h"

/* a shim binary is run as root: only a containerd-shim-* from the configured runtime
 * directories, whatever a file on disk names */
static gboolean
trusted_shim_binary (ShimwatchManager *self,
                     const char       *binary)
{
  g_autofree char *dir = g_path_get_dirname (binary);
  g_autofree char *base = g_path_get_basename (binary);

  return g_path_is_absolute (binary) && g_str_has_prefix (base, "containerd-shim-") &&
         g_strv_contains ((const char * const *) self->config->runtime_path, dir) &&
         g_file_test (binary, G_FILE_TEST_IS_REGULAR) &&
         g_file_test (binary, G_FILE_TEST_IS_EXECUTABLE);
}

/* a small file in a task directory (the shim writes some), read without trusting it */
static char *
read_task_file (const char *task_dir,
                const char *name)
{
  g_autofree char *path = g_build_filename (task_dir, name, NULL);
  char *contents = shimwatch_read_regular_file_at (AT_FDCWD, path, 4096, SHIMWATCH_FILE_NONE,
                                                   NULL, NULL, NULL);

  return contents != NULL ? g_strstrip (contents) : NULL;
}

static gboolean
task_file_exists (const char *task_dir,
                  const char *name)
{
  g_autofree char *path = g_build_filename (task_dir, name, NULL);
  GStatBuf st;

  return g_lstat (path, &st) == 0;
}

/* the cgroup named in a task directory's config.json (we wrote it there), when it is a
 * valid one that no supervised task uses; NULL otherwise */
static char *
task_cgroup_from_dir (ShimwatchManager *self,
                      const char       *task_dir)
{
  g_autofree char *config = g_build_filename (task_dir, "config.json", NULL);
  g_autofree char *contents = NULL;
  g_autofree char *runc_path = NULL;
  g_autofree char *path = NULL;
  g_autoptr(GBytes) rewritten = NULL;
  gsize length = 0;

  contents = shimwatch_read_regular_file_at (AT_FDCWD, config, SHIMWATCH_BUNDLE_CONFIG_MAX,
                                             SHIMWATCH_FILE_NONE, &length, NULL, NULL);
  if (contents == NULL)
    return NULL;
  rewritten = shimwatch_wire_rewrite_oci_config (contents, length, task_dir, NULL, &runc_path,
                                                 NULL);
  if (rewritten == NULL || runc_path == NULL)
    return NULL;
  path = shimwatch_cgroup_resolve (self->cgroups, runc_path, NULL);
  if (path == NULL || shimwatch_manager_cgroup_user (self, path) != NULL)
    return NULL;
  return g_steal_pointer (&path);
}

/* state on disk that no supervised task owns (a task directory without a record, a broken
 * record, leftovers of a failed cleanup): cleaned like a dead shim's, without events since
 * nothing says the task was ever handed to a client. FALSE if there is nothing. */
gboolean
shimwatch_manager_start_orphan_cleanup (ShimwatchManager    *self,
                                        const char          *namespace_,
                                        const char          *id,
                                        guint                timeout_ms,
                                        GAsyncReadyCallback  callback,
                                        gpointer             user_data)
{
  g_autofree char *task_dir = shimwatch_manager_task_dir_for (self, namespace_, id);
  g_autofree char *runc_state = g_build_filename (self->runc_root, namespace_, id, NULL);
  g_autofree char *binary = NULL;
  g_autofree char *address = NULL;
  g_autofree char *cgroup_path = NULL;
  ShimwatchCleanupRequest *request;
  guint killed = 0;

  if (!g_file_test (task_dir, G_FILE_TEST_IS_DIR) && !g_file_test (runc_state, G_FILE_TEST_IS_DIR))
    return FALSE;

  binary = read_task_file (task_dir, "shim-binary-path");
  if (binary != NULL && !trusted_shim_binary (self, binary))
    g_clear_pointer (&binary, g_free);
  /* the task's cgroup, as its config.json names it */
  cgroup_path = task_cgroup_from_dir (self, task_dir);
  /* a shim that may still run there: nobody supervises it, so it goes. Without its pid
   * only a look at every process's working directory finds it: the rare case of a task
   * directory without a record, never the path of a supervised shim's death. */
  if (g_file_test (task_dir, G_FILE_TEST_IS_DIR))
    killed = shimwatch_cleanup_kill_processes_in (task_dir);

  request = shimwatch_cleanup_request_new ();
  request->namespace_ = g_strdup (namespace_);
  request->id = g_strdup (id);
  request->task_dir = g_steal_pointer (&task_dir);
  request->shim_binary = g_steal_pointer (&binary);
  request->runc_state_dir = g_steal_pointer (&runc_state);
  request->cgroup_path = g_steal_pointer (&cgroup_path);
  request->kill_cgroup = request->cgroup_path != NULL;
  /* the 1.6 shim writes its address into the task dir; its socket file is ours to remove */
  address = read_task_file (request->task_dir, "address");
  if (address != NULL && g_str_has_prefix (address, "unix:///run/containerd/s/") &&
      strstr (address, "/..") == NULL)
    request->socket_path = g_strdup (address + strlen ("unix://"));
  request->timeout_ms = timeout_ms;
  /* A task directory that never got as far as a shim (a create that failed while it was
   * being written, e.g. on a full disk, by a version that left it behind): the shim's
   * binary is written before any shim starts, and runc's state before any container.
   * Without either, and with nothing found running there, there is nothing to delete:
   * the directory goes as after a delete. */
  if (!g_file_test (request->runc_state_dir, G_FILE_TEST_EXISTS) && killed == 0 &&
      address == NULL && !task_file_exists (request->task_dir, "shim-binary-path"))
    request->deleted = TRUE;
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE,
                      (&(ShimwatchLogTask) { .namespace_ = namespace_, .id = id,
                                             .event = "orphan" }),
                      "cleaning state no supervised task owns%s",
                      killed > 0 ? " (killed its shim)" : "");
  shimwatch_cleanup_run_async (self->cleanup, request, NULL, NULL, callback, user_data);
  return TRUE;
}


/* -- start-up: take over what an earlier run left ------------------------------------- */

static void
load_done (ShimwatchManager *self)
{
  if (--self->n_loading > 0)
    return;
  g_message ("all recorded tasks are loaded: %u supervised", g_hash_table_size (self->shims));
  /* what earlier runs left: the namespace parents of tasks cleaned up at start-up */
  shimwatch_manager_remove_all_unused_cgroup_parents (self);
  /* and runc's directories of namespaces without a task */
  {
    g_autoptr(GDir) runc = g_dir_open (self->runc_root, 0, NULL);
    const char *name;

    while (runc != NULL && (name = g_dir_read_name (runc)) != NULL)
      if (shimwatch_identifier_validate ("namespace", name, NULL))
        shimwatch_manager_remove_unused_runc_dir (self, name);
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
  g_autofree char *task_dir = shimwatch_manager_task_dir_for (self, record->namespace_, record->id);
  g_autofree char *address = NULL;

  if (!g_str_equal (record->task_dir, task_dir))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "its task directory %s is not %s", record->task_dir, task_dir);
      return FALSE;
    }
  if (record->shim_binary[0] != '\0' && !trusted_shim_binary (self, record->shim_binary))
    {
      g_warning ("%s/%s: the recorded shim %s is not an executable containerd-shim-* in the "
                 "runtime directories; it is not run", record->namespace_, record->id,
                 record->shim_binary);
      record->shim_binary[0] = '\0';
    }
  if (record->address[0] != '\0')
    {
      /* the address the shim itself wrote into its task directory, or none */
      address = read_task_file (task_dir, "address");
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

  if (g_hash_table_contains (self->shims, key) || record->delete_emitted)
    return;      /* one whose TaskDelete went out: only files are left (reach_shims) */

  /* the object appears now, as the record describes the task; its shim is reached once
   * the name is owned, and calls that need the shim wait until then */
  {
    ShimwatchShimServices services = shimwatch_manager_shim_services (self);

    shim = shimwatch_shim_new_from_record (&services, record);
  }
  /* its output is drained again at once: a full FIFO would block the task */
  {
    g_autoptr(ShimwatchTaskLog) task_log = shimwatch_log_store_reopen (self->logs,
                                                                       record->namespace_,
                                                                       record->id,
                                                                       record->task_dir);

    shimwatch_shim_set_task_log (shim, task_log);
  }
  g_hash_table_insert (self->shims, g_strdup (key), g_object_ref (shim));
  if (shimwatch_shim_get_cgroup_path (shim) != NULL)
    shimwatch_cgroup_claims_set (self->cgroup_users, shimwatch_shim_get_cgroup_path (shim), key);
  g_signal_connect (shim, "disconnected", G_CALLBACK (shimwatch_manager_shim_disconnected_cb), self);
  g_signal_connect (shim, "finished", G_CALLBACK (shimwatch_manager_shim_finished_cb), self);
  shimwatch_manager_export_shim (self, shim);
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
  shimwatch_manager_update_shim_count (self);
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

      if (!record->delete_emitted || g_hash_table_contains (self->shims, key))
        continue;
      self->n_loading++;
      if (!shimwatch_manager_start_orphan_cleanup (self, record->namespace_, record->id,
                                                   self->config->cleanup_timeout_ms, orphan_done_cb, self))
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
          if (!shimwatch_manager_start_orphan_cleanup (self, ns, id, self->config->cleanup_timeout_ms,
                                                       orphan_done_cb, self))
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
