/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchHealth"

#include "config.h"

#include "shimwatch-health-scheduler.h"
#include "shimwatch-poller.h"

struct _ShimwatchHealthTarget
{
  ShimwatchHealthScheduler *scheduler;    /* not owned; NULL once removed */
  ShimwatchTaskClient      *client;
  ShimwatchHealthFunc       func;
  gpointer                  user_data;
  GList                     ring_link;    /* in scheduler->ring */
  GList                     flight_link;  /* in flight_queue while its check is queued */
  GQueue                   *flight_queue; /* scheduler->sent or ->waiting, or NULL */
  gint64                    sent_at;      /* monotonic µs: the running check's start */
  gboolean                  in_flight;
  gboolean                  responsive;
  guint                     ref_count;    /* the scheduler's, and a running check's */
};

struct _ShimwatchHealthScheduler
{
  GObject  parent_instance;

  guint    interval_ms;
  guint    timeout_ms;
  guint    min_tick_ms;
  GQueue   ring;          /* every target, the next to check first */
  /* running checks, oldest first (one timeout for all: their deadlines come in order) */
  GQueue   sent;          /* answers not read yet */
  GQueue   waiting;       /* read once without an answer: read again at the deadline */
  GSource *timer;         /* one for all targets and deadlines; ready time -1: nothing due */
  gint64   next_tick;     /* monotonic µs; -1: no tick (no targets, or interval 0) */
  gint64   tick_started;  /* the answers of checks sent before it are read in this tick */
  guint    to_send;       /* checks of the current tick not started yet */
  double   credit;        /* checks owed, carried from tick to tick */
#ifdef SHIMWATCH_TEST_HOOKS
  guint64  n_ticks;       /* tests */
  guint64  n_checks;      /* tests */
#endif
};

G_DEFINE_TYPE (ShimwatchHealthScheduler, shimwatch_health_scheduler, G_TYPE_OBJECT)

static void
target_unref (ShimwatchHealthTarget *target)
{
  if (--target->ref_count > 0)
    return;
  g_clear_object (&target->client);
  g_free (target);
}

guint
shimwatch_health_scheduler_get_tick_ms (ShimwatchHealthScheduler *self)
{
  guint n;

  g_return_val_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self), 0);

  n = self->ring.length;
  if (self->interval_ms == 0 || n == 0)
    return 0;
  return MIN (MAX (self->interval_ms / n, self->min_tick_ms), self->interval_ms);
}

static gint64
deadline_of (ShimwatchHealthScheduler *self,
             GQueue                   *queue)
{
  ShimwatchHealthTarget *target = g_queue_peek_head (queue);

  return target != NULL ? target->sent_at + (gint64) self->timeout_ms * 1000 : -1;
}

static gint64
earliest (gint64 a,
          gint64 b)
{
  if (a < 0)
    return b;
  if (b < 0)
    return a;
  return MIN (a, b);
}

/* Called from tick_cb() (and where the ticks change): the timer's ready time set from
 * outside its dispatch wakes the main context, so that is done only when a tick must come
 * sooner. */
static void
arm_timer (ShimwatchHealthScheduler *self)
{
  ShimwatchHealthTarget *oldest = g_queue_peek_head (&self->sent);
  gint64 ready;

  /* more of this tick's work: at once, but after what the main loop found ready meanwhile
   * (the timer's priority is below the shims' sockets) */
  if ((self->to_send > 0 && self->ring.length > 0) ||
      (oldest != NULL && oldest->sent_at < self->tick_started))
    ready = 0;
  else
    ready = earliest (self->next_tick,
                      earliest (deadline_of (self, &self->sent),
                                deadline_of (self, &self->waiting)));
  g_source_set_ready_time (self->timer, ready);
}

/* the next tick no later than a tick from now (the ticks got shorter, or there were none) */
static void
tick_sooner (ShimwatchHealthScheduler *self)
{
  guint tick_ms = shimwatch_health_scheduler_get_tick_ms (self);
  gint64 next;
  gint64 current = g_source_get_ready_time (self->timer);

  if (tick_ms == 0)
    return;
  next = g_get_monotonic_time () + (gint64) tick_ms * 1000;
  if (self->next_tick < 0 || next < self->next_tick)
    self->next_tick = next;
  if (current < 0 || self->next_tick < current)
    g_source_set_ready_time (self->timer, self->next_tick);
}

static void
leave_queue (ShimwatchHealthTarget *target)
{
  if (target->flight_queue != NULL)
    g_queue_unlink (target->flight_queue, &target->flight_link);
  target->flight_queue = NULL;
}

static void
check_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  ShimwatchHealthTarget *target = user_data;
  g_autoptr(GError) error = NULL;
  gboolean answered;

  answered = shimwatch_task_client_probe_finish (SHIMWATCH_TASK_CLIENT (source), result, &error);
  if (target->scheduler != NULL)
    {
      leave_queue (target);
      target->in_flight = FALSE;
      /* answered, or not within the deadline; anything else (closed above all) says
       * nothing about whether the shim answers */
      if ((answered || g_error_matches (error, SHIMWATCH_TTRPC_ERROR,
                                        SHIMWATCH_GRPC_DEADLINE_EXCEEDED)) &&
          answered != target->responsive)
        {
          target->responsive = answered;
          target->func (answered, target->user_data);
        }
    }
  target_unref (target);
}

/* reads the answer of @queue's oldest check; past its deadline, ends it. Unanswered
 * within it, the check waits for its deadline. */
static void
read_oldest (ShimwatchHealthScheduler *self,
             GQueue                   *queue,
             gboolean                  expired)
{
  ShimwatchHealthTarget *target = g_queue_peek_head (queue);
  ShimwatchTtrpc *ttrpc = shimwatch_task_client_get_ttrpc (target->client);

  /* the verdict may remove the target, or others */
  target->ref_count++;
  leave_queue (target);
  if (expired)
    /* ended now, or its callback is on its way: not queued again either way */
    shimwatch_ttrpc_expire_deferred (ttrpc);
  else
    {
      shimwatch_ttrpc_collect (ttrpc);
      if (target->scheduler == self && target->in_flight)
        {
          g_queue_push_tail_link (&self->waiting, &target->flight_link);
          target->flight_queue = &self->waiting;
        }
    }
  target_unref (target);
}

static void
start_tick (ShimwatchHealthScheduler *self,
            gint64                    now)
{
  guint tick_ms = shimwatch_health_scheduler_get_tick_ms (self);
  guint quota;

#ifdef SHIMWATCH_TEST_HOOKS
  self->n_ticks++;
#endif
  self->tick_started = now;
  if (tick_ms == 0)
    {
      self->next_tick = -1;
      self->credit = 0;
      self->to_send = 0;
      return;
    }
  self->next_tick = now + (gint64) tick_ms * 1000;
  /* a fixed share of the ring per tick: each target once per interval; a late tick
   * checks no more than an early one */
  self->credit += (double) self->ring.length * tick_ms / self->interval_ms;
  quota = MIN ((guint) self->credit, self->ring.length);
  self->credit -= quota;
  self->to_send = quota;
}

static gboolean
tick_cb (gpointer user_data)
{
  ShimwatchHealthScheduler *self = user_data;
  gint64 now = g_get_monotonic_time ();
  guint reads = 0, sends = 0;

  if (self->next_tick >= 0 && now >= self->next_tick)
    start_tick (self, now);

  /* A bounded slice of the work per dispatch: a death that comes meanwhile waits for no
   * more than SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH sends, each of which wakes a shim that
   * may take the CPU from this thread. The rest follows in the next iterations, which do
   * not sleep: the wake-ups stay one per tick. First the deadlines that passed, then the
   * answers to the earlier ticks' checks, then this tick's checks. */
  while (reads < SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH)
    {
      gint64 waiting = deadline_of (self, &self->waiting);
      gint64 sent = deadline_of (self, &self->sent);
      ShimwatchHealthTarget *oldest = g_queue_peek_head (&self->sent);

      if (waiting >= 0 && waiting <= now)
        read_oldest (self, &self->waiting, TRUE);
      else if (sent >= 0 && sent <= now)
        read_oldest (self, &self->sent, TRUE);
      else if (oldest != NULL && oldest->sent_at < self->tick_started)
        read_oldest (self, &self->sent, FALSE);
      else
        break;
      reads++;
    }

  while (sends < SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH && self->to_send > 0 &&
         self->ring.length > 0)
    {
      GList *link = g_queue_pop_head_link (&self->ring);
      ShimwatchHealthTarget *target = link->data;

      self->to_send--;
      g_queue_push_tail_link (&self->ring, link);
      /* a check still waiting for its deadline is not doubled */
      if (target->in_flight)
        continue;
      target->in_flight = TRUE;
      target->ref_count++;
#ifdef SHIMWATCH_TEST_HOOKS
      self->n_checks++;
#endif
      sends++;
      shimwatch_task_client_probe_async (target->client, self->timeout_ms, check_done_cb, target);
      /* after the call's own clock: the deadline here is never before the one it sent */
      target->sent_at = g_get_monotonic_time ();
      /* a call refused at once (closed, the peer does not read) has ended already */
      if (target->in_flight && target->scheduler == self)
        {
          g_queue_push_tail_link (&self->sent, &target->flight_link);
          target->flight_queue = &self->sent;
        }
    }
  if (self->ring.length == 0)
    self->to_send = 0;
  arm_timer (self);
  return G_SOURCE_CONTINUE;
}

ShimwatchHealthTarget *
shimwatch_health_scheduler_add (ShimwatchHealthScheduler *self,
                                ShimwatchTaskClient      *client,
                                ShimwatchHealthFunc       func,
                                gpointer                  user_data)
{
  ShimwatchHealthTarget *target;

  g_return_val_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self), NULL);
  g_return_val_if_fail (SHIMWATCH_IS_TASK_CLIENT (client), NULL);
  g_return_val_if_fail (func != NULL, NULL);

  target = g_new0 (ShimwatchHealthTarget, 1);
  target->scheduler = self;
  target->client = g_object_ref (client);
  target->func = func;
  target->user_data = user_data;
  target->responsive = TRUE;
  target->ref_count = 1;
  target->ring_link.data = target;
  target->flight_link.data = target;
  /* last in the ring: first checked about one interval from now */
  g_queue_push_tail_link (&self->ring, &target->ring_link);
  /* more targets, shorter ticks: the next one comes no later than the new tick. The first
   * target: a tick left armed when the last one went (see _remove()) would check it
   * early, the ticks start anew, with nothing owed from before */
  if (self->ring.length == 1)
    {
      self->credit = 0;
      self->to_send = 0;
      self->next_tick = -1;
    }
  tick_sooner (self);
  return target;
}

void
shimwatch_health_scheduler_remove (ShimwatchHealthScheduler *self,
                                   ShimwatchHealthTarget    *target)
{
  g_return_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self));
  g_return_if_fail (target != NULL && target->scheduler == self);

  g_queue_unlink (&self->ring, &target->ring_link);
  leave_queue (target);
  target->in_flight = FALSE;
  target->scheduler = NULL;
  target->func = NULL;
  /* The last target gone, the timer is left as it is: its tick finds nothing to check and
   * disarms it then (tick_cb()). Disarming it here changed the source's ready time from
   * outside its dispatch, which GLib answers with a wake-up of the main context (a write
   * to its eventfd and a main-loop iteration for nothing), at every death of a lone shim,
   * right after its ShimDisconnected was handed to GDBus's worker. */
  target_unref (target);
}

guint
shimwatch_health_scheduler_get_n_targets (ShimwatchHealthScheduler *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self), 0);
  return self->ring.length;
}

#ifdef SHIMWATCH_TEST_HOOKS
void
shimwatch_health_scheduler_set_min_tick (ShimwatchHealthScheduler *self,
                                         guint                     min_tick_ms)
{
  g_return_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self));
  g_return_if_fail (min_tick_ms > 0);

  self->min_tick_ms = min_tick_ms;
  tick_sooner (self);
}

guint64
shimwatch_health_scheduler_get_n_ticks (ShimwatchHealthScheduler *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self), 0);
  return self->n_ticks;
}

guint64
shimwatch_health_scheduler_get_n_checks (ShimwatchHealthScheduler *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self), 0);
  return self->n_checks;
}
#endif

ShimwatchHealthScheduler *
shimwatch_health_scheduler_new (guint interval_ms,
                                guint timeout_ms)
{
  ShimwatchHealthScheduler *self;

  g_return_val_if_fail (interval_ms == 0 || timeout_ms > 0, NULL);

  self = g_object_new (SHIMWATCH_TYPE_HEALTH_SCHEDULER, NULL);
  self->interval_ms = interval_ms;
  self->timeout_ms = timeout_ms;
  return self;
}

static void
shimwatch_health_scheduler_dispose (GObject *object)
{
  ShimwatchHealthScheduler *self = SHIMWATCH_HEALTH_SCHEDULER (object);

  while (self->ring.head != NULL)
    shimwatch_health_scheduler_remove (self, self->ring.head->data);
  if (self->timer != NULL)
    {
      g_source_destroy (self->timer);
      g_clear_pointer (&self->timer, g_source_unref);
    }

  G_OBJECT_CLASS (shimwatch_health_scheduler_parent_class)->dispose (object);
}

static void
shimwatch_health_scheduler_class_init (ShimwatchHealthSchedulerClass *klass)
{
  G_OBJECT_CLASS (klass)->dispose = shimwatch_health_scheduler_dispose;
}

static void
shimwatch_health_scheduler_init (ShimwatchHealthScheduler *self)
{
  self->min_tick_ms = SHIMWATCH_HEALTH_MIN_TICK_MS;
  self->next_tick = -1;
  self->tick_started = -1;
  self->timer = shimwatch_timer_source_new (-1);
  /* below the shims' sockets and pidfds: the rest of a tick, ready at once, comes after a
   * death that the main loop found meanwhile */
  g_source_set_priority (self->timer, G_PRIORITY_LOW);
  g_source_set_name (self->timer, "ShimwatchHealthScheduler");
  g_source_set_callback (self->timer, tick_cb, self, NULL);
  g_source_attach (self->timer, g_main_context_get_thread_default ());
}
