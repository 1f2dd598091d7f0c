/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShim: one supervised shim and its task, exported as
 * org.shimwatch.Shimwatch1.Shim. It owns the ttrpc connection to the shim and reacts
 * when that connection ends: after a completed normal Delete by finishing the teardown,
 * otherwise by the dead-shim cleanup (ShimDisconnected → TaskExit → TaskDelete), after
 * which it emits "finished" and the manager drops it.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-authority.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-config.h"
#include "shimwatch-dbus-generated.h"
#include "shimwatch-health-scheduler.h"
#include "shimwatch-launcher.h"
#include "shimwatch-publisher.h"
#include "shimwatch-task-log.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

/* what a shim works with, handed to it when it is built (the shim takes references) */
typedef struct {
  const ShimwatchConfig *config;     /* not owned: outlives every shim */
  ShimwatchCleanup      *cleanup;    /* the dead-shim cleanups */
  ShimwatchAuthority    *authority;  /* polkit checks of its methods */
  ShimwatchPublisher    *publisher;  /* bus connection, signal ledger, records, history */
  const char            *runc_root;  /* runc's state directory of the service's tasks */
  ShimwatchHealthScheduler *health;  /* the health checks of every shim */
} ShimwatchShimServices;

#define SHIMWATCH_TYPE_SHIM (shimwatch_shim_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchShim, shimwatch_shim, SHIMWATCH, SHIM, ShimwatchDbusShimSkeleton)

ShimwatchShim *shimwatch_shim_new             (const ShimwatchShimServices *services,
                                               const char            *namespace_,
                                               const char            *id,
                                               const char            *runtime,
                                               const char            *shim_binary,
                                               const char            *task_dir);
const char    *shimwatch_shim_get_object_path (ShimwatchShim         *self);
const char    *shimwatch_shim_get_namespace   (ShimwatchShim         *self);
const char    *shimwatch_shim_get_id          (ShimwatchShim         *self);
const char    *shimwatch_shim_get_task_dir    (ShimwatchShim         *self);
ShimwatchTaskClient *shimwatch_shim_get_client (ShimwatchShim        *self);
gboolean       shimwatch_shim_is_exported     (ShimwatchShim         *self);
gboolean       shimwatch_shim_is_shim_process (ShimwatchShim         *self,
                                               guint32                pid,
                                               guint64                start_time);
guint32        shimwatch_shim_get_last_exit_status (ShimwatchShim    *self);
/* the task's own cgroup (CgroupPath), NULL if not known (a record from before) */
void           shimwatch_shim_set_cgroup_path (ShimwatchShim         *self,
                                               const char            *path);
const char    *shimwatch_shim_get_cgroup_path (ShimwatchShim         *self);

/* a shim known from its task record (service restart) */
ShimwatchShim *shimwatch_shim_new_from_record (const ShimwatchShimServices *services,
                                               const ShimwatchRecord *record);
/* from now on the task has a record that follows every change */
void           shimwatch_shim_make_persistent (ShimwatchShim         *self);
/* after a restart: the shim answered again (handle) or cannot be reached (dead) */
void           shimwatch_shim_readopt         (ShimwatchShim         *self,
                                               ShimwatchShimHandle   *handle);
void           shimwatch_shim_mark_dead       (ShimwatchShim         *self,
                                               const char            *reason);

/* take over a started shim; from now on its disconnect is watched */
void           shimwatch_shim_attach          (ShimwatchShim         *self,
                                               ShimwatchShimHandle   *handle);
void           shimwatch_shim_set_created     (ShimwatchShim         *self,
                                               guint32                pid);
void           shimwatch_shim_set_started     (ShimwatchShim         *self,
                                               guint32                pid);
/* events that arrive before the object is exported are replayed once it is */
void           shimwatch_shim_set_exported    (ShimwatchShim         *self);
void           shimwatch_shim_handle_event    (ShimwatchShim         *self,
                                               const ShimwatchEvent  *event);
/* the task's output, kept by the service (ReadLog, OpenLog); finished at TaskDelete */
void           shimwatch_shim_set_task_log    (ShimwatchShim         *self,
                                               ShimwatchTaskLog      *task_log);
/* what CreateTask knows: the bundle it was given, process.args and the labels */
void           shimwatch_shim_set_description (ShimwatchShim         *self,
                                               const char            *bundle_source,
                                               const char * const    *command,
                                               GVariant              *labels);
/* InvalidArgument for labels SetLabels or CreateTask must refuse */
gboolean       shimwatch_shim_validate_labels (GVariant              *labels,
                                               GError               **error);
/* SIGKILL the shim: the disconnect path does the rest */
gboolean       shimwatch_shim_kill_shim       (ShimwatchShim         *self,
                                               GError               **error);
/* service shutdown: stop watching, leave the shim and its task running */
void           shimwatch_shim_detach          (ShimwatchShim         *self);
/* a failed CreateTask: stop the shim, remove the task dir, emit nothing */
void           shimwatch_shim_abandon_async   (ShimwatchShim         *self,
                                               GAsyncReadyCallback    callback,
                                               gpointer               user_data);

G_END_DECLS
