/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchCleanup without shims: a cleanup after a completed Delete (no `shim delete`)
 * removes the task directory and the task's cgroup, and the threads that do it are the
 * cleanup's own, started with it and kept: a burst of deaths starts no thread. A removal
 * whose cgroup will not empty goes to GLib's pool and holds up no other removal. The
 * takeover of containerd's cleanup, a request of its own kind, with a shell script for
 * `shim delete`: delete first, in the cleanup's slots, then the bundle as containerd
 * removes it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/ucontext.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <glib/gstdio.h>

#include "shimwatch-cleanup.h"
#include "shimwatch-test-dir.h"
#include "shimwatch-test-seccomp.h"
#include "shimwatch-test-util.h"

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

  /* a tmpfs where there is one: a removal on a disk's file system may sleep for its
   * journal, which /cleanup/one-wake-up-per-batch would count */
  if (g_file_test ("/dev/shm", G_FILE_TEST_IS_DIR))
    fixture->root = shimwatch_test_dir_new ("/dev/shm", "swcleanup-XXXXXX", NULL);
  else
    fixture->root = shimwatch_test_dir_new (NULL, "swcleanup-XXXXXX", NULL);
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
  g_clear_object (&fixture->cleanup);
  g_clear_object (&fixture->launcher);
  g_clear_pointer (&fixture->host, shimwatch_cgroup_host_unref);
  /* without a process of its own: a test under a seccomp filter's SIGSYS handler comes
   * here (rm(1) would die of the filter) */
  shimwatch_test_dir_remove (fixture->root);
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

/* the voluntary context switches of this process's threads but the main one: each is a
 * sleep that something had to wake */
static guint64
other_threads_sleeps (void)
{
  g_autoptr(GDir) dir = g_dir_open ("/proc/self/task", 0, NULL);
  g_autofree char *main_tid = g_strdup_printf ("%d", (int) getpid ());
  const char *name;
  guint64 total = 0;

  g_assert_nonnull (dir);
  while ((name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_strdup_printf ("/proc/self/task/%s/status", name);
      g_autofree char *status = NULL;
      const char *line;

      if (g_str_equal (name, main_tid) || !g_file_get_contents (path, &status, NULL, NULL))
        continue;
      line = strstr (status, "\nvoluntary_ctxt_switches:");
      g_assert_nonnull (line);
      total += g_ascii_strtoull (line + strlen ("\nvoluntary_ctxt_switches:"), NULL, 10);
    }
  return total;
}

static guint done_iteration;     /* the iteration the last done_cb ran in */
static guint n_done_iterations;  /* how many iterations ran one */

static void
batch_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  static guint last_seen = G_MAXUINT;

  if (last_seen != done_iteration)
    n_done_iterations++;
  last_seen = done_iteration;
  done_cb (source, result, user_data);
}

/* The removals of many deaths at once (a mass death; here after the shims' own Delete)
 * are one batch: the remover thread is woken once for them all, not once per removal
 * (a pool thread per job, each woken), and the main context hears of them all in one
 * wake-up, not a GTask return per removal. */
static void
test_one_wake_up_per_batch (Fixture       *fixture,
                            gconstpointer  data)
{
  g_autoptr(GPtrArray) requests = g_ptr_array_new ();
  g_autofree char *ns_dir = g_build_filename (fixture->root, "tasks", "default", NULL);
  guint64 sleeps;
  guint iterations = 0;

  /* the threads are all asleep: a first use of the context's poller is behind us */
  for (guint i = 0; i < 3; i++)
    g_main_context_iteration (NULL, FALSE);
  for (guint i = 0; i < BURST; i++)
    {
      g_autofree char *id = g_strdup_printf ("b%u", i);

      g_ptr_array_add (requests, prepare (fixture, id, NO_CGROUP));
    }
  sleeps = other_threads_sleeps ();
  for (guint i = 0; i < requests->len; i++)
    {
      fixture->pending++;
      shimwatch_cleanup_run_async (fixture->cleanup, g_ptr_array_index (requests, i), NULL,
                                   NULL, batch_done_cb, fixture);
    }
  while (fixture->pending > 0)
    {
      done_iteration = ++iterations;
      g_main_context_iteration (NULL, TRUE);
    }
  sleeps = other_threads_sleeps () - sleeps;
  g_test_message ("%u removals: %u main-loop iterations, %u of them with results, %"
                  G_GUINT64_FORMAT " sleeps of other threads", BURST, iterations,
                  n_done_iterations, sleeps);
  g_assert_cmpuint (n_done_iterations, ==, 1);
  /* the remover's one sleep after its batch, if it went back to sleep by now (one more:
   * slack for a page fault's I/O) */
  g_assert_cmpuint (sleeps, <=, 2);
  /* every task directory went, and their namespace's directory with the last of them */
  g_assert_false (g_file_test (ns_dir, G_FILE_TEST_EXISTS));
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

/* -- a cgroup gone with runc's delete is looked for once --------------------------------- */

#define N_HIERARCHIES 10

#if defined(__x86_64__)
static volatile gint n_cgroup_stats;

/* SIGSYS of the seccomp filter: newfstatat(2) of a task's cgroup counted (its path, from
 * a hierarchy's directory, starts with "shimwatch/"), and done as statx(2) */
static void
count_cgroup_stat (int        sig,
                   siginfo_t *info,
                   void      *context)
{
  ucontext_t *uc = context;
  int dfd = (int) uc->uc_mcontext.gregs[REG_RDI];
  const char *name = (const char *) uc->uc_mcontext.gregs[REG_RSI];
  struct stat *st = (struct stat *) uc->uc_mcontext.gregs[REG_RDX];
  int flags = (int) uc->uc_mcontext.gregs[REG_R10];
  int saved_errno = errno;
  struct statx stx;
  long result;

  if (name != NULL && strncmp (name, "shimwatch/", strlen ("shimwatch/")) == 0)
    n_cgroup_stats++;
  result = syscall (__NR_statx, dfd, name, flags, STATX_BASIC_STATS, &stx);
  if (result == 0)
    {
      memset (st, 0, sizeof *st);
      st->st_dev = makedev (stx.stx_dev_major, stx.stx_dev_minor);
      st->st_ino = stx.stx_ino;
      st->st_mode = stx.stx_mode;
      st->st_nlink = stx.stx_nlink;
      st->st_uid = stx.stx_uid;
      st->st_gid = stx.stx_gid;
      st->st_rdev = makedev (stx.stx_rdev_major, stx.stx_rdev_minor);
      st->st_size = (off_t) stx.stx_size;
      st->st_blksize = (blksize_t) stx.stx_blksize;
      st->st_blocks = (blkcnt_t) stx.stx_blocks;
      st->st_atim = (struct timespec) { stx.stx_atime.tv_sec, stx.stx_atime.tv_nsec };
      st->st_mtim = (struct timespec) { stx.stx_mtime.tv_sec, stx.stx_mtime.tv_nsec };
      st->st_ctim = (struct timespec) { stx.stx_ctime.tv_sec, stx.stx_ctime.tv_nsec };
    }
  uc->uc_mcontext.gregs[REG_RAX] = result < 0 ? -errno : result;
  errno = saved_errno;
}
#endif

/* The cgroup of a dead shim's task, removed by runc's delete (from every hierarchy), was
 * looked for in each hierarchy by the removal, one failing stat per hierarchy: ten per
 * death on a hybrid host, and once more on the main thread as the cleanup started. Its
 * cgroup.events, opened at the start, says it is there, in cgroup2's hierarchy; the
 * removal looks for it there alone: one stat per task, with ten hierarchies. A cgroup
 * that a failed delete left (`shim delete` succeeds anyway) is still found, and goes
 * from every hierarchy. */
static void
test_cgroup_gone_looked_for_once (Fixture       *fixture,
                                  gconstpointer  data)
{
#if defined(__x86_64__) && defined(__NR_newfstatat)
  const long stat_call[] = { __NR_newfstatat };
  const char *mounts[N_HIERARCHIES + 1] = { NULL };
  char *dirs[N_HIERARCHIES] = { NULL };
  g_autoptr(ShimwatchCgroupHost) host = NULL;
  g_autoptr(ShimwatchCleanup) cleanup = NULL;
  g_autofree char *events = NULL;
  ShimwatchCleanupRequest *gone, *left;
  gint stats_gone;

  /* before the cleanup starts its thread: the filter is inherited by threads made later */
  if (!shimwatch_test_trap_under_filter (stat_call, 1, count_cgroup_stat))
    return;
  for (guint i = 0; i < N_HIERARCHIES; i++)
    {
      dirs[i] = g_strdup_printf ("%s/hierarchy%u", fixture->root, i);
      g_assert_no_errno (g_mkdir (dirs[i], 0755));
      mounts[i] = dirs[i];
    }
  /* the last one as cgroup2's, as on a hybrid host */
  host = shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_HYBRID, mounts,
                                    dirs[N_HIERARCHIES - 1], NULL,
                                    SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  cleanup = shimwatch_cleanup_new (fixture->launcher, host, CONCURRENCY);

  gone = prepare (fixture, "gone", NO_CGROUP);
  gone->cgroup_path = g_strdup ("/shimwatch/default/gone");
  left = prepare (fixture, "left", NO_CGROUP);
  left->cgroup_path = g_strdup ("/shimwatch/default/left");
  for (guint i = 0; i < N_HIERARCHIES; i++)
    {
      g_autofree char *one = g_build_filename (dirs[i], gone->cgroup_path, NULL);
      g_autofree char *other = g_build_filename (dirs[i], left->cgroup_path, "inner", NULL);

      g_assert_no_errno (g_mkdir_with_parents (one, 0755));
      g_assert_no_errno (g_mkdir_with_parents (other, 0755));
    }
  events = g_build_filename (dirs[N_HIERARCHIES - 1], gone->cgroup_path, "cgroup.events", NULL);
  g_assert_true (g_file_set_contents (events, "populated 0\nfrozen 0\n", -1, NULL));

  /* its cgroup.events (cgroup2) says it is there at the start: no stat; runc's delete
   * removes it from every hierarchy before the removal (which is handed to its thread
   * when the loop next turns), which looks for it in cgroup2's alone */
  fixture->pending++;
  shimwatch_cleanup_run_async (cleanup, gone, NULL, NULL, done_cb, fixture);
  g_assert_no_errno (g_unlink (events));
  for (guint i = 0; i < N_HIERARCHIES; i++)
    {
      g_autofree char *one = g_build_filename (dirs[i], "shimwatch", "default", "gone", NULL);

      g_assert_no_errno (g_rmdir (one));
    }
  wait_done (fixture);
  stats_gone = g_atomic_int_get (&n_cgroup_stats);
  g_test_message ("stats of a cgroup runc removed, with %u hierarchies: %d", N_HIERARCHIES,
                  stats_gone);
  g_assert_cmpint (stats_gone, ==, 1);

  /* a delete that failed left it (and a child) everywhere: it goes from every hierarchy */
  fixture->pending++;
  shimwatch_cleanup_run_async (cleanup, left, NULL, NULL, done_cb, fixture);
  wait_done (fixture);
  for (guint i = 0; i < N_HIERARCHIES; i++)
    {
      g_autofree char *one = g_build_filename (dirs[i], "shimwatch", "default", "left", NULL);

      g_assert_false (g_file_test (one, G_FILE_TEST_EXISTS));
    }
  g_clear_object (&cleanup);
  for (guint i = 0; i < N_HIERARCHIES; i++)
    g_free (dirs[i]);
#else
  g_test_skip ("the newfstatat(2) counter is written for x86_64");
#endif
}

/* -- runc's state, gone with its delete, costs one open ----------------------------------- */

#if defined(__x86_64__) && defined(__NR_openat)
static volatile gint n_remover_opens;

/* SIGSYS of the seccomp filter: openat(2) of the removal thread ("sw-removal") counted,
 * and done as openat2(2) */
static void
count_remover_open (int        sig,
                    siginfo_t *info,
                    void      *context)
{
  ucontext_t *uc = context;
  int flags = (int) uc->uc_mcontext.gregs[REG_RDX];
  struct open_how how = {
    .flags = (guint64) (unsigned int) flags,
    .mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? (guint64) uc->uc_mcontext.gregs[REG_R10] : 0,
  };
  char name[17] = "";
  int saved_errno = errno;
  long result;

  if (prctl (PR_GET_NAME, name) == 0 && strcmp (name, "sw-removal") == 0)
    n_remover_opens++;
  result = syscall (SYS_openat2, (int) uc->uc_mcontext.gregs[REG_RDI],
                    (const char *) uc->uc_mcontext.gregs[REG_RSI], &how, sizeof how);
  uc->uc_mcontext.gregs[REG_RAX] = result < 0 ? -errno : result;
  errno = saved_errno;
}
#endif

/* runc's delete removes the task's runc state: the removal opened its parent directory
 * (runc's directory of the namespace, there for the namespace's other tasks), failed to
 * open the state in it and closed the parent again: two opens and a close per death on
 * the removal thread. It opens the state by its path: one open that fails. The removal
 * of one task, its runc state gone, opens 3 times (the state, and the parent and the
 * renamed directory of the task's own), 4 on the old code; a runc state a failed delete
 * left is still removed. */
static void
test_runc_state_one_open (Fixture       *fixture,
                          gconstpointer  data)
{
#if defined(__x86_64__) && defined(__NR_openat)
  const long open_call[] = { __NR_openat };
  g_autoptr(ShimwatchCleanup) cleanup = NULL;
  g_autofree char *runc_ns = g_build_filename (fixture->root, "runc", "default", NULL);
  g_autofree char *left_state = NULL;
  ShimwatchCleanupRequest *gone, *left;
  gint opens;

  /* before the cleanup starts its thread: the filter is inherited by threads made later */
  if (!shimwatch_test_trap_under_filter (open_call, 1, count_remover_open))
    return;
  cleanup = shimwatch_cleanup_new (fixture->launcher, fixture->host, CONCURRENCY);
  /* the namespace's runc directory holds another task's state */
  g_assert_no_errno (g_mkdir_with_parents (runc_ns, 0700));
  gone = prepare (fixture, "gone", NO_CGROUP);
  left = prepare (fixture, "left", NO_CGROUP);
  left_state = g_build_filename (left->runc_state_dir, "state.json", NULL);
  g_assert_no_errno (g_mkdir_with_parents (left->runc_state_dir, 0700));
  g_assert_true (g_file_set_contents (left_state, "{}", -1, NULL));

  fixture->pending++;
  shimwatch_cleanup_run_async (cleanup, gone, NULL, NULL, done_cb, fixture);
  wait_done (fixture);
  opens = g_atomic_int_get (&n_remover_opens);
  g_test_message ("opens of the removal thread for a task whose runc state is gone: %d",
                  opens);
  g_assert_cmpint (opens, ==, 3);

  /* a delete that failed left it: it goes */
  fixture->pending++;
  shimwatch_cleanup_run_async (cleanup, left, NULL, NULL, done_cb, fixture);
  wait_done (fixture);
  g_assert_false (g_file_test (left_state, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (runc_ns, G_FILE_TEST_IS_DIR));
  g_clear_object (&cleanup);
#else
  g_test_skip ("the openat(2) counter is written for x86_64");
#endif
}

/* -- a task directory removed without a stat per entry ------------------------------------ */

/* in @root: tree/ with files, nested directories, an empty one, a FIFO and symlinks to a
 * file and a directory outside it (which must survive: a link is removed, never followed) */
static void
make_tree (const char *root)
{
  const char *dirs[] = { "tree/rootfs/etc/deep/deeper", "tree/empty", "tree/rootfs/var/run",
                         "outside/dir" };
  const char *files[] = { "tree/config.json", "tree/rootfs/etc/hosts",
                          "tree/rootfs/etc/deep/deeper/f", "tree/rootfs/var/run/pid",
                          "outside/file", "outside/dir/kept" };

  for (guint i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      g_autofree char *path = g_build_filename (root, dirs[i], NULL);

      g_assert_no_errno (g_mkdir_with_parents (path, 0700));
    }
  for (guint i = 0; i < G_N_ELEMENTS (files); i++)
    {
      g_autofree char *path = g_build_filename (root, files[i], NULL);

      g_assert_true (g_file_set_contents (path, "x", -1, NULL));
    }
  {
    g_autofree char *fifo = g_build_filename (root, "tree", "rootfs", "var", "run", "fifo", NULL);
    g_autofree char *to_file = g_build_filename (root, "tree", "link-to-file", NULL);
    g_autofree char *to_dir = g_build_filename (root, "tree", "rootfs", "link-to-dir", NULL);
    g_autofree char *dangling = g_build_filename (root, "tree", "empty-not", NULL);
    g_autofree char *target_file = g_build_filename (root, "outside", "file", NULL);
    g_autofree char *target_dir = g_build_filename (root, "outside", "dir", NULL);

    g_assert_no_errno (mkfifo (fifo, 0600));
    g_assert_no_errno (symlink (target_file, to_file));
    g_assert_no_errno (symlink (target_dir, to_dir));
    g_assert_no_errno (symlink ("/nonexistent/shimwatch", dangling));
  }
}

/* The child: every stat(2) of the process fails, so the removal must do without */
static void
remove_tree_without_stat_child (const char *root)
{
  const long no_stat[] = {
    __NR_newfstatat, __NR_fstat, __NR_statx,
#ifdef __NR_stat
    __NR_stat, __NR_lstat,
#endif
  };
  g_autoptr(GError) error = NULL;

  g_assert_true (shimwatch_test_filter_syscalls (no_stat, G_N_ELEMENTS (no_stat),
                                                 SECCOMP_RET_ERRNO | EPERM));
  g_assert_true (shimwatch_cleanup_remove_tree (root, "tree", &error));
  g_assert_no_error (error);
  /* a file (or a link) named as the top is removed as well, and one not there is no error */
  g_assert_true (shimwatch_cleanup_remove_tree (root, "tree", &error));
  g_assert_no_error (error);
}

/* A task directory goes with one getdents64 per directory and one unlinkat per entry:
 * d_type tells a directory from the rest, so there is no fstatat per entry (a third of
 * which failed: one for each entry gone by the time it was looked at again). In a child
 * where every stat fails, the whole tree still goes, and what its links point to stays. */
static void
test_remove_tree_without_stat (void)
{
  g_autofree char *root = NULL;
  g_autofree char *tree = NULL;
  g_autofree char *outside_kept = NULL;

#ifndef SHIMWATCH_TEST_AUDIT_ARCH
  g_test_skip ("no seccomp filter for this architecture in the test");
  return;
#endif
  if (g_test_subprocess ())
    {
      remove_tree_without_stat_child (g_getenv ("SHIMWATCH_TEST_TREE_ROOT"));
      return;
    }
  root = shimwatch_test_dir_new (NULL, "swtree-XXXXXX", NULL);
  g_assert_nonnull (root);
  make_tree (root);
  g_setenv ("SHIMWATCH_TEST_TREE_ROOT", root, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
  g_unsetenv ("SHIMWATCH_TEST_TREE_ROOT");
  g_test_trap_assert_passed ();

  tree = g_build_filename (root, "tree", NULL);
  outside_kept = g_build_filename (root, "outside", "dir", "kept", NULL);
  g_assert_false (g_file_test (tree, G_FILE_TEST_EXISTS | G_FILE_TEST_IS_SYMLINK));
  g_assert_true (g_file_test (outside_kept, G_FILE_TEST_IS_REGULAR));
  shimwatch_test_dir_remove (root);
}

/* A file or a symlink where a directory was expected goes as itself */
static void
test_remove_tree_top_not_a_dir (void)
{
  g_autofree char *root = shimwatch_test_dir_new (NULL, "swtree-XXXXXX", NULL);
  g_autofree char *file = g_build_filename (root, "file", NULL);
  g_autofree char *link = g_build_filename (root, "link", NULL);
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (file, "x", -1, NULL));
  g_assert_no_errno (symlink (root, link));
  g_assert_true (shimwatch_cleanup_remove_tree (root, "link", &error));
  g_assert_no_error (error);
  g_assert_true (g_file_test (file, G_FILE_TEST_IS_REGULAR));
  g_assert_true (shimwatch_cleanup_remove_tree (root, "file", &error));
  g_assert_no_error (error);
  g_assert_no_errno (g_rmdir (root));
  shimwatch_test_dir_remove (root);
}

static gboolean
is_mounted (const char *path)
{
  g_autofree char *mountinfo = NULL;
  g_autofree char *field = g_strdup_printf (" %s ", path);

  g_assert_true (g_file_get_contents ("/proc/self/mountinfo", &mountinfo, NULL, NULL));
  return strstr (mountinfo, field) != NULL;
}

/* The test runs again as a child in a mount namespace of its own, so that what it
 * mounts goes with the child, over a directory made from @template. The directory is the
 * parent's: a failed assertion ends the child with _exit (1), past any cleanup of its own.
 * Returns NULL in the parent, once the child passed; the directory in the child. */
static char *
in_own_mount_namespace (const char *template)
{
  char *root;

  if (!g_test_subprocess ())
    {
      root = shimwatch_test_dir_new (NULL, template, NULL);
      g_assert_nonnull (root);
      g_setenv ("SHIMWATCH_TEST_MOUNT_ROOT", root, TRUE);
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
      g_unsetenv ("SHIMWATCH_TEST_MOUNT_ROOT");
      /* (its mounts went with the child's mount namespace) */
      shimwatch_test_dir_remove (root);
      g_free (root);
      g_test_trap_assert_passed ();
      return NULL;
    }
  g_assert_no_errno (unshare (CLONE_NEWNS));
  g_assert_no_errno (mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
  root = g_strdup (g_getenv ("SHIMWATCH_TEST_MOUNT_ROOT"));
  g_assert_nonnull (root);
  return root;
}

/* A rootfs still mounted in a task directory (its `shim delete` could not unmount it) is
 * found by the removal, which does not enter it: then, and only then, the mount table is
 * read, what is mounted below the directory detached, and the directory removed. In a
 * mount namespace of the child's own: nothing is mounted on the machine. */
static void
test_remove_tree_mount_below (void)
{
  g_autofree char *root = NULL;
  g_autofree char *task = NULL;
  g_autofree char *rootfs = NULL;
  g_autofree char *inside = NULL;
  g_autoptr(GError) error = NULL;

  if (geteuid () != 0)
    {
      g_test_skip ("needs root (it mounts a tmpfs in a mount namespace of its own)");
      return;
    }
  root = in_own_mount_namespace ("swmount-XXXXXX");
  if (root == NULL)
    return;
  task = g_build_filename (root, "default", "t", NULL);
  rootfs = g_build_filename (task, "rootfs", NULL);
  inside = g_build_filename (rootfs, "etc", NULL);
  g_assert_no_errno (g_mkdir_with_parents (rootfs, 0700));
  g_assert_no_errno (mount ("shimwatch-test", rootfs, "tmpfs", 0, "size=64k"));
  g_assert_no_errno (g_mkdir (inside, 0700));

  g_assert_true (shimwatch_cleanup_remove_task_dir (task, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (task, G_FILE_TEST_EXISTS));
  g_assert_false (is_mounted (rootfs));
  {
    g_autofree char *hidden = g_build_filename (root, "default", ".t", "rootfs", NULL);

    g_assert_false (is_mounted (hidden));
  }
  /* the namespace's directory went with its last task: the parent finds the root empty */
  {
    g_autofree char *ns_dir = g_build_filename (root, "default", NULL);

    g_assert_false (g_file_test (ns_dir, G_FILE_TEST_EXISTS));
  }
}

/* -- containerd's bundle: the takeover of containerd's cleanup ----------------------------- */

#define CONTAINERD_TASK_DIR "io.containerd.runtime.v2.task"
#define BUNDLE_SLOTS        2
#define N_BUNDLES           5

/* a task of containerd's whose shim died: its bundle under the state directory, with a
 * rootfs and a `work` link to its work directory under the root directory, and the dead
 * shim's socket file (bound, then closed: nothing answers on it) */
typedef struct {
  char *bundle;
  char *work;
  char *socket;
} ContainerdLeftovers;

static void
containerd_leftovers_clear (ContainerdLeftovers *leftovers)
{
  g_free (leftovers->bundle);
  g_free (leftovers->work);
  g_free (leftovers->socket);
}

static int
bind_socket (const char *path)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpuint (strlen (path), <, sizeof addr.sun_path);
  g_strlcpy (addr.sun_path, path, sizeof addr.sun_path);
  g_assert_no_errno (bind (fd, (struct sockaddr *) &addr, sizeof addr));
  return fd;
}

static void
make_containerd_leftovers (const char          *root,
                           const char          *id,
                           ContainerdLeftovers *leftovers)
{
  g_autofree char *rootfs = NULL;
  g_autofree char *link = NULL;
  g_autofree char *file = NULL;
  g_autofree char *file_in = NULL;

  leftovers->bundle = g_build_filename (root, "state", CONTAINERD_TASK_DIR, "ns", id, NULL);
  leftovers->work = g_build_filename (root, "root", CONTAINERD_TASK_DIR, "ns", id, NULL);
  leftovers->socket = g_strdup_printf ("%s/s-%s", root, id);
  rootfs = g_build_filename (leftovers->bundle, "rootfs", NULL);
  link = g_build_filename (leftovers->bundle, "work", NULL);
  file = g_build_filename (leftovers->work, "runtime", NULL);
  g_assert_no_errno (g_mkdir_with_parents (rootfs, 0711));
  g_assert_no_errno (g_mkdir_with_parents (leftovers->work, 0711));
  g_assert_true (g_file_set_contents (file, "x", -1, NULL));
  file_in = g_build_filename (leftovers->bundle, "config.json", NULL);
  g_assert_true (g_file_set_contents (file_in, "{}", -1, NULL));
  g_assert_no_errno (symlink (leftovers->work, link));
  g_assert_no_errno (close (bind_socket (leftovers->socket)));
}

static void
assert_bundle_gone (const ContainerdLeftovers *leftovers)
{
  g_autofree char *parent = g_path_get_dirname (leftovers->bundle);
  g_autofree char *base = g_path_get_basename (leftovers->bundle);
  g_autofree char *hidden_name = g_strconcat (".", base, NULL);
  g_autofree char *hidden = g_build_filename (parent, hidden_name, NULL);
  g_autofree char *work_parent = g_path_get_dirname (leftovers->work);
  g_autofree char *hidden_work = g_build_filename (work_parent, hidden_name, NULL);

  g_assert_false (g_file_test (leftovers->bundle, G_FILE_TEST_EXISTS | G_FILE_TEST_IS_SYMLINK));
  g_assert_false (g_file_test (hidden, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (leftovers->work, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (hidden_work, G_FILE_TEST_EXISTS));
  /* containerd's namespace directories stay: containerd made them */
  g_assert_true (g_file_test (parent, G_FILE_TEST_IS_DIR));
  g_assert_true (g_file_test (work_parent, G_FILE_TEST_IS_DIR));
}

/* containerd's bundle.Delete on its own: the rootfs, the bundle and the work directory its
 * `work` link names go, containerd's namespace directories stay; done again, it is done */
static void
test_bundle_remove (Fixture       *fixture,
                    gconstpointer  data)
{
  ContainerdLeftovers leftovers = { 0 };
  g_autoptr(GError) error = NULL;

  make_containerd_leftovers (fixture->root, "gone", &leftovers);
  g_assert_true (shimwatch_cleanup_remove_bundle (leftovers.bundle, &error));
  g_assert_no_error (error);
  assert_bundle_gone (&leftovers);
  g_assert_true (shimwatch_cleanup_remove_bundle (leftovers.bundle, &error));
  g_assert_no_error (error);
  containerd_leftovers_clear (&leftovers);
}

/* a `shim delete` that checks it runs in the bundle, notes when it begins and ends (one
 * line each, appended), takes long enough for the deletes running at once to overlap,
 * finds the bundle still there as it ends, and answers pid 42, exit status 9 */
static const char delete_script[] =
  "#!/bin/sh\n"
  "for last; do :; done\n"
  "[ \"$last\" = delete ] || exit 2\n"
  "[ -f config.json ] && [ -d rootfs ] || exit 3\n"
  "echo begin >> '%s'\n"
  "sleep 0.3\n"
  "[ -f config.json ] && [ -d rootfs ] || exit 4\n"
  "echo end >> '%s'\n"
  "printf '\\010\\052\\020\\011'\n";

/* the script as @name in @dir, noting into @log; returns its path */
static char *
make_delete_script (const char *dir,
                    const char *name,
                    const char *log)
{
  g_autofree char *text = g_strdup_printf (delete_script, log, log);
  char *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents (path, text, -1, NULL));
  g_assert_no_errno (chmod (path, 0755));
  return path;
}

static ShimwatchCleanupRequest *
bundle_request (const char                *id,
                const ContainerdLeftovers *leftovers,
                const char                *shim_binary)
{
  ShimwatchCleanupRequest *request = shimwatch_cleanup_request_new ();

  request->containerd_bundle = TRUE;
  request->namespace_ = g_strdup ("ns");
  request->id = g_strdup (id);
  request->task_dir = g_strdup (leftovers->bundle);
  request->socket_path = g_strdup (leftovers->socket);
  request->shim_binary = g_strdup (shim_binary);
  request->timeout_ms = 30000;
  return request;
}

typedef struct {
  guint                   pending;
  ShimwatchCleanupResult *results[N_BUNDLES];
} BundleRun;

typedef struct {
  BundleRun *run;
  guint      i;
} BundleSlot;

static void
bundle_done_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  BundleSlot *slot = user_data;

  slot->run->results[slot->i] = shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);
  g_assert_nonnull (slot->run->results[slot->i]);
  slot->run->pending--;
  g_free (slot);
}

static void
bundle_run_start (BundleRun               *run,
                  ShimwatchCleanup        *cleanup,
                  guint                    i,
                  ShimwatchCleanupRequest *request)
{
  BundleSlot *slot = g_new0 (BundleSlot, 1);

  slot->run = run;
  slot->i = i;
  run->pending++;
  shimwatch_cleanup_run_async (cleanup, request, NULL, NULL, bundle_done_cb, slot);
}

static void
bundle_run_wait (BundleRun *run)
{
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  while (run->pending > 0)
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (NULL, TRUE);
    }
}

static void
bundle_run_clear (BundleRun *run)
{
  for (guint i = 0; i < N_BUNDLES; i++)
    g_clear_pointer (&run->results[i], shimwatch_cleanup_result_free);
}

/* The takeover of containerd's cleanup is a cleanup request of its own kind, in the
 * cleanup's queue: each bundle's `shim delete` runs in the bundle, to its end, before
 * anything of the bundle is removed; no more deletes run at once than the cleanup's
 * slots; then the bundle goes as containerd's bundle.Delete removes it (and the work
 * directory with it, containerd's namespace directories staying), and the dead shim's
 * socket file, but not a socket something answers on. The owner lets go of the cleanup
 * as soon as it asked: what it asked for still runs to its end. */
static void
test_bundle_takeover (Fixture       *fixture,
                      gconstpointer  data)
{
  g_autofree char *log = g_build_filename (fixture->root, "deletes", NULL);
  g_autofree char *shim = make_delete_script (fixture->root, "containerd-shim-spy-v2", log);
  g_autofree char *notes = NULL;
  g_auto(GStrv) lines = NULL;
  ContainerdLeftovers leftovers[N_BUNDLES] = { { 0 } };
  ShimwatchCleanup *cleanup = shimwatch_cleanup_new (fixture->launcher, NULL, BUNDLE_SLOTS);
  BundleRun run = { 0 };
  guint begins = 0, running = 0, most = 0;
  int answering;

  for (guint i = 0; i < N_BUNDLES; i++)
    {
      g_autofree char *id = g_strdup_printf ("c%u", i);

      make_containerd_leftovers (fixture->root, id, &leftovers[i]);
    }
  /* the last one's socket answers: a shim of the same address lives */
  g_assert_no_errno (g_unlink (leftovers[N_BUNDLES - 1].socket));
  answering = bind_socket (leftovers[N_BUNDLES - 1].socket);
  g_assert_no_errno (listen (answering, 4));

  for (guint i = 0; i < N_BUNDLES; i++)
    {
      g_autofree char *id = g_strdup_printf ("c%u", i);

      bundle_run_start (&run, cleanup, i, bundle_request (id, &leftovers[i], shim));
    }
  /* as the companion does when it stops */
  g_object_unref (cleanup);
  bundle_run_wait (&run);

  for (guint i = 0; i < N_BUNDLES; i++)
    {
      ShimwatchCleanupResult *result = run.results[i];

      g_assert_true (result->delete_ok);
      g_assert_null (result->delete_error);
      g_assert_cmpuint (result->deleted.pid, ==, 42);
      g_assert_cmpuint (result->deleted.exit_status, ==, 9);
      g_assert_true (result->removed);
      g_assert_null (result->remove_error);
      assert_bundle_gone (&leftovers[i]);
      if (i < N_BUNDLES - 1)
        g_assert_false (g_file_test (leftovers[i].socket, G_FILE_TEST_EXISTS));
    }
  g_assert_true (g_file_test (leftovers[N_BUNDLES - 1].socket, G_FILE_TEST_EXISTS));
  g_assert_no_errno (close (answering));

  /* every delete ran to its end, never more than the slots at once, and the slots were used */
  g_assert_true (g_file_get_contents (log, &notes, NULL, NULL));
  lines = g_strsplit (g_strstrip (notes), "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      if (g_str_equal (lines[i], "begin"))
        {
          begins++;
          running++;
        }
      else
        {
          g_assert_cmpstr (lines[i], ==, "end");
          running--;
        }
      most = MAX (most, running);
    }
  g_test_message ("%u deletes, at most %u at once with %u slots", begins, most, BUNDLE_SLOTS);
  g_assert_cmpuint (begins, ==, N_BUNDLES);
  g_assert_cmpuint (running, ==, 0);
  g_assert_cmpuint (most, ==, BUNDLE_SLOTS);
  bundle_run_clear (&run);
  for (guint i = 0; i < N_BUNDLES; i++)
    containerd_leftovers_clear (&leftovers[i]);
}

/* As containerd: a bundle whose `shim delete` failed, or that names no shim binary that
 * may run, is left where it is, and the dead shim's socket with it */
static void
test_bundle_delete_failed (Fixture       *fixture,
                           gconstpointer  data)
{
  g_autofree char *failing = g_build_filename (fixture->root, "containerd-shim-fail-v2", NULL);
  ContainerdLeftovers leftovers[2] = { { 0 } };
  BundleRun run = { 0 };

  g_assert_true (g_file_set_contents (failing, "#!/bin/sh\necho no >&2\nexit 1\n", -1, NULL));
  g_assert_no_errno (chmod (failing, 0755));
  make_containerd_leftovers (fixture->root, "failed", &leftovers[0]);
  make_containerd_leftovers (fixture->root, "nobinary", &leftovers[1]);
  /* the cleanup warns of each (in structured logs, which g_test_expect_message() does not
   * see): not fatal here */
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  bundle_run_start (&run, fixture->cleanup, 0, bundle_request ("failed", &leftovers[0], failing));
  bundle_run_start (&run, fixture->cleanup, 1, bundle_request ("nobinary", &leftovers[1], NULL));
  bundle_run_wait (&run);
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *config = g_build_filename (leftovers[i].bundle, "config.json", NULL);
      g_autofree char *rootfs = g_build_filename (leftovers[i].bundle, "rootfs", NULL);

      g_assert_false (run.results[i]->delete_ok);
      g_assert_nonnull (run.results[i]->delete_error);
      g_assert_false (run.results[i]->removed);
      g_assert_true (g_file_test (config, G_FILE_TEST_IS_REGULAR));
      g_assert_true (g_file_test (rootfs, G_FILE_TEST_IS_DIR));
      g_assert_true (g_file_test (leftovers[i].work, G_FILE_TEST_IS_DIR));
      g_assert_true (g_file_test (leftovers[i].socket, G_FILE_TEST_EXISTS));
      containerd_leftovers_clear (&leftovers[i]);
    }
  bundle_run_clear (&run);
}

/* A rootfs still mounted in the bundle (the dead shim's delete did not unmount it) is
 * unmounted before the bundle goes: none of its mounts is left. In a mount namespace of
 * the child's own, whose threads all start after it entered it. */
static void
test_bundle_rootfs_mount (void)
{
  g_autofree char *root = NULL;
  g_autofree char *log = NULL;
  g_autofree char *shim = NULL;
  g_autofree char *rootfs = NULL;
  g_autofree char *inside = NULL;
  g_autoptr(ShimwatchLauncher) launcher = NULL;
  const char *runtime_dirs[] = { NULL, NULL };
  ShimwatchLauncherConfig config = { 0 };
  ContainerdLeftovers leftovers = { 0 };
  ShimwatchCleanup *cleanup;
  BundleRun run = { 0 };

  if (geteuid () != 0)
    {
      g_test_skip ("needs root (it mounts a tmpfs in a mount namespace of its own)");
      return;
    }
  root = in_own_mount_namespace ("swbundle-XXXXXX");
  if (root == NULL)
    return;
  make_containerd_leftovers (root, "mounted", &leftovers);
  rootfs = g_build_filename (leftovers.bundle, "rootfs", NULL);
  inside = g_build_filename (rootfs, "etc", NULL);
  g_assert_no_errno (mount ("shimwatch-test", rootfs, "tmpfs", 0, "size=64k"));
  g_assert_no_errno (g_mkdir (inside, 0700));
  g_assert_true (is_mounted (rootfs));

  log = g_build_filename (root, "deletes", NULL);
  shim = make_delete_script (root, "containerd-shim-spy-v2", log);
  runtime_dirs[0] = root;
  config.runtime_dirs = runtime_dirs;
  config.shim_address = "unix:///nonexistent/shimwatch-test.sock";
  config.ttrpc_address = "/nonexistent/shimwatch-test-events.sock";
  launcher = shimwatch_launcher_new (&config);
  cleanup = shimwatch_cleanup_new (launcher, NULL, BUNDLE_SLOTS);
  bundle_run_start (&run, cleanup, 0, bundle_request ("mounted", &leftovers, shim));
  bundle_run_wait (&run);
  g_object_unref (cleanup);
  g_assert_true (run.results[0]->delete_ok);
  g_assert_true (run.results[0]->removed);
  g_assert_false (is_mounted (rootfs));
  assert_bundle_gone (&leftovers);
  bundle_run_clear (&run);
  containerd_leftovers_clear (&leftovers);
}

/* -- the death of a task in a real cgroup (root, cgroup2; the integration suite) ----------- */

typedef struct {
  gboolean killed;
  gboolean done;
  guint    late_warnings;     /* "did not die" / "outlived SIGKILL" */
} Death;

static Death *watched_death;   /* what count_late_writer counts for, or NULL */

static GLogWriterOutput
count_late_writer (GLogLevelFlags   level,
                   const GLogField *fields,
                   gsize            n_fields,
                   gpointer         user_data)
{
  Death *death = watched_death;

  for (gsize i = 0; death != NULL && i < n_fields; i++)
    if (g_str_equal (fields[i].key, "MESSAGE") &&
        (strstr (fields[i].value, "did not die") != NULL ||
         strstr (fields[i].value, "outlived SIGKILL") != NULL))
      death->late_warnings++;
  return g_log_writer_default (level, fields, n_fields, NULL);
}

static void
death_killed_cb (guint32  pid,
                 gint64   when,
                 gpointer user_data)
{
  ((Death *) user_data)->killed = TRUE;
}

static void
death_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  g_autoptr(ShimwatchCleanupResult) outcome =
    shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);

  g_assert_true (outcome->task_killed);
  ((Death *) user_data)->done = TRUE;
}

static pid_t
spawn_into (const char *cgroup_dir)
{
  g_autofree char *procs = g_build_filename (cgroup_dir, "cgroup.procs", NULL);
  g_autofree char *text = NULL;
  pid_t parent = getpid ();
  pid_t pid = fork ();
  int fd;

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      /* never outlives the test (nor holds what it inherited, a lock say) */
      if (prctl (PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid () != parent)
        _exit (1);
      for (int i = 3; i < 1024; i++)
        close (i);
      for (;;)
        pause ();
    }
  /* cgroupfs takes a write in place (g_file_set_contents would rename a new file over) */
  text = g_strdup_printf ("%d", (int) pid);
  fd = open (procs, O_WRONLY | O_CLOEXEC);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (write (fd, text, strlen (text)), ==, (gssize) strlen (text));
  close (fd);
  return pid;
}

static gboolean
wake_cb (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

/* How long the loop ran: iterations until the flag is set by a timeout of @ms */
static guint
iterate_for (guint ms)
{
  gboolean over = FALSE;
  guint n = 0;

  g_timeout_add (ms, wake_cb, &over);
  while (!over)
    {
      g_main_context_iteration (NULL, TRUE);
      n++;
    }
  return n;
}

/* The init dies at the SIGKILL but another process of the task lives on in its cgroup:
 * the death is told only once the cgroup is empty, and the wait for that is woken by
 * cgroup.events changing (not by a timer that reads it every few ms); the death is seen
 * at once, never at the kill's deadline */
static void
test_death_waits_for_cgroup (Fixture       *fixture,
                             gconstpointer  data)
{
  g_autofree char *name = g_strdup_printf ("shimwatch-test-cleanup-%d", (int) getpid ());
  g_autofree char *path = g_strdup_printf ("/%s/t", name);
  g_autofree char *unified = NULL;
  g_autofree char *parent_dir = NULL;
  g_autofree char *task_dir = NULL;
  g_autoptr(ShimwatchCgroupHost) host = NULL;
  g_autoptr(ShimwatchCleanup) cleanup = NULL;
  ShimwatchCleanupRequest *request;
  const char *mounts[] = { NULL, NULL };
  struct statfs fs;
  Death death = { 0 };
  pid_t init, other;
  guint wakeups;
  int status;

  if (geteuid () != 0)
    {
      g_test_skip ("needs root (it makes a cgroup)");
      return;
    }
  if (statfs ("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
    unified = g_strdup ("/sys/fs/cgroup");
  else if (statfs ("/sys/fs/cgroup/unified", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
    unified = g_strdup ("/sys/fs/cgroup/unified");
  else
    {
      g_test_skip ("no cgroup2 hierarchy here");
      return;
    }
  mounts[0] = unified;
  host = shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_UNIFIED, mounts, unified, NULL,
                                    SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  cleanup = shimwatch_cleanup_new (fixture->launcher, host, CONCURRENCY);
  parent_dir = g_build_filename (unified, name, NULL);
  task_dir = g_build_filename (unified, path, NULL);
  g_assert_no_errno (g_mkdir_with_parents (task_dir, 0755));
  init = spawn_into (task_dir);
  other = spawn_into (task_dir);

  request = prepare (fixture, "t", NO_CGROUP);
  request->cgroup_path = g_strdup (path);
  request->task_pid = (guint32) init;
  request->pidfd = pidfd_open (init, 0);
  g_assert_cmpint (request->pidfd, >=, 0);
  request->kill_task = TRUE;
  watched_death = &death;
  shimwatch_cleanup_run_async (cleanup, request, death_killed_cb, &death, death_done_cb, &death);

  /* the init is dead (a zombie of ours), the other process is not: no death yet, and
   * nothing wakes the loop meanwhile (a poll timer of 5 ms would, ~60 times) */
  wakeups = iterate_for (300);
  g_assert_cmpint (kill (other, 0), ==, 0);
  g_assert_false (death.killed);
  g_test_message ("%u main-loop iterations in 300 ms while the cgroup is populated", wakeups);
  g_assert_cmpuint (wakeups, <=, 10);

  /* the last process goes: the death is told at once, from the change of cgroup.events */
  g_assert_cmpint (kill (other, SIGKILL), ==, 0);
  while (!death.done)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (death.killed);
  g_assert_cmpuint (death.late_warnings, ==, 0);
  watched_death = NULL;

  g_assert_cmpint (waitpid (init, &status, 0), ==, init);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
  g_assert_cmpint (waitpid (other, &status, 0), ==, other);
  /* the cleanup removed the task's cgroup; its parent is ours */
  g_assert_false (g_file_test (task_dir, G_FILE_TEST_EXISTS));
  g_assert_no_errno (g_rmdir (parent_dir));
}

/* -- a removal whose cgroup will not empty (root, cgroup2 and the v1 freezer) ------------- */

/* the mount point of the cgroup v1 freezer hierarchy, or NULL */
static char *
freezer_mount (void)
{
  g_autofree char *mountinfo = NULL;
  g_auto(GStrv) lines = NULL;

  if (!g_file_get_contents ("/proc/self/mountinfo", &mountinfo, NULL, NULL))
    return NULL;
  lines = g_strsplit (mountinfo, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *sep = strstr (lines[i], " - cgroup ");
      g_auto(GStrv) fields = NULL;
      g_auto(GStrv) options = NULL;

      if (sep == NULL)
        continue;
      /* "- cgroup <source> <super options>": the controllers are among the options */
      options = g_strsplit (sep + strlen (" - cgroup "), " ", 2);
      if (options[0] == NULL || options[1] == NULL || strstr (options[1], "freezer") == NULL)
        continue;
      fields = g_strsplit (lines[i], " ", 6);
      if (g_strv_length (fields) >= 6)
        return g_strdup (fields[4]);
    }
  return NULL;
}

static void
write_cgroup_file (const char *dir,
                   const char *name,
                   const char *text)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  int fd = open (path, O_WRONLY | O_CLOEXEC);

  /* cgroupfs takes a write in place */
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (write (fd, text, strlen (text)), ==, (gssize) strlen (text));
  g_assert_no_errno (close (fd));
}

static gboolean
freezer_reads (const char *freezer_dir,
               const char *state)
{
  g_autofree char *path = g_build_filename (freezer_dir, "freezer.state", NULL);
  g_autofree char *text = NULL;

  return g_file_get_contents (path, &text, NULL, NULL) && g_str_equal (g_strstrip (text), state);
}

typedef struct {
  GPtrArray *order;     /* the ids, as their cleanups finished */
} Finished;

typedef struct {
  Finished   *finished;
  const char *id;
} Finishing;

static void
finished_cb (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  Finishing *finishing = user_data;
  g_autoptr(ShimwatchCleanupResult) outcome =
    shimwatch_cleanup_run_finish (SHIMWATCH_CLEANUP (source), result);

  g_assert_nonnull (outcome);
  g_assert_true (outcome->delete_ok);
  g_assert_true (outcome->removed);
  g_ptr_array_add (finishing->finished->order, g_strdup (finishing->id));
  g_free (finishing);
}

/* until @n have finished (a minute at most, for a loaded machine) */
static gboolean
n_finished_is (Finished *finished,
               guint     n)
{
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  while (finished->order->len < n && g_get_monotonic_time () < deadline)
    g_main_context_iteration (NULL, TRUE);
  return finished->order->len == n;
}

/* A removal whose cgroup will not empty (a process that no SIGKILL ends for now: stuck in
 * the kernel, here frozen by the cgroup v1 freezer) leaves the removal thread's batch for a
 * thread of GLib's pool, and holds up none of the removals of its batch: they finish first,
 * in their order, while the process is still there. It finishes once the process is gone,
 * with its cgroup removed. The stuck one comes first in the batch: waited for in the
 * removal thread, it would hold up all the others. */
static void
test_stuck_cgroup_in_pool (Fixture      *fixture,
                           gconstpointer data)
{
  const char *others[] = { "a", "b", "c" };
  g_autofree char *name = g_strdup_printf ("shimwatch-test-pool-%d", (int) getpid ());
  g_autofree char *path = g_strdup_printf ("/%s/stuck", name);
  g_autofree char *unified = NULL;
  g_autofree char *freezer = NULL;
  g_autofree char *guard_dir = NULL;
  g_autofree char *task_cgroup = NULL;
  g_autofree char *freezer_cgroup = NULL;
  g_autofree char *stuck_dir = NULL;
  g_autoptr(ShimwatchCgroupHost) host = NULL;
  g_autoptr(ShimwatchCleanup) cleanup = NULL;
  g_autoptr(GPtrArray) requests = g_ptr_array_new ();
  g_autoptr(GPtrArray) ids = g_ptr_array_new ();
  ShimwatchTestGuard *guard;
  Finished finished = { g_ptr_array_new_with_free_func (g_free) };
  const char *mounts[] = { NULL, NULL };
  struct statfs fs;
  pid_t parent = getpid ();
  pid_t pid;
  int status;

  if (geteuid () != 0)
    {
      g_test_skip ("needs root (it makes cgroups)");
      return;
    }
  if (statfs ("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
    unified = g_strdup ("/sys/fs/cgroup");
  else if (statfs ("/sys/fs/cgroup/unified", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
    unified = g_strdup ("/sys/fs/cgroup/unified");
  freezer = freezer_mount ();
  if (unified == NULL || freezer == NULL)
    {
      /* (cgroup2's own freezer lets a SIGKILL through: only v1's holds a process) */
      g_test_skip ("needs a cgroup2 hierarchy and the cgroup v1 freezer (a hybrid layout)");
      return;
    }

  /* whatever way the test ends: the guard thaws the freezer cgroup, kills the process (it
   * lives in the guard's directory) and removes both cgroups */
  guard_dir = shimwatch_test_dir_new (NULL, "swpool-XXXXXX", NULL);
  g_assert_nonnull (guard_dir);
  guard = shimwatch_test_guard_new (guard_dir, path);
  task_cgroup = g_build_filename (unified, path, NULL);
  freezer_cgroup = g_build_filename (freezer, path, NULL);
  g_assert_no_errno (g_mkdir_with_parents (task_cgroup, 0755));
  g_assert_no_errno (g_mkdir_with_parents (freezer_cgroup, 0755));

  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      /* never outlives the test (the SIGKILL waits for the thaw, which the guard does) */
      if (prctl (PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid () != parent ||
          chdir (guard_dir) != 0)
        _exit (1);
      for (int i = 3; i < 1024; i++)
        close (i);
      for (;;)
        pause ();
    }
  {
    g_autofree char *text = g_strdup_printf ("%d", (int) pid);
    gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

    write_cgroup_file (task_cgroup, "cgroup.procs", text);
    write_cgroup_file (freezer_cgroup, "cgroup.procs", text);
    write_cgroup_file (freezer_cgroup, "freezer.state", "FROZEN");
    while (!freezer_reads (freezer_cgroup, "FROZEN"))
      {
        g_assert_cmpint (g_get_monotonic_time (), <, deadline);
        g_usleep (10000);
      }
  }

  mounts[0] = unified;
  host = shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_UNIFIED, mounts, unified, NULL,
                                    SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  cleanup = shimwatch_cleanup_new (fixture->launcher, host, CONCURRENCY);
  {
    ShimwatchCleanupRequest *request = prepare (fixture, "stuck", NO_CGROUP);

    request->cgroup_path = g_strdup (path);
    stuck_dir = g_strdup (request->task_dir);
    g_ptr_array_add (requests, request);
    g_ptr_array_add (ids, "stuck");
  }
  for (guint i = 0; i < G_N_ELEMENTS (others); i++)
    {
      g_ptr_array_add (requests, prepare (fixture, others[i], NO_CGROUP));
      g_ptr_array_add (ids, (gpointer) others[i]);
    }
  /* all in one turn of the main loop: one batch of the removal thread */
  for (guint i = 0; i < requests->len; i++)
    {
      Finishing *finishing = g_new0 (Finishing, 1);

      finishing->finished = &finished;
      finishing->id = g_ptr_array_index (ids, i);
      shimwatch_cleanup_run_async (cleanup, g_ptr_array_index (requests, i), NULL, NULL,
                                   finished_cb, finishing);
    }

  /* the others finish, in their order, while the stuck one's process is there, frozen */
  g_assert_true (n_finished_is (&finished, G_N_ELEMENTS (others)));
  for (guint i = 0; i < G_N_ELEMENTS (others); i++)
    g_assert_cmpstr (g_ptr_array_index (finished.order, i), ==, others[i]);
  g_assert_cmpint (kill (pid, 0), ==, 0);
  g_assert_true (freezer_reads (freezer_cgroup, "FROZEN"));
  g_assert_true (g_file_test (task_cgroup, G_FILE_TEST_IS_DIR));
  g_assert_cmpuint (shimwatch_cleanup_get_n_running (cleanup), ==, 1);

  /* the process goes (the cleanup's SIGKILL, pending, ends it once thawed): the stuck
   * removal finishes, its cgroup with it */
  write_cgroup_file (freezer_cgroup, "freezer.state", "THAWED");
  g_assert_true (n_finished_is (&finished, G_N_ELEMENTS (others) + 1));
  g_assert_cmpstr (g_ptr_array_index (finished.order, G_N_ELEMENTS (others)), ==, "stuck");
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
  g_assert_false (g_file_test (task_cgroup, G_FILE_TEST_EXISTS));
  g_assert_false (g_file_test (stuck_dir, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (shimwatch_cleanup_get_n_running (cleanup), ==, 0);

  /* ours: the freezer cgroup and both parents */
  g_assert_no_errno (g_rmdir (freezer_cgroup));
  {
    g_autofree char *unified_parent = g_path_get_dirname (task_cgroup);
    g_autofree char *freezer_parent = g_path_get_dirname (freezer_cgroup);

    g_assert_no_errno (g_rmdir (unified_parent));
    g_assert_no_errno (g_rmdir (freezer_parent));
  }
  shimwatch_test_guard_finish (guard);
  shimwatch_test_dir_remove (guard_dir);
  g_ptr_array_unref (finished.order);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/cleanup/threads-kept", Fixture, NULL, fixture_set_up, test_threads_kept,
              fixture_tear_down);
  g_test_add_func ("/cleanup/remove-tree/without-stat", test_remove_tree_without_stat);
  g_test_add_func ("/cleanup/remove-tree/top-not-a-dir", test_remove_tree_top_not_a_dir);
  g_test_add ("/cleanup/one-wake-up-per-batch", Fixture, NULL, fixture_set_up,
              test_one_wake_up_per_batch, fixture_tear_down);
  g_test_add_func ("/cleanup/remove-tree/mount-below", test_remove_tree_mount_below);
  g_test_add ("/cleanup/cgroup-removed", Fixture, NULL, fixture_set_up, test_cgroup_removed,
              fixture_tear_down);
  g_test_add ("/cleanup/cgroup-gone-looked-for-once", Fixture, NULL, fixture_set_up,
              test_cgroup_gone_looked_for_once, fixture_tear_down);
  g_test_add ("/cleanup/runc-state-one-open", Fixture, NULL, fixture_set_up,
              test_runc_state_one_open, fixture_tear_down);
  g_test_add ("/cleanup/bundle/remove", Fixture, NULL, fixture_set_up, test_bundle_remove,
              fixture_tear_down);
  g_test_add ("/cleanup/bundle/takeover", Fixture, NULL, fixture_set_up, test_bundle_takeover,
              fixture_tear_down);
  g_test_add ("/cleanup/bundle/delete-failed", Fixture, NULL, fixture_set_up,
              test_bundle_delete_failed, fixture_tear_down);
  g_test_add_func ("/cleanup/bundle/rootfs-mount", test_bundle_rootfs_mount);
  /* it makes a cgroup and processes: the integration suite runs it, under the test lock */
  if (g_getenv ("SHIMWATCH_TEST_REAL_CGROUP") != NULL)
    {
      g_log_set_writer_func (count_late_writer, NULL, NULL);
      g_test_add ("/cleanup/real/death-waits-for-cgroup", Fixture, NULL, fixture_set_up,
                  test_death_waits_for_cgroup, fixture_tear_down);
      g_test_add ("/cleanup/real/stuck-cgroup-in-pool", Fixture, NULL, fixture_set_up,
                  test_stuck_cgroup_in_pool, fixture_tear_down);
    }
  return g_test_run ();
}
