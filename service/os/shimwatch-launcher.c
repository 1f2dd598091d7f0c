/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchLauncher"

#include "config.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-error.h"
#include "shimwatch-launcher.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-spawn.h"
#include "shimwatch-ttrpc.h"

struct _ShimwatchLauncher
{
  GObject  parent_instance;

  GStrv    runtime_dirs;
  char    *shim_address;
  char    *ttrpc_address;
  char    *runc_root;
  gboolean systemd_cgroup;
  guint    start_timeout_ms;
  guint    connect_timeout_ms;
  /* namespace → the environment of its shims' commands (a GStrv), made once: a copy of
   * the service's environment and five settings, 30 allocations, at every death */
  GHashTable *environments;
};

/* more namespaces than this (each of a few KiB) and the cache starts over */
#define ENVIRONMENTS_MAX 64

G_DEFINE_TYPE (ShimwatchLauncher, shimwatch_launcher, G_TYPE_OBJECT)

void
shimwatch_shim_handle_free (ShimwatchShimHandle *handle)
{
  if (handle == NULL)
    return;
  g_clear_object (&handle->client);
  g_clear_object (&handle->log);
  g_free (handle->address);
  g_free (handle);
}

char *
shimwatch_launcher_resolve_runtime (ShimwatchLauncher  *self,
                                    const char         *runtime,
                                    GError            **error)
{
  g_auto(GStrv) parts = NULL;
  g_autofree char *name = NULL;
  g_autofree char *dirs = NULL;
  guint n;

  g_return_val_if_fail (SHIMWATCH_IS_LAUNCHER (self), NULL);

  /* a runtime is a name, never a path: the caller must not pick what we execute */
  if (runtime == NULL || *runtime == '\0' || strchr (runtime, '/') != NULL ||
      !shimwatch_identifier_validate ("runtime", runtime, NULL))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "runtime \"%s\" is not a runtime name like %s",
                   runtime != NULL && g_utf8_validate (runtime, -1, NULL) ? runtime : "?",
                   SHIMWATCH_DEFAULT_RUNTIME);
      return NULL;
    }

  /* containerd's BinaryName: io.containerd.runc.v2 → containerd-shim-runc-v2 */
  parts = g_strsplit (runtime, ".", -1);
  n = g_strv_length (parts);
  if (n < 2 || *parts[n - 2] == '\0' || *parts[n - 1] == '\0')
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "runtime \"%s\" has no <name>.<version> suffix", runtime);
      return NULL;
    }
  name = g_strdup_printf ("containerd-shim-%s-%s", parts[n - 2], parts[n - 1]);

  for (guint i = 0; self->runtime_dirs != NULL && self->runtime_dirs[i] != NULL; i++)
    {
      g_autofree char *path = g_build_filename (self->runtime_dirs[i], name, NULL);

      if (g_file_test (path, G_FILE_TEST_IS_REGULAR) &&
          g_file_test (path, G_FILE_TEST_IS_EXECUTABLE))
        return g_steal_pointer (&path);
    }

  dirs = self->runtime_dirs != NULL ? g_strjoinv (":", self->runtime_dirs) : g_strdup ("none");
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
               "unknown runtime \"%s\": no executable %s in the runtime directories (%s)",
               runtime, name, dirs);
  return NULL;
}

gboolean
shimwatch_launcher_prepare_task_dir (ShimwatchLauncher  *self,
                                     const char         *task_dir,
                                     GBytes             *config,
                                     const char         *shim_binary,
                                     GError            **error)
{
  g_autofree char *parent = g_path_get_dirname (task_dir);
  g_autofree char *target = NULL;
  g_autofree char *binary_path = NULL;
  g_autoptr(GError) local_error = NULL;
  int saved_errno;
  int rc;

  g_return_val_if_fail (SHIMWATCH_IS_LAUNCHER (self), FALSE);
  g_return_val_if_fail (config != NULL, FALSE);

  /* containerd's NewBundle: parent 0711, bundle 0700 */
  if (g_mkdir_with_parents (parent, 0711) != 0)
    {
      saved_errno = errno;
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                   "cannot create %s: %s", parent, g_strerror (saved_errno));
      return FALSE;
    }
  rc = g_mkdir (task_dir, 0700);
  if (rc != 0 && errno == ENOENT)
    {
      /* a cleanup thread removed the namespace directory with its last task meanwhile */
      g_mkdir_with_parents (parent, 0711);
      rc = g_mkdir (task_dir, 0700);
    }
  if (rc != 0)
    {
      saved_errno = errno;
      g_set_error (error, SHIMWATCH_ERROR,
                   saved_errno == EEXIST ? SHIMWATCH_ERROR_ALREADY_EXISTS : SHIMWATCH_ERROR_FAILED,
                   "cannot create task directory %s: %s", task_dir, g_strerror (saved_errno));
      return FALSE;
    }

  target = g_build_filename (task_dir, "config.json", NULL);
  binary_path = g_build_filename (task_dir, "shim-binary-path", NULL);
  if (!g_file_set_contents_full (target, g_bytes_get_data (config, NULL), g_bytes_get_size (config),
                                 G_FILE_SET_CONTENTS_CONSISTENT, 0644, &local_error) ||
      !g_file_set_contents_full (binary_path, shim_binary, -1,
                                 G_FILE_SET_CONTENTS_CONSISTENT, 0600, &local_error))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                   "cannot write into task directory %s: %s", task_dir, local_error->message);
      /* the directory is ours, just made: a half-written one must not hold the name (a
       * full disk is the usual cause). GLib removed its temporary file itself. */
      (void) g_unlink (target);
      (void) g_unlink (binary_path);
      if (g_rmdir (task_dir) != 0)
        g_warning ("cannot remove the task directory %s of a failed create: %s", task_dir,
                   g_strerror (errno));
      return FALSE;
    }
  return TRUE;
}

static const char * const *
shim_environment (ShimwatchLauncher *self,
                  const char        *namespace_)
{
  char **env = g_hash_table_lookup (self->environments, namespace_);

  /* (the service never changes its own environment once it runs) */
  if (env != NULL)
    return (const char * const *) env;
  if (g_hash_table_size (self->environments) >= ENVIRONMENTS_MAX)
    g_hash_table_remove_all (self->environments);
  env = g_get_environ ();

  /* the runtime-v2 environment (docs/protocol.md §2); the 1.7/2.x variables are harmless to 1.6 */
  env = g_environ_setenv (env, "GOMAXPROCS", "2", TRUE);
  env = g_environ_setenv (env, "TTRPC_ADDRESS", self->ttrpc_address, TRUE);
  env = g_environ_setenv (env, "GRPC_ADDRESS", self->shim_address, TRUE);
  env = g_environ_setenv (env, "NAMESPACE", namespace_, TRUE);
  env = g_environ_setenv (env, "MAX_SHIM_VERSION", "2", TRUE);
  /* runc's systemd cgroup driver asks systemd for each task's scope on the machine's
   * system bus; a bus the service itself was pointed at (a private one in the tests) is
   * not where systemd is */
  if (self->systemd_cgroup)
    env = g_environ_unsetenv (env, "DBUS_SYSTEM_BUS_ADDRESS");
  g_hash_table_insert (self->environments, g_strdup (namespace_), env);
  return (const char * const *) env;
}

/* one run of `<shim> start` or `<shim> delete`: stdin bytes in, stdout and stderr out,
 * SIGKILL at the deadline. Both are started with posix_spawn, never with a fork of the
 * service (see shimwatch-spawn.h): `start` on every CreateTask, `delete` for every dead
 * shim, hundreds at once when a node loses its shims. */
typedef void (*SpawnedFunc) (GTask                *task,
                             ShimwatchSpawnResult *outcome,
                             GError               *error);

typedef struct {
  char       *namespace_;
  char       *id;
  char       *task_dir;
  char       *shim_binary;
  const char *action;
  SpawnedFunc spawned;      /* the run's end: the task (a reference), its outcome */
  GBytes     *stdout_bytes;
  GBytes     *stderr_bytes;
} RunData;

static void
run_data_free (RunData *data)
{
  g_free (data->namespace_);
  g_free (data->id);
  g_free (data->task_dir);
  g_free (data->shim_binary);
  g_clear_pointer (&data->stdout_bytes, g_bytes_unref);
  g_clear_pointer (&data->stderr_bytes, g_bytes_unref);
  g_free (data);
}

static void
log_stderr (RunData *data)
{
  g_autofree char *text = NULL;
  GLogLevelFlags level;
  gsize length;
  const char *raw;

  if (data->stderr_bytes == NULL || g_bytes_get_size (data->stderr_bytes) == 0)
    return;
  raw = g_bytes_get_data (data->stderr_bytes, &length);
  /* a shim's "starting signal loop" at every delete is no news for the journal: where
   * info lines are not asked for, it is looked at where it lies, and not copied */
  level = shimwatch_log_level_of_output_len (raw, length);
  if (shimwatch_log_would_drop (level, G_LOG_DOMAIN))
    return;
  text = g_utf8_make_valid (raw, (gssize) length);
  g_strchomp (text);
  shimwatch_log_task (level,
                      (&(ShimwatchLogTask) { .namespace_ = data->namespace_, .id = data->id,
                                             .bare = TRUE }),
                      "shim %s for %s/%s wrote: %s", data->action, data->namespace_, data->id,
                      text);
}

/* NULL when the process exited 0; otherwise why not */
static GError *
run_status_error (RunData                    *data,
                  const ShimwatchSpawnResult *outcome)
{
  g_autofree char *text = NULL;
  int status = outcome->wait_status;

  if (outcome->timed_out)
    return g_error_new (G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                        "shim %s for %s/%s did not finish in time and was killed",
                        data->action, data->namespace_, data->id);
  if (WIFEXITED (status) && WEXITSTATUS (status) == 0)
    return NULL;

  text = g_utf8_make_valid (g_bytes_get_data (outcome->stderr_bytes, NULL),
                            (gssize) g_bytes_get_size (outcome->stderr_bytes));
  g_strstrip (text);
  return g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED,
                      "shim %s for %s/%s failed (%s %d)%s%s", data->action, data->namespace_,
                      data->id, WIFEXITED (status) ? "exit status" : "signal",
                      WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status),
                      *text != '\0' ? ": " : "", text);
}

/* The shim's stdin as a sealed-off memory file, never a pipe: a shim that exits without
 * reading it (or before we finished writing) must not turn a good run into EPIPE. */
static int
stdin_fd_for (GBytes  *bytes,
              GError **error)
{
  gsize length = 0;
  const char *data = bytes != NULL ? g_bytes_get_data (bytes, &length) : NULL;
  gsize done = 0;
  int fd = memfd_create ("shimwatch-shim-stdin", MFD_CLOEXEC);

  while (fd >= 0 && done < length)
    {
      gssize n = write (fd, data + done, length - done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          close (fd);
          fd = -1;
          break;
        }
      done += (gsize) n;
    }
  if (fd < 0 || lseek (fd, 0, SEEK_SET) != 0)
    {
      int saved_errno = errno;

      if (fd >= 0)
        close (fd);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot prepare the shim's stdin: %s", g_strerror (saved_errno));
      return -1;
    }
  return fd;
}

/* the run's end, to the action's own */
static void
spawned_cb (ShimwatchSpawnResult *outcome,
            GError               *error,
            gpointer              user_data)
{
  GTask *task = user_data;
  RunData *data = g_task_get_task_data (task);

  data->spawned (task, outcome, error);
}

/* `<shim> -namespace … -id … [-bundle …] <action>` in the task directory, with the
 * runtime-v2 environment; @spawned gets the returned task (a reference) once the process
 * exited. The spawn hands the end to a plain callback: the task is the action's only
 * GTask (shimwatch_spawn_async() made one more per run). */
static GTask *
run_shim_action (ShimwatchLauncher  *self,
                 gpointer            source_tag,
                 const char         *shim_binary,
                 const char         *namespace_,
                 const char         *id,
                 const char         *task_dir,
                 const char         *action,
                 GBytes             *stdin_bytes,
                 guint               timeout_ms,
                 SpawnedFunc         spawned,
                 GAsyncReadyCallback callback,
                 gpointer            user_data)
{
  g_autoptr(GError) error = NULL;
  GTask *task = g_task_new (self, NULL, callback, user_data);
  RunData *data = g_new0 (RunData, 1);
  const char *argv[16];
  guint n = 0;
  int stdin_fd = -1;

  g_task_set_source_tag (task, source_tag);
  g_task_set_task_data (task, data, (GDestroyNotify) run_data_free);
  data->namespace_ = g_strdup (namespace_);
  data->id = g_strdup (id);
  data->task_dir = g_strdup (task_dir);
  data->shim_binary = g_strdup (shim_binary);
  data->action = action;
  data->spawned = spawned;

  argv[n++] = shim_binary;
  argv[n++] = "-namespace";
  argv[n++] = namespace_;
  argv[n++] = "-address";
  argv[n++] = self->shim_address;
  argv[n++] = "-publish-binary";
  argv[n++] = "/bin/true";   /* ignored by runtime-v2 shims, which publish via TTRPC_ADDRESS */
  argv[n++] = "-id";
  argv[n++] = id;
  if (g_strcmp0 (action, "delete") == 0)
    {
      argv[n++] = "-bundle";
      argv[n++] = task_dir;
    }
  argv[n++] = action;
  argv[n] = NULL;

  if (stdin_bytes != NULL)
    {
      stdin_fd = stdin_fd_for (stdin_bytes, &error);
      if (stdin_fd < 0)
        {
          g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED, "%s",
                                   error->message);
          return task;
        }
    }
  /* the child (or the spawner) has its own stdin once this returns: ours can go */
  shimwatch_spawn_run (argv, shim_environment (self, namespace_), task_dir, stdin_fd,
                       timeout_ms, spawned_cb, g_object_ref (task));
  if (stdin_fd >= 0)
    close (stdin_fd);
  return task;
}

/* after the run: its output kept and its stderr logged; FALSE, with @task returned, unless
 * it exited 0 */
static gboolean
finish_run (GTask                *task,
            ShimwatchSpawnResult *result,
            GError               *spawn_error)
{
  RunData *data = g_task_get_task_data (task);
  g_autoptr(ShimwatchSpawnResult) outcome = result;
  g_autoptr(GError) error = spawn_error;

  if (outcome == NULL)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED,
                               "shim %s for %s/%s: %s", data->action, data->namespace_,
                               data->id, error->message);
      return FALSE;
    }
  data->stdout_bytes = g_bytes_ref (outcome->stdout_bytes);
  data->stderr_bytes = g_bytes_ref (outcome->stderr_bytes);
  log_stderr (data);
  error = run_status_error (data, outcome);
  if (error != NULL)
    {
      g_task_return_error (task, g_steal_pointer (&error));
      return FALSE;
    }
  return TRUE;
}

/* -- start ----------------------------------------------------------------------------- */

typedef struct {
  ShimwatchShimHandle *handle;
} StartState;

static void
start_connect_rpc_cb (GObject      *source,
                      GAsyncResult *result,
                      gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  StartState *state = g_object_get_data (G_OBJECT (task), "start-state");
  RunData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;
  ShimwatchShimHandle *handle = state->handle;

  if (!shimwatch_task_client_connect_finish (SHIMWATCH_TASK_CLIENT (source), result,
                                             &handle->shim_pid, NULL, &error))
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED,
                               "shim for %s/%s at %s does not answer Connect: %s",
                               data->namespace_, data->id, handle->address, error->message);
      return;
    }
  shimwatch_log_task (G_LOG_LEVEL_INFO,
                      (&(ShimwatchLogTask) { .namespace_ = data->namespace_, .id = data->id,
                                             .has_pids = TRUE, .shim_pid = handle->shim_pid,
                                             .bare = TRUE }),
                      "shim for %s/%s answers: pid %u, %s, task API v%d", data->namespace_,
                      data->id, handle->shim_pid, handle->address,
                      shimwatch_task_client_get_version (handle->client));
  state->handle = NULL;
  g_task_return_pointer (task, handle, (GDestroyNotify) shimwatch_shim_handle_free);
}

static void
start_socket_cb (GObject      *source,
                 GAsyncResult *result,
                 gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  ShimwatchLauncher *self = g_task_get_source_object (task);
  StartState *state = g_object_get_data (G_OBJECT (task), "start-state");
  RunData *data = g_task_get_task_data (task);
  g_autoptr(ShimwatchTtrpc) ttrpc = NULL;
  g_autoptr(GError) error = NULL;

  ttrpc = shimwatch_ttrpc_connect_finish (result, &error);
  if (ttrpc == NULL)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED,
                               "cannot connect to shim for %s/%s at %s: %s", data->namespace_,
                               data->id, state->handle->address, error->message);
      return;
    }
  shimwatch_ttrpc_start (ttrpc);
  /* v3 first, v2 on UNIMPLEMENTED, as containerd's bridge */
  state->handle->client = shimwatch_task_client_new (ttrpc, data->namespace_, data->id, 3);
  shimwatch_task_client_connect_async (state->handle->client, self->connect_timeout_ms,
                                       start_connect_rpc_cb, g_steal_pointer (&task));
}

static void
start_spawned (GTask                *run_task,
               ShimwatchSpawnResult *outcome,
               GError               *spawn_error)
{
  g_autoptr(GTask) task = run_task;
  StartState *state = g_object_get_data (G_OBJECT (task), "start-state");
  RunData *data = g_task_get_task_data (task);
  g_autoptr(ShimwatchBootstrap) bootstrap = NULL;
  g_autoptr(GError) error = NULL;

  if (!finish_run (task, outcome, spawn_error))
    return;
  bootstrap = shimwatch_wire_parse_start_output (data->stdout_bytes, &error);
  if (bootstrap == NULL)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED,
                               "shim start for %s/%s: %s", data->namespace_, data->id,
                               error->message);
      return;
    }
  state->handle->address = g_strdup (bootstrap->address);
  shimwatch_ttrpc_connect_async (bootstrap->address, NULL, start_socket_cb,
                                 g_steal_pointer (&task));
}

static void
start_state_free (StartState *state)
{
  shimwatch_shim_handle_free (state->handle);
  g_free (state);
}

void
shimwatch_launcher_start_async (ShimwatchLauncher   *self,
                                const char          *shim_binary,
                                const char          *namespace_,
                                const char          *id,
                                const char          *task_dir,
                                GAsyncReadyCallback  callback,
                                gpointer             user_data)
{
  g_autoptr(GTask) task = NULL;
  g_autoptr(GBytes) options = NULL;
  g_autoptr(GError) error = NULL;
  StartState *state = g_new0 (StartState, 1);

  g_return_if_fail (SHIMWATCH_IS_LAUNCHER (self));

  state->handle = g_new0 (ShimwatchShimHandle, 1);
  /* the FIFO needs a reader before the shim daemon opens it for writing */
  state->handle->log = shimwatch_shim_log_open (task_dir, namespace_, id, &error);
  if (state->handle->log == NULL)
    {
      task = g_task_new (self, NULL, callback, user_data);
      g_task_set_source_tag (task, shimwatch_launcher_start_async);
      start_state_free (state);
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED, "%s",
                               error->message);
      return;
    }

  options = shimwatch_wire_encode_runc_options (self->runc_root, self->systemd_cgroup);
  task = run_shim_action (self, shimwatch_launcher_start_async, shim_binary, namespace_, id,
                          task_dir, "start", options, self->start_timeout_ms,
                          start_spawned, callback, user_data);
  g_object_set_data_full (G_OBJECT (task), "start-state", state,
                          (GDestroyNotify) start_state_free);
}

void
shimwatch_launcher_connect_async (ShimwatchLauncher   *self,
                                  const char          *namespace_,
                                  const char          *id,
                                  const char          *task_dir,
                                  const char          *address,
                                  GAsyncReadyCallback  callback,
                                  gpointer             user_data)
{
  g_autoptr(GTask) task = g_task_new (self, NULL, callback, user_data);
  g_autoptr(GError) error = NULL;
  StartState *state = g_new0 (StartState, 1);
  RunData *data = g_new0 (RunData, 1);

  g_return_if_fail (SHIMWATCH_IS_LAUNCHER (self));

  /* the same tail as start: connect, then Connect; only the process is not ours */
  g_task_set_source_tag (task, shimwatch_launcher_start_async);
  data->namespace_ = g_strdup (namespace_);
  data->id = g_strdup (id);
  data->task_dir = g_strdup (task_dir);
  g_task_set_task_data (task, data, (GDestroyNotify) run_data_free);
  state->handle = g_new0 (ShimwatchShimHandle, 1);
  state->handle->address = g_strdup (address);
  g_object_set_data_full (G_OBJECT (task), "start-state", state,
                          (GDestroyNotify) start_state_free);

  /* a live shim blocks writing its log until someone reads the FIFO again */
  state->handle->log = shimwatch_shim_log_open (task_dir, namespace_, id, &error);
  if (state->handle->log == NULL)
    g_debug ("%s/%s: no shim log: %s", namespace_, id, error->message);
  shimwatch_ttrpc_connect_async (address, NULL, start_socket_cb, g_steal_pointer (&task));
}

ShimwatchShimHandle *
shimwatch_launcher_connect_finish (ShimwatchLauncher  *self,
                                   GAsyncResult       *result,
                                   GError            **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

ShimwatchShimHandle *
shimwatch_launcher_start_finish (ShimwatchLauncher  *self,
                                 GAsyncResult       *result,
                                 GError            **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

/* -- delete ---------------------------------------------------------------------------- */

static void
delete_spawned (GTask                *run_task,
                ShimwatchSpawnResult *outcome,
                GError               *spawn_error)
{
  g_autoptr(GTask) task = run_task;
  RunData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;
  ShimwatchExit *exit_info;

  if (!finish_run (task, outcome, spawn_error))
    return;
  exit_info = g_new0 (ShimwatchExit, 1);
  if (!shimwatch_wire_decode_delete_response (data->stdout_bytes, exit_info, &error))
    {
      g_free (exit_info);
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED,
                               "shim delete for %s/%s printed no DeleteResponse: %s",
                               data->namespace_, data->id, error->message);
      return;
    }
  g_task_return_pointer (task, exit_info, g_free);
}

void
shimwatch_launcher_delete_async (ShimwatchLauncher   *self,
                                 const char          *shim_binary,
                                 const char          *namespace_,
                                 const char          *id,
                                 const char          *task_dir,
                                 guint                timeout_ms,
                                 GAsyncReadyCallback  callback,
                                 gpointer             user_data)
{
  GTask *task;

  g_return_if_fail (SHIMWATCH_IS_LAUNCHER (self));

  /* the run holds the task until it returned */
  task = run_shim_action (self, shimwatch_launcher_delete_async, shim_binary, namespace_, id,
                          task_dir, "delete", NULL, timeout_ms, delete_spawned, callback,
                          user_data);
  g_object_unref (task);
}

gboolean
shimwatch_launcher_delete_finish (ShimwatchLauncher  *self,
                                  GAsyncResult       *result,
                                  ShimwatchExit      *exit_info,
                                  GError            **error)
{
  g_autofree ShimwatchExit *info = NULL;

  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);

  info = g_task_propagate_pointer (G_TASK (result), error);
  if (info == NULL)
    return FALSE;
  *exit_info = *info;
  return TRUE;
}

const char *
shimwatch_launcher_get_runc_root (ShimwatchLauncher *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_LAUNCHER (self), NULL);
  return self->runc_root;
}

ShimwatchLauncher *
shimwatch_launcher_new (const ShimwatchLauncherConfig *config)
{
  ShimwatchLauncher *self;

  g_return_val_if_fail (config != NULL, NULL);
  g_return_val_if_fail (config->shim_address != NULL, NULL);
  g_return_val_if_fail (config->ttrpc_address != NULL, NULL);

  self = g_object_new (SHIMWATCH_TYPE_LAUNCHER, NULL);
  self->runtime_dirs = g_strdupv ((GStrv) config->runtime_dirs);
  self->shim_address = g_strdup (config->shim_address);
  self->ttrpc_address = g_strdup (config->ttrpc_address);
  self->runc_root = g_strdup (config->runc_root);
  self->systemd_cgroup = config->systemd_cgroup;
  self->start_timeout_ms = config->start_timeout_ms > 0 ? config->start_timeout_ms : 10000;
  self->connect_timeout_ms = config->connect_timeout_ms > 0 ? config->connect_timeout_ms : 5000;
  return self;
}

static void
shimwatch_launcher_finalize (GObject *object)
{
  ShimwatchLauncher *self = SHIMWATCH_LAUNCHER (object);

  g_strfreev (self->runtime_dirs);
  g_hash_table_unref (self->environments);
  g_free (self->shim_address);
  g_free (self->ttrpc_address);
  g_free (self->runc_root);

  G_OBJECT_CLASS (shimwatch_launcher_parent_class)->finalize (object);
}

static void
shimwatch_launcher_class_init (ShimwatchLauncherClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_launcher_finalize;
}

static void
shimwatch_launcher_init (ShimwatchLauncher *self)
{
  self->environments = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                              (GDestroyNotify) g_strfreev);
}
