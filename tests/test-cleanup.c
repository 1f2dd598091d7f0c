/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchCleanup without shims: a cleanup after a completed Delete (no `shim delete`)
 * removes the task directory and the task's cgroup, and the threads that do it are the
 * cleanup's own, started with it and kept: a burst of deaths starts no thread.
 */
#include "config.h"

#include <glib/gstdio.h>

#include "shimwatch-cleanup.h"

#define CONCURRENCY 3
#define BURST       12

typedef struct {
  char                *root;
  char                *cgroup_mount;
  ShimwatchLauncher   *launcher;
  ShimwatchCgroupHost *host;
  ShimwatchCleanup    *cleanup;
  guint                pending;
} Fixture;

static void
fixture_set_up (Fixture       *fixture,
                gconstpointer  data)
{
  g_autofree char *runc_root = NULL;
  const char *runtime_dirs[] = { NULL, NULL };
  const char *mounts[] = { NULL, NULL };
  ShimwatchLauncherConfig config = { 0 };

  fixture->root = g_dir_make_tmp ("swcleanup-XXXXXX", NULL);
  g_assert_nonnull (fixture->root);
  runc_root = g_build_filename (fixture->root, "runc", NULL);
  runtime_dirs[0] = fixture->root;
  config.runtime_dirs = runtime_dirs;
  config.shim_address = "unix:///nonexistent/shimwatch-test.sock";
  config.ttrpc_address = "/nonexistent/shimwatch-test-events.sock";
  config.runc_root = runc_root;
  fixture->launcher = shimwatch_launcher_new (&config);

  /* a cgroup v1 hierarchy of our own: directories only, as rmdir on cgroupfs sees it */
  fixture->cgroup_mount = g_build_filename (fixture->root, "cgroup", NULL);
  g_assert_no_errno (g_mkdir (fixture->cgroup_mount, 0755));
  mounts[0] = fixture->cgroup_mount;
  fixture->host = shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_LEGACY, mounts, NULL, NULL,
                                             SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  fixture->cleanup = shimwatch_cleanup_new (fixture->launcher, fixture->host, CONCURRENCY);
}

static void
fixture_tear_down (Fixture       *fixture,
                   gconstpointer  data)
{
  g_autofree char *cmd = g_strdup_printf ("rm -rf '%s'", fixture->root);

  g_clear_object (&fixture->cleanup);
  g_clear_object (&fixture->launcher);
  g_clear_pointer (&fixture->host, shimwatch_cgroup_host_unref);
  g_assert_cmpint (system (cmd), ==, 0);
  g_free (fixture->cgroup_mount);
  g_free (fixture->root);
}

/* the ids of this process's threads */
static GHashTable *
thread_ids (void)
{
  GHashTable *ids = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GDir) dir = g_dir_open ("/proc/self/task", 0, NULL);
  const char *name;

  g_assert_nonnull (dir);
  while ((name = g_dir_read_name (dir)) != NULL)
    g_hash_table_add (ids, g_strdup (name));
  return ids;
}

static void
assert_same_threads (GHashTable *expected,
                     GHashTable *now)
{
  GHashTableIter iter;
  const char *id;

  g_hash_table_iter_init (&iter, now);
  while (g_hash_table_iter_next (&iter, (gpointer *) &id, NULL))
    if (!g_hash_table_contains (expected, id))
      {
        g_autofree char *comm_path = g_strdup_printf ("/proc/self/task/%s/comm", id);
        g_autofree char *comm = NULL;

        g_file_get_contents (comm_path, &comm, NULL, NULL);
        g_error ("thread %s (%s) was started after the cleanup was made", id, g_strchomp (comm));
      }
  g_assert_cmpuint (g_hash_table_size (now), ==, g_hash_table_size (expected));
}

static void
done_cb (GObject      *source,
         GAsyncResult *result,
         gpointer      user_data)
{
  Fixture *fixture = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome =
    shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);

  g_assert_nonnull (outcome);
  g_assert_true (outcome->delete_ok);
  g_assert_true (outcome->removed);
  fixture->pending--;
}

typedef enum {
  NO_CGROUP,
  CGROUP,        /* with a child cgroup */
  CGROUP_GONE,   /* known, but no longer in any hierarchy */
} CgroupCase;

/* a task whose Delete completed: its directory with some content, and its cgroup */
static ShimwatchCleanupRequest *
prepare (Fixture    *fixture,
         const char *id,
         CgroupCase  cgroup)
{
  ShimwatchCleanupRequest *request = shimwatch_cleanup_request_new ();
  g_autofree char *rootfs = NULL;
  g_autofree char *config = NULL;

  request->namespace_ = g_strdup ("default");
  request->id = g_strdup (id);
  request->task_dir = g_build_filename (fixture->root, "tasks", "default", id, NULL);
  request->runc_state_dir = g_build_filename (fixture->root, "runc", "default", id, NULL);
  request->deleted = TRUE;
  rootfs = g_build_filename (request->task_dir, "rootfs", "etc", NULL);
  config = g_build_filename (request->task_dir, "config.json", NULL);
  g_assert_no_errno (g_mkdir_with_parents (rootfs, 0700));
  g_assert_true (g_file_set_contents (config, "{}", -1, NULL));
  if (cgroup != NO_CGROUP)
    request->cgroup_path = g_strdup_printf ("/shimwatch/default/%s", id);
  if (cgroup == CGROUP)
    {
      g_autofree char *child = g_build_filename (fixture->cgroup_mount, request->cgroup_path,
                                                 "inner", NULL);

      g_assert_no_errno (g_mkdir_with_parents (child, 0755));
    }
  return request;
}

/* all at once, once all are prepared (the namespace directory goes with its last task);
 * returns their task directories */
static GPtrArray *
start_all (Fixture   *fixture,
           GPtrArray *requests)
{
  GPtrArray *dirs = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; i < requests->len; i++)
    {
      ShimwatchCleanupRequest *request = g_ptr_array_index (requests, i);

      g_ptr_array_add (dirs, g_strdup (request->task_dir));
      fixture->pending++;
      shimwatch_cleanup_run_async (fixture->cleanup, request, NULL, NULL, done_cb, fixture);
    }
  return dirs;
}

static void
wait_done (Fixture *fixture)
{
  while (fixture->pending > 0)
    g_main_context_iteration (NULL, TRUE);
}

/* the cleanup's threads start with it and stay: deaths in bursts, with idle time between
 * them (GLib's shared pool lets an idle thread go after half a second), never start one */
static void
test_threads_kept (Fixture       *fixture,
                   gconstpointer  data)
{
  g_autoptr(GHashTable) before = NULL;

  /* GLib's worker thread ("gmain") starts with the first GTask: a service has it anyway */
  g_type_class_unref (g_type_class_ref (G_TYPE_TASK));
  before = thread_ids ();
  for (guint round = 0; round < 3; round++)
    {
      g_autoptr(GPtrArray) requests = g_ptr_array_new ();
      g_autoptr(GPtrArray) dirs = NULL;
      g_autoptr(GHashTable) after = NULL;

      for (guint i = 0; i < BURST; i++)
        {
          g_autofree char *id = g_strdup_printf ("t%u-%u", round, i);

          g_ptr_array_add (requests, prepare (fixture, id, NO_CGROUP));
        }
      dirs = start_all (fixture, requests);
      wait_done (fixture);
      for (guint i = 0; i < dirs->len; i++)
        g_assert_false (g_file_test (g_ptr_array_index (dirs, i), G_FILE_TEST_EXISTS));
      after = thread_ids ();
      assert_same_threads (before, after);
      g_usleep (G_USEC_PER_SEC);
    }
  g_assert_cmpuint (shimwatch_cleanup_get_n_running (fixture->cleanup), ==, 0);
}

/* the task's cgroup goes with it, child cgroups first; one that is gone already (runc's
 * delete removed it) is no error */
static void
test_cgroup_removed (Fixture       *fixture,
                     gconstpointer  data)
{
  g_autofree char *parent = g_build_filename (fixture->cgroup_mount, "shimwatch", "default",
                                              NULL);
  g_autofree char *cgroup = g_build_filename (parent, "with", NULL);
  g_autofree char *gone = g_build_filename (parent, "without", NULL);
  g_autoptr(GPtrArray) requests = g_ptr_array_new ();
  g_autoptr(GPtrArray) dirs = NULL;

  g_ptr_array_add (requests, prepare (fixture, "with", CGROUP));
  g_ptr_array_add (requests, prepare (fixture, "without", CGROUP_GONE));
  g_assert_true (g_file_test (cgroup, G_FILE_TEST_IS_DIR));
  dirs = start_all (fixture, requests);
  wait_done (fixture);
  g_assert_false (g_file_test (cgroup, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (gone, G_FILE_TEST_EXISTS));
  for (guint i = 0; i < dirs->len; i++)
    g_assert_false (g_file_test (g_ptr_array_index (dirs, i), G_FILE_TEST_EXISTS));
  /* the parent is the manager's to remove, when no CreateTask needs it */
  g_assert_true (g_file_test (parent, G_FILE_TEST_IS_DIR));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/cleanup/threads-kept", Fixture, NULL, fixture_set_up, test_threads_kept,
              fixture_tear_down);
  g_test_add ("/cleanup/cgroup-removed", Fixture, NULL, fixture_set_up, test_cgroup_removed,
              fixture_tear_down);
  return g_test_run ();
}
