/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchContainerdTask: one task of a watched containerd, exported read-only as
 * org.shimwatch.Shimwatch1.Shim under /org/shimwatch/Shimwatch1/containerd/<ns>/<id>
 * with Owner "containerd". It turns what its shim connection and the bundle watcher see
 * into ShimDisconnected, TaskExit and TaskDelete, exactly once each (a record under the
 * service's runtime directory, marked as the signals leave, carries that across a
 * restart of the service), and takes over the cleanup of a dead shim's task only if
 * containerd does not do it: containerd not answering on its socket, or the bundle still
 * there after containerd's cleanup timeout plus Grace.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-containerd-connection.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-dbus-generated.h"
#include "shimwatch-history.h"
#include "shimwatch-launcher.h"
#include "shimwatch-publisher.h"
#include "shimwatch-record-committer.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_DBUS_CONTAINERD_PATH "/org/shimwatch/Shimwatch1/containerd"
#define SHIMWATCH_OWNER_CONTAINERD     "containerd"

/* what every task of one watched containerd shares; owned by ShimwatchContainerd */
typedef struct {
  ShimwatchPublisher    *publisher;        /* the lifecycle signals leave through it */
  ShimwatchDbusManager  *manager;          /* Reap is completed on it */
  ShimwatchRecordCommitter *committer;     /* the tasks' records; NULL: none */
  ShimwatchHistory      *history;          /* lifecycle events go here too */
  ShimwatchCleanup      *cleanup;          /* runs the takeovers: containerd's bundles */
  const char * const    *runtime_dirs;     /* where a shim binary may come from */
  const char            *containerd_socket; /* containerd's gRPC socket file */
  guint                  cleanup_timeout_ms; /* containerd's io.containerd.timeout.shim.cleanup */
  guint                  grace_ms;
  guint                  delete_timeout_ms; /* bound on our own `shim delete` */
} ShimwatchContainerdEnv;

#define SHIMWATCH_TYPE_CONTAINERD_TASK (shimwatch_containerd_task_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchContainerdTask, shimwatch_containerd_task, SHIMWATCH,
                      CONTAINERD_TASK, ShimwatchDbusShimSkeleton)

ShimwatchContainerdTask *shimwatch_containerd_task_new             (const ShimwatchContainerdEnv *env,
                                                                    const char                   *namespace_,
                                                                    const char                   *id,
                                                                    const char                   *bundle);
/* a task an earlier run of the service recorded: the signals it sent are not sent again */
ShimwatchContainerdTask *shimwatch_containerd_task_new_from_record (const ShimwatchContainerdEnv *env,
                                                                    const ShimwatchRecord        *record);
const char *shimwatch_containerd_task_get_path      (ShimwatchContainerdTask *self);
const char *shimwatch_containerd_task_get_namespace (ShimwatchContainerdTask *self);
const char *shimwatch_containerd_task_get_id        (ShimwatchContainerdTask *self);
const char *shimwatch_containerd_task_get_bundle    (ShimwatchContainerdTask *self);
guint32     shimwatch_containerd_task_get_exit_status (ShimwatchContainerdTask *self);
/* TaskDelete went out */
gboolean    shimwatch_containerd_task_is_finished   (ShimwatchContainerdTask *self);

/* the shim connection that carries this task; from now on its events are this task's */
void shimwatch_containerd_task_attach         (ShimwatchContainerdTask       *self,
                                               ShimwatchContainerdConnection *connection);
void shimwatch_containerd_task_connected      (ShimwatchContainerdTask *self,
                                               guint32                  shim_pid,
                                               guint32                  task_pid);
void shimwatch_containerd_task_exited         (ShimwatchContainerdTask *self,
                                               guint32                  pid,
                                               guint32                  exit_status,
                                               gint64                   exited_at);
void shimwatch_containerd_task_shim_died      (ShimwatchContainerdTask *self,
                                               guint32                  shim_pid);
void shimwatch_containerd_task_shim_exited    (ShimwatchContainerdTask *self);
void shimwatch_containerd_task_bundle_removed (ShimwatchContainerdTask *self);

/* Reap (already authorized): a live shim is killed and containerd left to clean up; the
 * reply (exit status) is sent once TaskDelete went out */
void shimwatch_containerd_task_reap           (ShimwatchContainerdTask *self,
                                               GDBusMethodInvocation   *invocation);
/* service shutdown: stop watching, touch nothing */
void shimwatch_containerd_task_detach         (ShimwatchContainerdTask *self);

G_END_DECLS
