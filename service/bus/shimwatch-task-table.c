/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskTable: the service's own tasks, their objects, their counters
 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <errno.h>
#include <glib/gstdio.h>

#include "shimwatch-task-object.h"
#include "shimwatch-task-table.h"
#include "shimwatch-wire.h"

ShimwatchTaskTable *
shimwatch_task_table_new (ShimwatchDbusManager     *bus,
                          GDBusObjectManagerServer *object_manager,
                          ShimwatchHistory         *history,
                          ShimwatchMetrics         *metrics,
                          ShimwatchCgroupHost      *cgroups,
                          const char               *runc_root)
{
  ShimwatchTaskTable *self = g_new0 (ShimwatchTaskTable, 1);

  self->shims = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);
  self->reserved = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->reaps = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                       (GDestroyNotify) g_ptr_array_unref);
  self->cgroup_users = shimwatch_cgroup_claims_new ();
  self->bus = bus;
  self->object_manager = object_manager;
  self->history = history;
  self->metrics = metrics;
  self->cgroups = cgroups;
  self->runc_root = runc_root;
  return self;
}

void
shimwatch_task_table_free (ShimwatchTaskTable *self)
{
  GHashTableIter iter;
  gpointer value;

  /* no shim calls back into a table that is gone */
  g_hash_table_iter_init (&iter, self->shims);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    g_signal_handlers_disconnect_by_data (value, self);
  g_hash_table_unref (self->shims);
  g_hash_table_unref (self->reserved);
  g_hash_table_unref (self->reaps);
  shimwatch_cgroup_claims_free (self->cgroup_users);
  g_free (self);
}

/* -- task cgroups -------------------------------------------------------------------- */

const char *
shimwatch_task_table_cgroup_user (ShimwatchTaskTable *self,
                                  const char         *path)
{
  return shimwatch_cgroup_claims_overlap (self->cgroup_users, path);
}

void
shimwatch_task_table_release_cgroup (ShimwatchTaskTable *self,
                                     const char         *path,
                                     const char         *key)
{
  shimwatch_cgroup_claims_release (self->cgroup_users, path, key);
}

/* /shimwatch/<ns> and /shimwatch go with their last task, as task directories do. Only
 * while no CreateTask is under way: runc creates them again (mkdir -p) during Create, and
 * one removed between its two mkdirs would fail that create. A parent that still holds a
 * cgroup is not empty, and stays. */
void
shimwatch_task_table_remove_unused_cgroup_parents (ShimwatchTaskTable *self,
                                                   const char         *namespace_)
{
  g_autofree char *ns_path = NULL;

  if (shimwatch_cgroup_host_get_driver (self->cgroups) != SHIMWATCH_CGROUP_DRIVER_CGROUPFS ||
      g_hash_table_size (self->reserved) > 0)
    return;
  ns_path = g_strdup_printf ("/%s/%s", SHIMWATCH_CGROUP_PARENT, namespace_);
  /* another task's cgroup is in it: not empty, known without an rmdir in each hierarchy
   * at every death */
  if (shimwatch_cgroup_claims_overlap (self->cgroup_users, ns_path) != NULL)
    return;
  shimwatch_cgroup_remove_empty_parents (self->cgroups, ns_path, "/");
}

/* runc's directory of the namespace (under the service's runc root) goes with its last
 * task: an rmdir, which fails while any task's state is in it. Not while a create is
 * under way, whose runc may have just made it. */
void
shimwatch_task_table_remove_unused_runc_dir (ShimwatchTaskTable *self,
                                             const char         *namespace_)
{
  g_autofree char *dir = NULL;

  if (g_hash_table_size (self->reserved) > 0)
    return;
  dir = g_build_filename (self->runc_root, namespace_, NULL);
  if (g_rmdir (dir) != 0 && errno != ENOENT && errno != ENOTEMPTY && errno != EEXIST)
    g_debug ("cannot remove %s: %s", dir, g_strerror (errno));
}

void
shimwatch_task_table_remove_all_unused_cgroup_parents (ShimwatchTaskTable *self)
{
  g_autoptr(GPtrArray) dirs = shimwatch_cgroup_dirs (self->cgroups, "/" SHIMWATCH_CGROUP_PARENT);
  g_autoptr(GDir) parent = NULL;
  const char *name;

  if (dirs->len == 0 || (parent = g_dir_open (g_ptr_array_index (dirs, 0), 0, NULL)) == NULL)
    return;
  while ((name = g_dir_read_name (parent)) != NULL)
    {
      g_autofree char *child = g_build_filename (g_ptr_array_index (dirs, 0), name, NULL);

      if (shimwatch_identifier_validate ("namespace", name, NULL) &&
          g_file_test (child, G_FILE_TEST_IS_DIR))
        shimwatch_task_table_remove_unused_cgroup_parents (self, name);
    }
}

/* -- counters ------------------------------------------------------------------------- */

void
shimwatch_task_table_update_count (ShimwatchTaskTable *self)
{
  shimwatch_dbus_manager_set_shim_count (self->bus, g_hash_table_size (self->shims));
  if (self->metrics != NULL)
    shimwatch_metrics_changed (self->metrics);
}

/* the counters survive restarts: the history keeps them under the state directory */
static void
save_counters (ShimwatchTaskTable *self)
{
  ShimwatchCounters counters;

  /* the metrics' counters are in the same line: taken as they are */
  shimwatch_history_get_counters (self->history, &counters);
  counters.disconnects = shimwatch_dbus_manager_get_disconnect_count (self->bus);
  counters.reaps = shimwatch_dbus_manager_get_reap_count (self->bus);
  counters.cleanup_failures = shimwatch_dbus_manager_get_cleanup_failure_count (self->bus);
  shimwatch_history_set_counters (self->history, &counters);
}

void
shimwatch_task_table_count_disconnect (ShimwatchTaskTable *self)
{
  shimwatch_dbus_manager_set_disconnect_count (self->bus,
    shimwatch_dbus_manager_get_disconnect_count (self->bus) + 1);
  save_counters (self);
}

void
shimwatch_task_table_count_cleanup (ShimwatchTaskTable *self,
                                    const char         *namespace_,
                                    const char         *id,
                                    guint32             exit_status,
                                    const char         *failure)
{
  ShimwatchHistoryEvent event = {
    .event = "reap",
    .namespace_ = namespace_,
    .id = id,
    .has_exit_status = TRUE,
    .exit_status = exit_status,
    .reason = failure,
  };

  shimwatch_dbus_manager_set_reap_count (self->bus,
                                         shimwatch_dbus_manager_get_reap_count (self->bus) + 1);
  if (failure != NULL)
    shimwatch_dbus_manager_set_cleanup_failure_count (self->bus,
      shimwatch_dbus_manager_get_cleanup_failure_count (self->bus) + 1);
  save_counters (self);
  shimwatch_history_add (self->history, &event);
}

/* -- a task's end --------------------------------------------------------------------- */

void
shimwatch_task_table_wait_for_end (ShimwatchTaskTable    *self,
                                   const char            *key,
                                   GDBusMethodInvocation *invocation)
{
  GPtrArray *waiting = g_hash_table_lookup (self->reaps, key);

  if (waiting == NULL)
    {
      waiting = g_ptr_array_new ();
      g_hash_table_insert (self->reaps, g_strdup (key), waiting);
    }
  g_ptr_array_add (waiting, invocation);
}

static void
complete_reaps (ShimwatchTaskTable *self,
                const char         *key,
                guint32             exit_status)
{
  g_autoptr(GPtrArray) waiting = NULL;
  g_autofree char *stolen_key = NULL;

  if (!g_hash_table_steal_extended (self->reaps, key, (gpointer *) &stolen_key,
                                    (gpointer *) &waiting))
    return;
  for (guint i = 0; i < waiting->len; i++)
    shimwatch_dbus_manager_complete_reap (self->bus, g_ptr_array_index (waiting, i),
                                          exit_status);
}

static void
shim_disconnected_cb (ShimwatchShim      *shim,
                      ShimwatchTaskTable *self)
{
  shimwatch_task_table_count_disconnect (self);
}

static void
shim_finished_cb (ShimwatchShim      *shim,
                  gboolean            reaped,
                  gboolean            cleanup_failed,
                  ShimwatchTaskTable *self)
{
  g_autoptr(ShimwatchShim) keep G_GNUC_UNUSED = g_object_ref (shim);
  g_autofree char *key = shimwatch_task_key (shimwatch_shim_get_namespace (shim),
                                             shimwatch_shim_get_id (shim));

  g_signal_handlers_disconnect_by_data (shim, self);
  /* after TaskDelete: InterfacesRemoved */
  g_dbus_object_manager_server_unexport (self->object_manager,
                                         shimwatch_shim_get_object_path (shim));
  g_hash_table_remove (self->shims, key);
  shimwatch_task_table_release_cgroup (self, shimwatch_shim_get_cgroup_path (shim), key);
  shimwatch_task_table_remove_unused_cgroup_parents (self, shimwatch_shim_get_namespace (shim));
  shimwatch_task_table_remove_unused_runc_dir (self, shimwatch_shim_get_namespace (shim));
  shimwatch_task_table_update_count (self);
  if (reaped)
    shimwatch_task_table_count_cleanup (self, shimwatch_shim_get_namespace (shim),
                                        shimwatch_shim_get_id (shim),
                                        shimwatch_shim_get_last_exit_status (shim),
                                        cleanup_failed
                                          ? "the shim's delete command failed or timed out"
                                          : NULL);
  complete_reaps (self, key, shimwatch_shim_get_last_exit_status (shim));
}

void
shimwatch_task_table_watch (ShimwatchTaskTable *self,
                            ShimwatchShim      *shim)
{
  g_signal_connect (shim, "disconnected", G_CALLBACK (shim_disconnected_cb), self);
  g_signal_connect (shim, "finished", G_CALLBACK (shim_finished_cb), self);
}

void
shimwatch_task_table_export (ShimwatchTaskTable *self,
                             ShimwatchShim      *shim)
{
  shimwatch_task_object_export (self->object_manager, shimwatch_shim_get_object_path (shim),
                                SHIMWATCH_DBUS_SHIM (shim));
  shimwatch_shim_set_exported (shim);
}
