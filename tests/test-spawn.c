/* SPDX-License-Identifier: Apache-2.0
 *
 * How the service runs a shim's `start` and `delete` (shimwatch-spawn.c): posix_spawn with
 * a working directory, stdin from a descriptor, stdout and stderr read from pipes, no
 * other descriptor of the service inherited, the exit status, the deadline's SIGKILL.
 * Every case runs twice: with a pidfd, and with pidfd_open(2) failing as it does under
 * valgrind 3.19 (ENOSYS) or a seccomp filter (EPERM), where a thread waits for the exit.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-spawn.h"

typedef struct {
  char *dir;
} Fixture;

static void
fixture_setup (Fixture      *fx,
               gconstpointer data)
{
  g_autoptr(GError) error = NULL;

  shimwatch_spawn_set_pidfd_open_errno_for_tests (GPOINTER_TO_INT (data));
  fx->dir = g_dir_make_tmp ("swspawn-XXXXXX", &error);
  g_assert_no_error (error);
}

static void
fixture_teardown (Fixture      *fx,
                  gconstpointer data)
{
  shimwatch_spawn_set_pidfd_open_errno_for_tests (0);
  g_assert_no_errno (g_rmdir (fx->dir));
  g_free (fx->dir);
}

typedef struct {
  gboolean              done;
  ShimwatchSpawnResult *result;
  GError               *error;
} Outcome;

static void
spawn_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  Outcome *outcome = user_data;

  outcome->result = shimwatch_spawn_finish (result, &outcome->error);
  outcome->done = TRUE;
}

static ShimwatchSpawnResult *
spawn_and_wait (const char * const *argv,
                const char         *cwd,
                int                 stdin_fd,
                guint               timeout_ms,
                GError            **error)
{
  g_auto(GStrv) env = g_environ_setenv (g_get_environ (), "SHIMWATCH_SPAWN_TEST", "yes", TRUE);
  Outcome outcome = { 0 };

  shimwatch_spawn_async (argv, (const char * const *) env, cwd, stdin_fd, timeout_ms,
                         spawn_done_cb, &outcome);
  while (!outcome.done)
    g_main_context_iteration (NULL, TRUE);
  /* nothing of the run is left on the context: no pipe watch, no deadline */
  g_assert_false (g_main_context_pending (NULL));
  g_assert_true ((outcome.result == NULL) != (outcome.error == NULL));
  if (outcome.error != NULL)
    g_propagate_error (error, outcome.error);
  return outcome.result;
}

static void
assert_output (GBytes     *bytes,
               const char *expected)
{
  g_assert_cmpmem (g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes),
                   expected, strlen (expected));
}

/* working directory, environment, stdin from our descriptor, both outputs, exit status */
static void
test_run (Fixture      *fx,
          gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c",
                         "pwd; echo \"$SHIMWATCH_SPAWN_TEST\"; cat; echo oops >&2; exit 3", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *expected = g_strdup_printf ("%s\nyes\nfrom stdin\n", fx->dir);
  int input = memfd_create ("swspawn-stdin", MFD_CLOEXEC);

  g_assert_cmpint (write (input, "from stdin\n", 11), ==, 11);
  g_assert_cmpint (lseek (input, 0, SEEK_SET), ==, 0);
  result = spawn_and_wait (argv, fx->dir, input, 10000, &error);
  g_assert_no_error (error);
  g_assert_false (result->timed_out);
  g_assert_true (WIFEXITED (result->wait_status));
  g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 3);
  assert_output (result->stdout_bytes, expected);
  assert_output (result->stderr_bytes, "oops\n");
  g_assert_no_errno (close (input));
}

/* without a stdin descriptor the child reads /dev/null, and exits 0 */
static void
test_stdin_null (Fixture      *fx,
                 gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "cat; echo done", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (result->wait_status));
  g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 0);
  assert_output (result->stdout_bytes, "done\n");
  assert_output (result->stderr_bytes, "");
}

/* a descriptor of the service, even one without FD_CLOEXEC, never reaches the child: it
 * would keep a shim socket, a pidfd or a pipe of ours open in every shim */
static void
test_no_inherited_fd (Fixture      *fx,
                      gconstpointer data)
{
  int kept = open ("/dev/null", O_RDONLY);           /* no O_CLOEXEC on purpose */
  int kept_high = fcntl (kept, F_DUPFD, 200);        /* nor on a high number */
  g_autofree char *script = g_strdup_printf (
    "ls /proc/$$/fd; "
    "[ -e /proc/$$/fd/%d ] || [ -e /proc/$$/fd/%d ] && echo inherited; exit 0",
    kept, kept_high);
  const char *argv[] = { "/bin/sh", "-c", script, NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (kept, >=, 3);
  g_assert_cmpint (kept_high, >=, 200);
  result = spawn_and_wait (argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  /* the shell has 0, 1 and 2, nothing else (no pipeline: its pipes would show) */
  assert_output (result->stdout_bytes, "0\n1\n2\n");
  g_assert_no_errno (close (kept));
  g_assert_no_errno (close (kept_high));
}

/* more than a pipe holds is read as it comes, on both pipes */
static void
test_large_output (Fixture      *fx,
                   gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c",
                         "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (result->stdout_bytes), ==, 300000);
  g_assert_cmpuint (g_bytes_get_size (result->stderr_bytes), ==, 200000);
}

/* a child killed by a signal says so */
static void
test_signaled (Fixture      *fx,
               gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "kill -TERM $$", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  g_assert_false (result->timed_out);
  g_assert_true (WIFSIGNALED (result->wait_status));
  g_assert_cmpint (WTERMSIG (result->wait_status), ==, SIGTERM);
}

/* at the deadline the child gets SIGKILL, and what it wrote before is kept */
static void
test_deadline (Fixture      *fx,
               gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "echo started; exec sleep 60", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;
  gint64 started = g_get_monotonic_time ();
  gint64 elapsed_ms;

  result = spawn_and_wait (argv, fx->dir, -1, 300, &error);
  elapsed_ms = (g_get_monotonic_time () - started) / 1000;
  g_assert_no_error (error);
  g_assert_true (result->timed_out);
  g_assert_true (WIFSIGNALED (result->wait_status));
  g_assert_cmpint (WTERMSIG (result->wait_status), ==, SIGKILL);
  assert_output (result->stdout_bytes, "started\n");
  g_assert_cmpint (elapsed_ms, >=, 290);
  g_assert_cmpint (elapsed_ms, <, 30000);
}

/* a child that exits before its deadline is not killed, and the deadline is gone with it */
static void
test_exit_before_deadline (Fixture      *fx,
                           gconstpointer data)
{
  const char *argv[] = { "/bin/true", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, fx->dir, -1, 60000, &error);
  g_assert_no_error (error);
  g_assert_false (result->timed_out);
  g_assert_true (WIFEXITED (result->wait_status));
  g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 0);
}

/* valgrind runs posix_spawn's CLONE_VFORK child as a fork, which cannot report a failed
 * exec back: the child exits 127 instead, as after fork and exec */
static gboolean
under_valgrind (void)
{
  const char *preload = g_getenv ("LD_PRELOAD");

  return preload != NULL && strstr (preload, "vgpreload") != NULL;
}

static void
assert_not_found (const char * const *argv,
                  const char         *cwd)
{
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, cwd, -1, 10000, &error);
  if (under_valgrind () && result != NULL)
    {
      g_assert_true (WIFEXITED (result->wait_status));
      g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 127);
      return;
    }
  g_assert_null (result);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, argv[0]));
}

/* a binary that is not there, a directory that is not there: an error, no child */
static void
test_cannot_run (Fixture      *fx,
                 gconstpointer data)
{
  const char *missing[] = { "/nonexistent/shim", NULL };
  const char *argv[] = { "/bin/true", NULL };
  g_autofree char *no_dir = g_build_filename (fx->dir, "gone", NULL);

  assert_not_found (missing, fx->dir);
  assert_not_found (argv, no_dir);

  /* no child of ours is left, not even a zombie */
  g_assert_cmpint (waitpid (-1, NULL, WNOHANG), ==, -1);
  g_assert_cmpint (errno, ==, ECHILD);
}

int
main (int    argc,
      char **argv)
{
  static const struct { const char *name; int errno_value; } modes[] = {
    { "pidfd", 0 }, { "no-pidfd-enosys", ENOSYS }, { "no-pidfd-eperm", EPERM },
  };
  static const struct { const char *name; void (*fn) (Fixture *,
                                                      gconstpointer); } cases[] = {
    { "run", test_run },
    { "stdin-null", test_stdin_null },
    { "no-inherited-fd", test_no_inherited_fd },
    { "large-output", test_large_output },
    { "signaled", test_signaled },
    { "deadline", test_deadline },
    { "exit-before-deadline", test_exit_before_deadline },
    { "cannot-run", test_cannot_run },
  };

  g_test_init (&argc, &argv, NULL);
  for (guint m = 0; m < G_N_ELEMENTS (modes); m++)
    for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
      {
        g_autofree char *path = g_strdup_printf ("/spawn/%s/%s", modes[m].name, cases[c].name);

        g_test_add (path, Fixture, GINT_TO_POINTER (modes[m].errno_value), fixture_setup,
                    cases[c].fn, fixture_teardown);
      }
  return g_test_run ();
}
