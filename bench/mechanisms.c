/* SPDX-License-Identifier: Apache-2.0
 *
 * What each of three mechanisms of the service buys, measured with and without it in the
 * same run, in alternating rounds (docs/architecture.md, "What each mechanism buys"):
 *
 *  - types:  the GVariant types the publisher keeps (shimwatch-publisher.c) against none
 *            kept, per message of a death, built and serialized as GDBus does;
 *  - commit: the group commit (shimwatch-commit-queue.c) against a record synced where it
 *            is written, the main thread's time per record, on a tmpfs (the packaged
 *            unit's /run) and on a disk;
 *  - spawn:  the three ways the service runs a command (shimwatch-spawn.c): through the
 *            spawner, posix_spawn with a pidfd, posix_spawn with a waiter thread (the
 *            last only in a -Dtest_hooks build), with 4,000 descriptors open, as with
 *            1,000 shims.
 *
 * mechanisms [--rounds N] [types|commit|spawn ...]: each part in a process of its
 * own. Prints one table; no figure is judged (timing is no test). With root, the tmpfs of
 * the commit part is a private one on /run (a mount namespace of the bench's own), else
 * /dev/shm.
 *
 * The service's own log writer was measured here too, against GLib's default writer: to
 * the journal (the packaged unit) they cost the same per line (1.00-1.03 x), so it went.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "shimwatch-commit-queue.h"
#include "shimwatch-publisher.h"
#include "shimwatch-records.h"
#include "shimwatch-spawn.h"

static guint rounds = 5;

/* -- figures ------------------------------------------------------------------------ */

static int
compare_doubles (const void *a,
                 const void *b)
{
  double x = *(const double *) a;
  double y = *(const double *) b;

  return x < y ? -1 : x > y;
}

static double
median (GArray *samples)
{
  g_array_sort (samples, compare_doubles);
  if (samples->len == 0)
    return 0;
  return g_array_index (samples, double, samples->len / 2);
}

/* one row: the medians of the rounds, with and without, and their ratio */
static void
row (const char *mechanism,
     const char *figure,
     GArray     *with,
     GArray     *without)
{
  double a = median (with);
  double b = median (without);

  printf ("%-8s | %-62s | %10.2f | %10.2f | %6.2f\n", mechanism, figure, a, b,
          b > 0 ? a / b : 0);
  fflush (stdout);
}

static void
note (const char *mechanism,
      const char *text)
{
  printf ("%-8s | %s\n", mechanism, text);
  fflush (stdout);
}

static double
cpu_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static double
wall_ns (void)
{
  return g_get_monotonic_time () * 1e3;
}

static GArray *
samples_new (void)
{
  return g_array_new (FALSE, FALSE, sizeof (double));
}

static void
add (GArray *samples,
     double  value)
{
  g_array_append_val (samples, value);
}

/* -- types: the kept GVariant types ------------------------------------------------- */

/* the messages of one death, as GDBus makes them from the publisher's calls: built,
 * serialized (with their header fields, an a{yv}) and freed */
static void
one_death (void)
{
  const char *path = "/org/shimwatch/Shimwatch1/shims/default/bench_2dtask";
  GVariant *bodies[5];
  const char *members[] = {
    "ShimDisconnected", "TaskExit", "TaskDelete", "PropertiesChanged", "InterfacesRemoved",
  };
  GVariantBuilder changed;
  const char *interfaces[] = { "org.shimwatch.Shimwatch1.Shim", NULL };

  g_variant_builder_init (&changed, G_VARIANT_TYPE ("a{sv}"));
  g_variant_builder_add (&changed, "{sv}", "Status", g_variant_new_string ("cleaning"));
  g_variant_builder_add (&changed, "{sv}", "ExitStatus", g_variant_new_uint32 (137));
  bodies[0] = g_variant_new ("(ossu)", path, "default", "bench-task", 4242);
  bodies[1] = g_variant_new ("(osssuut)", path, "default", "bench-task", "bench-task",
                             4243, 137, G_GUINT64_CONSTANT (1700000000000000000));
  bodies[2] = g_variant_new ("(osssuut)", path, "default", "bench-task", "bench-task",
                             4243, 137, G_GUINT64_CONSTANT (1700000000000000000));
  bodies[3] = g_variant_new ("(sa{sv}^as)", "org.shimwatch.Shimwatch1.Shim", &changed,
                             (const char * const *) (const char *[]) { NULL });
  bodies[4] = g_variant_new ("(o^as)", path, interfaces);
  for (guint i = 0; i < G_N_ELEMENTS (bodies); i++)
    {
      g_autoptr(GDBusMessage) message =
        g_dbus_message_new_signal (i < 3 ? "/org/shimwatch/Shimwatch1" : path,
                                   i < 3 ? "org.shimwatch.Shimwatch1.Manager"
                                         : "org.freedesktop.DBus.Properties",
                                   members[i]);
      g_autofree guchar *blob = NULL;
      gsize size;

      g_dbus_message_set_body (message, bodies[i]);
      g_dbus_message_set_serial (message, 1 + i);
      blob = g_dbus_message_to_blob (message, &size, G_DBUS_CAPABILITY_FLAGS_NONE, NULL);
      g_assert_nonnull (blob);
    }
}

static double
types_batch (guint n)
{
  double start = cpu_ns ();

  for (guint i = 0; i < n; i++)
    one_death ();
  return (cpu_ns () - start) / n / 1e3;
}

static int
run_types (void)
{
  g_autoptr(GArray) with = samples_new ();
  g_autoptr(GArray) without = samples_new ();
  g_autofree char *dir = g_dir_make_tmp ("swbench-types-XXXXXX", NULL);
  const guint n = 2000;

  if (dir == NULL)
    return 1;
  types_batch (n / 4);
  for (guint r = 0; r < rounds * 2; r++)
    {
      /* the publisher keeps its types for as long as it lives */
      g_autoptr(ShimwatchPublisher) publisher = shimwatch_publisher_new (NULL, dir, NULL);

      add (with, types_batch (n));
      g_clear_object (&publisher);
      add (without, types_batch (n));
    }
  row ("types", "one death's 5 messages built and serialized, CPU (µs)", with, without);
  g_rmdir (dir);
  return 0;
}

/* -- commit: the group commit --------------------------------------------------------- */

static GBytes *
record_bytes (void)
{
  g_autofree char *pad = g_strnfill (600, 'x');
  char *text = g_strdup_printf ("{\"namespace\":\"default\",\"pad\":\"%s\"}\n", pad);

  return g_bytes_new_take (text, strlen (text));
}

/* a record written as the queue's writer writes it (its directory made if need be, a temp
 * file, write, rename), with no queue and no sync at all: what a tmpfs needs */
static gboolean
write_plain (const char *path,
             GBytes     *bytes)
{
  g_autofree char *dir = g_path_get_dirname (path);
  g_autofree char *temp = g_strconcat (path, ".XXXXXX", NULL);
  gsize size;
  const char *data = g_bytes_get_data (bytes, &size);
  int fd;
  gboolean ok;

  if (g_mkdir_with_parents (dir, 0700) != 0)
    return FALSE;
  fd = g_mkstemp_full (temp, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return FALSE;
  ok = write (fd, data, size) == (gssize) size && rename (temp, path) == 0;
  close (fd);
  return ok;
}

/* @n records written as one turn of the main loop would (a mass death's): the main
 * thread's time per record, and then the time until all are on disk */
static void
commit_batch (const char           *dir,
              ShimwatchCommitQueue *queue,
              gboolean              plain,
              guint                 n,
              GArray               *main_us,
              GArray               *durable_us)
{
  g_autoptr(GBytes) bytes = record_bytes ();
  double start = wall_ns ();
  double written;

  for (guint i = 0; i < n; i++)
    {
      g_autofree char *path = g_strdup_printf ("%s/task-%u.json", dir, i);
      g_autoptr(GError) error = NULL;

      if (plain)
        {
          if (!write_plain (path, bytes))
            g_error ("cannot write %s: %s", path, g_strerror (errno));
        }
      else if (!shimwatch_records_write_encoded (path, bytes, queue, &error))
        g_error ("%s", error->message);
    }
  written = wall_ns ();
  if (queue != NULL)
    {
      shimwatch_commit_queue_flush (queue);
      shimwatch_commit_queue_wait_idle (queue);
    }
  add (main_us, (written - start) / n / 1e3);
  if (durable_us != NULL)
    add (durable_us, (wall_ns () - start) / n / 1e3);
  for (guint i = 0; i < n; i++)
    {
      g_autofree char *path = g_strdup_printf ("%s/task-%u.json", dir, i);

      g_unlink (path);
    }
}

static void
commit_on (const char *parent)
{
  g_autoptr(GArray) queued = samples_new ();
  g_autoptr(GArray) synced = samples_new ();
  g_autoptr(GArray) queued_durable = samples_new ();
  g_autoptr(GArray) synced_durable = samples_new ();
  g_autoptr(GArray) plain = samples_new ();
  g_autofree char *template = g_build_filename (parent, "swbench-commit-XXXXXX", NULL);
  g_autofree char *dir = g_mkdtemp (g_strdup (template));
  g_autoptr(ShimwatchCommitQueue) queue = shimwatch_commit_queue_new (NULL);
  gboolean is_volatile;
  const guint n = 50;

  if (dir == NULL)
    {
      note ("commit", "no directory to write in: skipped");
      return;
    }
  /* as the record committer makes it (shimwatch-record-committer.c) */
  is_volatile = shimwatch_commit_path_is_volatile (dir);
  shimwatch_commit_queue_set_volatile (queue, is_volatile);
  for (guint r = 0; r < rounds; r++)
    {
      commit_batch (dir, queue, FALSE, n, queued, queued_durable);
      commit_batch (dir, NULL, FALSE, n, synced, synced_durable);
      if (is_volatile)
        commit_batch (dir, NULL, TRUE, n, plain, NULL);
    }
  row ("commit", is_volatile ? "tmpfs: queued / synced at once, main thread (µs/record)"
                              : "disk: queued / synced at once, main thread (µs/record)",
       queued, synced);
  if (is_volatile)
    row ("commit", "tmpfs: queued / no queue and no sync, main thread (µs/record)",
         queued, plain);
  else
    row ("commit", "disk: queued / synced at once, until durable (µs/record)",
         queued_durable, synced_durable);
  g_rmdir (dir);
}

static int
run_commit (void)
{
  const char *disk = g_getenv ("SHIMWATCH_BENCH_DISK_DIR");
  g_autofree char *run = NULL;

  /* the packaged unit's records: /run/shimwatch, a tmpfs */
  if (geteuid () == 0 && unshare (CLONE_NEWNS) == 0 &&
      mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
      mount ("tmpfs", "/run", "tmpfs", 0, "mode=0755") == 0)
    run = g_strdup ("/run");
  else if (shimwatch_commit_path_is_volatile ("/dev/shm"))
    run = g_strdup ("/dev/shm");
  if (run != NULL)
    commit_on (run);
  else
    note ("commit", "no tmpfs to write in: the packaged unit's case skipped");
  if (disk == NULL)
    disk = g_get_tmp_dir ();
  if (shimwatch_commit_path_is_volatile (disk))
    note ("commit", "SHIMWATCH_BENCH_DISK_DIR is on a tmpfs: the disk's case skipped");
  else
    commit_on (disk);
  return 0;
}

/* -- spawn: the three ways to run a command ------------------------------------------- */

static void
spawn_done (ShimwatchSpawnResult *result,
            GError               *error,
            gpointer              user_data)
{
  gboolean *done = user_data;

  if (error != NULL)
    g_error ("spawn: %s", error->message);
  g_assert_true (WIFEXITED (result->wait_status) && WEXITSTATUS (result->wait_status) == 0);
  shimwatch_spawn_result_free (result);
  *done = TRUE;
}

/* the spawner's CPU so far (ns, /proc/<pid>/schedstat), 0 without one */
static double
spawner_cpu_ns (void)
{
  GPid pid = shimwatch_spawn_get_spawner_pid ();
  g_autofree char *path = NULL;
  g_autofree char *text = NULL;

  if (pid == 0)
    return 0;
  path = g_strdup_printf ("/proc/%d/schedstat", (int) pid);
  if (!g_file_get_contents (path, &text, NULL, NULL))
    return 0;
  return g_ascii_strtod (text, NULL);
}

/* @n runs of `true`, one after the other: the service's own CPU per run, and that of
 * the service and its spawner together */
static void
spawn_batch (guint   n,
             GArray *own_us,
             GArray *with_spawner_us)
{
  const char *argv[] = { "/bin/true", NULL };
  const char *envp[] = { "PATH=/usr/bin:/bin", NULL };
  double start = cpu_ns ();
  double spawner_start = spawner_cpu_ns ();
  double own;

  for (guint i = 0; i < n; i++)
    {
      gboolean done = FALSE;

      shimwatch_spawn_run (argv, envp, "/", -1, 5000, spawn_done, &done);
      while (!done)
        g_main_context_iteration (NULL, TRUE);
    }
  own = (cpu_ns () - start) / n / 1e3;
  add (own_us, own);
  if (with_spawner_us != NULL)
    add (with_spawner_us, own + (spawner_cpu_ns () - spawner_start) / n / 1e3);
}

/* the fallback's one message ("pidfd_open() failed") would cut the table */
static GLogWriterOutput
quiet_writer (GLogLevelFlags   level,
              const GLogField *fields,
              gsize            n_fields,
              gpointer         user_data)
{
  if ((level & (G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO | G_LOG_LEVEL_DEBUG)) != 0)
    return G_LOG_WRITER_HANDLED;
  return g_log_writer_default (level, fields, n_fields, user_data);
}

static int
run_spawn (void)
{
  g_autoptr(GArray) spawner_own = samples_new ();
  g_autoptr(GArray) spawner_all = samples_new ();
  g_autoptr(GArray) pidfd_own = samples_new ();
  g_autoptr(GArray) thread_own = samples_new ();
  g_autoptr(GArray) pidfd_wall = samples_new ();
  g_autoptr(GArray) spawner_wall = samples_new ();
  const guint n_fds = 4000;
  const guint n = 30;
  struct rlimit limit;
  int fds[4000];
  int null_fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);

  g_log_set_writer_func (quiet_writer, NULL, NULL);
  if (null_fd < 0 || getrlimit (RLIMIT_NOFILE, &limit) != 0)
    return 1;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit (RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < n_fds + 100)
    {
      note ("spawn", "fewer than 4,100 descriptors allowed: skipped");
      return 0;
    }
  for (guint r = 0; r < rounds; r++)
    {
      g_autoptr(GError) error = NULL;
      double t;

      /* as shimwatchd: the spawner forked while little is open */
      if (!shimwatch_spawn_start_spawner (&error))
        g_error ("%s", error->message);
      for (guint i = 0; i < n_fds; i++)
        fds[i] = fcntl (null_fd, F_DUPFD_CLOEXEC, 3);
      t = wall_ns ();
      spawn_batch (n, spawner_own, spawner_all);
      add (spawner_wall, (wall_ns () - t) / n / 1e3);
      shimwatch_spawn_stop_spawner ();
      t = wall_ns ();
      spawn_batch (n, pidfd_own, NULL);
      add (pidfd_wall, (wall_ns () - t) / n / 1e3);
#ifdef SHIMWATCH_TEST_HOOKS
      shimwatch_spawn_set_pidfd_open_errno_for_tests (ENOSYS);
      spawn_batch (n, thread_own, NULL);
      shimwatch_spawn_set_pidfd_open_errno_for_tests (0);
#endif
      for (guint i = 0; i < n_fds; i++)
        close (fds[i]);
    }
  row ("spawn", "spawner / posix_spawn+pidfd: the service's CPU per run (µs)",
       spawner_own, pidfd_own);
  row ("spawn", "spawner / posix_spawn+pidfd: with the spawner's CPU (µs)",
       spawner_all, pidfd_own);
  row ("spawn", "spawner / posix_spawn+pidfd: time per run (µs)", spawner_wall, pidfd_wall);
#ifdef SHIMWATCH_TEST_HOOKS
  row ("spawn", "posix_spawn+waiter thread / +pidfd: the service's CPU (µs)",
       thread_own, pidfd_own);
#endif
  close (null_fd);
  return 0;
}

/* -- the driver --------------------------------------------------------------------- */

static int
run_part (const char *part)
{
  if (strcmp (part, "types") == 0)
    return run_types ();
  if (strcmp (part, "commit") == 0)
    return run_commit ();
  if (strcmp (part, "spawn") == 0)
    return run_spawn ();
  g_printerr ("unknown part %s (types, commit, spawn)\n", part);
  return 2;
}

int
main (int   argc,
      char *argv[])
{
  const char *all[] = { "types", "commit", "spawn", NULL };
  g_autoptr(GPtrArray) parts = g_ptr_array_new ();
  char rounds_text[16];
  int failed = 0;

  for (int i = 1; i < argc; i++)
    {
      if (strcmp (argv[i], "--rounds") == 0 && i + 1 < argc)
        {
          int value = atoi (argv[++i]);

          rounds = (guint) MAX (1, value);
        }
      else if (strcmp (argv[i], "--part") == 0 && i + 1 < argc)
        return run_part (argv[++i]);
      else
        g_ptr_array_add (parts, argv[i]);
    }
  if (parts->len == 0)
    for (guint i = 0; all[i] != NULL; i++)
      g_ptr_array_add (parts, (gpointer) all[i]);

  printf ("%-8s | %-62s | %10s | %10s | %6s\n", "part", "figure (medians of the rounds)",
          "with", "without", "ratio");
  fflush (stdout);
  g_snprintf (rounds_text, sizeof rounds_text, "%u", rounds);
  for (guint i = 0; i < parts->len; i++)
    {
      const char *child_argv[] = {
        "/proc/self/exe", "--rounds", rounds_text, "--part", parts->pdata[i], NULL,
      };
      int status = 0;
      g_autoptr(GError) error = NULL;

      if (!g_spawn_sync (NULL, (char **) child_argv, NULL, G_SPAWN_CHILD_INHERITS_STDIN,
                         NULL, NULL, NULL, NULL, &status, &error) ||
          !g_spawn_check_wait_status (status, &error))
        {
          g_printerr ("%s: %s\n", (const char *) parts->pdata[i], error->message);
          failed = 1;
        }
    }
  return failed;
}
