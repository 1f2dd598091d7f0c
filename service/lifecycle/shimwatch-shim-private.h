/* SPDX-License-Identifier: Apache-2.0
 *
 * What the files of ShimwatchShim share, and nothing else includes. Each knows only
 * the ones below it:
 *   shimwatch-shim-lifecycle.c  what happens to a task: attaching its shim, the shim's
 *                               events, the dead-shim path, taking a task over again
 *                               after a restart of the service
 *   shimwatch-shim.c            the object, its D-Bus methods, what the task is made of
 * Status, the record and the lifecycle signals are the task's ShimwatchTaskLifecycle's
 * (shimwatch-task-lifecycle.h), which the companion's tasks use too; the shim's pidfd and
 * health its ShimwatchShimWatch's (shimwatch-shim-watch.h).
 */
#pragma once

#include "shimwatch-cgroup.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-error.h"
#include "shimwatch-health-scheduler.h"
#include "shimwatch-logging.h"
#include "shimwatch-poller.h"
#include "shimwatch-records.h"
#include "shimwatch-shim.h"
#include "shimwatch-shim-state.h"
#include "shimwatch-shim-watch.h"
#include "shimwatch-task-lifecycle.h"
#include "shimwatch-task-log.h"
#include "shimwatch-task-stats.h"

G_BEGIN_DECLS

#define RPC_TIMEOUT_MS      10000
#define SHUTDOWN_TIMEOUT_MS 3000
/* a recorded shim's start time, before anyone asked (shimwatch_shim_is_shim_process()) */
#define SHIM_START_TIME_UNREAD G_MAXUINT64

struct _ShimwatchShim
{
  ShimwatchDbusShimSkeleton parent_instance;

  ShimwatchShimServices services;     /* handed at construction; objects referenced */
  char                *namespace_;
  char                *id;
  char                *path;
  char                *runtime;
  char                *shim_binary;
  char                *task_dir;
  char                *cgroup_path;      /* NULL: unknown (a record from before) */
  guint64              task_start_time;
  guint64              shim_start_time;  /* tells the shim from a later process with its pid;
                                          * SHIM_START_TIME_UNREAD until first needed */

  ShimwatchShimHandle *handle;
  gulong               closed_id;
  int                  task_pidfd;
  ShimwatchShimWatch   watch;            /* the shim's pidfd and health while connected */

  gboolean             exported;
  GPtrArray           *waiting_calls;    /* AuthData: authorized while loading */
  gboolean             kill_when_reached; /* Reap while loading */
  GPtrArray           *early_events;   /* arrived before export, or while loading */
  /* the task's lifecycle: Status, the lifecycle signals, the exit and the record */
  ShimwatchTaskLifecycle lifecycle;
  GDBusMethodInvocation *delete_invocation;
  ShimwatchTaskLog     *task_log;       /* NULL: the service does not keep its output */

  gboolean             oom;            /* the shim reported an OOM kill */
  ShimwatchTaskCgroup *cgroup;         /* the task's cgroup, once it has a process */
  GPtrArray           *stop_waiters;   /* Stop invocations waiting for the exit */
  guint                stop_timer;     /* SIGKILL when it fires, then give up */
  gboolean             stop_killed;

  GVariant            *all_properties;  /* a{sv} for the object manager; NULL: changed */
  /* changes of properties wait for shimwatch_shim_flush_changes(): no PropertiesChanged of
   * their own (see shimwatch_shim_hold_changes()) */
  gboolean             changes_held;
  GParamSpec          *held_pspec;      /* one property that changed meanwhile */
};

enum {
  SIGNAL_DISCONNECTED,
  SIGNAL_FINISHED,
  N_SIGNALS
};
extern guint shimwatch_shim_signals[N_SIGNALS];

/* the task's lifecycle, as the shim's files ask it */
#define shimwatch_shim_has_sent(self, signal) \
  shimwatch_task_lifecycle_has_sent (&(self)->lifecycle, (signal))
#define shimwatch_shim_is_cleaning(self) shimwatch_shim_machine_is_cleaning (&(self)->lifecycle.machine)
/* the link to the shim (see shimwatch-shim-state.h) */
#define shimwatch_shim_is_connected(self) ((self)->lifecycle.machine.link == SHIMWATCH_SHIM_LINK_CONNECTED)
#define shimwatch_shim_is_loading(self)   ((self)->lifecycle.machine.link == SHIMWATCH_SHIM_LINK_LOADING)
#define shimwatch_shim_is_detached(self)  ((self)->lifecycle.machine.link == SHIMWATCH_SHIM_LINK_DETACHED)
/* a normal Delete completed (or a failed CreateTask is undone): no crash semantics */
#define shimwatch_shim_is_deleted(self) shimwatch_task_lifecycle_is_deleted (&(self)->lifecycle)

/* shimwatch-shim.c */
ShimwatchCleanupRequest *
         shimwatch_shim_cleanup_request     (ShimwatchShim  *self,
                                             gboolean        kill_task);
void     shimwatch_shim_find_cgroup         (ShimwatchShim  *self,
                                             guint32         pid);
/* the properties changed from now on go out in one PropertiesChanged, at the next
 * shimwatch_shim_flush_changes(), not each turn */
void     shimwatch_shim_hold_changes        (ShimwatchShim  *self);
/* what changed (also while held) goes out now, in one PropertiesChanged */
void     shimwatch_shim_flush_changes       (ShimwatchShim  *self);
/* the exit is known: every Stop waiting for it returns its status */
void     shimwatch_shim_complete_stops      (ShimwatchShim  *self);
void     shimwatch_shim_fail_stops          (ShimwatchShim  *self,
                                             ShimwatchError  code,
                                             const char     *message);
/* the loading is over (shim reached or found dead): what waited for it goes on */
void     shimwatch_shim_resume_waiting_calls (ShimwatchShim *self,
                                              gboolean       stopping);
void     shimwatch_shim_shutdown_rpc_cb     (GObject        *source,
                                             GAsyncResult   *result,
                                             gpointer        user_data);

G_END_DECLS
