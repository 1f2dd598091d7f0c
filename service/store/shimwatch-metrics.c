/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchMetrics"

#include "config.h"

#include <errno.h>
#include <string.h>
#include <glib/gstdio.h>

#include "shimwatch-metrics.h"

/* the upper bounds of the death-to-TaskDelete histogram's buckets, in seconds: a cleanup
 * takes tens of milliseconds when all goes well, up to CleanupTimeout (5 s by default,
 * at most 600) when a delete hangs, and containerd's cleanup timeout plus Grace before a
 * takeover in companion mode */
static const double delay_bounds[SHIMWATCH_COUNTERS_DELAY_BUCKETS] = {
  0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
};
static const char * const delay_bound_texts[SHIMWATCH_COUNTERS_DELAY_BUCKETS] = {
  "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120", "300",
};

/* ExitReason, by ShimwatchDeathReason */
static const char * const death_reasons[SHIMWATCH_N_DEATH_REASONS] = {
  "exited", "signaled", "oom-killed", "shim-died", "unknown",
};

/* shims that died and whose TaskDelete has not gone out yet: bounded by the tasks */
#define MAX_DEATHS_WAITING 65536

struct _ShimwatchMetrics
{
  GObject                      parent_instance;

  ShimwatchHistory            *history;
  ShimwatchMetricsTaskCounter  task_counter;
  gpointer                     task_counter_data;
  GHashTable                  *died_at;      /* "ns/id" → time (usec) of its shim's death */
  GHashTable                  *namespaces;   /* "<owner>\n<namespace>" seen in this run */
  gint64                       start_time;   /* usec since the epoch */

  char                        *textfile;     /* NULL: none */
  guint                        write_source;
  gint64                       last_write;   /* monotonic usec; 0: never */
  GThreadPool                 *writer;       /* one thread: writes in order */
  gboolean                     failing;      /* the writer thread's own */
};

G_DEFINE_TYPE (ShimwatchMetrics, shimwatch_metrics, G_TYPE_OBJECT)

/* -- the textfile ----------------------------------------------------------------------- */

static void
write_job (gpointer data,
           gpointer user_data)
{
  g_autofree char *text = data;
  ShimwatchMetrics *self = user_data;
  g_autoptr(GError) error = NULL;

  /* a temporary file in the same directory, renamed over the old one: node_exporter
   * reads the whole old file or the whole new one, never half of one (and only
   * *.prom files: the temporary one is not read) */
  if (!g_file_set_contents_full (self->textfile, text, -1, G_FILE_SET_CONTENTS_CONSISTENT,
                                 0644, &error))
    {
      /* once per run of failures, not at each change; no node_exporter installed (the
       * default directory missing) is no fault */
      if (!self->failing)
        g_log (G_LOG_DOMAIN,
               g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? G_LOG_LEVEL_MESSAGE
                                                                        : G_LOG_LEVEL_WARNING,
               "metrics: cannot write %s: %s; trying again at the next change",
               self->textfile, error->message);
      self->failing = TRUE;
      return;
    }
  if (self->failing)
    g_message ("metrics: %s is written again", self->textfile);
  self->failing = FALSE;
}

static gboolean
write_cb (gpointer user_data)
{
  ShimwatchMetrics *self = user_data;

  self->write_source = 0;
  self->last_write = g_get_monotonic_time ();
  g_thread_pool_push (self->writer, shimwatch_metrics_render (self), NULL);
  return G_SOURCE_REMOVE;
}

void
shimwatch_metrics_changed (ShimwatchMetrics *self)
{
  gint64 now;
  gint64 due;

  g_return_if_fail (SHIMWATCH_IS_METRICS (self));

  /* one write for all the changes until it is due: no timer while nothing changes */
  if (self->textfile == NULL || self->write_source != 0)
    return;
  now = g_get_monotonic_time ();
  due = self->last_write == 0 ? now : self->last_write + SHIMWATCH_METRICS_INTERVAL_MS * 1000;
  /* a short wait even then: a death's events (exit, delete, ...) come together */
  self->write_source = g_timeout_add (MAX ((guint) ((MAX (due - now, 0)) / 1000), 100),
                                      write_cb, self);
}

/* -- counting ----------------------------------------------------------------------------- */

typedef void (*CountFunc) (ShimwatchCounters *counters,
                           guint64            value);

static void
update (ShimwatchMetrics *self,
        CountFunc         count,
        guint64           value)
{
  ShimwatchCounters counters;

  shimwatch_history_get_counters (self->history, &counters);
  count (&counters, value);
  shimwatch_history_set_counters (self->history, &counters);
  shimwatch_metrics_changed (self);
}

static void
add_death (ShimwatchCounters *counters,
           guint64            reason)
{
  counters->deaths[reason]++;
}

static void
add_delay (ShimwatchCounters *counters,
           guint64            delay_us)
{
  for (guint i = 0; i < SHIMWATCH_COUNTERS_DELAY_BUCKETS; i++)
    if ((double) delay_us <= delay_bounds[i] * G_USEC_PER_SEC)
      {
        counters->delay_buckets[i]++;
        break;
      }
  counters->delay_count++;
  counters->delay_sum_us += delay_us;
}

static void
add_cleanup_timeout (ShimwatchCounters *counters,
                     guint64            value)
{
  counters->cleanup_timeouts += value;
}

static void
add_unresponsive (ShimwatchCounters *counters,
                  guint64            value)
{
  counters->unresponsive += value;
}

static void
add_takeover (ShimwatchCounters *counters,
              guint64            value)
{
  counters->takeovers += value;
}

static void
add_log_dropped (ShimwatchCounters *counters,
                 guint64            value)
{
  counters->log_bytes_dropped += value;
}

void
shimwatch_metrics_count_cleanup_timeout (ShimwatchMetrics *self)
{
  g_return_if_fail (SHIMWATCH_IS_METRICS (self));
  update (self, add_cleanup_timeout, 1);
}

void
shimwatch_metrics_count_unresponsive (ShimwatchMetrics *self)
{
  g_return_if_fail (SHIMWATCH_IS_METRICS (self));
  update (self, add_unresponsive, 1);
}

void
shimwatch_metrics_count_takeover (ShimwatchMetrics *self)
{
  g_return_if_fail (SHIMWATCH_IS_METRICS (self));
  update (self, add_takeover, 1);
}

void
shimwatch_metrics_count_log_dropped (ShimwatchMetrics *self,
                                     guint64           bytes)
{
  g_return_if_fail (SHIMWATCH_IS_METRICS (self));
  if (bytes > 0)
    update (self, add_log_dropped, bytes);
}

static guint64
death_reason (const char *reason)
{
  for (guint i = 0; i < SHIMWATCH_N_DEATH_REASONS; i++)
    if (g_strcmp0 (reason, death_reasons[i]) == 0)
      return i;
  return SHIMWATCH_DEATH_UNKNOWN;
}

/* the lifecycle events, as the history gets them: a death (TaskExit) by its ExitReason;
 * a shim's death (disconnected) and its TaskDelete (delete), whose distance is the
 * histogram's */
static void
history_event_cb (const ShimwatchHistoryEvent *event,
                  guint64                      time,
                  gpointer                     user_data)
{
  ShimwatchMetrics *self = user_data;
  g_autofree char *key = NULL;
  gpointer died_at;

  if (g_str_equal (event->event, "exit"))
    {
      update (self, add_death, death_reason (event->reason));
      return;
    }
  if (g_str_equal (event->event, "disconnected"))
    {
      key = g_strconcat (event->namespace_, "/", event->id, NULL);
      if (g_hash_table_size (self->died_at) < MAX_DEATHS_WAITING)
        g_hash_table_insert (self->died_at, g_steal_pointer (&key), GSIZE_TO_POINTER (time));
      shimwatch_metrics_changed (self);
      return;
    }
  if (g_str_equal (event->event, "delete"))
    {
      key = g_strconcat (event->namespace_, "/", event->id, NULL);
      if (g_hash_table_lookup_extended (self->died_at, key, NULL, &died_at))
        {
          guint64 since = GPOINTER_TO_SIZE (died_at);

          g_hash_table_remove (self->died_at, key);
          update (self, add_delay, time > since ? time - since : 0);
          return;
        }
    }
  /* a task created or deleted: the supervised gauge */
  shimwatch_metrics_changed (self);
}

/* -- rendering ---------------------------------------------------------------------------- */

static void
append_label_value (GString    *out,
                    const char *value)
{
  for (const char *p = value; *p != '\0'; p++)
    {
      if (*p == '\\' || *p == '"')
        g_string_append_c (out, '\\');
      if (*p == '\n')
        g_string_append (out, "\\n");
      else
        g_string_append_c (out, *p);
    }
}

static void
append_header (GString    *out,
               const char *name,
               const char *type,
               const char *help)
{
  g_string_append_printf (out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
append_counter (GString    *out,
                const char *name,
                const char *help,
                guint64     value)
{
  append_header (out, name, "counter", help);
  g_string_append_printf (out, "%s %" G_GUINT64_FORMAT "\n", name, value);
}

static int
compare_keys (gconstpointer a,
              gconstpointer b)
{
  return strcmp (*(const char * const *) a, *(const char * const *) b);
}

static void
append_supervised (ShimwatchMetrics *self,
                   GString          *out)
{
  g_autoptr(GHashTable) supervised = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                                            NULL);
  g_autofree gpointer *keys = NULL;
  GHashTableIter iter;
  gpointer key;
  guint n;

  if (self->task_counter != NULL)
    self->task_counter (supervised, self->task_counter_data);
  /* a namespace seen in this run stays, at 0, when its last task is gone: the series
   * goes down instead of going stale */
  g_hash_table_iter_init (&iter, supervised);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    g_hash_table_add (self->namespaces, g_strdup (key));
  keys = g_hash_table_get_keys_as_array (self->namespaces, &n);
  qsort (keys, n, sizeof *keys, compare_keys);
  append_header (out, "shimwatch_tasks_supervised", "gauge",
                 "Tasks supervised now, by namespace and owner (shimwatch: created through "
                 "CreateTask; containerd: watched in companion mode).");
  for (guint i = 0; i < n; i++)
    {
      const char *owner_namespace = keys[i];
      const char *newline = strchr (owner_namespace, '\n');

      g_string_append (out, "shimwatch_tasks_supervised{namespace=\"");
      append_label_value (out, newline + 1);
      g_string_append (out, "\",owner=\"");
      g_string_append_len (out, owner_namespace, newline - owner_namespace);
      g_string_append_printf (out, "\"} %u\n",
                              GPOINTER_TO_UINT (g_hash_table_lookup (supervised, keys[i])));
    }
}

char *
shimwatch_metrics_render (ShimwatchMetrics *self)
{
  GString *out = g_string_sized_new (4096);
  ShimwatchCounters counters;
  guint64 cumulative = 0;

  g_return_val_if_fail (SHIMWATCH_IS_METRICS (self), NULL);

  shimwatch_history_get_counters (self->history, &counters);

  append_header (out, "shimwatch_build_info", "gauge",
                 "The version of the running service, as a label; always 1.");
  g_string_append (out, "shimwatch_build_info{version=\"");
  append_label_value (out, PACKAGE_VERSION);
  g_string_append (out, "\"} 1\n");
  append_header (out, "shimwatch_start_time_seconds", "gauge",
                 "When the service started, in seconds since the epoch.");
  g_string_append_printf (out, "shimwatch_start_time_seconds %" G_GINT64_FORMAT ".%06d\n",
                          self->start_time / G_USEC_PER_SEC,
                          (int) (self->start_time % G_USEC_PER_SEC));

  append_supervised (self, out);

  append_header (out, "shimwatch_task_deaths_total", "counter",
                 "Tasks that ended (TaskExit), by ExitReason.");
  for (guint i = 0; i < SHIMWATCH_N_DEATH_REASONS; i++)
    g_string_append_printf (out, "shimwatch_task_deaths_total{reason=\"%s\"} %" G_GUINT64_FORMAT
                            "\n", death_reasons[i], counters.deaths[i]);
  append_counter (out, "shimwatch_shim_disconnects_total",
                  "Shims whose connection was lost: dead or hung (DisconnectCount).",
                  counters.disconnects);
  append_counter (out, "shimwatch_reaps_total",
                  "Cleanups shimwatch ran: after its own shim died or was reaped, of state "
                  "left on disk, or taken over from containerd (ReapCount).",
                  counters.reaps);
  append_header (out, "shimwatch_cleanup_failures_total", "counter",
                 "Cleanups that did not finish: the shim's delete failed, or timed out "
                 "(CleanupFailureCount is their sum).");
  g_string_append_printf (out, "shimwatch_cleanup_failures_total{reason=\"failed\"} %"
                          G_GUINT64_FORMAT "\n",
                          counters.cleanup_failures - MIN (counters.cleanup_failures,
                                                           counters.cleanup_timeouts));
  g_string_append_printf (out, "shimwatch_cleanup_failures_total{reason=\"timed-out\"} %"
                          G_GUINT64_FORMAT "\n",
                          MIN (counters.cleanup_failures, counters.cleanup_timeouts));

  append_header (out, "shimwatch_task_delete_delay_seconds", "histogram",
                 "Time from a shim's death to its task's TaskDelete.");
  for (guint i = 0; i < SHIMWATCH_COUNTERS_DELAY_BUCKETS; i++)
    {
      cumulative += counters.delay_buckets[i];
      g_string_append_printf (out, "shimwatch_task_delete_delay_seconds_bucket{le=\"%s\"} %"
                              G_GUINT64_FORMAT "\n", delay_bound_texts[i], cumulative);
    }
  g_string_append_printf (out, "shimwatch_task_delete_delay_seconds_bucket{le=\"+Inf\"} %"
                          G_GUINT64_FORMAT "\n", counters.delay_count);
  g_string_append_printf (out, "shimwatch_task_delete_delay_seconds_sum %" G_GUINT64_FORMAT
                          ".%06u\n", counters.delay_sum_us / G_USEC_PER_SEC,
                          (guint) (counters.delay_sum_us % G_USEC_PER_SEC));
  g_string_append_printf (out, "shimwatch_task_delete_delay_seconds_count %" G_GUINT64_FORMAT
                          "\n", counters.delay_count);

  append_counter (out, "shimwatch_unresponsive_shims_total",
                  "Shims the health checks found not answering (Responsive went false).",
                  counters.unresponsive);
  append_counter (out, "shimwatch_containerd_takeovers_total",
                  "Cleanups of containerd's dead shims that shimwatch took over (companion "
                  "mode).", counters.takeovers);
  append_counter (out, "shimwatch_task_log_dropped_bytes_total",
                  "Bytes of task output dropped by the log cap (TaskLogMaxSize x "
                  "TaskLogMaxFiles): the oldest rotated file, removed.",
                  counters.log_bytes_dropped);
  return g_string_free (out, FALSE);
}

/* -- the object ------------------------------------------------------------------------- */

void
shimwatch_metrics_set_task_counter (ShimwatchMetrics            *self,
                                    ShimwatchMetricsTaskCounter  counter,
                                    gpointer                     user_data)
{
  g_return_if_fail (SHIMWATCH_IS_METRICS (self));
  self->task_counter = counter;
  self->task_counter_data = user_data;
}

ShimwatchMetrics *
shimwatch_metrics_new (ShimwatchHistory *history,
                       const char       *textfile_dir)
{
  ShimwatchMetrics *self = g_object_new (SHIMWATCH_TYPE_METRICS, NULL);

  self->history = g_object_ref (history);
  shimwatch_history_set_observer (history, history_event_cb, self);
  if (textfile_dir != NULL && textfile_dir[0] != '\0')
    {
      self->textfile = g_build_filename (textfile_dir, SHIMWATCH_METRICS_FILE, NULL);
      /* the start time and the counters an earlier run left */
      shimwatch_metrics_changed (self);
    }
  return self;
}

static void
shimwatch_metrics_finalize (GObject *object)
{
  ShimwatchMetrics *self = SHIMWATCH_METRICS (object);

  shimwatch_history_set_observer (self->history, NULL, NULL);
  g_clear_handle_id (&self->write_source, g_source_remove);
  /* what is queued is written before the service goes */
  g_thread_pool_free (self->writer, FALSE, TRUE);
  g_clear_object (&self->history);
  g_hash_table_unref (self->died_at);
  g_hash_table_unref (self->namespaces);
  g_free (self->textfile);
  G_OBJECT_CLASS (shimwatch_metrics_parent_class)->finalize (object);
}

static void
shimwatch_metrics_class_init (ShimwatchMetricsClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_metrics_finalize;
}

static void
shimwatch_metrics_init (ShimwatchMetrics *self)
{
  self->died_at = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->namespaces = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->start_time = g_get_real_time ();
  /* one thread, never exclusive: it exists only while there is something to write */
  self->writer = g_thread_pool_new (write_job, self, 1, FALSE, NULL);
}
