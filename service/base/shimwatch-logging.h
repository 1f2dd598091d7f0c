/* SPDX-License-Identifier: Apache-2.0
 *
 * The one way the service logs something about a task: a structured line with the
 * task's journald fields (SHIMWATCH_NAMESPACE, SHIMWATCH_TASK_ID and, for a lifecycle
 * event, SHIMWATCH_EVENT with the event's MESSAGE_ID), one line per event.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  const char *namespace_;   /* SHIMWATCH_NAMESPACE */
  const char *id;           /* SHIMWATCH_TASK_ID */
  /* a lifecycle event ("create", "exit", ...): SHIMWATCH_EVENT and its MESSAGE_ID, see
   * shimwatch_log_message_id(); NULL for a line that is not one */
  const char *event;
  gboolean    has_pids;     /* SHIMWATCH_SHIM_PID and SHIMWATCH_TASK_PID (0: not known) */
  guint32     shim_pid;
  guint32     task_pid;
  /* MESSAGE: "<prefix><namespace>/<id>: <text>" (prefix NULL: none); bare: the text only */
  const char *prefix;
  gboolean    bare;
  /* more fields: key, value, ..., NULL (NULL: none) */
  const char * const *extra;
} ShimwatchLogTask;

/* the MESSAGE_ID of a lifecycle event; the generic "record" id for an unknown one */
const char *shimwatch_log_message_id (const char *event);

/* the level for what a shim or runtime wrote to stderr: INFO when every line is a logrus
 * line of level info, debug or trace (containerd-shim-runc-v2's `delete` says "starting
 * signal loop" each time), MESSAGE for anything else */
GLogLevelFlags shimwatch_log_level_of_output     (const char *text);
/* the same of @length bytes, not NUL-terminated (what a shim wrote, as it was read); no
 * allocation */
GLogLevelFlags shimwatch_log_level_of_output_len (const char *text,
                                                  gsize       length);

/* g_log_writer_default_would_drop(), without a getenv(3) per info or debug line: GLib
 * reads G_MESSAGES_DEBUG at each call, a walk of the environment; it is read once here
 * (the service never changes it). g_log_set_debug_enabled() counts at once, as with
 * GLib's. A program that changes G_MESSAGES_DEBUG (a test) says so with
 * shimwatch_log_reread_environment(). */
gboolean    shimwatch_log_would_drop (GLogLevelFlags          level,
                                      const char             *log_domain);
void        shimwatch_log_reread_environment (void);

void        shimwatch_log_task_full  (const char             *log_domain,
                                      GLogLevelFlags          level,
                                      const char             *file,
                                      const char             *line,
                                      const char             *func,
                                      const ShimwatchLogTask *task,
                                      const char             *format,
                                      ...) G_GNUC_PRINTF (7, 8);

/* -- the family: every line about a task -----------------------------------------------
 *
 *   shimwatch_log_task (level, FIELDS, format, ...)
 *
 * in the caller's G_LOG_DOMAIN (every file of service/ spells its domain Shimwatch<Part>:
 * ShimwatchShim, ShimwatchCleanup, ShimwatchContainerd, ...), with its CODE_FILE,
 * CODE_LINE and CODE_FUNC, FIELDS being one of the LOG_* below (bolt-log.h's LOG_DEV()
 * and the like are the model). Lines about no task are plain g_debug() .. g_warning(). */
#define shimwatch_log_task(level, task, ...) \
  shimwatch_log_task_full (G_LOG_DOMAIN, (level), __FILE__, G_STRINGIFY (__LINE__), G_STRFUNC, \
                           (task), __VA_ARGS__)

/* the task @owner is about (anything with the members namespace_ and id: a shim, a cleanup
 * request, a task's log): SHIMWATCH_NAMESPACE and SHIMWATCH_TASK_ID */
#define LOG_TASK(owner) \
  (&(ShimwatchLogTask) { .namespace_ = (owner)->namespace_, .id = (owner)->id })

/* a lifecycle event (a string: "exit", "delete", ...) of the task on the bus @shim, with
 * the members namespace_ and id (a ShimwatchShim, a ShimwatchContainerdTask): also
 * SHIMWATCH_EVENT with the event's MESSAGE_ID, SHIMWATCH_SHIM_PID and SHIMWATCH_TASK_PID */
#define LOG_EVENT_PREFIXED(shim, event_name, message_prefix) \
  LOG_EVENT_OF (SHIMWATCH_DBUS_SHIM (shim), (shim)->namespace_, (shim)->id, event_name, \
                message_prefix)
/* the same, of the task @task_namespace/@task_id whose object on the bus is @iface (a
 * ShimwatchDbusShim), for what a task object owns (its lifecycle, its shim's watch) */
#define LOG_EVENT_OF(iface, task_namespace, task_id, event_name, message_prefix) \
  (&(ShimwatchLogTask) { \
     .namespace_ = (task_namespace), \
     .id = (task_id), \
     .event = (event_name), \
     .has_pids = TRUE, \
     .shim_pid = shimwatch_dbus_shim_get_shim_pid (iface), \
     .task_pid = shimwatch_dbus_shim_get_task_pid (iface), \
     .prefix = (message_prefix), \
   })
/* the service's own task: MESSAGE "<namespace>/<id>: ..." */
#define LOG_EVENT(shim, event_name) LOG_EVENT_PREFIXED (shim, event_name, NULL)
/* containerd's task: MESSAGE "containerd <namespace>/<id>: ..." */
#define LOG_CONTAINERD_EVENT(task, event_name) LOG_EVENT_PREFIXED (task, event_name, "containerd ")

G_END_DECLS
