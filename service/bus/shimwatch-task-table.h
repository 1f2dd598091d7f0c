/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskTable: the service's own tasks as the Manager shows them. The table
 * namespace/id → ShimwatchShim, the names being created, the cgroups they claim, the
 * Reaps waiting for a task's end; the objects on the bus; the counters a task's end
 * moves (ShimCount, DisconnectCount, ReapCount, CleanupFailureCount, the history); and
 * what goes with a namespace's last task (its cgroup parents, runc's directory).
 *
 * CreateTask and the start-up's load both put tasks in; a task leaves it when its shim
 * says it is finished. A plain struct of the Manager's, built once it has a history and
 * metrics; what it does not own outlives it.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-cgroup.h"
#include "shimwatch-cgroup-claims.h"
#include "shimwatch-dbus-generated.h"
#include "shimwatch-history.h"
#include "shimwatch-metrics.h"
#include "shimwatch-shim.h"

G_BEGIN_DECLS

typedef struct {
  GHashTable               *shims;        /* "ns/id" → ShimwatchShim */
  GHashTable               *reserved;     /* "ns/id" being created */
  GHashTable               *reaps;        /* "ns/id" → GPtrArray of invocations */
  ShimwatchCgroupClaims    *cgroup_users; /* cgroup path → "ns/id", supervised or being created */

  /* not owned */
  ShimwatchDbusManager     *bus;          /* the Manager: its counters, its Reap replies */
  GDBusObjectManagerServer *object_manager;
  ShimwatchHistory         *history;
  ShimwatchMetrics         *metrics;
  ShimwatchCgroupHost      *cgroups;
  const char               *runc_root;
} ShimwatchTaskTable;

ShimwatchTaskTable *shimwatch_task_table_new    (ShimwatchDbusManager     *bus,
                                                 GDBusObjectManagerServer *object_manager,
                                                 ShimwatchHistory         *history,
                                                 ShimwatchMetrics         *metrics,
                                                 ShimwatchCgroupHost      *cgroups,
                                                 const char               *runc_root);
void        shimwatch_task_table_free           (ShimwatchTaskTable *self);

/* the shim's disconnect and end are counted, and its end takes it out of the table */
void        shimwatch_task_table_watch          (ShimwatchTaskTable *self,
                                                 ShimwatchShim      *shim);
/* its object on the bus (InterfacesAdded); it goes when the shim is finished */
void        shimwatch_task_table_export         (ShimwatchTaskTable *self,
                                                 ShimwatchShim      *shim);
/* invocation of Reap is answered when the task of key is finished */
void        shimwatch_task_table_wait_for_end   (ShimwatchTaskTable    *self,
                                                 const char            *key,
                                                 GDBusMethodInvocation *invocation);

/* ShimCount, from the table's size */
void        shimwatch_task_table_update_count   (ShimwatchTaskTable *self);
/* a shim, ours or containerd's, went away */
void        shimwatch_task_table_count_disconnect (ShimwatchTaskTable *self);
/* a cleanup ran (failure: why it did not finish, or NULL) */
void        shimwatch_task_table_count_cleanup  (ShimwatchTaskTable *self,
                                                 const char         *namespace_,
                                                 const char         *id,
                                                 guint32             exit_status,
                                                 const char         *failure);

/* the task that has this cgroup, one inside it or one around it; NULL if none */
const char *shimwatch_task_table_cgroup_user    (ShimwatchTaskTable *self,
                                                 const char         *path);
void        shimwatch_task_table_release_cgroup (ShimwatchTaskTable *self,
                                                 const char         *path,
                                                 const char         *key);

/* what goes with a namespace's last task, unless a create is under way */
void        shimwatch_task_table_remove_unused_cgroup_parents (ShimwatchTaskTable *self,
                                                               const char         *namespace_);
void        shimwatch_task_table_remove_all_unused_cgroup_parents (ShimwatchTaskTable *self);
void        shimwatch_task_table_remove_unused_runc_dir (ShimwatchTaskTable *self,
                                                         const char         *namespace_);

G_END_DECLS
