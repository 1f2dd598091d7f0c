/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchContainerdConnection: our own ttrpc connection to one of containerd's shim
 * sockets, next to containerd's (containerd-shim-runc-v2 serves several clients; closing
 * ours does not disturb containerd's). Grouped tasks share one shim and one socket, so
 * one connection carries every task under it: for each, `Connect` tells the shim's and
 * the task's pids and `Wait` the task's exit.
 *
 * When the connection ends it tells why, from what is on disk and the shim's pidfd:
 *  - the socket file is gone: the shim exited after a normal delete ("shim-exited");
 *  - the socket file is still there and the shim's pidfd is readable (or nothing accepts
 *    on the socket any more): the shim died ("shim-died");
 *  - the shim still runs: our connection alone was lost; it is made again.
 * It never sends anything that changes a task: it only asks.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_CONTAINERD_CONNECTION (shimwatch_containerd_connection_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchContainerdConnection, shimwatch_containerd_connection, SHIMWATCH,
                      CONTAINERD_CONNECTION, GObject)

/* address: the bundle's `address` (unix://<path>); version: Task API 2 or 3 */
ShimwatchContainerdConnection *shimwatch_containerd_connection_new (const char *address,
                                                                    int         version);
const char *shimwatch_containerd_connection_get_address    (ShimwatchContainerdConnection *self);
/* the socket file, or NULL for an abstract address */
const char *shimwatch_containerd_connection_get_socket_path (ShimwatchContainerdConnection *self);
guint32     shimwatch_containerd_connection_get_shim_pid   (ShimwatchContainerdConnection *self);
/* watch one more task of this shim ("task-connected", then "task-exited") */
void        shimwatch_containerd_connection_add_task       (ShimwatchContainerdConnection *self,
                                                            const char                    *namespace_,
                                                            const char                    *id);
void        shimwatch_containerd_connection_remove_task    (ShimwatchContainerdConnection *self,
                                                            const char                    *id);
guint       shimwatch_containerd_connection_get_n_tasks    (ShimwatchContainerdConnection *self);
/* the shim is known dead ("shim-died" was emitted) or gone ("shim-exited") */
gboolean    shimwatch_containerd_connection_is_finished    (ShimwatchContainerdConnection *self);
/* the shim process is gone (its pidfd is readable; without one: nothing answers on the
 * socket), whether or not the EOF was seen yet */
gboolean    shimwatch_containerd_connection_shim_is_gone   (ShimwatchContainerdConnection *self);
/* SIGKILL the shim through its pidfd (Reap); the death is then reported as any other */
gboolean    shimwatch_containerd_connection_kill_shim      (ShimwatchContainerdConnection *self,
                                                            GError                       **error);
/* ask the shim which processes a task has */
void        shimwatch_containerd_connection_pids_async     (ShimwatchContainerdConnection *self,
                                                            const char                    *id,
                                                            GAsyncReadyCallback            callback,
                                                            gpointer                       user_data);
GArray     *shimwatch_containerd_connection_pids_finish    (ShimwatchContainerdConnection *self,
                                                            GAsyncResult                  *result,
                                                            GError                       **error);
/* stop watching; the shim is left alone */
void        shimwatch_containerd_connection_close          (ShimwatchContainerdConnection *self);

/* whether something accepts connections on a unix socket file (a dead shim's file does
 * not: ECONNREFUSED) */
gboolean    shimwatch_containerd_socket_answers            (const char                    *path);

G_END_DECLS
