/* SPDX-License-Identifier: Apache-2.0
 *
 * one structured log line about a task (see shimwatch-logging.h)
 */

#include "config.h"

#include <string.h>

#include "shimwatch-logging.h"
#include "shimwatch-names.h"

static const struct {
  const char *event;
  const char *message_id;
} message_ids[] = {
  { "create", SHIMWATCH_MESSAGE_ID_CREATE },
  { "start", SHIMWATCH_MESSAGE_ID_START },
  { "exit", SHIMWATCH_MESSAGE_ID_EXIT },
  { "disconnected", SHIMWATCH_MESSAGE_ID_DISCONNECTED },
  { "cleaned", SHIMWATCH_MESSAGE_ID_CLEANED },
  { "delete", SHIMWATCH_MESSAGE_ID_DELETE },
  { "readopt", SHIMWATCH_MESSAGE_ID_READOPT },
  { "unresponsive", SHIMWATCH_MESSAGE_ID_UNRESPONSIVE },
  { "responsive", SHIMWATCH_MESSAGE_ID_RESPONSIVE },
  { "oom", SHIMWATCH_MESSAGE_ID_OOM },
  { "reap", SHIMWATCH_MESSAGE_ID_REAP },
  { "create-failed", SHIMWATCH_MESSAGE_ID_CREATE_FAILED },
  { "orphan", SHIMWATCH_MESSAGE_ID_ORPHAN },
  { "auth", SHIMWATCH_MESSAGE_ID_AUTH },
  { "record", SHIMWATCH_MESSAGE_ID_RECORD },
};

const char *
shimwatch_log_message_id (const char *event)
{
  for (guint i = 0; i < G_N_ELEMENTS (message_ids); i++)
    if (g_strcmp0 (message_ids[i].event, event) == 0)
      return message_ids[i].message_id;
  return SHIMWATCH_MESSAGE_ID_RECORD;   /* every event is in the table; never crash */
}

/* the value of a logrus text line's level field, or NULL */
static const char *
logrus_level (const char *line)
{
  const char *field;

  if (g_str_has_prefix (line, "level="))
    return line + strlen ("level=");
  field = strstr (line, " level=");
  return field != NULL ? field + strlen (" level=") : NULL;
}

GLogLevelFlags
shimwatch_log_level_of_output (const char *text)
{
  static const char * const chatter[] = { "info", "debug", "trace" };
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);
  gboolean any = FALSE;

  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *level = logrus_level (lines[i]);
      gboolean quiet = FALSE;

      if (lines[i][0] == '\0')
        continue;
      for (guint j = 0; level != NULL && j < G_N_ELEMENTS (chatter); j++)
        {
          gsize n = strlen (chatter[j]);

          if (strncmp (level, chatter[j], n) == 0 && (level[n] == ' ' || level[n] == '\0'))
            quiet = TRUE;
        }
      if (!quiet)
        return G_LOG_LEVEL_MESSAGE;
      any = TRUE;
    }
  return any ? G_LOG_LEVEL_INFO : G_LOG_LEVEL_MESSAGE;
}

static gint messages_debug = 0;     /* 0: not read yet, 1: G_MESSAGES_DEBUG unset, 2: set */

void
shimwatch_log_reread_environment (void)
{
  g_atomic_int_set (&messages_debug, 0);
}

gboolean
shimwatch_log_would_drop (GLogLevelFlags  level,
                          const char     *log_domain)
{
  gint state;

  /* what GLib may drop: info and debug lines, unless debug output was turned on */
  if ((level & G_LOG_LEVEL_MASK & ~(G_LOG_LEVEL_INFO | G_LOG_LEVEL_DEBUG)) != 0 ||
      (level & (G_LOG_LEVEL_INFO | G_LOG_LEVEL_DEBUG)) == 0 || g_log_get_debug_enabled ())
    return g_log_writer_default_would_drop (level, log_domain);
  state = g_atomic_int_get (&messages_debug);
  if (state == 0)
    {
      state = g_getenv ("G_MESSAGES_DEBUG") == NULL ? 1 : 2;
      g_atomic_int_set (&messages_debug, state);
    }
  /* set, it names the domains: GLib's own answer */
  return state == 1 || g_log_writer_default_would_drop (level, log_domain);
}

/* the journal's priority of a GLib level, as g_log_structured() gives it */
static const char *
level_to_priority (GLogLevelFlags level)
{
  if (level & G_LOG_LEVEL_ERROR)
    return "3";
  if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING))
    return "4";
  if (level & G_LOG_LEVEL_MESSAGE)
    return "5";
  if (level & G_LOG_LEVEL_INFO)
    return "6";
  return "7";
}

/* fields of a line: PRIORITY, GLIB_DOMAIN, CODE_* (3), MESSAGE_ID, the task's (5), MESSAGE */
#define N_FIXED_FIELDS 12

void
shimwatch_log_task_full (const char             *log_domain,
                         GLogLevelFlags          level,
                         const char             *file,
                         const char             *line,
                         const char             *func,
                         const ShimwatchLogTask *task,
                         const char             *format,
                         ...)
{
  g_autoptr(GString) message = NULL;
  GLogField *fields;
  guint n_extra = 0;
  guint n = 0;
  char shim_pid[16];
  char task_pid[16];
  va_list args;

  /* an info or debug line nobody asked for costs nothing: a death logs several */
  if (shimwatch_log_would_drop (level, log_domain))
    return;

  /* "<prefix><namespace>/<id>: <text>", formatted once */
  message = g_string_sized_new (256);
  if (!task->bare)
    {
      if (task->prefix != NULL)
        g_string_append (message, task->prefix);
      g_string_append (message, task->namespace_ != NULL ? task->namespace_ : "(null)");
      g_string_append_c (message, '/');
      g_string_append (message, task->id != NULL ? task->id : "(null)");
      g_string_append (message, ": ");
    }
  va_start (args, format);
  g_string_append_vprintf (message, format, args);
  va_end (args);

  /* straight to the writer, as g_log_variant() would hand them over, without building a
   * GVariant first */
  while (task->extra != NULL && task->extra[n_extra] != NULL && task->extra[n_extra + 1] != NULL)
    n_extra += 2;
  fields = g_newa (GLogField, N_FIXED_FIELDS + n_extra / 2);
#define ADD_FIELD(k, v) \
  (fields[n++] = (GLogField) { (k), (v) != NULL ? (const char *) (v) : "", -1 })
  ADD_FIELD ("PRIORITY", level_to_priority (level));
  if (log_domain != NULL)
    ADD_FIELD ("GLIB_DOMAIN", log_domain);
  ADD_FIELD ("CODE_FILE", file);
  ADD_FIELD ("CODE_LINE", line);
  ADD_FIELD ("CODE_FUNC", func);
  if (task->event != NULL)
    ADD_FIELD ("MESSAGE_ID", shimwatch_log_message_id (task->event));
  ADD_FIELD (SHIMWATCH_LOG_FIELD_NAMESPACE, task->namespace_);
  ADD_FIELD (SHIMWATCH_LOG_FIELD_TASK_ID, task->id);
  if (task->has_pids)
    {
      g_snprintf (shim_pid, sizeof shim_pid, "%u", task->shim_pid);
      g_snprintf (task_pid, sizeof task_pid, "%u", task->task_pid);
      ADD_FIELD (SHIMWATCH_LOG_FIELD_SHIM_PID, shim_pid);
      ADD_FIELD (SHIMWATCH_LOG_FIELD_TASK_PID, task_pid);
    }
  if (task->event != NULL)
    ADD_FIELD (SHIMWATCH_LOG_FIELD_EVENT, task->event);
  for (guint i = 0; i < n_extra; i += 2)
    ADD_FIELD (task->extra[i], task->extra[i + 1]);
  ADD_FIELD ("MESSAGE", message->str);
#undef ADD_FIELD
  g_log_structured_array (level, fields, n);
}
