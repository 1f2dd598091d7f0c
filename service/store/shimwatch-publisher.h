/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchPublisher: what a task's lifecycle is published through, handed to every
 * shim when it is built. It owns the bus connection the lifecycle signals leave on, the
 * signal ledger that marks them sent in their records as they leave, the records
 * directory and the committer that writes every record in it, and the history of
 * lifecycle events. The signals themselves are emitted on
 * the Manager interface (org.shimwatch.Shimwatch1.Manager), whose skeleton it is given.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-dbus-generated.h"
#include "shimwatch-history.h"
#include "shimwatch-metrics.h"
#include "shimwatch-record-committer.h"
#include "shimwatch-signal-ledger.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_PUBLISHER (shimwatch_publisher_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchPublisher, shimwatch_publisher, SHIMWATCH, PUBLISHER, GObject)

/* @signals: not owned (it owns the publisher); @history: taken a reference on */
ShimwatchPublisher    *shimwatch_publisher_new             (ShimwatchDbusManager *signals,
                                                            const char           *records_dir,
                                                            ShimwatchHistory     *history);
/* from now on the lifecycle signals leave on @connection, and the ledger watches them */
void                   shimwatch_publisher_attach          (ShimwatchPublisher   *self,
                                                            GDBusConnection      *connection);
/* NULL until attached */
GDBusConnection       *shimwatch_publisher_get_connection  (ShimwatchPublisher   *self);
ShimwatchDbusManager  *shimwatch_publisher_get_signals     (ShimwatchPublisher   *self);
/* the Manager's signal @member with @parameters (floating taken), as the generated
 * shimwatch_dbus_manager_emit_*() send it, for less */
void                   shimwatch_publisher_emit            (ShimwatchPublisher   *self,
                                                            const char           *member,
                                                            GVariant             *parameters);
/* The one way out for each Manager signal (nothing in service/ calls the generated
 * shimwatch_dbus_manager_emit_*()): the lifecycle signals go through
 * shimwatch_publisher_emit_lifecycle() below, the others through these. @path is the
 * task's object path. */
void                   shimwatch_publisher_emit_task_create (ShimwatchPublisher *self,
                                                             const char         *path,
                                                             const char         *namespace_,
                                                             const char         *id,
                                                             const char         *bundle,
                                                             guint32             pid);
void                   shimwatch_publisher_emit_task_start  (ShimwatchPublisher *self,
                                                             const char         *path,
                                                             const char         *namespace_,
                                                             const char         *id,
                                                             guint32             pid);
void                   shimwatch_publisher_emit_task_oom    (ShimwatchPublisher *self,
                                                             const char         *path,
                                                             const char         *namespace_,
                                                             const char         *id);
/* where a lifecycle signal's mark goes, ahead of the signal (exactly once across
 * restarts: shimwatch-record-committer.h) */
typedef struct {
  ShimwatchRecordCommitter *committer;  /* the task's records */
  const ShimwatchRecord    *record;     /* the task as it is once the signal is out: its
                                         * pending_signal is the signal, its flag set */
  const char               *prepared;   /* (tests) crash points, or NULL: reached once the */
  const char               *settled;    /* signals before are out / once this one settled */
} ShimwatchSignalMark;

/* one lifecycle signal of a task: what goes out, and what the history keeps of it */
typedef struct {
  const char *member;        /* ShimDisconnected, TaskExit or TaskDelete */
  const char *path;          /* the task's object path */
  const char *namespace_;
  const char *id;
  guint32     pid;           /* ShimDisconnected: the shim's; the others: the task's */
  guint32     exit_status;   /* TaskExit, TaskDelete */
  gint64      exited_at;     /* TaskExit, TaskDelete */
  const char *reason;        /* the history's, or NULL */
} ShimwatchLifecycleEvent;

/* The one way out for the three lifecycle signals: @mark, unless NULL (a task without a
 * record), is handed to its committer, whose mark the ledger holds the signal for; then
 * the signal with its arguments; then the history's event ("disconnected", "exit",
 * "delete"). FALSE: the mark could not be made (@error), and the signal went out
 * unmarked (a restart sends it again). Nothing here waits for the disk or the bus. */
gboolean               shimwatch_publisher_emit_lifecycle  (ShimwatchPublisher            *self,
                                                            const ShimwatchLifecycleEvent *event,
                                                            const ShimwatchSignalMark     *mark,
                                                            GError                       **error);
/* TaskExit's and TaskDelete's arguments, (osssuut), floating: the task's object path,
 * namespace, id (container and exec id), pid, exit status and time */
GVariant              *shimwatch_publisher_task_exit_args  (const char           *path,
                                                            const char           *namespace_,
                                                            const char           *id,
                                                            guint32               pid,
                                                            guint32               exit_status,
                                                            guint64               exited_at);
ShimwatchSignalLedger *shimwatch_publisher_get_ledger      (ShimwatchPublisher   *self);
const char            *shimwatch_publisher_get_records_dir (ShimwatchPublisher   *self);
ShimwatchRecordCommitter *shimwatch_publisher_get_committer (ShimwatchPublisher   *self);
ShimwatchHistory      *shimwatch_publisher_get_history     (ShimwatchPublisher   *self);
/* what the history does not see (unresponsive shims, cleanup timeouts) is counted here */
void                   shimwatch_publisher_set_metrics     (ShimwatchPublisher   *self,
                                                            ShimwatchMetrics     *metrics);
ShimwatchMetrics      *shimwatch_publisher_get_metrics     (ShimwatchPublisher   *self);

G_END_DECLS
