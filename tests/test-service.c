/* SPDX-License-Identifier: Apache-2.0
 *
 * Unit tests of the service's building blocks that need no bus: configuration, the
 * D-Bus error mapping, task-directory removal and finding a shim by its directory.
 */
#include "config.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-authority.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-config.h"
#include "shimwatch-error.h"
#include "shimwatch-ttrpc.h"

static char *
write_config (const char *dir,
              const char *text)
{
  char *path = g_build_filename (dir, "shimwatch.conf", NULL);

  g_assert_true (g_file_set_contents (path, text, -1, NULL));
  return path;
}

static void
test_config (void)
{
  g_autofree char *dir = g_dir_make_tmp ("swconf-XXXXXX", NULL);
  g_autofree char *missing = g_build_filename (dir, "missing.conf", NULL);
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;
  const char *bad[] = {
    "[Service]\nCleanupTimeout=0\n",
    "[Service]\nCleanupTimeout=601\n",
    "[Service]\nCleanupTimeout=soon\n",
    "[Service]\nCleanupConcurrency=0\n",
    "[Service]\nRuntimeDirectory=relative/dir\n",
    "[Service]\nRuntimePath=/usr/bin;bin\n",
    "this is not a key file",
  };

  /* defaults */
  g_assert_cmpstr (config->runtime_dir, ==, "/run/shimwatch");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  g_assert_cmpuint (config->cleanup_timeout_ms, ==, 5000);
  g_assert_true (g_strv_contains ((const char * const *) config->runtime_path, "/usr/bin"));

  /* a missing default file is fine, a missing named one is not */
  g_assert_true (shimwatch_config_load_file (config, missing, FALSE, &error));
  g_assert_no_error (error);
  g_assert_false (shimwatch_config_load_file (config, missing, TRUE, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
  g_clear_error (&error);

  {
    g_autofree char *path = write_config (dir, "[Service]\nRuntimeDirectory=/run/sw\n"
                                               "RuntimePath=/opt/shims;/usr/bin\n"
                                               "CleanupTimeout=9\nCleanupConcurrency=3\n");

    g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
    g_assert_no_error (error);
    g_assert_cmpstr (config->runtime_dir, ==, "/run/sw");
    g_assert_cmpstr (config->runtime_path[0], ==, "/opt/shims");
    g_assert_cmpuint (config->cleanup_timeout_ms, ==, 9000);
    g_assert_cmpuint (config->cleanup_concurrency, ==, 3);
  }

  /* broken values are errors that name the file and change nothing */
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *path = write_config (dir, bad[i]);

      g_assert_false (shimwatch_config_load_file (config, path, TRUE, &error));
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, path));
      g_clear_error (&error);
      g_assert_cmpstr (config->runtime_dir, ==, "/run/sw");
      g_assert_cmpuint (config->cleanup_timeout_ms, ==, 9000);
    }

  /* systemd's environment wins over the file; several directories: the first is ours */
  g_setenv ("RUNTIME_DIRECTORY", "/run/from-systemd:/run/other", TRUE);
  g_setenv ("STATE_DIRECTORY", "relative", TRUE);
  shimwatch_config_apply_environment (config);
  g_assert_cmpstr (config->runtime_dir, ==, "/run/from-systemd");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  g_unsetenv ("RUNTIME_DIRECTORY");
  g_unsetenv ("STATE_DIRECTORY");

  {
    g_autofree char *path = g_build_filename (dir, "shimwatch.conf", NULL);

    g_unlink (path);
    g_rmdir (dir);
  }
}

static void
test_error_names (void)
{
  const char *names[] = { "Failed", "InvalidArgument", "NotFound", "AlreadyExists", "BadState",
                          "NotAuthorized", "NotAuthorizedCanObtain", "ShimFailed" };

  for (guint code = 0; code < G_N_ELEMENTS (names); code++)
    {
      g_autoptr(GError) error = g_error_new (SHIMWATCH_ERROR, (int) code, "text %u", code);
      g_autofree char *expected = g_strconcat ("org.shimwatch.Shimwatch1.Error.", names[code], NULL);
      g_autofree char *name = g_dbus_error_encode_gerror (error);
      g_autoptr(GError) back = g_dbus_error_new_for_dbus_error (name, "text");

      g_assert_cmpstr (name, ==, expected);
      g_assert_error (back, SHIMWATCH_ERROR, (int) code);
    }
}

static void
test_error_convert (void)
{
  struct {
    GQuark domain;
    int    code;
    int    expected;
  } cases[] = {
    { 0, SHIMWATCH_WIRE_ERROR_INVALID, SHIMWATCH_ERROR_INVALID_ARGUMENT },
    { 0, SHIMWATCH_WIRE_ERROR_UNSUPPORTED, SHIMWATCH_ERROR_SHIM_FAILED },
    { 0, SHIMWATCH_TTRPC_ERROR_CLOSED, SHIMWATCH_ERROR_SHIM_FAILED },
    { 0, G_IO_ERROR_NOT_FOUND, SHIMWATCH_ERROR_NOT_FOUND },
    { 0, G_IO_ERROR_EXISTS, SHIMWATCH_ERROR_ALREADY_EXISTS },
    { 0, G_IO_ERROR_PERMISSION_DENIED, SHIMWATCH_ERROR_FAILED },
  };

  cases[0].domain = cases[1].domain = SHIMWATCH_WIRE_ERROR;
  cases[2].domain = SHIMWATCH_TTRPC_ERROR;
  cases[3].domain = cases[4].domain = cases[5].domain = G_IO_ERROR;
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = g_error_new (cases[i].domain, cases[i].code, "why %u", i);
      g_autoptr(GError) converted = shimwatch_error_convert (error);
      g_autofree char *message = g_strdup_printf ("why %u", i);

      g_assert_error (converted, SHIMWATCH_ERROR, cases[i].expected);
      g_assert_cmpstr (converted->message, ==, message);
    }
}

static void
test_remove_task_dir (void)
{
  g_autofree char *root = g_dir_make_tmp ("swrm-XXXXXX", NULL);
  g_autofree char *outside = g_build_filename (root, "outside.txt", NULL);
  g_autofree char *ns_dir = g_build_filename (root, "tasks", "ns", NULL);
  g_autofree char *task = g_build_filename (ns_dir, "t1", NULL);
  g_autofree char *other = g_build_filename (ns_dir, "t2", NULL);
  g_autofree char *deep = g_build_filename (task, "rootfs", "a", "b", NULL);
  g_autofree char *file = g_build_filename (deep, "f", NULL);
  g_autofree char *link = g_build_filename (task, "work", NULL);
  g_autofree char *fifo = g_build_filename (task, "log", NULL);
  g_autoptr(GError) error = NULL;

  g_assert_no_errno (g_mkdir_with_parents (deep, 0700));
  g_assert_no_errno (g_mkdir_with_parents (other, 0700));
  g_assert_true (g_file_set_contents (file, "x", -1, NULL));
  g_assert_true (g_file_set_contents (outside, "keep me", -1, NULL));
  g_assert_no_errno (symlink (root, link));     /* a symlink out must never be followed */
  g_assert_no_errno (mkfifo (fifo, 0600));

  g_assert_true (shimwatch_cleanup_remove_task_dir (task, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (task, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (outside, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (other, G_FILE_TEST_IS_DIR));
  /* no .t1 leftover */
  {
    g_autofree char *hidden = g_build_filename (ns_dir, ".t1", NULL);

    g_assert_false (g_file_test (hidden, G_FILE_TEST_EXISTS));
  }

  /* already done is fine; the namespace directory goes with its last task */
  g_assert_true (shimwatch_cleanup_remove_task_dir (task, &error));
  g_assert_true (shimwatch_cleanup_remove_task_dir (other, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (ns_dir, G_FILE_TEST_EXISTS));

  g_unlink (outside);
  {
    g_autofree char *tasks = g_build_filename (root, "tasks", NULL);

    g_rmdir (tasks);
  }
  g_assert_no_errno (g_rmdir (root));
}

static void
test_kill_processes_in (void)
{
  g_autofree char *dir = g_dir_make_tmp ("swkill-XXXXXX", NULL);
  g_autofree char *elsewhere = g_dir_make_tmp ("swkeep-XXXXXX", NULL);
  const char *argv[] = { "sleep", "1000", NULL };
  GPid inside = 0;
  GPid outside = 0;
  int status;

  g_assert_true (g_spawn_async (dir, (char **) argv, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
                                &inside, NULL));
  g_assert_true (g_spawn_async (elsewhere, (char **) argv, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
                                &outside, NULL));
  g_assert_cmpuint (shimwatch_cleanup_kill_processes_in (dir), ==, 1);
  g_assert_cmpint (waitpid (inside, &status, 0), ==, inside);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
  g_assert_cmpint (waitpid (outside, &status, WNOHANG), ==, 0);
  kill (outside, SIGKILL);
  waitpid (outside, &status, 0);
  g_rmdir (dir);
  g_rmdir (elsewhere);
}

static void
test_authority_results (void)
{
  /* every combination polkit can answer, with and without interaction allowed */
  for (guint bits = 0; bits < 16; bits++)
    {
      gboolean authorized = (bits & 1) != 0;
      gboolean challenge = (bits & 2) != 0;
      gboolean dismissed = (bits & 4) != 0;
      gboolean interactive = (bits & 8) != 0;
      g_autoptr(GError) error = NULL;
      gboolean ok = shimwatch_authority_result_to_error (authorized, challenge, dismissed,
                                                         interactive, "org.shimwatch.reap",
                                                         &error);

      if (authorized)
        {
          g_assert_true (ok);
          g_assert_no_error (error);
        }
      else if (challenge && !dismissed && !interactive)
        g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED_CAN_OBTAIN);
      else
        g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED);
      if (!authorized)
        g_assert_nonnull (strstr (error->message, "org.shimwatch.reap"));
    }
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/service/config", test_config);
  g_test_add_func ("/service/error-names", test_error_names);
  g_test_add_func ("/service/error-convert", test_error_convert);
  g_test_add_func ("/service/authority-results", test_authority_results);
  g_test_add_func ("/service/remove-task-dir", test_remove_task_dir);
  g_test_add_func ("/service/kill-processes-in", test_kill_processes_in);
  return g_test_run ();
}
