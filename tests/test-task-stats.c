/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskCgroup over fake cgroup trees: v2, v1 and the hybrid layout, the cgroup
 * found from /proc/<pid>/cgroup text or from a path, "no limit", OOM kills, and a cgroup
 * that is gone.
 */
#include "config.h"

#include <unistd.h>
#include <gio/gio.h>
#include <glib/gstdio.h>

#include "shimwatch-task-stats.h"

typedef struct {
  char *root;
} Fixture;

static void
put (Fixture    *fixture,
     const char *relative,
     const char *contents)
{
  g_autofree char *path = g_build_filename (fixture->root, relative, NULL);
  g_autofree char *dir = g_path_get_dirname (path);

  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  g_assert_true (g_file_set_contents (path, contents, -1, NULL));
}

static void
fixture_set_up (Fixture       *fixture,
                gconstpointer  data)
{
  fixture->root = g_dir_make_tmp ("shimwatch-cgroup-XXXXXX", NULL);
  g_assert_nonnull (fixture->root);
}

static void
remove_tree (const char *path)
{
  g_autoptr(GFile) file = g_file_new_for_path (path);
  g_autoptr(GFileEnumerator) children = NULL;
  GFileInfo *info;

  children = g_file_enumerate_children (file, G_FILE_ATTRIBUTE_STANDARD_NAME,
                                        G_FILE_QUERY_INFO_NOFOLLOW_SYMLINKS, NULL, NULL);
  while (children != NULL &&
         (info = g_file_enumerator_next_file (children, NULL, NULL)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, g_file_info_get_name (info), NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
        remove_tree (child);
      else
        g_unlink (child);
      g_object_unref (info);
    }
  g_rmdir (path);
}

static void
fixture_tear_down (Fixture       *fixture,
                   gconstpointer  data)
{
  remove_tree (fixture->root);
  g_assert_false (g_file_test (fixture->root, G_FILE_TEST_EXISTS));
  g_free (fixture->root);
}

static void
test_v2 (Fixture       *fixture,
         gconstpointer  data)
{
  g_autoptr(ShimwatchTaskCgroup) cgroup = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchTaskStats stats;

  put (fixture, "cgroup.controllers", "cpu memory pids\n");
  put (fixture, "shimwatch/default/web/memory.current", "1048576\n");
  put (fixture, "shimwatch/default/web/memory.max", "max\n");
  put (fixture, "shimwatch/default/web/cpu.stat",
       "usage_usec 250000\nuser_usec 200000\nsystem_usec 50000\n");
  put (fixture, "shimwatch/default/web/pids.current", "3\n");
  put (fixture, "shimwatch/default/web/memory.events",
       "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n");

  cgroup = shimwatch_task_cgroup_new_from_proc (fixture->root, "0::/shimwatch/default/web\n",
                                                &error);
  g_assert_no_error (error);
  g_assert_cmpstr (shimwatch_task_cgroup_get_path (cgroup), ==, "/shimwatch/default/web");
  g_assert_true (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (stats.memory_current, ==, 1048576);
  g_assert_cmpuint (stats.memory_max, ==, 0);
  g_assert_cmpuint (stats.cpu_usage_usec, ==, 250000);
  g_assert_cmpuint (stats.pids_current, ==, 3);
  g_assert_cmpuint (shimwatch_task_cgroup_oom_kills (cgroup), ==, 1);

  /* the same from the path alone, and a limit */
  put (fixture, "shimwatch/default/web/memory.max", "16777216\n");
  g_clear_pointer (&cgroup, shimwatch_task_cgroup_free);
  cgroup = shimwatch_task_cgroup_new_for_path (fixture->root, "/shimwatch/default/web");
  g_assert_true (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_cmpuint (stats.memory_max, ==, 16777216);
}

/* GetStats' reply: the D-Bus API's keys with their types, and nothing else */
static void
test_to_variant (void)
{
  const ShimwatchTaskStats stats = {
    .memory_current = 1048576,
    .memory_max = G_GUINT64_CONSTANT (1) << 40,
    .cpu_usage_usec = 250000,
    .pids_current = 3,
  };
  g_autoptr(GVariant) reply = g_variant_ref_sink (shimwatch_task_stats_to_variant (&stats));
  g_autofree char *text = g_variant_print (reply, TRUE);

  g_assert_cmpstr (text, ==, "{'memory_current': <uint64 1048576>, "
                             "'memory_max': <uint64 1099511627776>, "
                             "'cpu_usage_usec': <uint64 250000>, 'pids_current': <uint32 3>}");
}

static void
test_v1_hybrid (Fixture       *fixture,
                gconstpointer  data)
{
  g_autoptr(ShimwatchTaskCgroup) cgroup = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *link = g_build_filename (fixture->root, "cpuacct", NULL);
  ShimwatchTaskStats stats;
  const char *proc =
    "12:pids:/default/web\n"
    "6:freezer:/default/web\n"
    "4:memory:/default/web\n"
    "3:cpu,cpuacct:/default/web\n"
    "1:name=systemd:/\n"
    "0::/\n";

  put (fixture, "unified/cgroup.controllers", "");
  put (fixture, "memory/default/web/memory.usage_in_bytes", "2097152\n");
  put (fixture, "memory/default/web/memory.limit_in_bytes", "9223372036854771712\n");
  put (fixture, "memory/default/web/memory.oom_control",
       "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  put (fixture, "cpu,cpuacct/default/web/cpuacct.usage", "1500000000\n");
  g_assert_cmpint (symlink ("cpu,cpuacct", link), ==, 0);
  put (fixture, "pids/default/web/pids.current", "2\n");

  cgroup = shimwatch_task_cgroup_new_from_proc (fixture->root, proc, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (shimwatch_task_cgroup_get_path (cgroup), ==, "/default/web");
  g_assert_true (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_cmpuint (stats.memory_current, ==, 2097152);
  g_assert_cmpuint (stats.memory_max, ==, 0);       /* PAGE_COUNTER_MAX: no limit */
  g_assert_cmpuint (stats.cpu_usage_usec, ==, 1500000);
  g_assert_cmpuint (stats.pids_current, ==, 2);
  g_assert_cmpuint (shimwatch_task_cgroup_oom_kills (cgroup), ==, 0);

  put (fixture, "memory/default/web/memory.oom_control",
       "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  put (fixture, "memory/default/web/memory.limit_in_bytes", "16777216\n");
  g_assert_cmpuint (shimwatch_task_cgroup_oom_kills (cgroup), ==, 2);

  /* from the path alone: cpuacct through its link */
  g_clear_pointer (&cgroup, shimwatch_task_cgroup_free);
  cgroup = shimwatch_task_cgroup_new_for_path (fixture->root, "/default/web");
  g_assert_true (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_cmpuint (stats.memory_max, ==, 16777216);
  g_assert_cmpuint (stats.cpu_usage_usec, ==, 1500000);
  g_assert_cmpuint (shimwatch_task_cgroup_oom_kills (cgroup), ==, 2);
}

static void
test_gone_and_garbage (Fixture       *fixture,
                       gconstpointer  data)
{
  g_autoptr(ShimwatchTaskCgroup) cgroup = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchTaskStats stats;

  put (fixture, "memory/other/memory.usage_in_bytes", "not a number\n");
  /* no memory line at all */
  cgroup = shimwatch_task_cgroup_new_from_proc (fixture->root, "garbage\n3:cpu:/x\n::\n", &error);
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_null (cgroup);
  g_clear_error (&error);

  /* a cgroup removed since */
  cgroup = shimwatch_task_cgroup_new_for_path (fixture->root, "/gone");
  g_assert_false (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
  g_assert_cmpuint (shimwatch_task_cgroup_oom_kills (cgroup), ==, 0);
  g_clear_error (&error);
  g_clear_pointer (&cgroup, shimwatch_task_cgroup_free);

  /* unreadable values are 0, not an error */
  cgroup = shimwatch_task_cgroup_new_for_path (fixture->root, "/other");
  g_assert_true (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_cmpuint (stats.memory_current, ==, 0);
  g_assert_cmpuint (stats.pids_current, ==, 0);
}

static void
test_this_process (void)
{
  g_autoptr(ShimwatchTaskCgroup) cgroup = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchTaskStats stats;

  /* the real cgroup file system, where there is one: this test's own cgroup */
  cgroup = shimwatch_task_cgroup_new_for_pid ((guint32) getpid (), &error);
  g_assert_no_error (error);
  g_assert_true (shimwatch_task_cgroup_read_stats (cgroup, &stats, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (stats.memory_current, >, 0);

  g_assert_null (shimwatch_task_cgroup_new_for_pid (0, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/task-stats/v2", Fixture, NULL, fixture_set_up, test_v2, fixture_tear_down);
  g_test_add ("/task-stats/v1-hybrid", Fixture, NULL, fixture_set_up, test_v1_hybrid,
              fixture_tear_down);
  g_test_add ("/task-stats/gone-and-garbage", Fixture, NULL, fixture_set_up,
              test_gone_and_garbage, fixture_tear_down);
  g_test_add_func ("/task-stats/this-process", test_this_process);
  g_test_add_func ("/task-stats/to-variant", test_to_variant);
  return g_test_run ();
}
