/* SPDX-License-Identifier: Apache-2.0
 *
 * wire: the events of the Events service (Forward)
 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shimwatch-wire-private.h"

G_DEFINE_BOXED_TYPE (ShimwatchEvent, shimwatch_event, shimwatch_event_copy, shimwatch_event_free)

ShimwatchEvent *
shimwatch_event_copy (const ShimwatchEvent *event)
{
  ShimwatchEvent *copy = g_memdup2 (event, sizeof *event);

  copy->namespace_ = g_strdup (event->namespace_);
  copy->topic = g_strdup (event->topic);
  copy->type_url = g_strdup (event->type_url);
  copy->container_id = g_strdup (event->container_id);
  copy->exec_id = g_strdup (event->exec_id);
  copy->bundle = g_strdup (event->bundle);
  return copy;
}

void
shimwatch_event_free (ShimwatchEvent *event)
{
  if (event == NULL)
    return;
  g_free (event->namespace_);
  g_free (event->topic);
  g_free (event->type_url);
  g_free (event->container_id);
  g_free (event->exec_id);
  g_free (event->bundle);
  g_free (event);
}

static const struct {
  const char        *type_url;
  const char        *topic;
  ShimwatchEventKind kind;
} event_types[] = {
  { "containerd.events.TaskCreate", "/tasks/create", SHIMWATCH_EVENT_TASK_CREATE },
  { "containerd.events.TaskStart", "/tasks/start", SHIMWATCH_EVENT_TASK_START },
  { "containerd.events.TaskExit", "/tasks/exit", SHIMWATCH_EVENT_TASK_EXIT },
  { "containerd.events.TaskDelete", "/tasks/delete", SHIMWATCH_EVENT_TASK_DELETE },
  { "containerd.events.TaskOOM", "/tasks/oom", SHIMWATCH_EVENT_TASK_OOM },
  { "containerd.events.TaskExecAdded", "/tasks/exec-added", SHIMWATCH_EVENT_TASK_EXEC_ADDED },
  { "containerd.events.TaskExecStarted", "/tasks/exec-started", SHIMWATCH_EVENT_TASK_EXEC_STARTED },
  { "containerd.events.TaskPaused", "/tasks/paused", SHIMWATCH_EVENT_TASK_PAUSED },
  { "containerd.events.TaskResumed", "/tasks/resumed", SHIMWATCH_EVENT_TASK_RESUMED },
};

static gboolean
decode_event_body (ShimwatchEvent               *event,
                   const Google__Protobuf__Any  *any,
                   GError                      **error)
{
  g_autoptr(GBytes) value = g_bytes_new_static (any->value.data, any->value.len);
  ProtobufCMessage *message = NULL;
  const char *container_id = NULL;
  const char *exec_id = NULL;
  const char *bundle = NULL;

  switch (event->kind)
    {
    case SHIMWATCH_EVENT_TASK_CREATE:
      {
        Containerd__Events__TaskCreate *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_create__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        bundle = m->bundle;
        event->pid = m->pid;
        break;
      }
    case SHIMWATCH_EVENT_TASK_START:
      {
        Containerd__Events__TaskStart *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_start__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        event->pid = m->pid;
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXIT:
      {
        Containerd__Events__TaskExit *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_exit__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->id;
        event->pid = m->pid;
        event->exit_status = m->exit_status;
        event->exited_at = shimwatch_wire_timestamp_usec (m->exited_at);
        break;
      }
    case SHIMWATCH_EVENT_TASK_DELETE:
      {
        Containerd__Events__TaskDelete *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_delete__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->id;
        event->pid = m->pid;
        event->exit_status = m->exit_status;
        event->exited_at = shimwatch_wire_timestamp_usec (m->exited_at);
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXEC_ADDED:
      {
        Containerd__Events__TaskExecAdded *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_exec_added__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->exec_id;
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXEC_STARTED:
      {
        Containerd__Events__TaskExecStarted *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_exec_started__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->exec_id;
        event->pid = m->pid;
        break;
      }
    case SHIMWATCH_EVENT_TASK_OOM:
    case SHIMWATCH_EVENT_TASK_PAUSED:
    case SHIMWATCH_EVENT_TASK_RESUMED:
      {
        /* all three are {container_id = 1} */
        Containerd__Events__TaskOOM *m = (gpointer) (message =
          shimwatch_wire_unpack_message (&containerd__events__task_oom__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        break;
      }
    case SHIMWATCH_EVENT_OTHER:
    default:
      return TRUE;
    }

  if (!shimwatch_wire_check_utf8 ("container_id", container_id, error) ||
      !shimwatch_wire_check_utf8 ("id", exec_id, error) ||
      !shimwatch_wire_check_utf8 ("bundle", bundle, error))
    {
      protobuf_c_message_free_unpacked (message, NULL);
      return FALSE;
    }
  event->container_id = g_strdup (container_id);
  event->exec_id = g_strdup (exec_id);
  event->bundle = g_strdup (bundle);
  protobuf_c_message_free_unpacked (message, NULL);
  return TRUE;
}

ShimwatchEvent *
shimwatch_wire_decode_forward_request (GBytes  *payload,
                                       GError **error)
{
  Containerd__Services__Events__Ttrpc__V1__ForwardRequest *request;
  const Containerd__Types__Envelope *envelope;
  g_autoptr(ShimwatchEvent) event = NULL;
  gboolean ok;

  request = (gpointer) shimwatch_wire_unpack_message (
    &containerd__services__events__ttrpc__v1__forward_request__descriptor, payload, error);
  if (request == NULL)
    return NULL;

  envelope = request->envelope;
  if (envelope == NULL || envelope->event == NULL)
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "Forward request carries no envelope or no event");
      containerd__services__events__ttrpc__v1__forward_request__free_unpacked (request, NULL);
      return NULL;
    }
  if (!shimwatch_wire_check_utf8 ("namespace", envelope->namespace_, error) ||
      !shimwatch_wire_check_utf8 ("topic", envelope->topic, error) ||
      !shimwatch_wire_check_utf8 ("type_url", envelope->event->type_url, error))
    {
      containerd__services__events__ttrpc__v1__forward_request__free_unpacked (request, NULL);
      return NULL;
    }

  event = g_new0 (ShimwatchEvent, 1);
  event->namespace_ = g_strdup (envelope->namespace_);
  event->topic = g_strdup (envelope->topic);
  event->type_url = g_strdup (envelope->event->type_url);
  event->timestamp = shimwatch_wire_timestamp_usec (envelope->timestamp);
  event->kind = SHIMWATCH_EVENT_OTHER;
  for (gsize i = 0; i < G_N_ELEMENTS (event_types); i++)
    if (g_strcmp0 (event->type_url, event_types[i].type_url) == 0)
      event->kind = event_types[i].kind;

  ok = decode_event_body (event, envelope->event, error);
  containerd__services__events__ttrpc__v1__forward_request__free_unpacked (request, NULL);
  return ok ? g_steal_pointer (&event) : NULL;
}

GBytes *
shimwatch_wire_encode_forward_request (const ShimwatchEvent *event)
{
  Containerd__Services__Events__Ttrpc__V1__ForwardRequest request =
    CONTAINERD__SERVICES__EVENTS__TTRPC__V1__FORWARD_REQUEST__INIT;
  Containerd__Types__Envelope envelope = CONTAINERD__TYPES__ENVELOPE__INIT;
  Google__Protobuf__Timestamp timestamp = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  Google__Protobuf__Timestamp exited_at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  g_autoptr(GBytes) body = NULL;
  const char *type_url = event->type_url;
  gsize length;

  exited_at.seconds = event->exited_at / G_USEC_PER_SEC;
  exited_at.nanos = (event->exited_at % G_USEC_PER_SEC) * 1000;

  switch (event->kind)
    {
    case SHIMWATCH_EVENT_TASK_CREATE:
      {
        Containerd__Events__TaskCreate m = CONTAINERD__EVENTS__TASK_CREATE__INIT;
        m.container_id = event->container_id ?: (char *) "";
        m.bundle = event->bundle ?: (char *) "";
        m.pid = event->pid;
        body = shimwatch_wire_pack_message (&m.base);
        break;
      }
    case SHIMWATCH_EVENT_TASK_START:
      {
        Containerd__Events__TaskStart m = CONTAINERD__EVENTS__TASK_START__INIT;
        m.container_id = event->container_id ?: (char *) "";
        m.pid = event->pid;
        body = shimwatch_wire_pack_message (&m.base);
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXIT:
      {
        Containerd__Events__TaskExit m = CONTAINERD__EVENTS__TASK_EXIT__INIT;
        m.container_id = event->container_id ?: (char *) "";
        m.id = event->exec_id ?: (char *) "";
        m.pid = event->pid;
        m.exit_status = event->exit_status;
        m.exited_at = &exited_at;
        body = shimwatch_wire_pack_message (&m.base);
        break;
      }
    case SHIMWATCH_EVENT_TASK_DELETE:
      {
        Containerd__Events__TaskDelete m = CONTAINERD__EVENTS__TASK_DELETE__INIT;
        m.container_id = event->container_id ?: (char *) "";
        m.id = event->exec_id ?: (char *) "";
        m.pid = event->pid;
        m.exit_status = event->exit_status;
        m.exited_at = &exited_at;
        body = shimwatch_wire_pack_message (&m.base);
        break;
      }
    default:
      {
        Containerd__Events__TaskOOM m = CONTAINERD__EVENTS__TASK_OOM__INIT;
        m.container_id = event->container_id ?: (char *) "";
        body = shimwatch_wire_pack_message (&m.base);
        break;
      }
    }

  for (gsize i = 0; type_url == NULL && i < G_N_ELEMENTS (event_types); i++)
    if (event_types[i].kind == event->kind)
      type_url = event_types[i].type_url;

  timestamp.seconds = event->timestamp / G_USEC_PER_SEC;
  timestamp.nanos = (event->timestamp % G_USEC_PER_SEC) * 1000;
  any.type_url = (char *) (type_url ?: "");
  any.value.data = (guint8 *) shimwatch_wire_bytes_data (body, &length);
  any.value.len = length;
  envelope.timestamp = &timestamp;
  envelope.namespace_ = event->namespace_ ?: (char *) "";
  envelope.topic = event->topic ?: (char *) "";
  envelope.event = &any;
  request.envelope = &envelope;
  return shimwatch_wire_pack_message (&request.base);
}
