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
#include <glib/gstdio.h>

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
  g_test_add_func ("/logging/write-all/interrupted", test_write_all_interrupted);
  g_test_add_func ("/logging/write-all/errors", test_write_all_errors);
  result = g_test_run ();
  g_ptr_array_unref (lines);
  return result;
}
