/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchLauncher: starts and deletes runtime-v2 shims following the contract as
 * observed with containerd 1.6.20 (docs/protocol.md §2): runtime name → binary inside
 * configured directories only; a task directory named after the task id holding
 * config.json and the `log` FIFO; `start` and `delete` run with that directory as cwd.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-shim-log.h"
#include "shimwatch-task-client.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_LAUNCHER (shimwatch_launcher_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchLauncher, shimwatch_launcher, SHIMWATCH, LAUNCHER, GObject)

typedef struct {
  const char * const *runtime_dirs;   /* where containerd-shim-* binaries may come from */
  const char         *shim_address;   /* -address: names the shim socket, need not exist */
  const char         *ttrpc_address;  /* TTRPC_ADDRESS: our events socket */
  const char         *runc_root;      /* Options.root: runc state stays out of /run/containerd */
  gboolean            systemd_cgroup; /* Options.systemd_cgroup: runc's systemd driver */
  guint               start_timeout_ms;
  guint               connect_timeout_ms;
} ShimwatchLauncherConfig;

/* what a successful start hands over: the shim is running and answered Connect */
typedef struct {
  ShimwatchTaskClient *client;
  ShimwatchShimLog    *log;
  char                *address;
  guint32              shim_pid;
} ShimwatchShimHandle;

void shimwatch_shim_handle_free (ShimwatchShimHandle *handle);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchShimHandle, shimwatch_shim_handle_free)

ShimwatchLauncher   *shimwatch_launcher_new              (const ShimwatchLauncherConfig *config);
const char          *shimwatch_launcher_get_runc_root    (ShimwatchLauncher   *self);

char                *shimwatch_launcher_resolve_runtime  (ShimwatchLauncher   *self,
                                                          const char          *runtime,
                                                          GError             **error);
/* the task directory with config.json (as shimwatch_bundle_open rewrote it) and the shim
 * binary's path */
gboolean             shimwatch_launcher_prepare_task_dir (ShimwatchLauncher   *self,
                                                          const char          *task_dir,
                                                          GBytes              *config,
                                                          const char          *shim_binary,
                                                          GError             **error);

void                 shimwatch_launcher_start_async      (ShimwatchLauncher   *self,
                                                          const char          *shim_binary,
                                                          const char          *namespace_,
                                                          const char          *id,
                                                          const char          *task_dir,
                                                          GAsyncReadyCallback  callback,
                                                          gpointer             user_data);
ShimwatchShimHandle *shimwatch_launcher_start_finish     (ShimwatchLauncher   *self,
                                                          GAsyncResult        *result,
                                                          GError             **error);

/* take over a running shim again (after a restart of the service): reopen the log FIFO,
 * connect to address and call Connect; fails if the shim does not answer in time */
void                 shimwatch_launcher_connect_async    (ShimwatchLauncher   *self,
                                                          const char          *namespace_,
                                                          const char          *id,
                                                          const char          *task_dir,
                                                          const char          *address,
                                                          GAsyncReadyCallback  callback,
                                                          gpointer             user_data);
ShimwatchShimHandle *shimwatch_launcher_connect_finish   (ShimwatchLauncher   *self,
                                                          GAsyncResult        *result,
                                                          GError             **error);

/* `<shim> … delete` with cwd = task_dir; SIGKILLed after timeout_ms. No GCancellable on
 * purpose: a cleanup is bounded by its timeout and nothing else. */
void                 shimwatch_launcher_delete_async     (ShimwatchLauncher   *self,
                                                          const char          *shim_binary,
                                                          const char          *namespace_,
                                                          const char          *id,
                                                          const char          *task_dir,
                                                          guint                timeout_ms,
                                                          GAsyncReadyCallback  callback,
                                                          gpointer             user_data);
gboolean             shimwatch_launcher_delete_finish    (ShimwatchLauncher   *self,
                                                          GAsyncResult        *result,
                                                          ShimwatchExit       *exit_info,
                                                          GError             **error);

G_END_DECLS
