/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchContainerdWatcher: finds the runtime-v2 task bundles of a containerd,
 * <state>/io.containerd.runtime.v2.task/<namespace>/<id>/, with one inotify descriptor:
 * an initial scan, then every namespace and bundle that appears or goes. A bundle is
 * "ready" once its shim wrote `address` and runc wrote `init.pid` (the task exists);
 * it is "removed" when containerd (or whoever) renamed it to .<id> or deleted it. Nothing
 * in a bundle is opened but those two names' existence; the `log` FIFO never is.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define SHIMWATCH_CONTAINERD_TASK_DIR "io.containerd.runtime.v2.task"

#define SHIMWATCH_TYPE_CONTAINERD_WATCHER (shimwatch_containerd_watcher_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchContainerdWatcher, shimwatch_containerd_watcher, SHIMWATCH,
                      CONTAINERD_WATCHER, GObject)

/* namespaces: the only ones to watch, or NULL for all */
ShimwatchContainerdWatcher *shimwatch_containerd_watcher_new   (const char                 *state_dir,
                                                                const char * const         *namespaces);
/* the initial scan ("bundle-ready" for every bundle already there), then the watches; a
 * state directory that does not exist yet is looked for again every few seconds */
gboolean    shimwatch_containerd_watcher_start      (ShimwatchContainerdWatcher *self,
                                                     GError                    **error);
void        shimwatch_containerd_watcher_stop       (ShimwatchContainerdWatcher *self);
/* whether a namespace is one to watch */
gboolean    shimwatch_containerd_watcher_wants      (ShimwatchContainerdWatcher *self,
                                                     const char                 *namespace_);
/* <state>/io.containerd.runtime.v2.task/<namespace>/<id> */
char       *shimwatch_containerd_watcher_bundle_path (ShimwatchContainerdWatcher *self,
                                                      const char                 *namespace_,
                                                      const char                 *id);
/* the bundle directory exists (whatever it holds) */
gboolean    shimwatch_containerd_watcher_has_bundle (ShimwatchContainerdWatcher *self,
                                                     const char                 *namespace_,
                                                     const char                 *id);

G_END_DECLS
