/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchHistory: what happened, kept across restarts of the service: the recent
 * lifecycle events (create, start, exit, disconnected, delete, reap, oom) that
 * Manager.GetHistory returns, and the counters DisconnectCount, ReapCount and
 * CleanupFailureCount.
 *
 * Both live in memory and under a directory (the state directory):
 *   history, history.1  one event per line, in GVariant text format (a{sv}); "history" is
 *                       appended to and renamed to "history.1" once it passes its size
 *                       limit, so the two files never hold much more than twice that.
 *                       The counters are a line of their own (an a{sv} of
 *                       DisconnectCount, ReapCount and CleanupFailureCount, and the
 *                       metrics' counters and histogram) appended with
 *                       a batch that changed them, and with the first batch of each run
 *                       and after each rotation: the newest counts;
 *   counters            the key file an earlier version kept them in: read, no longer
 *                       written.
 * Nothing is written on the caller's path: shimwatch_history_add() and
 * shimwatch_history_set_counters() only queue, and a single writer thread writes the
 * queued lines in batches a little later. A history write never delays a signal. A lost
 * write (full disk, SIGKILL of the service within the batching delay) loses history,
 * never anything else; it is logged.
 */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

/* events kept in memory (and returned at most by GetHistory) */
#define SHIMWATCH_HISTORY_CAPACITY  4096
/* size at which "history" is rotated to "history.1": more than CAPACITY lines of
 * ~150 bytes, so that the two files always refill the memory */
#define SHIMWATCH_HISTORY_FILE_MAX  (1024 * 1024)

typedef struct {
  gint64      time;          /* usec since the epoch; 0 = now */
  const char *event;         /* create, start, exit, disconnected, delete, reap, oom */
  const char *namespace_;
  const char *id;
  guint32     pid;           /* 0 = unknown */
  gboolean    has_exit_status;
  guint32     exit_status;
  const char *reason;        /* NULL or "" = none */
} ShimwatchHistoryEvent;

/* the death-to-TaskDelete histogram's finite buckets (their bounds are in
 * shimwatch-metrics.c); +Inf is delay_count itself */
#define SHIMWATCH_COUNTERS_DELAY_BUCKETS 12

/* the reasons a task's death is counted by: ExitReason */
typedef enum {
  SHIMWATCH_DEATH_EXITED,
  SHIMWATCH_DEATH_SIGNALED,
  SHIMWATCH_DEATH_OOM_KILLED,
  SHIMWATCH_DEATH_SHIM_DIED,
  SHIMWATCH_DEATH_UNKNOWN,
  SHIMWATCH_N_DEATH_REASONS
} ShimwatchDeathReason;

typedef struct {
  guint64 disconnects;
  guint64 reaps;
  guint64 cleanup_failures;
  /* the metrics' (shimwatch-metrics.h); absent from an earlier version's line: 0 */
  guint64 deaths[SHIMWATCH_N_DEATH_REASONS];
  guint64 cleanup_timeouts;    /* of the cleanup_failures, those that timed out */
  guint64 unresponsive;
  guint64 takeovers;
  guint64 log_bytes_dropped;
  guint64 delay_buckets[SHIMWATCH_COUNTERS_DELAY_BUCKETS];   /* each its own, not cumulative */
  guint64 delay_count;
  guint64 delay_sum_us;
} ShimwatchCounters;

/* called on the main thread for each event added, before it is queued for the disk */
typedef void (*ShimwatchHistoryObserver) (const ShimwatchHistoryEvent *event,
                                          guint64                      time,
                                          gpointer                     user_data);

#define SHIMWATCH_TYPE_HISTORY (shimwatch_history_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchHistory, shimwatch_history, SHIMWATCH, HISTORY, GObject)

/* dir NULL: memory only. What dir holds is loaded now; a directory that cannot be
 * created or read leaves a history that starts empty (logged), never an error. */
ShimwatchHistory *shimwatch_history_new          (const char                  *dir,
                                                  guint                        capacity,
                                                  gsize                        file_max);
void              shimwatch_history_add          (ShimwatchHistory            *self,
                                                  const ShimwatchHistoryEvent *event);
/* the same for an event of the task namespace_/id, now; exit_status only counts when
 * has_exit_status is TRUE, reason may be NULL */
void              shimwatch_history_add_task_event (ShimwatchHistory          *self,
                                                    const char                *namespace_,
                                                    const char                *id,
                                                    const char                *event,
                                                    guint32                    pid,
                                                    gboolean                   has_exit_status,
                                                    guint32                    exit_status,
                                                    const char                *reason);
/* aa{sv}, oldest first, at most limit (0 = all kept) of the newest events matching
 * namespace_ and id (NULL = any) */
GVariant         *shimwatch_history_query        (ShimwatchHistory            *self,
                                                  const char                  *namespace_,
                                                  const char                  *id,
                                                  guint                        limit);
/* one observer at most (the metrics); NULL: none */
void              shimwatch_history_set_observer (ShimwatchHistory            *self,
                                                  ShimwatchHistoryObserver     observer,
                                                  gpointer                     user_data);
void              shimwatch_history_get_counters (ShimwatchHistory            *self,
                                                  ShimwatchCounters           *counters);
void              shimwatch_history_set_counters (ShimwatchHistory            *self,
                                                  const ShimwatchCounters     *counters);
/* write what is queued now and wait until it is written (shutdown, tests) */
void              shimwatch_history_sync         (ShimwatchHistory            *self);

G_END_DECLS
