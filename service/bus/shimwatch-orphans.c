/* SPDX-License-Identifier: Apache-2.0
 *
 * Orphans: task state on disk that no supervised task owns, cleaned up
 */
#define G_LOG_DOMAIN "ShimwatchManager"

#include "config.h"

#include <fcntl.h>
#include <string.h>
#include <glib/gstdio.h>

#include "shimwatch-bundle.h"
#include "shimwatch-file.h"
#include "shimwatch-logging.h"
#include "shimwatch-orphans.h"

/* a shim binary is run as root: only a containerd-shim-* from the configured runtime
 * directories, whatever a file on disk names */
gboolean
shimwatch_orphans_trusted_shim_binary (const ShimwatchOrphans *self,
                                       const char             *binary)
{
  g_autofree char *dir = g_path_get_dirname (binary);
  g_autofree char *base = g_path_get_basename (binary);

  return g_path_is_absolute (binary) && g_str_has_prefix (base, "containerd-shim-") &&
         g_strv_contains (self->runtime_path, dir) &&
         g_file_test (binary, G_FILE_TEST_IS_REGULAR) &&
         g_file_test (binary, G_FILE_TEST_IS_EXECUTABLE);
}

/* a small file in a task directory (the shim writes some), read without trusting it */
char *
shimwatch_orphans_read_task_file (const char *task_dir,
                                  const char *name)
{
  g_autofree char *path = g_build_filename (task_dir, name, NULL);
  char *contents = shimwatch_read_regular_file_at (AT_FDCWD, path, 4096, SHIMWATCH_FILE_NONE,
                                                   NULL, NULL, NULL);

  return contents != NULL ? g_strstrip (contents) : NULL;
}

static gboolean
task_file_exists (const char *task_dir,
                  const char *name)
{
  g_autofree char *path = g_build_filename (task_dir, name, NULL);
  GStatBuf st;

  return g_lstat (path, &st) == 0;
}

/* the cgroup named in a task directory's config.json (we wrote it there), when it is a
 * valid one that no supervised task uses; NULL otherwise */
static char *
task_cgroup_from_dir (const ShimwatchOrphans *self,
                      const char             *task_dir)
{
  g_autofree char *config = g_build_filename (task_dir, "config.json", NULL);
  g_autofree char *contents = NULL;
  g_autofree char *runc_path = NULL;
  g_autofree char *path = NULL;
  g_autoptr(GBytes) rewritten = NULL;
  gsize length = 0;

  contents = shimwatch_read_regular_file_at (AT_FDCWD, config, SHIMWATCH_BUNDLE_CONFIG_MAX,
                                             SHIMWATCH_FILE_NONE, &length, NULL, NULL);
  if (contents == NULL)
    return NULL;
  rewritten = shimwatch_wire_rewrite_oci_config (contents, length, task_dir, NULL, &runc_path,
                                                 NULL);
  if (rewritten == NULL || runc_path == NULL)
    return NULL;
  path = shimwatch_cgroup_resolve (self->cgroups, runc_path, NULL);
  if (path == NULL || shimwatch_cgroup_claims_overlap (self->claims, path) != NULL)
    return NULL;
  return g_steal_pointer (&path);
}

/* state on disk that no supervised task owns (a task directory without a record, a broken
 * record, leftovers of a failed cleanup): cleaned like a dead shim's, without events since
 * nothing says the task was ever handed to a client. FALSE if there is nothing. */
gboolean
shimwatch_orphans_start_cleanup (const ShimwatchOrphans *self,
                                 const char             *namespace_,
                                 const char             *id,
                                 guint                   timeout_ms,
                                 GAsyncReadyCallback     callback,
                                 gpointer                user_data)
{
  g_autofree char *task_dir = g_build_filename (self->tasks_dir, namespace_, id, NULL);
  g_autofree char *runc_state = g_build_filename (self->runc_root, namespace_, id, NULL);
  g_autofree char *binary = NULL;
  g_autofree char *address = NULL;
  g_autofree char *cgroup_path = NULL;
  ShimwatchCleanupRequest *request;
  guint killed = 0;

  if (!g_file_test (task_dir, G_FILE_TEST_IS_DIR) && !g_file_test (runc_state, G_FILE_TEST_IS_DIR))
    return FALSE;

  binary = shimwatch_orphans_read_task_file (task_dir, "shim-binary-path");
  if (binary != NULL && !shimwatch_orphans_trusted_shim_binary (self, binary))
    g_clear_pointer (&binary, g_free);
  /* the task's cgroup, as its config.json names it */
  cgroup_path = task_cgroup_from_dir (self, task_dir);
  /* a shim that may still run there: nobody supervises it, so it goes. Without its pid
   * only a look at every process's working directory finds it: the rare case of a task
   * directory without a record, never the path of a supervised shim's death. */
  if (g_file_test (task_dir, G_FILE_TEST_IS_DIR))
    killed = shimwatch_cleanup_kill_processes_in (task_dir);

  request = shimwatch_cleanup_request_new ();
  request->namespace_ = g_strdup (namespace_);
  request->id = g_strdup (id);
  request->task_dir = g_steal_pointer (&task_dir);
  request->shim_binary = g_steal_pointer (&binary);
  request->runc_state_dir = g_steal_pointer (&runc_state);
  request->cgroup_path = g_steal_pointer (&cgroup_path);
  request->kill_cgroup = request->cgroup_path != NULL;
  /* the 1.6 shim writes its address into the task dir; its socket file is ours to remove */
  address = shimwatch_orphans_read_task_file (request->task_dir, "address");
  if (address != NULL && g_str_has_prefix (address, "unix:///run/containerd/s/") &&
      strstr (address, "/..") == NULL)
    request->socket_path = g_strdup (address + strlen ("unix://"));
  request->timeout_ms = timeout_ms;
  /* A task directory that never got as far as a shim (a create that failed while it was
   * being written, e.g. on a full disk, by a version that left it behind): the shim's
   * binary is written before any shim starts, and runc's state before any container.
   * Without either, and with nothing found running there, there is nothing to delete:
   * the directory goes as after a delete. */
  if (!g_file_test (request->runc_state_dir, G_FILE_TEST_EXISTS) && killed == 0 &&
      address == NULL && !task_file_exists (request->task_dir, "shim-binary-path"))
    request->deleted = TRUE;
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE,
                      (&(ShimwatchLogTask) { .namespace_ = namespace_, .id = id,
                                             .event = "orphan" }),
                      "cleaning state no supervised task owns%s",
                      killed > 0 ? " (killed its shim)" : "");
  shimwatch_cleanup_run_async (self->cleanup, request, NULL, NULL, callback, user_data);
  return TRUE;
}
