/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include "shimwatch-error.h"
#include "shimwatch-fair-queue.h"

typedef struct {
  guint32  uid;
  GQueue   waiting;      /* items, oldest first */
  guint    running;
  guint    queued;       /* waiting + running */
  gboolean in_turn;      /* in the round-robin ring */
} UidQueue;

struct _ShimwatchFairQueue
{
  ShimwatchFairQueueLimits limits;
  GHashTable              *uids;     /* uid → UidQueue, while it has anything queued */
  GQueue                   turns;    /* UidQueues that have an item that may run */
  guint                    running;
  guint                    queued;
};

static void
uid_queue_free (UidQueue *queue)
{
  g_queue_clear (&queue->waiting);
  g_free (queue);
}

ShimwatchFairQueue *
shimwatch_fair_queue_new (const ShimwatchFairQueueLimits *limits)
{
  ShimwatchFairQueue *self = g_new0 (ShimwatchFairQueue, 1);

  g_return_val_if_fail (limits != NULL && limits->max_running > 0 &&
                        limits->max_running_per_uid > 0, NULL);

  self->limits = *limits;
  self->uids = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
                                      (GDestroyNotify) uid_queue_free);
  g_queue_init (&self->turns);
  return self;
}

void
shimwatch_fair_queue_free (ShimwatchFairQueue *self)
{
  if (self == NULL)
    return;
  g_queue_clear (&self->turns);
  g_hash_table_unref (self->uids);
  g_free (self);
}

static gboolean
may_run (ShimwatchFairQueue *self,
         UidQueue           *queue)
{
  return queue->waiting.length > 0 && queue->running < self->limits.max_running_per_uid;
}

/* a uid joins the end of the ring when it gets something it may run */
static void
update_turn (ShimwatchFairQueue *self,
             UidQueue           *queue)
{
  if (!queue->in_turn && may_run (self, queue))
    {
      g_queue_push_tail (&self->turns, queue);
      queue->in_turn = TRUE;
    }
}

gboolean
shimwatch_fair_queue_push (ShimwatchFairQueue  *self,
                           guint32              uid,
                           gpointer             item,
                           GError             **error)
{
  UidQueue *queue;

  g_return_val_if_fail (self != NULL, FALSE);

  queue = g_hash_table_lookup (self->uids, GUINT_TO_POINTER (uid));
  if (queue != NULL && queue->queued >= self->limits.max_queued_per_uid)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY,
                   "too many requests of uid %u are waiting for authorization (limit %u); "
                   "try again later", uid, self->limits.max_queued_per_uid);
      return FALSE;
    }
  if (self->queued >= self->limits.max_queued)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY,
                   "too many requests are waiting for authorization (limit %u); "
                   "try again later", self->limits.max_queued);
      return FALSE;
    }
  if (queue == NULL)
    {
      queue = g_new0 (UidQueue, 1);
      queue->uid = uid;
      g_queue_init (&queue->waiting);
      g_hash_table_insert (self->uids, GUINT_TO_POINTER (uid), queue);
    }
  g_queue_push_tail (&queue->waiting, item);
  queue->queued++;
  self->queued++;
  update_turn (self, queue);
  return TRUE;
}

gpointer
shimwatch_fair_queue_pop (ShimwatchFairQueue *self,
                          guint32            *uid)
{
  UidQueue *queue;
  gpointer item;

  g_return_val_if_fail (self != NULL, NULL);

  if (self->running >= self->limits.max_running)
    return NULL;
  queue = g_queue_pop_head (&self->turns);
  if (queue == NULL)
    return NULL;
  queue->in_turn = FALSE;
  item = g_queue_pop_head (&queue->waiting);
  queue->running++;
  self->running++;
  /* back to the end of the line: every other uid that waits comes first */
  update_turn (self, queue);
  if (uid != NULL)
    *uid = queue->uid;
  return item;
}

void
shimwatch_fair_queue_done (ShimwatchFairQueue *self,
                           guint32             uid)
{
  UidQueue *queue;

  g_return_if_fail (self != NULL);

  queue = g_hash_table_lookup (self->uids, GUINT_TO_POINTER (uid));
  g_return_if_fail (queue != NULL && queue->running > 0);

  queue->running--;
  queue->queued--;
  self->running--;
  self->queued--;
  if (queue->queued == 0)
    {
      g_warn_if_fail (!queue->in_turn);
      g_hash_table_remove (self->uids, GUINT_TO_POINTER (uid));
      return;
    }
  update_turn (self, queue);
}

guint
shimwatch_fair_queue_get_n_queued (ShimwatchFairQueue *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->queued;
}

guint
shimwatch_fair_queue_get_n_running (ShimwatchFairQueue *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->running;
}
