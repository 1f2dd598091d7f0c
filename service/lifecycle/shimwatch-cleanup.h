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
 * A request of containerd's bundle (companion mode: containerd did not clean up after a
 * dead shim, see shimwatch-containerd-task.h) has no step 1, and steps 2 and 3 in the
 * order containerd follows (runtime/v2/shim.go, bundle.go), because the order matters:
 * renaming a bundle while another `shim delete` still runs in it makes that delete fail
 * and leaves the container running.
 *  2. `<shim> delete` in the bundle, to completion, in the same queue of slots;
 *  3. only after it, and only if it worked (as containerd, a bundle whose delete failed
 *     is left where it is): unmount <bundle>/rootfs and remove it, rename the bundle and
 *     the target of its `work` link to .<name> and remove them (containerd's
 *     bundle.Delete and atomicDelete); then the shim's socket file, if nothing answers on
 *     it. No runc state, no cgroup, and containerd's namespace directory stays. Nothing
 *     here writes containerd's metadata or opens the task's `log` FIFO.
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
  gboolean containerd_bundle; /* task_dir is containerd's bundle of a task whose shim
                               * died: removed as containerd removes it (see above); with
                               * no kill, cgroup, runc state or completed Delete */
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
  gboolean      removed;      /* the task directory (or bundle and work directory) is gone */
  char         *remove_error; /* why not, when step 3 tried */
  gint64        emptied_at;   /* when (g_get_monotonic_time()) step 1 saw the task's cgroup
                               * empty, its init dead; 0: it never did */
} ShimwatchCleanupResult;

void shimwatch_cleanup_result_free (ShimwatchCleanupResult *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCleanupResult, shimwatch_cleanup_result_free)

/* called on the main context as soon as the task's process is known dead */
typedef void (*ShimwatchCleanupKilledFunc) (guint32  pid,
                                            gint64   when,
                                            gpointer user_data);

/* @cgroups: NULL for a cleanup none of whose requests names a cgroup (the companion's,
 * whose requests are all of containerd's bundles). Every request under way holds the
 * cleanup: what is queued or running when its owner lets go still runs to its end. */
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
/* step 3 of a containerd bundle on its own: the rootfs unmounted and removed, the bundle
 * and its work directory atomically deleted; TRUE if both are gone */
gboolean shimwatch_cleanup_remove_bundle   (const char  *bundle,
                                            GError     **error);
/* remove parent/name and everything below it, never crossing into another file system;
 * TRUE if it is gone (or was not there) */
gboolean shimwatch_cleanup_remove_tree     (const char  *parent,
                                            const char  *name,
                                            GError     **error);
/* detach every mount at or below path, deepest first */
void     shimwatch_cleanup_unmount_under   (const char  *path);

G_END_DECLS
