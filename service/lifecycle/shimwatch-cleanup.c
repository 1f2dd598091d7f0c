/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchCleanup"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>
#include <glib/gstdio.h>
#include <glib-unix.h>

#include "shimwatch-cleanup.h"
#include "shimwatch-containerd-connection.h"
#include "shimwatch-crash-point.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-poller.h"

#define KILL_WAIT_MS       2000
/* only where the cgroup has no cgroup.events to wait on (cgroup v1 alone) */
#define CGROUP_POLL_MS     5
#define CGROUP_EMPTY_WAIT_US (2 * G_USEC_PER_SEC)

/* Step 3's thread, kept for the service's life: it takes what the main thread handed
 * over since it last looked, as one batch, with one wake-up, and hands the batch's
 * results back with one wake-up of the main context (an eventfd in its poller). A
 * removal per wake-up of a pool thread, and a GTask return per removal, cost a wake-up
 * of two threads each, on this machine class about 10 us of CPU for each side. */
typedef struct {
  GMutex     lock;
  GCond      wake;
  GPtrArray *todo;          /* GTask, under lock */
  GPtrArray *done;          /* GTask, under lock */
  gboolean   sleeping;      /* under lock: only then is the thread woken */
  gboolean   stopping;      /* under lock */
  int        done_fd;       /* eventfd: written when done turns non-empty */
  GThread   *thread;
} Remover;

struct _ShimwatchCleanup
{
  GObject               parent_instance;

  ShimwatchLauncher    *launcher;
  ShimwatchCgroupHost  *cgroups;
  guint                 max_concurrent;
  guint                 n_deleting;
  guint                 n_running;
  GQueue                waiting;   /* GTask waiting for a delete slot */
  /* step 3: the removals queued in one turn of the main loop, handed to the remover as
   * one batch before the loop sleeps again */
  GPtrArray            *turn;      /* GTask */
  GSource              *turn_source;
  Remover              *remover;   /* NULL: each removal in a thread of GLib's pool */
  ShimwatchPollerWatch *done_watch;
};

G_DEFINE_TYPE (ShimwatchCleanup, shimwatch_cleanup, G_TYPE_OBJECT)

ShimwatchCleanupRequest *
shimwatch_cleanup_request_new (void)
{
  ShimwatchCleanupRequest *request = g_new0 (ShimwatchCleanupRequest, 1);

  request->pidfd = -1;
  return request;
}

void
shimwatch_cleanup_request_free (ShimwatchCleanupRequest *request)
{
  if (request == NULL)
    return;
  g_free (request->namespace_);
  g_free (request->id);
  g_free (request->task_dir);
  g_free (request->shim_binary);
  g_free (request->socket_path);
  g_free (request->runc_state_dir);
  g_free (request->cgroup_path);
  if (request->pidfd >= 0)
    close (request->pidfd);
  g_free (request);
}

void
shimwatch_cleanup_result_free (ShimwatchCleanupResult *result)
{
  if (result == NULL)
    return;
  g_free (result->delete_error);
  g_free (result->remove_error);
  g_free (result);
}

typedef struct {
  ShimwatchCleanupRequest   *request;
  ShimwatchCleanupResult    *result;
  ShimwatchCgroupHost       *cgroups;
  int                        cgroup_events;   /* the cgroup's cgroup.events, or -1 */
  int                        cgroup_found_in;   /* the first hierarchy that held it */
  ShimwatchCleanupKilledFunc killed;
  gpointer                   killed_data;
  ShimwatchPollerWatch      *pidfd_watch;
  ShimwatchPollerWatch      *cgroup_watch;    /* cgroup.events, once the init is dead */
  guint                      kill_timeout;
  guint                      cgroup_poll;     /* without cgroup.events: a poll timer */
  gboolean                   init_dead;
  gboolean                   holds_slot;
  gboolean                   removal_deferred;   /* it waits for its cgroup: in the pool */
} RunData;

static void
run_data_free (RunData *data)
{
  g_clear_pointer (&data->pidfd_watch, shimwatch_poller_watch_remove);
  g_clear_pointer (&data->cgroup_watch, shimwatch_poller_watch_remove);
  g_clear_handle_id (&data->kill_timeout, g_source_remove);
  g_clear_handle_id (&data->cgroup_poll, g_source_remove);
  g_clear_pointer (&data->cgroups, shimwatch_cgroup_host_unref);
  if (data->cgroup_events >= 0)
    close (data->cgroup_events);
  shimwatch_cleanup_request_free (data->request);
  shimwatch_cleanup_result_free (data->result);
  g_free (data);
}

guint
shimwatch_cleanup_kill_processes_in (const char *dir)
{
  g_autoptr(GDir) proc = g_dir_open ("/proc", 0, NULL);
  const char *name;
  guint n = 0;

  while (proc != NULL && (name = g_dir_read_name (proc)) != NULL)
    {
      g_autofree char *link = NULL;
      g_autofree char *cwd = NULL;
      pid_t pid;

      if (!g_ascii_isdigit (name[0]))
        continue;
      link = g_build_filename ("/proc", name, "cwd", NULL);
      cwd = g_file_read_link (link, NULL);
      pid = (pid_t) g_ascii_strtoll (name, NULL, 10);
      if (cwd != NULL && g_str_equal (cwd, dir) && pid != getpid () && kill (pid, SIGKILL) == 0)
        n++;
    }
  return n;
}

/* -- step 3, in a worker thread -------------------------------------------------------- */

static gboolean remove_entry_at (int           dir_fd,
                                 const char   *dir_name,
                                 const char   *name,
                                 unsigned char type,
                                 GError      **error);

/* A directory below the one being removed, never on another file system (a mount we
 * failed to remove): openat2(2) refuses to cross into one, so no stat tells it */
static int
open_same_mount (int         dir_fd,
                 const char *name)
{
  struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                          .resolve = RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS };
  struct stat parent, child;
  int fd;

  fd = (int) syscall (SYS_openat2, dir_fd, name, &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS)
    return fd;
  /* before Linux 5.6: the devices of the two directories tell */
  fd = openat (dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && (fstat (dir_fd, &parent) != 0 || fstat (fd, &child) != 0 ||
                  parent.st_dev != child.st_dev))
    {
      close (fd);
      errno = EXDEV;
      return -1;
    }
  return fd;
}

/* Everything in the open directory @fd (@name, for messages), read with getdents64(2):
 * its d_type says what each entry is, so nothing is stat()ed */
static gboolean
remove_contents (int         fd,
                 const char *name,
                 GError    **error)
{
  g_autofree char *buffer = g_malloc (4096);

  for (;;)
    {
      long n = syscall (SYS_getdents64, fd, buffer, 4096);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "read %s: %s", name,
                       g_strerror (errno));
          return FALSE;
        }
      if (n == 0)
        return TRUE;
      for (long at = 0; at < n;)
        {
          /* struct linux_dirent64: the kernel's layout, as glibc's struct dirent64 */
          const struct dirent64 *entry = (const struct dirent64 *) (const void *) (buffer + at);

          at += entry->d_reclen;
          if (strcmp (entry->d_name, ".") == 0 || strcmp (entry->d_name, "..") == 0)
            continue;
          if (!remove_entry_at (fd, name, entry->d_name, entry->d_type, error))
            return FALSE;
        }
    }
}

static gboolean
remove_dir_at (int         parent_fd,
               const char *name,
               int         fd,
               GError    **error)
{
  gboolean ok = remove_contents (fd, name, error);

  close (fd);
  if (ok && unlinkat (parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "rmdir %s: %s", name,
                   g_strerror (errno));
      return FALSE;
    }
  return ok;
}

static gboolean
remove_entry_at (int           dir_fd,
                 const char   *dir_name,
                 const char   *name,
                 unsigned char type,
                 GError      **error)
{
  int fd;

  /* a file system that does not tell the type (DT_UNKNOWN): unlink(2) of a directory
   * fails EISDIR */
  if (type != DT_DIR)
    {
      if (unlinkat (dir_fd, name, 0) == 0 || errno == ENOENT)
        return TRUE;
      if (type != DT_UNKNOWN || errno != EISDIR)
        {
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "unlink %s/%s: %s",
                       dir_name, name, g_strerror (errno));
          return FALSE;
        }
    }
  fd = open_same_mount (dir_fd, name);
  if (fd < 0 && errno == ENOENT)
    return TRUE;
  if (fd < 0 && errno == EXDEV)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_BUSY, "%s/%s is still a mount point", dir_name,
                   name);
      return FALSE;
    }
  if (fd < 0)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "open %s/%s: %s", dir_name,
                   name, g_strerror (errno));
      return FALSE;
    }
  return remove_dir_at (dir_fd, name, fd, error);
}

/* @name in @parent_fd and, if it is a directory, everything below it; TRUE if it is gone
 * (or was not there) */
static gboolean
remove_tree_at (int         parent_fd,
                const char *name,
                GError    **error)
{
  int fd = openat (parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

  if (fd < 0 && errno == ENOENT)
    return TRUE;
  /* not a directory (O_NOFOLLOW: a symlink is ELOOP), the link itself goes */
  if (fd < 0 && (errno == ENOTDIR || errno == ELOOP))
    return remove_entry_at (parent_fd, ".", name, DT_UNKNOWN, error);
  if (fd < 0)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "open %s: %s", name,
                   g_strerror (errno));
      return FALSE;
    }
  return remove_dir_at (parent_fd, name, fd, error);
}

static void
unmount_under (const char *path)
{
  g_autofree char *mountinfo = NULL;
  g_auto(GStrv) lines = NULL;
  g_autoptr(GPtrArray) targets = g_ptr_array_new_with_free_func (g_free);
  gsize prefix_length = strlen (path);
  struct stat st;

  /* nothing can be mounted at or below a path that does not exist (a bundle whose rootfs
   * lies elsewhere): the mount table is not read for each task */
  if (lstat (path, &st) != 0 && errno == ENOENT)
    return;
  if (!g_file_get_contents ("/proc/self/mountinfo", &mountinfo, NULL, NULL))
    return;
  lines = g_strsplit (mountinfo, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = g_strsplit (lines[i], " ", 6);

      if (g_strv_length (fields) < 5)
        continue;
      /* field 5 is the mount point (octal escapes aside, fine for our own paths) */
      if (strncmp (fields[4], path, prefix_length) == 0 &&
          (fields[4][prefix_length] == '\0' || fields[4][prefix_length] == '/'))
        g_ptr_array_add (targets, g_strdup (fields[4]));
    }
  /* deepest first */
  for (guint i = targets->len; i > 0; i--)
    if (umount2 (g_ptr_array_index (targets, i - 1), MNT_DETACH | UMOUNT_NOFOLLOW) != 0)
      g_debug ("umount %s: %s", (char *) g_ptr_array_index (targets, i - 1), g_strerror (errno));
}

/* containerd's atomicDelete, for a task directory as for a bundle: rename @path to
 * .<name>, then delete it (a .<name> that an earlier, interrupted removal left goes too) */
static gboolean
atomic_delete (const char *path,
               GError    **error)
{
  g_autofree char *parent = g_path_get_dirname (path);
  g_autofree char *base = g_path_get_basename (path);
  g_autofree char *hidden = g_strconcat (".", base, NULL);
  g_autofree char *hidden_path = g_build_filename (parent, hidden, NULL);
  g_autoptr(GError) local_error = NULL;
  int parent_fd;
  gboolean ok;

  if (g_rename (path, hidden_path) != 0 && errno != ENOENT)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno), "rename %s: %s", path,
                   g_strerror (errno));
      return FALSE;
    }
  parent_fd = open (parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0)
    return errno == ENOENT ? TRUE : (g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno),
                                                  "open %s: %s", parent, g_strerror (errno)),
                                     FALSE);
  ok = remove_tree_at (parent_fd, hidden, &local_error);
  /* The removal never enters another file system: it stops at a mount left below (the
   * rootfs, which `shim delete` unmounts). Only then is the mount table read (it used to
   * be, at every death: O(mounts) each) and what is mounted below detached, and the
   * removal tried again */
  if (!ok && g_error_matches (local_error, G_IO_ERROR, G_IO_ERROR_BUSY))
    {
      g_clear_error (&local_error);
      unmount_under (hidden_path);
      ok = remove_tree_at (parent_fd, hidden, &local_error);
    }
  if (!ok)
    g_propagate_error (error, g_steal_pointer (&local_error));
  close (parent_fd);
  return ok;
}

static gboolean
remove_task_dir (const char *task_dir,
                 GPtrArray  *parents,
                 GError    **error)
{
  g_autofree char *parent = g_path_get_dirname (task_dir);
  gboolean ok;

  /* as containerd's bundle.Delete (the rootfs unmounted: see atomic_delete()) */
  ok = atomic_delete (task_dir, error);
  /* the namespace directory goes when its last task does */
  if (parents == NULL)
    g_rmdir (parent);
  else if (!g_ptr_array_find_with_equal_func (parents, parent, g_str_equal, NULL))
    g_ptr_array_add (parents, g_steal_pointer (&parent));
  return ok;
}

/* containerd's bundle.Delete: the rootfs unmounted and removed (an error other than its
 * absence stops it there), then the bundle and the work directory its `work` link names
 * atomically deleted; the work directory also when the bundle could not be. Containerd's
 * namespace directory stays: containerd made it, and removes it itself. */
static gboolean
remove_bundle (const char *bundle,
               GError    **error)
{
  g_autofree char *work_link = g_build_filename (bundle, "work", NULL);
  g_autofree char *work = g_file_read_link (work_link, NULL);
  g_autofree char *rootfs = g_build_filename (bundle, "rootfs", NULL);
  g_autoptr(GError) bundle_error = NULL;
  gboolean ok;

  unmount_under (rootfs);
  if (g_rmdir (rootfs) != 0 && errno != ENOENT)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "remove %s: %s",
                   rootfs, g_strerror (saved_errno));
      return FALSE;
    }
  ok = atomic_delete (bundle, &bundle_error);
  if (work != NULL && g_path_is_absolute (work) && !atomic_delete (work, ok ? error : NULL))
    ok = FALSE;
  if (bundle_error != NULL)
    g_propagate_error (error, g_steal_pointer (&bundle_error));
  return ok;
}

gboolean
shimwatch_cleanup_remove_task_dir (const char *task_dir,
                                   GError    **error)
{
  return remove_task_dir (task_dir, NULL, error);
}

gboolean
shimwatch_cleanup_remove_bundle (const char *bundle,
                                 GError    **error)
{
  return remove_bundle (bundle, error);
}

/* in the worker thread: the task is deleted or dead, so whatever still runs in its cgroup
 * goes, and then the cgroup (runc removes it itself, except after a failed delete).
 * FALSE, with nothing done but the kill, if it would have to wait for the cgroup to
 * empty and @may_wait is FALSE */
static gboolean
remove_cgroup (RunData *data,
               gboolean may_wait)
{
  ShimwatchCleanupRequest *request = data->request;
  g_autoptr(GError) error = NULL;
  gint64 deadline = g_get_monotonic_time () + CGROUP_EMPTY_WAIT_US;
  guint killed;

  /* runc's delete removes the cgroup from every hierarchy: then there is nothing to kill,
   * wait for or remove (each of which would look for it in every hierarchy again). It is
   * looked for where it was found as the cleanup started, not in every hierarchy (ten
   * failing stats per death on a hybrid host): a delete that failed left it there, and
   * one that removed it there removed it everywhere, as a cgroup that outlives runc's
   * rmdir holds a process, which is in the task's cgroup of every hierarchy runc made */
  if (!shimwatch_cgroup_exists_in (data->cgroups, request->cgroup_path, data->cgroup_found_in))
    return TRUE;
  killed = shimwatch_cgroup_kill_at (data->cgroups, request->cgroup_path, data->cgroup_events);
  if (killed > 0)
    shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (request), "killed what still ran in cgroup %s",
                        request->cgroup_path);
  if (!may_wait && shimwatch_cgroup_is_populated_at (data->cgroups, request->cgroup_path,
                                                     data->cgroup_events))
    return FALSE;
  /* until it reads empty: woken by each change of cgroup.events (read by the check), or
   * polled where there is none */
  while (shimwatch_cgroup_is_populated_at (data->cgroups, request->cgroup_path,
                                           data->cgroup_events))
    {
      gint64 left_ms = (deadline - g_get_monotonic_time ()) / 1000;

      if (left_ms <= 0)
        break;
      if (data->cgroup_events < 0)
        g_usleep (CGROUP_POLL_MS * 1000);
      else if (poll (&(struct pollfd) { .fd = data->cgroup_events, .events = POLLPRI }, 1,
                     (int) left_ms) < 0 && errno != EINTR)
        break;
    }
  if (!shimwatch_cgroup_remove (data->cgroups, request->cgroup_path, &error))
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request),
                        "cgroup %s stays: %s", request->cgroup_path,
                        error->message);
  return TRUE;
}

/* the socket file a dead shim leaves; one of containerd's only if nothing answers on it
 * (a shim started again for the task may listen at the same address by now) */
static void
remove_socket (ShimwatchCleanupRequest *request)
{
  struct stat st;

  if (request->socket_path == NULL || g_lstat (request->socket_path, &st) != 0 ||
      !S_ISSOCK (st.st_mode))
    return;
  if (request->containerd_bundle && shimwatch_containerd_socket_answers (request->socket_path))
    return;
  if (g_unlink (request->socket_path) != 0 && errno != ENOENT)
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request), "cannot remove shim socket %s: %s",
                        request->socket_path, g_strerror (errno));
}

/* step 3 of containerd's bundle, after its `shim delete` */
static void
remove_containerd_bundle (RunData *data)
{
  ShimwatchCleanupRequest *request = data->request;
  g_autoptr(GError) error = NULL;

  /* as containerd: a bundle whose delete failed is left where it is, and so is the socket */
  if (!data->result->delete_ok)
    {
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request),
                          "bundle %s stays for containerd: its shim delete failed",
                          request->task_dir);
      return;
    }
  data->result->removed = remove_bundle (request->task_dir, &error);
  if (!data->result->removed)
    {
      data->result->remove_error = g_strdup (error->message);
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request), "bundle %s stays: %s",
                          request->task_dir, error->message);
    }
  /* then the socket file of the dead shim */
  remove_socket (request);
}

/* The removal of one task's state, in a thread; FALSE if it has to wait for the task's
 * cgroup to empty and @may_wait is FALSE: then what it did is done again, harmlessly,
 * by a call that may wait. @parents: where the task directory's parent goes (its
 * namespace's directory, removed by the caller with the namespace's last task), or NULL
 * to remove it here. */
static gboolean
remove_state_now (RunData   *data,
                  gboolean   may_wait,
                  GPtrArray *parents)
{
  ShimwatchCleanupRequest *request = data->request;
  g_autoptr(GError) error = NULL;

  if (request->containerd_bundle)
    {
      remove_containerd_bundle (data);
      return TRUE;
    }

  /* the runc state goes with the process: never orphan a running container. runc's
   * delete removed it already, but after a failed one: one open(2) that fails says so
   * (the path is absolute: no open and close of its parent first) */
  if (request->runc_state_dir != NULL && data->result->task_killed &&
      !remove_tree_at (AT_FDCWD, request->runc_state_dir, &error))
    {
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request), "runc state %s stays: %s",
                          request->runc_state_dir, error->message);
      g_clear_error (&error);
    }

  remove_socket (request);

  /* never before delete, and only when delete worked or the task is dead: the task dir
   * holds what a later delete (Reap) needs */
  if (data->result->delete_ok || data->result->task_killed)
    {
      if (request->cgroup_path != NULL && !remove_cgroup (data, may_wait))
        return FALSE;
      data->result->removed = remove_task_dir (request->task_dir, parents, &error);
      if (!data->result->removed)
        {
          data->result->remove_error = g_strdup (error->message);
          shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request),
                              "task directory %s stays: %s", request->task_dir, error->message);
        }
    }
  else
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request),
                        "task directory %s stays for a later Reap: delete failed and the task "
                        "may live", request->task_dir);
  return TRUE;
}

/* in a thread of GLib's pool: a removal that waits for its cgroup, or any removal when
 * the cleanup could not start its own thread */
static void
remove_state_thread (GTask        *task,
                     gpointer      source_object,
                     gpointer      task_data,
                     GCancellable *cancellable)
{
  remove_state_now (task_data, TRUE, NULL);
  g_task_return_boolean (task, TRUE);
}

/* -- step 2: delete, bounded by the concurrency limit ----------------------------------- */

static void start_next_waiting (ShimwatchCleanup *self);

static void
release_slot (ShimwatchCleanup *self,
              RunData          *data)
{
  if (!data->holds_slot)
    return;
  data->holds_slot = FALSE;
  self->n_deleting--;
  start_next_waiting (self);
}

/* the main thread: a task's removal is done */
static void
removal_done (GTask *task)
{
  ShimwatchCleanup *self = g_task_get_source_object (task);
  RunData *data = g_task_get_task_data (task);

  shimwatch_crash_point ("state-removed");
  release_slot (self, data);
  self->n_running--;
  shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (data->request),
                      "cleanup finished (delete %s, %s %s)",
                      data->result->delete_ok ? "ok" : "failed",
                      data->request->containerd_bundle ? "bundle" : "task dir",
                      data->result->removed ? "removed" : "kept");
  g_task_return_pointer (task, g_steal_pointer (&data->result),
                         (GDestroyNotify) shimwatch_cleanup_result_free);
  /* the reference shimwatch_cleanup_run_async() made */
  g_object_unref (task);
}

static void
remove_state_done_cb (GObject      *source,
                      GAsyncResult *result,
                      gpointer      user_data)
{
  removal_done (user_data);
}

/* the removal in a thread of GLib's pool, its result back in this context */
static void
remove_state_in_pool (GTask *task)
{
  g_autoptr(GTask) thread_task = g_task_new (NULL, NULL, remove_state_done_cb, task);

  g_task_set_task_data (thread_task, g_task_get_task_data (task), NULL);
  g_task_run_in_thread (thread_task, remove_state_thread);
}

static gpointer
remover_thread (gpointer user_data)
{
  Remover *remover = user_data;
  g_autoptr(GPtrArray) parents = g_ptr_array_new_with_free_func (g_free);

  g_mutex_lock (&remover->lock);
  for (;;)
    {
      g_autoptr(GPtrArray) batch = NULL;
      gboolean was_empty;

      while (!remover->stopping && remover->todo->len == 0)
        {
          remover->sleeping = TRUE;
          g_cond_wait (&remover->wake, &remover->lock);
          remover->sleeping = FALSE;
        }
      if (remover->todo->len == 0)
        break;
      batch = g_steal_pointer (&remover->todo);
      remover->todo = g_ptr_array_new ();
      g_mutex_unlock (&remover->lock);

      /* in the order handed over; one that waits for its cgroup to empty goes back to
       * the main thread, for a thread of its own, and holds up none of the others */
      for (guint i = 0; i < batch->len; i++)
        {
          GTask *task = g_ptr_array_index (batch, i);
          RunData *data = g_task_get_task_data (task);

          data->removal_deferred = !remove_state_now (data, FALSE, parents);
        }
      /* each namespace's directory once, when its last task went (it fails while one
       * is left) */
      for (guint i = 0; i < parents->len; i++)
        g_rmdir (g_ptr_array_index (parents, i));
      g_ptr_array_set_size (parents, 0);

      g_mutex_lock (&remover->lock);
      was_empty = remover->done->len == 0;
      g_ptr_array_extend_and_steal (remover->done, g_steal_pointer (&batch));
      if (was_empty)
        {
          guint64 one = 1;

          g_mutex_unlock (&remover->lock);
          /* a counter that cannot overflow here: the main thread reads it at each wake */
          if (write (remover->done_fd, &one, sizeof one) < 0)
            g_warning ("cleanup: cannot wake the main thread: %s", g_strerror (errno));
          g_mutex_lock (&remover->lock);
        }
    }
  g_mutex_unlock (&remover->lock);
  return NULL;
}

/* the main thread: what the remover finished since it last looked */
static gboolean
removals_done_cb (int                   fd,
                  ShimwatchPollerEvents events,
                  gpointer              user_data)
{
  ShimwatchCleanup *self = user_data;
  g_autoptr(GPtrArray) done = NULL;
  guint64 count;

  if (read (fd, &count, sizeof count) < 0 && errno != EAGAIN)
    g_warning ("cleanup: reading the remover's eventfd: %s", g_strerror (errno));
  g_mutex_lock (&self->remover->lock);
  done = g_steal_pointer (&self->remover->done);
  self->remover->done = g_ptr_array_new ();
  g_mutex_unlock (&self->remover->lock);
  /* the cleanup outlives this: every task holds it */
  for (guint i = 0; i < done->len; i++)
    {
      GTask *task = g_ptr_array_index (done, i);
      RunData *data = g_task_get_task_data (task);

      if (data->removal_deferred)
        remove_state_in_pool (task);
      else
        removal_done (task);
    }
  return G_SOURCE_CONTINUE;
}

/* the main thread, before its loop sleeps: this turn's removals to the remover at once */
static void
hand_over (ShimwatchCleanup *self)
{
  Remover *remover = self->remover;
  gboolean wake;

  g_mutex_lock (&remover->lock);
  g_ptr_array_extend_and_steal (remover->todo, g_steal_pointer (&self->turn));
  wake = remover->sleeping;
  g_mutex_unlock (&remover->lock);
  self->turn = g_ptr_array_new ();
  /* awake, it looks for more before it sleeps: no wake-up needed */
  if (wake)
    g_cond_signal (&remover->wake);
}

typedef struct {
  GSource           source;
  ShimwatchCleanup *cleanup;    /* the source goes first */
} TurnSource;

static gboolean
turn_prepare (GSource *source,
              gint    *timeout)
{
  ShimwatchCleanup *self = ((TurnSource *) source)->cleanup;

  *timeout = -1;
  if (self->turn->len > 0)
    hand_over (self);
  return FALSE;
}

static GSourceFuncs turn_funcs = {
  .prepare = turn_prepare,
};

static void
remove_state (GTask *task)
{
  ShimwatchCleanup *self = g_task_get_source_object (task);

  if (self->remover == NULL)
    remove_state_in_pool (task);
  else
    g_ptr_array_add (self->turn, task);
}

static void
delete_done_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  GTask *task = user_data;
  RunData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;

  data->result->delete_ok = shimwatch_launcher_delete_finish (SHIMWATCH_LAUNCHER (source), result,
                                                              &data->result->deleted, &error);
  if (!data->result->delete_ok)
    {
      data->result->delete_error = g_strdup (error->message);
      data->result->delete_timed_out = g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT);
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (data->request),
                          "shim delete failed: %s", error->message);
    }
  else
    {
      /* runc's delete --force killed it if it was still alive */
      data->result->task_killed = TRUE;
      shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (data->request),
                          "shim delete: pid %u, exit status %u",
                          data->result->deleted.pid, data->result->deleted.exit_status);
    }
  shimwatch_crash_point ("shim-deleted");

  remove_state (task);
  /* the slot bounds the `shim delete`s that run at once: the next one starts now, not
   * once this task's directory and cgroup are gone (its own thread does that meanwhile) */
  release_slot (g_task_get_source_object (task), data);
}

static void
start_delete (GTask *task)
{
  ShimwatchCleanup *self = g_task_get_source_object (task);
  RunData *data = g_task_get_task_data (task);
  ShimwatchCleanupRequest *request = data->request;

  /* no `shim delete` to run: no slot taken (the caller goes on with the next one) */
  if (request->deleted)
    {
      /* the shim's own Delete removed runc's state and reaped the task */
      data->result->delete_ok = TRUE;
      data->result->task_killed = TRUE;
      remove_state (task);
      return;
    }
  if (request->shim_binary == NULL)
    {
      data->result->delete_error = g_strdup ("no shim binary is known for this task");
      remove_state (task);
      return;
    }
  data->holds_slot = TRUE;
  self->n_deleting++;
  shimwatch_launcher_delete_async (self->launcher, request->shim_binary, request->namespace_,
                                   request->id, request->task_dir, request->timeout_ms,
                                   delete_done_cb, task);
}

static void
start_next_waiting (ShimwatchCleanup *self)
{
  while (self->n_deleting < self->max_concurrent && !g_queue_is_empty (&self->waiting))
    start_delete (g_queue_pop_head (&self->waiting));
}

static void
queue_delete (GTask *task)
{
  ShimwatchCleanup *self = g_task_get_source_object (task);
  RunData *data = g_task_get_task_data (task);

  if (self->n_deleting >= self->max_concurrent)
    shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (data->request),
                        "waiting for one of %u running cleanups",
                        self->n_deleting);
  g_queue_push_tail (&self->waiting, task);
  start_next_waiting (self);
}

/* -- step 1: kill through the pidfd ---------------------------------------------------- */

/* dead: the init is dead; emptied: and the cgroup was just seen empty */
static void
task_dead (GTask   *task,
           gboolean dead,
           gboolean emptied)
{
  RunData *data = g_task_get_task_data (task);

  g_clear_pointer (&data->pidfd_watch, shimwatch_poller_watch_remove);
  g_clear_pointer (&data->cgroup_watch, shimwatch_poller_watch_remove);
  g_clear_handle_id (&data->kill_timeout, g_source_remove);
  g_clear_handle_id (&data->cgroup_poll, g_source_remove);
  if (dead && !emptied && data->request->cgroup_path != NULL &&
      shimwatch_cgroup_is_populated_at (data->cgroups, data->request->cgroup_path,
                                        data->cgroup_events))
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (data->request),
                        "processes in cgroup %s outlived SIGKILL for %u ms",
                        data->request->cgroup_path, KILL_WAIT_MS);
  if (dead && emptied && data->request->cgroup_path != NULL)
    data->result->emptied_at = g_get_monotonic_time ();
  if (dead)
    {
      data->result->task_killed = TRUE;
      shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (data->request), "task process %u is dead",
                          data->request->task_pid);
      if (data->killed != NULL)
        data->killed (data->request->task_pid, g_get_real_time (), data->killed_data);
    }
  else
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (data->request),
                        "task process %u did not die within %u ms of SIGKILL",
                        data->request->task_pid, KILL_WAIT_MS);
  queue_delete (task);
}

/* the whole container is dead once its init is and its cgroup is empty: only then is
 * TaskExit true for every process of the task */
static gboolean
cgroup_populated (RunData *data)
{
  return data->request->cgroup_path != NULL &&
         shimwatch_cgroup_is_populated_at (data->cgroups, data->request->cgroup_path,
                                           data->cgroup_events);
}

/* cgroup v1 alone: nothing tells when the cgroup empties, it is looked at */
static gboolean
cgroup_poll_cb (gpointer user_data)
{
  GTask *task = user_data;
  RunData *data = g_task_get_task_data (task);

  if (cgroup_populated (data))
    return G_SOURCE_CONTINUE;
  data->cgroup_poll = 0;
  task_dead (task, TRUE, TRUE);
  return G_SOURCE_REMOVE;
}

/* cgroup2 tells each change of cgroup.events as priority data (POLLPRI); reading the file
 * takes the change, so this is called again only for the next one */
static gboolean
cgroup_events_cb (int                   fd,
                  ShimwatchPollerEvents events,
                  gpointer              user_data)
{
  GTask *task = user_data;
  RunData *data = g_task_get_task_data (task);

  if (cgroup_populated (data))
    return G_SOURCE_CONTINUE;
  task_dead (task, TRUE, TRUE);      /* removes this watch */
  return G_SOURCE_REMOVE;
}

static gboolean
pidfd_ready_cb (int                   fd,
                ShimwatchPollerEvents events,
                gpointer              user_data)
{
  GTask *task = user_data;
  RunData *data = g_task_get_task_data (task);

  /* out of the set before anything this death sets off closes an fd */
  g_clear_pointer (&data->pidfd_watch, shimwatch_poller_watch_remove);
  data->init_dead = TRUE;
  if (!cgroup_populated (data))
    {
      task_dead (task, TRUE, TRUE);
      return G_SOURCE_REMOVE;
    }
  /* the read above took every change so far: the watch wakes for the next one (one made
   * in between finds the watch ready at once); the kill timeout stays the deadline */
  if (data->cgroup_events >= 0)
    data->cgroup_watch = shimwatch_poller_add (shimwatch_poller_get_default (),
                                               data->cgroup_events, SHIMWATCH_POLLER_PRI,
                                               cgroup_events_cb, task, NULL, NULL);
  if (data->cgroup_watch == NULL)
    data->cgroup_poll = g_timeout_add (CGROUP_POLL_MS, cgroup_poll_cb, task);
  return G_SOURCE_REMOVE;
}

static gboolean
kill_timeout_cb (gpointer user_data)
{
  GTask *task = user_data;
  RunData *data = g_task_get_task_data (task);

  data->kill_timeout = 0;
  task_dead (task, data->init_dead, FALSE);
  return G_SOURCE_REMOVE;
}

void
shimwatch_cleanup_run_async (ShimwatchCleanup          *self,
                             ShimwatchCleanupRequest   *request,
                             ShimwatchCleanupKilledFunc killed,
                             gpointer                   killed_data,
                             GAsyncReadyCallback        callback,
                             gpointer                   user_data)
{
  GTask *task;
  RunData *data;

  g_return_if_fail (SHIMWATCH_IS_CLEANUP (self));
  g_return_if_fail (request != NULL && request->task_dir != NULL);
  g_return_if_fail (request->cgroup_path == NULL || self->cgroups != NULL);
  /* containerd's bundle: its shim's task is containerd's to kill, its runc state and
   * cgroup the shim's delete removes */
  g_return_if_fail (!request->containerd_bundle ||
                    (!request->kill_task && !request->kill_cgroup && !request->deleted &&
                     request->cgroup_path == NULL && request->runc_state_dir == NULL));

  /* deliberately no GCancellable: see the header */
  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, shimwatch_cleanup_run_async);
  data = g_new0 (RunData, 1);
  data->cgroup_events = -1;
  data->cgroup_found_in = -1;
  data->request = request;
  data->result = g_new0 (ShimwatchCleanupResult, 1);
  data->killed = killed;
  data->killed_data = killed_data;
  if (self->cgroups != NULL)
    data->cgroups = shimwatch_cgroup_host_ref (self->cgroups);
  g_task_set_task_data (task, data, (GDestroyNotify) run_data_free);
  self->n_running++;
  shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (request), "cleanup started");

  /* cgroup2's cgroup.events, read at least twice (after the kill, once the init is
   * dead): opened once. Opened, it says the cgroup is there, in cgroup2's hierarchy. A
   * cgroup in no hierarchy (gone with its container, or never made by the runtime) holds
   * nothing: it is not killed, polled or removed (each of which would look for it in
   * every hierarchy, several times per death) */
  if (request->cgroup_path != NULL)
    {
      data->cgroup_events = shimwatch_cgroup_open_events (self->cgroups, request->cgroup_path);
      if (data->cgroup_events >= 0)
        data->cgroup_found_in = shimwatch_cgroup_host_get_unified (self->cgroups);
      if (data->cgroup_found_in < 0)
        data->cgroup_found_in = shimwatch_cgroup_find (self->cgroups, request->cgroup_path);
      if (data->cgroup_found_in < 0)
        g_clear_pointer (&request->cgroup_path, g_free);
    }

  /* the shim is gone: what runs in the task's cgroup (the init's children too, when the
   * container has no PID namespace of its own) dies with the init, found without looking
   * at any other process of the machine */
  if (request->kill_cgroup && request->cgroup_path != NULL)
    {
      /* in one write where cgroup2 can: whether anything was there, the init's pidfd and
       * cgroup.events tell next, no read of it is needed now */
      if (shimwatch_cgroup_kill_subtree (self->cgroups, request->cgroup_path))
        shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (request),
                            "sent SIGKILL to what runs in cgroup %s",
                            request->cgroup_path);
      else if (shimwatch_cgroup_kill_at (self->cgroups, request->cgroup_path,
                                         data->cgroup_events) > 0)
        shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (request), "killed what ran in cgroup %s",
                            request->cgroup_path);
    }

  if (request->kill_task && request->pidfd >= 0)
    {
      if (pidfd_send_signal (request->pidfd, SIGKILL, NULL, 0) != 0 && errno != ESRCH)
        shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request),
                            "SIGKILL to task process %u: %s",
                            request->task_pid, g_strerror (errno));
      /* the pidfd turns readable when the process has exited (zombie or reaped) */
      data->pidfd_watch = shimwatch_poller_add (shimwatch_poller_get_default (), request->pidfd,
                                                SHIMWATCH_POLLER_IN, pidfd_ready_cb, task, NULL,
                                                NULL);
      if (data->pidfd_watch == NULL)
        shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (request),
                            "cannot watch task process %u: its death is known at the kill "
                            "timeout", request->task_pid);
      data->kill_timeout = g_timeout_add (KILL_WAIT_MS, kill_timeout_cb, task);
      return;
    }
  queue_delete (task);
}

ShimwatchCleanupResult *
shimwatch_cleanup_run_finish (ShimwatchCleanup *self,
                              GAsyncResult     *result)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  return g_task_propagate_pointer (G_TASK (result), NULL);
}

guint
shimwatch_cleanup_get_n_running (ShimwatchCleanup *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CLEANUP (self), 0);
  return self->n_running;
}

/* what remover_start() made, once its thread has ended (or never started) */
static void
remover_free (Remover *remover)
{
  close (remover->done_fd);
  g_ptr_array_unref (remover->todo);
  g_ptr_array_unref (remover->done);
  g_mutex_clear (&remover->lock);
  g_cond_clear (&remover->wake);
  g_free (remover);
}

static Remover *
remover_start (ShimwatchCleanup *self)
{
  g_autofree Remover *remover = g_new0 (Remover, 1);
  g_autoptr(GError) error = NULL;

  remover->done_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (remover->done_fd < 0)
    {
      g_warning ("cleanup: no eventfd for its thread (%s): each removal takes a thread of "
                 "GLib's pool", g_strerror (errno));
      return NULL;
    }
  self->done_watch = shimwatch_poller_add (shimwatch_poller_get_default (), remover->done_fd,
                                           SHIMWATCH_POLLER_IN, removals_done_cb, self, NULL,
                                           &error);
  if (self->done_watch == NULL)
    {
      g_warning ("cleanup: cannot watch its thread's eventfd (%s): each removal takes a "
                 "thread of GLib's pool", error->message);
      close (remover->done_fd);
      return NULL;
    }
  g_mutex_init (&remover->lock);
  g_cond_init (&remover->wake);
  remover->todo = g_ptr_array_new ();
  remover->done = g_ptr_array_new ();
  /* its name is what /proc/<pid>/task/<tid>/comm and top say */
  remover->thread = g_thread_try_new ("sw-removal", remover_thread, remover, &error);
  if (remover->thread == NULL)
    {
      g_warning ("cleanup: cannot start its thread (%s): each removal takes a thread of "
                 "GLib's pool", error->message);
      g_clear_pointer (&self->done_watch, shimwatch_poller_watch_remove);
      remover_free (g_steal_pointer (&remover));
      return NULL;
    }
  return g_steal_pointer (&remover);
}

/* every task holds the cleanup: none is queued, running or done-but-not-told by now */
static void
remover_stop (ShimwatchCleanup *self)
{
  Remover *remover = g_steal_pointer (&self->remover);

  g_mutex_lock (&remover->lock);
  remover->stopping = TRUE;
  g_cond_signal (&remover->wake);
  g_mutex_unlock (&remover->lock);
  g_thread_join (remover->thread);
  g_clear_pointer (&self->done_watch, shimwatch_poller_watch_remove);
  remover_free (remover);
}

ShimwatchCleanup *
shimwatch_cleanup_new (ShimwatchLauncher   *launcher,
                       ShimwatchCgroupHost *cgroups,
                       guint                max_concurrent)
{
  ShimwatchCleanup *self = g_object_new (SHIMWATCH_TYPE_CLEANUP, NULL);
  g_autoptr(GMainContext) context = g_main_context_ref_thread_default ();

  self->launcher = g_object_ref (launcher);
  if (cgroups != NULL)
    self->cgroups = shimwatch_cgroup_host_ref (cgroups);
  self->max_concurrent = MAX (max_concurrent, 1);
  /* its thread starts now and stays (blocked while idle, it costs no CPU) */
  self->remover = remover_start (self);
  if (self->remover != NULL)
    {
      /* called before each poll of the loop, ahead of the sources that may be ready */
      self->turn_source = g_source_new (&turn_funcs, sizeof (TurnSource));
      ((TurnSource *) self->turn_source)->cleanup = self;
      g_source_set_priority (self->turn_source, G_PRIORITY_HIGH);
      g_source_set_static_name (self->turn_source, "shimwatch cleanup hand-over");
      g_source_attach (self->turn_source, context);
    }
  return self;
}

static void
shimwatch_cleanup_finalize (GObject *object)
{
  ShimwatchCleanup *self = SHIMWATCH_CLEANUP (object);

  if (self->turn_source != NULL)
    {
      g_source_destroy (self->turn_source);
      g_clear_pointer (&self->turn_source, g_source_unref);
    }
  if (self->remover != NULL)
    remover_stop (self);
  g_ptr_array_unref (self->turn);
  g_clear_object (&self->launcher);
  g_clear_pointer (&self->cgroups, shimwatch_cgroup_host_unref);
  G_OBJECT_CLASS (shimwatch_cleanup_parent_class)->finalize (object);
}

static void
shimwatch_cleanup_class_init (ShimwatchCleanupClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_cleanup_finalize;
}

static void
shimwatch_cleanup_init (ShimwatchCleanup *self)
{
  g_queue_init (&self->waiting);
  self->turn = g_ptr_array_new ();
}

gboolean
shimwatch_cleanup_remove_tree (const char *parent,
                               const char *name,
                               GError    **error)
{
  int parent_fd = open (parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  gboolean ok;

  if (parent_fd < 0)
    return errno == ENOENT ? TRUE : (g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno),
                                                  "open %s: %s", parent, g_strerror (errno)),
                                     FALSE);
  ok = remove_tree_at (parent_fd, name, error);
  close (parent_fd);
  return ok;
}

void
shimwatch_cleanup_unmount_under (const char *path)
{
  unmount_under (path);
}
