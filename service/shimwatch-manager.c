/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <glib/gstdio.h>

#include "shimwatch-bundle.h"
#include "shimwatch-error.h"
#include "shimwatch-events-server.h"
#include "shimwatch-file.h"
#include "shimwatch-log-store.h"
#include "shimwatch-history.h"
#include "shimwatch-manager.h"
#include "shimwatch-names.h"
#include "shimwatch-records.h"
#include "shimwatch-shim.h"
#include "shimwatch-stdio.h"

#define RPC_TIMEOUT_MS 10000

struct _ShimwatchManager
{
  ShimwatchDbusManagerSkeleton  parent_instance;

  ShimwatchConfig              *config;
  char                         *tasks_dir;
  char                         *runc_root;
  char                         *records_dir;
  guint                         n_loading;
  /* between load and reach_shims */
  GPtrArray                    *records;    /* ShimwatchRecord: what was read at load */
  GPtrArray                    *broken;     /* "ns/id" of records that did not parse */
  GHashTable                   *recorded;   /* "ns/id" of every record read */
  GPtrArray                    *to_reach;   /* ShimwatchShim: loaded, shim not reached yet */
  ShimwatchLauncher            *launcher;
  ShimwatchCgroupHost          *cgroups;
  ShimwatchCleanup             *cleanup;
  ShimwatchEventsServer        *events;
  ShimwatchAuthority           *authority;
  ShimwatchLogStore            *logs;
  GDBusObjectManagerServer     *object_manager;
  ShimwatchSignalLedger        *ledger;
  ShimwatchHistory             *history;    /* events and counters, under the state dir */
  GDBusConnection              *filtered;   /* the ledger watches its outgoing signals */
  guint                         filter_id;

  GHashTable                   *shims;      /* "ns/id" → ShimwatchShim */
  GHashTable                   *reserved;   /* "ns/id" being created */
  GHashTable                   *reaps;      /* "ns/id" → GPtrArray of invocations */
  GHashTable                   *cgroup_users; /* cgroup path → "ns/id", supervised or being created */
};

static void shimwatch_manager_iface_init (ShimwatchDbusManagerIface *iface);

G_DEFINE_TYPE_WITH_CODE (ShimwatchManager, shimwatch_manager, SHIMWATCH_DBUS_TYPE_MANAGER_SKELETON,
                         G_IMPLEMENT_INTERFACE (SHIMWATCH_DBUS_TYPE_MANAGER,
                                                shimwatch_manager_iface_init))

static char *
task_key (const char *namespace_,
          const char *id)
{
  return g_strconcat (namespace_, "/", id, NULL);
}

static char *
task_dir_for (ShimwatchManager *self,
              const char       *namespace_,
              const char       *id)
{
  return g_build_filename (self->tasks_dir, namespace_, id, NULL);
}

static gboolean
validate_ids (const char  *namespace_,
              const char  *id,
              GError     **error)
{
  g_autoptr(GError) local_error = NULL;

  if (!shimwatch_identifier_validate ("namespace", namespace_, &local_error) ||
      !shimwatch_identifier_validate ("id", id, &local_error))
    {
      g_set_error_literal (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                           local_error->message);
      return FALSE;
    }
  return TRUE;
}

static void
update_shim_count (ShimwatchManager *self)
{
  shimwatch_dbus_manager_set_shim_count (SHIMWATCH_DBUS_MANAGER (self),
                                         g_hash_table_size (self->shims));
}

/* -- task cgroups -------------------------------------------------------------------- */

/* the task that has this cgroup, one inside it or one around it; NULL if none */
static const char *
cgroup_user (ShimwatchManager *self,
             const char       *path)
{
  GHashTableIter iter;
  gpointer used, key;

  g_hash_table_iter_init (&iter, self->cgroup_users);
  while (g_hash_table_iter_next (&iter, &used, &key))
    if (shimwatch_cgroup_paths_overlap (used, path))
      return key;
  return NULL;
}

static void
release_cgroup (ShimwatchManager *self,
                const char       *path,
                const char       *key)
{
  if (path != NULL && g_strcmp0 (g_hash_table_lookup (self->cgroup_users, path), key) == 0)
    g_hash_table_remove (self->cgroup_users, path);
}

/* /shimwatch/<ns> and /shimwatch go with their last task, as task directories do. Only
 * while no CreateTask is under way: runc creates them again (mkdir -p) during Create, and
 * one removed between its two mkdirs would fail that create. A parent that still holds a
 * cgroup is not empty, and stays. */
static void
remove_unused_cgroup_parents (ShimwatchManager *self,
                              const char       *namespace_)
{
  g_autofree char *ns_path = NULL;

  if (shimwatch_cgroup_host_get_driver (self->cgroups) != SHIMWATCH_CGROUP_DRIVER_CGROUPFS ||
      g_hash_table_size (self->reserved) > 0)
    return;
  ns_path = g_strdup_printf ("/%s/%s", SHIMWATCH_CGROUP_PARENT, namespace_);
  shimwatch_cgroup_remove_empty_parents (self->cgroups, ns_path, "/");
}

static void
remove_all_unused_cgroup_parents (ShimwatchManager *self)
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
        remove_unused_cgroup_parents (self, name);
    }
}

/* -- shim lifecycle ------------------------------------------------------------------- */

/* the counters survive restarts: the history keeps them under the state directory */
static void
save_counters (ShimwatchManager *self)
{
  ShimwatchDbusManager *iface = SHIMWATCH_DBUS_MANAGER (self);
  ShimwatchCounters counters = {
    .disconnects = shimwatch_dbus_manager_get_disconnect_count (iface),
    .reaps = shimwatch_dbus_manager_get_reap_count (iface),
    .cleanup_failures = shimwatch_dbus_manager_get_cleanup_failure_count (iface),
  };

  shimwatch_history_set_counters (self->history, &counters);
}

static void
shim_disconnected_cb (ShimwatchShim    *shim,
                      ShimwatchManager *self)
{
  ShimwatchDbusManager *iface = SHIMWATCH_DBUS_MANAGER (self);

  shimwatch_dbus_manager_set_disconnect_count (iface,
    shimwatch_dbus_manager_get_disconnect_count (iface) + 1);
  save_counters (self);
}

static void
complete_reaps (ShimwatchManager *self,
                const char       *key,
                guint32           exit_status)
{
  g_autoptr(GPtrArray) waiting = NULL;
  g_autofree char *stolen_key = NULL;

  if (!g_hash_table_steal_extended (self->reaps, key, (gpointer *) &stolen_key,
                                    (gpointer *) &waiting))
    return;
  for (guint i = 0; i < waiting->len; i++)
    shimwatch_dbus_manager_complete_reap (SHIMWATCH_DBUS_MANAGER (self),
                                          g_ptr_array_index (waiting, i), exit_status);
}

static void
count_cleanup (ShimwatchManager *self,
               const char       *namespace_,
               const char       *id,
               guint32           exit_status,
               const char       *failure)
{
  ShimwatchDbusManager *iface = SHIMWATCH_DBUS_MANAGER (self);
  ShimwatchHistoryEvent event = {
    .event = "reap",
    .namespace_ = namespace_,
    .id = id,
    .has_exit_status = TRUE,
    .exit_status = exit_status,
    .reason = failure,
  };

  shimwatch_dbus_manager_set_reap_count (iface, shimwatch_dbus_manager_get_reap_count (iface) + 1);
  if (failure != NULL)
    shimwatch_dbus_manager_set_cleanup_failure_count (iface,
      shimwatch_dbus_manager_get_cleanup_failure_count (iface) + 1);
  save_counters (self);
  shimwatch_history_add (self->history, &event);
}

static void
shim_finished_cb (ShimwatchShim    *shim,
                  gboolean          reaped,
                  gboolean          cleanup_failed,
                  ShimwatchManager *self)
{
  g_autoptr(ShimwatchShim) keep G_GNUC_UNUSED = g_object_ref (shim);
  g_autofree char *key = task_key (shimwatch_shim_get_namespace (shim),
                                   shimwatch_shim_get_id (shim));

  g_signal_handlers_disconnect_by_data (shim, self);
  /* after TaskDelete: InterfacesRemoved */
  g_dbus_object_manager_server_unexport (self->object_manager,
                                         shimwatch_shim_get_object_path (shim));
  g_hash_table_remove (self->shims, key);
  release_cgroup (self, shimwatch_shim_get_cgroup_path (shim), key);
  remove_unused_cgroup_parents (self, shimwatch_shim_get_namespace (shim));
  update_shim_count (self);
  if (reaped)
    count_cleanup (self, shimwatch_shim_get_namespace (shim), shimwatch_shim_get_id (shim),
                   shimwatch_shim_get_last_exit_status (shim),
                   cleanup_failed ? "the shim's delete command failed or timed out" : NULL);
  complete_reaps (self, key, shimwatch_shim_get_last_exit_status (shim));
}

static void
export_shim (ShimwatchManager *self,
             ShimwatchShim    *shim)
{
  g_autoptr(ShimwatchDbusObjectSkeleton) object = NULL;

  object = shimwatch_dbus_object_skeleton_new (shimwatch_shim_get_object_path (shim));
  shimwatch_dbus_object_skeleton_set_shim (object, SHIMWATCH_DBUS_SHIM (shim));
  g_dbus_object_manager_server_export (self->object_manager, G_DBUS_OBJECT_SKELETON (object));
  shimwatch_shim_set_exported (shim);
}

/* a task's events are accepted only from its own shim: any other process on the events
 * socket could otherwise end a task with a forged TaskExit */
static gboolean
event_sender_check (const ShimwatchEvent      *event,
                    const ShimwatchEventsPeer *peer,
                    char                     **why,
                    gpointer                   user_data)
{
  ShimwatchManager *self = user_data;
  g_autofree char *key = NULL;
  ShimwatchShim *shim;

  if (event->container_id == NULL)
    return TRUE;
  key = task_key (event->namespace_, event->container_id);
  shim = g_hash_table_lookup (self->shims, key);
  if (shim == NULL || shimwatch_shim_is_shim_process (shim, peer->pid, peer->start_time))
    return TRUE;
  *why = g_strdup_printf ("the sender, pid %u, is not the task's shim (pid %u)", peer->pid,
                          shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (shim)));
  return FALSE;
}

static void
event_cb (ShimwatchEventsServer *server,
          ShimwatchEvent        *event,
          gpointer               user_data)
{
  ShimwatchManager *self = user_data;
  g_autofree char *key = NULL;
  ShimwatchShim *shim;

  if (event->container_id == NULL)
    return;
  key = task_key (event->namespace_, event->container_id);
  shim = g_hash_table_lookup (self->shims, key);
  if (shim == NULL)
    {
      g_debug ("event %s for %s, which is not supervised", event->topic, key);
      return;
    }
  shimwatch_shim_handle_event (shim, event);
}

/* -- CreateTask ----------------------------------------------------------------------- */

typedef struct {
  ShimwatchManager      *self;
  GDBusMethodInvocation *invocation;
  char                  *key;
  char                  *namespace_;
  char                  *id;
  char                  *bundle;
  ShimwatchBundle       *opened;     /* the bundle, resolved and read for the caller */
  char                  *runtime;
  char                  *shim_binary;
  char                  *task_dir;
  char                  *cgroup_path;    /* claimed in cgroup_users while set */
  char                  *stdio[3];
  GVariant              *labels;     /* a{ss} */
  GStrv                  command;    /* process.args of the bundle's config.json */
  gboolean               terminal;
  gboolean               start;
  gboolean               log;          /* keep the output of streams given no path */
  ShimwatchTaskLog      *task_log;
  gboolean               dir_prepared;
  gboolean               reserved;
  GError                *error;
  ShimwatchShim         *shim;
  guint32                pid;
} CreateData;

static void
create_data_free (CreateData *data)
{
  if (data->reserved)
    g_hash_table_remove (data->self->reserved, data->key);
  if (data->cgroup_path != NULL)
    {
      release_cgroup (data->self, data->cgroup_path, data->key);
      remove_unused_cgroup_parents (data->self, data->namespace_);
    }
  g_free (data->cgroup_path);
  g_clear_error (&data->error);
  g_object_unref (data->self);
  g_free (data->key);
  g_free (data->namespace_);
  g_free (data->id);
  g_free (data->bundle);
  g_clear_pointer (&data->opened, shimwatch_bundle_free);
  g_free (data->runtime);
  g_free (data->shim_binary);
  g_free (data->task_dir);
  for (guint i = 0; i < G_N_ELEMENTS (data->stdio); i++)
    g_free (data->stdio[i]);
  g_clear_pointer (&data->labels, g_variant_unref);
  g_strfreev (data->command);
  g_clear_object (&data->shim);
  g_clear_object (&data->task_log);
  g_free (data);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC (CreateData, create_data_free)

static void
create_abandoned_cb (GObject      *source,
                     GAsyncResult *result,
                     gpointer      user_data)
{
  g_autoptr(CreateData) data = user_data;

  g_dbus_method_invocation_return_gerror (data->invocation, data->error);
}

/* nothing may stay behind a failed CreateTask: shim stopped, task dir removed */
static void
create_fail (CreateData   *data,
             const GError *error)
{
  g_autoptr(GError) converted = shimwatch_error_convert (error);

  g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING,
                    "MESSAGE_ID", SHIMWATCH_MESSAGE_ID_CREATE_FAILED,
                    SHIMWATCH_LOG_FIELD_NAMESPACE, data->namespace_,
                    SHIMWATCH_LOG_FIELD_TASK_ID, data->id,
                    SHIMWATCH_LOG_FIELD_EVENT, "create-failed",
                    "MESSAGE", "%s/%s: CreateTask failed: %s", data->namespace_, data->id,
                    converted->message);
  if (data->task_log != NULL)
    shimwatch_task_log_discard (data->task_log);
  if (data->shim != NULL)
    {
      if (g_hash_table_lookup (data->self->shims, data->key) == data->shim)
        g_hash_table_remove (data->self->shims, data->key);
      data->error = g_steal_pointer (&converted);
      shimwatch_shim_abandon_async (data->shim, create_abandoned_cb, data);
      return;
    }
  if (data->dir_prepared)
    {
      g_autoptr(GError) remove_error = NULL;

      if (!shimwatch_cleanup_remove_task_dir (data->task_dir, &remove_error))
        g_warning ("%s: %s", data->key, remove_error->message);
    }
  g_dbus_method_invocation_return_gerror (data->invocation, converted);
  create_data_free (data);
}

static void
create_finish (CreateData *data)
{
  ShimwatchManager *self = data->self;

  g_hash_table_insert (self->shims, g_strdup (data->key), g_object_ref (data->shim));
  g_signal_connect (data->shim, "disconnected", G_CALLBACK (shim_disconnected_cb), self);
  g_signal_connect (data->shim, "finished", G_CALLBACK (shim_finished_cb), self);
  /* the shim owns the claim on its cgroup from now on, until it is finished */
  g_clear_pointer (&data->cgroup_path, g_free);
  /* recorded before anyone learns of it: from now on a restart knows this task */
  shimwatch_shim_make_persistent (data->shim);
  export_shim (self, data->shim);
  update_shim_count (self);
  shimwatch_dbus_manager_complete_create_task (SHIMWATCH_DBUS_MANAGER (self), data->invocation,
                                               shimwatch_shim_get_object_path (data->shim));
  create_data_free (data);
}

static void
create_start_cb (GObject      *source,
                 GAsyncResult *result,
                 gpointer      user_data)
{
  CreateData *data = user_data;
  g_autoptr(GError) error = NULL;
  guint32 pid = 0;

  if (!shimwatch_task_client_start_finish (SHIMWATCH_TASK_CLIENT (source), result, &pid, &error))
    {
      create_fail (data, error);
      return;
    }
  shimwatch_shim_set_started (data->shim, pid);
  create_finish (data);
}

static void
create_rpc_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  CreateData *data = user_data;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_task_client_create_finish (SHIMWATCH_TASK_CLIENT (source), result, &data->pid,
                                            &error))
    {
      g_autofree char *bundle = shimwatch_bundle_describe (data->opened);

      /* runc's words name the task directory at most: say which bundle it was */
      g_prefix_error (&error, "bundle %s: ", bundle);
      create_fail (data, error);
      return;
    }
  shimwatch_shim_set_created (data->shim, data->pid);
  if (!data->start)
    {
      create_finish (data);
      return;
    }
  shimwatch_task_client_start_async (SHIMWATCH_TASK_CLIENT (source), RPC_TIMEOUT_MS,
                                     create_start_cb, data);
}

static void
create_shim_started_cb (GObject      *source,
                        GAsyncResult *result,
                        gpointer      user_data)
{
  CreateData *data = user_data;
  ShimwatchManager *self = data->self;
  g_autoptr(GError) error = NULL;
  ShimwatchShimHandle *handle;
  ShimwatchCreateParams params = { 0 };

  handle = shimwatch_launcher_start_finish (SHIMWATCH_LAUNCHER (source), result, &error);
  data->shim = shimwatch_shim_new (self, data->namespace_, data->id, data->runtime,
                                   data->shim_binary, data->task_dir);
  shimwatch_shim_set_cgroup_path (data->shim, data->cgroup_path);
  shimwatch_shim_set_task_log (data->shim, data->task_log);
  shimwatch_shim_set_description (data->shim, data->bundle,
                                  (const char * const *) data->command, data->labels);
  if (handle == NULL)
    {
      create_fail (data, error);
      return;
    }
  shimwatch_shim_attach (data->shim, handle);
  /* events for the task go to its object from now on (replayed once it is exported) */
  g_hash_table_insert (self->shims, g_strdup (data->key), g_object_ref (data->shim));

  params.id = data->id;
  params.bundle = data->task_dir;
  params.stdin_path = data->stdio[0];
  params.stdout_path = data->stdio[1];
  params.stderr_path = data->stdio[2];
  params.terminal = data->terminal;
  params.runc_root = self->runc_root;
  params.systemd_cgroup =
    shimwatch_cgroup_host_get_driver (self->cgroups) == SHIMWATCH_CGROUP_DRIVER_SYSTEMD;
  shimwatch_task_client_create_async (shimwatch_shim_get_client (data->shim), &params,
                                      RPC_TIMEOUT_MS, create_rpc_cb, data);
}

/* the streams the creator gives no path for go to FIFOs of ours and into the task log */
static gboolean
open_task_log (CreateData  *data,
               GError     **error)
{
  ShimwatchTaskLogStreams streams = 0;

  if (!data->log)
    return TRUE;
  if (data->stdio[1] == NULL)
    streams |= SHIMWATCH_TASK_LOG_STDOUT;
  /* with a terminal, stdout carries everything and stderr stays empty */
  if (data->stdio[2] == NULL && !data->terminal)
    streams |= SHIMWATCH_TASK_LOG_STDERR;
  if (streams == 0)
    return TRUE;
  data->task_log = shimwatch_log_store_open (data->self->logs, data->namespace_, data->id,
                                             data->task_dir, streams, error);
  if (data->task_log == NULL)
    return FALSE;
  if (data->stdio[1] == NULL)
    data->stdio[1] = g_strdup (shimwatch_task_log_get_fifo (data->task_log,
                                                            SHIMWATCH_TASK_LOG_STDOUT));
  if (data->stdio[2] == NULL && !data->terminal)
    data->stdio[2] = g_strdup (shimwatch_task_log_get_fifo (data->task_log,
                                                            SHIMWATCH_TASK_LOG_STDERR));
  return TRUE;
}

/* process.args of the config.json the task directory now holds (checked when copied) */
static GStrv
read_command (const char  *task_dir,
              GError     **error)
{
  g_autofree char *path = g_build_filename (task_dir, "config.json", NULL);
  g_autofree char *contents = NULL;
  gsize length;

  if (!g_file_get_contents (path, &contents, &length, error))
    return NULL;
  return shimwatch_wire_oci_process_args (contents, length, error);
}

static void
create_caller_known_cb (GObject      *source,
                        GAsyncResult *result,
                        gpointer      user_data)
{
  CreateData *data = user_data;
  ShimwatchManager *self = data->self;
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) credentials = NULL;
  g_autoptr(GVariant) groups = NULL;
  g_autoptr(GArray) gids = NULL;
  g_autoptr(ShimwatchCaller) caller = NULL;
  g_autofree char *default_cgroup = NULL;
  g_autofree char *cgroup_path = NULL;
  const char *other;
  guint32 caller_uid;

  reply = g_dbus_connection_call_finish (G_DBUS_CONNECTION (source), result, &error);
  if (reply == NULL)
    {
      g_prefix_error (&error, "cannot identify the caller: ");
      create_fail (data, error);
      return;
    }
  credentials = g_variant_get_child_value (reply, 0);
  if (!g_variant_lookup (credentials, "UnixUserID", "u", &caller_uid))
    {
      g_set_error_literal (&error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                           "the bus does not tell the caller's uid");
      create_fail (data, error);
      return;
    }
  /* the groups of the caller's process (dbus-daemon >= 1.12), else its user's */
  groups = g_variant_lookup_value (credentials, "UnixGroupIDs", G_VARIANT_TYPE ("au"));
  if (groups != NULL)
    {
      gsize n = 0;
      const guint32 *values = g_variant_get_fixed_array (groups, &n, sizeof (guint32));

      gids = g_array_sized_new (FALSE, FALSE, sizeof (guint32), (guint) n);
      g_array_append_vals (gids, values, (guint) n);
    }
  caller = shimwatch_caller_new (caller_uid, gids);
  data->shim_binary = shimwatch_launcher_resolve_runtime (self->launcher, data->runtime, &error);
  if (data->shim_binary == NULL)
    {
      create_fail (data, error);
      return;
    }
  /* the bundle runs as root: its caller must be able to read it themselves, and to
   * open what the shim will open for the task's stdio */
  default_cgroup = shimwatch_cgroup_task_path (shimwatch_cgroup_host_get_layout (self->cgroups),
                                               shimwatch_cgroup_host_get_own (self->cgroups),
                                               shimwatch_cgroup_host_get_driver (self->cgroups),
                                               data->namespace_, data->id);
  data->opened = shimwatch_bundle_open (data->bundle, caller, default_cgroup, &error);
  if (data->opened == NULL ||
      !shimwatch_stdio_check (data->stdio, (const char * const *) self->config->runtime_path,
                              caller, &error))
    {
      create_fail (data, error);
      return;
    }
  /* before anything starts: a cgroup of its own, shared with no other task */
  cgroup_path = shimwatch_cgroup_resolve (self->cgroups, data->opened->cgroups_path, &error);
  if (cgroup_path == NULL)
    {
      g_prefix_error (&error, "bundle %s: ", data->bundle);
      create_fail (data, error);
      return;
    }
  other = cgroup_user (self, cgroup_path);
  if (other != NULL)
    {
      g_autoptr(GError) taken = NULL;

      taken = g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_ALREADY_EXISTS,
                           "bundle %s: cgroup %s is already used by task %s (a cgroup holds "
                           "one task)", data->bundle, cgroup_path, other);
      create_fail (data, taken);
      return;
    }
  data->cgroup_path = g_steal_pointer (&cgroup_path);
  g_hash_table_insert (self->cgroup_users, g_strdup (data->cgroup_path), g_strdup (data->key));
  if (!shimwatch_launcher_prepare_task_dir (self->launcher, data->task_dir, data->opened->config,
                                            data->shim_binary, &error))
    {
      create_fail (data, error);
      return;
    }
  data->dir_prepared = TRUE;
  /* after the check of the caller's own paths: these FIFOs are the service's */
  if (!open_task_log (data, &error))
    {
      create_fail (data, error);
      return;
    }
  data->command = read_command (data->task_dir, &error);
  if (data->command == NULL)
    {
      create_fail (data, error);
      return;
    }
  shimwatch_launcher_start_async (self->launcher, data->shim_binary, data->namespace_, data->id,
                                  data->task_dir, create_shim_started_cb, data);
}

static void
create_authorized_cb (GObject      *source,
                      GAsyncResult *result,
                      gpointer      user_data)
{
  CreateData *data = user_data;
  ShimwatchManager *self = data->self;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_authority_check_finish (SHIMWATCH_AUTHORITY (source), result, &error))
    {
      create_fail (data, error);
      return;
    }
  if (g_hash_table_contains (self->shims, data->key) ||
      g_hash_table_contains (self->reserved, data->key))
    {
      g_dbus_method_invocation_return_error (data->invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_ALREADY_EXISTS,
                                             "task %s is already supervised", data->key);
      create_data_free (data);
      return;
    }
  g_hash_table_add (self->reserved, g_strdup (data->key));
  data->reserved = TRUE;
  g_dbus_connection_call (g_dbus_method_invocation_get_connection (data->invocation),
                          "org.freedesktop.DBus", "/org/freedesktop/DBus",
                          "org.freedesktop.DBus", "GetConnectionCredentials",
                          g_variant_new ("(s)", g_dbus_method_invocation_get_sender (data->invocation)),
                          G_VARIANT_TYPE ("(a{sv})"), G_DBUS_CALL_FLAGS_NONE, -1, NULL,
                          create_caller_known_cb, data);
}

static gboolean
parse_create_options (CreateData  *data,
                      GVariant    *options,
                      GError     **error)
{
  static const char *stdio_keys[] = { "stdin", "stdout", "stderr" };
  GVariantIter iter;
  const char *key;
  GVariant *value;

  data->runtime = g_strdup (SHIMWATCH_DEFAULT_RUNTIME);
  data->start = TRUE;
  data->log = TRUE;
  g_variant_iter_init (&iter, options);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) owned G_GNUC_UNUSED = value;
      const GVariantType *expected = G_VARIANT_TYPE_STRING;
      int stdio_index = -1;

      for (guint i = 0; i < G_N_ELEMENTS (stdio_keys); i++)
        if (g_str_equal (key, stdio_keys[i]))
          stdio_index = (int) i;
      if (g_str_equal (key, "start") || g_str_equal (key, "terminal") ||
          g_str_equal (key, "log"))
        expected = G_VARIANT_TYPE_BOOLEAN;
      else if (g_str_equal (key, "labels"))
        expected = G_VARIANT_TYPE ("a{ss}");
      else if (!g_str_equal (key, "runtime") && stdio_index < 0)
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "unknown option \"%s\" (known: runtime, start, stdin, stdout, stderr, "
                       "terminal, log, labels)", key);
          return FALSE;
        }
      if (!g_variant_is_of_type (value, expected))
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "option \"%s\" must be of type %.*s, not %s", key,
                       (int) g_variant_type_get_string_length (expected),
                       g_variant_type_peek_string (expected), g_variant_get_type_string (value));
          return FALSE;
        }
      if (g_str_equal (key, "runtime"))
        {
          g_free (data->runtime);
          data->runtime = g_variant_dup_string (value, NULL);
        }
      else if (g_str_equal (key, "start"))
        data->start = g_variant_get_boolean (value);
      else if (g_str_equal (key, "terminal"))
        data->terminal = g_variant_get_boolean (value);
      else if (g_str_equal (key, "log"))
        data->log = g_variant_get_boolean (value);
      else if (g_str_equal (key, "labels"))
        {
          if (!shimwatch_shim_validate_labels (value, error))
            return FALSE;
          g_clear_pointer (&data->labels, g_variant_unref);
          data->labels = g_variant_ref (value);
        }
      else
        {
          g_free (data->stdio[stdio_index]);
          data->stdio[stdio_index] = g_variant_dup_string (value, NULL);
        }
    }
  return TRUE;
}

static gboolean
handle_create_task (ShimwatchDbusManager  *iface,
                    GDBusMethodInvocation *invocation,
                    const char            *arg_namespace,
                    const char            *arg_id,
                    const char            *arg_bundle,
                    GVariant              *arg_options)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autoptr(GError) error = NULL;
  CreateData *data;

  /* bad input changes nothing: everything is checked before any file or process */
  if (!validate_ids (arg_namespace, arg_id, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  if (!g_path_is_absolute (arg_bundle))
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                             "bundle \"%s\" is not an absolute path", arg_bundle);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }

  data = g_new0 (CreateData, 1);
  data->self = g_object_ref (self);
  data->invocation = invocation;
  data->key = task_key (arg_namespace, arg_id);
  data->namespace_ = g_strdup (arg_namespace);
  data->id = g_strdup (arg_id);
  data->bundle = g_strdup (arg_bundle);
  data->task_dir = task_dir_for (self, arg_namespace, arg_id);
  if (!parse_create_options (data, arg_options, &error) ||
      !shimwatch_stdio_parse (data->stdio, data->terminal, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      create_data_free (data);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  /* nothing is reserved before polkit said yes: an unauthorized caller must not be able
   * to hold a name against an authorized one */
  shimwatch_authority_check_async (self->authority, invocation, SHIMWATCH_ACTION_MANAGE,
                                   data->namespace_, data->id, create_authorized_cb, data);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- read-only methods ---------------------------------------------------------------- */

static gboolean
handle_list_shims (ShimwatchDbusManager  *iface,
                   GDBusMethodInvocation *invocation)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autoptr(GPtrArray) paths = g_ptr_array_new ();
  GHashTableIter iter;
  gpointer value;

  /* a task still being created is listed once its object is exported (one loaded from
   * its record is exported before the bus name is even taken) */
  g_hash_table_iter_init (&iter, self->shims);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    if (shimwatch_shim_is_exported (value))
      g_ptr_array_add (paths, (gpointer) shimwatch_shim_get_object_path (value));
  g_ptr_array_add (paths, NULL);
  shimwatch_dbus_manager_complete_list_shims (iface, invocation,
                                              (const char * const *) paths->pdata);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static gboolean
handle_get_shim (ShimwatchDbusManager  *iface,
                 GDBusMethodInvocation *invocation,
                 const char            *arg_namespace,
                 const char            *arg_id)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autoptr(GError) error = NULL;
  g_autofree char *key = NULL;
  ShimwatchShim *shim;

  if (!validate_ids (arg_namespace, arg_id, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  key = task_key (arg_namespace, arg_id);
  shim = g_hash_table_lookup (self->shims, key);
  if (shim == NULL || !shimwatch_shim_is_exported (shim))
    {
      g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_FOUND,
                                             "no shim supervises %s", key);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  shimwatch_dbus_manager_complete_get_shim (iface, invocation,
                                            shimwatch_shim_get_object_path (shim));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

static gboolean
handle_get_history (ShimwatchDbusManager  *iface,
                    GDBusMethodInvocation *invocation,
                    GVariant              *arg_options)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autoptr(GError) error = NULL;
  const char *namespace_ = NULL;
  const char *id = NULL;
  guint32 limit = 100;
  GVariantIter iter;
  const char *key;
  GVariant *value;

  g_variant_iter_init (&iter, arg_options);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) owned G_GNUC_UNUSED = value;
      gboolean is_limit = g_str_equal (key, "limit");

      if (!is_limit && !g_str_equal (key, "namespace") && !g_str_equal (key, "id"))
        {
          g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                 "unknown option \"%s\" (known: limit, "
                                                 "namespace, id)", key);
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
      if (is_limit &&
          (!g_variant_is_of_type (value, G_VARIANT_TYPE_UINT32) ||
           g_variant_get_uint32 (value) < 1 ||
           g_variant_get_uint32 (value) > SHIMWATCH_HISTORY_CAPACITY))
        {
          g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                 "option \"limit\" must be u, 1 to %u",
                                                 SHIMWATCH_HISTORY_CAPACITY);
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
      if (!is_limit && !g_variant_is_of_type (value, G_VARIANT_TYPE_STRING))
        {
          g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                 "option \"%s\" must be of type s, not %s",
                                                 key, g_variant_get_type_string (value));
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
      if (is_limit)
        limit = g_variant_get_uint32 (value);
      else if (!shimwatch_identifier_validate (key, g_variant_get_string (value, NULL),
                                               &error))
        {
          g_dbus_method_invocation_return_error_literal (invocation, SHIMWATCH_ERROR,
                                                         SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                         error->message);
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
      else if (g_str_equal (key, "namespace"))
        namespace_ = g_variant_get_string (value, NULL);
      else
        id = g_variant_get_string (value, NULL);
    }
  /* the strings stay valid: arg_options holds them */
  shimwatch_dbus_manager_complete_get_history (iface, invocation,
                                               shimwatch_history_query (self->history,
                                                                        namespace_, id,
                                                                        limit));
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- Reap ----------------------------------------------------------------------------- */

typedef struct {
  ShimwatchManager      *self;
  GDBusMethodInvocation *invocation;
  char                  *namespace_;
  char                  *id;
  guint                  timeout_ms;
} ReapData;

static void
reap_data_free (ReapData *data)
{
  g_object_unref (data->self);
  g_free (data->namespace_);
  g_free (data->id);
  g_free (data);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ReapData, reap_data_free)

static void
orphan_cleanup_done_cb (GObject      *source,
                        GAsyncResult *result,
                        gpointer      user_data)
{
  g_autoptr(ReapData) data = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome = NULL;

  outcome = shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);
  remove_unused_cgroup_parents (data->self, data->namespace_);
  count_cleanup (data->self, data->namespace_, data->id,
                 outcome->delete_ok ? outcome->deleted.exit_status : 255,
                 outcome->delete_ok ? NULL : outcome->delete_error);
  if (!outcome->removed)
    {
      /* not a success: the state stays on disk, for another try */
      g_dbus_method_invocation_return_error (data->invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_SHIM_FAILED,
                                             "cleanup of %s/%s did not finish (%s); its state "
                                             "stays on disk", data->namespace_, data->id,
                                             outcome->delete_error != NULL
                                               ? outcome->delete_error : "see the log");
      return;
    }
  shimwatch_dbus_manager_complete_reap (SHIMWATCH_DBUS_MANAGER (data->self), data->invocation,
                                        outcome->delete_ok ? outcome->deleted.exit_status : 255);
}

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
  if (path == NULL || cgroup_user (self, path) != NULL)
    return NULL;
  return g_steal_pointer (&path);
}

/* state on disk that no supervised task owns (a task directory without a record, a broken
 * record, leftovers of a failed cleanup): cleaned like a dead shim's, without events since
 * nothing says the task was ever handed to a client. FALSE if there is nothing. */
static gboolean
start_orphan_cleanup (ShimwatchManager    *self,
                      const char          *namespace_,
                      const char          *id,
                      guint                timeout_ms,
                      GAsyncReadyCallback  callback,
                      gpointer             user_data)
{
  g_autofree char *task_dir = task_dir_for (self, namespace_, id);
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
  g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_MESSAGE,
                    "MESSAGE_ID", SHIMWATCH_MESSAGE_ID_ORPHAN,
                    SHIMWATCH_LOG_FIELD_NAMESPACE, namespace_,
                    SHIMWATCH_LOG_FIELD_TASK_ID, id,
                    SHIMWATCH_LOG_FIELD_EVENT, "orphan",
                    "MESSAGE", "%s/%s: cleaning state no supervised task owns%s", namespace_, id,
                    killed > 0 ? " (killed its shim)" : "");
  shimwatch_cleanup_run_async (self->cleanup, request, NULL, NULL, callback, user_data);
  return TRUE;
}

static void
reap_authorized_cb (GObject      *source,
                    GAsyncResult *result,
                    gpointer      user_data)
{
  g_autoptr(ReapData) data = user_data;
  ShimwatchManager *self = data->self;
  g_autoptr(GError) error = NULL;
  g_autofree char *key = task_key (data->namespace_, data->id);
  ShimwatchShim *shim;
  GPtrArray *waiting;

  if (!shimwatch_authority_check_finish (SHIMWATCH_AUTHORITY (source), result, &error))
    {
      g_dbus_method_invocation_return_gerror (data->invocation, error);
      return;
    }

  shim = g_hash_table_lookup (self->shims, key);
  if (g_hash_table_contains (self->reserved, key) ||
      (shim != NULL && !shimwatch_shim_is_exported (shim)))
    {
      /* its CreateTask is under way: not ours to touch (a task loaded from its record
       * has its object from the start, and is reaped once its shim is reached) */
      g_dbus_method_invocation_return_error (data->invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_BAD_STATE,
                                             "task %s is being created; "
                                             "try again when its object exists", key);
      return;
    }
  if (shim != NULL)
    {
      /* answered when the shim's cleanup finished (TaskDelete emitted) */
      waiting = g_hash_table_lookup (self->reaps, key);
      if (waiting == NULL)
        {
          waiting = g_ptr_array_new ();
          g_hash_table_insert (self->reaps, g_strdup (key), waiting);
        }
      g_ptr_array_add (waiting, data->invocation);
      shimwatch_shim_kill_shim (shim, NULL);
      return;
    }

  /* nothing supervised: state left on disk is cleaned the same way */
  if (!start_orphan_cleanup (self, data->namespace_, data->id, data->timeout_ms,
                             orphan_cleanup_done_cb, data))
    {
      g_dbus_method_invocation_return_error (data->invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_NOT_FOUND,
                                             "nothing is known or left on disk for %s", key);
      return;
    }
  g_steal_pointer (&data);
}

static gboolean
handle_reap (ShimwatchDbusManager  *iface,
             GDBusMethodInvocation *invocation,
             const char            *arg_namespace,
             const char            *arg_id,
             GVariant              *arg_options)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autoptr(GError) error = NULL;
  ReapData *data;
  GVariantIter iter;
  const char *key;
  GVariant *value;
  guint timeout_ms = self->config->cleanup_timeout_ms;

  if (!validate_ids (arg_namespace, arg_id, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  g_variant_iter_init (&iter, arg_options);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) owned G_GNUC_UNUSED = value;

      if (!g_str_equal (key, "timeout"))
        {
          g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                 "unknown option \"%s\" (known: timeout)", key);
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
      if (!g_variant_is_of_type (value, G_VARIANT_TYPE_UINT32) ||
          g_variant_get_uint32 (value) < 1 || g_variant_get_uint32 (value) > 600)
        {
          g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                 "option \"timeout\" must be u, 1 to 600 seconds");
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
      timeout_ms = g_variant_get_uint32 (value) * 1000;
    }

  data = g_new0 (ReapData, 1);
  data->self = g_object_ref (self);
  data->invocation = invocation;
  data->namespace_ = g_strdup (arg_namespace);
  data->id = g_strdup (arg_id);
  data->timeout_ms = timeout_ms;
  shimwatch_authority_check_async (self->authority, invocation, SHIMWATCH_ACTION_REAP,
                                   data->namespace_, data->id, reap_authorized_cb, data);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- start-up: take over what an earlier run left ------------------------------------- */

static void
load_done (ShimwatchManager *self)
{
  if (--self->n_loading > 0)
    return;
  g_message ("all recorded tasks are loaded: %u supervised", g_hash_table_size (self->shims));
  /* what earlier runs left: the namespace parents of tasks cleaned up at start-up */
  remove_all_unused_cgroup_parents (self);
}

static void
load_connected_cb (GObject      *source,
                   GAsyncResult *result,
                   gpointer      user_data)
{
  g_autoptr(ShimwatchShim) shim = user_data;
  g_autoptr(GError) error = NULL;
  ShimwatchShimHandle *handle;
  ShimwatchManager *self;

  handle = shimwatch_launcher_connect_finish (SHIMWATCH_LAUNCHER (source), result, &error);
  self = g_object_get_data (G_OBJECT (shim), "shimwatch-manager");
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
  g_autofree char *task_dir = task_dir_for (self, record->namespace_, record->id);
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
  g_autofree char *key = task_key (record->namespace_, record->id);
  g_autoptr(ShimwatchShim) shim = NULL;

  if (g_hash_table_contains (self->shims, key) || record->delete_emitted)
    return;      /* one whose TaskDelete went out: only files are left (reach_shims) */

  /* the object appears now, as the record describes the task; its shim is reached once
   * the name is owned, and calls that need the shim wait until then */
  shim = shimwatch_shim_new_from_record (self, record);
  g_object_set_data (G_OBJECT (shim), "shimwatch-manager", self);
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
    g_hash_table_insert (self->cgroup_users, g_strdup (shimwatch_shim_get_cgroup_path (shim)),
                         g_strdup (key));
  g_signal_connect (shim, "disconnected", G_CALLBACK (shim_disconnected_cb), self);
  g_signal_connect (shim, "finished", G_CALLBACK (shim_finished_cb), self);
  export_shim (self, shim);
  g_ptr_array_add (self->to_reach, g_steal_pointer (&shim));
}

void
shimwatch_manager_load (ShimwatchManager *self)
{
  gint64 started = g_get_monotonic_time ();

  g_return_if_fail (SHIMWATCH_IS_MANAGER (self));
  g_return_if_fail (self->records == NULL);

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
          g_ptr_array_add (self->broken, task_key (record->namespace_, record->id));
          g_ptr_array_remove_index (self->records, i--);
          continue;
        }
      g_hash_table_add (self->recorded, task_key (record->namespace_, record->id));
      load_record (self, record);
    }
  update_shim_count (self);
  g_message ("%u recorded tasks loaded in %.1f ms; their shims are reached once the bus "
             "name is owned", self->to_reach->len,
             (double) (g_get_monotonic_time () - started) / 1000.0);
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
      shimwatch_launcher_connect_async (self->launcher, shimwatch_shim_get_namespace (shim),
                                        shimwatch_shim_get_id (shim),
                                        shimwatch_shim_get_task_dir (shim), address,
                                        load_connected_cb, g_object_ref (shim));
    }

  /* clients already heard the end of these: only files are left */
  for (guint i = 0; i < records->len; i++)
    {
      ShimwatchRecord *record = g_ptr_array_index (records, i);
      g_autofree char *key = task_key (record->namespace_, record->id);
      g_autoptr(GError) error = NULL;

      if (!record->delete_emitted || g_hash_table_contains (self->shims, key))
        continue;
      self->n_loading++;
      if (!start_orphan_cleanup (self, record->namespace_, record->id,
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
          g_autofree char *key = task_key (ns, id);
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
          if (!start_orphan_cleanup (self, ns, id, self->config->cleanup_timeout_ms,
                                     orphan_done_cb, self))
            load_done (self);
        }
    }
  /* every recorded task has its log again: the others age from now */
  shimwatch_log_store_start_expiry (self->logs);
  load_done (self);
}

const char *
shimwatch_manager_get_records_dir (ShimwatchManager *self)
{
  return self->records_dir;
}

/* -- setup ---------------------------------------------------------------------------- */

ShimwatchAuthority *
shimwatch_manager_get_authority (ShimwatchManager *self)
{
  return self->authority;
}

ShimwatchCgroupHost *
shimwatch_manager_get_cgroups (ShimwatchManager *self)
{
  return self->cgroups;
}

ShimwatchCleanup *
shimwatch_manager_get_cleanup (ShimwatchManager *self)
{
  return self->cleanup;
}

const ShimwatchConfig *
shimwatch_manager_get_config (ShimwatchManager *self)
{
  return self->config;
}

const char *
shimwatch_manager_get_runc_root (ShimwatchManager *self)
{
  return self->runc_root;
}

ShimwatchSignalLedger *
shimwatch_manager_get_signal_ledger (ShimwatchManager *self)
{
  return self->ledger;
}

ShimwatchHistory *
shimwatch_manager_get_history (ShimwatchManager *self)
{
  return self->history;
}

guint
shimwatch_manager_get_n_cleanups (ShimwatchManager *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_MANAGER (self), 0);
  return shimwatch_cleanup_get_n_running (self->cleanup);
}

static gboolean
make_dir (const char  *path,
          int          mode,
          GError     **error)
{
  if (g_mkdir_with_parents (path, mode) == 0)
    return TRUE;
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "cannot create %s: %s", path,
               g_strerror (errno));
  return FALSE;
}

ShimwatchManager *
shimwatch_manager_new (const ShimwatchConfig  *config,
                       GError                **error)
{
  g_autoptr(ShimwatchManager) self = g_object_new (SHIMWATCH_TYPE_MANAGER, NULL);
  g_autofree char *events_path = NULL;
  g_autofree char *shim_address = NULL;
  g_autofree char *description = NULL;
  ShimwatchLauncherConfig launcher_config = { 0 };
  ShimwatchCounters counters = { 0 };

  self->config = shimwatch_config_copy (config);

  self->tasks_dir = g_build_filename (config->runtime_dir, "tasks", NULL);
  self->runc_root = g_build_filename (config->runtime_dir, "runc", NULL);
  self->records_dir = g_build_filename (config->runtime_dir, "records", NULL);
  if (!make_dir (config->runtime_dir, 0711, error) || !make_dir (self->tasks_dir, 0711, error) ||
      !make_dir (self->runc_root, 0711, error) || !make_dir (self->records_dir, 0700, error))
    return NULL;

  events_path = g_build_filename (config->runtime_dir, "events.sock", NULL);
  self->events = shimwatch_events_server_new (events_path, error);
  if (self->events == NULL)
    {
      g_prefix_error (error, "events socket %s: ", events_path);
      return NULL;
    }
  g_signal_connect (self->events, "event", G_CALLBACK (event_cb), self);
  shimwatch_events_server_set_sender_check (self->events, event_sender_check, self);

  /* -address only names the shim sockets (sha256 of <address>/<ns>/<id>); it is never
   * served, and being ours keeps our sockets apart from a containerd on the same host */
  shim_address = g_build_filename (config->runtime_dir, "shimwatch.sock", NULL);
  launcher_config.runtime_dirs = (const char * const *) config->runtime_path;
  launcher_config.shim_address = shim_address;
  launcher_config.ttrpc_address = events_path;
  launcher_config.runc_root = self->runc_root;
  self->cgroups = shimwatch_cgroup_host_detect ();
  description = shimwatch_cgroup_host_describe (self->cgroups);
  g_message ("task cgroups: %s", description);
  launcher_config.systemd_cgroup =
    shimwatch_cgroup_host_get_driver (self->cgroups) == SHIMWATCH_CGROUP_DRIVER_SYSTEMD;
  self->launcher = shimwatch_launcher_new (&launcher_config);
  self->cleanup = shimwatch_cleanup_new (self->launcher, self->cgroups,
                                         config->cleanup_concurrency);
  if (!make_dir (config->state_dir, 0700, error))
    return NULL;
  {
    g_autofree char *logs_dir = g_build_filename (config->state_dir, "logs", NULL);
    ShimwatchTaskLogLimits limits = { config->task_log_max_size, config->task_log_max_files };

    self->logs = shimwatch_log_store_new (logs_dir, &limits, config->task_log_retention_s,
                                          error);
    if (self->logs == NULL)
      return NULL;
  }

  /* what happened before this run: recent events, and the counters it goes on from */
  self->history = shimwatch_history_new (config->state_dir, SHIMWATCH_HISTORY_CAPACITY,
                                         SHIMWATCH_HISTORY_FILE_MAX);
  shimwatch_history_get_counters (self->history, &counters);
  shimwatch_dbus_manager_set_disconnect_count (SHIMWATCH_DBUS_MANAGER (self),
                                               counters.disconnects);
  shimwatch_dbus_manager_set_reap_count (SHIMWATCH_DBUS_MANAGER (self), counters.reaps);
  shimwatch_dbus_manager_set_cleanup_failure_count (SHIMWATCH_DBUS_MANAGER (self),
                                                    counters.cleanup_failures);

  shimwatch_dbus_manager_set_version (SHIMWATCH_DBUS_MANAGER (self), PACKAGE_VERSION);
  return g_steal_pointer (&self);
}

gboolean
shimwatch_manager_export (ShimwatchManager  *self,
                          GDBusConnection   *connection,
                          gboolean           use_polkit,
                          GError           **error)
{
  g_return_val_if_fail (SHIMWATCH_IS_MANAGER (self), FALSE);

  self->authority = shimwatch_authority_new (connection, use_polkit);
  self->object_manager = g_dbus_object_manager_server_new (SHIMWATCH_DBUS_PATH);
  g_dbus_object_manager_server_set_connection (self->object_manager, connection);
  self->filtered = g_object_ref (connection);
  self->filter_id = shimwatch_signal_ledger_attach (self->ledger, connection);
  return g_dbus_interface_skeleton_export (G_DBUS_INTERFACE_SKELETON (self), connection,
                                           SHIMWATCH_DBUS_PATH, error);
}

void
shimwatch_manager_shutdown (ShimwatchManager *self)
{
  GHashTableIter iter;
  gpointer value;

  g_return_if_fail (SHIMWATCH_IS_MANAGER (self));

  /* shims outlive the service, as with containerd: stop watching, touch nothing */
  g_hash_table_iter_init (&iter, self->shims);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    shimwatch_shim_detach (value);
  if (self->events != NULL)
    shimwatch_events_server_stop (self->events);
}

static void
shimwatch_manager_finalize (GObject *object)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (object);

  g_hash_table_unref (self->shims);
  g_hash_table_unref (self->reserved);
  g_hash_table_unref (self->reaps);
  g_clear_pointer (&self->records, g_ptr_array_unref);
  g_clear_pointer (&self->broken, g_ptr_array_unref);
  g_clear_pointer (&self->recorded, g_hash_table_unref);
  g_clear_pointer (&self->to_reach, g_ptr_array_unref);
  if (self->filtered != NULL)
    g_dbus_connection_remove_filter (self->filtered, self->filter_id);
  g_clear_object (&self->filtered);
  g_clear_pointer (&self->ledger, shimwatch_signal_ledger_unref);
  g_clear_object (&self->history);     /* writes what is still queued */
  g_clear_object (&self->object_manager);
  g_clear_object (&self->authority);
  g_clear_object (&self->logs);
  g_clear_object (&self->events);
  g_clear_object (&self->cleanup);
  g_clear_object (&self->launcher);
  g_clear_pointer (&self->cgroups, shimwatch_cgroup_host_unref);
  g_hash_table_unref (self->cgroup_users);
  shimwatch_config_free (self->config);
  g_free (self->tasks_dir);
  g_free (self->runc_root);
  g_free (self->records_dir);
  G_OBJECT_CLASS (shimwatch_manager_parent_class)->finalize (object);
}

static void
shimwatch_manager_iface_init (ShimwatchDbusManagerIface *iface)
{
  iface->handle_create_task = handle_create_task;
  iface->handle_list_shims = handle_list_shims;
  iface->handle_get_shim = handle_get_shim;
  iface->handle_reap = handle_reap;
  iface->handle_get_history = handle_get_history;
}

static void
shimwatch_manager_class_init (ShimwatchManagerClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_manager_finalize;
}

static void
shimwatch_manager_init (ShimwatchManager *self)
{
  self->shims = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_object_unref);
  self->reserved = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->reaps = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                       (GDestroyNotify) g_ptr_array_unref);
  self->cgroup_users = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  self->ledger = shimwatch_signal_ledger_new (SHIMWATCH_DBUS_MANAGER_IFACE);
}
