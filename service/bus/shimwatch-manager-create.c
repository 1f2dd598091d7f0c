/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchManager: CreateTask
 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <string.h>
#include <sys/stat.h>
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

/* -- CreateTask ----------------------------------------------------------------------- */

/* each call to the new shim */
#define RPC_TIMEOUT_MS 10000

/* a config.json larger than this leaves enough freed memory behind to hand back */
#define SHIMWATCH_TRIM_AFTER (256 * 1024)

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
    {
      g_hash_table_remove (data->self->tasks->reserved, data->key);
      /* a failed create's runc may have made its namespace's directory */
      shimwatch_task_table_remove_unused_runc_dir (data->self->tasks, data->namespace_);
    }
  if (data->cgroup_path != NULL)
    {
      shimwatch_task_table_release_cgroup (data->self->tasks, data->cgroup_path, data->key);
      shimwatch_task_table_remove_unused_cgroup_parents (data->self->tasks, data->namespace_);
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

  shimwatch_log_task (G_LOG_LEVEL_WARNING,
                      (&(ShimwatchLogTask) { .namespace_ = data->namespace_, .id = data->id,
                                             .event = "create-failed" }),
                      "CreateTask failed: %s", converted->message);
  if (data->task_log != NULL)
    shimwatch_task_log_discard (data->task_log);
  if (data->shim != NULL)
    {
      if (g_hash_table_lookup (data->self->tasks->shims, data->key) == data->shim)
        g_hash_table_remove (data->self->tasks->shims, data->key);
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

  g_hash_table_insert (self->tasks->shims, g_strdup (data->key), g_object_ref (data->shim));
  shimwatch_task_table_watch (self->tasks, data->shim);
  /* the shim owns the claim on its cgroup from now on, until it is finished */
  g_clear_pointer (&data->cgroup_path, g_free);
  /* recorded before anyone learns of it: from now on a restart knows this task */
  shimwatch_shim_make_persistent (data->shim);
  shimwatch_task_table_export (self->tasks, data->shim);
  shimwatch_task_table_update_count (self->tasks);
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
  data->shim = shimwatch_shim_new (&self->shim_services, data->namespace_, data->id,
                                   data->runtime, data->shim_binary, data->task_dir);
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
  g_hash_table_insert (self->tasks->shims, g_strdup (data->key), g_object_ref (data->shim));

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

/* -- the bundle, read and checked in a thread ------------------------------------------ */

/* A config.json may be 4 MiB of JSON (SHIMWATCH_BUNDLE_CONFIG_MAX): parsing and checking
 * it, a few times over, takes long enough to stall everything else on the main loop */
typedef struct {
  char            *bundle;
  ShimwatchCaller *caller;
  char            *default_cgroup;
  char            *stdio[3];
  GStrv            runtime_path;
  ShimwatchBundle *opened;
  GStrv            command;
} OpenData;

static void
open_data_free (OpenData *open)
{
  g_free (open->bundle);
  shimwatch_caller_free (open->caller);
  g_free (open->default_cgroup);
  for (guint i = 0; i < G_N_ELEMENTS (open->stdio); i++)
    g_free (open->stdio[i]);
  g_strfreev (open->runtime_path);
  g_clear_pointer (&open->opened, shimwatch_bundle_free);
  g_strfreev (open->command);
  g_free (open);
}

static void
open_bundle_thread (GTask        *task,
                    gpointer      source_object,
                    gpointer      task_data,
                    GCancellable *cancellable)
{
  OpenData *open = task_data;
  GError *error = NULL;

  /* the bundle runs as root: its caller must be able to read it themselves, and to
   * open what the shim will open for the task's stdio */
  open->opened = shimwatch_bundle_open (open->bundle, open->caller, open->default_cgroup,
                                        &error);
  if (open->opened == NULL ||
      !shimwatch_stdio_check (open->stdio, (const char * const *) open->runtime_path,
                              open->caller, &error))
    {
      g_task_return_error (task, error);
      return;
    }
  /* process.args of the config.json the task directory will hold, bounded */
  open->command = shimwatch_wire_oci_process_args (g_bytes_get_data (open->opened->config, NULL),
                                                   g_bytes_get_size (open->opened->config),
                                                   &error);
  if (open->command == NULL)
    {
      g_task_return_error (task, error);
      return;
    }
  g_task_return_boolean (task, TRUE);
}

static void
create_bundle_opened_cb (GObject      *source,
                         GAsyncResult *result,
                         gpointer      user_data)
{
  CreateData *data = user_data;
  ShimwatchManager *self = data->self;
  OpenData *open = g_task_get_task_data (G_TASK (result));
  g_autoptr(GError) error = NULL;
  g_autofree char *cgroup_path = NULL;
  const char *other;
  gsize config_size;

  if (!g_task_propagate_boolean (G_TASK (result), &error))
    {
      create_fail (data, error);
      return;
    }
  data->opened = g_steal_pointer (&open->opened);
  data->command = g_steal_pointer (&open->command);
  config_size = g_bytes_get_size (data->opened->config);
  /* what parsing a big config.json took (in the thread's arena) goes back to the system */
  if (config_size > SHIMWATCH_TRIM_AFTER)
    malloc_trim (0);
  /* before anything starts: a cgroup of its own, shared with no other task */
  cgroup_path = shimwatch_cgroup_resolve (self->cgroups, data->opened->cgroups_path, &error);
  if (cgroup_path == NULL)
    {
      g_prefix_error (&error, "bundle %s: ", data->bundle);
      create_fail (data, error);
      return;
    }
  other = shimwatch_task_table_cgroup_user (self->tasks, cgroup_path);
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
  shimwatch_cgroup_claims_set (self->tasks->cgroup_users, data->cgroup_path, data->key);
  if (!shimwatch_launcher_prepare_task_dir (self->launcher, data->task_dir, data->opened->config,
                                            data->shim_binary, &error))
    {
      create_fail (data, error);
      return;
    }
  data->dir_prepared = TRUE;
  /* after the check of the caller's own paths: these FIFOs are the service's */
  if (!open_task_log (data, &error) ||
      !shimwatch_stdio_prepare (data->stdio, data->task_dir, &error))
    {
      create_fail (data, error);
      return;
    }
  shimwatch_launcher_start_async (self->launcher, data->shim_binary, data->namespace_, data->id,
                                  data->task_dir, create_shim_started_cb, data);
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
  default_cgroup = shimwatch_cgroup_task_path (shimwatch_cgroup_host_get_layout (self->cgroups),
                                               shimwatch_cgroup_host_get_own (self->cgroups),
                                               shimwatch_cgroup_host_get_driver (self->cgroups),
                                               data->namespace_, data->id);
  {
    g_autoptr(GTask) task = g_task_new (self, NULL, create_bundle_opened_cb, data);
    OpenData *open = g_new0 (OpenData, 1);

    open->bundle = g_strdup (data->bundle);
    open->caller = g_steal_pointer (&caller);
    open->default_cgroup = g_steal_pointer (&default_cgroup);
    for (guint i = 0; i < G_N_ELEMENTS (open->stdio); i++)
      open->stdio[i] = g_strdup (data->stdio[i]);
    open->runtime_path = g_strdupv (self->config->runtime_path);
    g_task_set_source_tag (task, create_caller_known_cb);
    g_task_set_task_data (task, open, (GDestroyNotify) open_data_free);
    g_task_run_in_thread (task, open_bundle_thread);
  }
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
  if (g_hash_table_contains (self->tasks->shims, data->key) ||
      g_hash_table_contains (self->tasks->reserved, data->key))
    {
      g_dbus_method_invocation_return_error (data->invocation, SHIMWATCH_ERROR,
                                             SHIMWATCH_ERROR_ALREADY_EXISTS,
                                             "task %s is already supervised", data->key);
      create_data_free (data);
      return;
    }
  g_hash_table_add (self->tasks->reserved, g_strdup (data->key));
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
      if (!shimwatch_error_check_option_type (key, value, expected, error))
        return FALSE;
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

gboolean
shimwatch_manager_handle_create_task (ShimwatchDbusManager  *iface,
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
  if (!shimwatch_error_check_task_name (arg_namespace, arg_id, &error))
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
  data->key = shimwatch_task_key (arg_namespace, arg_id);
  data->namespace_ = g_strdup (arg_namespace);
  data->id = g_strdup (arg_id);
  data->bundle = g_strdup (arg_bundle);
  data->task_dir = g_build_filename (self->tasks_dir, arg_namespace, arg_id, NULL);
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
