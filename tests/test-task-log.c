/* SPDX-License-Identifier: Apache-2.0
 *
 * Unit tests of the task log (no bus, no shim): the line format, the options of ReadLog
 * and OpenLog, draining a FIFO into the log with long lines split and the last partial
 * line kept, rotation within the size cap, OpenLog readers (backlog, follow, EOF at the
 * end, a stalled reader dropped), and the configuration keys.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <glib-unix.h>

#include "shimwatch-config.h"
#include "shimwatch-error.h"
#include "shimwatch-log-store.h"
#include "shimwatch-task-log.h"

typedef struct {
  char             *dir;
  char             *task_dir;
  char             *log_dir;
  ShimwatchTaskLog *log;
  int               out;       /* the writer end of stdout.fifo, as the shim has it */
  int               err;
} Fixture;

static void
fixture_setup (Fixture       *f,
               gconstpointer  data)
{
  const ShimwatchTaskLogLimits *limits = data;
  ShimwatchTaskLogLimits defaults = { 1024 * 1024, 5 };
  g_autoptr(GError) error = NULL;

  f->dir = g_dir_make_tmp ("swlog-XXXXXX", &error);
  g_assert_no_error (error);
  f->task_dir = g_build_filename (f->dir, "task", NULL);
  f->log_dir = g_build_filename (f->dir, "logs", "ns", "id", NULL);
  g_assert_cmpint (g_mkdir (f->task_dir, 0700), ==, 0);
  f->log = shimwatch_task_log_new ("ns", "id", f->task_dir, f->log_dir,
                                   SHIMWATCH_TASK_LOG_STDOUT | SHIMWATCH_TASK_LOG_STDERR,
                                   limits != NULL ? limits : &defaults, &error);
  g_assert_no_error (error);
  g_assert_nonnull (f->log);
  /* the reader (the service) holds the FIFO already: this open never blocks */
  f->out = open (shimwatch_task_log_get_fifo (f->log, SHIMWATCH_TASK_LOG_STDOUT),
                 O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  f->err = open (shimwatch_task_log_get_fifo (f->log, SHIMWATCH_TASK_LOG_STDERR),
                 O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  g_assert_cmpint (f->out, >=, 0);
  g_assert_cmpint (f->err, >=, 0);
}

static void
remove_tree (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
        remove_tree (child);
      else
        g_unlink (child);
    }
  g_rmdir (path);
}

static void
fixture_teardown (Fixture       *f,
                  gconstpointer  data)
{
  close (f->out);
  close (f->err);
  g_clear_object (&f->log);
  /* readers still writing what they have */
  while (g_main_context_iteration (NULL, FALSE))
    ;
  remove_tree (f->dir);
  g_free (f->dir);
  g_free (f->task_dir);
  g_free (f->log_dir);
}

static void
write_all (int         fd,
           const char *data,
           gsize       len)
{
  while (len > 0)
    {
      gssize n = write (fd, data, len);

      if (n < 0 && errno == EAGAIN)
        {
          g_main_context_iteration (NULL, FALSE);
          continue;
        }
      g_assert_cmpint (n, >, 0);
      data += n;
      len -= (gsize) n;
    }
}

static char *
read_file (Fixture    *f,
           const char *name)
{
  g_autofree char *path = g_build_filename (f->log_dir, name, NULL);
  char *text = NULL;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return g_strdup ("");
  return text;
}

/* iterate the main loop until output.log has n lines */
static char **
wait_lines (Fixture *f,
            guint    n)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  for (;;)
    {
      g_autofree char *text = read_file (f, SHIMWATCH_TASK_LOG_FILE);
      g_auto(GStrv) lines = g_strsplit (text, "\n", -1);

      if (g_strv_length (lines) > n)
        return g_steal_pointer (&lines);
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (NULL, FALSE);
      g_usleep (1000);
    }
}

static void
assert_line (const char *line,
             const char *stream,
             const char *text)
{
  gint64 time;
  const char *got_stream;
  const char *got_text;
  gsize len;

  g_assert_true (shimwatch_task_log_parse_line (line, strlen (line), &time, &got_stream,
                                                &got_text, &len));
  g_assert_cmpstr (got_stream, ==, stream);
  g_assert_cmpuint (len, ==, strlen (text));
  g_assert_true (memcmp (got_text, text, len) == 0);
  g_assert_cmpint (time, >, g_get_real_time () - 60 * G_USEC_PER_SEC);
}

static void
test_format (void)
{
  char stamp[28];
  gint64 time = 0;
  const char *stream;
  const char *text;
  gsize len;
  const char *bad[] = {
    "", "2026-12-02T21:45:54.123456Z", "2026-12-02T21:45:54.123456Z stdin x",
    "2026-12-02 21:45:54.123456Z stdout x", "2026-13-02T21:45:54.123456Z stdout x",
    "2026-12-02T21:45:54.12345Z stdout x", "x026-12-02T21:45:54.123456Z stdout x",
    "2026-12-02T21:45:54.123456Z stdoutx",
  };

  shimwatch_task_log_format_time (G_GINT64_CONSTANT (1796247954123456), stamp);
  g_assert_cmpstr (stamp, ==, "2026-12-02T21:45:54.123456Z");
  g_assert_true (shimwatch_task_log_parse_line ("2026-12-02T21:45:54.123456Z stderr a b ", 39,
                                                &time, &stream, &text, &len));
  g_assert_cmpint (time, ==, G_GINT64_CONSTANT (1796247954123456));
  g_assert_cmpstr (stream, ==, "stderr");
  g_assert_cmpuint (len, ==, 4);
  g_assert_true (strncmp (text, "a b ", 4) == 0);
  /* an empty line is a line */
  g_assert_true (shimwatch_task_log_parse_line ("2026-12-02T21:45:54.123456Z stdout ", 35,
                                                &time, &stream, &text, &len));
  g_assert_cmpuint (len, ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    g_assert_false (shimwatch_task_log_parse_line (bad[i], strlen (bad[i]), &time, &stream,
                                                   &text, &len));
}

static void
test_options (void)
{
  g_autoptr(GError) error = NULL;
  guint tail;
  gint64 since;
  gboolean follow;
  GVariant *options;

  options = g_variant_new_parsed ("{'tail': <@u 3>, 'since': <@t 42>, 'follow': <true>}");
  g_assert_true (shimwatch_task_log_parse_options (options, TRUE, &tail, &since, &follow,
                                                   &error));
  g_assert_no_error (error);
  g_assert_cmpuint (tail, ==, 3);
  g_assert_cmpint (since, ==, 42);
  g_assert_true (follow);
  /* follow is OpenLog's */
  g_assert_false (shimwatch_task_log_parse_options (options, FALSE, &tail, &since, &follow,
                                                    &error));
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_variant_unref (g_variant_ref_sink (options));

  options = g_variant_ref_sink (g_variant_new_parsed ("{'tail': <int32 3>}"));
  g_assert_false (shimwatch_task_log_parse_options (options, TRUE, &tail, &since, &follow,
                                                    &error));
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "must be of type u"));
  g_clear_error (&error);
  g_variant_unref (options);

  options = g_variant_ref_sink (g_variant_new_parsed ("@a{sv} {}"));
  g_assert_true (shimwatch_task_log_parse_options (options, FALSE, &tail, &since, &follow,
                                                   &error));
  g_assert_cmpuint (tail, ==, 0);
  g_assert_cmpint (since, ==, 0);
  g_assert_false (follow);
  g_variant_unref (options);
}

static void
test_capture (Fixture       *f,
              gconstpointer  data)
{
  g_autofree char *longline = g_strnfill (40000, 'x');
  g_auto(GStrv) lines = NULL;

  write_all (f->out, "one\ntw", 6);
  write_all (f->err, "oops\n", 5);
  write_all (f->out, "o\n", 2);
  lines = wait_lines (f, 3);
  g_clear_pointer (&lines, g_strfreev);
  write_all (f->out, longline, 40000);
  write_all (f->out, "\nno newline", 11);
  lines = wait_lines (f, 6);
  assert_line (lines[3], "stdout", longline + 40000 - SHIMWATCH_TASK_LOG_MAX_LINE);
  assert_line (lines[4], "stdout", longline + 40000 - SHIMWATCH_TASK_LOG_MAX_LINE);
  assert_line (lines[5], "stdout", longline + 2 * SHIMWATCH_TASK_LOG_MAX_LINE);
  g_clear_pointer (&lines, g_strfreev);

  /* the mark's file is there from the start, empty, so that the end makes no file */
  {
    g_autofree char *spare = g_build_filename (f->log_dir, SHIMWATCH_TASK_LOG_DELETED_SPARE,
                                               NULL);
    g_autofree char *deleted = g_build_filename (f->log_dir, SHIMWATCH_TASK_LOG_DELETED_MARK,
                                                 NULL);
    GStatBuf before;
    GStatBuf after;
    gint64 started = g_get_real_time ();
    gint64 when = 0;

    g_assert_cmpint (g_stat (spare, &before), ==, 0);
    g_assert_cmpint (before.st_size, ==, 0);
    g_assert_false (g_file_test (deleted, G_FILE_TEST_EXISTS));
    g_assert_false (shimwatch_task_log_read_mark (f->log_dir, &when));

    /* the end of the task: its last, unfinished line is kept, the log is marked deleted;
     * the mark is the spare renamed, its time set: no data is written at a task's end */
    shimwatch_task_log_finish (f->log);
    g_assert_cmpint (g_stat (deleted, &after), ==, 0);
    g_assert_cmpuint (after.st_ino, ==, before.st_ino);
    g_assert_cmpint (after.st_size, ==, 0);
    g_assert_false (g_file_test (spare, G_FILE_TEST_EXISTS));
    g_assert_true (shimwatch_task_log_read_mark (f->log_dir, &when));
    g_assert_cmpint (when, >=, started);
    g_assert_cmpint (when, <=, g_get_real_time ());
  }
  lines = wait_lines (f, 7);
  g_assert_cmpuint (g_strv_length (lines), ==, 8);
  assert_line (lines[0], "stdout", "one");
  /* the streams are drained in turn: stderr's line is among the first three */
  g_assert_true (g_str_has_suffix (lines[1], "stderr oops") ||
                 g_str_has_suffix (lines[2], "stderr oops"));
  g_assert_true (g_str_has_suffix (lines[1], "stdout two") ||
                 g_str_has_suffix (lines[2], "stdout two"));
  assert_line (lines[6], "stdout", "no newline");
  g_assert_cmpstr (lines[7], ==, "");
}

/* a spare that still holds what an interrupted end of an earlier version wrote (the time,
 * as text): the mark's time is this end's */
static void
test_mark_from_used_spare (Fixture       *f,
                           gconstpointer  data)
{
  g_autofree char *spare = g_build_filename (f->log_dir, SHIMWATCH_TASK_LOG_DELETED_SPARE, NULL);
  gint64 before = g_get_real_time ();
  struct timeval old_times[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
  gint64 when = 0;

  g_assert_true (g_file_set_contents (spare, "1000000000000000\n", -1, NULL));
  g_assert_cmpint (utimes (spare, old_times), ==, 0);
  shimwatch_task_log_finish (f->log);
  g_assert_false (g_file_test (spare, G_FILE_TEST_EXISTS));
  g_assert_true (shimwatch_task_log_read_mark (f->log_dir, &when));
  g_assert_cmpint (when, >=, before);
  g_assert_cmpint (when, <=, g_get_real_time ());
}

static void
total_size (Fixture *f,
            guint64 *total,
            guint   *n_files,
            guint64 *largest)
{
  g_autoptr(GDir) dir = g_dir_open (f->log_dir, 0, NULL);
  const char *name;

  *total = 0;
  *n_files = 0;
  *largest = 0;
  while ((name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *path = g_build_filename (f->log_dir, name, NULL);
      GStatBuf st;

      /* the output files, not the (empty) file the deleted mark is made from */
      if (!g_str_has_prefix (name, SHIMWATCH_TASK_LOG_FILE))
        continue;
      g_assert_cmpint (g_stat (path, &st), ==, 0);
      *total += (guint64) st.st_size;
      *largest = MAX (*largest, (guint64) st.st_size);
      (*n_files)++;
    }
}

static void
store_result (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  *(GAsyncResult **) user_data = g_object_ref (result);
}

static void
test_rotation (Fixture       *f,
               gconstpointer  data)
{
  const ShimwatchTaskLogLimits *limits = data;
  g_autoptr(GString) chunk = g_string_new (NULL);
  g_autoptr(GVariant) lines = NULL;
  g_autoptr(GAsyncResult) result = NULL;
  guint64 total, largest;
  guint n_files;

  for (guint i = 0; i < 20000; i++)
    g_string_append_printf (chunk, "line %u\n", i);
  write_all (f->out, chunk->str, chunk->len);
  for (gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC; ; )
    {
      g_autofree char *text = read_file (f, SHIMWATCH_TASK_LOG_FILE);

      if (g_str_has_suffix (text, " stdout line 19999\n"))
        break;
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (NULL, FALSE);
    }
  total_size (f, &total, &n_files, &largest);
  g_assert_cmpuint (n_files, ==, limits->max_files);
  g_assert_cmpuint (largest, <=, limits->max_file_size);
  g_assert_cmpuint (total, <=, limits->max_file_size * limits->max_files);

  /* ReadLog sees the newest lines, in order, none lost between the files */
  shimwatch_task_log_read_async (f->log, 0, 0, store_result, &result);
  while (result == NULL)
    g_main_context_iteration (NULL, TRUE);
  lines = shimwatch_task_log_read_finish (f->log, result, NULL);
  g_assert_nonnull (lines);
  {
    gsize n = g_variant_n_children (lines);
    guint first = 0;

    g_assert_cmpuint (n, >, 1000);
    for (gsize i = 0; i < n; i++)
      {
        guint64 time;
        const char *stream;
        const char *text;
        guint number;

        g_variant_get_child (lines, i, "(t&s&s)", &time, &stream, &text);
        g_assert_cmpstr (stream, ==, "stdout");
        g_assert_cmpint (sscanf (text, "line %u", &number), ==, 1);
        if (i == 0)
          first = number;
        g_assert_cmpuint (number, ==, first + i);
      }
    g_assert_cmpuint (first + n - 1, ==, 19999);
  }
}

static gboolean
read_until (int        fd,
            GString   *into,
            gboolean (*done) (GString *))
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (g_get_monotonic_time () < deadline)
    {
      char buffer[65536];
      gssize n = read (fd, buffer, sizeof buffer);

      if (n == 0)
        return TRUE;                   /* EOF */
      if (n > 0)
        g_string_append_len (into, buffer, n);
      else
        g_assert_cmpint (errno, ==, EAGAIN);
      if (done != NULL && done (into))
        return FALSE;
      g_main_context_iteration (NULL, FALSE);
      if (n < 0)
        g_usleep (1000);
    }
  g_error ("timed out reading the log fd; got %zu bytes", into->len);
  return FALSE;
}

static gboolean
has_later (GString *data)
{
  return strstr (data->str, " stdout later\n") != NULL;
}

static gboolean
has_last_number (GString *data)
{
  char last[80];

  g_snprintf (last, sizeof last, " stdout %060u\n", 24999);
  return g_str_has_suffix (data->str, last);
}

static void
test_readers (Fixture       *f,
              gconstpointer  data)
{
  g_autoptr(GString) got = g_string_new (NULL);
  g_autoptr(GString) chunk = g_string_new (NULL);
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) lines = NULL;
  int once, follower, stalled;

  write_all (f->out, "first\nsecond\n", 13);
  g_strfreev (wait_lines (f, 2));

  /* without follow: the backlog (here its last line), then EOF */
  once = shimwatch_task_log_open_reader (f->log, 1, 0, FALSE, &error);
  g_assert_no_error (error);
  g_unix_set_fd_nonblocking (once, TRUE, NULL);
  g_assert_true (read_until (once, got, NULL));
  lines = g_strsplit (got->str, "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 2);
  assert_line (lines[0], "stdout", "second");
  close (once);

  follower = shimwatch_task_log_open_reader (f->log, 0, 0, TRUE, &error);
  stalled = shimwatch_task_log_open_reader (f->log, 0, 0, TRUE, &error);
  g_assert_no_error (error);
  g_unix_set_fd_nonblocking (follower, TRUE, NULL);
  g_unix_set_fd_nonblocking (stalled, TRUE, NULL);
  g_assert_cmpuint (shimwatch_task_log_get_n_readers (f->log), ==, 2);
  write_all (f->out, "later\n", 6);
  g_string_truncate (got, 0);
  g_assert_false (read_until (follower, got, has_later));
  g_clear_pointer (&lines, g_strfreev);
  lines = g_strsplit (got->str, "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 4);
  assert_line (lines[0], "stdout", "first");
  assert_line (lines[1], "stdout", "second");
  assert_line (lines[2], "stdout", "later");

  /* The stalled reader never reads: once the rotation drops the file it was still at
   * (the log keeps 3 × 64 KiB here) it is dropped and told so; the follower that reads
   * gets every line, however far the stalled one falls behind */
  for (guint i = 0; i < 25000; i++)
    g_string_append_printf (chunk, "%060u\n", i);
  g_string_truncate (got, 0);
  for (gsize done = 0; done < chunk->len; done += 16384)
    {
      char buffer[65536];
      gssize n;

      write_all (f->out, chunk->str + done, MIN (16384, chunk->len - done));
      for (guint i = 0; i < 8; i++)
        {
          g_main_context_iteration (NULL, FALSE);
          while ((n = read (follower, buffer, sizeof buffer)) > 0)
            g_string_append_len (got, buffer, n);
        }
    }
  for (gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
       shimwatch_task_log_get_n_readers (f->log) != 1; )
    {
      char buffer[65536];

      gssize n;

      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      while ((n = read (follower, buffer, sizeof buffer)) > 0)
        g_string_append_len (got, buffer, n);
      g_main_context_iteration (NULL, FALSE);
    }
  {
    g_auto(GStrv) followed = NULL;
    g_auto(GStrv) stalled_lines = NULL;
    guint n_lines;

    /* whatever is still on its way */
    read_until (follower, got, has_last_number);
    followed = g_strsplit (got->str, "\n", -1);
    g_assert_cmpuint (g_strv_length (followed), ==, 25000 + 1);
    for (guint i = 0; i < 25000; i++)
      {
        g_autofree char *text = g_strdup_printf ("%060u", i);

        assert_line (followed[i], "stdout", text);
      }
    g_string_truncate (got, 0);
    g_assert_true (read_until (stalled, got, NULL));
    g_assert_cmpuint (got->len, <, chunk->len);
    /* whole lines, then the marker, then EOF */
    stalled_lines = g_strsplit (got->str, "\n", -1);
    n_lines = g_strv_length (stalled_lines);
    g_assert_cmpuint (n_lines, >=, 2);
    g_assert_cmpstr (stalled_lines[n_lines - 1], ==, "");
    g_assert_true (g_str_has_suffix (stalled_lines[n_lines - 2],
                                     " " SHIMWATCH_TASK_LOG_FELL_BEHIND));
    for (guint i = 0; i + 2 < n_lines; i++)
      g_assert_cmpuint (strlen (stalled_lines[i]), ==,
                        strlen (i < 3 ? stalled_lines[i] : followed[0]));
  }
  close (stalled);

  /* the task is deleted: the follower gets everything, then EOF */
  write_all (f->out, "last\n", 5);
  shimwatch_task_log_finish (f->log);
  g_string_truncate (got, 0);
  g_assert_true (read_until (follower, got, NULL));
  g_assert_true (g_str_has_suffix (got->str, " stdout last\n"));
  g_assert_cmpuint (shimwatch_task_log_get_n_readers (f->log), ==, 0);
  close (follower);
}

/* each reader holds memory and a pipe: past the limit, Busy; a closed one makes room */
static void
test_reader_limit (Fixture       *f,
                   gconstpointer  data)
{
  int fds[SHIMWATCH_TASK_LOG_MAX_READERS];
  g_autoptr(GError) error = NULL;
  int again;

  for (guint i = 0; i < G_N_ELEMENTS (fds); i++)
    {
      /* without follow too: a reader counts until it has written what it has */
      fds[i] = shimwatch_task_log_open_reader (f->log, 0, 0, i % 2 == 0, &error);
      g_assert_no_error (error);
      g_assert_cmpint (fds[i], >=, 0);
    }
  g_assert_cmpint (shimwatch_task_log_open_reader (f->log, 0, 0, TRUE, &error), ==, -1);
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY);
  g_clear_error (&error);

  close (fds[0]);
  for (gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
       shimwatch_task_log_get_n_readers (f->log) == SHIMWATCH_TASK_LOG_MAX_READERS; )
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (NULL, FALSE);
    }
  again = shimwatch_task_log_open_reader (f->log, 0, 0, TRUE, &error);
  g_assert_no_error (error);
  g_assert_cmpint (again, >=, 0);
  close (again);
  for (guint i = 1; i < G_N_ELEMENTS (fds); i++)
    close (fds[i]);
}

static void
test_store_retention (void)
{
  g_autofree char *dir = g_dir_make_tmp ("swstore-XXXXXX", NULL);
  g_autofree char *logs = g_build_filename (dir, "logs", NULL);
  g_autofree char *task_dir = g_build_filename (dir, "task", NULL);
  g_autofree char *log_dir = g_build_filename (logs, "ns", "id", NULL);
  g_autofree char *stale = g_build_filename (logs, "ns", "gone", NULL);
  g_autofree char *ns_dir = g_build_filename (logs, "ns", NULL);
  ShimwatchTaskLogLimits limits = { 65536, 2 };
  g_autoptr(ShimwatchLogStore) store = NULL;
  g_autoptr(ShimwatchTaskLog) log = NULL;
  g_autoptr(ShimwatchTaskLog) again = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) listing = NULL;
  const char *name;
  guint aside = 0;

  g_assert_cmpint (g_mkdir (task_dir, 0700), ==, 0);
  store = shimwatch_log_store_new (logs, &limits, 0, &error);
  g_assert_no_error (error);
  log = shimwatch_log_store_open (store, "ns", "id", task_dir, SHIMWATCH_TASK_LOG_STDOUT,
                                  &error);
  g_assert_no_error (error);
  /* a log no task owns starts its retention (here: none) */
  g_assert_cmpint (g_mkdir_with_parents (stale, 0700), ==, 0);
  shimwatch_log_store_start_expiry (store);
  g_assert_false (g_file_test (stale, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (log_dir, G_FILE_TEST_IS_DIR));

  /* the task is deleted; a new task of the same name moves its log aside */
  shimwatch_task_log_finish (log);
  g_assert_cmpint (g_unlink (shimwatch_task_log_get_fifo (log, SHIMWATCH_TASK_LOG_STDOUT)),
                   ==, 0);
  again = shimwatch_log_store_open (store, "ns", "id", task_dir, SHIMWATCH_TASK_LOG_STDOUT,
                                    &error);
  g_assert_no_error (error);
  listing = g_dir_open (ns_dir, 0, NULL);
  while ((name = g_dir_read_name (listing)) != NULL)
    if (g_str_has_prefix (name, "id~"))
      aside++;
  g_assert_cmpuint (aside, ==, 1);
  /* expiry removes the old one, never the live one */
  shimwatch_log_store_expire (store);
  g_assert_true (g_file_test (log_dir, G_FILE_TEST_IS_DIR));
  g_clear_pointer (&listing, g_dir_close);
  listing = g_dir_open (ns_dir, 0, NULL);
  while ((name = g_dir_read_name (listing)) != NULL)
    g_assert_false (g_str_has_prefix (name, "id~"));
  shimwatch_task_log_discard (again);
  g_assert_false (g_file_test (log_dir, G_FILE_TEST_EXISTS));
  g_clear_object (&again);
  g_clear_object (&log);
  g_clear_object (&store);
  remove_tree (task_dir);
  remove_tree (logs);
  g_rmdir (dir);
}

static void
test_config_keys (void)
{
  g_autofree char *dir = g_dir_make_tmp ("swlogconf-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "shimwatch.conf", NULL);
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;
  const char *bad[] = {
    "[Service]\nTaskLogMaxSize=1000\n", "[Service]\nTaskLogMaxSize=2000000000\n",
    "[Service]\nTaskLogMaxFiles=1\n", "[Service]\nTaskLogMaxFiles=65\n",
    "[Service]\nTaskLogRetention=-1\n", "[Service]\nTaskLogRetention=soon\n",
  };

  g_assert_cmpuint (config->task_log_max_size, ==, 1024 * 1024);
  g_assert_cmpuint (config->task_log_max_files, ==, 5);
  g_assert_cmpuint (config->task_log_retention_s, ==, 86400);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(ShimwatchConfig) untouched = shimwatch_config_new ();

      g_assert_true (g_file_set_contents (path, bad[i], -1, NULL));
      g_assert_false (shimwatch_config_load_file (untouched, path, TRUE, &error));
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, "TaskLog"));
      g_clear_error (&error);
      g_assert_cmpuint (untouched->task_log_max_size, ==, 1024 * 1024);
    }
  g_assert_true (g_file_set_contents (path, "[Service]\nTaskLogMaxSize=65536\n"
                                      "TaskLogMaxFiles=2\nTaskLogRetention=0\n", -1, NULL));
  g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (config->task_log_max_size, ==, 65536);
  g_assert_cmpuint (config->task_log_max_files, ==, 2);
  g_assert_cmpuint (config->task_log_retention_s, ==, 0);
  g_unlink (path);
  g_rmdir (dir);
}

int
main (int    argc,
      char **argv)
{
  static const ShimwatchTaskLogLimits small = { 65536, 3 };

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/task-log/format", test_format);
  g_test_add_func ("/task-log/options", test_options);
  g_test_add ("/task-log/capture", Fixture, NULL, fixture_setup, test_capture,
              fixture_teardown);
  g_test_add ("/task-log/mark-from-used-spare", Fixture, NULL, fixture_setup,
              test_mark_from_used_spare, fixture_teardown);
  g_test_add ("/task-log/rotation", Fixture, &small, fixture_setup, test_rotation,
              fixture_teardown);
  g_test_add ("/task-log/readers", Fixture, &small, fixture_setup, test_readers,
              fixture_teardown);
  g_test_add ("/task-log/reader-limit", Fixture, NULL, fixture_setup, test_reader_limit,
              fixture_teardown);
  g_test_add_func ("/task-log/store-retention", test_store_retention);
  g_test_add_func ("/task-log/config", test_config_keys);
  return g_test_run ();
}
