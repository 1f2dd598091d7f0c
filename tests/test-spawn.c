/* SPDX-License-Identifier: Apache-2.0
 *
 * How the service runs a shim's `start` and `delete` (shimwatch-spawn.c): posix_spawn with
 * a working directory, stdin from a descriptor, stdout and stderr read from pipes, no
 * other descriptor of the service inherited, the exit status, the deadline's SIGKILL.
 * Every case runs through the spawner process (shimwatch-spawner.c) and without one, and
 * each of those three times: with a pidfd, and with pidfd_open(2) failing as it does under
 * valgrind 3.19 (ENOSYS) or a seccomp filter (EPERM), where a thread waits for the exit
 * (without a spawner) or the spawner kills at the deadline (with one). After every case
 * nothing is left: no child of ours but the spawner, no child of the spawner, and the
 * spawner exits 0 when let go.
 *
 * This process is a child subreaper: what a spawner killed in a test leaves behind is
 * re-parented here, where the test can see it (and reap it), not to init.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-poller.h"
#include "shimwatch-spawn.h"

/* the warnings of shimwatch-spawn.c (structured: g_test_expect_message() does not see
 * them), kept for the test to check instead of aborting it */
static GPtrArray *warnings;

static GLogWriterOutput
log_writer (GLogLevelFlags   level,
            const GLogField *fields,
            gsize            n_fields,
            gpointer         user_data)
{
  const char *domain = NULL;
  const char *message = NULL;

  for (gsize i = 0; i < n_fields; i++)
    if (g_strcmp0 (fields[i].key, "GLIB_DOMAIN") == 0)
      domain = fields[i].value;
    else if (g_strcmp0 (fields[i].key, "MESSAGE") == 0)
      message = fields[i].value;
  if ((level & G_LOG_LEVEL_WARNING) && g_strcmp0 (domain, "ShimwatchSpawn") == 0)
    {
      g_test_message ("warning: %s", message);
      g_ptr_array_add (warnings, g_strdup (message));
      return G_LOG_WRITER_HANDLED;
    }
  return g_log_writer_default (level, fields, n_fields, user_data);
}

/* exactly one warning was logged since the last check, and it matches @pattern */
static void
assert_warned (const char *pattern)
{
  g_assert_cmpuint (warnings->len, ==, 1);
  if (!g_pattern_match_simple (pattern, g_ptr_array_index (warnings, 0)))
    g_error ("warning “%s” does not match “%s”", (char *) g_ptr_array_index (warnings, 0),
             pattern);
  g_ptr_array_set_size (warnings, 0);
}

typedef struct {
  int      pidfd_errno;   /* what pidfd_open(2) fails with (0: it works) */
  gboolean spawner;       /* run through a spawner process */
} Mode;

typedef struct {
  char       *dir;
  const Mode *mode;
  GPid        spawner;    /* 0: none, or the test killed it */
} Fixture;

/* the pids whose parent is @parent */
static GArray *
children_of (GPid parent)
{
  g_autoptr(GDir) proc = g_dir_open ("/proc", 0, NULL);
  GArray *children = g_array_new (FALSE, FALSE, sizeof (GPid));
  const char *name;

  g_assert_nonnull (proc);
  while ((name = g_dir_read_name (proc)) != NULL)
    {
      g_autofree char *path = NULL;
      g_autofree char *stat = NULL;
      const char *after;
      GPid ppid;

      if (!g_ascii_isdigit (name[0]))
        continue;
      path = g_strdup_printf ("/proc/%s/stat", name);
      if (!g_file_get_contents (path, &stat, NULL, NULL) ||
          (after = strrchr (stat, ')')) == NULL ||
          sscanf (after, ") %*c %d", &ppid) != 1)
        continue;
      if (ppid == parent)
        {
          GPid pid = (GPid) atoi (name);

          g_array_append_val (children, pid);
        }
    }
  return children;
}

static int
compare_ints (gconstpointer a,
              gconstpointer b)
{
  return *(const int *) a - *(const int *) b;
}

static int
compare_strings (gconstpointer a,
                 gconstpointer b)
{
  return g_strcmp0 (*(const char * const *) a, *(const char * const *) b);
}

/* what the spawner holds: "socket", "pipe", "anon_inode:[eventpoll]", ... for each
 * descriptor above 2, sorted */
static char *
descriptors_of (GPid pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/fd", (int) pid);
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  g_autoptr(GPtrArray) kinds = g_ptr_array_new_with_free_func (g_free);
  const char *name;

  struct rlimit limit;

  /* valgrind keeps descriptors of its own above the limit it shows its client */
  g_assert_no_errno (getrlimit (RLIMIT_NOFILE, &limit));
  g_assert_nonnull (dir);
  while ((name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *link = g_build_filename (path, name, NULL);
      g_autofree char *target = NULL;
      char *colon;

      if (atoi (name) <= 2 || (rlim_t) atoi (name) >= limit.rlim_cur ||
          (target = g_file_read_link (link, NULL)) == NULL)
        continue;
      /* "socket:[1234]" → "socket", "/memfd:x (deleted)" → "/memfd:x" */
      if (g_str_has_prefix (target, "socket:") || g_str_has_prefix (target, "pipe:"))
        *strchr (target, ':') = '\0';
      else if ((colon = strstr (target, " (deleted)")) != NULL)
        *colon = '\0';
      g_ptr_array_add (kinds, g_steal_pointer (&target));
    }
  g_ptr_array_sort (kinds, compare_strings);
  g_ptr_array_add (kinds, NULL);
  return g_strjoinv (" ", (char **) kinds->pdata);
}

/* nothing of a run is left: no child of ours but the spawner, none of the spawner */
static void
assert_nothing_running (Fixture *fx)
{
  g_autoptr(GArray) ours = children_of (getpid ());

  for (guint i = 0; i < ours->len; i++)
    if (g_array_index (ours, GPid, i) != fx->spawner)
      {
        GPid pid = g_array_index (ours, GPid, i);
        g_autofree char *path = g_strdup_printf ("/proc/%d/stat", (int) pid);
        g_autofree char *stat = NULL;

        /* its name and state say which part of a run left it */
        if (!g_file_get_contents (path, &stat, NULL, NULL))
          stat = g_strdup ("gone");
        g_error ("a process (pid %d) of a run is left (the spawner is %d): %s", (int) pid,
                 (int) fx->spawner, g_strchomp (stat));
      }
  if (fx->spawner != 0)
    {
      g_autoptr(GArray) theirs = children_of (fx->spawner);

      g_assert_cmpuint (theirs->len, ==, 0);
    }
}

static void
fixture_setup (Fixture      *fx,
               gconstpointer data)
{
  g_autoptr(GError) error = NULL;

  fx->mode = data;
#ifdef SHIMWATCH_TEST_HOOKS
  shimwatch_spawn_set_pidfd_open_errno_for_tests (fx->mode->pidfd_errno);
#endif
  fx->dir = g_dir_make_tmp ("swspawn-XXXXXX", &error);
  g_assert_no_error (error);
  if (fx->mode->spawner)
    {
      g_assert_true (shimwatch_spawn_start_spawner (&error));
      g_assert_no_error (error);
      fx->spawner = shimwatch_spawn_get_spawner_pid ();
      g_assert_cmpint (fx->spawner, >, 0);
    }
  g_assert_cmpint (shimwatch_spawn_get_spawner_pid (), ==, fx->spawner);
}

static void
fixture_teardown (Fixture      *fx,
                  gconstpointer data)
{
  int status;

  assert_nothing_running (fx);
  status = shimwatch_spawn_stop_spawner ();
  if (fx->spawner != 0)
    {
      /* it ends at EOF on its socket, and is reaped */
      g_assert_true (WIFEXITED (status));
      g_assert_cmpint (WEXITSTATUS (status), ==, 0);
    }
  g_assert_cmpint (waitpid (-1, NULL, WNOHANG), ==, -1);
  g_assert_cmpint (errno, ==, ECHILD);
  /* no warning nobody expected */
  g_assert_cmpuint (warnings->len, ==, 0);
#ifdef SHIMWATCH_TEST_HOOKS
  shimwatch_spawn_set_pidfd_open_errno_for_tests (0);
#endif
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
  /* nothing of the run is left on the context: no pipe watch, no deadline; the spawner's
   * socket is watched for as long as there is one */
  g_assert_false (g_main_context_pending (NULL));
  g_assert_cmpuint (shimwatch_poller_get_n_watches (shimwatch_poller_get_default ()), ==,
                    shimwatch_spawn_get_spawner_pid () != 0 ? 1 : 0);
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

/* a run (stdin from /dev/null) that must succeed: no error, no deadline's kill, exit status
 * 0, and exactly @expected_out and @expected_err as its outputs (NULL: not looked at) */
static void
spawn_expect_success (const char * const *argv,
                      const char         *cwd,
                      guint               timeout_ms,
                      const char         *expected_out,
                      const char         *expected_err)
{
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, cwd, -1, timeout_ms, &error);
  g_assert_no_error (error);
  g_assert_false (result->timed_out);
  g_assert_true (WIFEXITED (result->wait_status));
  g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 0);
  if (expected_out != NULL)
    assert_output (result->stdout_bytes, expected_out);
  if (expected_err != NULL)
    assert_output (result->stderr_bytes, expected_err);
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

  spawn_expect_success (argv, fx->dir, 10000, "done\n", "");
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

/* read(2) as libc's, with the reads of a pipe's output (16 KiB at a time) that found
 * nothing (EAGAIN, or the end of the file) counted: the spawn code, linked in statically,
 * calls this one */
static gint n_output_reads_empty;

ssize_t
read (int    fd,
      void  *buffer,
      size_t count)
{
  ssize_t n = syscall (SYS_read, fd, buffer, count);

  if (n <= 0 && count == 16384)
    g_atomic_int_inc (&n_output_reads_empty);
  return n;
}

/* what a child wrote is read with one read per pipe: a read shorter than asked emptied
 * it, and the next one could only find nothing (the end of the file, or EAGAIN where a
 * writer is left) */
static void
test_output_read_once (Fixture      *fx,
                       gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "echo first; echo oops >&2; echo second", NULL };

  g_atomic_int_set (&n_output_reads_empty, 0);
  spawn_expect_success (argv, fx->dir, 10000, "first\nsecond\n", "oops\n");
  g_assert_cmpint (g_atomic_int_get (&n_output_reads_empty), ==, 0);
}

static gboolean is_zombie_or_gone (GPid pid);

/* A child that leaves a process of its own behind, holding its stdout and stderr: the run
 * ends when the child does, with what the child wrote; what the one left behind may still
 * write is not waited for (a `shim start` leaves its daemon behind). */
static void
test_left_behind_writer (Fixture      *fx,
                         gconstpointer data)
{
  g_autofree char *pid_file = g_build_filename (fx->dir, "left.pid", NULL);
  g_autofree char *script = g_strdup_printf ("sleep 60 & echo $! > %s; echo out; echo err >&2",
                                             pid_file);
  const char *argv[] = { "/bin/sh", "-c", script, NULL };
  g_autofree char *pid_text = NULL;
  gint64 started = g_get_monotonic_time ();
  GPid left;

  spawn_expect_success (argv, fx->dir, 60000, "out\n", "err\n");
  g_assert_cmpint ((g_get_monotonic_time () - started) / G_USEC_PER_SEC, <, 30);
  /* it came to us, the subreaper: the test ends it */
  g_assert_true (g_file_get_contents (pid_file, &pid_text, NULL, NULL));
  left = atoi (pid_text);
  g_assert_cmpint (left, >, 0);
  g_assert_false (is_zombie_or_gone (left));
  g_assert_no_errno (kill (left, SIGKILL));
  g_assert_cmpint (waitpid (left, NULL, 0), ==, left);
  g_assert_no_errno (g_unlink (pid_file));
}

/* Many runs at once, their ends read long after they came: through a spawner, its
 * requests and replies are taken several at a time (recvmmsg), more than one batch of
 * each; every run gets its own end, output and status, and nothing is left over. */
static void
test_many_at_once (Fixture      *fx,
                   gconstpointer data)
{
  g_auto(GStrv) env = g_environ_setenv (g_get_environ (), "SHIMWATCH_SPAWN_TEST", "yes", TRUE);
  Outcome outcomes[40] = { { 0 } };
  g_autoptr(GPtrArray) scripts = g_ptr_array_new_with_free_func (g_free);
  guint n_done = 0;

  for (guint i = 0; i < G_N_ELEMENTS (outcomes); i++)
    {
      const char *argv[] = { "/bin/sh", "-c", NULL, NULL };

      argv[2] = g_strdup_printf ("echo out%u; echo err%u >&2; exit %u", i, i, i % 7);
      g_ptr_array_add (scripts, (gpointer) argv[2]);
      shimwatch_spawn_async (argv, (const char * const *) env, fx->dir, -1, 10000,
                             spawn_done_cb, &outcomes[i]);
    }
  /* every end is there before any is read (they queue on the socket) */
  g_usleep (G_USEC_PER_SEC / 2);
  while (n_done < G_N_ELEMENTS (outcomes))
    {
      g_main_context_iteration (NULL, TRUE);
      n_done = 0;
      for (guint i = 0; i < G_N_ELEMENTS (outcomes); i++)
        n_done += outcomes[i].done ? 1 : 0;
    }
  for (guint i = 0; i < G_N_ELEMENTS (outcomes); i++)
    {
      g_autofree char *out = g_strdup_printf ("out%u\n", i);
      g_autofree char *err = g_strdup_printf ("err%u\n", i);
      g_autoptr(ShimwatchSpawnResult) result = g_steal_pointer (&outcomes[i].result);

      g_assert_no_error (outcomes[i].error);
      g_assert_nonnull (result);
      g_assert_false (result->timed_out);
      g_assert_true (WIFEXITED (result->wait_status));
      g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, i % 7);
      assert_output (result->stdout_bytes, out);
      assert_output (result->stderr_bytes, err);
    }
  while (g_main_context_iteration (NULL, FALSE))
    ;
  g_assert_cmpuint (shimwatch_poller_get_n_watches (shimwatch_poller_get_default ()), ==,
                    shimwatch_spawn_get_spawner_pid () != 0 ? 1 : 0);
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

  /* (spawn_and_wait() checks that nothing of the run, its deadline included, is left) */
  spawn_expect_success (argv, fx->dir, 60000, NULL, NULL);
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
  assert_nothing_running (fx);
}

/* -- the spawner ----------------------------------------------------------------------- */

static void
start_run (const char * const *argv,
           const char         *cwd,
           int                 stdin_fd,
           guint               timeout_ms,
           Outcome            *outcome)
{
  g_auto(GStrv) env = g_get_environ ();

  shimwatch_spawn_async (argv, (const char * const *) env, cwd, stdin_fd, timeout_ms,
                         spawn_done_cb, outcome);
}

static void
finish_run (Outcome *outcome)
{
  while (!outcome->done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true ((outcome->result == NULL) != (outcome->error == NULL));
}

/* the one child @parent has, once it has one */
static GPid
wait_for_child (GPid parent)
{
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;

  while (g_get_monotonic_time () < deadline)
    {
      g_autoptr(GArray) children = children_of (parent);

      if (children->len > 0)
        {
          g_assert_cmpuint (children->len, ==, 1);
          return g_array_index (children, GPid, 0);
        }
      g_main_context_iteration (NULL, FALSE);
      g_usleep (2000);
    }
  g_error ("no child of %d appeared", (int) parent);
}

#define IDLE "/dev/null anon_inode:[eventpoll] anon_inode:[signalfd] socket"
/* with one run going: the read ends of its stdout and stderr */
#define BUSY "/dev/null anon_inode:[eventpoll] anon_inode:[signalfd] pipe pipe socket"

/* what descriptors_of() says once it says @expected, or after 10 s */
static char *
wait_for_descriptors (GPid        pid,
                      const char *expected)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  char *now = descriptors_of (pid);

  while (g_strcmp0 (now, expected) != 0 && g_get_monotonic_time () < deadline)
    {
      g_usleep (1000);
      g_free (now);
      now = descriptors_of (pid);
    }
  return now;
}

/* The spawner holds its socket, its epoll set, signalfd and /dev/null, and the read ends of
 * the output pipes of each child it runs: not the child's stdin, nor the write ends once
 * the child has them, nor anything of ours. */
static void
test_spawner_descriptors (Fixture      *fx,
                          gconstpointer data)
{
  /* it runs until we tell it to end: no deadline to race with on a loaded machine */
  const char *argv[] = { "/bin/sh", "-c", "read line; echo \"$line\"", NULL };
  g_autofree char *idle = NULL;
  g_autofree char *busy = NULL;
  g_autofree char *after = NULL;
  Outcome outcome = { 0 };
  int input[2];
  int kept = open ("/dev/null", O_RDONLY);    /* ours, without O_CLOEXEC on purpose */

  g_assert_no_errno (pipe2 (input, O_CLOEXEC));
  /* once it has closed what it got from the fork */
  idle = wait_for_descriptors (fx->spawner, IDLE);
  g_assert_cmpstr (idle, ==, IDLE);
  start_run (argv, fx->dir, input[0], 60000, &outcome);
  g_assert_no_errno (close (input[0]));
  wait_for_child (fx->spawner);
  /* once the clone has returned: the child's stdin (a pipe) and the write ends of its
   * stdout and stderr are gone, the read ends are there */
  busy = wait_for_descriptors (fx->spawner, BUSY);
  g_assert_cmpstr (busy, ==, BUSY);
  g_assert_cmpint (write (input[1], "go\n", 3), ==, 3);
  g_assert_no_errno (close (input[1]));
  finish_run (&outcome);
  g_assert_no_error (outcome.error);
  g_assert_false (outcome.result->timed_out);
  g_assert_true (WIFEXITED (outcome.result->wait_status));
  g_assert_cmpint (WEXITSTATUS (outcome.result->wait_status), ==, 0);
  assert_output (outcome.result->stdout_bytes, "go\n");
  /* it closes the pipes once it has reaped the child */
  after = wait_for_descriptors (fx->spawner, IDLE);
  g_assert_cmpstr (after, ==, IDLE);
  shimwatch_spawn_result_free (outcome.result);
  g_assert_no_errno (close (kept));
}

static gboolean
is_zombie_or_gone (GPid pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/stat", (int) pid);
  g_autofree char *stat = NULL;
  const char *after;

  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return TRUE;
  after = strrchr (stat, ')');
  return after != NULL && after[2] == 'Z';
}

/* The spawner dies while it runs a command: the run ends at once, with an error, never
 * hangs; what it started runs on (re-parented: beyond the service's safe reach), in every
 * mode, since the service holds nothing of a spawner's child, not even a pidfd. The dead
 * spawner is reaped, logged, and the next command is spawned by the service itself. */
static void
test_spawner_dies (Fixture      *fx,
                   gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "exec sleep 60", NULL };
  const char *again[] = { "/bin/sh", "-c", "exit 7", NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;
  Outcome outcome = { 0 };
  guint deadline_ms = 60000;
  gint64 started = g_get_monotonic_time ();
  gint64 elapsed_ms;
  g_autofree char *busy = NULL;
  GPid child;
  int status;

  start_run (argv, fx->dir, -1, deadline_ms, &outcome);
  child = wait_for_child (fx->spawner);
  /* once the clone has returned */
  busy = wait_for_descriptors (fx->spawner, BUSY);
  g_assert_cmpstr (busy, ==, BUSY);
  g_assert_no_errno (kill (fx->spawner, SIGKILL));
  finish_run (&outcome);
  elapsed_ms = (g_get_monotonic_time () - started) / 1000;
  assert_warned ("the process spawner (pid *) closed its socket and ended by signal 9*");
  g_assert_error (outcome.error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED);
  g_clear_error (&outcome.error);

  /* reaped by the service, and no longer used */
  g_assert_cmpint (waitpid (fx->spawner, NULL, WNOHANG), ==, -1);
  g_assert_cmpint (errno, ==, ECHILD);
  g_assert_cmpint (shimwatch_spawn_get_spawner_pid (), ==, 0);
  fx->spawner = 0;

  /* the run ended at once; what it started runs on, came to us, the subreaper, and the
   * test ends it */
  g_assert_cmpint (elapsed_ms, <, deadline_ms / 2);
  g_assert_false (is_zombie_or_gone (child));
  g_assert_no_errno (kill (child, SIGKILL));
  g_assert_cmpint (waitpid (child, &status, 0), ==, child);

  /* the next command runs, spawned by this process */
  result = spawn_and_wait (again, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  g_assert_true (WIFEXITED (result->wait_status));
  g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 7);
}

/* A spawner that stops answering (SIGSTOP here) does not hang a run: SPAWNER_KILL_GRACE_MS
 * after the deadline's kill the service gives up on it, kills it and ends the run with an
 * error. Nothing was started: the spawner never got to the request. */
static void
test_spawner_stuck (Fixture      *fx,
                    gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "exec sleep 60", NULL };
  const char *again[] = { "/bin/true", NULL };
  Outcome outcome = { 0 };
  gint64 started = g_get_monotonic_time ();
  gint64 elapsed_ms;

  g_assert_no_errno (kill (fx->spawner, SIGSTOP));
  start_run (argv, fx->dir, -1, 200, &outcome);
  finish_run (&outcome);
  elapsed_ms = (g_get_monotonic_time () - started) / 1000;
  assert_warned ("the process spawner (pid *) did not report the end of /bin/sh 5 s after "
                 "its deadline's kill and ended by signal 9*");
  g_assert_error (outcome.error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED);
  g_clear_error (&outcome.error);
  g_assert_cmpint (elapsed_ms, >=, 5000);
  g_assert_cmpint (elapsed_ms, <, 60000);
  g_assert_cmpint (waitpid (fx->spawner, NULL, WNOHANG), ==, -1);
  g_assert_cmpint (errno, ==, ECHILD);
  fx->spawner = 0;

  spawn_expect_success (again, fx->dir, 10000, NULL, NULL);
}

/* whether @pid waits in epoll_wait(2), asleep: the spawner between two wake-ups */
static gboolean
waits_in_epoll (GPid pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/syscall", (int) pid);
  g_autofree char *syscall_text = NULL;
  long number;

  if (!g_file_get_contents (path, &syscall_text, NULL, NULL) ||
      sscanf (syscall_text, "%ld", &number) != 1)
    return FALSE;   /* "running", or gone */
  g_free (path);
  path = g_strdup_printf ("/proc/%d/stat", (int) pid);
  {
    g_autofree char *stat = NULL;
    const char *after;

    if (!g_file_get_contents (path, &stat, NULL, NULL) ||
        (after = strrchr (stat, ')')) == NULL || after[2] != 'S')
      return FALSE;
  }
#ifdef SYS_epoll_wait
  if (number == SYS_epoll_wait)
    return TRUE;
#endif
#ifdef SYS_epoll_pwait2
  if (number == SYS_epoll_pwait2)
    return TRUE;
#endif
  return number == SYS_epoll_pwait;
}

/* the numbers of this process's sockets, sorted, as one string */
static char *
own_sockets (void)
{
  g_autoptr(GDir) dir = g_dir_open ("/proc/self/fd", 0, NULL);
  g_autoptr(GArray) numbers = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr(GString) out = g_string_new (NULL);
  const char *name;

  g_assert_nonnull (dir);
  while ((name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *link = g_build_filename ("/proc/self/fd", name, NULL);
      g_autofree char *target = g_file_read_link (link, NULL);
      int number = atoi (name);

      if (target != NULL && g_str_has_prefix (target, "socket:"))
        g_array_append_val (numbers, number);
    }
  g_array_sort (numbers, compare_ints);
  for (guint i = 0; i < numbers->len; i++)
    g_string_append_printf (out, "%s%d", i > 0 ? " " : "", g_array_index (numbers, int, i));
  return g_string_free (g_steal_pointer (&out), FALSE);
}

typedef struct {
  Fixture *fx;
  guint    ended;
  guint    succeeded;
  guint    stopped;       /* ended with an error: their spawner was stopped */
  char    *sockets_before;
  char    *sockets_after;
} Restart;

/* the first run to end stops the spawner and starts another, as a service reloading its
 * configuration from a run's end could */
static void
restart_done_cb (ShimwatchSpawnResult *result,
                 GError               *error,
                 gpointer              user_data)
{
  Restart *restart = user_data;
  g_autoptr(ShimwatchSpawnResult) owned G_GNUC_UNUSED = result;
  g_autoptr(GError) local_error = NULL;
  int status;

  if (restart->ended++ == 0)
    {
      g_assert_no_error (error);
      g_assert_true (WIFEXITED (result->wait_status));
      restart->succeeded++;
      restart->sockets_before = own_sockets ();
      status = shimwatch_spawn_stop_spawner ();
      g_assert_true (WIFEXITED (status));
      g_assert_cmpint (WEXITSTATUS (status), ==, 0);
      g_assert_true (shimwatch_spawn_start_spawner (&local_error));
      g_assert_no_error (local_error);
      restart->fx->spawner = shimwatch_spawn_get_spawner_pid ();
      restart->sockets_after = own_sockets ();
      return;
    }
  /* the other run was the stopped spawner's: it ends with an error, and nothing reads its
   * DONE from the new spawner's socket */
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED);
  g_assert_null (result);
  g_clear_error (&error);
  restart->stopped++;
}

/* A run's end stops the spawner and starts a new one while more of the old spawner's
 * replies are in the batch being read: the new spawner's socket gets the number of the
 * old one's, and the rest of the batch must not be read as the new spawner's (that read
 * the other run's DONE as an unknown run's, took the new spawner for broken, killed it and
 * spawned directly from then on). Both replies are in the socket before the batch is read:
 * both children ended and were reaped, and the spawner sleeps in epoll_wait(2) again. */
static void
test_spawner_restarted_by_a_run (Fixture      *fx,
                                 gconstpointer data)
{
  char *marks[2] = { NULL, NULL };
  g_auto(GStrv) env = g_get_environ ();
  Restart restart = { .fx = fx };
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  GPid old_spawner = fx->spawner;

  for (guint i = 0; i < 2; i++)
    {
      const char *argv[] = { "/bin/sh", "-c", "touch \"$0\"", NULL, NULL };

      marks[i] = g_strdup_printf ("%s/ran-%u", fx->dir, i);
      argv[3] = marks[i];
      shimwatch_spawn_run (argv, (const char * const *) env, fx->dir, -1, 60000,
                           restart_done_cb, &restart);
    }
  /* (the context is not iterated: nothing is read before both DONEs are there) In this
   * order: both commands ran, so both children were forked; then none is left, so both
   * were reaped; then the spawner sleeps, so both DONEs were sent. A scan of /proc made
   * before the marks were seen could predate a fork, and the test then stopped the old
   * spawner while a child still ran, which went to this process, the subreaper. */
  for (;;)
    {
      if (g_file_test (marks[0], G_FILE_TEST_EXISTS) &&
          g_file_test (marks[1], G_FILE_TEST_EXISTS))
        {
          g_autoptr(GArray) children = children_of (fx->spawner);

          if (children->len == 0 && waits_in_epoll (fx->spawner))
            break;
        }
      if (g_get_monotonic_time () > deadline)
        g_error ("the spawner did not run both commands within 60 s");
      g_usleep (1000);
    }
  while (restart.ended < 2)
    g_main_context_iteration (NULL, TRUE);

  g_assert_cmpuint (restart.succeeded, ==, 1);
  g_assert_cmpuint (restart.stopped, ==, 1);
  /* the case this is about: the same number, another spawner */
  g_assert_cmpstr (restart.sockets_after, ==, restart.sockets_before);
  g_assert_cmpint (fx->spawner, >, 0);
  g_assert_cmpint (fx->spawner, !=, old_spawner);
  /* the new spawner was not given up on: no warning, it serves the next run */
  g_assert_cmpuint (warnings->len, ==, 0);
  g_assert_cmpint (shimwatch_spawn_get_spawner_pid (), ==, fx->spawner);
  spawn_expect_success ((const char * const []) { "/bin/sh", "-c", "echo again", NULL },
                        fx->dir, 10000, "again\n", "");
  g_assert_cmpint (shimwatch_spawn_get_spawner_pid (), ==, fx->spawner);
  for (guint i = 0; i < 2; i++)
    {
      g_assert_no_errno (g_unlink (marks[i]));
      g_free (marks[i]);
    }
  g_free (restart.sockets_before);
  g_free (restart.sockets_after);
}

/* -- the main loop's cost -------------------------------------------------------------- */

static guint n_polls;
static guint n_self_wakeups;

/* whether @fd is an eventfd: in a context's poll, the one GLib wakes it with */
static gboolean
is_eventfd (int fd)
{
  char path[64];
  char target[64];
  ssize_t n;

  g_snprintf (path, sizeof path, "/proc/self/fd/%d", fd);
  n = readlink (path, target, sizeof target - 1);
  if (n < 0)
    return FALSE;
  target[n] = '\0';
  return g_str_equal (target, "anon_inode:[eventfd]");
}

/* the context's poll, counted: every iteration, and every one its wake-up eventfd ended */
static gint
counting_poll (GPollFD *fds,
               guint    nfds,
               gint     timeout)
{
  gint n = g_poll (fds, nfds, timeout);

  n_polls++;
  for (guint i = 0; i < nfds; i++)
    if ((fds[i].revents & G_IO_IN) && is_eventfd (fds[i].fd))
      n_self_wakeups++;
  return n;
}

/* A run costs the context no wake-up by its own thread: its descriptors (the spawner's
 * reply, the pidfd, the output pipes) are watched through the one poller of the context,
 * not through a GSource each, which GLib 2.74 wakes the context for when one is attached,
 * dispatched (twice) or destroyed: 13 self-wake-ups, each an eventfd write and one more
 * main-loop iteration, per `shim delete` on the path of every shim's death. Only a
 * waiter thread (no spawner and no pidfd) wakes the context, once per run.
 * Nor does a short run's output wake it, nor the spawner's STARTED: they are read at the
 * end. A run costs one iteration for its end (the pidfd, the waiter thread, or the
 * spawner's close of the reply socket after EXITED), and one for spawn_and_wait()'s
 * g_main_context_pending(). */
static void
test_no_self_wakeup (Fixture      *fx,
                     gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c", "echo out; echo err >&2", NULL };
  const guint n = 10;
  /* (valgrind 3.19 has no pidfd_open(2)) */
  gboolean waiter_thread = !fx->mode->spawner &&
                           (fx->mode->pidfd_errno != 0 || under_valgrind ());

  /* what came before (the poller's making, the spawner's hang-up watch) has woken the
   * context already: that wake-up is taken first */
  shimwatch_poller_get_default ();
  while (g_main_context_iteration (NULL, FALSE))
    ;
  n_polls = n_self_wakeups = 0;
  g_main_context_set_poll_func (NULL, counting_poll);
  for (guint i = 0; i < n; i++)
    spawn_expect_success (argv, fx->dir, 10000, "out\n", "err\n");
  g_main_context_set_poll_func (NULL, NULL);
  g_test_message ("%u runs: %u main-loop iterations, %u of them woken by the context's "
                  "eventfd", n, n_polls, n_self_wakeups);
  g_assert_cmpuint (n_self_wakeups, <=, waiter_thread ? n : 0);
  /* (a few more, should a run take long enough on a loaded machine for its output to be
   * watched) */
  g_assert_cmpuint (n_polls, <=, 2 * n + 3);
}

/* More output than a pipe holds: the child is not blocked for good (what is kept is the
 * first SHIMWATCH_SPAWN_OUTPUT_MAX bytes), however its output is read. */
static void
test_output_beyond_pipe (Fixture      *fx,
                         gconstpointer data)
{
  const char *argv[] = { "/bin/sh", "-c",
                         "head -c 3000000 /dev/zero; head -c 2000000 /dev/zero >&2; exit 5",
                         NULL };
  g_autoptr(ShimwatchSpawnResult) result = NULL;
  g_autoptr(GError) error = NULL;

  result = spawn_and_wait (argv, fx->dir, -1, 60000, &error);
  g_assert_no_error (error);
  g_assert_false (result->timed_out);
  g_assert_true (WIFEXITED (result->wait_status));
  g_assert_cmpint (WEXITSTATUS (result->wait_status), ==, 5);
  g_assert_cmpuint (g_bytes_get_size (result->stdout_bytes), ==, SHIMWATCH_SPAWN_OUTPUT_MAX);
  g_assert_cmpuint (g_bytes_get_size (result->stderr_bytes), ==, SHIMWATCH_SPAWN_OUTPUT_MAX);
}

/* the line of /proc/<pid>/status (or of @text) that starts with @key */
static char *
status_line (const char *text,
             const char *key)
{
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);

  for (guint i = 0; lines[i] != NULL; i++)
    if (g_str_has_prefix (lines[i], key))
      return g_strdup (lines[i]);
  g_error ("no %s in %s", key, text);
  return NULL;
}

/* What a command gets from how it is started, whoever starts it: no signal blocked,
 * ignored or caught (the spawner blocks SIGCHLD and ignores SIGPIPE for itself), the
 * resource limits and the cgroup of the service. Started by the service itself with
 * glibc's posix_spawn(3) from a process with threads, glibc's two internal signals (32
 * and 33, which glibc programs never see) are left ignored in the child; the spawner,
 * like containerd, leaves no signal ignored. */
static void
test_child_state (Fixture      *fx,
                  gconstpointer data)
{
  const char *status_argv[] = { "/bin/cat", "/proc/self/status", NULL };
  const char *limits_argv[] = { "/bin/cat", "/proc/self/limits", NULL };
  const char *cgroup_argv[] = { "/bin/cat", "/proc/self/cgroup", NULL };
  g_autoptr(ShimwatchSpawnResult) status = NULL;
  g_autoptr(ShimwatchSpawnResult) limits = NULL;
  g_autoptr(ShimwatchSpawnResult) cgroup = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *status_text = NULL;
  g_autofree char *own_limits = NULL;
  g_autofree char *own_cgroup = NULL;
  const char *keys[] = { "SigBlk:", "SigIgn:", "SigCgt:" };

  status = spawn_and_wait (status_argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  status_text = g_strndup (g_bytes_get_data (status->stdout_bytes, NULL),
                           g_bytes_get_size (status->stdout_bytes));
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    {
      g_autofree char *line = status_line (status_text, keys[i]);
      guint64 set = g_ascii_strtoull (line + strlen (keys[i]), NULL, 16);
      guint64 glibc_internal = (G_GUINT64_CONSTANT (1) << 31) | (G_GUINT64_CONSTANT (1) << 32);

      if (!fx->mode->spawner && g_str_equal (keys[i], "SigIgn:"))
        set &= ~glibc_internal;
      if (set != 0)
        g_error ("%s of a command started %s", line,
                 fx->mode->spawner ? "by the spawner" : "by the service");
    }

  limits = spawn_and_wait (limits_argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  g_assert_true (g_file_get_contents ("/proc/self/limits", &own_limits, NULL, NULL));
  assert_output (limits->stdout_bytes, own_limits);

  cgroup = spawn_and_wait (cgroup_argv, fx->dir, -1, 10000, &error);
  g_assert_no_error (error);
  g_assert_true (g_file_get_contents ("/proc/self/cgroup", &own_cgroup, NULL, NULL));
  assert_output (cgroup->stdout_bytes, own_cgroup);
}

/* a sanitizer's allocator maps and unmaps memory as it likes (glibc's does not, for the
 * spawner's few small blocks) */
#if defined(__SANITIZE_ADDRESS__)
# define SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
# if __has_feature (address_sanitizer)
#  define SANITIZER_ALLOCATOR 1
# endif
#endif
#ifndef SANITIZER_ALLOCATOR
# define SANITIZER_ALLOCATOR 0
#endif

/* strace of @pid (of one thread: strace takes a thread id for a pid), from the time this
 * returns, into @out; 0 if strace is not installed (the caller skips) */
static GPid
strace_start (GPid        pid,
              const char *out,
              const char *filter)
{
  g_autofree char *strace = g_find_program_in_path ("strace");
  g_autofree char *pid_text = g_strdup_printf ("%d", (int) pid);
  const char *argv[] = { strace, "-qq", "-o", out, "-e", filter, "-e", "signal=none",
                         "-p", pid_text, NULL };
  g_autoptr(GError) error = NULL;
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  GPid tracer;

  if (strace == NULL)
    return 0;
  g_assert_true (g_spawn_async (NULL, (char **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                NULL, NULL, &tracer, &error));
  g_assert_no_error (error);
  /* until it traces @pid */
  for (;;)
    {
      g_autofree char *path = g_strdup_printf ("/proc/%d/status", (int) pid);
      g_autofree char *text = NULL;
      g_autofree char *line = NULL;

      g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
      line = status_line (text, "TracerPid:");
      if (atoi (line + strlen ("TracerPid:")) == tracer)
        return tracer;
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_usleep (10000);
    }
}

/* what strace saw, once it has detached (not inlined: GCC 12 then takes the contents for a
 * pointer to the local that held them) */
static G_GNUC_NO_INLINE char *
strace_stop (GPid        tracer,
             const char *out)
{
  g_autoptr(GError) error = NULL;
  char *contents = NULL;
  int wait_status;

  g_assert_no_errno (kill (tracer, SIGTERM));
  g_assert_cmpint (waitpid (tracer, &wait_status, 0), ==, tracer);
  g_file_get_contents (out, &contents, NULL, &error);
  g_assert_no_error (error);
  g_assert_no_errno (g_unlink (out));
  return contents;
}

/* the calls of a trace, by name: how many times each */
static GHashTable *
count_calls (const char *trace)
{
  GHashTable *counts = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_auto(GStrv) lines = g_strsplit (trace, "\n", -1);

  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *paren = strchr (lines[i], '(');
      char *name;

      if (paren == NULL || paren == lines[i] || !g_ascii_isalpha (lines[i][0]))
        continue;
      name = g_strndup (lines[i], paren - lines[i]);
      g_hash_table_insert (counts, name,
                           GUINT_TO_POINTER (GPOINTER_TO_UINT (g_hash_table_lookup (counts,
                                                                                    name)) + 1));
    }
  return counts;
}

static guint
count_of (GHashTable *counts,
          const char *name)
{
  return GPOINTER_TO_UINT (g_hash_table_lookup (counts, name));
}

static guint
count_all (GHashTable *counts)
{
  GHashTableIter iter;
  gpointer value;
  guint total = 0;

  g_hash_table_iter_init (&iter, counts);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    total += GPOINTER_TO_UINT (value);
  return total;
}

/* The same commands give the same results through the spawner and spawned by this
 * process: the outputs byte for byte (kept to SHIMWATCH_SPAWN_OUTPUT_MAX each, beyond
 * what a pipe holds), the wait status, the deadline's kill, the error of a command that
 * cannot run. */
static void
test_same_results (Fixture      *fx,
                   gconstpointer data)
{
  static const char * const commands[][4] = {
    { "/bin/sh", "-c", "pwd; echo \"$SHIMWATCH_SPAWN_TEST\"; ls /proc/self/fd; exit 3", NULL },
    { "/bin/sh", "-c", "yes abcdefgh | head -c 2500000; yes ijk | head -c 1500000 >&2", NULL },
    { "/bin/sh", "-c", "echo before; echo err >&2; kill -TERM $$", NULL },
    { "/bin/sh", "-c", "echo started; exec sleep 60", NULL },
    { "/nonexistent/shim", NULL },
  };
  ShimwatchSpawnResult *results[2][G_N_ELEMENTS (commands)];
  GError *errors[2][G_N_ELEMENTS (commands)];
  int status;

  for (guint way = 0; way < 2; way++)
    {
      if (way == 1)
        {
          /* from now on, without a spawner */
          status = shimwatch_spawn_stop_spawner ();
          g_assert_true (WIFEXITED (status));
          g_assert_cmpint (WEXITSTATUS (status), ==, 0);
          fx->spawner = 0;
          g_assert_cmpint (shimwatch_spawn_get_spawner_pid (), ==, 0);
        }
      for (guint c = 0; c < G_N_ELEMENTS (commands); c++)
        {
          errors[way][c] = NULL;
          results[way][c] = spawn_and_wait (commands[c], fx->dir, -1, c == 3 ? 300 : 60000,
                                            &errors[way][c]);
        }
    }

  for (guint c = 0; c < G_N_ELEMENTS (commands); c++)
    {
      ShimwatchSpawnResult *by_spawner = results[0][c];
      ShimwatchSpawnResult *directly = results[1][c];

      g_test_message ("%s: %s", commands[c][0], commands[c][1] != NULL ? commands[c][2] : "");
      if (errors[0][c] != NULL || errors[1][c] != NULL)
        {
          /* (valgrind runs posix_spawn's child as a fork: it exits 127 instead) */
          if (under_valgrind () && errors[0][c] != NULL && directly != NULL)
            {
              g_assert_cmpint (WEXITSTATUS (directly->wait_status), ==, 127);
              g_clear_error (&errors[0][c]);
              shimwatch_spawn_result_free (directly);
              continue;
            }
          g_assert_nonnull (errors[0][c]);
          g_assert_nonnull (errors[1][c]);
          g_assert_cmpuint (errors[0][c]->domain, ==, errors[1][c]->domain);
          g_assert_cmpint (errors[0][c]->code, ==, errors[1][c]->code);
          g_assert_cmpstr (errors[0][c]->message, ==, errors[1][c]->message);
          g_clear_error (&errors[0][c]);
          g_clear_error (&errors[1][c]);
          continue;
        }
      g_assert_cmpint (by_spawner->wait_status, ==, directly->wait_status);
      g_assert_cmpint (by_spawner->timed_out, ==, directly->timed_out);
      g_assert_true (g_bytes_equal (by_spawner->stdout_bytes, directly->stdout_bytes));
      g_assert_true (g_bytes_equal (by_spawner->stderr_bytes, directly->stderr_bytes));
      /* and what they both gave is what the command did */
      if (c == 1)
        {
          g_assert_cmpuint (g_bytes_get_size (by_spawner->stdout_bytes), ==,
                            SHIMWATCH_SPAWN_OUTPUT_MAX);
          g_assert_cmpuint (g_bytes_get_size (by_spawner->stderr_bytes), ==,
                            SHIMWATCH_SPAWN_OUTPUT_MAX);
        }
      g_assert_true (c == 3 ? by_spawner->timed_out : !by_spawner->timed_out);
      shimwatch_spawn_result_free (by_spawner);
      shimwatch_spawn_result_free (directly);
    }
}

#define TRACE_MARK "/swspawn: the runs begin"

/* What a run costs this thread, as strace sees it, through a spawner: one message out
 * (with no descriptor, or the one stdin given), its end read back in one record by one
 * recvmmsg(2) (a batch shorter than asked for says the socket is empty: no receive that
 * only fails with EAGAIN), and no descriptor of its own: no socketpair,
 * pipe, fcntl, dup, pidfd, poller watch (epoll_ctl) or close. Each of those, 25 in all,
 * was on the main thread at every `shim delete`. The main loop's own calls (poll,
 * epoll_wait) come on top. */
static void
test_main_thread_calls (Fixture      *fx,
                        gconstpointer data)
{
  const char *forbidden[] = { "socketpair", "pipe", "pipe2", "fcntl", "dup", "dup2", "dup3",
                              "close", "epoll_ctl", "pidfd_open", "pidfd_send_signal",
                              "wait4", "waitid", "clone", "clone3", "write" };
  const char *argv[] = { "/bin/sh", "-c", "echo out; echo err >&2", NULL };
  const char *cat_argv[] = { "/bin/cat", NULL };
  g_autofree char *out = g_build_filename (fx->dir, "strace.out", NULL);
  g_autofree char *full_trace = NULL;
  const char *trace;
  g_autoptr(GHashTable) counts = NULL;
  g_autoptr(ShimwatchSpawnResult) with_stdin = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) lines = NULL;
  g_autofree char *passed = NULL;
  const guint n = 10;
  guint n_passing = 0;
  int input = memfd_create ("swspawn-stdin", MFD_CLOEXEC);
  GPid tracer;

  passed = g_strdup_printf ("cmsg_data=[%d]", input);
  g_assert_cmpint (write (input, "in\n", 3), ==, 3);
  g_assert_cmpint (lseek (input, 0, SEEK_SET), ==, 0);
  /* what a first run does once in a process (GTask's class, its thread pool) is done
   * with, and what came before (the poller's making, the spawner's watch) */
  spawn_expect_success (argv, fx->dir, 10000, "out\n", "err\n");
  while (g_main_context_iteration (NULL, FALSE))
    ;
  tracer = strace_start (getpid (), out, "trace=all");
  if (tracer == 0)
    {
      g_test_skip ("strace is not installed (tools/install-deps.sh installs it)");
      g_assert_no_errno (close (input));
      return;
    }
  /* what strace_start() did once it was traced is not counted: from here on */
  g_assert_cmpint (access (TRACE_MARK, F_OK), <, 0);
  for (guint i = 0; i < n; i++)
    spawn_expect_success (argv, fx->dir, 10000, "out\n", "err\n");
  with_stdin = spawn_and_wait (cat_argv, fx->dir, input, 10000, &error);
  g_assert_no_error (error);
  full_trace = strace_stop (tracer, out);
  g_assert_nonnull (strstr (full_trace, TRACE_MARK));
  trace = strchr (strstr (full_trace, TRACE_MARK), '\n');
  g_assert_nonnull (trace);
  assert_output (with_stdin->stdout_bytes, "in\n");
  g_assert_no_errno (close (input));

  g_test_message ("strace of the main thread for %u runs:\n%s", n + 1, trace);
  counts = count_calls (trace);
  g_assert_cmpuint (count_of (counts, "sendmsg"), ==, n + 1);
  /* one descriptor passed in all, the stdin of the last run */
  lines = g_strsplit (trace, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    if (strstr (lines[i], "SCM_RIGHTS") != NULL)
      {
        g_assert_true (g_str_has_prefix (lines[i], "sendmsg("));
        g_assert_nonnull (strstr (lines[i], passed));
        n_passing++;
      }
  g_assert_cmpuint (n_passing, ==, 1);
  /* one receive per run: each run's end wakes the loop once, and is read at once */
  g_assert_cmpuint (count_of (counts, "recvfrom") + count_of (counts, "recvmsg") +
                    count_of (counts, "recvmmsg"), ==, n + 1);
  for (guint c = 0; c < G_N_ELEMENTS (forbidden); c++)
    if (count_of (counts, forbidden[c]) != 0)
      g_error ("the main thread called %s %u times for %u runs", forbidden[c],
               count_of (counts, forbidden[c]), n + 1);
  /* and the main loop's polls: a few per run, however it goes */
  g_assert_cmpuint (count_all (counts), <=, 7 * (n + 1));
}

/* What the spawner calls, per spawn, as strace sees it: one clone, and none of what
 * posix_spawn(3) called there at each spawn (7 prlimit64 for its file actions, a stack's
 * mmap and munmap, 2 rt_sigprocmask around the clone); and, now that it makes the pipes,
 * reads them and sends the output back, a bounded number of calls in all: its request, two
 * pipes made and watched, the clone, the write ends closed, the reaping (a wake-up, the
 * signalfd, wait4), the pipes read (no read for the end of the file after a hang-up) and
 * closed, one record sent. No fcntl(2):
 * the read ends block, and are only read when epoll or poll says they are readable. */
static void
test_spawner_calls (Fixture      *fx,
                    gconstpointer data)
{
  const char *calls[] = { "prlimit64", "mmap", "munmap", "rt_sigprocmask" };
  const char *true_argv[] = { "/bin/true", NULL };
  const char *echo_argv[] = { "/bin/sh", "-c", "echo out; echo err >&2", NULL };
  g_autofree char *out = g_build_filename (fx->dir, "strace.out", NULL);
  g_autofree char *trace = NULL;
  g_autoptr(GHashTable) counts = NULL;
  GPid tracer;
  const guint n_spawns = 4;

  tracer = strace_start (fx->spawner, out, "trace=all");
  if (tracer == 0)
    {
      g_test_skip ("strace is not installed (tools/install-deps.sh installs it)");
      return;
    }
  for (guint i = 0; i < n_spawns; i++)
    spawn_expect_success (true_argv, fx->dir, 10000, NULL, NULL);
  for (guint i = 0; i < n_spawns; i++)
    spawn_expect_success (echo_argv, fx->dir, 10000, "out\n", "err\n");
  trace = strace_stop (tracer, out);
  g_test_message ("strace of the spawner for %u spawns:\n%s", 2 * n_spawns, trace);
  counts = count_calls (trace);
  g_assert_cmpuint (count_of (counts, "clone") + count_of (counts, "clone3"), ==, 2 * n_spawns);
  for (guint c = 0; c < G_N_ELEMENTS (calls); c++)
    if (count_of (counts, calls[c]) != 0 &&
        !(SANITIZER_ALLOCATOR && g_str_has_suffix (calls[c], "map")))
      g_error ("the spawner called %s %u times for %u spawns", calls[c],
               count_of (counts, calls[c]), n_spawns);
  g_assert_cmpuint (count_of (counts, "fcntl"), ==, 0);
  /* each request taken by one recvmmsg, with no receive after it that finds the socket
   * empty; no read of a pipe that hung up with nothing in it (/bin/true writes nothing):
   * the one read of such a spawn is the signalfd's */
  g_assert_cmpuint (count_of (counts, "recvmsg") + count_of (counts, "recvmmsg"), ==,
                    2 * n_spawns);
  /* and one read of each pipe the child wrote a line to, however the line and the
   * hang-up are told (at once, or one after the other): none for the end of the file */
  g_assert_cmpuint (count_of (counts, "read"), ==, n_spawns + 3 * n_spawns);
  /* besides the wake-ups (two per spawn here, more where the lines, the hang-ups and the
   * child's end are told one by one): 13 calls per spawn, 15 where the child wrote */
  if (!SANITIZER_ALLOCATOR)
    g_assert_cmpuint (count_all (counts) - count_of (counts, "epoll_wait"), <=,
                      13 * n_spawns + 15 * n_spawns);
  g_assert_cmpuint (count_of (counts, "epoll_wait"), <=, 5 * 2 * n_spawns);
}

int
main (int    argc,
      char **argv)
{
  static const struct { const char *name; Mode mode; } modes[] = {
    { "spawner/pidfd", { 0, TRUE } },
    { "spawner/no-pidfd-enosys", { ENOSYS, TRUE } },
    { "spawner/no-pidfd-eperm", { EPERM, TRUE } },
    { "pidfd", { 0, FALSE } },
    { "no-pidfd-enosys", { ENOSYS, FALSE } },
    { "no-pidfd-eperm", { EPERM, FALSE } },
  };
  static const struct { const char *name; void (*fn) (Fixture *,
                                                      gconstpointer);
                        gboolean spawner_only; } cases[] = {
    { "run", test_run, FALSE },
    { "stdin-null", test_stdin_null, FALSE },
    { "no-inherited-fd", test_no_inherited_fd, FALSE },
    { "large-output", test_large_output, FALSE },
    { "output-read-once", test_output_read_once, FALSE },
    { "left-behind-writer", test_left_behind_writer, FALSE },
    { "many-at-once", test_many_at_once, FALSE },
    { "signaled", test_signaled, FALSE },
    { "deadline", test_deadline, FALSE },
    { "exit-before-deadline", test_exit_before_deadline, FALSE },
    { "cannot-run", test_cannot_run, FALSE },
    { "no-self-wakeup", test_no_self_wakeup, FALSE },
    { "output-beyond-pipe", test_output_beyond_pipe, FALSE },
    { "spawner-descriptors", test_spawner_descriptors, TRUE },
    { "spawner-dies", test_spawner_dies, TRUE },
    { "spawner-stuck", test_spawner_stuck, TRUE },
    { "spawner-restarted-by-a-run", test_spawner_restarted_by_a_run, TRUE },
    { "child-state", test_child_state, FALSE },
    { "spawner-calls", test_spawner_calls, TRUE },
    { "main-thread-calls", test_main_thread_calls, TRUE },
    { "same-results", test_same_results, TRUE },
  };

  g_test_init (&argc, &argv, NULL);
  warnings = g_ptr_array_new_with_free_func (g_free);
  g_log_set_writer_func (log_writer, NULL, NULL);
  /* what a killed spawner leaves behind comes here, not to init */
  g_assert_no_errno (prctl (PR_SET_CHILD_SUBREAPER, 1));
  for (guint m = 0; m < G_N_ELEMENTS (modes); m++)
    for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
      {
        g_autofree char *path = NULL;

        if (cases[c].spawner_only && !modes[m].mode.spawner)
          continue;
#ifndef SHIMWATCH_TEST_HOOKS
        /* a pidfd_open(2) that fails is a test hook (-Dtest_hooks) */
        if (modes[m].mode.pidfd_errno != 0)
          continue;
#endif
        /* valgrind's own calls in the traced process would be counted */
        if ((cases[c].fn == test_spawner_calls || cases[c].fn == test_main_thread_calls) &&
            under_valgrind ())
          continue;
        path = g_strdup_printf ("/spawn/%s/%s", modes[m].name, cases[c].name);
        g_test_add (path, Fixture, &modes[m].mode, fixture_setup, cases[c].fn,
                    fixture_teardown);
      }
  return g_test_run ();
}
