/* SPDX-License-Identifier: Apache-2.0
 *
 * wire: ttrpc frames, requests and responses, identifiers
 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shimwatch-wire-private.h"

G_DEFINE_QUARK (shimwatch-wire-error-quark, shimwatch_wire_error)

/* protobuf-c wants a non-NULL buffer even for zero-length input */
const guint8 shimwatch_wire_empty_buffer[1];

const guint8 *
shimwatch_wire_bytes_data (GBytes *bytes,
                           gsize  *length)
{
  const guint8 *data;

  if (bytes == NULL)
    {
      *length = 0;
      return shimwatch_wire_empty_buffer;
    }
  data = g_bytes_get_data (bytes, length);
  return data != NULL ? data : shimwatch_wire_empty_buffer;
}

GBytes *
shimwatch_wire_pack_message (const ProtobufCMessage *message)
{
  gsize size = protobuf_c_message_get_packed_size (message);
  guint8 *buffer = g_malloc (MAX (size, 1));

  protobuf_c_message_pack (message, buffer);
  return g_bytes_new_take (buffer, size);
}

ProtobufCMessage *
shimwatch_wire_unpack_message (const ProtobufCMessageDescriptor *descriptor,
                               GBytes                           *payload,
                               GError                          **error)
{
  gsize length;
  const guint8 *data = shimwatch_wire_bytes_data (payload, &length);
  ProtobufCMessage *message = protobuf_c_message_unpack (descriptor, NULL, length, data);

  if (message == NULL)
    g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                 "%zu bytes do not decode as %s", length, descriptor->name);
  return message;
}

/* proto3 strings are not checked for UTF-8 by protobuf-c; D-Bus strings must be valid */
gboolean
shimwatch_wire_check_utf8 (const char  *field,
                           const char  *value,
                           GError     **error)
{
  if (value == NULL || g_utf8_validate (value, -1, NULL))
    return TRUE;
  g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
               "field %s is not valid UTF-8", field);
  return FALSE;
}

void
shimwatch_wire_header_encode (const ShimwatchTtrpcHeader *header,
                              guint8                     *out)
{
  guint32 length = GUINT32_TO_BE (header->length);
  guint32 stream_id = GUINT32_TO_BE (header->stream_id);

  memcpy (out, &length, 4);
  memcpy (out + 4, &stream_id, 4);
  out[8] = header->type;
  out[9] = header->flags;
}

void
shimwatch_wire_header_decode (const guint8         *in,
                              ShimwatchTtrpcHeader *header)
{
  guint32 length;
  guint32 stream_id;

  memcpy (&length, in, 4);
  memcpy (&stream_id, in + 4, 4);
  header->length = GUINT32_FROM_BE (length);
  header->stream_id = GUINT32_FROM_BE (stream_id);
  header->type = in[8];
  header->flags = in[9];
}

gboolean
shimwatch_identifier_validate (const char  *what,
                               const char  *value,
                               GError     **error)
{
  gsize length;
  gboolean need_alnum = TRUE;

  if (value == NULL || *value == '\0')
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "%s must not be empty", what);
      return FALSE;
    }

  length = strlen (value);
  if (length > SHIMWATCH_IDENTIFIER_MAX_LENGTH)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "%s is %zu characters long, more than %d", what, length,
                   SHIMWATCH_IDENTIFIER_MAX_LENGTH);
      return FALSE;
    }

  /* ^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$: a separator may only stand between alnum runs */
  for (const char *p = value; *p != '\0'; p++)
    {
      if (g_ascii_isalnum (*p))
        need_alnum = FALSE;
      else if ((*p == '.' || *p == '_' || *p == '-') && !need_alnum)
        need_alnum = TRUE;
      else
        goto invalid;
    }
  if (!need_alnum)
    return TRUE;

invalid:
  if (g_utf8_validate (value, -1, NULL))
    g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                 "%s \"%s\" is not a valid identifier: use letters and digits, "
                 "separated by single '.', '_' or '-'", what, value);
  else
    g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                 "%s is not a valid identifier", what);
  return FALSE;
}

gint64
shimwatch_wire_timestamp_to_usec (gint64 seconds,
                                  gint32 nanos)
{
  /* Go's zero time (year 1) and anything before the epoch mean "unset" */
  if (seconds <= 0 || seconds > G_MAXINT64 / G_USEC_PER_SEC - 1)
    return 0;
  if (nanos < 0 || nanos >= 1000000000)
    nanos = 0;
  return seconds * G_USEC_PER_SEC + nanos / 1000;
}

gint64
shimwatch_wire_timestamp_usec (const Google__Protobuf__Timestamp *timestamp)
{
  if (timestamp == NULL)
    return 0;
  return shimwatch_wire_timestamp_to_usec (timestamp->seconds, timestamp->nanos);
}

void
shimwatch_ttrpc_request_free (ShimwatchTtrpcRequest *request)
{
  if (request == NULL)
    return;
  g_free (request->service);
  g_free (request->method);
  g_clear_pointer (&request->payload, g_bytes_unref);
  g_free (request->namespace_);
  g_free (request);
}

GBytes *
shimwatch_wire_encode_request (const char *service,
                               const char *method,
                               GBytes     *payload,
                               gint64      timeout_nano,
                               const char *namespace_)
{
  Ttrpc__Request request = TTRPC__REQUEST__INIT;
  Ttrpc__KeyValue kv = TTRPC__KEY_VALUE__INIT;
  Ttrpc__KeyValue *metadata[1] = { &kv };
  gsize length;

  request.service = (char *) service;
  request.method = (char *) method;
  request.payload.data = (guint8 *) shimwatch_wire_bytes_data (payload, &length);
  request.payload.len = length;
  request.timeout_nano = timeout_nano;
  if (namespace_ != NULL)
    {
      kv.key = (char *) NAMESPACE_METADATA_KEY;
      kv.value = (char *) namespace_;
      request.metadata = metadata;
      request.n_metadata = 1;
    }
  return shimwatch_wire_pack_message (&request.base);
}

ShimwatchTtrpcRequest *
shimwatch_wire_decode_request (const guint8  *data,
                               gsize          length,
                               GError       **error)
{
  Ttrpc__Request *request;
  ShimwatchTtrpcRequest *result;

  request = ttrpc__request__unpack (NULL, length, length > 0 ? data : shimwatch_wire_empty_buffer);
  if (request == NULL)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "%zu bytes do not decode as a ttrpc Request", length);
      return NULL;
    }
  if (!shimwatch_wire_check_utf8 ("service", request->service, error) ||
      !shimwatch_wire_check_utf8 ("method", request->method, error))
    {
      ttrpc__request__free_unpacked (request, NULL);
      return NULL;
    }

  result = g_new0 (ShimwatchTtrpcRequest, 1);
  result->service = g_strdup (request->service);
  result->method = g_strdup (request->method);
  result->payload = g_bytes_new (request->payload.data, request->payload.len);
  result->timeout_nano = request->timeout_nano;
  for (gsize i = 0; i < request->n_metadata; i++)
    {
      const Ttrpc__KeyValue *kv = request->metadata[i];

      if (g_ascii_strcasecmp (kv->key, NAMESPACE_METADATA_KEY) == 0 &&
          g_utf8_validate (kv->value, -1, NULL))
        {
          g_free (result->namespace_);
          result->namespace_ = g_strdup (kv->value);
        }
    }
  ttrpc__request__free_unpacked (request, NULL);
  return result;
}

GBytes *
shimwatch_wire_encode_response (int         code,
                                const char *message,
                                GBytes     *payload)
{
  Ttrpc__Response response = TTRPC__RESPONSE__INIT;
  Google__Rpc__Status status = GOOGLE__RPC__STATUS__INIT;
  gsize length;

  if (code != SHIMWATCH_GRPC_OK)
    {
      status.code = code;
      status.message = (char *) (message != NULL ? message : "");
      response.status = &status;
    }
  response.payload.data = (guint8 *) shimwatch_wire_bytes_data (payload, &length);
  response.payload.len = length;
  return shimwatch_wire_pack_message (&response.base);
}

gboolean
shimwatch_wire_decode_response (const guint8  *data,
                                gsize          length,
                                int           *code,
                                char         **message,
                                GBytes       **payload,
                                GError       **error)
{
  Ttrpc__Response *response;

  response = ttrpc__response__unpack (NULL, length, length > 0 ? data : shimwatch_wire_empty_buffer);
  if (response == NULL)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "%zu bytes do not decode as a ttrpc Response", length);
      return FALSE;
    }

  *code = response->status != NULL ? response->status->code : SHIMWATCH_GRPC_OK;
  if (message != NULL)
    {
      const char *text = response->status != NULL ? response->status->message : "";

      *message = g_utf8_make_valid (text != NULL ? text : "", -1);
    }
  if (payload != NULL)
    *payload = g_bytes_new (response->payload.data, response->payload.len);
  ttrpc__response__free_unpacked (response, NULL);
  return TRUE;
}
