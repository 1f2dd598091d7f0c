/* SPDX-License-Identifier: Apache-2.0
 *
 * The launcher and ttrpc client against shimwatch-test-shim, for what the real shim cannot
 * produce: garbage and oversized frames, a Connect that never answers, a connection that
 * closes on the first request, a `delete` that hangs past its timeout, broken `start`
 * output. Each must end in a clear error within its deadline, never a crash or a stuck
 * main loop. Also: bad runtime names and bundle paths change nothing.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <glib/gstdio.h>

#include "shimwatch-error.h"
#include "shimwatch-bundle.h"
#include "shimwatch-events-server.h"
#include "shimwatch-launcher.h"
#include "shimwatch-spawn.h"
#include "shimwatch-test-util.h"

#define NS      "swfault"
#define RUNTIME "io.shimwatch.test.v1"

/* g_get_environ() as GLib's, counted: the launcher, linked in statically, calls this one */
static guint n_get_environ;

typedef gchar **(*GetEnvironFunc) (void);

gchar **
g_get_environ (void)
{
  static GetEnvironFunc real;

  if (real == NULL)
    real = (GetEnvironFunc) dlsym (RTLD_NEXT, "g_get_environ");
  n_get_environ++;
  return real ();
}

/* g_task_new() calls: the launcher's and the spawn's, from the service's code linked into
 * this executable (GIO's own are not counted) */
static guint n_task_new;

typedef GTask *(*TaskNewFunc) (gpointer            source_object,
                               GCancellable       *cancellable,
                               GAsyncReadyCallback callback,
                               gpointer            callback_data);

GTask *
g_task_new (gpointer            source_object,
            GCancellable       *cancellable,
            GAsyncReadyCallback callback,
            gpointer            callback_data)
{
  static TaskNewFunc real;

  if (real == NULL)
    real = (TaskNewFunc) dlsym (RTLD_NEXT, "g_task_new");
  n_task_new++;
  return real (source_object, cancellable, callback, callback_data);
}

typedef struct {
  char                  *dir;
  char                  *runtime_dir;
  char                  *bundle;
  char                  *task_dir;
  char                  *shim_binary;
  ShimwatchEventsServer *events;
  ShimwatchLauncher     *launcher;
  ShimwatchTestGuard    *guard;
} Fixture;

static void
fixture_setup (Fixture       *fx,
               gconstpointer  data)
{
  const char *test_shim = g_getenv ("SHIMWATCH_TEST_SHIM");
  g_autofree char *events_path = NULL;
  g_autofree char *link = NULL;
  g_autoptr(GError) error = NULL;
  const char *runtime_dirs[2] = { NULL, NULL };
  ShimwatchLauncherConfig config = { 0 };

  g_assert_nonnull (test_shim);
  fx->dir = g_dir_make_tmp ("swfault-XXXXXX", &error);
  g_assert_no_error (error);
  /* the test shim's servers and containers, their sockets, the directory: gone at the end,
   * even when a failed assertion aborts the test */
  fx->guard = shimwatch_test_guard_new (fx->dir, NULL);

  /* the test shim is a runtime like any other: containerd-shim-test-v1 in a runtime dir */
  fx->runtime_dir = g_build_filename (fx->dir, "runtimes", NULL);
  g_mkdir (fx->runtime_dir, 0755);
  link = g_build_filename (fx->runtime_dir, "containerd-shim-test-v1", NULL);
  g_assert_no_errno (symlink (test_shim, link));

  fx->bundle = g_build_filename (fx->dir, "bundle", NULL);
  g_mkdir (fx->bundle, 0755);
  {
    g_autofree char *rootfs = g_build_filename (fx->bundle, "rootfs", NULL);

    g_mkdir (rootfs, 0755);
  }
  fx->task_dir = g_build_filename (fx->dir, "tasks", NS, "t1", NULL);

  events_path = g_build_filename (fx->dir, "events.sock", NULL);
  fx->events = shimwatch_events_server_new (events_path, &error);
  g_assert_no_error (error);
  runtime_dirs[0] = fx->runtime_dir;
  config.runtime_dirs = runtime_dirs;
  config.shim_address = fx->dir;
  config.ttrpc_address = events_path;
  config.runc_root = fx->dir;
  config.start_timeout_ms = 2000;
  config.connect_timeout_ms = 300;
  fx->launcher = shimwatch_launcher_new (&config);
  fx->shim_binary = shimwatch_launcher_resolve_runtime (fx->launcher, RUNTIME, &error);
  g_assert_no_error (error);
}

static void
fixture_teardown (Fixture       *fx,
                  gconstpointer  data)
{
  g_clear_object (&fx->launcher);
  g_clear_object (&fx->events);
  /* the test shim's server and container run with the task dir as cwd: the guard kills
   * them by PID and removes the socket their address file names */
  shimwatch_test_guard_finish (fx->guard);
  g_free (fx->dir);
  g_free (fx->runtime_dir);
  g_free (fx->bundle);
  g_free (fx->task_dir);
  g_free (fx->shim_binary);
}

static void
prepare (Fixture    *fx,
         const char *mode)
{
  g_autofree char *config_path = g_build_filename (fx->bundle, "config.json", NULL);
  g_autofree char *config = g_strdup_printf (
    "{\"process\":{\"args\":[\"sleep\",\"100000\"]},\"root\":{\"path\":\"rootfs\"},"
    "\"annotations\":{\"org.shimwatch.test.mode\":\"%s\"}}", mode);
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchBundle) bundle = NULL;

  g_assert_true (g_file_set_contents (config_path, config, -1, NULL));
  bundle = shimwatch_bundle_open (fx->bundle, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (shimwatch_launcher_prepare_task_dir (fx->launcher, fx->task_dir, bundle->config,
                                                      fx->shim_binary, &error));
  g_assert_no_error (error);
}

/* start the shim in the given mode and return the error it must end in */
static GError *
start_expecting_failure (Fixture    *fx,
                         const char *mode,
                         gint64     *elapsed_ms)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(ShimwatchShimHandle) handle = NULL;
  GError *error = NULL;
  gint64 started;

  prepare (fx, mode);
  started = g_get_monotonic_time ();
  shimwatch_launcher_start_async (fx->launcher, fx->shim_binary, NS, "t1", fx->task_dir,
                                  shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 10000);
  handle = shimwatch_launcher_start_finish (fx->launcher, result, &error);
  if (elapsed_ms != NULL)
    *elapsed_ms = (g_get_monotonic_time () - started) / 1000;
  g_assert_null (handle);
  g_assert_nonnull (error);
  g_test_message ("%s: %s", mode, error->message);
  return error;
}

/* what `start` is run with: the task directory as its working directory (the test shim
 * reads its mode from ./config.json), the runtime-v2 environment (its server inherits it),
 * stdin, stdout and stderr, and no other descriptor of ours */
static void
test_start_process (Fixture      *fx,
                    gconstpointer data)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(ShimwatchShimHandle) handle = NULL;
  g_autoptr(ShimwatchShimHandle) other = NULL;
  g_autofree char *first_task_dir = NULL;
  ShimwatchExit exit_info;
  g_autoptr(GError) error = NULL;
  g_autofree char *marker = g_build_filename (fx->dir, "not-inherited", NULL);
  g_autofree char *report_path = NULL;
  g_autofree char *report = NULL;
  g_autofree char *environ_path = NULL;
  g_autofree char *environ_text = NULL;
  g_autofree char *ttrpc = g_strdup_printf ("TTRPC_ADDRESS=%s/events.sock", fx->dir);
  g_autofree char *grpc = g_strdup_printf ("GRPC_ADDRESS=%s", fx->dir);
  g_autoptr(GPtrArray) env = g_ptr_array_new ();
  g_auto(GStrv) lines = NULL;
  int marker_fd;
  gsize length;

  prepare (fx, "report-start");
  marker_fd = open (marker, O_RDWR | O_CREAT, 0600);   /* no O_CLOEXEC on purpose */
  g_assert_cmpint (marker_fd, >=, 3);
  shimwatch_launcher_start_async (fx->launcher, fx->shim_binary, NS, "t1", fx->task_dir,
                                  shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 10000);
  handle = shimwatch_launcher_start_finish (fx->launcher, result, &error);
  g_assert_no_error (error);
  g_assert_no_errno (close (marker_fd));

  report_path = g_build_filename (fx->task_dir, "start-fds", NULL);
  g_assert_true (g_file_get_contents (report_path, &report, NULL, NULL));
  g_test_message ("start's descriptors:\n%s", report);
  lines = g_strsplit (g_strchomp (report), "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 3);
  g_assert_true (g_str_has_prefix (lines[0], "0 /memfd:shimwatch-shim-stdin"));
  g_assert_true (g_str_has_prefix (lines[1], "1 pipe:"));
  g_assert_true (g_str_has_prefix (lines[2], "2 pipe:"));

  environ_path = g_strdup_printf ("/proc/%u/environ", handle->shim_pid);
  g_assert_true (g_file_get_contents (environ_path, &environ_text, &length, NULL));
  for (gsize at = 0; at < length; at += strlen (environ_text + at) + 1)
    g_ptr_array_add (env, environ_text + at);
  g_ptr_array_add (env, NULL);
  g_assert_true (g_strv_contains ((const char * const *) env->pdata, ttrpc));
  g_assert_true (g_strv_contains ((const char * const *) env->pdata, grpc));
  g_assert_true (g_strv_contains ((const char * const *) env->pdata, "NAMESPACE=" NS));
  g_assert_true (g_strv_contains ((const char * const *) env->pdata, "MAX_SHIM_VERSION=2"));

  /* a shim of another namespace gets its own (the launcher makes each namespace's
   * environment once, and keeps it) */
  g_clear_object (&result);
  first_task_dir = fx->task_dir;
  fx->task_dir = g_build_filename (fx->dir, "tasks", "other", "t1", NULL);
  prepare (fx, "report-start");
  shimwatch_launcher_start_async (fx->launcher, fx->shim_binary, "other", "t1", fx->task_dir,
                                  shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 10000);
  other = shimwatch_launcher_start_finish (fx->launcher, result, &error);
  g_assert_no_error (error);
  g_free (environ_path);
  environ_path = g_strdup_printf ("/proc/%u/environ", other->shim_pid);
  g_free (environ_text);
  g_assert_true (g_file_get_contents (environ_path, &environ_text, &length, NULL));
  g_ptr_array_set_size (env, 0);
  for (gsize at = 0; at < length; at += strlen (environ_text + at) + 1)
    g_ptr_array_add (env, environ_text + at);
  g_ptr_array_add (env, NULL);
  g_assert_true (g_strv_contains ((const char * const *) env->pdata, "NAMESPACE=other"));
  g_assert_false (g_strv_contains ((const char * const *) env->pdata, "NAMESPACE=" NS));
  g_assert_true (g_strv_contains ((const char * const *) env->pdata, ttrpc));

  /* the first namespace's again (its delete, as at a death): the environment is not made
   * again (it was, from a copy of the service's, at every start and delete) */
  n_get_environ = 0;
  g_clear_object (&result);
  shimwatch_launcher_delete_async (fx->launcher, fx->shim_binary, NS, "t1", first_task_dir,
                                   10000, shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 15000);
  g_assert_true (shimwatch_launcher_delete_finish (fx->launcher, result, &exit_info, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (n_get_environ, ==, 0);
}

static void
test_normal (Fixture       *fx,
             gconstpointer  data)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(ShimwatchShimHandle) handle = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchCreateParams params = { .id = "t1" };
  guint32 pid = 0;

  /* the control case: the same harness with a well-behaved shim works end to end */
  prepare (fx, "normal");
  shimwatch_launcher_start_async (fx->launcher, fx->shim_binary, NS, "t1", fx->task_dir,
                                  shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 10000);
  handle = shimwatch_launcher_start_finish (fx->launcher, result, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (handle->shim_pid, >, 0);
  g_clear_object (&result);

  params.bundle = fx->task_dir;
  shimwatch_task_client_create_async (handle->client, &params, 2000,
                                      shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 5000);
  g_assert_true (shimwatch_task_client_create_finish (handle->client, result, &pid, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (pid, >, 0);
}

/* the voluntary context switches of @pid so far, once it sleeps in poll(2) (its
 * /proc/PID/syscall starts with poll's number): each later one is a wake-up */
static guint64
sleeps_in_poll (guint32 pid)
{
  g_autofree char *syscall_path = g_strdup_printf ("/proc/%u/syscall", pid);
  g_autofree char *status_path = g_strdup_printf ("/proc/%u/status", pid);
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  g_autofree char *status = NULL;
  const char *line;

  for (;;)
    {
      g_autofree char *current = NULL;

      g_assert_true (g_file_get_contents (syscall_path, &current, NULL, NULL));
      if (g_str_has_prefix (current, G_STRINGIFY (__NR_poll) " "))
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (1000);
    }
  g_assert_true (g_file_get_contents (status_path, &status, NULL, NULL));
  line = strstr (status, "\nvoluntary_ctxt_switches:");
  g_assert_nonnull (line);
  return g_ascii_strtoull (line + strlen ("\nvoluntary_ctxt_switches:"), NULL, 10);
}

/* An idle test shim sleeps until something happens to it, as a real shim does: the
 * bench's scale scenario runs 1,000 of them beside the service, and a wake-up of each on
 * a clock (it polled with a 1 s timeout) was a load growing with their number. Over a few
 * seconds with nothing sent and its container alive, the server does not wake once. */
static void
test_idle_server_sleeps (Fixture      *fx,
                         gconstpointer data)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(ShimwatchShimHandle) handle = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchCreateParams params = { .id = "t1" };
  guint32 pid = 0;
  guint64 before;

  prepare (fx, "normal");
  shimwatch_launcher_start_async (fx->launcher, fx->shim_binary, NS, "t1", fx->task_dir,
                                  shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 10000);
  handle = shimwatch_launcher_start_finish (fx->launcher, result, &error);
  g_assert_no_error (error);
  g_clear_object (&result);
  params.bundle = fx->task_dir;
  shimwatch_task_client_create_async (handle->client, &params, 2000,
                                      shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 5000);
  g_assert_true (shimwatch_task_client_create_finish (handle->client, result, &pid, &error));
  g_assert_no_error (error);

  before = sleeps_in_poll (handle->shim_pid);
  /* not a synchronisation: a window in which the old server woke three times (at least
   * twice however loaded the machine), and the new one, whatever the load, never */
  g_usleep (3 * G_USEC_PER_SEC);
  g_assert_cmpuint (sleeps_in_poll (handle->shim_pid), ==, before);
  g_assert_false (shimwatch_test_process_is_dead (pid));
}

static void
test_garbage_frames (Fixture       *fx,
                     gconstpointer  data)
{
  g_autoptr(GError) error = start_expecting_failure (fx, "garbage", NULL);

  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED);
  g_assert_nonnull (strstr (error->message, "does not answer Connect"));
  g_assert_nonnull (strstr (error->message, "do not decode as a ttrpc Response"));
}

static void
test_oversize_frame (Fixture       *fx,
                     gconstpointer  data)
{
  g_autoptr(GError) error = start_expecting_failure (fx, "oversize", NULL);

  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED);
  g_assert_nonnull (strstr (error->message, "exceeds the 4 MiB message limit"));
}

static void
test_connect_never_answers (Fixture       *fx,
                            gconstpointer  data)
{
  gint64 elapsed_ms;
  g_autoptr(GError) error = start_expecting_failure (fx, "hang-connect", &elapsed_ms);

  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED);
  g_assert_nonnull (strstr (error->message, "no answer within its deadline"));
  /* the 300 ms Connect deadline, not a hang */
  g_assert_cmpint (elapsed_ms, <, 3000);
}

static void
test_close_on_request (Fixture       *fx,
                       gconstpointer  data)
{
  g_autoptr(GError) error = start_expecting_failure (fx, "close-on-request", NULL);

  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED);
  g_assert_nonnull (strstr (error->message, "ttrpc: closed"));
}

static void
test_start_fails (Fixture       *fx,
                  gconstpointer  data)
{
  g_autoptr(GError) error = start_expecting_failure (fx, "fail-start", NULL);

  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED);
  g_assert_nonnull (strstr (error->message, "exit status 1"));
  g_assert_nonnull (strstr (error->message, "start failed on purpose"));
}

/* start has the same deadline as delete: killed, with a clear error, never a stuck create */
static void
test_start_hangs (Fixture      *fx,
                  gconstpointer data)
{
  gint64 elapsed_ms;
  g_autoptr(GError) error = start_expecting_failure (fx, "hang-start", &elapsed_ms);

  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT);
  g_assert_nonnull (strstr (error->message, "shim start for " NS "/t1 did not finish in time"));
  g_assert_nonnull (strstr (error->message, "killed"));
  /* the fixture's StartTimeout is 2 s */
  g_assert_cmpint (elapsed_ms, >=, 1900);
  g_assert_cmpint (elapsed_ms, <, 10000);
}

static void
test_start_prints_garbage (Fixture       *fx,
                           gconstpointer  data)
{
  g_autoptr(GError) error = start_expecting_failure (fx, "bad-start", NULL);

  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_SHIM_FAILED);
  g_assert_nonnull (strstr (error->message, "neither an address"));
}

static void
test_delete_hangs (Fixture       *fx,
                   gconstpointer  data)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchExit exit_info = { 0 };
  gint64 started;
  gint64 elapsed_ms;

  prepare (fx, "hang-delete");
  started = g_get_monotonic_time ();
  shimwatch_launcher_delete_async (fx->launcher, fx->shim_binary, NS, "t1", fx->task_dir, 300,
                                   shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 5000);
  elapsed_ms = (g_get_monotonic_time () - started) / 1000;
  g_assert_false (shimwatch_launcher_delete_finish (fx->launcher, result, &exit_info, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT);
  g_assert_nonnull (strstr (error->message, "killed"));
  g_assert_cmpint (elapsed_ms, >=, 290);
  g_assert_cmpint (elapsed_ms, <, 2000);
}

/* A `shim delete` through the launcher and the spawner makes one GTask, the launcher's
 * own: the spawn hands the run's end to a plain callback. (It made two per death, each a
 * GObject made, notified and finalized on the main thread.) */
static void
test_delete_one_task (Fixture      *fx,
                      gconstpointer data)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchExit exit_info = { 0 };

  prepare (fx, "normal");
  g_assert_cmpint (shimwatch_spawn_get_spawner_pid (), >, 0);
  n_task_new = 0;
  shimwatch_launcher_delete_async (fx->launcher, fx->shim_binary, NS, "t1", fx->task_dir, 10000,
                                   shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 15000);
  g_assert_true (shimwatch_launcher_delete_finish (fx->launcher, result, &exit_info, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (n_task_new, ==, 1);
}

static void
test_bad_runtime_names (Fixture      *fx,
                        gconstpointer data)
{
  const char *bad[] = { "/usr/bin/containerd-shim-runc-v2", "../../bin/sh", "io.containerd.nope.v9",
                        "", "runc", "io..x.v1", "io.containerd.runc.v2/" };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree char *path = shimwatch_launcher_resolve_runtime (fx->launcher, bad[i], &error);

      g_assert_null (path);
      g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
    }
}

static void
test_bad_bundles (Fixture       *fx,
                  gconstpointer  data)
{
  g_autofree char *no_config = g_build_filename (fx->dir, "empty", NULL);
  g_autoptr(GError) error = NULL;
  const char *bad[] = { "relative/bundle", "", "/nonexistent/bundle" };
  g_autoptr(ShimwatchBundle) bundle = NULL;

  g_mkdir (no_config, 0755);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_assert_null (shimwatch_bundle_open (bad[i], NULL, NULL, &error));
      g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }
  g_assert_null (shimwatch_bundle_open (no_config, NULL, NULL, &error));
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* nothing was created for any of them */
  g_assert_false (g_file_test (fx->task_dir, G_FILE_TEST_EXISTS));

  /* a second task with the same directory is refused, the first one untouched */
  prepare (fx, "normal");
  bundle = shimwatch_bundle_open (fx->bundle, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_false (shimwatch_launcher_prepare_task_dir (fx->launcher, fx->task_dir, bundle->config,
                                                       fx->shim_binary, &error));
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_ALREADY_EXISTS);
}

int
main (int    argc,
      char **argv)
{
  int status;
  int ret;

  g_test_init (&argc, &argv, NULL);
  signal (SIGPIPE, SIG_IGN);
  /* as in shimwatchd: shim start and shim delete are run by the spawner process */
  g_assert_true (shimwatch_spawn_start_spawner (NULL));

#define ADD(path, fn) g_test_add (path, Fixture, NULL, fixture_setup, fn, fixture_teardown)
  ADD ("/shim-faults/normal", test_normal);
  ADD ("/shim-faults/idle-server-sleeps", test_idle_server_sleeps);
  ADD ("/shim-faults/start-process", test_start_process);
  ADD ("/shim-faults/garbage-frames", test_garbage_frames);
  ADD ("/shim-faults/oversize-frame", test_oversize_frame);
  ADD ("/shim-faults/connect-never-answers", test_connect_never_answers);
  ADD ("/shim-faults/close-on-request", test_close_on_request);
  ADD ("/shim-faults/start-fails", test_start_fails);
  ADD ("/shim-faults/start-prints-garbage", test_start_prints_garbage);
  ADD ("/shim-faults/start-hangs", test_start_hangs);
  ADD ("/shim-faults/delete-hangs", test_delete_hangs);
  ADD ("/shim-faults/delete-one-task", test_delete_one_task);
  ADD ("/shim-faults/bad-runtime-names", test_bad_runtime_names);
  ADD ("/shim-faults/bad-bundles", test_bad_bundles);
#undef ADD
  ret = g_test_run ();
  /* still there, and it exits 0 when let go */
  status = shimwatch_spawn_stop_spawner ();
  return ret != 0 ? ret : WIFEXITED (status) && WEXITSTATUS (status) == 0 ? 0 : 1;
}
