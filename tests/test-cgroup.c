/* SPDX-License-Identifier: Apache-2.0
 *
 * Where a task's cgroup goes (both layouts, both drivers, with and without systemd), what
 * a bundle may name, and killing by cgroup.procs on a hierarchy without cgroup.kill. No
 * root needed: the hierarchies are directories of our own.
 */
#include "config.h"

#include <fcntl.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-cgroup.h"
#include "shimwatch-error.h"
#include "shimwatch-test-dir.h"

static const ShimwatchCgroupLayout layouts[] = {
  SHIMWATCH_CGROUP_LAYOUT_HYBRID,
  SHIMWATCH_CGROUP_LAYOUT_UNIFIED,
};

static void
test_placement_without_systemd (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (layouts); i++)
    {
      g_autofree char *a = shimwatch_cgroup_task_path (layouts[i], NULL,
                                                       SHIMWATCH_CGROUP_DRIVER_CGROUPFS,
                                                       "default", "t01");
      g_autofree char *b = shimwatch_cgroup_task_path (layouts[i], NULL,
                                                       SHIMWATCH_CGROUP_DRIVER_CGROUPFS,
                                                       "another-ns", "t01");

      /* as containerd's /<namespace>/<id>, below the service's own parent */
      g_assert_cmpstr (a, ==, "/shimwatch/default/t01");
      g_assert_cmpstr (b, ==, "/shimwatch/another-ns/t01");
    }
}

static void
test_placement_under_systemd (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (layouts); i++)
    {
      const char *mounts[] = { "/sys/fs/cgroup/unified", NULL };
      g_autoptr(ShimwatchCgroupHost) host =
        shimwatch_cgroup_host_new (layouts[i], mounts, mounts[0],
                                   "/system.slice/shimwatch.service",
                                   SHIMWATCH_CGROUP_DRIVER_SYSTEMD);
      g_autofree char *path = shimwatch_cgroup_task_path (layouts[i],
                                                          "/system.slice/shimwatch.service",
                                                          SHIMWATCH_CGROUP_DRIVER_SYSTEMD,
                                                          "default", "web1");
      g_autofree char *dashed = shimwatch_cgroup_task_path (layouts[i],
                                                            "/system.slice/shimwatch.service",
                                                            SHIMWATCH_CGROUP_DRIVER_SYSTEMD,
                                                            "my-ns", "a-b");
      g_autofree char *dashed2 = shimwatch_cgroup_task_path (layouts[i],
                                                             "/system.slice/shimwatch.service",
                                                             SHIMWATCH_CGROUP_DRIVER_SYSTEMD,
                                                             "my", "ns-a-b");
      g_autofree char *sliced = shimwatch_cgroup_task_path (layouts[i],
                                                            "/a.slice/a-b.slice/sw.service",
                                                            SHIMWATCH_CGROUP_DRIVER_SYSTEMD,
                                                            "default", "web1");
      g_autofree char *on_disk = NULL;
      g_autofree char *dashed_on_disk = NULL;
      g_autoptr(GError) error = NULL;

      /* runc --systemd-cgroup: a transient scope per task in the service's slice */
      g_assert_cmpstr (path, ==, "system.slice:shimwatch:default-web1");
      on_disk = shimwatch_cgroup_resolve (host, path, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (on_disk, ==, "/system.slice/shimwatch-default-web1.scope");

      /* "-" inside a name is escaped as systemd does, so no two tasks share a scope */
      g_assert_cmpstr (dashed, ==, "system.slice:shimwatch:my\\x2dns-a\\x2db");
      g_assert_cmpstr (dashed2, ==, "system.slice:shimwatch:my-ns\\x2da\\x2db");
      dashed_on_disk = shimwatch_cgroup_resolve (host, dashed, &error);
      g_assert_no_error (error);
      g_assert_cmpstr (dashed_on_disk, ==, "/system.slice/shimwatch-my\\x2dns-a\\x2db.scope");

      g_assert_cmpstr (sliced, ==, "a-b.slice:shimwatch:default-web1");
    }
}

static void
test_resolve_cgroupfs (void)
{
  const char *mounts[] = { "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified", NULL };
  g_autoptr(ShimwatchCgroupHost) host =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_HYBRID, mounts, mounts[1], NULL,
                               SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  const char *bad[] = { "relative/t", "/", "//", "/a/../b", "/..", "system.slice:p:n", "" };
  g_autofree char *path = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) dirs = NULL;

  path = shimwatch_cgroup_resolve (host, "/a//b/./c/", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (path, ==, "/a/b/c");
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *none = shimwatch_cgroup_resolve (host, bad[i], &error);

      g_assert_null (none);
      g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }

  /* the same path in every hierarchy */
  dirs = shimwatch_cgroup_dirs (host, "/shimwatch/default/t01");
  g_assert_cmpuint (dirs->len, ==, 2);
  g_assert_cmpstr (g_ptr_array_index (dirs, 0), ==, "/sys/fs/cgroup/cpu/shimwatch/default/t01");
  g_assert_cmpstr (g_ptr_array_index (dirs, 1), ==,
                   "/sys/fs/cgroup/unified/shimwatch/default/t01");
}

static void
test_resolve_systemd (void)
{
  const char *mounts[] = { "/sys/fs/cgroup", NULL };
  g_autoptr(ShimwatchCgroupHost) host =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_UNIFIED, mounts, mounts[0],
                               "/system.slice/shimwatch.service",
                               SHIMWATCH_CGROUP_DRIVER_SYSTEMD);
  const char *bad[] = { "/shimwatch/default/t01", "system.slice:p", "a:b:c:d",
                        "system.slice:p:", "nope:p:n", "system.slice:p:n.slice",
                        "-x.slice:p:n", "system.slice:p:n/../x", "a--b.slice:p:n" };
  struct { const char *runc; const char *disk; } good[] = {
    { "system.slice:cri-containerd:abc", "/system.slice/cri-containerd-abc.scope" },
    { "a-b-c.slice:p:n", "/a.slice/a-b.slice/a-b-c.slice/p-n.scope" },
    { ":p:n", "/system.slice/p-n.scope" },
    { "-.slice:p:n", "/p-n.scope" },
  };
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (good); i++)
    {
      g_autofree char *path = shimwatch_cgroup_resolve (host, good[i].runc, &error);

      g_assert_no_error (error);
      g_assert_cmpstr (path, ==, good[i].disk);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *none = shimwatch_cgroup_resolve (host, bad[i], &error);

      g_assert_null (none);
      g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }
}

static void
test_own_cgroup_refused (void)
{
  const char *mounts[] = { "/sys/fs/cgroup", NULL };
  g_autoptr(ShimwatchCgroupHost) host =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_UNIFIED, mounts, mounts[0],
                               "/system.slice/shimwatch.service",
                               SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  g_autoptr(GError) error = NULL;
  g_autofree char *inside = NULL;

  /* a cleanup kills what runs in a task's cgroup: never ours or one around ours */
  for (guint i = 0; i < 2; i++)
    {
      const char *path = i == 0 ? "/system.slice" : "/system.slice/shimwatch.service";
      g_autofree char *none = shimwatch_cgroup_resolve (host, path, &error);

      g_assert_null (none);
      g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }
  inside = shimwatch_cgroup_resolve (host, "/system.slice/other.service/t", &error);
  g_assert_no_error (error);
}

static void
test_overlap (void)
{
  g_assert_true (shimwatch_cgroup_paths_overlap ("/a/b", "/a/b"));
  g_assert_true (shimwatch_cgroup_paths_overlap ("/a", "/a/b"));
  g_assert_true (shimwatch_cgroup_paths_overlap ("/a/b/c", "/a"));
  g_assert_false (shimwatch_cgroup_paths_overlap ("/a", "/ab"));
  g_assert_false (shimwatch_cgroup_paths_overlap ("/shimwatch/default/t01",
                                                  "/shimwatch/another-ns/t01"));
  g_assert_true (shimwatch_cgroup_path_is_valid ("/shimwatch/default/t01"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/a/../b"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/a/"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("a"));
  g_assert_false (shimwatch_cgroup_path_is_valid (""));
  g_assert_false (shimwatch_cgroup_path_is_valid ("//a"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/a//b"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/a/./b"));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/."));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/a/.."));
  g_assert_false (shimwatch_cgroup_path_is_valid ("/a/\xff"));
  g_assert_true (shimwatch_cgroup_path_is_valid ("/a/..."));
  g_assert_true (shimwatch_cgroup_path_is_valid ("/a/.b/c.."));
  g_assert_true (shimwatch_cgroup_path_is_valid ("/a"));
  {
    g_autofree char *long_path = g_strnfill (4096, 'a');

    long_path[0] = '/';
    g_assert_false (shimwatch_cgroup_path_is_valid (long_path));
    long_path[4095] = '\0';
    g_assert_true (shimwatch_cgroup_path_is_valid (long_path));
  }
}

static void
write_procs (const char *dir,
             const char *text)
{
  g_autofree char *procs = g_build_filename (dir, "cgroup.procs", NULL);

  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  g_assert_true (g_file_set_contents (procs, text, -1, NULL));
}

/* a cgroup v1 hierarchy (no cgroup.kill, no cgroup.events): cgroup.procs, recursively */
static void
test_kill_by_procs (void)
{
  g_autofree char *root = g_dir_make_tmp ("swcgroup-XXXXXX", NULL);
  g_autofree char *pids = g_build_filename (root, "pids", NULL);
  g_autofree char *task = g_build_filename (pids, "shimwatch", "default", "t01", NULL);
  g_autofree char *child = g_build_filename (task, "inner", NULL);
  g_autofree char *text = NULL;
  const char *mounts[] = { pids, NULL };
  g_autoptr(ShimwatchCgroupHost) host =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_LEGACY, mounts, NULL, NULL,
                               SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  g_autofree char *cmd = NULL;
  pid_t a, b;
  int status;

  g_assert_nonnull (root);
  a = fork ();
  if (a == 0)
    {
      pause ();
      _exit (0);
    }
  b = fork ();
  if (b == 0)
    {
      pause ();
      _exit (0);
    }
  text = g_strdup_printf ("%d\n", (int) a);
  write_procs (task, text);
  g_free (text);
  text = g_strdup_printf ("%d\n", (int) b);
  write_procs (child, text);

  g_assert_true (shimwatch_cgroup_exists (host, "/shimwatch/default/t01"));
  g_assert_true (shimwatch_cgroup_exists (host, "/shimwatch/default/t01/inner"));
  g_assert_false (shimwatch_cgroup_exists (host, "/shimwatch/other/t01"));
  g_assert_true (shimwatch_cgroup_is_populated (host, "/shimwatch/default/t01"));
  g_assert_false (shimwatch_cgroup_is_populated (host, "/shimwatch/other/t01"));
  g_assert_cmpuint (shimwatch_cgroup_kill (host, "/shimwatch/default/t01"), ==, 2);
  g_assert_cmpint (waitpid (a, &status, 0), ==, a);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
  g_assert_cmpint (waitpid (b, &status, 0), ==, b);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);

  cmd = g_strdup_printf ("rm -rf '%s'", root);
  g_assert_cmpint (system (cmd), ==, 0);
}

static void
write_text (const char *dir,
            const char *name,
            const char *text)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents (path, text, -1, NULL));
}

static char *
read_text (const char *dir,
           const char *name)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  char *text = NULL;

  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  return text;
}

/* cgroup2: cgroup.events says whether anything runs (in the subtree), cgroup.kill kills
 * it; where cgroup.events is missing, cgroup.procs is read as on v1 */
static void
test_unified_files (void)
{
  g_autofree char *root = g_dir_make_tmp ("swcgroup-XXXXXX", NULL);
  g_autofree char *task = g_build_filename (root, "shimwatch", "default", "t01", NULL);
  g_autofree char *text = NULL;
  g_autofree char *cmd = NULL;
  const char *mounts[] = { root, NULL };
  g_autoptr(ShimwatchCgroupHost) host =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_UNIFIED, mounts, root, NULL,
                               SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  const char *path = "/shimwatch/default/t01";

  g_assert_no_errno (g_mkdir_with_parents (task, 0755));
  /* the kernel's cgroup.procs lists only the cgroup's own processes: the events file
   * is the one that counts the subtree */
  write_text (task, "cgroup.procs", "");
  write_text (task, "cgroup.events", "populated 1\nfrozen 0\n");
  write_text (task, "cgroup.kill", "");
  g_assert_true (shimwatch_cgroup_exists (host, path));
  g_assert_true (shimwatch_cgroup_is_populated (host, path));
  g_assert_cmpuint (shimwatch_cgroup_kill (host, path), ==, 1);
  text = read_text (task, "cgroup.kill");
  g_assert_cmpstr (text, ==, "1");
  g_clear_pointer (&text, g_free);

  write_text (task, "cgroup.events", "populated 0\nfrozen 0\n");
  g_assert_false (shimwatch_cgroup_is_populated (host, path));
  write_text (task, "cgroup.kill", "");
  g_assert_cmpuint (shimwatch_cgroup_kill (host, path), ==, 0);

  /* cgroup.events opened once and read again: each read sees the file as it is now */
  {
    int fd = shimwatch_cgroup_open_events (host, path);
    g_autofree char *events = g_build_filename (task, "cgroup.events", NULL);
    int out;

    g_assert_cmpint (fd, >=, 0);
    g_assert_false (shimwatch_cgroup_is_populated_at (host, path, fd));
    out = open (events, O_WRONLY | O_TRUNC | O_CLOEXEC);
    g_assert_cmpint (out, >=, 0);
    g_assert_cmpint (write (out, "populated 1\nfrozen 0\n", 22), ==, 22);
    g_assert_true (shimwatch_cgroup_is_populated_at (host, path, fd));
    write_text (task, "cgroup.kill", "");
    g_assert_cmpuint (shimwatch_cgroup_kill_at (host, path, fd), ==, 1);
    g_assert_cmpint (ftruncate (out, 0), ==, 0);
    g_assert_cmpint (pwrite (out, "populated 0\n", 12, 0), ==, 12);
    g_assert_false (shimwatch_cgroup_is_populated_at (host, path, fd));
    g_assert_cmpuint (shimwatch_cgroup_kill_at (host, path, fd), ==, 0);
    close (out);
    close (fd);
    g_assert_cmpint (shimwatch_cgroup_open_events (host, "/shimwatch/default/t02"), ==, -1);
  }

  /* no cgroup.events (a kernel before 4.something): cgroup.procs, as on v1 */
  cmd = g_strdup_printf ("rm '%s/cgroup.events'", task);
  g_assert_cmpint (system (cmd), ==, 0);
  g_free (cmd);
  g_assert_false (shimwatch_cgroup_is_populated (host, path));
  text = g_strdup_printf ("%d\n", (int) getpid ());
  write_text (task, "cgroup.procs", text);
  g_assert_true (shimwatch_cgroup_is_populated (host, path));

  g_assert_false (shimwatch_cgroup_exists (host, "/shimwatch/default/t02"));
  g_assert_false (shimwatch_cgroup_is_populated (host, "/shimwatch/default/t02"));

  cmd = g_strdup_printf ("rm -rf '%s'", root);
  g_assert_cmpint (system (cmd), ==, 0);
}

static pid_t
start_paused (void)
{
  pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      /* never left behind by a test that fails */
      prctl (PR_SET_PDEATHSIG, SIGKILL);
      pause ();
      _exit (0);
    }
  return pid;
}

/* @pid was sent SIGKILL: it is reaped within seconds (else it is killed here, and the
 * test fails) */
static void
assert_killed (pid_t pid)
{
  gint64 deadline = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
  int status;
  pid_t reaped;

  while ((reaped = waitpid (pid, &status, WNOHANG)) == 0 && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  if (reaped == 0)
    {
      kill (pid, SIGKILL);
      waitpid (pid, NULL, 0);
    }
  g_assert_cmpint (reaped, ==, pid);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
}

/* A hybrid host whose cgroup2 has no cgroup.kill (Linux before 5.14): its processes are
 * killed through cgroup.procs, and once cgroup.kill was found missing beside a cgroup that
 * is there it is never tried again (the cleanup asks two or three times per death). A
 * cgroup.kill put there afterwards (which no kernel does) is left alone: it was not
 * opened. A cgroup that is gone tells nothing of the kernel: cgroup.kill is tried next
 * time. */
static void
test_kill_file_absent (void)
{
  g_autofree char *root = shimwatch_test_dir_new (NULL, "swcgroup-XXXXXX", NULL);
  g_autofree char *pids = g_build_filename (root, "pids", NULL);
  g_autofree char *unified = g_build_filename (root, "unified", NULL);
  g_autofree char *task = g_build_filename (pids, "shimwatch", "default", "t01", NULL);
  g_autofree char *task2 = g_build_filename (unified, "shimwatch", "default", "t01", NULL);
  g_autofree char *other2 = g_build_filename (unified, "shimwatch", "default", "t02", NULL);
  g_autofree char *text = NULL;
  const char *mounts[] = { pids, unified, NULL };
  const char *path = "/shimwatch/default/t01";
  g_autoptr(ShimwatchCgroupHost) host =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_HYBRID, mounts, unified, NULL,
                               SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  g_autoptr(ShimwatchCgroupHost) fresh =
    shimwatch_cgroup_host_new (SHIMWATCH_CGROUP_LAYOUT_UNIFIED, (const char *[]) { unified, NULL },
                               unified, NULL, SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
  pid_t a, b;

  g_assert_nonnull (root);
  /* as runc makes it: in every hierarchy */
  a = start_paused ();
  text = g_strdup_printf ("%d\n", (int) a);
  write_procs (task, text);
  write_procs (task2, "");
  g_assert_false (shimwatch_cgroup_kill_subtree (host, path));
  g_assert_cmpuint (shimwatch_cgroup_kill_at (host, path, -1), ==, 1);
  assert_killed (a);

  b = start_paused ();
  g_free (text);
  text = g_strdup_printf ("%d\n", (int) b);
  write_procs (task, text);
  write_text (task2, "cgroup.kill", "");
  g_assert_false (shimwatch_cgroup_kill_subtree (host, path));
  g_assert_cmpuint (shimwatch_cgroup_kill_at (host, path, -1), ==, 1);
  g_free (text);
  text = read_text (task2, "cgroup.kill");
  if (*text != '\0')
    kill (b, SIGKILL);
  g_assert_cmpstr (text, ==, "");
  assert_killed (b);

  /* a cgroup that is not there: cgroup.kill is still looked for the next time */
  g_assert_false (shimwatch_cgroup_kill_subtree (fresh, "/shimwatch/default/t02"));
  g_assert_no_errno (g_mkdir_with_parents (other2, 0755));
  write_text (other2, "cgroup.kill", "");
  g_assert_true (shimwatch_cgroup_kill_subtree (fresh, "/shimwatch/default/t02"));
  g_free (text);
  text = read_text (other2, "cgroup.kill");
  g_assert_cmpstr (text, ==, "1");

  shimwatch_test_dir_remove (root);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/cgroup/placement/without-systemd", test_placement_without_systemd);
  g_test_add_func ("/cgroup/placement/under-systemd", test_placement_under_systemd);
  g_test_add_func ("/cgroup/resolve/cgroupfs", test_resolve_cgroupfs);
  g_test_add_func ("/cgroup/resolve/systemd", test_resolve_systemd);
  g_test_add_func ("/cgroup/resolve/own-cgroup", test_own_cgroup_refused);
  g_test_add_func ("/cgroup/overlap", test_overlap);
  g_test_add_func ("/cgroup/kill-by-procs", test_kill_by_procs);
  g_test_add_func ("/cgroup/unified-files", test_unified_files);
  g_test_add_func ("/cgroup/kill-file-absent", test_kill_file_absent);
  return g_test_run ();
}
