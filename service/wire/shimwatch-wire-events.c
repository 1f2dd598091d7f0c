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

/* The task events of containerd's api/events/task.proto, by the type URL their Any
 * carries. What a ShimwatchEvent holds is read from (and written to) the fields of those
 * names the message has: container_id (every one), bundle, pid, exit_status, exited_at,
 * and the exec's id, which TaskExit and TaskDelete call "id" and the exec events
 * "exec_id". */
static const struct {
  const char                       *type_url;
  const char                       *topic;
  ShimwatchEventKind                kind;
  const ProtobufCMessageDescriptor *descriptor;
  const char                       *exec_id_field;
} event_types[] = {
  { "containerd.events.TaskCreate", "/tasks/create", SHIMWATCH_EVENT_TASK_CREATE,
    &containerd__events__task_create__descriptor, NULL },
  { "containerd.events.TaskStart", "/tasks/start", SHIMWATCH_EVENT_TASK_START,
    &containerd__events__task_start__descriptor, NULL },
  { "containerd.events.TaskExit", "/tasks/exit", SHIMWATCH_EVENT_TASK_EXIT,
    &containerd__events__task_exit__descriptor, "id" },
  { "containerd.events.TaskDelete", "/tasks/delete", SHIMWATCH_EVENT_TASK_DELETE,
    &containerd__events__task_delete__descriptor, "id" },
  { "containerd.events.TaskOOM", "/tasks/oom", SHIMWATCH_EVENT_TASK_OOM,
    &containerd__events__task_oom__descriptor, NULL },
  { "containerd.events.TaskExecAdded", "/tasks/exec-added", SHIMWATCH_EVENT_TASK_EXEC_ADDED,
    &containerd__events__task_exec_added__descriptor, "exec_id" },
  { "containerd.events.TaskExecStarted", "/tasks/exec-started", SHIMWATCH_EVENT_TASK_EXEC_STARTED,
    &containerd__events__task_exec_started__descriptor, "exec_id" },
  { "containerd.events.TaskPaused", "/tasks/paused", SHIMWATCH_EVENT_TASK_PAUSED,
    &containerd__events__task_paused__descriptor, NULL },
  { "containerd.events.TaskResumed", "/tasks/resumed", SHIMWATCH_EVENT_TASK_RESUMED,
    &containerd__events__task_resumed__descriptor, NULL },
};

static const ProtobufCMessageDescriptor *
descriptor_of (ShimwatchEventKind  kind,
               const char        **exec_id_field)
{
  for (gsize i = 0; i < G_N_ELEMENTS (event_types); i++)
    if (event_types[i].kind == kind)
      {
        *exec_id_field = event_types[i].exec_id_field;
        return event_types[i].descriptor;
      }
  *exec_id_field = NULL;
  return NULL;
}

/* where the message keeps its singular field called name, if it has one of that type
 * (a message field: a Timestamp); NULL otherwise */
static gpointer
member (const ProtobufCMessage *message,
        const char             *name,
        ProtobufCType           type)
{
  const ProtobufCFieldDescriptor *field;

  if (name == NULL)
    return NULL;
  field = protobuf_c_message_descriptor_get_field_by_name (message->descriptor, name);
  if (field == NULL || field->type != type || field->label != PROTOBUF_C_LABEL_NONE ||
      (type == PROTOBUF_C_TYPE_MESSAGE &&
       field->descriptor != &google__protobuf__timestamp__descriptor))
    return NULL;
  return (guint8 *) message + field->offset;
}

#define STRING_FIELD(message, name)    ((char **) member (message, name, PROTOBUF_C_TYPE_STRING))
#define UINT32_FIELD(message, name)    ((uint32_t *) member (message, name, PROTOBUF_C_TYPE_UINT32))
#define TIMESTAMP_FIELD(message, name) \
  ((Google__Protobuf__Timestamp **) member (message, name, PROTOBUF_C_TYPE_MESSAGE))

static gboolean
decode_event_body (ShimwatchEvent               *event,
                   const Google__Protobuf__Any  *any,
                   GError                      **error)
{
  g_autoptr(GBytes) value = NULL;
  const ProtobufCMessageDescriptor *descriptor;
  const char *exec_id_field;
  ProtobufCMessage *message;
  const char *container_id = NULL;
  const char *exec_id = NULL;
  const char *bundle = NULL;
  char **string;
  uint32_t *number;
  Google__Protobuf__Timestamp **stamp;

  descriptor = descriptor_of (event->kind, &exec_id_field);
  if (descriptor == NULL)
    return TRUE;      /* an event we do not read: its envelope is all there is */
  value = g_bytes_new_static (any->value.data, any->value.len);
  message = shimwatch_wire_unpack_message (descriptor, value, error);
  if (message == NULL)
    return FALSE;

  if ((string = STRING_FIELD (message, "container_id")) != NULL)
    container_id = *string;
  if ((string = STRING_FIELD (message, exec_id_field)) != NULL)
    exec_id = *string;
  if ((string = STRING_FIELD (message, "bundle")) != NULL)
    bundle = *string;
  if ((number = UINT32_FIELD (message, "pid")) != NULL)
    event->pid = *number;
  if ((number = UINT32_FIELD (message, "exit_status")) != NULL)
    event->exit_status = *number;
  if ((stamp = TIMESTAMP_FIELD (message, "exited_at")) != NULL)
    event->exited_at = shimwatch_wire_timestamp_usec (*stamp);
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
  const ProtobufCMessageDescriptor *descriptor;
  const char *exec_id_field;
  g_autofree ProtobufCMessage *message = NULL;
  g_autoptr(GBytes) body = NULL;
  const char *type_url = event->type_url;
  char **string;
  uint32_t *number;
  Google__Protobuf__Timestamp **stamp;
  gsize length;

  descriptor = descriptor_of (event->kind, &exec_id_field);
  /* an event of another kind: its container id, as TaskOOM carries it */
  if (descriptor == NULL)
    descriptor = &containerd__events__task_oom__descriptor;
  message = g_malloc0 (descriptor->sizeof_message);
  descriptor->message_init (message);
  exited_at.seconds = event->exited_at / G_USEC_PER_SEC;
  exited_at.nanos = (event->exited_at % G_USEC_PER_SEC) * 1000;
  /* proto3 has no absent string: an unset one is "" */
  if ((string = STRING_FIELD (message, "container_id")) != NULL)
    *string = event->container_id ?: (char *) "";
  if ((string = STRING_FIELD (message, exec_id_field)) != NULL)
    *string = event->exec_id ?: (char *) "";
  if ((string = STRING_FIELD (message, "bundle")) != NULL)
    *string = event->bundle ?: (char *) "";
  if ((number = UINT32_FIELD (message, "pid")) != NULL)
    *number = event->pid;
  if ((number = UINT32_FIELD (message, "exit_status")) != NULL)
    *number = event->exit_status;
  if ((stamp = TIMESTAMP_FIELD (message, "exited_at")) != NULL)
    *stamp = &exited_at;
  body = shimwatch_wire_pack_message (message);

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
