/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchTaskLog"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <glib-unix.h>

#include "shimwatch-error.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-poller.h"
#include "shimwatch-task-log.h"
#include "shimwatch-write.h"

#define TIME_LEN        27                /* 2026-12-02T21:45:54.123456Z */
#define DRAIN_BUDGET    (256 * 1024)      /* per wake-up and stream: others get their turn */
#define FINISH_BUDGET   (4 * 1024 * 1024) /* what a deleted task left in its FIFOs */
#define FIFO_SIZE       (1024 * 1024)     /* room for bursts while the main loop is busy */
#define READER_PIPE_SIZE (1024 * 1024)    /* best effort: a reader's pipe */
#define READER_END_TIMEOUT_S 10           /* a dropped reader that does not read its marker */
#define READER_CHUNK    (256 * 1024)      /* read from the files for a follower at once */
#define HOLD_MAX_MS     200               /* a follower that reads nothing for longer is not
                                           * waited for (see log_hold) */

typedef struct {
  const char *name;          /* "stdout", "stderr" */
  char       *fifo;
  int         fd;
  ShimwatchPollerWatch *watch;
  GString    *partial;       /* a line whose newline has not come yet */
} Stream;

typedef struct _Reader Reader;

struct _ShimwatchTaskLog
{
  GObject                parent_instance;

  char                  *namespace_;
  char                  *id;
  char                  *dir;
  ShimwatchTaskLogLimits limits;
  Stream                 streams[2];
  int                    out_fd;
  guint64                out_size;
  GString               *batch;         /* formatted lines not yet written */
  gboolean               write_failed;  /* logged once until a write succeeds again */
  GList                 *readers;       /* following readers (Reader *) */
  guint64                rotations;     /* of the files, since the log was opened */
  gboolean               held;          /* draining waits for a follower (see log_hold) */
  guint                  hold_timer;
  gboolean               done;
  gint64                 writers_gone_at;   /* 0: not known */
};

G_DEFINE_TYPE (ShimwatchTaskLog, shimwatch_task_log, G_TYPE_OBJECT)

enum {
  SIGNAL_FINISHED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

static void flush_batch (ShimwatchTaskLog *self);
static void reader_wake (Reader *reader);
static void log_update_hold (ShimwatchTaskLog *self);
static void log_release     (ShimwatchTaskLog *self);
static void reader_check_rotated (Reader *reader);
static void reader_end  (Reader *reader);

/* -- the line format ------------------------------------------------------------------ */

void
shimwatch_task_log_format_time (gint64 usec,
                                char   out[28])
{
  time_t seconds = (time_t) (usec / G_USEC_PER_SEC);
  struct tm tm;

  if (usec < 0)
    seconds = 0, usec = 0;
  gmtime_r (&seconds, &tm);
  g_snprintf (out, TIME_LEN + 1, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
              CLAMP (tm.tm_year + 1900, 0, 9999), tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
              tm.tm_min, tm.tm_sec, (int) (usec % G_USEC_PER_SEC));
}

static gboolean
parse_digits (const char *p,
              int         n,
              int        *value)
{
  *value = 0;
  for (int i = 0; i < n; i++)
    {
      if (!g_ascii_isdigit (p[i]))
        return FALSE;
      *value = *value * 10 + (p[i] - '0');
    }
  return TRUE;
}

static gboolean
parse_time (const char *p,
            gint64     *usec)
{
  struct tm tm = { 0 };
  int year, month, day, hour, minute, second, micro;
  time_t seconds;

  if (!parse_digits (p, 4, &year) || p[4] != '-' || !parse_digits (p + 5, 2, &month) ||
      p[7] != '-' || !parse_digits (p + 8, 2, &day) || p[10] != 'T' ||
      !parse_digits (p + 11, 2, &hour) || p[13] != ':' || !parse_digits (p + 14, 2, &minute) ||
      p[16] != ':' || !parse_digits (p + 17, 2, &second) || p[19] != '.' ||
      !parse_digits (p + 20, 6, &micro) || p[26] != 'Z')
    return FALSE;
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 ||
      second > 60)
    return FALSE;
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  seconds = timegm (&tm);
  if (seconds < 0)
    return FALSE;
  *usec = (gint64) seconds * G_USEC_PER_SEC + micro;
  return TRUE;
}

gboolean
shimwatch_task_log_parse_line (const char  *line,
                               gsize        len,
                               gint64      *time,
                               const char **stream,
                               const char **text,
                               gsize       *text_len)
{
  static const char *names[] = { "stdout", "stderr" };

  if (len < TIME_LEN + 1 + 6 + 1 || line[TIME_LEN] != ' ' || !parse_time (line, time))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    if (memcmp (line + TIME_LEN + 1, names[i], 6) == 0 && line[TIME_LEN + 7] == ' ')
      {
        *stream = names[i];
        *text = line + TIME_LEN + 8;
        *text_len = len - (TIME_LEN + 8);
        return TRUE;
      }
  return FALSE;
}

/* -- the files ------------------------------------------------------------------------ */

static char *
file_path (ShimwatchTaskLog *self,
           guint             generation)
{
  if (generation == 0)
    return g_build_filename (self->dir, SHIMWATCH_TASK_LOG_FILE, NULL);
  return g_strdup_printf ("%s/%s.%u", self->dir, SHIMWATCH_TASK_LOG_FILE, generation);
}

static gboolean
open_output (ShimwatchTaskLog  *self,
             gboolean           truncate,
             GError           **error)
{
  g_autofree char *path = file_path (self, 0);
  struct stat st;
  int saved_errno;

  self->out_fd = open (path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
                       (truncate ? O_TRUNC : 0), 0600);
  if (self->out_fd < 0 || fstat (self->out_fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      saved_errno = self->out_fd < 0 ? errno : EINVAL;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot open the task log %s: %s", path, g_strerror (saved_errno));
      if (self->out_fd >= 0)
        g_close (self->out_fd, NULL);
      self->out_fd = -1;
      return FALSE;
    }
  self->out_size = (guint64) st.st_size;
  return TRUE;
}

/* output.log → output.log.1 → … → output.log.<max_files - 1>, which is dropped */
static void
rotate (ShimwatchTaskLog *self)
{
  g_autoptr(GError) error = NULL;

  if (self->out_fd >= 0)
    g_close (self->out_fd, NULL);
  self->out_fd = -1;
  if (self->limits.dropped != NULL)
    {
      g_autofree char *oldest = file_path (self, self->limits.max_files - 1);
      struct stat st;

      /* the rename over it drops it: the cap's loss, for the metrics */
      if (stat (oldest, &st) == 0 && st.st_size > 0)
        self->limits.dropped ((guint64) st.st_size, self->limits.dropped_data);
    }
  for (guint generation = self->limits.max_files - 1; generation > 0; generation--)
    {
      g_autofree char *from = file_path (self, generation - 1);
      g_autofree char *to = file_path (self, generation);

      if (rename (from, to) != 0 && errno != ENOENT)
        shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (self),
                            "cannot rotate %s: %s", from, g_strerror (errno));
    }
  /* a new file, never the old one truncated: a follower may still read that */
  if (self->limits.max_files == 1)
    {
      g_autofree char *path = file_path (self, 0);

      (void) g_unlink (path);
    }
  self->rotations++;
  for (GList *l = self->readers; l != NULL; )
    {
      GList *next = l->next;

      reader_check_rotated (l->data);
      l = next;
    }
  if (!open_output (self, TRUE, &error))
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (self),
                        "%s; output is not kept until the next rotation",
                        error->message);
}

static void
write_output (ShimwatchTaskLog *self,
              const char       *data,
              gsize             len)
{
  if (self->out_fd < 0)
    return;
  if (!shimwatch_write_all (self->out_fd, data, len))
    {
      /* a full disk loses lines, never the task: it is told once */
      if (!self->write_failed)
        shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (self),
                            "cannot write the task log: %s; output is "
                            "lost until writing works again", g_strerror (errno));
      self->write_failed = TRUE;
      return;
    }
  self->write_failed = FALSE;
  self->out_size += len;
}

static void
flush_batch (ShimwatchTaskLog *self)
{
  if (self->batch->len == 0)
    return;
  write_output (self, self->batch->str, self->batch->len);
  g_string_truncate (self->batch, 0);
  /* followers read the lines from the file */
  for (GList *l = self->readers; l != NULL; )
    {
      GList *next = l->next;      /* a reader that went away goes here */

      reader_wake (l->data);
      l = next;
    }
  log_update_hold (self);
}

static void
add_line (ShimwatchTaskLog *self,
          const char       *stamp,
          const Stream     *stream,
          const char       *text,
          gsize             len)
{
  gsize line_len = TIME_LEN + 1 + strlen (stream->name) + 1 + len + 1;

  /* every file stays within its size: rotate before the line that would not fit */
  if (self->out_size + self->batch->len + line_len > self->limits.max_file_size &&
      self->out_size + self->batch->len > 0)
    {
      flush_batch (self);
      rotate (self);
    }
  g_string_append_len (self->batch, stamp, TIME_LEN);
  g_string_append_c (self->batch, ' ');
  g_string_append (self->batch, stream->name);
  g_string_append_c (self->batch, ' ');
  g_string_append_len (self->batch, text, (gssize) len);
  g_string_append_c (self->batch, '\n');
}

/* -- draining the FIFOs --------------------------------------------------------------- */

static void
take_bytes (ShimwatchTaskLog *self,
            Stream           *stream,
            const char       *stamp,
            const char       *data,
            gsize             len)
{
  while (len > 0)
    {
      const char *newline = memchr (data, '\n', len);
      gsize chunk = newline != NULL ? (gsize) (newline - data) : len;
      gsize room = SHIMWATCH_TASK_LOG_MAX_LINE - stream->partial->len;

      if (chunk >= room)
        {
          /* a long line is split at the cap */
          g_string_append_len (stream->partial, data, (gssize) room);
          add_line (self, stamp, stream, stream->partial->str, stream->partial->len);
          g_string_truncate (stream->partial, 0);
          data += room;
          len -= room;
          continue;
        }
      if (newline == NULL)
        {
          g_string_append_len (stream->partial, data, (gssize) len);
          return;
        }
      if (stream->partial->len > 0)
        {
          g_string_append_len (stream->partial, data, (gssize) chunk);
          add_line (self, stamp, stream, stream->partial->str, stream->partial->len);
          g_string_truncate (stream->partial, 0);
        }
      else
        add_line (self, stamp, stream, data, chunk);
      data += chunk + 1;
      len -= chunk + 1;
    }
}

/* reads until the FIFO is empty or `budget` bytes came; TRUE if it is empty */
static gboolean
drain (ShimwatchTaskLog *self,
       Stream           *stream,
       gsize             budget)
{
  char buffer[65536];
  char stamp[TIME_LEN + 1];
  gsize total = 0;
  gboolean empty = FALSE;

  shimwatch_task_log_format_time (g_get_real_time (), stamp);
  while (total < budget)
    {
      gssize n = read (stream->fd, buffer, sizeof buffer);

      if (n < 0 && errno == EINTR)
        continue;
      /* we hold the FIFO O_RDWR, so there is no EOF; EAGAIN means it is empty */
      if (n <= 0)
        {
          empty = TRUE;
          break;
        }
      take_bytes (self, stream, stamp, buffer, (gsize) n);
      total += (gsize) n;
    }
  flush_batch (self);
  return empty;
}

typedef struct {
  ShimwatchTaskLog *self;
  Stream           *stream;
} WatchData;

static gboolean
stream_readable_cb (int                   fd,
                    ShimwatchPollerEvents events,
                    gpointer              user_data)
{
  WatchData *watch = user_data;

  drain (watch->self, watch->stream, DRAIN_BUDGET);
  return G_SOURCE_CONTINUE;
}

static void
close_stream (ShimwatchTaskLog *self,
              Stream           *stream)
{
  g_clear_pointer (&stream->watch, shimwatch_poller_watch_remove);
  if (stream->fd >= 0)
    g_close (stream->fd, NULL);
  stream->fd = -1;
}

static gboolean
open_stream (ShimwatchTaskLog  *self,
             Stream            *stream,
             const char        *task_dir,
             gboolean           create,
             GError           **error)
{
  g_autofree char *path = g_strdup_printf ("%s/%s.fifo", task_dir, stream->name);
  WatchData *watch;
  struct stat st;
  int saved_errno;

  if (create && mkfifo (path, 0600) != 0)
    {
      saved_errno = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create the %s FIFO %s: %s", stream->name, path,
                   g_strerror (saved_errno));
      return FALSE;
    }
  /* O_RDWR, as containerd: the open never blocks and there is never an EOF */
  stream->fd = open (path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
  if (stream->fd < 0 || fstat (stream->fd, &st) != 0 || !S_ISFIFO (st.st_mode))
    {
      saved_errno = stream->fd < 0 ? errno : EINVAL;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot open the %s FIFO %s: %s", stream->name, path,
                   saved_errno == EINVAL ? "not a FIFO" : g_strerror (saved_errno));
      close_stream (self, stream);
      return FALSE;
    }
  /* best effort: a larger pipe absorbs a burst while the main loop is busy */
  (void) fcntl (stream->fd, F_SETPIPE_SZ, FIFO_SIZE);
  stream->fifo = g_steal_pointer (&path);
  watch = g_new0 (WatchData, 1);
  watch->self = self;
  watch->stream = stream;
  stream->watch = shimwatch_poller_add (shimwatch_poller_get_default (), stream->fd,
                                        SHIMWATCH_POLLER_IN, stream_readable_cb, watch, g_free,
                                        error);
  if (stream->watch == NULL)
    {
      g_free (watch);
      close_stream (self, stream);
      return FALSE;
    }
  return TRUE;
}

static ShimwatchTaskLog *
task_log_new (const char                    *namespace_,
              const char                    *id,
              const char                    *log_dir,
              const ShimwatchTaskLogLimits  *limits,
              gboolean                       fresh,
              GError                       **error)
{
  g_autoptr(ShimwatchTaskLog) self = g_object_new (SHIMWATCH_TYPE_TASK_LOG, NULL);
  g_autofree char *mark = g_build_filename (log_dir, SHIMWATCH_TASK_LOG_DELETED_MARK, NULL);
  g_autofree char *spare = g_build_filename (log_dir, SHIMWATCH_TASK_LOG_DELETED_SPARE, NULL);

  self->namespace_ = g_strdup (namespace_);
  self->id = g_strdup (id);
  self->dir = g_strdup (log_dir);
  self->limits = *limits;
  self->limits.max_files = MAX (self->limits.max_files, 1);
  if (g_mkdir_with_parents (log_dir, 0700) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create the task log directory %s: %s", log_dir,
                   g_strerror (saved_errno));
      return NULL;
    }
  /* a live task's log is not deleted, whatever an earlier run marked */
  (void) g_unlink (mark);
  /* The file of the mark is made now, while nothing waits for it: at the task's end it
   * is only written and renamed. Making a file there costs an inode on the state
   * directory's disk, which under load took longer than the rest of a death's own work.
   * (A log taken over after a restart has it from its creation, or makes the mark the
   * old way: a restart with many tasks does not make files.) */
  if (fresh)
    {
      int fd = open (spare, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);

      if (fd >= 0)
        close (fd);
    }
  if (!open_output (self, FALSE, error))
    return NULL;
  return g_steal_pointer (&self);
}

ShimwatchTaskLog *
shimwatch_task_log_new (const char                    *namespace_,
                        const char                    *id,
                        const char                    *task_dir,
                        const char                    *log_dir,
                        ShimwatchTaskLogStreams        streams,
                        const ShimwatchTaskLogLimits  *limits,
                        GError                       **error)
{
  g_autoptr(ShimwatchTaskLog) self = task_log_new (namespace_, id, log_dir, limits, TRUE, error);

  /* a failed create leaves nothing: the log directory is new (an earlier task's was put
   * aside), so it goes with what was made in it */
  if (self == NULL)
    {
      (void) shimwatch_task_log_remove_dir (log_dir, NULL);
      return NULL;
    }
  for (guint i = 0; i < G_N_ELEMENTS (self->streams); i++)
    if ((streams & (1u << i)) != 0 &&
        !open_stream (self, &self->streams[i], task_dir, TRUE, error))
      {
        shimwatch_task_log_discard (self);
        return NULL;
      }
  return g_steal_pointer (&self);
}

ShimwatchTaskLog *
shimwatch_task_log_reopen (const char                    *namespace_,
                           const char                    *id,
                           const char                    *task_dir,
                           const char                    *log_dir,
                           const ShimwatchTaskLogLimits  *limits,
                           GError                       **error)
{
  g_autoptr(ShimwatchTaskLog) self = NULL;
  gboolean any = FALSE;

  for (guint i = 0; i < 2; i++)
    {
      g_autofree char *path = g_strdup_printf ("%s/%s.fifo", task_dir, i == 0 ? "stdout" : "stderr");
      GStatBuf st;

      if (g_lstat (path, &st) == 0 && S_ISFIFO (st.st_mode))
        any = TRUE;
    }
  if (!any)
    return NULL;
  self = task_log_new (namespace_, id, log_dir, limits, FALSE, error);
  if (self == NULL)
    return NULL;
  for (guint i = 0; i < G_N_ELEMENTS (self->streams); i++)
    {
      g_autofree char *path = g_strdup_printf ("%s/%s.fifo", task_dir, self->streams[i].name);
      GStatBuf st;

      if (g_lstat (path, &st) == 0 && S_ISFIFO (st.st_mode) &&
          !open_stream (self, &self->streams[i], task_dir, FALSE, error))
        {
          shimwatch_task_log_detach (self);
          return NULL;
        }
    }
  return g_steal_pointer (&self);
}

const char *
shimwatch_task_log_get_fifo (ShimwatchTaskLog        *self,
                             ShimwatchTaskLogStreams  stream)
{
  g_return_val_if_fail (SHIMWATCH_IS_TASK_LOG (self), NULL);
  return self->streams[stream == SHIMWATCH_TASK_LOG_STDOUT ? 0 : 1].fifo;
}

const char *
shimwatch_task_log_get_dir (ShimwatchTaskLog *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_TASK_LOG (self), NULL);
  return self->dir;
}

/* -- options -------------------------------------------------------------------------- */

gboolean
shimwatch_task_log_parse_options (GVariant  *options,
                                  gboolean   open_log,
                                  guint     *tail,
                                  gint64    *since,
                                  gboolean  *follow,
                                  GError   **error)
{
  GVariantIter iter;
  const char *key;
  GVariant *value;

  *tail = 0;
  *since = 0;
  *follow = FALSE;
  g_variant_iter_init (&iter, options);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value))
    {
      g_autoptr(GVariant) owned G_GNUC_UNUSED = value;
      const GVariantType *expected;

      if (g_str_equal (key, "tail"))
        expected = G_VARIANT_TYPE_UINT32;
      else if (g_str_equal (key, "since"))
        expected = G_VARIANT_TYPE_UINT64;
      else if (open_log && g_str_equal (key, "follow"))
        expected = G_VARIANT_TYPE_BOOLEAN;
      else
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "unknown option \"%s\" (known: tail, since%s)", key,
                       open_log ? ", follow" : "");
          return FALSE;
        }
      if (!shimwatch_error_check_option_type (key, value, expected, error))
        return FALSE;
      if (g_str_equal (key, "tail"))
        *tail = g_variant_get_uint32 (value);
      else if (g_str_equal (key, "since"))
        *since = (gint64) MIN (g_variant_get_uint64 (value), (guint64) G_MAXINT64);
      else
        *follow = g_variant_get_boolean (value);
    }
  return TRUE;
}

/* -- reading the files (worker thread) ------------------------------------------------ */

typedef struct {
  int     fds[64];
  gsize   sizes[64];
  guint   n;
  guint   tail;
  gint64  since;
  gboolean variant;     /* ReadLog: a(tss), capped; OpenLog: the raw lines */
} Snapshot;

static void
snapshot_free (Snapshot *snapshot)
{
  for (guint i = 0; i < snapshot->n; i++)
    g_close (snapshot->fds[i], NULL);
  g_free (snapshot);
}

/* the files as they are now, oldest first: renames and appends after this do not matter */
static Snapshot *
take_snapshot (ShimwatchTaskLog *self,
               guint             tail,
               gint64            since,
               gboolean          variant)
{
  Snapshot *snapshot = g_new0 (Snapshot, 1);

  flush_batch (self);
  snapshot->tail = tail;
  snapshot->since = since;
  snapshot->variant = variant;
  for (guint generation = MIN (self->limits.max_files, G_N_ELEMENTS (snapshot->fds));
       generation-- > 0; )
    {
      g_autofree char *path = file_path (self, generation);
      int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      struct stat st;

      if (fd < 0)
        continue;
      if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
        {
          g_close (fd, NULL);
          continue;
        }
      snapshot->fds[snapshot->n] = fd;
      snapshot->sizes[snapshot->n] = (gsize) st.st_size;
      snapshot->n++;
    }
  return snapshot;
}

static GByteArray *
read_snapshot (Snapshot *snapshot)
{
  GByteArray *all = g_byte_array_new ();

  for (guint i = 0; i < snapshot->n; i++)
    {
      gsize start = all->len;
      gsize done = 0;

      g_byte_array_set_size (all, (guint) (start + snapshot->sizes[i]));
      while (done < snapshot->sizes[i])
        {
          gssize n = pread (snapshot->fds[i], all->data + start + done,
                            snapshot->sizes[i] - done, (off_t) done);

          if (n < 0 && errno == EINTR)
            continue;
          if (n <= 0)
            break;
          done += (gsize) n;
        }
      g_byte_array_set_size (all, (guint) (start + done));
      /* a file cut short (a crash mid-write) still ends its last line */
      if (all->len > 0 && all->data[all->len - 1] != '\n')
        g_byte_array_append (all, (const guint8 *) "\n", 1);
    }
  return all;
}

typedef struct {
  gsize start;
  gsize len;      /* without the newline */
} LineSpan;

static void
read_thread (GTask        *task,
             gpointer      source,
             gpointer      task_data,
             GCancellable *cancellable)
{
  Snapshot *snapshot = task_data;
  g_autoptr(GByteArray) all = read_snapshot (snapshot);
  g_autoptr(GArray) lines = g_array_new (FALSE, FALSE, sizeof (LineSpan));
  gsize first = 0;
  gsize bytes = 0;

  for (gsize pos = 0; pos < all->len; )
    {
      const guint8 *newline = memchr (all->data + pos, '\n', all->len - pos);
      LineSpan span = { pos, (gsize) (newline - (all->data + pos)) };
      gint64 time;
      const char *stream;
      const char *text;
      gsize text_len;

      pos += span.len + 1;
      if (!shimwatch_task_log_parse_line ((const char *) all->data + span.start, span.len,
                                          &time, &stream, &text, &text_len))
        continue;       /* not written by us: skipped */
      if (snapshot->since > 0 && time < snapshot->since)
        continue;
      g_array_append_val (lines, span);
    }
  if (snapshot->tail > 0 && lines->len > snapshot->tail)
    first = lines->len - snapshot->tail;

  if (!snapshot->variant)
    {
      GByteArray *out = g_byte_array_new ();

      for (gsize i = first; i < lines->len; i++)
        {
          LineSpan *span = &g_array_index (lines, LineSpan, i);

          g_byte_array_append (out, all->data + span->start, (guint) span->len + 1);
        }
      g_task_return_pointer (task, g_byte_array_free_to_bytes (out),
                             (GDestroyNotify) g_bytes_unref);
      return;
    }

  /* ReadLog: the newest lines that fit in one reply */
  for (gsize i = lines->len; i > first; i--)
    {
      LineSpan *span = &g_array_index (lines, LineSpan, i - 1);

      if (bytes + span->len > SHIMWATCH_TASK_LOG_READ_MAX)
        {
          first = i;
          break;
        }
      bytes += span->len;
    }
  {
    GVariantBuilder builder;

    g_variant_builder_init (&builder, G_VARIANT_TYPE ("a(tss)"));
    for (gsize i = first; i < lines->len; i++)
      {
        LineSpan *span = &g_array_index (lines, LineSpan, i);
        g_autofree char *valid = NULL;
        gint64 time;
        const char *stream;
        const char *text;
        gsize text_len;

        shimwatch_task_log_parse_line ((const char *) all->data + span->start, span->len,
                                       &time, &stream, &text, &text_len);
        /* D-Bus strings are UTF-8 without NUL: anything else becomes U+FFFD */
        valid = g_utf8_make_valid (text, (gssize) text_len);
        g_variant_builder_add (&builder, "(tss)", (guint64) time, stream, valid);
      }
    g_task_return_pointer (task, g_variant_ref_sink (g_variant_builder_end (&builder)),
                           (GDestroyNotify) g_variant_unref);
  }
}

void
shimwatch_task_log_read_async (ShimwatchTaskLog    *self,
                               guint                tail,
                               gint64               since,
                               GAsyncReadyCallback  callback,
                               gpointer             user_data)
{
  g_autoptr(GTask) task = g_task_new (self, NULL, callback, user_data);

  g_return_if_fail (SHIMWATCH_IS_TASK_LOG (self));

  g_task_set_source_tag (task, shimwatch_task_log_read_async);
  g_task_set_task_data (task, take_snapshot (self, tail, since, TRUE),
                        (GDestroyNotify) snapshot_free);
  g_task_run_in_thread (task, read_thread);
}

GVariant *
shimwatch_task_log_read_finish (ShimwatchTaskLog  *self,
                                GAsyncResult      *result,
                                GError           **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

/* -- readers (OpenLog) ---------------------------------------------------------------- */

/* A reader gets its backlog (read in a thread) from `pending`. A follower then reads the
 * log files themselves from where the backlog ended, as `tail -f` does: whatever it
 * does not read yet waits on disk, not in the service's memory, and it falls behind only
 * when the rotation dropped the file it was still reading (it is further behind than the
 * log keeps). Lines written while its backlog is read are in the files too. */
struct _Reader
{
  ShimwatchTaskLog *log;        /* NULL once the log let go of it */
  ShimwatchTaskLog *source;     /* a follower's log, whose files it reads (owned) */
  char             *namespace_;
  char             *id;
  int               fd;         /* the pipe's write end, non-blocking */
  guint             watch;
  GIOCondition      watching;
  GByteArray       *pending;
  gsize             sent;       /* of pending */
  int               file_fd;    /* a follower's log file, read up to offset */
  guint64           file_rotation;  /* the log's rotations when that file was output.log */
  guint64           offset;
  gboolean          mid_line;   /* what it was sent so far ends within a line */
  gboolean          not_waited_for;   /* read nothing while held for: see log_hold */
  gint64            progress_at;      /* monotonic: when it last took something */
  gboolean          loading;    /* the backlog is being read */
  gboolean          ending;     /* close once everything is written */
  gboolean          dead;       /* freed while its backlog was read: freed when it comes */
  gboolean          follow;     /* reads the files after its backlog */
  guint             end_timeout;  /* a dropped reader's last chance to take its marker */
};

static void
reader_free (Reader *reader)
{
  if (reader->log != NULL)
    reader->log->readers = g_list_remove (reader->log->readers, reader);
  reader->log = NULL;
  g_clear_handle_id (&reader->watch, g_source_remove);
  g_clear_handle_id (&reader->end_timeout, g_source_remove);
  if (reader->fd >= 0)
    g_close (reader->fd, NULL);
  reader->fd = -1;
  if (reader->loading)
    {
      reader->dead = TRUE;      /* backlog_read_cb() has it */
      return;
    }
  if (reader->file_fd >= 0)
    g_close (reader->file_fd, NULL);
  if (reader->source != NULL && reader->source->held)
    log_update_hold (reader->source);
  g_clear_object (&reader->source);
  g_byte_array_unref (reader->pending);
  g_free (reader->namespace_);
  g_free (reader->id);
  g_free (reader);
}

static gboolean reader_io_cb (int fd, GIOCondition condition, gpointer user_data);

static void
reader_watch (Reader  *reader,
              gboolean blocked)
{
  /* G_IO_ERR alone tells that the other end was closed */
  GIOCondition wanted = G_IO_ERR;

  if (blocked)
    wanted |= G_IO_OUT;
  if (reader->watch != 0 && wanted == reader->watching)
    return;
  g_clear_handle_id (&reader->watch, g_source_remove);
  reader->watching = wanted;
  reader->watch = g_unix_fd_add (reader->fd, wanted, reader_io_cb, reader);
}

static gboolean
reader_end_timeout_cb (gpointer user_data)
{
  Reader *reader = user_data;

  reader->end_timeout = 0;
  reader_free (reader);
  return G_SOURCE_REMOVE;
}

/* The rotation dropped the file the follower was still reading: it gets no more lines.
 * It gets the end of the line it was sent in part, then a last line that tells it why
 * (SHIMWATCH_TASK_LOG_FELL_BEHIND), then EOF. One that does not read that either is
 * closed after READER_END_TIMEOUT_S. */
static void
reader_fell_behind (Reader *reader)
{
  char stamp[TIME_LEN + 1];
  gsize keep = reader->sent;
  gboolean cut = reader->mid_line;

  /* the reader's problem, not the service's: a notice */
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_TASK (reader),
                      "an OpenLog reader fell behind by more than the log keeps (%u files) "
                      "and was disconnected", reader->source->limits.max_files);
  if (reader->log != NULL)
    reader->log->readers = g_list_remove (reader->log->readers, reader);
  reader->log = NULL;
  reader->follow = FALSE;
  /* the line it was sent in part: its rest is in pending, or after it in its file */
  if (cut)
    {
      const guint8 *newline = keep < reader->pending->len
                              ? memchr (reader->pending->data + keep, '\n',
                                        reader->pending->len - keep)
                              : NULL;

      keep = newline != NULL ? (gsize) (newline - reader->pending->data) + 1
                             : reader->pending->len;
      cut = newline == NULL;
    }
  g_byte_array_set_size (reader->pending, (guint) keep);
  /* pending ends where its file is read up to (its fd reads it even once the rotation
   * removed it) */
  if (cut && reader->file_fd >= 0)
    {
      char rest[SHIMWATCH_TASK_LOG_MAX_LINE + 64];
      gssize n = pread (reader->file_fd, rest, sizeof rest, (off_t) reader->offset);
      const char *newline = n > 0 ? memchr (rest, '\n', (gsize) n) : NULL;

      if (newline != NULL)
        {
          g_byte_array_append (reader->pending, (const guint8 *) rest,
                               (guint) (newline - rest + 1));
          cut = FALSE;
        }
    }
  if (cut)
    g_byte_array_append (reader->pending, (const guint8 *) "\n", 1);
  shimwatch_task_log_format_time (g_get_real_time (), stamp);
  g_byte_array_append (reader->pending, (const guint8 *) stamp, TIME_LEN);
  g_byte_array_append (reader->pending,
                       (const guint8 *) " " SHIMWATCH_TASK_LOG_FELL_BEHIND "\n",
                       strlen (" " SHIMWATCH_TASK_LOG_FELL_BEHIND "\n"));
  reader->ending = TRUE;
  if (reader->end_timeout == 0)
    reader->end_timeout = g_timeout_add_seconds (READER_END_TIMEOUT_S, reader_end_timeout_cb,
                                                 reader);
}

/* the follower's file is behind the current one by as many rotations as the log keeps
 * files: it was removed */
static gboolean
reader_file_dropped (Reader *reader)
{
  return reader->source->rotations - reader->file_rotation >= reader->source->limits.max_files;
}

/* The next bytes of the files into pending. FALSE when there are none yet: caught up. */
static gboolean
reader_read_file (Reader *reader)
{
  ShimwatchTaskLog *log = reader->source;

  for (;;)
    {
      gsize start = reader->pending->len;
      gssize n;

      if (reader_file_dropped (reader))
        {
          reader_fell_behind (reader);
          return TRUE;
        }
      if (reader->file_fd >= 0)
        {
          g_byte_array_set_size (reader->pending, (guint) (start + READER_CHUNK));
          do
            n = pread (reader->file_fd, reader->pending->data + start, READER_CHUNK,
                       (off_t) reader->offset);
          while (n < 0 && errno == EINTR);
          g_byte_array_set_size (reader->pending, (guint) (start + MAX (n, 0)));
          if (n > 0)
            {
              reader->offset += (guint64) n;
              return TRUE;
            }
        }
      /* at the end of its file: the next one, once that was rotated */
      if (reader->file_rotation >= log->rotations)
        return FALSE;
      {
        g_autofree char *path =
          file_path (log, (guint) (log->rotations - reader->file_rotation - 1));

        if (reader->file_fd >= 0)
          g_close (reader->file_fd, NULL);
        reader->file_rotation++;
        reader->offset = 0;
        reader->file_fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      }
    }
}

/* writes what it can; FALSE if the reader is gone */
static gboolean
reader_write (Reader *reader)
{
  for (;;)
    {
      while (reader->sent < reader->pending->len)
        {
          gssize n = write (reader->fd, reader->pending->data + reader->sent,
                            reader->pending->len - reader->sent);

          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0 && errno == EAGAIN)
            {
              /* compact now and then: pending holds at most a backlog and a chunk */
              if (reader->sent > 65536 && reader->sent > reader->pending->len / 2)
                {
                  g_byte_array_remove_range (reader->pending, 0, (guint) reader->sent);
                  reader->sent = 0;
                }
              reader_watch (reader, TRUE);
              return TRUE;
            }
          if (n <= 0)
            {
              g_debug ("%s/%s: a log reader went away: %s", reader->namespace_, reader->id,
                       g_strerror (errno));
              reader_free (reader);
              return FALSE;
            }
          reader->sent += (gsize) n;
          reader->progress_at = g_get_monotonic_time ();
          reader->mid_line = reader->pending->data[reader->sent - 1] != '\n';
        }
      g_byte_array_set_size (reader->pending, 0);
      reader->sent = 0;
      if (!reader->follow || !reader_read_file (reader))
        break;
    }
  if (reader->source != NULL && reader->source->held)
    log_update_hold (reader->source);
  if (reader->ending)
    {
      reader_free (reader);
      return FALSE;
    }
  reader_watch (reader, FALSE);
  return TRUE;
}

static gboolean
reader_io_cb (int          fd,
              GIOCondition condition,
              gpointer     user_data)
{
  Reader *reader = user_data;

  if ((condition & (G_IO_ERR | G_IO_HUP)) != 0)
    {
      reader->watch = 0;
      reader_free (reader);
      return G_SOURCE_REMOVE;
    }
  /* reader_write() replaces or removes this source itself */
  reader_write (reader);
  return G_SOURCE_CONTINUE;
}

/* new lines are in the files: a follower that is not waiting for its pipe takes them */
static void
reader_wake (Reader *reader)
{
  if (!reader->loading && (reader->watching & G_IO_OUT) == 0)
    reader_write (reader);
}

/* the files rotated: a follower still reading the file that was dropped has fallen
 * behind (its fd still reads it: it gets its marker at its next write) */
static void
reader_check_rotated (Reader *reader)
{
  if (reader->follow && reader_file_dropped (reader))
    {
      reader_fell_behind (reader);
      if (!reader->loading)
        reader_write (reader);
    }
}

/* how far behind the end of the log a follower is, in bytes (rotated files counted as
 * full) */
static guint64
reader_lag (Reader *reader)
{
  ShimwatchTaskLog *log = reader->source;
  guint64 end = (log->rotations - reader->file_rotation) * log->limits.max_file_size +
                log->out_size;

  return (end > reader->offset ? end - reader->offset : 0) +
         (reader->pending->len - reader->sent);
}

static gboolean hold_timeout_cb (gpointer user_data);

static void
set_draining (ShimwatchTaskLog *self,
              gboolean          draining)
{
  for (guint i = 0; i < G_N_ELEMENTS (self->streams); i++)
    if (self->streams[i].watch != NULL)
      (void) shimwatch_poller_watch_set_events (self->streams[i].watch,
                                                draining ? SHIMWATCH_POLLER_IN : 0, NULL);
}

/* A follower more than half the log behind (a reader descheduled for a moment while the
 * task writes as fast as it can) holds the draining of the task's FIFOs until it is back
 * within a quarter, for as long as it reads: it is not dropped for a hiccup, and one that
 * reads keeps up, at its own pace. One that reads nothing for HOLD_MAX_MS is no longer
 * waited for, until it is back within a quarter: it falls behind and is dropped once it
 * is further behind than the log keeps. */
static void
log_hold (ShimwatchTaskLog *self)
{
  if (self->held || self->done)
    return;
  self->held = TRUE;
  /* each has HOLD_MAX_MS from now to read */
  for (GList *l = self->readers; l != NULL; l = l->next)
    ((Reader *) l->data)->progress_at = g_get_monotonic_time ();
  set_draining (self, FALSE);
  self->hold_timer = g_timeout_add (HOLD_MAX_MS, hold_timeout_cb, self);
}

static void
log_release (ShimwatchTaskLog *self)
{
  if (!self->held)
    return;
  self->held = FALSE;
  g_clear_handle_id (&self->hold_timer, g_source_remove);
  set_draining (self, TRUE);
}

static void
log_update_hold (ShimwatchTaskLog *self)
{
  guint64 keeps = self->limits.max_file_size * self->limits.max_files;
  guint64 worst = 0;

  for (GList *l = self->readers; l != NULL; l = l->next)
    {
      Reader *reader = l->data;
      guint64 lag;

      if (!reader->follow)
        continue;
      lag = reader_lag (reader);
      if (lag < keeps / 4)
        reader->not_waited_for = FALSE;
      else if (!reader->not_waited_for)
        worst = MAX (worst, lag);
    }
  if (worst > keeps / 2)
    log_hold (self);
  else if (worst < keeps / 4)
    log_release (self);
}

static gboolean
hold_timeout_cb (gpointer user_data)
{
  ShimwatchTaskLog *self = user_data;
  gint64 now = g_get_monotonic_time ();
  guint64 keeps = self->limits.max_file_size * self->limits.max_files;
  gint64 next_ms = G_MAXINT64;

  self->hold_timer = 0;
  for (GList *l = self->readers; l != NULL; l = l->next)
    {
      Reader *reader = l->data;
      gint64 idle_ms = (now - reader->progress_at) / 1000;

      if (!reader->follow || reader->not_waited_for || reader_lag (reader) < keeps / 4)
        continue;
      if (idle_ms < HOLD_MAX_MS)
        {
          next_ms = MIN (next_ms, HOLD_MAX_MS - idle_ms);
          continue;
        }
      reader->not_waited_for = TRUE;
      shimwatch_log_task (G_LOG_LEVEL_INFO, LOG_TASK (reader),
                          "an OpenLog reader read nothing for %u ms; its task's output no "
                          "longer waits for it", HOLD_MAX_MS);
    }
  /* one that reads is still waited for */
  if (next_ms != G_MAXINT64)
    self->hold_timer = g_timeout_add ((guint) MAX (next_ms, 1), hold_timeout_cb, self);
  else
    log_release (self);
  return G_SOURCE_REMOVE;
}

/* the log is done with it: it ends once it has everything */
static void
reader_end (Reader *reader)
{
  reader->log = NULL;
  reader->ending = TRUE;
  if (!reader->loading)
    reader_write (reader);
}

static void
backlog_read_cb (GObject      *source,
                 GAsyncResult *result,
                 gpointer      user_data)
{
  Reader *reader = user_data;
  g_autoptr(GBytes) backlog = g_task_propagate_pointer (G_TASK (result), NULL);
  gsize len = backlog != NULL ? g_bytes_get_size (backlog) : 0;

  reader->loading = FALSE;
  if (reader->dead)
    {
      reader_free (reader);
      return;
    }
  /* the backlog goes before the marker, if it fell behind meanwhile */
  if (len > 0)
    g_byte_array_prepend (reader->pending, g_bytes_get_data (backlog, NULL), (guint) len);
  reader_write (reader);
}

int
shimwatch_task_log_open_reader (ShimwatchTaskLog  *self,
                                guint              tail,
                                gint64             since,
                                gboolean           follow,
                                GError           **error)
{
  g_autoptr(GTask) task = NULL;
  Reader *reader;
  int fds[2];

  g_return_val_if_fail (SHIMWATCH_IS_TASK_LOG (self), -1);

  /* each holds a pipe, its backlog in memory and a file */
  if (g_list_length (self->readers) >= SHIMWATCH_TASK_LOG_MAX_READERS)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY,
                   "the log of task %s/%s has %u readers already, the limit of readers "
                   "per task; try again when one is done", self->namespace_, self->id,
                   SHIMWATCH_TASK_LOG_MAX_READERS);
      return -1;
    }
  if (!g_unix_open_pipe (fds, FD_CLOEXEC, error))
    return -1;
  if (!g_unix_set_fd_nonblocking (fds[1], TRUE, error))
    {
      g_close (fds[0], NULL);
      g_close (fds[1], NULL);
      return -1;
    }
  (void) fcntl (fds[1], F_SETPIPE_SZ, READER_PIPE_SIZE);
  reader = g_new0 (Reader, 1);
  reader->namespace_ = g_strdup (self->namespace_);
  reader->id = g_strdup (self->id);
  reader->fd = fds[1];
  reader->file_fd = -1;
  reader->pending = g_byte_array_new ();
  reader->loading = TRUE;
  /* without follow, or after the task is gone, the backlog is all there is */
  reader->ending = !follow || self->done;
  reader->follow = !reader->ending;
  task = g_task_new (self, NULL, backlog_read_cb, reader);
  g_task_set_source_tag (task, shimwatch_task_log_open_reader);
  /* (flushes what is batched: the files hold every line so far) */
  g_task_set_task_data (task, take_snapshot (self, tail, since, FALSE),
                        (GDestroyNotify) snapshot_free);
  if (reader->follow)
    {
      g_autofree char *path = file_path (self, 0);
      struct stat st;

      /* where the backlog ends: the end of the current file as it is now */
      reader->source = g_object_ref (self);
      reader->file_rotation = self->rotations;
      reader->file_fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (reader->file_fd >= 0 && fstat (reader->file_fd, &st) == 0)
        reader->offset = (guint64) st.st_size;
    }
  /* it counts until it has written what it has (without follow too) */
  if (!self->done)
    {
      reader->log = self;
      self->readers = g_list_prepend (self->readers, reader);
    }
  reader_watch (reader, FALSE);
  g_task_run_in_thread (task, read_thread);
  return fds[0];
}

guint
shimwatch_task_log_get_n_readers (ShimwatchTaskLog *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_TASK_LOG (self), 0);
  return g_list_length (self->readers);
}

/* -- the end -------------------------------------------------------------------------- */

static void
end_readers (ShimwatchTaskLog *self)
{
  GList *readers = g_steal_pointer (&self->readers);

  for (GList *l = readers; l != NULL; l = l->next)
    reader_end (l->data);
  g_list_free (readers);
}

static void
stop (ShimwatchTaskLog *self,
      gboolean          drain_first)
{
  for (guint i = 0; i < G_N_ELEMENTS (self->streams); i++)
    {
      Stream *stream = &self->streams[i];

      if (stream->fd < 0)
        continue;
      if (drain_first)
        {
          char stamp[TIME_LEN + 1];

          /* a read, unless the poller knows there is nothing left */
          if (!shimwatch_poller_watch_is_drained (stream->watch, self->writers_gone_at))
            drain (self, stream, FINISH_BUDGET);
          /* an unfinished last line is a line too */
          shimwatch_task_log_format_time (g_get_real_time (), stamp);
          if (stream->partial->len > 0)
            add_line (self, stamp, stream, stream->partial->str, stream->partial->len);
          g_string_truncate (stream->partial, 0);
        }
      close_stream (self, stream);
    }
  flush_batch (self);
  g_clear_handle_id (&self->hold_timer, g_source_remove);
  self->held = FALSE;
  if (self->out_fd >= 0)
    g_close (self->out_fd, NULL);
  self->out_fd = -1;
  end_readers (self);
}

/* the spare file made with the log, its time set and renamed into place; FALSE: there is
 * none (a log of an earlier version, or it could not be made) */
static gboolean
mark_from_spare (ShimwatchTaskLog *self,
                 const char       *mark,
                 gint64            when)
{
  g_autofree char *spare = g_build_filename (self->dir, SHIMWATCH_TASK_LOG_DELETED_SPARE, NULL);
  const struct timespec times[2] = {
    { .tv_nsec = UTIME_OMIT },
    { .tv_sec = when / G_USEC_PER_SEC, .tv_nsec = when % G_USEC_PER_SEC * 1000 },
  };

  /* The mark's time is its modification time: two calls that touch no data block. Writing
   * the time into the file took an open(), a write, an ftruncate() (a spare may hold what
   * an interrupted end of an earlier version wrote) and a close() more. */
  return utimensat (AT_FDCWD, spare, times, AT_SYMLINK_NOFOLLOW) == 0 &&
         rename (spare, mark) == 0;
}

void
shimwatch_task_log_finish (ShimwatchTaskLog *self)
{
  g_autofree char *mark = NULL;
  g_autoptr(GError) error = NULL;

  g_return_if_fail (SHIMWATCH_IS_TASK_LOG (self));

  if (self->done)
    return;
  /* retention counts from here (the file's content is the time of the TaskDelete); the
   * mark is written before stop() gives followers their end of file, so a reader that
   * sees the end also sees the log marked deleted */
  mark = g_build_filename (self->dir, SHIMWATCH_TASK_LOG_DELETED_MARK, NULL);
  if (!mark_from_spare (self, mark, g_get_real_time ()) &&
      !shimwatch_task_log_write_mark (self->dir, &error))
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (self),
                        "cannot mark the task log deleted: %s",
                        error->message);
  stop (self, TRUE);
  self->done = TRUE;
  g_signal_emit (self, signals[SIGNAL_FINISHED], 0);
}

void
shimwatch_task_log_set_writers_gone (ShimwatchTaskLog *self,
                                     gint64            when)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_LOG (self));

  self->writers_gone_at = when;
}

void
shimwatch_task_log_detach (ShimwatchTaskLog *self)
{
  g_return_if_fail (SHIMWATCH_IS_TASK_LOG (self));

  if (self->done)
    return;
  stop (self, FALSE);
  self->done = TRUE;
}

gboolean
shimwatch_task_log_write_mark (const char  *dir,
                               GError     **error)
{
  g_autofree char *mark = g_build_filename (dir, SHIMWATCH_TASK_LOG_DELETED_MARK, NULL);

  /* empty: its modification time says when */
  return g_file_set_contents_full (mark, "", 0, G_FILE_SET_CONTENTS_NONE, 0600, error);
}

gboolean
shimwatch_task_log_read_mark (const char *dir,
                              gint64     *when)
{
  g_autofree char *mark = g_build_filename (dir, SHIMWATCH_TASK_LOG_DELETED_MARK, NULL);
  struct stat st;

  if (lstat (mark, &st) != 0)
    return FALSE;
  /* a mark of an earlier version holds the same time as text, written when it was made */
  *when = (gint64) st.st_mtim.tv_sec * G_USEC_PER_SEC + st.st_mtim.tv_nsec / 1000;
  return TRUE;
}

gboolean
shimwatch_task_log_remove_dir (const char  *dir,
                               GError     **error)
{
  g_autoptr(GDir) listing = g_dir_open (dir, 0, NULL);
  const char *name;

  while (listing != NULL && (name = g_dir_read_name (listing)) != NULL)
    {
      g_autofree char *path = g_build_filename (dir, name, NULL);

      if (g_unlink (path) != 0 && errno != ENOENT)
        {
          int saved_errno = errno;

          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                       "cannot remove %s: %s", path, g_strerror (saved_errno));
          return FALSE;
        }
    }
  if (g_rmdir (dir) != 0 && errno != ENOENT)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot remove %s: %s", dir, g_strerror (saved_errno));
      return FALSE;
    }
  return TRUE;
}

void
shimwatch_task_log_discard (ShimwatchTaskLog *self)
{
  g_autoptr(GError) error = NULL;

  g_return_if_fail (SHIMWATCH_IS_TASK_LOG (self));

  shimwatch_task_log_detach (self);
  if (!shimwatch_task_log_remove_dir (self->dir, &error))
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_TASK (self), "%s", error->message);
  g_signal_emit (self, signals[SIGNAL_FINISHED], 0);
}

static void
shimwatch_task_log_finalize (GObject *object)
{
  ShimwatchTaskLog *self = SHIMWATCH_TASK_LOG (object);

  shimwatch_task_log_detach (self);
  for (guint i = 0; i < G_N_ELEMENTS (self->streams); i++)
    {
      g_free (self->streams[i].fifo);
      g_string_free (self->streams[i].partial, TRUE);
    }
  g_string_free (self->batch, TRUE);
  g_free (self->namespace_);
  g_free (self->id);
  g_free (self->dir);
  G_OBJECT_CLASS (shimwatch_task_log_parent_class)->finalize (object);
}

static void
shimwatch_task_log_class_init (ShimwatchTaskLogClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_task_log_finalize;

  /* the task's log is complete (deleted) or was discarded: retention starts */
  signals[SIGNAL_FINISHED] = g_signal_new ("finished", G_TYPE_FROM_CLASS (klass),
                                           G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL,
                                           G_TYPE_NONE, 0);
}

static void
shimwatch_task_log_init (ShimwatchTaskLog *self)
{
  self->out_fd = -1;
  self->batch = g_string_new (NULL);
  self->streams[0].name = "stdout";
  self->streams[1].name = "stderr";
  for (guint i = 0; i < G_N_ELEMENTS (self->streams); i++)
    {
      self->streams[i].fd = -1;
      self->streams[i].partial = g_string_new (NULL);
    }
}
