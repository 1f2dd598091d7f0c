/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchFairQueue: bounded work shared fairly among callers, keyed by uid. Items wait in
 * one FIFO per uid; the next item to run comes from the uids in turn (round-robin), so a
 * flood from one uid delays everyone else by at most one item per turn. It bounds how many
 * items run at once (in total and per uid) and how many a uid, and all uids together, may
 * have waiting or running; past a bound shimwatch_fair_queue_push() refuses with
 * SHIMWATCH_ERROR_BUSY. Pure bookkeeping: no main loop, no D-Bus.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  guint max_running;           /* items running at once, all uids */
  guint max_running_per_uid;
  guint max_queued;            /* waiting + running, all uids */
  guint max_queued_per_uid;    /* waiting + running, one uid */
} ShimwatchFairQueueLimits;

typedef struct _ShimwatchFairQueue ShimwatchFairQueue;

ShimwatchFairQueue *shimwatch_fair_queue_new       (const ShimwatchFairQueueLimits *limits);
void                shimwatch_fair_queue_free      (ShimwatchFairQueue             *self);

/* Queues @item for @uid; FALSE with SHIMWATCH_ERROR_BUSY (and @item not taken) when the
 * uid or the queue is full. */
gboolean            shimwatch_fair_queue_push      (ShimwatchFairQueue             *self,
                                                    guint32                         uid,
                                                    gpointer                        item,
                                                    GError                        **error);
/* The next item that may run now, or NULL; the caller runs it, then calls _done (). */
gpointer            shimwatch_fair_queue_pop       (ShimwatchFairQueue             *self,
                                                    guint32                        *uid);
void                shimwatch_fair_queue_done      (ShimwatchFairQueue             *self,
                                                    guint32                         uid);

guint               shimwatch_fair_queue_get_n_queued  (ShimwatchFairQueue         *self);
guint               shimwatch_fair_queue_get_n_running (ShimwatchFairQueue         *self);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchFairQueue, shimwatch_fair_queue_free)

G_END_DECLS
