/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchMetrics: what the service saw and did, for a fleet's Prometheus, in the
 * Prometheus text exposition format (docs/metrics.md lists every metric):
 *   - rendered on demand, for Manager.GetMetrics (shimwatchctl metrics);
 *   - written as <dir>/shimwatch.prom for node_exporter's textfile collector, atomically
 *     (a temporary file in the same directory, renamed over it), by a writer thread, at
 *     most every SHIMWATCH_METRICS_INTERVAL_MS and only after something changed: an idle
 *     service never wakes up for it.
 * The counters are the history's (ShimwatchCounters): they are kept under the state
 * directory with the history's own counters line, and survive restarts. The lifecycle
 * events are seen as the history gets them (its observer); what the history does not
 * see is counted by the shimwatch_metrics_count_*() calls. Labels are bounded: reasons,
 * owners and namespaces, never a task id.
 */
#pragma once

#include <glib-object.h>

#include "shimwatch-history.h"

G_BEGIN_DECLS

#define SHIMWATCH_METRICS_FILE         "shimwatch.prom"
#define SHIMWATCH_METRICS_INTERVAL_MS  5000

#define SHIMWATCH_TYPE_METRICS (shimwatch_metrics_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchMetrics, shimwatch_metrics, SHIMWATCH, METRICS, GObject)

/* adds to @supervised ("<owner>\n<namespace>" → GUINT_TO_POINTER (tasks), keys owned by
 * the table) the tasks supervised now */
typedef void (*ShimwatchMetricsTaskCounter) (GHashTable *supervised,
                                             gpointer    user_data);

/* @history: observed, a reference taken; @textfile_dir: NULL or "": no textfile */
ShimwatchMetrics *shimwatch_metrics_new          (ShimwatchHistory            *history,
                                                  const char                  *textfile_dir);
void              shimwatch_metrics_set_task_counter (ShimwatchMetrics            *self,
                                                      ShimwatchMetricsTaskCounter  counter,
                                                      gpointer                     user_data);
/* something the metrics show changed (a task came or went): the textfile is written
 * again soon */
void              shimwatch_metrics_changed      (ShimwatchMetrics            *self);
void              shimwatch_metrics_count_cleanup_timeout (ShimwatchMetrics   *self);
void              shimwatch_metrics_count_unresponsive    (ShimwatchMetrics   *self);
void              shimwatch_metrics_count_takeover        (ShimwatchMetrics   *self);
void              shimwatch_metrics_count_log_dropped     (ShimwatchMetrics   *self,
                                                           guint64             bytes);
/* the text exposition format, as the textfile has it */
char             *shimwatch_metrics_render       (ShimwatchMetrics            *self);

G_END_DECLS
