/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchContainerd"

#include "config.h"

#include "shimwatch-containerd-takeover.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shimwatch-cleanup.h"
#include "shimwatch-containerd-connection.h"
#include "shimwatch-error.h"

void
shimwatch_containerd_takeover_request_free (ShimwatchContainerdTakeoverRequest *request)
{
  if (request == NULL)
    return;
  g_free (request->namespace_);
  g_free (request->id);
  g_free (request->bundle);
  g_free (request->shim_binary);
  g_free (request->socket_path);
  g_free (request);
}

void
shimwatch_containerd_takeover_result_free (ShimwatchContainerdTakeoverResult *result)
{
  if (result == NULL)
    return;
  g_free (result->delete_error);
  g_free (result->remove_error);
  g_free (result);
}

char *
shimwatch_containerd_shim_binary (const char          *bundle,
                                  const char * const  *runtime_dirs,
                                  GError             **error)
{
  g_autofree char *file = g_build_filename (bundle, "shim-binary-path", NULL);
  g_autofree char *contents = NULL;
  g_autofree char *real = NULL;
  g_autofree char *dir = NULL;
  struct stat st;

  if (!g_file_get_contents (file, &contents, NULL, error))
    return NULL;
  g_strstrip (contents);
  if (!g_path_is_absolute (contents))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "%s does not name an absolute path", file);
      return NULL;
    }
  real = realpath (contents, NULL);
  if (real == NULL || stat (real, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_FOUND,
                   "%s: no such shim binary", contents);
      return NULL;
    }
  dir = g_path_get_dirname (real);
  for (guint i = 0; runtime_dirs != NULL && runtime_dirs[i] != NULL; i++)
    {
      g_autofree char *allowed = realpath (runtime_dirs[i], NULL);
      g_autofree char *as_named = g_path_get_dirname (contents);

      /* the binary as named, or the file it resolves to, lies directly in the directory */
      if (allowed != NULL && (g_str_equal (allowed, dir) || g_str_equal (runtime_dirs[i], as_named)))
        return g_steal_pointer (&contents);
    }
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
               "%s is not in an allowed runtime directory (RuntimePath)", contents);
  return NULL;
}

/* containerd's atomicDelete: rename to .<name>, then remove */
static gboolean
atomic_delete (const char  *path,
               GError     **error)
{
  g_autofree char *parent = g_path_get_dirname (path);
  g_autofree char *base = g_path_get_basename (path);
  g_autofree char *hidden = g_strconcat (".", base, NULL);
  g_autofree char *hidden_path = g_build_filename (parent, hidden, NULL);

  if (g_rename (path, hidden_path) != 0)
    {
      int saved_errno = errno;

      if (saved_errno == ENOENT)
        return TRUE;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "rename %s: %s",
                   path, g_strerror (saved_errno));
      return FALSE;
    }
  return shimwatch_cleanup_remove_tree (parent, hidden, error);
}

gboolean
shimwatch_containerd_remove_bundle (const char  *bundle,
                                    GError     **error)
{
  g_autofree char *work_link = g_build_filename (bundle, "work", NULL);
  g_autofree char *work = g_file_read_link (work_link, NULL);
  g_autofree char *rootfs = g_build_filename (bundle, "rootfs", NULL);
  g_autoptr(GError) bundle_error = NULL;
  gboolean ok;

  shimwatch_cleanup_unmount_under (rootfs);
  if (g_rmdir (rootfs) != 0 && errno != ENOENT)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "remove %s: %s",
                   rootfs, g_strerror (saved_errno));
      return FALSE;
    }
  ok = atomic_delete (bundle, &bundle_error);
  /* the work directory goes too, also when the bundle could not */
  if (work != NULL && g_path_is_absolute (work) && !atomic_delete (work, ok ? error : NULL))
    ok = FALSE;
  if (bundle_error != NULL)
    g_propagate_error (error, g_steal_pointer (&bundle_error));
  return ok;
}

/* Refcounted (GRcBox): a takeover under way holds a reference, so that it finishes, and
 * starts the next one waiting, also after the companion let go. Main thread only. */
struct _ShimwatchContainerdTakeovers
{
  ShimwatchLauncher *launcher;
  guint              max_running;
  guint              running;
  GQueue             waiting;   /* GTask, oldest first */
};

typedef struct {
  ShimwatchContainerdTakeovers       *takeovers;
  ShimwatchContainerdTakeoverRequest *request;
  ShimwatchContainerdTakeoverResult  *result;
} TakeoverData;

static void start_next (ShimwatchContainerdTakeovers *takeovers);

static void
takeovers_clear (ShimwatchContainerdTakeovers *takeovers)
{
  g_object_unref (takeovers->launcher);
}

static void
takeover_data_free (TakeoverData *data)
{
  g_rc_box_release_full (data->takeovers, (GDestroyNotify) takeovers_clear);
  shimwatch_containerd_takeover_request_free (data->request);
  shimwatch_containerd_takeover_result_free (data->result);
  g_free (data);
}

/* the takeover's result is ready: its slot goes to the next one waiting */
static void
finish (GTask *task)
{
  TakeoverData *data = g_task_get_task_data (task);
  ShimwatchContainerdTakeovers *takeovers = data->takeovers;

  takeovers->running--;
  g_task_return_boolean (task, TRUE);
  start_next (takeovers);
}

static void
remove_done_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;

  finish (task);
}

static void
remove_thread (GTask        *task,
               gpointer      source_object,
               gpointer      task_data,
               GCancellable *cancellable)
{
  TakeoverData *data = task_data;
  g_autoptr(GError) error = NULL;

  /* 2. only after delete finished: the bundle and the work directory */
  data->result->removed = shimwatch_containerd_remove_bundle (data->request->bundle, &error);
  if (!data->result->removed)
    data->result->remove_error = g_strdup (error->message);
  /* 3. then the socket file a dead shim leaves (nothing may answer on it) */
  if (data->request->socket_path != NULL &&
      !shimwatch_containerd_socket_answers (data->request->socket_path))
    data->result->socket_removed = g_unlink (data->request->socket_path) == 0 || errno == ENOENT;
  g_task_return_boolean (task, TRUE);
}

static void
delete_cb (GObject      *source,
           GAsyncResult *result,
           gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  g_autoptr(GTask) inner = NULL;
  TakeoverData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;

  data->result->delete_ok = shimwatch_launcher_delete_finish (SHIMWATCH_LAUNCHER (source), result,
                                                              &data->result->deleted, &error);
  if (!data->result->delete_ok)
    {
      data->result->delete_error = g_strdup (error->message);
      /* as containerd: a bundle whose delete failed is left where it is */
      finish (task);
      return;
    }
  /* the removal in a worker thread, on the same data; the takeover finishes back in the
   * main thread, where its slot is given back */
  inner = g_task_new (NULL, NULL, remove_done_cb, g_object_ref (task));
  g_task_set_task_data (inner, data, NULL);
  g_task_run_in_thread (inner, remove_thread);
}

/* takes a slot until finish(); the queue's reference to the task goes to delete_cb */
static void
start (GTask *task)
{
  TakeoverData *data = g_task_get_task_data (task);
  ShimwatchContainerdTakeoverRequest *request = data->request;

  data->takeovers->running++;
  /* 1. the shim's own delete, to completion */
  shimwatch_launcher_delete_async (data->takeovers->launcher, request->shim_binary,
                                   request->namespace_, request->id, request->bundle,
                                   request->timeout_ms, delete_cb, task);
}

static void
start_next (ShimwatchContainerdTakeovers *takeovers)
{
  while (takeovers->running < takeovers->max_running && !g_queue_is_empty (&takeovers->waiting))
    start (g_queue_pop_head (&takeovers->waiting));
}

void
shimwatch_containerd_takeover_async (ShimwatchContainerdTakeovers       *takeovers,
                                     ShimwatchContainerdTakeoverRequest *request,
                                     GAsyncReadyCallback                 callback,
                                     gpointer                            user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, NULL, callback, user_data);
  TakeoverData *data = g_new0 (TakeoverData, 1);

  g_task_set_source_tag (task, shimwatch_containerd_takeover_async);
  data->takeovers = g_rc_box_acquire (takeovers);
  data->request = request;
  data->result = g_new0 (ShimwatchContainerdTakeoverResult, 1);
  g_task_set_task_data (task, data, (GDestroyNotify) takeover_data_free);
  if (request->shim_binary == NULL)
    {
      /* nothing to run: no slot to wait for */
      data->result->delete_error = g_strdup ("no allowed shim binary to run delete with");
      g_task_return_boolean (task, TRUE);
      return;
    }
  g_queue_push_tail (&takeovers->waiting, g_steal_pointer (&task));
  start_next (takeovers);
}

ShimwatchContainerdTakeovers *
shimwatch_containerd_takeovers_new (ShimwatchLauncher *launcher,
                                    guint              max_running)
{
  ShimwatchContainerdTakeovers *takeovers = g_rc_box_new0 (ShimwatchContainerdTakeovers);

  takeovers->launcher = g_object_ref (launcher);
  takeovers->max_running = MAX (max_running, 1);
  g_queue_init (&takeovers->waiting);
  return takeovers;
}

/* a takeover under way keeps what it needs */
void
shimwatch_containerd_takeovers_free (ShimwatchContainerdTakeovers *takeovers)
{
  if (takeovers != NULL)
    g_rc_box_release_full (takeovers, (GDestroyNotify) takeovers_clear);
}

ShimwatchContainerdTakeoverResult *
shimwatch_containerd_takeover_finish (GAsyncResult *result)
{
  TakeoverData *data;

  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);

  data = g_task_get_task_data (G_TASK (result));
  g_task_propagate_boolean (G_TASK (result), NULL);
  return g_steal_pointer (&data->result);
}
