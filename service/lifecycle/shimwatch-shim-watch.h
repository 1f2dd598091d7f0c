/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShimWatch: watching one shim process while its connection is up, knowing
 * nothing of the task object that owns it (a member of it, set up with
 * shimwatch_shim_watch_init()):
 *   - its pidfd, which sees the shim die even when a child keeps its socket: then the
 *     connection is closed, and its "closed" says the shim is gone, as for any death;
 *   - the health checks, whose answer goes to a callback.
 * The pidfd may outlive the watching (shimwatch_shim_watch_stop()), for the dead-shim
 * path to ask again when the shim died.
 */
#pragma once

#include <glib.h>

#include "shimwatch-dbus-generated.h"
#include "shimwatch-health-scheduler.h"
#include "shimwatch-poller.h"
#include "shimwatch-task-client.h"

G_BEGIN_DECLS

typedef struct {
  /* for its log lines: the task and its object (pids); not owned */
  const char               *namespace_;
  const char               *id;
  ShimwatchDbusShim        *iface;
  ShimwatchTaskClient      *client;      /* not owned: the connection's */
  int                       pidfd;
  ShimwatchPollerWatch     *pidfd_watch;
  /* when its pidfd said it was dead (monotonic), 0: not yet; -1: a child of it lives on
   * with its socket */
  gint64                    dead_at;
  int                       pidfd_kept;  /* its death not seen when the watching stopped */
  ShimwatchHealthScheduler *scheduler;
  ShimwatchHealthTarget    *health;      /* in the health checks while connected */
} ShimwatchShimWatch;

void     shimwatch_shim_watch_init      (ShimwatchShimWatch       *self,
                                         const char               *namespace_,
                                         const char               *id,
                                         ShimwatchDbusShim        *iface);
/* from now on shim @pid, reached through @client, is watched; in the health checks of
 * @scheduler (NULL: none), which tell @func when its answer changes */
void     shimwatch_shim_watch_start     (ShimwatchShimWatch       *self,
                                         ShimwatchTaskClient      *client,
                                         guint32                   pid,
                                         ShimwatchHealthScheduler *scheduler,
                                         ShimwatchHealthFunc       func,
                                         gpointer                  user_data);
/* nothing is watched any more; @keep_pidfd: a death its pidfd has not told yet is looked
 * at again (shimwatch_shim_watch_look_again()) */
void     shimwatch_shim_watch_stop      (ShimwatchShimWatch       *self,
                                         gboolean                  keep_pidfd);
/* a watched shim that still runs gets SIGKILL: TRUE if it was sent (a dead one is noted
 * as dead); FALSE too without a pidfd */
gboolean shimwatch_shim_watch_kill      (ShimwatchShimWatch       *self);
gboolean shimwatch_shim_watch_has_pidfd (ShimwatchShimWatch       *self);
/* the kept pidfd asked again whether the shim is dead; @last_time: it is closed anyway */
void     shimwatch_shim_watch_look_again (ShimwatchShimWatch      *self,
                                          gboolean                 last_time);
/* the object goes */
void     shimwatch_shim_watch_clear     (ShimwatchShimWatch       *self);

G_END_DECLS
