/* SPDX-License-Identifier: Apache-2.0
 *
 * Taking over containerd's cleanup of a task whose shim died, when containerd does not
 * do it (it is down, or missed its own deadline). One GTask, no GCancellable, in the
 * order containerd itself follows (runtime/v2/shim.go, bundle.go), because the order
 * matters: renaming a bundle while another `shim delete` still runs in it makes that
 * delete fail and leaves the container running.
 *
 *  1. `<shim-binary-path> … delete` in the bundle, to completion (bounded by its timeout),
 *     only with a binary that lies in one of the allowed runtime directories;
 *  2. only after it: unmount <bundle>/rootfs, rename the bundle and its work directory to
 *     .<id> and remove them (containerd's bundle.Delete);
 *  3. then remove the shim's socket file, if nothing answers on it.
 *
 * Nothing here writes containerd's metadata or opens the task's `log` FIFO.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-launcher.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

typedef struct {
  char  *namespace_;
  char  *id;
  char  *bundle;
  char  *shim_binary;   /* checked with shimwatch_containerd_shim_binary(); NULL: no delete */
  char  *socket_path;   /* NULL for an abstract socket */
  guint  timeout_ms;
} ShimwatchContainerdTakeoverRequest;

void shimwatch_containerd_takeover_request_free (ShimwatchContainerdTakeoverRequest *request);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchContainerdTakeoverRequest,
                               shimwatch_containerd_takeover_request_free)

typedef struct {
  gboolean      delete_ok;       /* `shim delete` answered with a DeleteResponse */
  ShimwatchExit deleted;         /* its answer */
  char         *delete_error;    /* why not */
  gboolean      removed;         /* bundle and work directory are gone */
  char         *remove_error;
  gboolean      socket_removed;
} ShimwatchContainerdTakeoverResult;

void shimwatch_containerd_takeover_result_free (ShimwatchContainerdTakeoverResult *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchContainerdTakeoverResult,
                               shimwatch_containerd_takeover_result_free)

/* the bundle's shim-binary-path, if the file it names is a regular file directly inside
 * one of runtime_dirs (both sides resolved); otherwise NULL and why */
char *shimwatch_containerd_shim_binary (const char          *bundle,
                                        const char * const  *runtime_dirs,
                                        GError             **error);

/* step 2 on its own (synchronous: a worker thread, the unit tests) */
gboolean shimwatch_containerd_remove_bundle (const char  *bundle,
                                             GError     **error);

/* The takeovers of one watched containerd: at most max_running at once, the others wait
 * their turn in the order they came. With containerd down, every shim that dies needs
 * one; hundreds of `shim delete` (each running runc) at once would swamp the machine
 * instead of finishing sooner. The launcher runs the deletes, configured with
 * containerd's addresses. What is under way or waiting when the companion lets go
 * still runs, one after the other. */
typedef struct _ShimwatchContainerdTakeovers ShimwatchContainerdTakeovers;

ShimwatchContainerdTakeovers *shimwatch_containerd_takeovers_new  (ShimwatchLauncher            *launcher,
                                                                   guint                         max_running);
void                          shimwatch_containerd_takeovers_free (ShimwatchContainerdTakeovers *takeovers);

/* request is taken */
void                               shimwatch_containerd_takeover_async  (ShimwatchContainerdTakeovers       *takeovers,
                                                                         ShimwatchContainerdTakeoverRequest *request,
                                                                         GAsyncReadyCallback                 callback,
                                                                         gpointer                            user_data);
ShimwatchContainerdTakeoverResult *shimwatch_containerd_takeover_finish (GAsyncResult                       *result);

G_END_DECLS
