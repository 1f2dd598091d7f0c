/* SPDX-License-Identifier: Apache-2.0
 *
 * one structured log line about a task (see shimwatch-logging.h)
 */

#include "config.h"

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

static void
add_string (GVariantBuilder *fields,
            const char      *key,
            const char      *value)
{
  g_variant_builder_add (fields, "{sv}", key, g_variant_new_string (value != NULL ? value : ""));
}

static void
add_pid (GVariantBuilder *fields,
         const char      *key,
         guint32          pid)
{
  g_autofree char *text = g_strdup_printf ("%u", pid);

  add_string (fields, key, text);
}

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
  g_auto(GVariantBuilder) fields = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE_VARDICT);
  g_autofree char *text = NULL;
  g_autofree char *message = NULL;
  g_autoptr(GVariant) dict = NULL;
  va_list args;

  va_start (args, format);
  text = g_strdup_vprintf (format, args);
  va_end (args);
  if (task->bare)
    message = g_steal_pointer (&text);
  else
    message = g_strdup_printf ("%s%s/%s: %s", task->prefix != NULL ? task->prefix : "",
                               task->namespace_, task->id, text);

  add_string (&fields, "CODE_FILE", file);
  add_string (&fields, "CODE_LINE", line);
  add_string (&fields, "CODE_FUNC", func);
  if (task->event != NULL)
    add_string (&fields, "MESSAGE_ID", shimwatch_log_message_id (task->event));
  add_string (&fields, SHIMWATCH_LOG_FIELD_NAMESPACE, task->namespace_);
  add_string (&fields, SHIMWATCH_LOG_FIELD_TASK_ID, task->id);
  if (task->has_pids)
    {
      add_pid (&fields, SHIMWATCH_LOG_FIELD_SHIM_PID, task->shim_pid);
      add_pid (&fields, SHIMWATCH_LOG_FIELD_TASK_PID, task->task_pid);
    }
  if (task->event != NULL)
    add_string (&fields, SHIMWATCH_LOG_FIELD_EVENT, task->event);
  for (guint i = 0; task->extra != NULL && task->extra[i] != NULL && task->extra[i + 1] != NULL;
       i += 2)
    add_string (&fields, task->extra[i], task->extra[i + 1]);
  add_string (&fields, "MESSAGE", message);
  dict = g_variant_ref_sink (g_variant_builder_end (&fields));
  g_log_variant (log_domain, level, dict);
}
