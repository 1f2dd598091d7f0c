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
  GList                     flight_link;  /* in scheduler->in_flight while a check runs */
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
  GQueue   in_flight;     /* targets whose check awaits its answer */
  GSource *timer;         /* one for all targets; ready time -1 while there is none */
  double   credit;        /* checks owed, carried from tick to tick */
  guint64  n_ticks;
  guint64  n_checks;
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

static void
arm_timer (ShimwatchHealthScheduler *self,
           gboolean                  sooner_only)
{
  guint tick_ms = shimwatch_health_scheduler_get_tick_ms (self);
  gint64 ready, current = g_source_get_ready_time (self->timer);

  if (tick_ms == 0)
    {
      g_source_set_ready_time (self->timer, -1);
      self->credit = 0;
      return;
    }
  ready = g_get_monotonic_time () + (gint64) tick_ms * 1000;
  if (!sooner_only || current < 0 || ready < current)
    g_source_set_ready_time (self->timer, ready);
}

static void
check_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  ShimwatchHealthTarget *target = user_data;
  ShimwatchHealthScheduler *self = target->scheduler;
  g_autoptr(GError) error = NULL;
  gboolean answered;

  answered = shimwatch_task_client_probe_finish (SHIMWATCH_TASK_CLIENT (source), result, &error);
  if (self != NULL)
    {
      g_queue_unlink (&self->in_flight, &target->flight_link);
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

/* the answers of the checks still running: those that came are read now */
static void
collect (ShimwatchHealthScheduler *self)
{
  g_autoptr(GPtrArray) targets = g_ptr_array_sized_new (self->in_flight.length);

  for (GList *l = self->in_flight.head; l != NULL; l = l->next)
    {
      ShimwatchHealthTarget *target = l->data;

      target->ref_count++;
      g_ptr_array_add (targets, target);
    }
  for (guint i = 0; i < targets->len; i++)
    {
      ShimwatchHealthTarget *target = targets->pdata[i];

      /* the check may have ended meanwhile, with another target's answers read */
      if (target->scheduler != NULL && target->in_flight)
        shimwatch_ttrpc_collect (shimwatch_task_client_get_ttrpc (target->client));
      target_unref (target);
    }
}

static gboolean
tick_cb (gpointer user_data)
{
  ShimwatchHealthScheduler *self = user_data;
  guint n, quota;

  self->n_ticks++;
  /* first the answers to the last tick's checks (a verdict may remove its target) */
  collect (self);
  n = self->ring.length;
  if (self->interval_ms == 0 || n == 0)
    {
      arm_timer (self, FALSE);
      return G_SOURCE_CONTINUE;
    }

  /* a fixed share of the ring per tick: each target once per interval; a late tick
   * checks no more than an early one */
  self->credit += (double) n * shimwatch_health_scheduler_get_tick_ms (self) / self->interval_ms;
  quota = MIN ((guint) self->credit, n);
  self->credit -= quota;
  for (guint i = 0; i < quota && self->ring.length > 0; i++)
    {
      GList *link = g_queue_pop_head_link (&self->ring);
      ShimwatchHealthTarget *target = link->data;

      g_queue_push_tail_link (&self->ring, link);
      /* a check still waiting for its deadline is not doubled */
      if (target->in_flight)
        continue;
      target->in_flight = TRUE;
      target->ref_count++;
      g_queue_push_tail_link (&self->in_flight, &target->flight_link);
      self->n_checks++;
      shimwatch_task_client_probe_async (target->client, self->timeout_ms, check_done_cb, target);
    }
  arm_timer (self, FALSE);
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
   * early, the timer is armed anew, with nothing owed from before */
  if (self->ring.length == 1)
    self->credit = 0;
  arm_timer (self, self->ring.length > 1);
  return target;
}

void
shimwatch_health_scheduler_remove (ShimwatchHealthScheduler *self,
                                   ShimwatchHealthTarget    *target)
{
  g_return_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self));
  g_return_if_fail (target != NULL && target->scheduler == self);

  g_queue_unlink (&self->ring, &target->ring_link);
  if (target->in_flight)
    g_queue_unlink (&self->in_flight, &target->flight_link);
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

void
shimwatch_health_scheduler_set_min_tick (ShimwatchHealthScheduler *self,
                                         guint                     min_tick_ms)
{
  g_return_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self));
  g_return_if_fail (min_tick_ms > 0);

  self->min_tick_ms = min_tick_ms;
  arm_timer (self, TRUE);
}

guint
shimwatch_health_scheduler_get_n_targets (ShimwatchHealthScheduler *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_HEALTH_SCHEDULER (self), 0);
  return self->ring.length;
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
  self->timer = shimwatch_timer_source_new (-1);
  g_source_set_name (self->timer, "ShimwatchHealthScheduler");
  g_source_set_callback (self->timer, tick_cb, self, NULL);
  g_source_attach (self->timer, g_main_context_get_thread_default ());
}
