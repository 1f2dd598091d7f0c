/* SPDX-License-Identifier: Apache-2.0
 *
 * What the files of ShimwatchManager share, and nothing else includes:
 *   shimwatch-manager.c         the shim table, its signals and listing, Reap, setup
 *   shimwatch-manager-create.c  CreateTask
 *   shimwatch-manager-load.c    start-up: loading the records, reaching their shims, and
 *                               cleaning state no supervised task owns (orphans)
 */
#pragma once

#include "shimwatch-cgroup-claims.h"
#include "shimwatch-containerd.h"
#include "shimwatch-events-server.h"
#include "shimwatch-log-store.h"
#include "shimwatch-manager.h"
#include "shimwatch-metrics.h"
#include "shimwatch-shim.h"

G_BEGIN_DECLS

#define RPC_TIMEOUT_MS 10000

struct _ShimwatchManager
{
  ShimwatchDbusManagerSkeleton  parent_instance;

  ShimwatchConfig              *config;
  char                         *tasks_dir;
  char                         *runc_root;
  char                         *records_dir;
  guint                         n_loading;
  /* between load and reach_shims */
  GPtrArray                    *records;    /* ShimwatchRecord: what was read at load */
  GPtrArray                    *broken;     /* "ns/id" of records that did not parse */
  GHashTable                   *recorded;   /* "ns/id" of every record read */
  GPtrArray                    *to_reach;   /* ShimwatchShim: loaded, shim not reached yet */
  ShimwatchLauncher            *launcher;
  ShimwatchCgroupHost          *cgroups;
  ShimwatchCleanup             *cleanup;
  ShimwatchHealthScheduler     *health;     /* the health checks of every shim */
  ShimwatchEventsServer        *events;
  ShimwatchAuthority           *authority;
  ShimwatchLogStore            *logs;
  GDBusObjectManagerServer     *object_manager;
  ShimwatchHistory             *history;    /* events and counters, under the state dir */
  ShimwatchMetrics             *metrics;    /* the counters, for Prometheus */
  ShimwatchPublisher           *publisher;  /* bus connection, ledger, records, for shims */

  GHashTable                   *shims;      /* "ns/id" → ShimwatchShim */
  GHashTable                   *reserved;   /* "ns/id" being created */
  GHashTable                   *reaps;      /* "ns/id" → GPtrArray of invocations */
  ShimwatchCgroupClaims        *cgroup_users; /* cgroup path → "ns/id", supervised or being created */
  ShimwatchContainerd          *containerd;   /* companion mode, or NULL */
  /* the counters' PropertiesChanged, held back for company (see counter_notify) */
  guint                         counters_source;
  GParamSpec                   *counters_pspec;
};

/* shimwatch-manager.c */
/* what every shim is built with */
ShimwatchShimServices shimwatch_manager_shim_services (ShimwatchManager *self);
char       *shimwatch_manager_task_dir_for      (ShimwatchManager     *self,
                                                 const char           *namespace_,
                                                 const char           *id);
gboolean    shimwatch_manager_validate_ids      (const char           *namespace_,
                                                 const char           *id,
                                                 GError              **error);
void        shimwatch_manager_update_shim_count (ShimwatchManager     *self);
const char *shimwatch_manager_cgroup_user       (ShimwatchManager     *self,
                                                 const char           *path);
void        shimwatch_manager_release_cgroup    (ShimwatchManager     *self,
                                                 const char           *path,
                                                 const char           *key);
void        shimwatch_manager_remove_unused_cgroup_parents (ShimwatchManager *self,
                                                            const char       *namespace_);
void        shimwatch_manager_remove_all_unused_cgroup_parents (ShimwatchManager *self);
void        shimwatch_manager_remove_unused_runc_dir (ShimwatchManager *self,
                                                      const char       *namespace_);
void        shimwatch_manager_shim_disconnected_cb (ShimwatchShim     *shim,
                                                    ShimwatchManager  *self);
void        shimwatch_manager_shim_finished_cb  (ShimwatchShim        *shim,
                                                 gboolean              reaped,
                                                 gboolean              cleanup_failed,
                                                 ShimwatchManager     *self);
void        shimwatch_manager_export_shim       (ShimwatchManager     *self,
                                                 ShimwatchShim        *shim);

/* shimwatch-manager-create.c */
gboolean    shimwatch_manager_handle_create_task (ShimwatchDbusManager  *iface,
                                                  GDBusMethodInvocation *invocation,
                                                  const char            *arg_namespace,
                                                  const char            *arg_id,
                                                  const char            *arg_bundle,
                                                  GVariant              *arg_options);

/* shimwatch-manager-load.c */
/* clean the state of a task no supervised one owns (Reap, start-up) */
gboolean    shimwatch_manager_start_orphan_cleanup (ShimwatchManager    *self,
                                                    const char          *namespace_,
                                                    const char          *id,
                                                    guint                timeout_ms,
                                                    GAsyncReadyCallback  callback,
                                                    gpointer             user_data);

G_END_DECLS
