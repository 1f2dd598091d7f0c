/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchContainerd: companion mode. It watches the task bundles of a containerd
 * (ShimwatchContainerdWatcher), keeps one connection per shim socket
 * (ShimwatchContainerdConnection) and one exported, read-only object per task
 * (ShimwatchContainerdTask), and remembers across a restart of the service which signals
 * each task already had (records under <runtime dir>/containerd-records).
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-config.h"
#include "shimwatch-containerd-task.h"
#include "shimwatch-dbus-generated.h"
#include "shimwatch-history.h"
#include "shimwatch-publisher.h"
#include "shimwatch-signal-ledger.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_CONTAINERD (shimwatch_containerd_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchContainerd, shimwatch_containerd, SHIMWATCH, CONTAINERD, GObject)

/* @ledger: attached to @connection, the one the signals leave on */
ShimwatchContainerd     *shimwatch_containerd_new      (const ShimwatchConfig    *config,
                                                        ShimwatchPublisher       *publisher,
                                                        GDBusObjectManagerServer *object_manager,
                                                        GDBusConnection          *connection,
                                                        ShimwatchSignalLedger    *ledger,
                                                        ShimwatchHistory         *history,
                                                        GError                  **error);
/* once the bus name is owned: what the records of an earlier run left to report, then
 * every bundle there is, then the watches */
gboolean                 shimwatch_containerd_start    (ShimwatchContainerd      *self,
                                                        GError                  **error);
/* stop watching; containerd's shims are not touched */
void                     shimwatch_containerd_shutdown (ShimwatchContainerd      *self);
ShimwatchContainerdTask *shimwatch_containerd_lookup   (ShimwatchContainerd      *self,
                                                        const char               *namespace_,
                                                        const char               *id);
/* adds the object path of every exported task */
void                     shimwatch_containerd_list     (ShimwatchContainerd      *self,
                                                        GPtrArray                *paths);
guint                    shimwatch_containerd_get_n_tasks (ShimwatchContainerd   *self);
/* adds its tasks to @supervised, as ShimwatchMetricsTaskCounter says */
void                     shimwatch_containerd_count_tasks (ShimwatchContainerd   *self,
                                                           GHashTable            *supervised);
/* no record write waits and no signal is unsettled (for a clean stop) */
gboolean                 shimwatch_containerd_records_settled (ShimwatchContainerd *self);

G_END_DECLS
