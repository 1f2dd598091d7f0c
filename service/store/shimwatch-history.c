/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchHistory"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <glib/gstdio.h>

#include "shimwatch-history.h"
#include "shimwatch-write.h"

/* how long queued lines wait for company before the writer takes them */
#define BATCH_DELAY_MS   200
/* a line longer than this, or nested deeper, is not one of ours */
#define LINE_MAX_LENGTH  (64 * 1024)
#define LINE_MAX_DEPTH   8

#define COUNTERS_GROUP   "Counters"

struct _ShimwatchHistory
{
  GObject           parent_instance;

  char             *path;            /* NULL: memory only */
  char             *rotated_path;
  char             *counters_path;    /* an earlier version's: read, never written */
  guint             capacity;
  gsize             file_max;

  GQueue            events;          /* Entry, oldest first */
  ShimwatchHistoryObserver observer;
  gpointer          observer_data;
  ShimwatchCounters counters;

  GString          *pending_lines;   /* queued for the writer, not handed over yet */
  gboolean          counters_changed;   /* since the last batch handed over */
  guint             batch_source;
  GThreadPool      *writer;          /* one thread: jobs are written in order */

  /* the writer thread's own */
  gsize             file_size;
  gboolean          failing;
  gboolean          counters_owed;   /* "history" has no counters line since its start */

  GMutex            lock;            /* for sync() */
  GCond             written;
};

G_DEFINE_TYPE (ShimwatchHistory, shimwatch_history, G_TYPE_OBJECT)

typedef struct {
  GString          *lines;      /* or NULL */
  ShimwatchCounters counters;   /* as they were when the batch was handed over */
  gboolean          counters_changed;
  gboolean         *done;       /* set under the lock when written, for sync() */
} WriteJob;

/* -- the writer thread -------------------------------------------------------------- */

static void
report (ShimwatchHistory *self,
        const char       *what,
        const char       *path,
        int               saved_errno)
{
  /* once per run of failures, not once per batch */
  if (!self->failing)
    g_warning ("history: cannot %s %s: %s; events are kept in memory only until it works "
               "again", what, path, g_strerror (saved_errno));
  self->failing = TRUE;
}

/* decimal digits without a printf(3) per number: lines are made on the caller's path */
static void
append_uint (GString *out,
             guint64  value)
{
  char digits[20];
  guint n = 0;

  do
    digits[n++] = (char) ('0' + value % 10);
  while ((value /= 10) != 0);
  while (n > 0)
    g_string_append_c (out, digits[--n]);
}

/* The metrics' counters (ShimwatchCounters from deaths[] to delay_sum_us, all guint64)
 * are one array in the counters' line, "Metrics", in the struct's order: a line per
 * batch that changed them, and a key per number would make it three times as long,
 * and the history's files would no longer hold SHIMWATCH_HISTORY_CAPACITY events.
 * Fields are only ever added at the end: a shorter array (an earlier version's) leaves
 * the rest at 0, a longer one (a later version's) is read as far as it goes. */
#define METRICS_OFFSET G_STRUCT_OFFSET (ShimwatchCounters, deaths)
#define N_METRICS      ((sizeof (ShimwatchCounters) - METRICS_OFFSET) / sizeof (guint64))
G_STATIC_ASSERT (G_STRUCT_OFFSET (ShimwatchCounters, delay_sum_us) ==
                 METRICS_OFFSET + (N_METRICS - 1) * sizeof (guint64));

static guint64 *
metrics_of (ShimwatchCounters *counters)
{
  return (guint64 *) (gpointer) ((char *) counters + METRICS_OFFSET);
}

/* The counters' line of the history file: what g_variant_print (TRUE) gives for an
 * a{sv} of the three, the names of the key file an earlier version wrote, and the
 * metrics' array. */
static void
append_counters (GString                 *out,
                 const ShimwatchCounters *counters)
{
  ShimwatchCounters fields = *counters;
  const guint64 *metrics = metrics_of (&fields);

  g_string_append (out, "{'DisconnectCount': <uint64 ");
  append_uint (out, counters->disconnects);
  g_string_append (out, ">, 'ReapCount': <uint64 ");
  append_uint (out, counters->reaps);
  g_string_append (out, ">, 'CleanupFailureCount': <uint64 ");
  append_uint (out, counters->cleanup_failures);
  g_string_append (out, ">, 'Metrics': <[uint64 ");
  for (guint i = 0; i < N_METRICS; i++)
    {
      if (i > 0)
        g_string_append (out, ", ");
      append_uint (out, metrics[i]);
    }
  g_string_append (out, "]>}\n");
}

static gboolean
counters_are_zero (const ShimwatchCounters *counters)
{
  static const ShimwatchCounters zero = { 0 };

  return memcmp (counters, &zero, sizeof zero) == 0;
}

static void
append_lines (ShimwatchHistory *self,
              GString          *lines)
{
  struct stat st;
  int fd;

  fd = open (self->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    {
      report (self, "open", self->path, errno);
      return;
    }
  if (!shimwatch_write_all (fd, lines->str, lines->len) || fdatasync (fd) != 0 ||
      fstat (fd, &st) != 0)
    {
      int saved_errno = errno;

      close (fd);
      report (self, "write", self->path, saved_errno);
      return;
    }
  close (fd);
  self->file_size = (gsize) st.st_size;
  if (self->file_size >= self->file_max)
    {
      /* the older half goes; what the newer one holds is enough to fill the memory */
      if (g_rename (self->path, self->rotated_path) != 0)
        {
          report (self, "rotate", self->path, errno);
          return;
        }
      self->file_size = 0;
      /* the counters must not go with the older half, two rotations from now */
      self->counters_owed = TRUE;
    }
  if (self->failing)
    g_message ("history: %s is written again", self->path);
  self->failing = FALSE;
}

/* The counters are a line of the history file, appended with the batch's events, when
 * they changed, and once more after each start and each rotation (the newest such line
 * counts): the batch's one write and one fdatasync keep them. Rewriting a key file of
 * their own, atomically and durably, cost two fsyncs, a rename and four other calls
 * more per batch; in a mass death more than the events' own write. */
static void
write_job (gpointer data,
           gpointer user_data)
{
  WriteJob *job = data;
  ShimwatchHistory *self = user_data;

  if (self->path != NULL &&
      (job->counters_changed || (self->counters_owed && !counters_are_zero (&job->counters))))
    {
      if (job->lines == NULL)
        job->lines = g_string_new (NULL);
      append_counters (job->lines, &job->counters);
      self->counters_owed = FALSE;
    }
  if (self->path != NULL && job->lines != NULL && job->lines->len > 0)
    append_lines (self, job->lines);
  /* a batch that was not written: the next one says the counters again */
  if (self->failing)
    self->counters_owed = TRUE;
  if (job->done != NULL)
    {
      g_mutex_lock (&self->lock);
      *job->done = TRUE;
      g_cond_broadcast (&self->written);
      g_mutex_unlock (&self->lock);
    }
  if (job->lines != NULL)
    g_string_free (job->lines, TRUE);
  g_free (job);
}

/* -- queueing (main thread) ----------------------------------------------------------- */

static void
hand_over (ShimwatchHistory *self,
           gboolean         *done)
{
  WriteJob *job = g_new0 (WriteJob, 1);

  g_clear_handle_id (&self->batch_source, g_source_remove);
  if (self->pending_lines->len > 0)
    {
      job->lines = self->pending_lines;
      self->pending_lines = g_string_new (NULL);
    }
  job->counters = self->counters;
  job->counters_changed = self->counters_changed;
  self->counters_changed = FALSE;
  job->done = done;
  g_thread_pool_push (self->writer, job, NULL);
}

static gboolean
batch_cb (gpointer user_data)
{
  ShimwatchHistory *self = user_data;

  self->batch_source = 0;
  hand_over (self, NULL);
  return G_SOURCE_REMOVE;
}

static void
schedule (ShimwatchHistory *self)
{
  if (self->batch_source == 0)
    self->batch_source = g_timeout_add (BATCH_DELAY_MS, batch_cb, self);
}

void
shimwatch_history_sync (ShimwatchHistory *self)
{
  gboolean done = FALSE;

  g_return_if_fail (SHIMWATCH_IS_HISTORY (self));

  hand_over (self, &done);
  g_mutex_lock (&self->lock);
  while (!done)
    g_cond_wait (&self->written, &self->lock);
  g_mutex_unlock (&self->lock);
}

/* -- events --------------------------------------------------------------------------- */

/* An event as GetHistory gives it, kept as plain fields: the a{sv} is built only when
 * GetHistory asks (a death adds four events; GetHistory is rare). Strings are UTF-8,
 * kept in the entry's own block: one allocation per event, and one free when it goes
 * out of the memory's capacity (which, once full, is at every event). */
typedef struct {
  guint64  time;
  char    *event;
  char    *namespace_;
  char    *id;
  gboolean has_pid;          /* a line of the file may lack it */
  guint32  pid;
  gboolean has_exit_status;
  guint32  exit_status;
  char    *reason;           /* NULL: none */
  char     strings[];        /* event, namespace, id and reason, each NUL-terminated */
} Entry;

static void
entry_free (Entry *entry)
{
  g_free (entry);
}

/* @value as it is when valid UTF-8 (ours always are), else a valid copy in @made */
static const char *
valid (const char  *value,
       char       **made)
{
  if (value == NULL || g_utf8_validate (value, -1, NULL))
    return value;
  return *made = g_utf8_make_valid (value, -1);
}

static char *
put_string (char       **at,
            const char  *value)
{
  char *start = *at;
  gsize size = strlen (value) + 1;

  memcpy (start, value, size);
  *at += size;
  return start;
}

/* the strings are made valid UTF-8; @reason may be NULL */
static Entry *
entry_new (guint64     time,
           const char *event,
           const char *namespace_,
           const char *id,
           const char *reason)
{
  g_autofree char *valid_event = NULL;
  g_autofree char *valid_namespace = NULL;
  g_autofree char *valid_id = NULL;
  g_autofree char *valid_reason = NULL;
  Entry *entry;
  char *at;

  event = valid (event, &valid_event);
  namespace_ = valid (namespace_, &valid_namespace);
  id = valid (id, &valid_id);
  reason = valid (reason, &valid_reason);
  entry = g_malloc0 (sizeof (Entry) + strlen (event) + strlen (namespace_) + strlen (id) +
                     (reason != NULL ? strlen (reason) + 1 : 0) + 3);
  at = entry->strings;
  entry->time = time;
  entry->event = put_string (&at, event);
  entry->namespace_ = put_string (&at, namespace_);
  entry->id = put_string (&at, id);
  if (reason != NULL)
    entry->reason = put_string (&at, reason);
  return entry;
}

/* the entry's a{sv}: time, event, namespace, id, then pid, exit_status and reason where
 * the entry has them */
static GVariant *
entry_to_variant (const Entry *entry)
{
  GVariantBuilder builder;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "time", g_variant_new_uint64 (entry->time));
  g_variant_builder_add (&builder, "{sv}", "event", g_variant_new_string (entry->event));
  g_variant_builder_add (&builder, "{sv}", "namespace",
                         g_variant_new_string (entry->namespace_));
  g_variant_builder_add (&builder, "{sv}", "id", g_variant_new_string (entry->id));
  if (entry->has_pid)
    g_variant_builder_add (&builder, "{sv}", "pid", g_variant_new_uint32 (entry->pid));
  if (entry->has_exit_status)
    g_variant_builder_add (&builder, "{sv}", "exit_status",
                           g_variant_new_uint32 (entry->exit_status));
  if (entry->reason != NULL)
    g_variant_builder_add (&builder, "{sv}", "reason", g_variant_new_string (entry->reason));
  return g_variant_builder_end (&builder);
}

static void
keep (ShimwatchHistory *self,
      Entry            *entry)
{
  g_queue_push_tail (&self->events, entry);
  while (self->events.length > self->capacity)
    entry_free (g_queue_pop_head (&self->events));
}

/* a string as g_variant_print() writes it, for what is printable ASCII (every name and
 * reason of ours); FALSE for anything else, which g_variant_print() itself escapes */
static gboolean
append_quoted (GString    *out,
               const char *value)
{
  char quote = strchr (value, '\'') != NULL ? '"' : '\'';

  g_string_append_c (out, quote);
  for (const char *p = value; *p != '\0'; p++)
    {
      if (*p < 0x20 || *p > 0x7e)
        return FALSE;
      if (*p == quote || *p == '\\')
        g_string_append_c (out, '\\');
      g_string_append_c (out, *p);
    }
  g_string_append_c (out, quote);
  return TRUE;
}

/* the line g_variant_print (entry, TRUE) gives for the entry shimwatch_history_add()
 * builds of the same event, without printing a GVariant: the history's file format;
 * FALSE (and out as it was) where a string needs more than printable ASCII */
static gboolean
append_line (GString                     *out,
             const ShimwatchHistoryEvent *event,
             guint64                      time)
{
  gsize start = out->len;
  gboolean ok;

  g_string_append (out, "{'time': <uint64 ");
  append_uint (out, time);
  g_string_append (out, ">, 'event': <");
  ok = append_quoted (out, event->event);
  g_string_append (out, ">, 'namespace': <");
  ok = ok && append_quoted (out, event->namespace_);
  g_string_append (out, ">, 'id': <");
  ok = ok && append_quoted (out, event->id);
  g_string_append (out, ">, 'pid': <uint32 ");
  append_uint (out, event->pid);
  g_string_append_c (out, '>');
  if (event->has_exit_status)
    {
      g_string_append (out, ", 'exit_status': <uint32 ");
      append_uint (out, event->exit_status);
      g_string_append_c (out, '>');
    }
  if (ok && event->reason != NULL && event->reason[0] != '\0')
    {
      g_string_append (out, ", 'reason': <");
      ok = append_quoted (out, event->reason);
      g_string_append_c (out, '>');
    }
  g_string_append (out, "}\n");
  if (!ok)
    g_string_truncate (out, start);
  return ok;
}

void
shimwatch_history_add (ShimwatchHistory            *self,
                       const ShimwatchHistoryEvent *event)
{
  Entry *entry;
  guint64 time;

  g_return_if_fail (SHIMWATCH_IS_HISTORY (self));
  g_return_if_fail (event->event != NULL && event->namespace_ != NULL && event->id != NULL);

  time = (guint64) (event->time != 0 ? event->time : g_get_real_time ());
  entry = entry_new (time, event->event, event->namespace_, event->id,
                     event->reason != NULL && event->reason[0] != '\0' ? event->reason : NULL);
  entry->has_pid = TRUE;
  entry->pid = event->pid;
  entry->has_exit_status = event->has_exit_status;
  entry->exit_status = event->exit_status;
  keep (self, entry);
  if (self->observer != NULL)
    self->observer (event, time, self->observer_data);

  if (self->path == NULL)
    return;
  if (!append_line (self->pending_lines, event, time))
    {
      g_autoptr(GVariant) variant = g_variant_ref_sink (entry_to_variant (entry));
      g_autofree char *line = g_variant_print (variant, TRUE);

      g_string_append (self->pending_lines, line);
      g_string_append_c (self->pending_lines, '\n');
    }
  schedule (self);
}

void
shimwatch_history_add_task_event (ShimwatchHistory *self,
                                  const char       *namespace_,
                                  const char       *id,
                                  const char       *event,
                                  guint32           pid,
                                  gboolean          has_exit_status,
                                  guint32           exit_status,
                                  const char       *reason)
{
  ShimwatchHistoryEvent entry = {
    .event = event,
    .namespace_ = namespace_,
    .id = id,
    .pid = pid,
    .has_exit_status = has_exit_status,
    .exit_status = exit_status,
    .reason = reason,
  };

  shimwatch_history_add (self, &entry);
}

GVariant *
shimwatch_history_query (ShimwatchHistory *self,
                         const char       *namespace_,
                         const char       *id,
                         guint             limit)
{
  g_autoptr(GPtrArray) found = g_ptr_array_new ();
  GVariantBuilder builder;

  g_return_val_if_fail (SHIMWATCH_IS_HISTORY (self), NULL);

  for (GList *l = self->events.tail; l != NULL && (limit == 0 || found->len < limit); l = l->prev)
    {
      Entry *entry = l->data;

      if ((namespace_ == NULL || g_str_equal (entry->namespace_, namespace_)) &&
          (id == NULL || g_str_equal (entry->id, id)))
        g_ptr_array_add (found, entry);
    }
  g_variant_builder_init (&builder, G_VARIANT_TYPE ("aa{sv}"));
  for (guint i = found->len; i > 0; i--)
    g_variant_builder_add_value (&builder, entry_to_variant (g_ptr_array_index (found, i - 1)));
  return g_variant_builder_end (&builder);
}

/* -- counters ------------------------------------------------------------------------- */

void
shimwatch_history_set_observer (ShimwatchHistory         *self,
                                ShimwatchHistoryObserver  observer,
                                gpointer                  user_data)
{
  g_return_if_fail (SHIMWATCH_IS_HISTORY (self));
  self->observer = observer;
  self->observer_data = user_data;
}

void
shimwatch_history_get_counters (ShimwatchHistory  *self,
                                ShimwatchCounters *counters)
{
  g_return_if_fail (SHIMWATCH_IS_HISTORY (self));
  *counters = self->counters;
}

void
shimwatch_history_set_counters (ShimwatchHistory        *self,
                                const ShimwatchCounters *counters)
{
  g_return_if_fail (SHIMWATCH_IS_HISTORY (self));

  self->counters = *counters;
  if (self->path == NULL)
    return;
  /* formatted by the writer, once per batch: not at every change (two per death) */
  self->counters_changed = TRUE;
  schedule (self);
}

/* -- loading what an earlier run wrote ------------------------------------------------ */

/* nesting of the text outside its string literals: ours is 2 deep */
static gboolean
shallow (const char *line)
{
  int depth = 0;
  char quote = 0;

  for (const char *p = line; *p != '\0'; p++)
    {
      if (quote != 0)
        {
          if (*p == '\\' && p[1] != '\0')
            p++;
          else if (*p == quote)
            quote = 0;
          continue;
        }
      if (*p == '\'' || *p == '"')
        quote = *p;
      else if (strchr ("{[(<", *p) != NULL && ++depth > LINE_MAX_DEPTH)
        return FALSE;
      else if (strchr ("}])>", *p) != NULL)
        depth--;
    }
  return TRUE;
}

/* a line of counters (append_counters()): each taken where it is more than what was
 * read before (they only grow, and the newest line has the most); the metrics are
 * taken as a whole from the line that has counted the most of them (a line of an
 * earlier version has none); FALSE: not one */
static gboolean
take_counters (ShimwatchHistory *self,
               GVariant         *parsed)
{
  ShimwatchCounters read = { 0 };
  g_autoptr(GVariant) array = NULL;
  guint64 read_total = 0;
  guint64 known_total = 0;

  if (!g_variant_lookup (parsed, "DisconnectCount", "t", &read.disconnects) ||
      !g_variant_lookup (parsed, "ReapCount", "t", &read.reaps) ||
      !g_variant_lookup (parsed, "CleanupFailureCount", "t", &read.cleanup_failures))
    return FALSE;
  self->counters.disconnects = MAX (self->counters.disconnects, read.disconnects);
  self->counters.reaps = MAX (self->counters.reaps, read.reaps);
  self->counters.cleanup_failures = MAX (self->counters.cleanup_failures,
                                         read.cleanup_failures);
  array = g_variant_lookup_value (parsed, "Metrics", G_VARIANT_TYPE ("at"));
  if (array != NULL)
    {
      gsize n;
      const guint64 *values = g_variant_get_fixed_array (array, &n, sizeof (guint64));

      memcpy (metrics_of (&read), values, MIN (n, N_METRICS) * sizeof (guint64));
    }
  /* every one of them only grows: the newest line has the largest sum */
  for (guint i = 0; i < N_METRICS; i++)
    {
      read_total += metrics_of (&read)[i];
      known_total += metrics_of (&self->counters)[i];
    }
  if (read_total >= known_total)
    memcpy (metrics_of (&self->counters), metrics_of (&read), N_METRICS * sizeof (guint64));
  return TRUE;
}

/* an entry with the keys and types GetHistory promises, or NULL; a line of counters
 * sets @counters_line and is taken into self->counters */
static Entry *
parse_line (ShimwatchHistory *self,
            const char       *line,
            gboolean         *counters_line)
{
  g_autoptr(GVariant) parsed = NULL;
  Entry *entry;
  const char *event;
  const char *namespace_;
  const char *id;
  const char *reason = NULL;
  guint64 time;

  *counters_line = FALSE;
  if (strlen (line) > LINE_MAX_LENGTH || !shallow (line))
    return NULL;
  parsed = g_variant_parse (G_VARIANT_TYPE_VARDICT, line, NULL, NULL, NULL);
  if (parsed == NULL)
    return NULL;
  /* the parser gives valid UTF-8 strings only */
  if (!g_variant_lookup (parsed, "time", "t", &time) ||
      !g_variant_lookup (parsed, "event", "&s", &event) ||
      !g_variant_lookup (parsed, "namespace", "&s", &namespace_) ||
      !g_variant_lookup (parsed, "id", "&s", &id))
    {
      *counters_line = take_counters (self, parsed);
      return NULL;
    }
  g_variant_lookup (parsed, "reason", "&s", &reason);
  entry = entry_new (time, event, namespace_, id, reason);
  entry->has_pid = g_variant_lookup (parsed, "pid", "u", &entry->pid);
  entry->has_exit_status = g_variant_lookup (parsed, "exit_status", "u", &entry->exit_status);
  return entry;
}

static void
load_file (ShimwatchHistory *self,
           const char       *path,
           guint            *broken)
{
  g_autofree char *contents = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) lines = NULL;
  gsize length;

  if (!g_file_get_contents (path, &contents, &length, &error))
    {
      if (!g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        g_warning ("history: %s", error->message);
      return;
    }
  if (path == self->path)
    self->file_size = length;
  lines = g_strsplit (contents, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      gboolean counters_line;
      Entry *entry;

      if (lines[i][0] == '\0')
        continue;
      entry = parse_line (self, lines[i], &counters_line);
      if (entry != NULL)
        keep (self, entry);
      else if (!counters_line)
        (*broken)++;
    }
}

/* the key file "counters" an earlier version kept the counters in (and replaced at each
 * batch); what the history's lines say counts where it is more */
static void
load_counters (ShimwatchHistory *self)
{
  g_autoptr(GKeyFile) file = g_key_file_new ();
  g_autoptr(GError) error = NULL;
  guint64 *fields[] = { &self->counters.disconnects, &self->counters.reaps,
                        &self->counters.cleanup_failures };
  static const char *names[] = { "DisconnectCount", "ReapCount", "CleanupFailureCount" };

  if (!g_key_file_load_from_file (file, self->counters_path, G_KEY_FILE_NONE, &error))
    {
      if (!g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        g_warning ("history: counters start at 0: %s", error->message);
      return;
    }
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    {
      guint64 value = g_key_file_get_uint64 (file, COUNTERS_GROUP, names[i], &error);

      if (error != NULL)
        {
          g_warning ("history: %s: %s starts at 0: %s", self->counters_path, names[i],
                     error->message);
          g_clear_error (&error);
          continue;
        }
      *fields[i] = MAX (*fields[i], value);
    }
}

ShimwatchHistory *
shimwatch_history_new (const char *dir,
                       guint       capacity,
                       gsize       file_max)
{
  ShimwatchHistory *self = g_object_new (SHIMWATCH_TYPE_HISTORY, NULL);
  guint broken = 0;

  self->capacity = MAX (capacity, 1);
  self->file_max = MAX (file_max, 1);
  if (dir != NULL && g_mkdir_with_parents (dir, 0700) != 0)
    g_warning ("history: cannot create %s: %s; history and counters are kept in memory only",
               dir, g_strerror (errno));
  else if (dir != NULL)
    {
      self->path = g_build_filename (dir, "history", NULL);
      self->rotated_path = g_build_filename (dir, "history.1", NULL);
      self->counters_path = g_build_filename (dir, "counters", NULL);
      load_file (self, self->rotated_path, &broken);
      load_file (self, self->path, &broken);
      load_counters (self);
      /* the lines of counters read are in the files an earlier run wrote: this run's
       * "history" is to have its own before it is rotated */
      self->counters_owed = TRUE;
      if (broken > 0)
        g_warning ("history: skipped %u unreadable lines in %s", broken, dir);
    }
  return self;
}

static void
shimwatch_history_finalize (GObject *object)
{
  ShimwatchHistory *self = SHIMWATCH_HISTORY (object);

  /* whatever is queued is written before the service goes */
  if (self->pending_lines->len > 0 || self->counters_changed)
    hand_over (self, NULL);
  g_thread_pool_free (self->writer, FALSE, TRUE);
  g_clear_handle_id (&self->batch_source, g_source_remove);
  g_queue_clear_full (&self->events, (GDestroyNotify) entry_free);
  g_string_free (self->pending_lines, TRUE);
  g_free (self->path);
  g_free (self->rotated_path);
  g_free (self->counters_path);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->written);
  G_OBJECT_CLASS (shimwatch_history_parent_class)->finalize (object);
}

static void
shimwatch_history_class_init (ShimwatchHistoryClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_history_finalize;
}

static void
shimwatch_history_init (ShimwatchHistory *self)
{
  g_queue_init (&self->events);
  self->pending_lines = g_string_new (NULL);
  g_mutex_init (&self->lock);
  g_cond_init (&self->written);
  /* one thread, never exclusive: it exists only while there is something to write */
  self->writer = g_thread_pool_new (write_job, self, 1, FALSE, NULL);
}
