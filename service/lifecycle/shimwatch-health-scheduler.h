/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchHealthScheduler: asks every supervised shim `Connect` once per health interval,
 * the checks spread evenly over the interval, with one timer for all shims.
 *
 * ttrpc has no keepalive: a hung shim (stopped, deadlocked) keeps its socket open and is
 * only seen by asking it. Rather than a timer per shim, the targets wait in one ring; a
 * tick every max (interval / N, min-tick) checks the next slice of the ring, so every
 * target is checked once per interval and a tick checks about N × tick / interval of them.
 * The answers are not awaited one by one (SHIMWATCH_TTRPC_CALL_DEFERRED): they wait in
 * their sockets and the next tick reads them, so N shims cost one main-loop wakeup per
 * tick, not one per answer. The deadline is the scheduler's too, not a timer per check
 * (..._CALL_CALLER_DEADLINE): the checks run in the order they started, so the oldest one's
 * deadline is the only one the timer waits for. A check not answered within its deadline
 * (read first what arrived) makes the target unresponsive; its next answered check makes
 * it responsive again. A closed connection gives no verdict: the shim's disconnect path
 * has it. A removed target's check ends when its connection reads the answer or closes.
 *
 * A tick's work is done SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH checks at a time: each check
 * sent wakes a shim, which may take this thread's CPU for a while, and a death that comes
 * during the tick must not wait for all of them. The rest of the tick follows at once, at
 * a priority below the shims' events, in main-loop iterations that do not sleep.
 *
 * Under load ticks may come late; the checks then come late with them rather than in a
 * burst. Interval 0: no checks at all.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-task-client.h"

G_BEGIN_DECLS

/* a check not answered within this is a verdict: unresponsive */
#define SHIMWATCH_HEALTH_TIMEOUT_MS 5000
/* the shortest tick, so that even many shims cost at most one wakeup per second */
#define SHIMWATCH_HEALTH_MIN_TICK_MS 1000
/* one dispatch of the timer sends at most this many checks and reads at most this many
 * answers (or deadlines), whatever the number of targets */
#define SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH 20

#define SHIMWATCH_TYPE_HEALTH_SCHEDULER (shimwatch_health_scheduler_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchHealthScheduler, shimwatch_health_scheduler, SHIMWATCH,
                      HEALTH_SCHEDULER, GObject)

typedef struct _ShimwatchHealthTarget ShimwatchHealthTarget;

/* A target's verdict changed: it answered a check in time (TRUE), or did not (FALSE).
 * Every target starts responsive. */
typedef void (*ShimwatchHealthFunc) (gboolean responsive,
                                     gpointer user_data);

ShimwatchHealthScheduler *shimwatch_health_scheduler_new            (guint                     interval_ms,
                                                                     guint                     timeout_ms);
#ifdef SHIMWATCH_TEST_HOOKS
/* tests (-Dtest_hooks): a shorter shortest tick than SHIMWATCH_HEALTH_MIN_TICK_MS */
void                      shimwatch_health_scheduler_set_min_tick   (ShimwatchHealthScheduler *self,
                                                                     guint                     min_tick_ms);
#endif

/* Checks @client's shim from one interval from now on, until removed */
ShimwatchHealthTarget    *shimwatch_health_scheduler_add            (ShimwatchHealthScheduler *self,
                                                                     ShimwatchTaskClient      *client,
                                                                     ShimwatchHealthFunc       func,
                                                                     gpointer                  user_data);
/* No check of the target starts any more and @func is not called again */
void                      shimwatch_health_scheduler_remove         (ShimwatchHealthScheduler *self,
                                                                     ShimwatchHealthTarget    *target);

guint                     shimwatch_health_scheduler_get_n_targets  (ShimwatchHealthScheduler *self);
/* the time between two ticks now (0: no ticks, nothing to check) */
guint                     shimwatch_health_scheduler_get_tick_ms    (ShimwatchHealthScheduler *self);
#ifdef SHIMWATCH_TEST_HOOKS
/* tests: ticks so far, and checks started so far */
guint64                   shimwatch_health_scheduler_get_n_ticks    (ShimwatchHealthScheduler *self);
guint64                   shimwatch_health_scheduler_get_n_checks   (ShimwatchHealthScheduler *self);
#endif

G_END_DECLS
