/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "shimwatch-test-util.h"

/* Whether runc can run a container here, asked of runc itself: a busybox `true` in a
 * cgroup of its own, under a private root. What runc needs (namespaces, writable cgroup
 * hierarchies of whichever layout, a usable /proc) is too varied to guess from a path:
 * /sys/fs/cgroup is a read-only tmpfs under systemd on the hybrid and legacy layouts, where
 * runc works fine. NULL when it ran; else runc's own words. */
static char *
runc_probe (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("swprobe-XXXXXX", &error);
  g_autofree char *bundle = NULL;
  g_autofree char *root = NULL;
  g_autofree char *id = g_strdup_printf ("swprobe-%d-%u", (int) getpid (), g_random_int ());
  g_autofree char *cgroup = g_strdup_printf ("/%s", id);
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  const char *argv_true[] = { "true", NULL };
  char *reason = NULL;
  int status = 0;

  if (dir == NULL)
    return g_strdup_printf ("cannot make a directory for a runc probe: %s", error->message);
  bundle = shimwatch_test_make_bundle (dir, "bundle", argv_true, cgroup, &error);
  root = g_build_filename (dir, "runc", NULL);
  if (bundle == NULL)
    reason = g_strdup_printf ("cannot make a bundle for a runc probe: %s", error->message);
  else
    {
      const char *run[] = { "runc", "--root", root, "run", "--bundle", bundle, id, NULL };
      const char *del[] = { "runc", "--root", root, "delete", "--force", id, NULL };

      /* `run` without --detach waits for the container and deletes it, cgroup included */
      if (!g_spawn_sync (NULL, (char **) run, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out,
                         &err, &status, &error))
        reason = g_strdup_printf ("cannot run runc: %s", error->message);
      else if (!g_spawn_check_wait_status (status, NULL))
        reason = g_strdup_printf ("runc cannot run a container here: %s",
                                  g_strstrip (err));
      g_spawn_sync (NULL, (char **) del, NULL,
                    G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                    NULL, NULL, NULL, NULL, NULL, NULL);
      shimwatch_test_remove_cgroup (cgroup);
    }
  shimwatch_test_remove_tree (dir);
  return reason;
}

char *
shimwatch_test_real_shim_skip_reason (void)
{
  static gsize probed = 0;
  static char *runc_reason = NULL;
  const char *programs[] = { "containerd-shim-runc-v2", "runc", "busybox" };

  if (geteuid () != 0)
    return g_strdup ("real shims need root (runc creates namespaces and cgroups)");
  for (guint i = 0; i < G_N_ELEMENTS (programs); i++)
    {
      g_autofree char *path = g_find_program_in_path (programs[i]);

      if (path == NULL)
        return g_strdup_printf ("%s is not installed (Debian packages containerd, runc, "
                                "busybox-static)", programs[i]);
    }
  if (g_once_init_enter (&probed))
    {
      runc_reason = runc_probe ();
      g_once_init_leave (&probed, 1);
    }
  return g_strdup (runc_reason);
}

static gboolean
make_rootfs (const char  *dir,
             GError     **error)
{
  const char *dirs[] = { "bin", "proc", "dev", "sys", "tmp", "etc" };
  const char *applets[] = { "sh", "sleep", "ls", "cat", "ps", "echo", "true", "kill", "exit" };
  g_autofree char *rootfs = g_build_filename (dir, "rootfs", NULL);
  g_autofree char *busybox = g_build_filename (rootfs, "bin", "busybox", NULL);
  g_autofree char *source = g_find_program_in_path ("busybox");
  g_autoptr(GFile) from = NULL;
  g_autoptr(GFile) to = NULL;

  if (g_file_test (busybox, G_FILE_TEST_EXISTS))
    return TRUE;
  for (guint i = 0; i < G_N_ELEMENTS (dirs); i++)
    {
      g_autofree char *d = g_build_filename (rootfs, dirs[i], NULL);

      g_mkdir_with_parents (d, 0755);
    }
  from = g_file_new_for_path (source);
  to = g_file_new_for_path (busybox);
  if (!g_file_copy (from, to, G_FILE_COPY_OVERWRITE, NULL, NULL, NULL, error))
    return FALSE;
  g_chmod (busybox, 0755);
  for (guint i = 0; i < G_N_ELEMENTS (applets); i++)
    {
      g_autofree char *link = g_build_filename (rootfs, "bin", applets[i], NULL);

      if (symlink ("busybox", link) != 0 && errno != EEXIST)
        {
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "symlink %s: %s", link,
                       g_strerror (errno));
          return FALSE;
        }
    }
  return TRUE;
}

char *
shimwatch_test_make_bundle (const char          *dir,
                            const char          *name,
                            const char * const  *argv,
                            const char          *cgroups_path,
                            GError             **error)
{
  g_autofree char *bundle = g_build_filename (dir, name, NULL);
  g_autofree char *config_path = g_build_filename (bundle, "config.json", NULL);
  g_autofree char *rootfs = g_build_filename (dir, "rootfs", NULL);
  g_autofree char *spec_out = NULL;
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autoptr(JsonArray) args = json_array_new ();
  g_autoptr(JsonArray) env = json_array_new ();
  JsonObject *config;
  JsonObject *process;
  JsonObject *linux_;
  int status;
  const char *spec_argv[] = { "runc", "spec", "--bundle", bundle, NULL };

  if (!make_rootfs (dir, error))
    return NULL;
  g_mkdir_with_parents (bundle, 0755);
  g_unlink (config_path);
  if (!g_spawn_sync (NULL, (char **) spec_argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL,
                     &spec_out, &status, error) ||
      !g_spawn_check_wait_status (status, error))
    return NULL;
  if (!json_parser_load_from_file (parser, config_path, error))
    return NULL;

  /* docs/protocol.md §6: no image, so PATH must be set; no terminal; our own cgroup */
  config = json_node_get_object (json_parser_get_root (parser));
  process = json_object_get_object_member (config, "process");
  for (guint i = 0; argv[i] != NULL; i++)
    json_array_add_string_element (args, argv[i]);
  json_array_add_string_element (env, "PATH=/bin");
  json_object_set_array_member (process, "args", json_array_ref (args));
  json_object_set_array_member (process, "env", json_array_ref (env));
  json_object_set_boolean_member (process, "terminal", FALSE);
  json_object_set_string_member (json_object_get_object_member (config, "root"), "path", rootfs);
  json_object_set_boolean_member (json_object_get_object_member (config, "root"), "readonly", TRUE);
  linux_ = json_object_get_object_member (config, "linux");
  json_object_set_string_member (linux_, "cgroupsPath", cgroups_path);

  json_generator_set_root (generator, json_parser_get_root (parser));
  if (!json_generator_to_file (generator, config_path, error))
    return NULL;
  return g_steal_pointer (&bundle);
}

void
shimwatch_test_store_result (GObject      *source,
                             GAsyncResult *result,
                             gpointer      user_data)
{
  GAsyncResult **out = user_data;

  g_assert_null (*out);
  *out = g_object_ref (result);
}

void
shimwatch_test_wait_result (GAsyncResult **result,
                            guint          timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;

  while (*result == NULL)
    {
      if (g_get_monotonic_time () > deadline)
        g_error ("no result within %u ms", timeout_ms);
      g_main_context_iteration (NULL, FALSE);
      if (*result == NULL)
        g_usleep (500);
    }
}

gboolean
shimwatch_test_wait_until (gboolean (*predicate) (gpointer),
                           gpointer   data,
                           guint      timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;

  while (!predicate (data))
    {
      if (g_get_monotonic_time () > deadline)
        return FALSE;
      g_main_context_iteration (NULL, FALSE);
      g_usleep (500);
    }
  return TRUE;
}

gboolean
shimwatch_test_process_is_dead (guint32 pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%u/stat", pid);
  g_autofree char *stat = NULL;
  const char *state;

  if (pid == 0)
    return TRUE;
  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return TRUE;
  /* "pid (comm) S ...": comm may contain spaces and parentheses, state follows the last ')' */
  state = strrchr (stat, ')');
  return state != NULL && (state[2] == 'Z' || state[2] == 'X');
}

void
shimwatch_test_remove_tree (const char *path)
{
  const char *argv[] = { "rm", "-rf", "--one-file-system", path, NULL };

  if (path != NULL && g_path_is_absolute (path) && strlen (path) > 5)
    g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH | G_SPAWN_STDERR_TO_DEV_NULL,
                  NULL, NULL, NULL, NULL, NULL, NULL);
}

void
shimwatch_test_remove_cgroup (const char *cgroups_path)
{
  g_autofree char *mountinfo = NULL;
  g_auto(GStrv) lines = NULL;

  /* in every hierarchy (each v1 controller, cgroup2), whatever the layout: runc never
   * removes parent cgroups, so remove the (empty) leaf and its parent */
  if (!g_file_get_contents ("/proc/self/mountinfo", &mountinfo, NULL, NULL))
    return;
  lines = g_strsplit (mountinfo, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *sep = strstr (lines[i], " - ");
      g_auto(GStrv) fields = NULL;
      g_autofree char *leaf = NULL;
      g_autofree char *parent = NULL;

      if (sep == NULL || !(g_str_has_prefix (sep, " - cgroup ") ||
                           g_str_has_prefix (sep, " - cgroup2 ")))
        continue;
      fields = g_strsplit (lines[i], " ", 6);
      if (g_strv_length (fields) < 6)
        continue;
      leaf = g_build_filename (fields[4], cgroups_path, NULL);
      parent = g_path_get_dirname (leaf);
      g_rmdir (leaf);
      if (!g_str_equal (parent, fields[4]))
        g_rmdir (parent);
    }
}

char *
shimwatch_test_shim_socket_path (const char *address,
                                 const char *namespace_,
                                 const char *id)
{
  g_autofree char *key = g_build_filename (address, namespace_, id, NULL);
  g_autofree char *hash = g_compute_checksum_for_string (G_CHECKSUM_SHA256, key, -1);

  return g_build_filename ("/run/containerd/s", hash, NULL);
}

struct _ShimwatchTestGuard {
  GPid pid;
  int  fd;      /* the write end of the guard's stdin: only this process holds it */
};

static void
guard_child_setup (gpointer data)
{
  /* its own session: meson kills a timed-out test's whole process group */
  setsid ();
}

ShimwatchTestGuard *
shimwatch_test_guard_new (const char *dir,
                          const char *cgroups_path)
{
  const char *guard = g_getenv ("SHIMWATCH_CLEANUP_GUARD");
  const char *argv[] = { "/usr/bin/python3", guard, dir, cgroups_path, NULL };
  g_autoptr(GError) error = NULL;
  ShimwatchTestGuard *self = g_new0 (ShimwatchTestGuard, 1);
  int in_fd = -1;

  if (guard == NULL)
    g_error ("SHIMWATCH_CLEANUP_GUARD is not set: run the tests through meson test");
  if (!g_spawn_async_with_pipes ("/", (char **) argv, NULL,
                                 G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL,
                                 guard_child_setup, NULL, &self->pid, &in_fd, NULL, NULL,
                                 &error))
    g_error ("cannot start the cleanup guard: %s", error->message);
  /* processes the test starts later must not hold the guard's stdin open */
  fcntl (in_fd, F_SETFD, FD_CLOEXEC);
  self->fd = in_fd;
  return self;
}

void
shimwatch_test_guard_finish (ShimwatchTestGuard *self)
{
  int status = 0;

  if (self == NULL)
    return;
  close (self->fd);
  while (waitpid (self->pid, &status, 0) < 0 && errno == EINTR)
    ;
  g_spawn_close_pid (self->pid);
  if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    g_test_message ("cleanup guard ended with status %d", status);
  g_free (self);
}
