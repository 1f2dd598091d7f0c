/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchManager: setup, the listing, the events' routing, Reap
 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <errno.h>

#include "shimwatch-error.h"
#include "shimwatch-events-server.h"
#include "shimwatch-log-store.h"
#include "shimwatch-history.h"
#include "shimwatch-manager-private.h"
#include "shimwatch-metrics.h"
#include "shimwatch-names.h"
#include "shimwatch-shim.h"
#include "shimwatch-task-object.h"

static void shimwatch_manager_iface_init (ShimwatchDbusManagerIface *iface);

G_DEFINE_TYPE_WITH_CODE (ShimwatchManager, shimwatch_manager, SHIMWATCH_DBUS_TYPE_MANAGER_SKELETON,
                         G_IMPLEMENT_INTERFACE (SHIMWATCH_DBUS_TYPE_MANAGER,
                                                shimwatch_manager_iface_init))

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
  key = shimwatch_task_key (event->namespace_, event->container_id);
  shim = g_hash_table_lookup (self->tasks->shims, key);
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
  key = shimwatch_task_key (event->namespace_, event->container_id);
  shim = g_hash_table_lookup (self->tasks->shims, key);
  if (shim == NULL)
    {
      g_debug ("event %s for %s, which is not supervised", event->topic, key);
      return;
    }
  shimwatch_shim_handle_event (shim, event);
}

/* -- read-only methods ---------------------------------------------------------------- */

static gboolean
handle_list_shims (ShimwatchDbusManager  *iface,
                   GDBusMethodInvocation *invocation)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autoptr(GPtrArray) paths = g_ptr_array_new_with_free_func (g_free);
  GHashTableIter iter;
  gpointer value;

  /* a task still being created is listed once its object is exported (one loaded from
   * its record is exported before the bus name is even taken) */
  g_hash_table_iter_init (&iter, self->tasks->shims);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    if (shimwatch_shim_is_exported (value))
      g_ptr_array_add (paths, g_strdup (shimwatch_shim_get_object_path (value)));
  /* and, in companion mode, containerd's own tasks */
  if (self->containerd != NULL)
    shimwatch_containerd_list (self->containerd, paths);
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

  if (!shimwatch_error_check_task_name (arg_namespace, arg_id, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  key = shimwatch_task_key (arg_namespace, arg_id);
  shim = g_hash_table_lookup (self->tasks->shims, key);
  if ((shim == NULL || !shimwatch_shim_is_exported (shim)) && self->containerd != NULL)
    {
      ShimwatchContainerdTask *task = shimwatch_containerd_lookup (self->containerd, arg_namespace,
                                                                   arg_id);

      if (task != NULL)
        {
          shimwatch_dbus_manager_complete_get_shim (iface, invocation,
                                                    shimwatch_containerd_task_get_path (task));
          return G_DBUS_METHOD_INVOCATION_HANDLED;
        }
    }
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

/* the metrics carry no task id, nothing a caller could not count from the signals: no
 * authorization, as GetHistory */
static gboolean
handle_get_metrics (ShimwatchDbusManager  *iface,
                    GDBusMethodInvocation *invocation)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (iface);
  g_autofree char *text = shimwatch_metrics_render (self->metrics);

  shimwatch_dbus_manager_complete_get_metrics (iface, invocation, text);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- Reap ----------------------------------------------------------------------------- */

typedef struct {
  ShimwatchManager      *self;
  GDBusMethodInvocation *invocation;
  char                  *namespace_;
  char                  *id;
  guint                  timeout_ms;
  gboolean               containerd;   /* option owner = "containerd" */
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
  shimwatch_task_table_remove_unused_cgroup_parents (data->self->tasks, data->namespace_);
  if (outcome->delete_timed_out)
    shimwatch_metrics_count_cleanup_timeout (data->self->metrics);
  shimwatch_task_table_remove_unused_runc_dir (data->self->tasks, data->namespace_);
  shimwatch_task_table_count_cleanup (data->self->tasks, data->namespace_, data->id,
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

static void
reap_authorized_cb (GObject      *source,
                    GAsyncResult *result,
                    gpointer      user_data)
{
  g_autoptr(ReapData) data = user_data;
  ShimwatchManager *self = data->self;
  g_autoptr(GError) error = NULL;
  g_autofree char *key = shimwatch_task_key (data->namespace_, data->id);
  ShimwatchShim *shim;

  if (!shimwatch_authority_check_finish (SHIMWATCH_AUTHORITY (source), result, &error))
    {
      g_dbus_method_invocation_return_gerror (data->invocation, error);
      return;
    }

  shim = g_hash_table_lookup (self->tasks->shims, key);
  /* a containerd task: asked for by owner, or when no task of ours has that name */
  if (self->containerd != NULL &&
      (data->containerd ||
       (shim == NULL && !g_hash_table_contains (self->tasks->reserved, key))))
    {
      ShimwatchContainerdTask *task = shimwatch_containerd_lookup (self->containerd,
                                                                   data->namespace_, data->id);

      if (task != NULL)
        {
          shimwatch_containerd_task_reap (task, data->invocation);
          return;
        }
      if (data->containerd)
        {
          g_dbus_method_invocation_return_error (data->invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_NOT_FOUND,
                                                 "no containerd task %s is watched", key);
          return;
        }
    }
  if (g_hash_table_contains (self->tasks->reserved, key) ||
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
      shimwatch_task_table_wait_for_end (self->tasks, key, data->invocation);
      shimwatch_shim_kill_shim (shim, NULL);
      return;
    }

  /* nothing supervised: state left on disk is cleaned the same way */
  if (!shimwatch_orphans_start_cleanup (&self->orphans, data->namespace_, data->id,
                                        data->timeout_ms, orphan_cleanup_done_cb, data))
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
  gboolean owner_containerd = FALSE;

  if (!shimwatch_error_check_task_name (arg_namespace, arg_id, &error))
    {
      g_dbus_method_invocation_return_gerror (invocation, error);
      return G_DBUS_METHOD_INVOCATION_HANDLED;
    }
  g_variant_iter_init (&iter, arg_options);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) owned G_GNUC_UNUSED = value;

      if (g_str_equal (key, "owner"))
        {
          const char *owner = g_variant_is_of_type (value, G_VARIANT_TYPE_STRING) ?
                              g_variant_get_string (value, NULL) : NULL;

          if (g_strcmp0 (owner, "containerd") != 0 && g_strcmp0 (owner, "shimwatch") != 0)
            {
              g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                     SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                     "option \"owner\" must be s, \"shimwatch\" "
                                                     "or \"containerd\"");
              return G_DBUS_METHOD_INVOCATION_HANDLED;
            }
          owner_containerd = g_str_equal (owner, "containerd");
          continue;
        }
      if (!g_str_equal (key, "timeout"))
        {
          g_dbus_method_invocation_return_error (invocation, SHIMWATCH_ERROR,
                                                 SHIMWATCH_ERROR_INVALID_ARGUMENT,
                                                 "unknown option \"%s\" (known: timeout, owner)",
                                                 key);
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
  data->containerd = owner_containerd;
  shimwatch_authority_check_async (self->authority, invocation, SHIMWATCH_ACTION_REAP,
                                   data->namespace_, data->id, reap_authorized_cb, data);
  return G_DBUS_METHOD_INVOCATION_HANDLED;
}

/* -- setup ---------------------------------------------------------------------------- */

const ShimwatchConfig *
shimwatch_manager_get_config (ShimwatchManager *self)
{
  return self->config;
}

gboolean
shimwatch_manager_records_settled (ShimwatchManager *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_MANAGER (self), TRUE);
  return shimwatch_record_committer_is_idle (shimwatch_publisher_get_committer (self->publisher)) &&
         (self->containerd == NULL || shimwatch_containerd_records_settled (self->containerd));
}

void
shimwatch_manager_sync_history (ShimwatchManager *self)
{
  g_return_if_fail (SHIMWATCH_IS_MANAGER (self));
  shimwatch_history_sync (self->history);
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

/* the metrics' supervised gauge: every task of ours and, in companion mode, of
 * containerd's, by owner and namespace */
static void
count_supervised (GHashTable *supervised,
                  gpointer    user_data)
{
  ShimwatchManager *self = user_data;
  GHashTableIter iter;
  gpointer value;

  /* as ListShims: a task being created counts once its object is exported */
  g_hash_table_iter_init (&iter, self->tasks->shims);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      char *key;

      if (!shimwatch_shim_is_exported (value))
        continue;
      key = g_strconcat (shimwatch_dbus_shim_get_owner (SHIMWATCH_DBUS_SHIM (value)), "\n",
                         shimwatch_shim_get_namespace (value), NULL);
      g_hash_table_insert (supervised, key,
                           GUINT_TO_POINTER (GPOINTER_TO_UINT (g_hash_table_lookup (supervised,
                                                                                    key)) + 1));
    }
  if (self->containerd != NULL)
    shimwatch_containerd_count_tasks (self->containerd, supervised);
}

/* a task log's oldest file went, to keep within the cap */
static void
log_dropped_cb (guint64  bytes,
                gpointer user_data)
{
  ShimwatchManager *self = user_data;

  shimwatch_metrics_count_log_dropped (self->metrics, bytes);
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
  self->health = shimwatch_health_scheduler_new (config->health_interval_ms,
                                                 SHIMWATCH_HEALTH_TIMEOUT_MS);
  if (!make_dir (config->state_dir, 0700, error))
    return NULL;
  {
    g_autofree char *logs_dir = g_build_filename (config->state_dir, "logs", NULL);
    ShimwatchTaskLogLimits limits = { config->task_log_max_size, config->task_log_max_files,
                                      log_dropped_cb, self };

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
  self->metrics = shimwatch_metrics_new (self->history, config->metrics_dir);
  shimwatch_metrics_set_task_counter (self->metrics, count_supervised, self);

  self->publisher = shimwatch_publisher_new (SHIMWATCH_DBUS_MANAGER (self), self->records_dir,
                                             self->history);
  shimwatch_publisher_set_metrics (self->publisher, self->metrics);

  /* put on the connection once the recorded tasks' objects are in it (load) */
  self->object_manager = g_dbus_object_manager_server_new (SHIMWATCH_DBUS_PATH);
  self->tasks = shimwatch_task_table_new (SHIMWATCH_DBUS_MANAGER (self), self->object_manager,
                                          self->history, self->metrics, self->cgroups,
                                          self->runc_root);
  self->orphans = (ShimwatchOrphans) {
    .runtime_path = (const char * const *) self->config->runtime_path,
    .tasks_dir = self->tasks_dir,
    .runc_root = self->runc_root,
    .cgroups = self->cgroups,
    .claims = self->tasks->cgroup_users,
    .cleanup = self->cleanup,
  };

  shimwatch_dbus_manager_set_version (SHIMWATCH_DBUS_MANAGER (self), PACKAGE_VERSION);
  shimwatch_dbus_manager_set_configuration (SHIMWATCH_DBUS_MANAGER (self),
                                            shimwatch_config_to_variant (config));
  return g_steal_pointer (&self);
}

static void
containerd_disconnected_cb (ShimwatchManager *self)
{
  shimwatch_task_table_count_disconnect (self->tasks);
}

static void
containerd_finished_cb (ShimwatchContainerd *containerd,
                        const char          *namespace_,
                        const char          *id,
                        guint32              exit_status,
                        gboolean             took_over,
                        gboolean             cleanup_failed,
                        ShimwatchManager    *self)
{
  if (!took_over)
    return;
  shimwatch_metrics_count_takeover (self->metrics);
  shimwatch_task_table_count_cleanup (self->tasks, namespace_, id, exit_status,
                                      cleanup_failed
                                        ? "the takeover of containerd's cleanup did not finish"
                                        : NULL);
}

gboolean
shimwatch_manager_export (ShimwatchManager  *self,
                          GDBusConnection   *connection,
                          gboolean           use_polkit,
                          GError           **error)
{
  g_return_val_if_fail (SHIMWATCH_IS_MANAGER (self), FALSE);

  self->authority = shimwatch_authority_new (connection, use_polkit);
  /* what a shim works with, handed to it when it is built (no calls back into the manager) */
  self->shim_services = (ShimwatchShimServices) {
    .config = self->config,
    .cleanup = self->cleanup,
    .authority = self->authority,
    .publisher = self->publisher,
    .runc_root = self->runc_root,
    .health = self->health,
  };
  shimwatch_publisher_attach (self->publisher, connection);
  if (self->config->containerd_enable)
    {
      self->containerd = shimwatch_containerd_new (self->config, self->publisher,
                                                   self->object_manager, connection,
                                                   shimwatch_publisher_get_ledger (self->publisher),
                                                   self->history, error);
      if (self->containerd == NULL)
        return FALSE;
      g_signal_connect_swapped (self->containerd, "disconnected",
                                G_CALLBACK (containerd_disconnected_cb), self);
      g_signal_connect (self->containerd, "finished", G_CALLBACK (containerd_finished_cb), self);
    }
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
  g_hash_table_iter_init (&iter, self->tasks->shims);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    shimwatch_shim_detach (value);
  if (self->containerd != NULL)
    shimwatch_containerd_shutdown (self->containerd);
  if (self->events != NULL)
    shimwatch_events_server_stop (self->events);
}

static void
shimwatch_manager_finalize (GObject *object)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (object);

  g_clear_object (&self->containerd);
  g_clear_pointer (&self->tasks, shimwatch_task_table_free);
  g_clear_pointer (&self->records, g_ptr_array_unref);
  g_clear_pointer (&self->broken, g_ptr_array_unref);
  g_clear_pointer (&self->recorded, g_hash_table_unref);
  g_clear_pointer (&self->to_reach, g_ptr_array_unref);
  g_clear_object (&self->publisher);
  g_clear_object (&self->metrics);     /* writes what is still queued */
  g_clear_object (&self->history);     /* writes what is still queued */
  g_clear_object (&self->object_manager);
  g_clear_object (&self->authority);
  g_clear_object (&self->logs);
  g_clear_object (&self->events);
  g_clear_object (&self->cleanup);
  g_clear_object (&self->health);
  g_clear_object (&self->launcher);
  g_clear_pointer (&self->cgroups, shimwatch_cgroup_host_unref);
  shimwatch_config_free (self->config);
  g_free (self->tasks_dir);
  g_free (self->runc_root);
  g_free (self->records_dir);
  G_OBJECT_CLASS (shimwatch_manager_parent_class)->finalize (object);
}

static void
shimwatch_manager_iface_init (ShimwatchDbusManagerIface *iface)
{
  iface->handle_create_task = shimwatch_manager_handle_create_task;
  iface->handle_list_shims = handle_list_shims;
  iface->handle_get_shim = handle_get_shim;
  iface->handle_reap = handle_reap;
  iface->handle_get_history = handle_get_history;
  iface->handle_get_metrics = handle_get_metrics;
}

/* The counters (ShimCount, DisconnectCount, ReapCount, CleanupFailureCount) change
 * twice per death and once per create. Their PropertiesChanged goes out at most every
 * COUNTERS_INTERVAL_MS, with every counter that changed meanwhile: when many tasks die
 * or start together, one message instead of one per change and main-loop turn. A Get
 * or GetAll sees each change at once; only the signal waits. The skeleton schedules its
 * PropertiesChanged from notify, so the notify of a counter is passed on late. */
#define COUNTERS_INTERVAL_MS 250

static gboolean
is_counter (GParamSpec *pspec)
{
  static const char * const counters[] = {
    "shim-count", "disconnect-count", "reap-count", "cleanup-failure-count",
  };

  for (guint i = 0; i < G_N_ELEMENTS (counters); i++)
    if (g_str_equal (pspec->name, counters[i]))
      return TRUE;
  return FALSE;
}

static gboolean
counters_cb (gpointer user_data)
{
  ShimwatchManager *self = user_data;

  self->counters_source = 0;
  G_OBJECT_CLASS (shimwatch_manager_parent_class)->notify (G_OBJECT (self),
                                                           self->counters_pspec);
  return G_SOURCE_REMOVE;
}

static void
shimwatch_manager_notify (GObject    *object,
                          GParamSpec *pspec)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (object);

  if (!is_counter (pspec))
    {
      G_OBJECT_CLASS (shimwatch_manager_parent_class)->notify (object, pspec);
      return;
    }
  /* any counter's notify makes the skeleton send all that changed */
  self->counters_pspec = pspec;
  if (self->counters_source == 0)
    self->counters_source = g_timeout_add (COUNTERS_INTERVAL_MS, counters_cb, self);
}

static void
shimwatch_manager_dispose (GObject *object)
{
  ShimwatchManager *self = SHIMWATCH_MANAGER (object);

  g_clear_handle_id (&self->counters_source, g_source_remove);
  G_OBJECT_CLASS (shimwatch_manager_parent_class)->dispose (object);
}

static void
shimwatch_manager_class_init (ShimwatchManagerClass *klass)
{
  G_OBJECT_CLASS (klass)->notify = shimwatch_manager_notify;
  G_OBJECT_CLASS (klass)->dispose = shimwatch_manager_dispose;
  G_OBJECT_CLASS (klass)->finalize = shimwatch_manager_finalize;
}

static void
shimwatch_manager_init (ShimwatchManager *self)
{
}
