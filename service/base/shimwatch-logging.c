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

/* the level of one logrus line of @length bytes (no newline) at @line: TRUE if it is one
 * of the shim's own chatter levels (info, debug, trace) */
static gboolean
is_chatter (const char *line,
            gsize       length)
{
  static const char * const chatter[] = { "info", "debug", "trace" };
  const char *level;
  gsize left;

  if (length >= strlen ("level=") && memcmp (line, "level=", strlen ("level=")) == 0)
    level = line + strlen ("level=");
  else if ((level = memmem (line, length, " level=", strlen (" level="))) != NULL)
    level += strlen (" level=");
  else
    return FALSE;
  left = length - (gsize) (level - line);
  for (guint j = 0; j < G_N_ELEMENTS (chatter); j++)
    {
      gsize n = strlen (chatter[j]);

      if (left >= n && memcmp (level, chatter[j], n) == 0 && (left == n || level[n] == ' '))
        return TRUE;
    }
  return FALSE;
}

GLogLevelFlags
shimwatch_log_level_of_output_len (const char *text,
                                   gsize       length)
{
  const char *end = text + length;
  gboolean any = FALSE;

  /* (trailing blanks are no part of the last line, as the logged text is chomped) */
  while (end > text && g_ascii_isspace (end[-1]))
    end--;
  /* each line where it is, not a copy of each: the runc shim's "starting signal loop" at
   * every `shim delete` was classified through g_strsplit() */
  for (const char *line = text; line < end;)
    {
      const char *newline = memchr (line, '\n', (gsize) (end - line));
      const char *line_end = newline != NULL ? newline : end;

      if (line_end > line)
        {
          if (!is_chatter (line, (gsize) (line_end - line)))
            return G_LOG_LEVEL_MESSAGE;
          any = TRUE;
        }
      line = line_end + 1;
    }
  return any ? G_LOG_LEVEL_INFO : G_LOG_LEVEL_MESSAGE;
}

GLogLevelFlags
shimwatch_log_level_of_output (const char *text)
{
  return shimwatch_log_level_of_output_len (text, strlen (text));
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
