/* SPDX-License-Identifier: Apache-2.0
 *
 * The wire layer against the real containerd-shim-runc-v2 and runc, in `start` mode as
 * containerd 1.6 runs it: a full lifecycle with events, and the seed's case — the shim
 * SIGKILLed under a running container.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <glib/gstdio.h>

#include "shimwatch-bundle.h"
#include "shimwatch-events-server.h"
#include "shimwatch-launcher.h"
#include "shimwatch-spawn.h"
#include "shimwatch-test-util.h"

#define NS "swtest"

typedef struct {
  char                  *dir;
  char                  *shim_address;
  char                  *cgroups_path;
  char                  *id;
  char                  *bundle;
  char                  *task_dir;
  char                  *shim_binary;
  ShimwatchEventsServer *events;
  ShimwatchLauncher     *launcher;
  GPtrArray             *received;
  ShimwatchShimHandle   *handle;
  guint                  closed_count;
  gint64                 closed_at;
  guint32                task_pid;
  ShimwatchTestGuard    *guard;
} Fixture;

static void
event_cb (ShimwatchEventsServer *server,
          ShimwatchEvent        *event,
          gpointer               user_data)
{
  Fixture *fx = user_data;

  g_ptr_array_add (fx->received, shimwatch_event_copy (event));
}

static void
closed_cb (ShimwatchTtrpc *ttrpc,
           GError         *reason,
           gpointer        user_data)
{
  Fixture *fx = user_data;

  fx->closed_count++;
  fx->closed_at = g_get_monotonic_time ();
}

static void
fixture_setup (Fixture       *fx,
               gconstpointer  data)
{
  g_autofree char *skip = shimwatch_test_real_shim_skip_reason ();
  g_autofree char *events_path = NULL;
  g_autofree char *runc_root = NULL;
  g_autoptr(GError) error = NULL;
  const char *sleeper[] = { "sleep", "100000", NULL };
  const char *runtime_dirs[] = { "/usr/bin", "/usr/sbin", NULL };
  ShimwatchLauncherConfig config = { 0 };

  if (skip != NULL)
    {
      g_test_skip (skip);
      return;
    }

  fx->dir = g_dir_make_tmp ("swreal-XXXXXX", &error);
  g_assert_no_error (error);
  fx->id = g_strdup_printf ("c%u", g_random_int_range (1000, 100000000));
  fx->cgroups_path = g_strdup_printf ("/shimwatch-test/%s", fx->id);
  /* the container, the shim, its socket, the cgroup: gone at the end, even if we abort */
  fx->guard = shimwatch_test_guard_new (fx->dir, fx->cgroups_path);
  fx->bundle = shimwatch_test_make_bundle (fx->dir, "bundle", sleeper, fx->cgroups_path, &error);
  g_assert_no_error (error);

  events_path = g_build_filename (fx->dir, "events.sock", NULL);
  runc_root = g_build_filename (fx->dir, "runc", NULL);
  fx->shim_address = g_build_filename (fx->dir, "containerd.sock", NULL);
  fx->events = shimwatch_events_server_new (events_path, &error);
  g_assert_no_error (error);
  fx->received = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_event_free);
  g_signal_connect (fx->events, "event", G_CALLBACK (event_cb), fx);

  config.runtime_dirs = runtime_dirs;
  config.shim_address = fx->shim_address;
  config.ttrpc_address = events_path;
  config.runc_root = runc_root;
  fx->launcher = shimwatch_launcher_new (&config);
  fx->task_dir = g_build_filename (fx->dir, "tasks", NS, fx->id, NULL);
}

static void
fixture_teardown (Fixture       *fx,
                  gconstpointer  data)
{
  g_autofree char *socket_path = NULL;

  if (fx->dir == NULL)
    return;
  if (fx->handle != NULL)
    {
      if (fx->handle->shim_pid != 0 && !shimwatch_test_process_is_dead (fx->handle->shim_pid))
        kill ((pid_t) fx->handle->shim_pid, SIGKILL);
      g_signal_handlers_disconnect_by_data (shimwatch_task_client_get_ttrpc (fx->handle->client), fx);
      shimwatch_shim_handle_free (fx->handle);
    }
  socket_path = shimwatch_test_shim_socket_path (fx->shim_address, NS, fx->id);
  g_unlink (socket_path);
  g_clear_object (&fx->launcher);
  g_clear_object (&fx->events);
  g_ptr_array_unref (fx->received);
  /* the container by runc's list of our root, the shim by PID, the directory, the cgroup */
  shimwatch_test_guard_finish (fx->guard);
  g_free (fx->dir);
  g_free (fx->id);
  g_free (fx->bundle);
  g_free (fx->task_dir);
  g_free (fx->shim_binary);
  g_free (fx->cgroups_path);
  g_free (fx->shim_address);
}

/* start → Connect → Create → Start, leaving a running container */
static void
start_task (Fixture *fx)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *runc_state = NULL;
  g_autoptr(ShimwatchBundle) bundle = NULL;
  ShimwatchCreateParams params = { 0 };
  guint32 pid = 0;

  fx->shim_binary = shimwatch_launcher_resolve_runtime (fx->launcher, "io.containerd.runc.v2",
                                                        &error);
  g_assert_no_error (error);
  bundle = shimwatch_bundle_open (fx->bundle, NULL, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (shimwatch_launcher_prepare_task_dir (fx->launcher, fx->task_dir, bundle->config,
                                                      fx->shim_binary, &error));
  g_assert_no_error (error);

  shimwatch_launcher_start_async (fx->launcher, fx->shim_binary, NS, fx->id, fx->task_dir,
                                  shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 15000);
  fx->handle = shimwatch_launcher_start_finish (fx->launcher, result, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (fx->handle->shim_pid, >, 0);
  g_assert_true (g_str_has_prefix (fx->handle->address, "unix:///run/containerd/s/"));
  g_signal_connect (shimwatch_task_client_get_ttrpc (fx->handle->client), "closed",
                    G_CALLBACK (closed_cb), fx);
  g_clear_object (&result);

  params.id = fx->id;
  params.bundle = fx->task_dir;
  params.runc_root = shimwatch_launcher_get_runc_root (fx->launcher);
  shimwatch_task_client_create_async (fx->handle->client, &params, 10000,
                                      shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 15000);
  g_assert_true (shimwatch_task_client_create_finish (fx->handle->client, result, &fx->task_pid,
                                                      &error));
  g_assert_no_error (error);
  g_assert_cmpuint (fx->task_pid, >, 0);
  g_clear_object (&result);

  shimwatch_task_client_start_async (fx->handle->client, 10000, shimwatch_test_store_result,
                                     &result);
  shimwatch_test_wait_result (&result, 15000);
  g_assert_true (shimwatch_task_client_start_finish (fx->handle->client, result, &pid, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (pid, ==, fx->task_pid);

  /* runc state lives under our runc root, not /run/containerd/runc */
  runc_state = g_build_filename (shimwatch_launcher_get_runc_root (fx->launcher), NS, fx->id,
                                 "state.json", NULL);
  g_assert_true (g_file_test (runc_state, G_FILE_TEST_EXISTS));
}

static gboolean
has_n_events (gpointer data)
{
  Fixture *fx = data;

  return fx->received->len >= 4;
}

static gboolean
is_closed (gpointer data)
{
  Fixture *fx = data;

  return fx->closed_count > 0;
}

static gboolean
pid_is_dead (gpointer data)
{
  return shimwatch_test_process_is_dead (GPOINTER_TO_UINT (data));
}

static void
assert_event (Fixture            *fx,
              guint               index,
              ShimwatchEventKind  kind,
              const char         *topic)
{
  ShimwatchEvent *event = g_ptr_array_index (fx->received, index);

  g_assert_cmpint (event->kind, ==, kind);
  g_assert_cmpstr (event->topic, ==, topic);
  g_assert_cmpstr (event->namespace_, ==, NS);
  g_assert_cmpstr (event->container_id, ==, fx->id);
  g_assert_cmpuint (event->pid, ==, fx->task_pid);
  g_assert_cmpint (event->timestamp, >, 0);
}

static void
test_lifecycle (Fixture       *fx,
                gconstpointer  data)
{
  g_autoptr(GAsyncResult) wait_result = NULL;
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) pids = NULL;
  g_autofree char *runc_state = NULL;
  ShimwatchTaskState state = { 0 };
  ShimwatchExit exit_info = { 0 };
  ShimwatchExit deleted = { 0 };
  ShimwatchEvent *event;

  if (g_test_failed () || fx->dir == NULL)
    return;
  start_task (fx);

  shimwatch_task_client_state_async (fx->handle->client, 2000, shimwatch_test_store_result,
                                     &result);
  shimwatch_test_wait_result (&result, 5000);
  g_assert_true (shimwatch_task_client_state_finish (fx->handle->client, result, &state, &error));
  g_assert_no_error (error);
  g_assert_cmpint (state.status, ==, SHIMWATCH_TASK_STATUS_RUNNING);
  g_assert_cmpuint (state.pid, ==, fx->task_pid);
  g_assert_cmpint (state.exited_at, ==, 0);     /* Go zero time decodes as "unset" */
  g_clear_object (&result);

  shimwatch_task_client_pids_async (fx->handle->client, 2000, shimwatch_test_store_result,
                                    &result);
  shimwatch_test_wait_result (&result, 5000);
  pids = shimwatch_task_client_pids_finish (fx->handle->client, result, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pids->len, ==, 1);
  g_assert_cmpuint (g_array_index (pids, guint32, 0), ==, fx->task_pid);
  g_clear_object (&result);

  /* Wait is in flight on its own stream while Kill runs on another */
  shimwatch_task_client_wait_async (fx->handle->client, 0, shimwatch_test_store_result,
                                    &wait_result);
  shimwatch_task_client_kill_async (fx->handle->client, SIGKILL, FALSE, 2000,
                                    shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 5000);
  g_assert_true (shimwatch_task_client_kill_finish (fx->handle->client, result, &error));
  g_assert_no_error (error);
  g_clear_object (&result);
  shimwatch_test_wait_result (&wait_result, 5000);
  g_assert_true (shimwatch_task_client_wait_finish (fx->handle->client, wait_result, &exit_info,
                                                    &error));
  g_assert_no_error (error);
  g_assert_cmpuint (exit_info.exit_status, ==, 137);
  g_assert_cmpint (exit_info.exited_at, >, 0);

  shimwatch_task_client_delete_async (fx->handle->client, 5000, shimwatch_test_store_result,
                                      &result);
  shimwatch_test_wait_result (&result, 10000);
  g_assert_true (shimwatch_task_client_delete_finish (fx->handle->client, result, &deleted,
                                                      &error));
  g_assert_no_error (error);
  g_assert_cmpuint (deleted.pid, ==, fx->task_pid);
  g_assert_cmpuint (deleted.exit_status, ==, 137);
  g_clear_object (&result);

  /* the events arrived on our TTRPC_ADDRESS, in contract order */
  g_assert_true (shimwatch_test_wait_until (has_n_events, fx, 5000));
  g_assert_cmpuint (fx->received->len, ==, 4);
  assert_event (fx, 0, SHIMWATCH_EVENT_TASK_CREATE, "/tasks/create");
  event = g_ptr_array_index (fx->received, 0);
  g_assert_cmpstr (event->bundle, ==, fx->task_dir);
  assert_event (fx, 1, SHIMWATCH_EVENT_TASK_START, "/tasks/start");
  assert_event (fx, 2, SHIMWATCH_EVENT_TASK_EXIT, "/tasks/exit");
  event = g_ptr_array_index (fx->received, 2);
  g_assert_cmpuint (event->exit_status, ==, 137);
  g_assert_cmpstr (event->exec_id, ==, fx->id);
  assert_event (fx, 3, SHIMWATCH_EVENT_TASK_DELETE, "/tasks/delete");

  runc_state = g_build_filename (shimwatch_launcher_get_runc_root (fx->launcher), NS, fx->id, NULL);
  g_assert_false (g_file_test (runc_state, G_FILE_TEST_EXISTS));

  shimwatch_task_client_shutdown_async (fx->handle->client, FALSE, 3000,
                                        shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 5000);
  /* the shim may close before it answers: both are a clean shutdown */
  if (!shimwatch_task_client_shutdown_finish (fx->handle->client, result, &error))
    g_assert_error (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED);
  g_clear_error (&error);

  g_assert_true (shimwatch_test_wait_until (is_closed, fx, 5000));
  g_usleep (100000);
  g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (fx->closed_count, ==, 1);
  g_assert_true (shimwatch_test_wait_until (pid_is_dead,
                                            GUINT_TO_POINTER (fx->handle->shim_pid), 5000));
}

static void
test_shim_sigkill (Fixture       *fx,
                   gconstpointer  data)
{
  g_autoptr(GAsyncResult) result = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *runc_state = NULL;
  ShimwatchExit exit_info = { 0 };
  gint64 killed_at;

  if (g_test_failed () || fx->dir == NULL)
    return;
  start_task (fx);
  runc_state = g_build_filename (shimwatch_launcher_get_runc_root (fx->launcher), NS, fx->id, NULL);

  killed_at = g_get_monotonic_time ();
  g_assert_no_errno (kill ((pid_t) fx->handle->shim_pid, SIGKILL));
  g_assert_true (shimwatch_test_wait_until (is_closed, fx, 5000));
  g_test_message ("SIGKILL of the shim -> on-close: %.2f ms",
                  (fx->closed_at - killed_at) / 1000.0);
  g_assert_cmpuint (fx->closed_count, ==, 1);

  /* as docs/protocol.md §5.1 says: the container outlives its shim until someone runs delete */
  g_assert_false (shimwatch_test_process_is_dead (fx->task_pid));
  g_assert_true (g_file_test (runc_state, G_FILE_TEST_IS_DIR));

  shimwatch_launcher_delete_async (fx->launcher, fx->shim_binary, NS, fx->id, fx->task_dir, 5000,
                                   shimwatch_test_store_result, &result);
  shimwatch_test_wait_result (&result, 10000);
  g_assert_true (shimwatch_launcher_delete_finish (fx->launcher, result, &exit_info, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (exit_info.exit_status, ==, 137);
  g_assert_cmpuint (exit_info.pid, ==, fx->task_pid);
  g_assert_cmpint (exit_info.exited_at, >, 0);

  g_assert_true (shimwatch_test_wait_until (pid_is_dead,
                                            GUINT_TO_POINTER (fx->task_pid), 2000));
  g_assert_false (g_file_test (runc_state, G_FILE_TEST_EXISTS));

  /* on-close ran once, and nothing later fires it again */
  g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (fx->closed_count, ==, 1);
}

/* The gate asks runc, whatever the layout, in a private mount namespace where
 * /sys/fs/cgroup is remounted read-only:
 * - hybrid and legacy layouts: /sys/fs/cgroup is a tmpfs, read-only under systemd, while
 *   the hierarchies mounted below it stay writable and runc works. The tests must run
 *   there, not skip as they did when the gate was access("/sys/fs/cgroup", W_OK);
 * - cgroup2: /sys/fs/cgroup is the hierarchy itself; read-only, runc cannot make a cgroup,
 *   and the gate must say so in runc's words.
 * This case runs first, so the child asks the gate afresh (it caches its answer per
 * process). */
static void
test_gate_with_readonly_cgroup_root (void)
{
  struct statfs fs;
  gboolean tmpfs;
  int status = 0;
  pid_t child;

  if (geteuid () != 0)
    {
      g_test_skip ("a private mount namespace needs root");
      return;
    }
  g_assert_no_errno (statfs ("/sys/fs/cgroup", &fs));
  tmpfs = fs.f_type == TMPFS_MAGIC;
  g_test_message ("/sys/fs/cgroup is %s", tmpfs ? "a tmpfs (hybrid or legacy layout)"
                                                 : "the cgroup2 hierarchy");

  child = fork ();
  g_assert_cmpint (child, >=, 0);
  if (child == 0)
    {
      g_autofree char *reason = NULL;

      if (unshare (CLONE_NEWNS) != 0 ||
          mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
          mount (NULL, "/sys/fs/cgroup", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0)
        {
          g_printerr ("cannot make /sys/fs/cgroup read-only: %s\n", g_strerror (errno));
          _exit (2);
        }
      if (access ("/sys/fs/cgroup", W_OK) == 0)
        _exit (3);
      reason = shimwatch_test_real_shim_skip_reason ();
      g_printerr ("skip reason with a read-only /sys/fs/cgroup: %s\n",
                  reason != NULL ? reason : "(none: the tests run)");
      if (tmpfs)
        _exit (reason == NULL ? 0 : 1);
      _exit (reason != NULL && strstr (reason, "runc cannot run a container here") != NULL
             ? 0 : 1);
    }
  g_assert_cmpint (waitpid (child, &status, 0), ==, child);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), !=, 2);
  g_assert_cmpint (WEXITSTATUS (status), !=, 3);     /* the layout was reproduced */
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);     /* and the gate agreed with runc */
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

  g_test_add_func ("/shim-real/gate-with-readonly-cgroup-root",
                   test_gate_with_readonly_cgroup_root);
  g_test_add ("/shim-real/lifecycle", Fixture, NULL, fixture_setup, test_lifecycle,
              fixture_teardown);
  g_test_add ("/shim-real/sigkill", Fixture, NULL, fixture_setup, test_shim_sigkill,
              fixture_teardown);
  ret = g_test_run ();
  /* still there, and it exits 0 when let go */
  status = shimwatch_spawn_stop_spawner ();
  return ret != 0 ? ret : WIFEXITED (status) && WEXITSTATUS (status) == 0 ? 0 : 1;
}
