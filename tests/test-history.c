/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchHistory: events and counters survive a new instance on the same directory,
 * stay bounded in memory and on disk, and broken lines cost only themselves.
 */
#include "config.h"

#include <fcntl.h>
#include <glib/gstdio.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "shimwatch-history.h"
#include "shimwatch-test-malloc.h"
#include "shimwatch-test-seccomp.h"

typedef struct {
  char *dir;
} Fixture;

static void
fixture_set_up (Fixture       *fixture,
                gconstpointer  data)
{
  fixture->dir = g_dir_make_tmp ("shimwatch-history-XXXXXX", NULL);
  g_assert_nonnull (fixture->dir);
}

static void
fixture_tear_down (Fixture       *fixture,
                   gconstpointer  data)
{
  const char *names[] = { "history", "history.1", "counters" };

  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      g_autofree char *path = g_build_filename (fixture->dir, names[i], NULL);

      g_unlink (path);
    }
  g_assert_cmpint (g_rmdir (fixture->dir), ==, 0);
  g_free (fixture->dir);
}

static void
add (ShimwatchHistory *history,
     const char       *event,
     const char       *namespace_,
     const char       *id,
     guint32           pid)
{
  gboolean is_exit = g_str_equal (event, "exit");

  shimwatch_history_add_task_event (history, namespace_, id, event, pid, is_exit, 137,
                                    is_exit ? "signaled" : NULL);
}

static char *
events_of (GVariant *entries)
{
  GString *out = g_string_new (NULL);

  for (gsize i = 0; i < g_variant_n_children (entries); i++)
    {
      g_autoptr(GVariant) entry = g_variant_get_child_value (entries, i);
      const char *event;
      const char *id;

      g_assert_true (g_variant_lookup (entry, "event", "&s", &event));
      g_assert_true (g_variant_lookup (entry, "id", "&s", &id));
      g_string_append_printf (out, "%s%s:%s", i > 0 ? " " : "", id, event);
    }
  return g_string_free (out, FALSE);
}

static void
test_query (Fixture       *fixture,
            gconstpointer  data)
{
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (NULL, 100, 1024);
  g_autoptr(GVariant) all = NULL;
  g_autoptr(GVariant) web = NULL;
  g_autoptr(GVariant) last = NULL;
  g_autoptr(GVariant) other = NULL;
  g_autoptr(GVariant) exit_entry = NULL;
  g_autofree char *text = NULL;
  guint32 status;
  guint64 time;
  const char *reason;

  add (history, "create", "default", "web", 10);
  add (history, "create", "other", "web", 11);
  add (history, "start", "default", "db", 12);
  add (history, "exit", "default", "web", 10);

  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  text = events_of (all);
  g_assert_cmpstr (text, ==, "web:create web:create db:start web:exit");
  g_clear_pointer (&text, g_free);

  web = g_variant_ref_sink (shimwatch_history_query (history, "default", "web", 0));
  text = events_of (web);
  g_assert_cmpstr (text, ==, "web:create web:exit");
  g_clear_pointer (&text, g_free);

  /* the newest, newest last */
  last = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 2));
  text = events_of (last);
  g_assert_cmpstr (text, ==, "db:start web:exit");
  g_clear_pointer (&text, g_free);

  other = g_variant_ref_sink (shimwatch_history_query (history, "other", NULL, 0));
  g_assert_cmpuint (g_variant_n_children (other), ==, 1);

  exit_entry = g_variant_get_child_value (web, 1);
  g_assert_true (g_variant_lookup (exit_entry, "exit_status", "u", &status));
  g_assert_cmpuint (status, ==, 137);
  g_assert_true (g_variant_lookup (exit_entry, "reason", "&s", &reason));
  g_assert_cmpstr (reason, ==, "signaled");
  g_assert_true (g_variant_lookup (exit_entry, "time", "t", &time));
  g_assert_cmpuint (time, >, 0);
  {
    g_autoptr(GVariant) create_entry = g_variant_get_child_value (web, 0);

    g_assert_false (g_variant_lookup (create_entry, "exit_status", "u", &status));
  }
}

static void
test_capacity (Fixture       *fixture,
               gconstpointer  data)
{
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (NULL, 3, 1024);
  g_autoptr(GVariant) all = NULL;
  g_autofree char *text = NULL;

  for (guint i = 0; i < 10; i++)
    {
      g_autofree char *id = g_strdup_printf ("t%u", i);

      add (history, "create", "default", id, i);
    }
  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  text = events_of (all);
  g_assert_cmpstr (text, ==, "t7:create t8:create t9:create");
}

static void
test_survives (Fixture       *fixture,
               gconstpointer  data)
{
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  g_autoptr(GVariant) before = NULL;
  g_autoptr(GVariant) after = NULL;
  ShimwatchCounters counters = { .disconnects = 3, .reaps = 2, .cleanup_failures = 1 };
  ShimwatchCounters loaded = { 0 };

  add (history, "create", "default", "web", 10);
  add (history, "exit", "default", "web", 10);
  /* a reason that is not UTF-8 is kept, made valid */
  {
    ShimwatchHistoryEvent odd = { .event = "disconnected", .namespace_ = "default",
                                  .id = "web", .reason = "bad \xff byte\nnext line" };

    shimwatch_history_add (history, &odd);
  }
  shimwatch_history_set_counters (history, &counters);
  before = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  g_clear_object (&history);     /* writes what is queued */

  history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  after = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  g_assert_true (g_variant_equal (before, after));
  shimwatch_history_get_counters (history, &loaded);
  g_assert_cmpuint (loaded.disconnects, ==, 3);
  g_assert_cmpuint (loaded.reaps, ==, 2);
  g_assert_cmpuint (loaded.cleanup_failures, ==, 1);
}

/* the file holds one line per event, each what g_variant_print (entry, TRUE) gives for
 * the entry GetHistory returns: the on-disk format of every version so far */
static void
test_file_format (Fixture       *fixture,
                  gconstpointer  data)
{
  g_autofree char *path = g_build_filename (fixture->dir, "history", NULL);
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  g_autoptr(GVariant) all = NULL;
  g_autofree char *contents = NULL;
  g_auto(GStrv) lines = NULL;
  static const ShimwatchHistoryEvent events[] = {
    { .event = "create", .namespace_ = "default", .id = "web" },
    { .event = "start", .namespace_ = "k8s.io", .id = "a_b-c.d", .pid = 4294967295u },
    { .event = "exit", .namespace_ = "default", .id = "web", .pid = 10, .has_exit_status = TRUE,
      .exit_status = 137, .reason = "shim-died" },
    { .event = "exit", .namespace_ = "default", .id = "web", .has_exit_status = TRUE,
      .exit_status = 0, .reason = "" },
    { .event = "reap", .namespace_ = "default", .id = "web", .time = 1,
      .has_exit_status = TRUE, .reason = "the shim's delete command failed or timed out" },
    { .event = "reap", .namespace_ = "default", .id = "web", .time = G_MAXINT64,
      .reason = "say \"no\"" },
    { .event = "reap", .namespace_ = "default", .id = "web", .reason = "both ' and \"" },
    { .event = "reap", .namespace_ = "default", .id = "web", .reason = "back\\slash" },
    { .event = "reap", .namespace_ = "default", .id = "web", .reason = "tab\tand\nnewline" },
    { .event = "reap", .namespace_ = "default", .id = "web", .reason = "caf\xc3\xa9 \x7f" },
    { .event = "reap", .namespace_ = "default", .id = "web", .reason = "not \xff UTF-8" },
    { .event = "reap", .namespace_ = "default", .id = "web", .reason = "~ !#$%&()*+,-./:;<=>?@[]^_`{|}" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (events); i++)
    shimwatch_history_add (history, &events[i]);
  shimwatch_history_sync (history);
  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  g_assert_cmpuint (g_variant_n_children (all), ==, G_N_ELEMENTS (events));
  g_assert_true (g_file_get_contents (path, &contents, NULL, NULL));
  lines = g_strsplit (contents, "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, G_N_ELEMENTS (events) + 1);
  for (guint i = 0; i < G_N_ELEMENTS (events); i++)
    {
      g_autoptr(GVariant) entry = g_variant_get_child_value (all, i);
      g_autofree char *printed = g_variant_print (entry, TRUE);

      g_assert_cmpstr (lines[i], ==, printed);
    }
  g_assert_cmpstr (lines[G_N_ELEMENTS (events)], ==, "");
  /* and what a later version gets back from the file */
  g_clear_object (&history);
  history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  {
    g_autoptr(GVariant) loaded = g_variant_ref_sink (shimwatch_history_query (history, NULL,
                                                                             NULL, 0));

    g_assert_true (g_variant_equal (loaded, all));
  }
}

static void
test_broken_lines (Fixture       *fixture,
                   gconstpointer  data)
{
  g_autofree char *path = g_build_filename (fixture->dir, "history", NULL);
  g_autofree char *counters = g_build_filename (fixture->dir, "counters", NULL);
  g_autoptr(ShimwatchHistory) history = NULL;
  g_autoptr(GVariant) all = NULL;
  g_autofree char *text = NULL;
  g_autofree char *deep = NULL;
  g_autoptr(GString) contents = g_string_new (NULL);
  ShimwatchCounters loaded = { 0 };

  deep = g_strnfill (100000, '[');
  g_string_append (contents, "{'time': <uint64 5>, 'event': <'create'>, 'namespace': <'default'>, "
                             "'id': <'good'>, 'pid': <uint32 1>}\n");
  g_string_append (contents, "not a variant\n");
  g_string_append (contents, "{'time': <'a string'>, 'event': <'create'>, 'namespace': <'n'>, "
                             "'id': <'wrongtype'>}\n");
  g_string_append (contents, "{'event': <'create'>, 'namespace': <'n'>, 'id': <'notime'>}\n");
  g_string_append_printf (contents, "%s\n", deep);
  g_string_append (contents, "{'time': <uint64 6>, 'event': <'start'>, 'namespace': <'default'>, "
                             "'id': <'good'>, 'extra': <42>}\n");
  g_string_append (contents, "{'time': <uint64 7>, 'event': <'ex");     /* cut short */
  g_assert_true (g_file_set_contents (path, contents->str, (gssize) contents->len, NULL));
  g_assert_true (g_file_set_contents (counters, "[Counters]\nReapCount=seven\nDisconnectCount=4\n",
                                      -1, NULL));

  g_test_expect_message ("ShimwatchHistory", G_LOG_LEVEL_WARNING, "*ReapCount starts at 0*");
  g_test_expect_message ("ShimwatchHistory", G_LOG_LEVEL_WARNING, "*CleanupFailureCount*");
  g_test_expect_message ("ShimwatchHistory", G_LOG_LEVEL_WARNING, "*skipped 5 unreadable*");
  history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  g_test_assert_expected_messages ();
  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  text = events_of (all);
  g_assert_cmpstr (text, ==, "good:create good:start");
  shimwatch_history_get_counters (history, &loaded);
  g_assert_cmpuint (loaded.disconnects, ==, 4);
  g_assert_cmpuint (loaded.reaps, ==, 0);
}

static void
test_rotation (Fixture       *fixture,
               gconstpointer  data)
{
  g_autofree char *path = g_build_filename (fixture->dir, "history", NULL);
  g_autofree char *rotated = g_build_filename (fixture->dir, "history.1", NULL);
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (fixture->dir, 50, 8192);
  g_autoptr(GVariant) all = NULL;
  GStatBuf st;
  gsize total = 0;

  for (guint round = 0; round < 20; round++)
    {
      for (guint i = 0; i < 10; i++)
        {
          g_autofree char *id = g_strdup_printf ("task%u-%u", round, i);

          add (history, "create", "default", id, i);
        }
      shimwatch_history_sync (history);
      /* never more than twice the limit and one batch */
      total = 0;
      if (g_stat (path, &st) == 0)
        total += (gsize) st.st_size;
      if (g_stat (rotated, &st) == 0)
        total += (gsize) st.st_size;
      g_assert_cmpuint (total, <, 2 * 8192 + 2048);
    }
  g_assert_true (g_file_test (rotated, G_FILE_TEST_EXISTS));
  g_clear_object (&history);

  /* what the files still hold fills the memory again, newest last */
  history = shimwatch_history_new (fixture->dir, 50, 8192);
  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  g_assert_cmpuint (g_variant_n_children (all), ==, 50);
  {
    g_autoptr(GVariant) newest = g_variant_get_child_value (all, 49);
    const char *id;

    g_assert_true (g_variant_lookup (newest, "id", "&s", &id));
    g_assert_cmpstr (id, ==, "task19-9");
  }
}

static ShimwatchCounters
counters_of_run (guint64 n)
{
  return (ShimwatchCounters) { .disconnects = n, .reaps = n + 1, .cleanup_failures = n / 2 };
}

static void
assert_counters (ShimwatchHistory        *history,
                 const ShimwatchCounters *expected)
{
  ShimwatchCounters loaded = { 0 };

  shimwatch_history_get_counters (history, &loaded);
  g_assert_cmpuint (loaded.disconnects, ==, expected->disconnects);
  g_assert_cmpuint (loaded.reaps, ==, expected->reaps);
  g_assert_cmpuint (loaded.cleanup_failures, ==, expected->cleanup_failures);
}

#if defined(__x86_64__)
static volatile gint n_syncs;
static volatile gint n_renames;

/* SIGSYS of the seccomp filter: fsync(2) and fdatasync(2) counted and done as
 * sync_file_range(2), rename(2) and renameat(2) counted and done as renameat2(2) */
static void
count_sync (int        sig,
            siginfo_t *info,
            void      *context)
{
  ucontext_t *uc = context;
  greg_t *regs = uc->uc_mcontext.gregs;
  int saved_errno = errno;
  long result;

  if (info->si_syscall == __NR_fsync || info->si_syscall == __NR_fdatasync)
    {
      g_atomic_int_inc (&n_syncs);
      result = syscall (__NR_sync_file_range, (int) regs[REG_RDI], (off_t) 0, (off_t) 0,
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                        SYNC_FILE_RANGE_WAIT_AFTER);
    }
  else if (info->si_syscall == __NR_rename)
    {
      g_atomic_int_inc (&n_renames);
      result = syscall (__NR_renameat2, AT_FDCWD, (const char *) regs[REG_RDI], AT_FDCWD,
                        (const char *) regs[REG_RSI], 0);
    }
  else
    {
      g_atomic_int_inc (&n_renames);
      result = syscall (__NR_renameat2, (int) regs[REG_RDI], (const char *) regs[REG_RSI],
                        (int) regs[REG_RDX], (const char *) regs[REG_R10], 0);
    }
  regs[REG_RAX] = result < 0 ? -errno : result;
  errno = saved_errno;
}
#endif

/* The counters were a key file of their own, replaced atomically and durably by each
 * batch that changed them (two at each death): two fsyncs, a rename and four more calls
 * per batch beside the events' one fdatasync, more than the events' write itself in a
 * mass death. They are a line of the history file now: a batch of a death's events and
 * its counters is one write and one fdatasync, and nothing is renamed. */
static void
test_counters_one_sync_per_batch (Fixture      *fixture,
                                  gconstpointer data)
{
#if defined(__x86_64__)
  const long calls[] = { __NR_fsync, __NR_fdatasync, __NR_rename, __NR_renameat };
  g_autoptr(ShimwatchHistory) history = NULL;
  g_autoptr(GVariant) all = NULL;
  ShimwatchCounters counters = { 0 };

  /* before the history's writer thread starts: it inherits the filter */
  if (!shimwatch_test_trap_under_filter (calls, G_N_ELEMENTS (calls), count_sync))
    return;
  history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  for (guint round = 1; round <= 3; round++)
    {
      g_autofree char *id = g_strdup_printf ("dead%u", round);

      add (history, "disconnected", "default", id, round);
      add (history, "exit", "default", id, round);
      counters = counters_of_run (round);
      shimwatch_history_set_counters (history, &counters);
      add (history, "delete", "default", id, round);
      shimwatch_history_sync (history);
      g_assert_cmpint (g_atomic_int_get (&n_syncs), ==, round);
      g_assert_cmpint (g_atomic_int_get (&n_renames), ==, 0);
    }
  g_clear_object (&history);

  /* events and counters come back */
  history = shimwatch_history_new (fixture->dir, 100, 1 << 20);
  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  g_assert_cmpuint (g_variant_n_children (all), ==, 9);
  assert_counters (history, &counters);
#else
  g_test_skip ("the fsync(2) counter is written for x86_64");
#endif
}

/* The counters' line, written with the batches that change them, is written again into
 * "history" after a rotation and in the first batch of a run, so that the rotation after
 * next does not take the last of them away: counters changed once, then batches that
 * rotate the file several times over, in this run and the next, leave them as they were.
 * An earlier version's key file is still read. */
static void
test_counters_survive_rotations (Fixture      *fixture,
                                 gconstpointer data)
{
  g_autofree char *rotated = g_build_filename (fixture->dir, "history.1", NULL);
  g_autofree char *key_file = g_build_filename (fixture->dir, "counters", NULL);
  g_autoptr(ShimwatchHistory) history = NULL;
  ShimwatchCounters counters = counters_of_run (7);
  ShimwatchCounters older = { .disconnects = 9, .reaps = 1, .cleanup_failures = 0 };

  history = shimwatch_history_new (fixture->dir, 100, 512);
  shimwatch_history_set_counters (history, &counters);
  shimwatch_history_sync (history);
  for (guint run = 0; run < 3; run++)
    {
      for (guint round = 0; round < 4; round++)
        {
          /* each batch is more than the limit: each rotates the file */
          for (guint i = 0; i < 6; i++)
            {
              g_autofree char *id = g_strdup_printf ("task%u-%u-%u", run, round, i);

              add (history, "create", "default", id, i);
            }
          shimwatch_history_sync (history);
        }
      g_assert_true (g_file_test (rotated, G_FILE_TEST_EXISTS));
      g_clear_object (&history);
      history = shimwatch_history_new (fixture->dir, 100, 512);
      assert_counters (history, &counters);
    }
  g_clear_object (&history);

  /* a key file of an earlier version: each counter is the larger of it and the lines */
  g_assert_true (g_file_set_contents (key_file, "[Counters]\nDisconnectCount=9\nReapCount=1\n"
                                                "CleanupFailureCount=0\n", -1, NULL));
  history = shimwatch_history_new (fixture->dir, 100, 512);
  older.reaps = counters.reaps;
  older.cleanup_failures = counters.cleanup_failures;
  assert_counters (history, &older);
}

/* The metrics' counters and histogram (shimwatch-metrics.h) are more keys of the same
 * line: all of them survive a new instance, and a line of an earlier version (the three
 * counters only) reads as metrics at 0 */
static void
test_metric_counters_survive (Fixture      *fixture,
                              gconstpointer data)
{
  g_autofree char *path = g_build_filename (fixture->dir, "history", NULL);
  g_autoptr(ShimwatchHistory) history = NULL;
  ShimwatchCounters counters = { .disconnects = 3, .reaps = 2, .cleanup_failures = 1,
                                 .deaths = { 5, 4, 3, 2, 1 }, .cleanup_timeouts = 1,
                                 .unresponsive = 6, .takeovers = 7,
                                 .log_bytes_dropped = G_GUINT64_CONSTANT (1) << 40,
                                 .delay_count = 3, .delay_sum_us = 2500001 };
  ShimwatchCounters loaded = { 0 };
  ShimwatchCounters earlier = { .disconnects = 1, .reaps = 1 };
  g_autofree char *contents = NULL;

  counters.delay_buckets[0] = 1;
  counters.delay_buckets[SHIMWATCH_COUNTERS_DELAY_BUCKETS - 1] = 2;
  history = shimwatch_history_new (fixture->dir, 100, 1024 * 1024);
  shimwatch_history_set_counters (history, &counters);
  shimwatch_history_sync (history);
  g_clear_object (&history);
  history = shimwatch_history_new (fixture->dir, 100, 1024 * 1024);
  shimwatch_history_get_counters (history, &loaded);
  g_assert_cmpmem (&loaded, sizeof loaded, &counters, sizeof counters);
  g_clear_object (&history);
  /* a line per batch that changed them: short enough that the files still hold the
   * capacity's events (SHIMWATCH_HISTORY_FILE_MAX) */
  g_assert_true (g_file_get_contents (path, &contents, NULL, NULL));
  g_assert_cmpuint (strlen (contents), <, 300);

  /* a later version's longer array: what this one knows is read */
  g_assert_true (g_file_set_contents (path, "{'DisconnectCount': <uint64 1>, 'ReapCount': "
                                            "<uint64 1>, 'CleanupFailureCount': <uint64 0>, "
                                            "'Metrics': <[uint64 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, "
                                            "11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, "
                                            "24, 25, 26, 27, 28]>}\n", -1, NULL));
  history = shimwatch_history_new (fixture->dir, 100, 1024 * 1024);
  shimwatch_history_get_counters (history, &loaded);
  g_assert_cmpuint (loaded.deaths[0], ==, 1);
  g_assert_cmpuint (loaded.log_bytes_dropped, ==, 9);
  g_assert_cmpuint (loaded.delay_sum_us, ==, 23);
  g_clear_object (&history);

  g_assert_true (g_file_set_contents (path, "{'DisconnectCount': <uint64 1>, 'ReapCount': "
                                            "<uint64 1>, 'CleanupFailureCount': <uint64 0>}\n",
                                      -1, NULL));
  history = shimwatch_history_new (fixture->dir, 100, 1024 * 1024);
  shimwatch_history_get_counters (history, &loaded);
  g_assert_cmpmem (&loaded, sizeof loaded, &earlier, sizeof earlier);
}

static void
test_unwritable_dir (void)
{
  g_autoptr(ShimwatchHistory) history = NULL;
  g_autoptr(GVariant) all = NULL;

  /* nobody, root included, creates directories in /proc */
  g_test_expect_message ("ShimwatchHistory", G_LOG_LEVEL_WARNING, "*cannot create*");
  history = shimwatch_history_new ("/proc/shimwatch-history", 10, 1024);
  g_test_assert_expected_messages ();
  add (history, "create", "default", "web", 1);
  all = g_variant_ref_sink (shimwatch_history_query (history, NULL, NULL, 0));
  g_assert_cmpuint (g_variant_n_children (all), ==, 1);
}


#ifdef SHIMWATCH_TEST_MALLOC_COUNT
#define CAPACITY 8
#define N_EVENTS 40

static void
add_death_event (ShimwatchHistory *history,
                 guint             i)
{
  static const char * const ids[] = { "task-0", "task-1", "task-2", "task-3", "task-4",
                                      "task-5", "task-6", "task-7", "task-8", "task-9" };

  shimwatch_history_add_task_event (history, "default", ids[i % G_N_ELEMENTS (ids)],
                                    "disconnected", 4242, FALSE, 0, "connection closed");
}

/* An event cost the main thread five allocations (the entry, its event, namespace, id
 * and reason) and, once the memory is full, five frees of the one it pushes out: four
 * events per death. It costs one of each: allocations per event, the memory full,
 * are 1 now and 5 on the old code (the line for the file grows a buffer now and then:
 * averaged over many events, it adds nothing). */
static void
test_one_allocation_per_event (Fixture       *fixture,
                               gconstpointer  data)
{
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (fixture->dir, CAPACITY, 1 << 20);
  g_autoptr(GVariant) kept = NULL;
  guint before;
  guint per_event;

  for (guint i = 0; i < CAPACITY; i++)
    add_death_event (history, i);
  before = n_mallocs;
  malloc_counting = TRUE;
  for (guint i = 0; i < N_EVENTS; i++)
    add_death_event (history, CAPACITY + i);
  malloc_counting = FALSE;
  per_event = (n_mallocs - before) / N_EVENTS;
  /* valgrind replaces malloc() wherever it is, this one too: nothing counted there (the
   * unit suite counts; valgrind's run checks the memory) */
  if (n_mallocs == before)
    g_test_message ("malloc() is not this test's own here (valgrind): nothing counted");
  else
    {
      g_test_message ("allocations per history event: %u", per_event);
      g_assert_cmpuint (per_event, <=, 1);
    }
  /* what is kept is what was added */
  kept = shimwatch_history_query (history, NULL, NULL, 0);
  g_assert_cmpuint (g_variant_n_children (kept), ==, CAPACITY);
  {
    g_autoptr(GVariant) last = g_variant_get_child_value (kept, CAPACITY - 1);
    const char *id;
    const char *reason;

    g_assert_true (g_variant_lookup (last, "id", "&s", &id));
    g_assert_cmpstr (id, ==, "task-7");
    g_assert_true (g_variant_lookup (last, "reason", "&s", &reason));
    g_assert_cmpstr (reason, ==, "connection closed");
  }
  shimwatch_history_sync (history);
}
/* The counters were formatted for the file at each change, two per death, though the
 * writer takes them once per batch: they are formatted as they are handed over. 20
 * changes in a batch allocate nothing (20 formattings on the old code), and the file
 * says the last of them. */
static void
test_counters_formatted_once (Fixture       *fixture,
                              gconstpointer  data)
{
  g_autoptr(ShimwatchHistory) history = shimwatch_history_new (fixture->dir, CAPACITY, 1 << 20);
  g_autoptr(ShimwatchHistory) again = NULL;
  ShimwatchCounters counters = { 0 };
  guint before;

  /* the first change arms the batch's timer */
  shimwatch_history_set_counters (history, &counters);
  before = n_mallocs;
  malloc_counting = TRUE;
  for (guint i = 1; i <= 20; i++)
    {
      counters.disconnects = i;
      counters.reaps = i;
      counters.cleanup_failures = i / 2;
      shimwatch_history_set_counters (history, &counters);
    }
  malloc_counting = FALSE;
  g_test_message ("allocations for 20 changes of the counters: %u", n_mallocs - before);
  g_assert_cmpuint (n_mallocs - before, ==, 0);
  shimwatch_history_sync (history);
  g_clear_object (&history);

  again = shimwatch_history_new (fixture->dir, CAPACITY, 1 << 20);
  shimwatch_history_get_counters (again, &counters);
  g_assert_cmpuint (counters.disconnects, ==, 20);
  g_assert_cmpuint (counters.reaps, ==, 20);
  g_assert_cmpuint (counters.cleanup_failures, ==, 10);
}
#endif

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/history/query", Fixture, NULL, fixture_set_up, test_query, fixture_tear_down);
  g_test_add ("/history/capacity", Fixture, NULL, fixture_set_up, test_capacity,
              fixture_tear_down);
  g_test_add ("/history/survives", Fixture, NULL, fixture_set_up, test_survives,
              fixture_tear_down);
  g_test_add ("/history/file-format", Fixture, NULL, fixture_set_up, test_file_format,
              fixture_tear_down);
  g_test_add ("/history/broken-lines", Fixture, NULL, fixture_set_up, test_broken_lines,
              fixture_tear_down);
  g_test_add ("/history/rotation", Fixture, NULL, fixture_set_up, test_rotation,
              fixture_tear_down);
  g_test_add_func ("/history/unwritable-dir", test_unwritable_dir);
  g_test_add ("/history/counters-one-sync-per-batch", Fixture, NULL, fixture_set_up,
              test_counters_one_sync_per_batch, fixture_tear_down);
  g_test_add ("/history/counters-survive-rotations", Fixture, NULL, fixture_set_up,
              test_counters_survive_rotations, fixture_tear_down);
  g_test_add ("/history/metric-counters-survive", Fixture, NULL, fixture_set_up,
              test_metric_counters_survive, fixture_tear_down);
#ifdef SHIMWATCH_TEST_MALLOC_COUNT
  g_test_add ("/history/one-allocation-per-event", Fixture, NULL, fixture_set_up,
              test_one_allocation_per_event, fixture_tear_down);
  g_test_add ("/history/counters-formatted-once", Fixture, NULL, fixture_set_up,
              test_counters_formatted_once, fixture_tear_down);
#endif
  return g_test_run ();
}
