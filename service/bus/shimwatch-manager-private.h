/* SPDX-License-Identifier: Apache-2.0
 *
 * What the files of ShimwatchManager share, and nothing else includes:
 *   shimwatch-manager.c         setup, the listing, the events' routing, Reap
 *   shimwatch-manager-create.c  CreateTask
 *   shimwatch-manager-load.c    start-up: loading the records, reaching their shims
 * Below them, and knowing none of them:
 *   shimwatch-task-table.c      the supervised tasks, their objects, counters and ends
 *   shimwatch-orphans.c         state on disk that no supervised task owns (Load, Reap)
 */
#pragma once

#include "shimwatch-containerd.h"
#include "shimwatch-events-server.h"
#include "shimwatch-log-store.h"
#include "shimwatch-manager.h"
#include "shimwatch-metrics.h"
#include "shimwatch-orphans.h"
#include "shimwatch-shim.h"
#include "shimwatch-task-table.h"

G_BEGIN_DECLS

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

  ShimwatchTaskTable           *tasks;      /* the supervised tasks (shims) */
  ShimwatchOrphans              orphans;    /* what cleans state no task owns */
  ShimwatchShimServices         shim_services; /* what every shim is built with (export) */
  ShimwatchContainerd          *containerd;   /* companion mode, or NULL */
  /* the counters' PropertiesChanged, held back for company (see counter_notify) */
  guint                         counters_source;
  GParamSpec                   *counters_pspec;
};

/* shimwatch-manager-create.c */
gboolean    shimwatch_manager_handle_create_task (ShimwatchDbusManager  *iface,
                                                  GDBusMethodInvocation *invocation,
                                                  const char            *arg_namespace,
                                                  const char            *arg_id,
                                                  const char            *arg_bundle,
                                                  GVariant              *arg_options);

G_END_DECLS
