/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatch_log_task(): the fields a journal reader relies on, in one structured line,
 * and nothing built for a line no writer would keep.
 */
#include "config.h"

#include "shimwatch-logging.h"
#include "shimwatch-names.h"

#define G_LOG_DOMAIN_TEST "ShimwatchTest"

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
  g_test_add_func ("/logging/task-fields", test_log_task_fields);
  g_test_add_func ("/logging/info-only-when-asked", test_log_task_info_only_when_asked);
  result = g_test_run ();
  g_ptr_array_unref (lines);
  return result;
}
