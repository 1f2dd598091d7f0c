/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskLifecycle: what happens to one task on the bus, whoever owns it (the
 * service's own ShimwatchShim, or a containerd task the companion watches). It holds
 * the task's state machine (shimwatch-shim-state.h) and its exit, is the only writer of
 * the Status property, and sends the three lifecycle signals (ShimDisconnected,
 * TaskExit, TaskDelete) exactly once, also across restarts of the service: each
 * signal's mark is written ahead of it through the record committer (see
 * shimwatch-record-committer.h and shimwatch-marks.h), with the same record flags for
 * every task.
 *
 * The task object owns it (a member, set up once with shimwatch_task_lifecycle_init())
 * and says what only it knows through ShimwatchTaskLifecycleOwner: the record's fields
 * of its own, and how its changed properties go out.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-dbus-generated.h"
#include "shimwatch-history.h"
#include "shimwatch-publisher.h"
#include "shimwatch-record-committer.h"
#include "shimwatch-shim-state.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

/* what the task object itself adds */
typedef struct {
  /* the record's fields only the owner knows (runtime, shim binary, task directory,
   * cgroup, ...); the lifecycle fills in the rest */
  void (*fill_record)   (gpointer         owner,
                         ShimwatchRecord *record);
  /* the properties changed so far go out now, in one PropertiesChanged, right before
   * TaskExit (NULL: the skeleton is flushed) */
  void (*flush_changes) (gpointer         owner);
} ShimwatchTaskLifecycleOwner;

/* how the lifecycle is set up; strings and objects are not owned: they outlive it */
typedef struct {
  ShimwatchDbusShim        *iface;       /* the task's object on the bus */
  const char               *path;
  const char               *namespace_;
  const char               *id;
  ShimwatchPublisher       *publisher;   /* the signals leave through it */
  ShimwatchRecordCommitter *committer;   /* the task's record and marks; NULL: none */
  ShimwatchHistory         *history;     /* the lifecycle events; NULL: none */
  const char               *log_domain;  /* the owner's G_LOG_DOMAIN */
  const char               *log_prefix;  /* before "<namespace>/<id>: " in its log lines */
  gboolean                  crash_points; /* (tests) the service's own tasks' crash points */
  const ShimwatchTaskLifecycleOwner *owner;
  gpointer                  owner_data;
} ShimwatchTaskLifecycleSetup;

typedef struct {
  ShimwatchTaskLifecycleSetup setup;
  const char               *namespace_;  /* = setup's: for the LOG_* field macros */
  const char               *id;
  /* Status and the signals' flags: changed only by shimwatch_task_lifecycle_transition()
   * and the emit functions below */
  ShimwatchShimMachine      machine;
  ShimwatchExit             exit;        /* the real or synthesized exit, once known */
  gboolean                  persistent;  /* a record exists and follows every change */
} ShimwatchTaskLifecycle;

/* a new task's lifecycle ("created"); its Status is published */
void     shimwatch_task_lifecycle_init       (ShimwatchTaskLifecycle            *self,
                                              const ShimwatchTaskLifecycleSetup *setup);
/* a recorded task's: its state, the signals that went out and its exit, and the
 * properties of the record that every task has (address, pids, times, owner, exit);
 * persistent from now on. A pending signal that did not go out was undone when the
 * record was loaded: it is logged, and goes out when its turn comes again. */
void     shimwatch_task_lifecycle_restore    (ShimwatchTaskLifecycle            *self,
                                              const ShimwatchRecord             *record);

/* the only writer of Status: feeds @input to the state machine and publishes its state.
 * Returns the signal due now, its flag already set, or NONE (the emit functions below
 * are the ones that take a signal's inputs) */
ShimwatchLifecycleSignal
         shimwatch_task_lifecycle_transition (ShimwatchTaskLifecycle            *self,
                                              ShimwatchShimInput                 input);
#define shimwatch_task_lifecycle_has_sent(self, signal) \
  shimwatch_shim_machine_has_sent (&(self)->machine, (signal))
/* a normal Delete completed (or a failed CreateTask is undone): no crash semantics */
#define shimwatch_task_lifecycle_is_deleted(self) \
  ((self)->machine.state == SHIMWATCH_SHIM_STATE_DELETED || \
   (self)->machine.state == SHIMWATCH_SHIM_STATE_TEARDOWN)

/* the task's record as it is now, if it has one; a record that cannot be written is
 * logged, never fatal */
void     shimwatch_task_lifecycle_save       (ShimwatchTaskLifecycle            *self);
/* the task is gone: its record goes once what was emitted is on the bus */
void     shimwatch_task_lifecycle_forget     (ShimwatchTaskLifecycle            *self);

/* a lifecycle event of the task in the history (the emit functions add theirs) */
void     shimwatch_task_lifecycle_add_history (ShimwatchTaskLifecycle         *self,
                                               const char                     *event,
                                               guint32                         pid,
                                               gboolean                        has_exit_status,
                                               guint32                         exit_status,
                                               const char                     *reason);

/* SHIM_GONE: the shim is gone while the task lived (Status "disconnected") and
 * ShimDisconnected goes out, once, with the history's "disconnected" (@reason); @flush:
 * the new Status goes out before the signal. TRUE: the signal went out now. */
gboolean shimwatch_task_lifecycle_emit_disconnected (ShimwatchTaskLifecycle     *self,
                                                     guint32                     shim_pid,
                                                     const char                 *reason,
                                                     gboolean                    flush);
/* EXITED: TaskExit once per task, with the exit properties in the PropertiesChanged
 * before it (@exited_at 0: now; @reason NULL: "signaled" or "exited", from the status).
 * TRUE: it went out now. */
gboolean shimwatch_task_lifecycle_emit_exit  (ShimwatchTaskLifecycle            *self,
                                              guint32                            pid,
                                              guint32                            exit_status,
                                              gint64                             exited_at,
                                              const char                        *reason);
/* FINISHED: TaskDelete once per task, with the exit known. TRUE: it went out now. */
gboolean shimwatch_task_lifecycle_emit_delete (ShimwatchTaskLifecycle           *self);

G_END_DECLS
