/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatch_log_task(): the fields a journal reader relies on, in one structured line,
 * and nothing built for a line no writer would keep.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <glib/gstdio.h>

#include "shimwatch-log-writer.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-test-malloc.h"
#include "shimwatch-write.h"

#define G_LOG_DOMAIN_TEST "ShimwatchTest"

/* getenv(3) of the process, G_MESSAGES_DEBUG's calls counted: the executable's own comes
 * before libc's for GLib's g_getenv() too */
extern char **environ;
static guint n_messages_debug_reads;

char *getenv (const char *name);

char *
getenv (const char *name)
{
  gsize length = strlen (name);

  if (strcmp (name, "G_MESSAGES_DEBUG") == 0)
    g_atomic_int_inc (&n_messages_debug_reads);
  for (char **entry = environ; entry != NULL && *entry != NULL; entry++)
    if (strncmp (*entry, name, length) == 0 && (*entry)[length] == '=')
      return *entry + length + 1;
  return NULL;
}

static GPtrArray *lines;     /* GHashTable: key -> value, one per line written */

static GLogWriterOutput
capture_writer (GLogLevelFlags   level,
                const GLogField *fields,
                gsize            n_fields,
                gpointer         user_data)
{
  GHashTable *line = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);

  for (gsize i = 0; i < n_fields; i++)
    {
      /* every field once: a journal reader takes the first */
      g_assert_false (g_hash_table_contains (line, fields[i].key));
      g_hash_table_insert (line, g_strdup (fields[i].key),
                           fields[i].length < 0 ? g_strdup (fields[i].value)
                                                : g_strndup (fields[i].value, fields[i].length));
    }
  g_ptr_array_add (lines, line);
  return G_LOG_WRITER_HANDLED;
}

static const char *
field (guint       i,
       const char *key)
{
  return g_hash_table_lookup (g_ptr_array_index (lines, i), key);
}

static void
test_log_task_fields (void)
{
  const char * const extra[] = { "SHIMWATCH_CALLER", ":1.42", NULL };
  ShimwatchLogTask task = { .namespace_ = "ns", .id = "t1", .event = "exit",
                            .has_pids = TRUE, .shim_pid = 41, .task_pid = 42,
                            .extra = extra };
  guint first = lines->len;

  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_MESSAGE, "f.c", "7", "fn", &task,
                           "task exited: status %u", 137);
  g_assert_cmpuint (lines->len, ==, first + 1);
  g_assert_cmpstr (field (first, "PRIORITY"), ==, "5");
  g_assert_cmpstr (field (first, "GLIB_DOMAIN"), ==, G_LOG_DOMAIN_TEST);
  g_assert_cmpstr (field (first, "CODE_FILE"), ==, "f.c");
  g_assert_cmpstr (field (first, "CODE_LINE"), ==, "7");
  g_assert_cmpstr (field (first, "CODE_FUNC"), ==, "fn");
  g_assert_cmpstr (field (first, "MESSAGE_ID"), ==, SHIMWATCH_MESSAGE_ID_EXIT);
  g_assert_cmpstr (field (first, SHIMWATCH_LOG_FIELD_NAMESPACE), ==, "ns");
  g_assert_cmpstr (field (first, SHIMWATCH_LOG_FIELD_TASK_ID), ==, "t1");
  g_assert_cmpstr (field (first, SHIMWATCH_LOG_FIELD_SHIM_PID), ==, "41");
  g_assert_cmpstr (field (first, SHIMWATCH_LOG_FIELD_TASK_PID), ==, "42");
  g_assert_cmpstr (field (first, SHIMWATCH_LOG_FIELD_EVENT), ==, "exit");
  g_assert_cmpstr (field (first, "SHIMWATCH_CALLER"), ==, ":1.42");
  g_assert_cmpstr (field (first, "MESSAGE"), ==, "ns/t1: task exited: status 137");
  g_assert_cmpuint (g_hash_table_size (g_ptr_array_index (lines, first)), ==, 13);

  /* a plain line: no event, no pids; a warning's priority; a bare message */
  task = (ShimwatchLogTask) { .namespace_ = "ns", .id = "t1", .bare = TRUE };
  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_WARNING, "f.c", "8", "fn", &task,
                           "%s", "just this");
  g_assert_cmpuint (lines->len, ==, first + 2);
  g_assert_cmpstr (field (first + 1, "PRIORITY"), ==, "4");
  g_assert_cmpstr (field (first + 1, "MESSAGE"), ==, "just this");
  g_assert_null (field (first + 1, "MESSAGE_ID"));
  g_assert_null (field (first + 1, SHIMWATCH_LOG_FIELD_EVENT));
  g_assert_null (field (first + 1, SHIMWATCH_LOG_FIELD_SHIM_PID));
  g_assert_cmpuint (g_hash_table_size (g_ptr_array_index (lines, first + 1)), ==, 8);
}

/* info and debug lines reach the writer only when debug output is asked for (--debug,
 * G_MESSAGES_DEBUG); otherwise nothing is formatted for them */
static void
test_log_task_info_only_when_asked (void)
{
  ShimwatchLogTask task = { .namespace_ = "ns", .id = "t1", .event = "cleaned" };
  guint first = lines->len;

  g_log_set_debug_enabled (FALSE);
  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_INFO, "f.c", "9", "fn", &task,
                           "cleanup started");
  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_DEBUG, "f.c", "9", "fn", &task,
                           "cleanup started");
  g_assert_cmpuint (lines->len, ==, first);

  g_log_set_debug_enabled (TRUE);
  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_INFO, "f.c", "9", "fn", &task,
                           "cleanup started");
  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_DEBUG, "f.c", "9", "fn", &task,
                           "cleanup started");
  g_log_set_debug_enabled (FALSE);
  g_assert_cmpuint (lines->len, ==, first + 2);
  g_assert_cmpstr (field (first, "PRIORITY"), ==, "6");
  g_assert_cmpstr (field (first + 1, "PRIORITY"), ==, "7");
  g_assert_cmpstr (field (first, "MESSAGE_ID"), ==, SHIMWATCH_MESSAGE_ID_CLEANED);
}

/* An info line nobody asked for cost a getenv(3) of G_MESSAGES_DEBUG (GLib reads it at
 * each g_log_writer_default_would_drop()): a walk of the environment, several times per
 * death. It is read once: 100 info and debug lines read it at most once (100 times on
 * the old code), and write nothing. */
static void
test_info_dropped_without_getenv (void)
{
  ShimwatchLogTask task = { .namespace_ = "ns", .id = "t1", .event = "cleaned" };
  guint first = lines->len;
  guint reads;

  g_log_set_debug_enabled (FALSE);
  g_unsetenv ("G_MESSAGES_DEBUG");
  shimwatch_log_reread_environment ();
  reads = g_atomic_int_get (&n_messages_debug_reads);
  for (guint i = 0; i < 50; i++)
    {
      shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_INFO, "f.c", "9", "fn", &task,
                               "cleanup finished");
      shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_DEBUG, "f.c", "9", "fn", &task,
                               "cleanup finished");
    }
  reads = g_atomic_int_get (&n_messages_debug_reads) - reads;
  g_test_message ("G_MESSAGES_DEBUG read %u times for 100 lines", reads);
  g_assert_cmpuint (reads, <=, 1);
  g_assert_cmpuint (lines->len, ==, first);

  /* asked for, they are written (and GLib reads which domains are asked for) */
  g_setenv ("G_MESSAGES_DEBUG", G_LOG_DOMAIN_TEST, TRUE);
  shimwatch_log_reread_environment ();
  shimwatch_log_task_full (G_LOG_DOMAIN_TEST, G_LOG_LEVEL_INFO, "f.c", "9", "fn", &task,
                           "cleanup finished");
  g_unsetenv ("G_MESSAGES_DEBUG");
  shimwatch_log_reread_environment ();
  g_assert_cmpuint (lines->len, ==, first + 1);
}

/* what a shim wrote: its own info chatter is not news, anything else is */
static void
test_level_of_output (void)
{
  /* containerd-shim-runc-v2's `delete`, every time */
  g_assert_cmpint (shimwatch_log_level_of_output (
                     "time=\"2026-12-03T10:10:01Z\" level=info msg=\"starting signal loop\" "
                     "namespace=swtest pid=27210 runtime=io.containerd.runc.v2"),
                   ==, G_LOG_LEVEL_INFO);
  g_assert_cmpint (shimwatch_log_level_of_output ("level=debug msg=x\n"
                                                  "time=\"t\" level=trace msg=y\n"),
                   ==, G_LOG_LEVEL_INFO);
  /* a warning among them, a line that is no logrus line, a level only mentioned */
  g_assert_cmpint (shimwatch_log_level_of_output (
                     "time=\"t\" level=info msg=\"starting signal loop\"\n"
                     "time=\"t\" level=warning msg=\"failed to remove runc container\""),
                   ==, G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output ("test shim: delete hangs on purpose"), ==,
                   G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output ("time=\"t\" level=error msg=\"level=info\""),
                   ==, G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output ("time=\"t\" level=informational msg=x"),
                   ==, G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output ("xlevel=info msg=x"), ==, G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output (""), ==, G_LOG_LEVEL_MESSAGE);
}

/* What a shim wrote is classified where it lies, from its length (it is not
 * NUL-terminated as it is read), with no allocation: the runc shim's info line at every
 * `shim delete` was split into a copy of each line, after a copy of it all made valid
 * UTF-8, only for a line that is not logged. */
static void
test_level_of_output_in_place (void)
{
  static const char chatter[] =
    "time=\"2026-12-03T10:10:01Z\" level=info msg=\"starting signal loop\" "
    "namespace=swtest pid=27210 runtime=io.containerd.runc.v2\r\n"
    "time=\"t\" level=debug msg=y\n\n";
  static const char warning[] = "level=info msg=x\nlevel=warning msg=y\n";
  GLogLevelFlags level;
  guint before;
  gpointer probe;

  /* the length counts, not a NUL: what follows is not looked at */
  g_assert_cmpint (shimwatch_log_level_of_output_len (warning, strlen ("level=info msg=x")),
                   ==, G_LOG_LEVEL_INFO);
  g_assert_cmpint (shimwatch_log_level_of_output_len (warning, sizeof warning - 1), ==,
                   G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output_len ("level=info", strlen ("level=in")), ==,
                   G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output_len ("level=debug\0level=error", 24), ==,
                   G_LOG_LEVEL_MESSAGE);
  g_assert_cmpint (shimwatch_log_level_of_output_len (" \n\t", 3), ==, G_LOG_LEVEL_MESSAGE);

#ifdef SHIMWATCH_TEST_MALLOC_COUNT
  before = n_mallocs;
  malloc_counting = TRUE;
  probe = g_malloc (16);
  malloc_counting = FALSE;
  g_free (probe);
  /* valgrind replaces malloc() wherever it is, this one too: nothing is counted there */
  if (n_mallocs == before)
    {
      g_test_message ("malloc() is not this test's own here (valgrind): nothing counted");
      return;
    }
  before = n_mallocs;
  malloc_counting = TRUE;
  level = shimwatch_log_level_of_output (chatter);
  malloc_counting = FALSE;
  g_assert_cmpint (level, ==, G_LOG_LEVEL_INFO);
  g_assert_cmpuint (n_mallocs - before, ==, 0);
  malloc_counting = TRUE;
  level = shimwatch_log_level_of_output_len (chatter, sizeof chatter - 1);
  malloc_counting = FALSE;
  g_assert_cmpint (level, ==, G_LOG_LEVEL_INFO);
  g_assert_cmpuint (n_mallocs - before, ==, 0);
#else
  (void) chatter;
  (void) level;
  (void) before;
  (void) probe;
  g_test_message ("a sanitizer's allocator counts its own: not counted here");
#endif
}

/* 2023-11-14 22:13:20.123456 UTC, the start of a minute plus 20 s */
#define SOME_TIME (G_GINT64_CONSTANT (1700000000) * G_USEC_PER_SEC + 123456)

static char *
format_line (GLogLevelFlags level,
             const char    *domain,
             const char    *message,
             gint64         when)
{
  GLogField fields[] = {
    { "PRIORITY", "5", -1 },
    { "MESSAGE", message, -1 },
    { "GLIB_DOMAIN", domain, -1 },
  };
  g_autoptr(GString) line = g_string_new (NULL);

  if (!shimwatch_log_writer_format (level, fields, domain != NULL ? 3 : 2, when, line))
    return NULL;
  return g_string_free (g_steal_pointer (&line), FALSE);
}

/* GLib's own line for the same fields, its time (now, in the same zone) put in @time_of */
static char *
glib_line (GLogLevelFlags level,
           const char    *domain,
           const char    *message,
           const char    *time_of)
{
  GLogField fields[] = {
    { "PRIORITY", "5", -1 },
    { "MESSAGE", message, -1 },
    { "GLIB_DOMAIN", domain, -1 },
  };
  g_autofree char *line = g_log_writer_format_fields (level, fields, domain != NULL ? 3 : 2,
                                                      FALSE);
  g_autoptr(GRegex) time = g_regex_new ("[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}: ", 0, 0, NULL);
  g_autofree char *mine = g_strconcat (time_of, ": ", NULL);

  return g_regex_replace_literal (time, line, -1, 0, mine, 0, NULL);
}

/* the writer's line is GLib's line, its time the local time of the zone (here UTC+05:30) */
static void
test_writer_format (void)
{
  static const GLogLevelFlags levels[] = {
    G_LOG_LEVEL_ERROR, G_LOG_LEVEL_CRITICAL, G_LOG_LEVEL_WARNING, G_LOG_LEVEL_MESSAGE,
    G_LOG_LEVEL_INFO, G_LOG_LEVEL_DEBUG
  };
  g_autofree char *pid_prefix = g_strdup_printf ("(%s:%lu): ", g_get_prgname (),
                                                 (gulong) getpid ());
  g_autofree char *line = NULL;
  g_autofree char *debug_line = NULL;

  g_setenv ("TZ", "XST-05:30", TRUE);
  tzset ();
  line = format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "ns/t1: task exited: status 137",
                      SOME_TIME);
  g_assert_cmpstr (line, ==, "ShimwatchTest-Message: 03:43:20.123: ns/t1: task exited: status 137");
  /* a debug line says which process (G_MESSAGES_PREFIXED unset) */
  debug_line = format_line (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN_TEST, "x", SOME_TIME + 1000);
  g_assert_true (g_str_has_prefix (debug_line, pid_prefix));
  g_assert_cmpstr (debug_line + strlen (pid_prefix), ==, "ShimwatchTest-DEBUG: 03:43:20.124: x");

  for (guint i = 0; i < G_N_ELEMENTS (levels); i++)
    for (guint with_domain = 0; with_domain < 2; with_domain++)
      {
        const char *domain = with_domain ? G_LOG_DOMAIN_TEST : NULL;
        const char *text = "ns/t1: cleaned\tin 2 ms\n(shim delete: ok)";
        g_autofree char *mine = format_line (levels[i], domain, text, SOME_TIME);
        g_autofree char *glibs = glib_line (levels[i], domain, text, "03:43:20.123");

        g_assert_cmpstr (mine, ==, glibs);
      }

  /* what GLib escapes, converts or colours is GLib's to write */
  g_assert_null (format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "a\001b", SOME_TIME));
  g_assert_null (format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "a\rb", SOME_TIME));
  g_assert_null (format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "caf\303\251", SOME_TIME));
  g_assert_null (format_line (G_LOG_LEVEL_WARNING | G_LOG_FLAG_FATAL, G_LOG_DOMAIN_TEST, "w",
                              SOME_TIME));
  g_assert_null (format_line (G_LOG_LEVEL_MESSAGE | G_LOG_FLAG_RECURSION, G_LOG_DOMAIN_TEST, "m",
                              SOME_TIME));
  g_unsetenv ("TZ");
  tzset ();
}

/* the zone is read again once a minute, not for every line: GLib's strftime() re-reads it
 * (a stat() of /etc/localtime when TZ is unset) on each */
static void
test_writer_zone_once_a_minute (void)
{
  gint64 minute = G_GINT64_CONSTANT (1700000040) * G_USEC_PER_SEC;   /* 22:14:00 UTC */
  g_autofree char *first = NULL;
  g_autofree char *same_minute = NULL;
  g_autofree char *next_minute = NULL;

  g_setenv ("TZ", "XST-05:30", TRUE);
  first = format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "m", minute);
  g_setenv ("TZ", "UTC0", TRUE);
  same_minute = format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "m", minute + 59 * G_USEC_PER_SEC);
  next_minute = format_line (G_LOG_LEVEL_MESSAGE, G_LOG_DOMAIN_TEST, "m", minute + 60 * G_USEC_PER_SEC);
  g_assert_cmpstr (first, ==, "ShimwatchTest-Message: 03:44:00.000: m");
  g_assert_cmpstr (same_minute, ==, "ShimwatchTest-Message: 03:44:59.000: m");
  g_assert_cmpstr (next_minute, ==, "ShimwatchTest-Message: 22:15:00.000: m");
  g_unsetenv ("TZ");
  tzset ();
}

/* what the writer writes to stdout and to stderr while @func runs */
static void
output_of (void  (*func) (void),
           char  **out,
           char  **err)
{
  char **texts[] = { out, err };
  g_autofree char *paths[2] = { NULL, NULL };
  int saved[2];
  int files[2];

  fflush (stdout);
  for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++)
    {
      g_autoptr(GError) error = NULL;

      files[fd - 1] = g_file_open_tmp ("test-logging-XXXXXX", &paths[fd - 1], &error);
      g_assert_no_error (error);
      saved[fd - 1] = dup (fd);
      g_assert_cmpint (dup2 (files[fd - 1], fd), ==, fd);
    }
  func ();
  for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++)
    {
      g_assert_cmpint (dup2 (saved[fd - 1], fd), ==, fd);
      close (saved[fd - 1]);
      close (files[fd - 1]);
      g_assert_true (g_file_get_contents (paths[fd - 1], texts[fd - 1], NULL, NULL));
      g_unlink (paths[fd - 1]);
      g_free (paths[fd - 1]);
      paths[fd - 1] = NULL;
    }
}

static void
write_lines (void)
{
  GLogField fields[] = {
    { "PRIORITY", "5", -1 },
    { "GLIB_DOMAIN", G_LOG_DOMAIN_TEST, -1 },
    { "MESSAGE", "ns/t1: task exited", -1 },
    { "SHIMWATCH_TASK_ID", "t1", -1 },
  };

  g_assert_cmpint (shimwatch_log_writer (G_LOG_LEVEL_MESSAGE, fields, G_N_ELEMENTS (fields), NULL),
                   ==, G_LOG_WRITER_HANDLED);
  fields[0].value = "6";
  fields[2].value = "an info line";
  g_assert_cmpint (shimwatch_log_writer (G_LOG_LEVEL_INFO, fields, G_N_ELEMENTS (fields), NULL),
                   ==, G_LOG_WRITER_HANDLED);
}

/* one line per message on stderr; an info line only when G_MESSAGES_DEBUG asks for it, and
 * then on stdout (GLib's streams) */
static void
test_writer_writes_lines (void)
{
  g_autoptr(GRegex) line = g_regex_new ("^ShimwatchTest-Message: [0-9]{2}:[0-9]{2}:[0-9]{2}"
                                        "\\.[0-9]{3}: ns/t1: task exited\n$", 0, 0, NULL);
  g_autofree char *out = NULL;
  g_autofree char *err = NULL;
  g_autofree char *out_debug = NULL;
  g_autofree char *err_debug = NULL;

  g_log_set_debug_enabled (FALSE);
  g_unsetenv ("G_MESSAGES_DEBUG");
  shimwatch_log_reread_environment ();
  output_of (write_lines, &out, &err);
  g_assert_true (g_regex_match (line, err, 0, NULL));
  g_assert_cmpstr (out, ==, "");

  g_setenv ("G_MESSAGES_DEBUG", G_LOG_DOMAIN_TEST, TRUE);
  shimwatch_log_reread_environment ();
  output_of (write_lines, &out_debug, &err_debug);
  g_unsetenv ("G_MESSAGES_DEBUG");
  shimwatch_log_reread_environment ();
  g_assert_true (g_regex_match (line, err_debug, 0, NULL));
  g_assert_true (g_str_has_prefix (out_debug, "ShimwatchTest-INFO: "));
  g_assert_true (g_str_has_suffix (out_debug, ": an info line\n"));
  g_assert_cmpuint (strlen (out_debug), ==,
                    strlen ("ShimwatchTest-INFO: 00:00:00.000: an info line\n"));
}

/* shimwatch_write_all(): a write cut short by a signal (EINTR, or a partial count) goes on
 * where it stopped, so the reader gets every byte in order */
#define WRITE_ALL_SIZE (4 * 1024 * 1024)

typedef struct {
  int fd;
  const guint8 *data;
  gboolean ok;
  int saved_errno;
  volatile gint done;
} WriteAllJob;

static void
on_sigusr1 (int signo)
{
}

static void *
write_all_thread (void *data)
{
  WriteAllJob *job = data;

  job->ok = shimwatch_write_all (job->fd, job->data, WRITE_ALL_SIZE);
  job->saved_errno = errno;
  g_atomic_int_set (&job->done, 1);
  close (job->fd);    /* the reader sees the end, even of a write that stopped short */
  return NULL;
}

static void
test_write_all_interrupted (void)
{
  struct sigaction action = { .sa_handler = on_sigusr1 };   /* no SA_RESTART */
  struct sigaction old_action;
  g_autofree guint8 *data = g_malloc (WRITE_ALL_SIZE);
  g_autofree guint8 *got = g_malloc (WRITE_ALL_SIZE);
  WriteAllJob job = { 0 };
  pthread_t thread;
  gsize have = 0;
  guint signals = 0;
  int fds[2];

  for (gsize i = 0; i < WRITE_ALL_SIZE; i++)
    data[i] = (guint8) (i * 7 + i / 4096);
  g_assert_no_errno (sigaction (SIGUSR1, &action, &old_action));
  g_assert_no_errno (pipe2 (fds, O_CLOEXEC));
  job.fd = fds[1];
  job.data = data;
  /* a pthread of its own, to signal it: GThread does not give its pthread_t */
  g_assert_cmpint (pthread_create (&thread, NULL, write_all_thread, &job), ==, 0);
  while (have < WRITE_ALL_SIZE)
    {
      /* small reads, each after a signal to the blocked writer */
      gssize n;

      if (!g_atomic_int_get (&job.done))
        {
          pthread_kill (thread, SIGUSR1);
          signals++;
        }
      n = read (fds[0], got + have, MIN (WRITE_ALL_SIZE - have, 8192));
      if (n < 0 && errno == EINTR)
        continue;
      if (n == 0)
        break;
      g_assert_cmpint (n, >, 0);
      have += (gsize) n;
    }
  g_assert_cmpint (pthread_join (thread, NULL), ==, 0);
  g_assert_true (job.ok);
  g_assert_cmpuint (have, ==, WRITE_ALL_SIZE);
  g_assert_cmpuint (signals, >, 10);
  g_assert_cmpmem (got, WRITE_ALL_SIZE, data, WRITE_ALL_SIZE);
  close (fds[0]);
  g_assert_no_errno (sigaction (SIGUSR1, &old_action, NULL));
}

/* a write that fails says so with errno: a closed pipe, a full device */
static void
test_write_all_errors (void)
{
  void (*old_handler) (int) = signal (SIGPIPE, SIG_IGN);
  int full = open ("/dev/full", O_WRONLY | O_CLOEXEC);
  int fds[2];

  g_assert_no_errno (pipe2 (fds, O_CLOEXEC));
  close (fds[0]);
  errno = 0;
  g_assert_false (shimwatch_write_all (fds[1], "line\n", 5));
  g_assert_cmpint (errno, ==, EPIPE);
  close (fds[1]);
  signal (SIGPIPE, old_handler);

  g_assert_cmpint (full, >=, 0);
  errno = 0;
  g_assert_false (shimwatch_write_all (full, "line\n", 5));
  g_assert_cmpint (errno, ==, ENOSPC);
  close (full);

  /* nothing to write is done at once, even on an fd that cannot be written */
  g_assert_true (shimwatch_write_all (-1, "", 0));
}

/* getpid() as libc's, counted: the writer, linked in statically, calls this one */
static gint n_getpid;

pid_t
getpid (void)
{
  g_atomic_int_inc (&n_getpid);
  return (pid_t) syscall (SYS_getpid);
}

/* the pid of a prefixed line is asked of the kernel once, not for every line (a dead
 * shim's warning); a forked child's lines carry its own */
static void
test_writer_pid_once (void)
{
  g_autofree char *pid_prefix = NULL;
  int status;
  pid_t child;

  g_free (format_line (G_LOG_LEVEL_WARNING, G_LOG_DOMAIN_TEST, "first", SOME_TIME));
  pid_prefix = g_strdup_printf ("(%s:%lu): ", g_get_prgname (), (gulong) syscall (SYS_getpid));
  g_atomic_int_set (&n_getpid, 0);
  for (guint i = 0; i < 3; i++)
    {
      g_autofree char *line = format_line (G_LOG_LEVEL_WARNING, G_LOG_DOMAIN_TEST, "w",
                                           SOME_TIME);

      g_assert_nonnull (strstr (line, pid_prefix));
    }
  g_assert_cmpint (g_atomic_int_get (&n_getpid), ==, 0);

  child = fork ();
  g_assert_cmpint (child, >=, 0);
  if (child == 0)
    {
      g_autofree char *line = format_line (G_LOG_LEVEL_WARNING, G_LOG_DOMAIN_TEST, "w",
                                           SOME_TIME);
      g_autofree char *own = g_strdup_printf ("(%s:%lu): ", g_get_prgname (),
                                              (gulong) syscall (SYS_getpid));

      _exit (strstr (line, own) != NULL ? 0 : 1);
    }
  g_assert_cmpint (waitpid (child, &status, 0), ==, child);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
}

int
main (int   argc,
      char *argv[])
{
  int result;

  /* before g_test_init(), which would log through the default writer */
  g_unsetenv ("G_MESSAGES_DEBUG");
  g_log_set_writer_func (capture_writer, NULL, NULL);
  lines = g_ptr_array_new_with_free_func ((GDestroyNotify) g_hash_table_unref);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/logging/level-of-output", test_level_of_output);
  g_test_add_func ("/logging/level-of-output-in-place", test_level_of_output_in_place);
  g_test_add_func ("/logging/task-fields", test_log_task_fields);
  g_test_add_func ("/logging/info-only-when-asked", test_log_task_info_only_when_asked);
  g_test_add_func ("/logging/info-dropped-without-getenv", test_info_dropped_without_getenv);
  g_test_add_func ("/logging/writer/format", test_writer_format);
  g_test_add_func ("/logging/writer/zone-once-a-minute", test_writer_zone_once_a_minute);
  g_test_add_func ("/logging/writer/writes-lines", test_writer_writes_lines);
  g_test_add_func ("/logging/write-all/interrupted", test_write_all_interrupted);
  g_test_add_func ("/logging/write-all/errors", test_write_all_errors);
  g_test_add_func ("/logging/writer/pid-once", test_writer_pid_once);
  result = g_test_run ();
  g_ptr_array_unref (lines);
  return result;
}
