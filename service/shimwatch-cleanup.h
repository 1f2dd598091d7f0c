/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchCleanup: what happens after a shim's connection closed. One GTask per cleanup
 * with no GCancellable anywhere: nothing that happens to a caller, a request or the
 * service can stop it; only its own timeout bounds the `shim delete` it runs
 * (containerd's context.WithoutCancel + io.containerd.timeout.shim.cleanup).
 *
 *  1. if asked: SIGKILL the task's init through its pidfd and everything in the task's
 *     cgroup (cgroup.kill, or cgroup.procs), and wait until the init is dead and the
 *     cgroup empty; report that at once (the caller emits TaskExit from it, well before
 *     delete ends);
 *  2. run `<shim> delete` in the task directory, at most max_concurrent at a time (not
 *     after a completed Delete: the shim removed runc's state then, and the v1 shim's
 *     delete fails once its own Shutdown removed its socket; containerd does not run it
 *     then either);
 *  3. in a worker thread: unmount <task dir>/rootfs, rename the task dir to .<id> and
 *     delete it, unlink the shim socket file, remove leftover runc state, and remove the
 *     task's cgroup from every hierarchy once nothing runs in it.
 *
 * Every step tolerates "already done", so a cleanup can run again over the same state.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-cgroup.h"
#include "shimwatch-launcher.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_CLEANUP (shimwatch_cleanup_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchCleanup, shimwatch_cleanup, SHIMWATCH, CLEANUP, GObject)

typedef struct {
  char    *namespace_;
  char    *id;
  char    *task_dir;
  char    *shim_binary;       /* NULL: no shim binary known, skip `delete` */
  char    *socket_path;       /* shim socket file to unlink, or NULL */
  char    *runc_state_dir;    /* <runc root>/<ns>/<id> */
  guint32  task_pid;
  int      pidfd;             /* owned by the request; -1 if none */
  gboolean kill_task;         /* SIGKILL the task first (its shim is gone) */
  char    *cgroup_path;       /* the task's own cgroup, or NULL if not known */
  gboolean kill_cgroup;       /* SIGKILL what still runs in it before anything else */
  gboolean deleted;           /* the shim's Delete completed: no `shim delete` */
  guint    timeout_ms;
} ShimwatchCleanupRequest;

ShimwatchCleanupRequest *shimwatch_cleanup_request_new  (void);
void                     shimwatch_cleanup_request_free (ShimwatchCleanupRequest *request);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCleanupRequest, shimwatch_cleanup_request_free)

typedef struct {
  gboolean      task_killed;  /* step 1 ran and the process is dead */
  gboolean      delete_ok;    /* `delete` answered with a DeleteResponse */
  ShimwatchExit deleted;      /* its answer, when delete_ok */
  char         *delete_error; /* why not, otherwise */
  gboolean      delete_timed_out; /* the delete was killed at the request's timeout */
  gboolean      removed;      /* the task directory is gone */
  gint64        emptied_at;   /* when (g_get_monotonic_time()) step 1 saw the task's cgroup
                               * empty, its init dead; 0: it never did */
} ShimwatchCleanupResult;

void shimwatch_cleanup_result_free (ShimwatchCleanupResult *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCleanupResult, shimwatch_cleanup_result_free)

/* called on the main context as soon as the task's process is known dead */
typedef void (*ShimwatchCleanupKilledFunc) (guint32  pid,
                                            gint64   when,
                                            gpointer user_data);

ShimwatchCleanup       *shimwatch_cleanup_new        (ShimwatchLauncher          *launcher,
                                                      ShimwatchCgroupHost        *cgroups,
                                                      guint                       max_concurrent);
void                    shimwatch_cleanup_run_async  (ShimwatchCleanup           *self,
                                                      ShimwatchCleanupRequest    *request,
                                                      ShimwatchCleanupKilledFunc  killed,
                                                      gpointer                    killed_data,
                                                      GAsyncReadyCallback         callback,
                                                      gpointer                    user_data);
ShimwatchCleanupResult *shimwatch_cleanup_run_finish (ShimwatchCleanup           *self,
                                                      GAsyncResult               *result);
guint                   shimwatch_cleanup_get_n_running (ShimwatchCleanup        *self);

/* SIGKILL every process whose working directory is dir: a shim we could not talk to
 * (its pid unknown) still runs in its task directory, as the runtime-v2 contract says.
 * Returns how many were signalled. This reads every process of the machine: only for
 * what has no cgroup and no pid known (records older than per-task cgroups, a shim that
 * never answered). */
guint shimwatch_cleanup_kill_processes_in (const char *dir);

/* the thread part, also usable on its own (unit tests, Reap of leftovers) */
gboolean shimwatch_cleanup_remove_task_dir (const char  *task_dir,
                                            GError     **error);
/* remove parent/name and everything below it, never crossing into another file system;
 * TRUE if it is gone (or was not there) */
gboolean shimwatch_cleanup_remove_tree     (const char  *parent,
                                            const char  *name,
                                            GError     **error);
/* detach every mount at or below path, deepest first */
void     shimwatch_cleanup_unmount_under   (const char  *path);

G_END_DECLS
