/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>
#include <json-glib/json-glib.h>

#include "any.pb-c.h"
#include "bootstrap.pb-c.h"
#include "envelope.pb-c.h"
#include "events.pb-c.h"
#include "forward.pb-c.h"
#include "runc_options.pb-c.h"
#include "shim.pb-c.h"
#include "ttrpc.pb-c.h"

#include "shimwatch-wire.h"

#define NAMESPACE_METADATA_KEY "containerd-namespace-ttrpc"
#define TYPE_URL_RUNC_OPTIONS  "containerd.runc.v1.Options"

G_DEFINE_QUARK (shimwatch-wire-error-quark, shimwatch_wire_error)

/* protobuf-c wants a non-NULL buffer even for zero-length input */
static const guint8 empty_buffer[1];

static const guint8 *
bytes_data (GBytes *bytes,
            gsize  *length)
{
  const guint8 *data;

  if (bytes == NULL)
    {
      *length = 0;
      return empty_buffer;
    }
  data = g_bytes_get_data (bytes, length);
  return data != NULL ? data : empty_buffer;
}

static GBytes *
pack_message (const ProtobufCMessage *message)
{
  gsize size = protobuf_c_message_get_packed_size (message);
  guint8 *buffer = g_malloc (MAX (size, 1));

  protobuf_c_message_pack (message, buffer);
  return g_bytes_new_take (buffer, size);
}

static ProtobufCMessage *
unpack_message (const ProtobufCMessageDescriptor *descriptor,
                GBytes                           *payload,
                GError                          **error)
{
  gsize length;
  const guint8 *data = bytes_data (payload, &length);
  ProtobufCMessage *message = protobuf_c_message_unpack (descriptor, NULL, length, data);

  if (message == NULL)
    g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                 "%zu bytes do not decode as %s", length, descriptor->name);
  return message;
}

/* proto3 strings are not checked for UTF-8 by protobuf-c; D-Bus strings must be valid */
static gboolean
check_utf8 (const char  *field,
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

static gint64
timestamp_usec (const Google__Protobuf__Timestamp *timestamp)
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
  request.payload.data = (guint8 *) bytes_data (payload, &length);
  request.payload.len = length;
  request.timeout_nano = timeout_nano;
  if (namespace_ != NULL)
    {
      kv.key = (char *) NAMESPACE_METADATA_KEY;
      kv.value = (char *) namespace_;
      request.metadata = metadata;
      request.n_metadata = 1;
    }
  return pack_message (&request.base);
}

ShimwatchTtrpcRequest *
shimwatch_wire_decode_request (const guint8  *data,
                               gsize          length,
                               GError       **error)
{
  Ttrpc__Request *request;
  ShimwatchTtrpcRequest *result;

  request = ttrpc__request__unpack (NULL, length, length > 0 ? data : empty_buffer);
  if (request == NULL)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "%zu bytes do not decode as a ttrpc Request", length);
      return NULL;
    }
  if (!check_utf8 ("service", request->service, error) ||
      !check_utf8 ("method", request->method, error))
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
  response.payload.data = (guint8 *) bytes_data (payload, &length);
  response.payload.len = length;
  return pack_message (&response.base);
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

  response = ttrpc__response__unpack (NULL, length, length > 0 ? data : empty_buffer);
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

void
shimwatch_bootstrap_free (ShimwatchBootstrap *bootstrap)
{
  if (bootstrap == NULL)
    return;
  g_free (bootstrap->address);
  g_free (bootstrap->protocol);
  g_free (bootstrap);
}

static gboolean
address_is_supported (const char  *address,
                      GError     **error)
{
  if (address == NULL || *address == '\0')
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "shim start printed no address");
      return FALSE;
    }
  if (!g_utf8_validate (address, -1, NULL) || strchr (address, '\n') != NULL)
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "shim start printed an address that is not one line of text");
      return FALSE;
    }
  if (g_str_has_prefix (address, "vsock://") || g_str_has_prefix (address, "hvsock://"))
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_UNSUPPORTED,
                   "shim address %s: only unix sockets are supported", address);
      return FALSE;
    }
  return TRUE;
}

static ShimwatchBootstrap *
bootstrap_new (int         version,
               const char *address,
               const char *protocol,
               GError    **error)
{
  ShimwatchBootstrap *bootstrap;

  if (!address_is_supported (address, error))
    return NULL;
  if (version < 2)
    version = 2;     /* containerd: version < 2 means the plain legacy format */
  if (version > 3)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_UNSUPPORTED,
                   "shim bootstrap version %d is not supported (2 and 3 are)", version);
      return NULL;
    }
  if (protocol != NULL && *protocol != '\0' && g_strcmp0 (protocol, "ttrpc") != 0)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_UNSUPPORTED,
                   "shim protocol \"%s\" is not supported (only ttrpc is)", protocol);
      return NULL;
    }

  bootstrap = g_new0 (ShimwatchBootstrap, 1);
  bootstrap->version = version;
  bootstrap->address = g_strdup (address);
  bootstrap->protocol = g_strdup ("ttrpc");
  return bootstrap;
}

/* -- JSON from others ------------------------------------------------------------------- */

gboolean
shimwatch_wire_json_check_depth (const char  *data,
                                 gsize        length,
                                 guint        max_depth,
                                 GError     **error)
{
  gboolean in_string = FALSE;
  guint depth = 0;

  /* json-glib recurses once per level on the caller's stack: bound it before parsing.
   * Brackets inside strings do not count; a backslash there escapes the next byte. */
  for (gsize i = 0; i < length; i++)
    {
      char c = data[i];

      if (in_string)
        {
          if (c == '\\')
            i++;
          else if (c == '"')
            in_string = FALSE;
          continue;
        }
      if (c == '"')
        in_string = TRUE;
      else if (c == '[' || c == '{')
        {
          if (++depth > max_depth)
            {
              g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "it nests arrays and objects deeper than %u levels", max_depth);
              return FALSE;
            }
        }
      else if ((c == ']' || c == '}') && depth > 0)
        depth--;
    }
  return TRUE;
}

/* Parses JSON that someone else wrote. An error says where the text is wrong, never what
 * it says there: the text may be a file the caller could not read (json-glib quotes the
 * offending token). */
static gboolean
load_json (JsonParser  *parser,
           const char  *data,
           gsize        length,
           GError     **error)
{
  g_autoptr(GError) local_error = NULL;
  guint line = 0;
  guint column = 0;
  const char *what;

  if (!shimwatch_wire_json_check_depth (data, length, SHIMWATCH_WIRE_JSON_MAX_DEPTH, error))
    return FALSE;
  if (json_parser_load_from_data (parser, data, (gssize) length, &local_error))
    return TRUE;
  if (local_error->domain != JSON_PARSER_ERROR ||
      sscanf (local_error->message, "<data>:%u:%u:", &line, &column) != 2)
    line = column = 0;
  switch (local_error->domain == JSON_PARSER_ERROR ? local_error->code : -1)
    {
    case JSON_PARSER_ERROR_TRAILING_COMMA:
      what = "a trailing comma";
      break;
    case JSON_PARSER_ERROR_MISSING_COMMA:
      what = "a missing comma";
      break;
    case JSON_PARSER_ERROR_MISSING_COLON:
      what = "a missing colon";
      break;
    case JSON_PARSER_ERROR_INVALID_BAREWORD:
      what = "a word that is not a JSON value";
      break;
    case JSON_PARSER_ERROR_EMPTY_MEMBER_NAME:
      what = "an empty member name";
      break;
    case JSON_PARSER_ERROR_INVALID_DATA:
      what = "invalid data";
      break;
    default:
      what = "a syntax error";
      break;
    }
  if (line > 0)
    g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                 "it is not valid JSON: %s at line %u, column %u", what, line, column);
  else
    g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                 "it is not valid JSON: %s", what);
  return FALSE;
}

static ShimwatchBootstrap *
parse_start_json (const char  *text,
                  GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) local_error = NULL;
  JsonObject *object;
  JsonNode *root;

  if (!load_json (parser, text, strlen (text), &local_error))
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "shim start printed broken JSON: %s", local_error->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "shim start printed JSON that is not an object");
      return NULL;
    }
  object = json_node_get_object (root);
  if (json_object_get_member (object, "address") == NULL ||
      json_node_get_value_type (json_object_get_member (object, "address")) != G_TYPE_STRING ||
      (json_object_has_member (object, "version") &&
       json_node_get_value_type (json_object_get_member (object, "version")) != G_TYPE_INT64) ||
      (json_object_has_member (object, "protocol") &&
       json_node_get_value_type (json_object_get_member (object, "protocol")) != G_TYPE_STRING))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "shim start JSON needs a string \"address\", and \"version\" "
                           "must be a number and \"protocol\" a string");
      return NULL;
    }
  return bootstrap_new ((int) CLAMP (json_object_get_int_member_with_default (object, "version", 2),
                                     G_MININT, G_MAXINT),
                        json_object_get_string_member (object, "address"),
                        json_object_get_string_member_with_default (object, "protocol", "ttrpc"),
                        error);
}

ShimwatchBootstrap *
shimwatch_wire_parse_start_output (GBytes  *output,
                                   GError **error)
{
  gsize length;
  const guint8 *data = bytes_data (output, &length);
  Containerd__Runtime__Bootstrap__V1__BootstrapResult *result;
  g_autofree char *text = NULL;
  ShimwatchBootstrap *bootstrap;

  if (length == 0)
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "shim start printed nothing");
      return NULL;
    }

  /* text forms first: a JSON object or an address; both are valid UTF-8 without NULs */
  if (memchr (data, '\0', length) == NULL && g_utf8_validate ((const char *) data, length, NULL))
    {
      text = g_strstrip (g_strndup ((const char *) data, length));
      if (text[0] == '{')
        return parse_start_json (text, error);
      if (g_str_has_prefix (text, "unix://") || g_str_has_prefix (text, "vsock://") ||
          g_str_has_prefix (text, "hvsock://") || text[0] == '/')
        return bootstrap_new (2, text, "ttrpc", error);
    }

  /* containerd 2.3+: protobuf BootstrapResult */
  result = containerd__runtime__bootstrap__v1__bootstrap_result__unpack (NULL, length, data);
  if (result == NULL || result->address == NULL || result->address[0] == '\0')
    {
      if (result != NULL)
        containerd__runtime__bootstrap__v1__bootstrap_result__free_unpacked (result, NULL);
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "shim start printed %zu bytes that are neither an address, "
                   "bootstrap JSON nor a BootstrapResult", length);
      return NULL;
    }
  bootstrap = bootstrap_new (result->has_version ? result->version : 2,
                             result->address, result->protocol, error);
  containerd__runtime__bootstrap__v1__bootstrap_result__free_unpacked (result, NULL);
  return bootstrap;
}

GBytes *
shimwatch_wire_encode_runc_options (const char *runc_root,
                                    gboolean    systemd_cgroup)
{
  Containerd__Runc__V1__Options options = CONTAINERD__RUNC__V1__OPTIONS__INIT;
  Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT;
  g_autoptr(GBytes) value = NULL;
  gsize length;

  if (runc_root != NULL)
    options.root = (char *) runc_root;
  options.systemd_cgroup = systemd_cgroup;
  value = pack_message (&options.base);
  any.type_url = (char *) TYPE_URL_RUNC_OPTIONS;
  any.value.data = (guint8 *) bytes_data (value, &length);
  any.value.len = length;
  return pack_message (&any.base);
}

char *
shimwatch_wire_oci_config_root_path (const char  *contents,
                                     gsize        length,
                                     GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) local_error = NULL;
  JsonNode *node;
  JsonNode *path_node = NULL;

  if (!load_json (parser, contents, length, &local_error))
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "config.json: %s", local_error->message);
      return NULL;
    }
  node = json_parser_get_root (parser);
  if (node != NULL && JSON_NODE_HOLDS_OBJECT (node))
    node = json_object_get_member (json_node_get_object (node), "root");
  else
    node = NULL;
  if (node != NULL && JSON_NODE_HOLDS_OBJECT (node))
    path_node = json_object_get_member (json_node_get_object (node), "path");
  if (path_node == NULL || !JSON_NODE_HOLDS_VALUE (path_node) ||
      json_node_get_value_type (path_node) != G_TYPE_STRING ||
      *json_node_get_string (path_node) == '\0')
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json has no string \"root.path\"");
      return NULL;
    }
  return g_strdup (json_node_get_string (path_node));
}

GStrv
shimwatch_wire_oci_process_args (const char  *contents,
                                 gsize        length,
                                 GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GPtrArray) args = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GError) local_error = NULL;
  JsonNode *node;
  JsonArray *array;

  if (!load_json (parser, contents, length, &local_error))
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "config.json: %s", local_error->message);
      return NULL;
    }
  node = json_parser_get_root (parser);
  if (node != NULL && JSON_NODE_HOLDS_OBJECT (node))
    node = json_object_get_member (json_node_get_object (node), "process");
  if (node != NULL && JSON_NODE_HOLDS_OBJECT (node))
    node = json_object_get_member (json_node_get_object (node), "args");
  else
    node = NULL;
  if (node != NULL && !JSON_NODE_HOLDS_NULL (node))
    {
      if (!JSON_NODE_HOLDS_ARRAY (node))
        {
          g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                               "config.json's \"process.args\" is not an array");
          return NULL;
        }
      array = json_node_get_array (node);
      for (guint i = 0; i < json_array_get_length (array); i++)
        {
          JsonNode *arg = json_array_get_element (array, i);

          if (!JSON_NODE_HOLDS_VALUE (arg) || json_node_get_value_type (arg) != G_TYPE_STRING)
            {
              g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                                   "config.json's \"process.args\" holds a non-string");
              return NULL;
            }
          g_ptr_array_add (args, g_strdup (json_node_get_string (arg)));
        }
    }
  g_ptr_array_add (args, NULL);
  return (GStrv) g_ptr_array_steal (args, NULL);
}

GBytes *
shimwatch_wire_rewrite_oci_config (const char  *contents,
                                   gsize        length,
                                   const char  *bundle_dir,
                                   const char  *default_cgroups_path,
                                   char       **cgroups_path,
                                   GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) generator = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autofree char *rootfs = NULL;
  JsonObject *config;
  JsonObject *root;
  JsonObject *linux_;
  JsonNode *node;
  JsonNode *path_node = NULL;
  const char *path;
  const char *given = NULL;
  char *text;
  gsize text_length;

  if (!load_json (parser, contents, length, &local_error))
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "config.json: %s", local_error->message);
      return NULL;
    }
  node = json_parser_get_root (parser);
  if (node == NULL || !JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json is not a JSON object");
      return NULL;
    }
  config = json_node_get_object (node);
  if (!json_object_has_member (config, "process") ||
      !JSON_NODE_HOLDS_OBJECT (json_object_get_member (config, "process")))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json has no \"process\" object");
      return NULL;
    }
  node = json_object_get_member (config, "root");
  if (node != NULL && JSON_NODE_HOLDS_OBJECT (node))
    path_node = json_object_get_member (json_node_get_object (node), "path");
  if (path_node == NULL || !JSON_NODE_HOLDS_VALUE (path_node) ||
      json_node_get_value_type (path_node) != G_TYPE_STRING)
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json has no string \"root.path\"");
      return NULL;
    }
  root = json_node_get_object (node);
  path = json_object_get_string_member (root, "path");
  if (*path == '\0')
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json has an empty \"root.path\"");
      return NULL;
    }
  rootfs = g_path_is_absolute (path) ? g_strdup (path)
                                     : g_build_filename (bundle_dir, path, NULL);
  json_object_set_string_member (root, "path", rootfs);

  /* every task in a cgroup of its own: the bundle's, or the one given (runc's default
   * would share /<id> between namespaces) */
  node = json_object_get_member (config, "linux");
  if (node != NULL && !JSON_NODE_HOLDS_OBJECT (node))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json has a \"linux\" member that is not an object");
      return NULL;
    }
  if (node == NULL)
    json_object_set_object_member (config, "linux", json_object_new ());
  linux_ = json_object_get_object_member (config, "linux");
  node = json_object_get_member (linux_, "cgroupsPath");
  if (node != NULL && !JSON_NODE_HOLDS_NULL (node) &&
      (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "config.json has a \"linux.cgroupsPath\" that is not a string");
      return NULL;
    }
  if (node != NULL && JSON_NODE_HOLDS_VALUE (node) && *json_node_get_string (node) != '\0')
    given = json_node_get_string (node);
  else if (default_cgroups_path != NULL)
    {
      json_object_set_string_member (linux_, "cgroupsPath", default_cgroups_path);
      given = default_cgroups_path;
    }
  if (cgroups_path != NULL)
    *cgroups_path = g_strdup (given);

  generator = json_generator_new ();
  json_generator_set_root (generator, json_parser_get_root (parser));
  text = json_generator_to_data (generator, &text_length);
  return g_bytes_new_take (text, text_length);
}

const char *
shimwatch_task_status_to_string (ShimwatchTaskStatus status)
{
  switch (status)
    {
    case SHIMWATCH_TASK_STATUS_CREATED:
      return "created";
    case SHIMWATCH_TASK_STATUS_RUNNING:
      return "running";
    case SHIMWATCH_TASK_STATUS_STOPPED:
      return "stopped";
    case SHIMWATCH_TASK_STATUS_PAUSED:
      return "paused";
    case SHIMWATCH_TASK_STATUS_PAUSING:
      return "pausing";
    case SHIMWATCH_TASK_STATUS_UNKNOWN:
    default:
      return "unknown";
    }
}

GBytes *
shimwatch_wire_encode_connect_request (const char *id)
{
  Containerd__Task__V2__ConnectRequest request = CONTAINERD__TASK__V2__CONNECT_REQUEST__INIT;

  request.id = (char *) id;
  return pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_pids_request (const char *id)
{
  Containerd__Task__V2__PidsRequest request = CONTAINERD__TASK__V2__PIDS_REQUEST__INIT;

  request.id = (char *) id;
  return pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_process_request (const char *id,
                                       const char *exec_id)
{
  /* State, Start, Delete and Wait requests share the layout {id = 1, exec_id = 2} */
  Containerd__Task__V2__StateRequest request = CONTAINERD__TASK__V2__STATE_REQUEST__INIT;

  request.id = (char *) id;
  if (exec_id != NULL)
    request.exec_id = (char *) exec_id;
  return pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_create_request (const ShimwatchCreateParams *params)
{
  Containerd__Task__V2__CreateTaskRequest request = CONTAINERD__TASK__V2__CREATE_TASK_REQUEST__INIT;
  Google__Protobuf__Any *options = NULL;
  g_autoptr(GBytes) options_bytes = NULL;
  g_autofree Containerd__Types__Mount *mounts = g_new0 (Containerd__Types__Mount, params->n_rootfs);
  g_autofree Containerd__Types__Mount **mount_ptrs = g_new0 (Containerd__Types__Mount *,
                                                            params->n_rootfs);
  GBytes *result;

  request.id = (char *) params->id;
  request.bundle = (char *) params->bundle;
  for (gsize i = 0; i < params->n_rootfs; i++)
    {
      const ShimwatchMount *m = &params->rootfs[i];

      containerd__types__mount__init (&mounts[i]);
      mounts[i].type = (char *) (m->type != NULL ? m->type : "");
      mounts[i].source = (char *) (m->source != NULL ? m->source : "");
      mounts[i].target = (char *) (m->target != NULL ? m->target : "");
      mounts[i].options = (char **) m->options;
      mounts[i].n_options = m->options != NULL ? g_strv_length ((char **) m->options) : 0;
      mount_ptrs[i] = &mounts[i];
    }
  request.rootfs = mount_ptrs;
  request.n_rootfs = params->n_rootfs;
  request.terminal = params->terminal;
  if (params->stdin_path != NULL)
    request.stdin = (char *) params->stdin_path;
  if (params->stdout_path != NULL)
    request.stdout = (char *) params->stdout_path;
  if (params->stderr_path != NULL)
    request.stderr = (char *) params->stderr_path;
  if (params->runc_root != NULL)
    {
      gsize length;
      const guint8 *data;

      options_bytes = shimwatch_wire_encode_runc_options (params->runc_root,
                                                          params->systemd_cgroup);
      data = bytes_data (options_bytes, &length);
      options = google__protobuf__any__unpack (NULL, length, data);
      request.options = options;
    }
  result = pack_message (&request.base);
  if (options != NULL)
    google__protobuf__any__free_unpacked (options, NULL);
  return result;
}

GBytes *
shimwatch_wire_encode_kill_request (const char *id,
                                    const char *exec_id,
                                    guint32     signal_number,
                                    gboolean    all)
{
  Containerd__Task__V2__KillRequest request = CONTAINERD__TASK__V2__KILL_REQUEST__INIT;

  request.id = (char *) id;
  if (exec_id != NULL)
    request.exec_id = (char *) exec_id;
  request.signal = signal_number;
  request.all = all;
  return pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_shutdown_request (const char *id,
                                        gboolean    now)
{
  Containerd__Task__V2__ShutdownRequest request = CONTAINERD__TASK__V2__SHUTDOWN_REQUEST__INIT;

  request.id = (char *) id;
  request.now = now;
  return pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_pause_request (const char *id)
{
  Containerd__Task__V2__PauseRequest request = CONTAINERD__TASK__V2__PAUSE_REQUEST__INIT;

  request.id = (char *) id;
  return pack_message (&request.base);
}

GBytes *
shimwatch_wire_encode_resume_request (const char *id)
{
  Containerd__Task__V2__ResumeRequest request = CONTAINERD__TASK__V2__RESUME_REQUEST__INIT;

  request.id = (char *) id;
  return pack_message (&request.base);
}

gboolean
shimwatch_wire_decode_connect_response (GBytes   *payload,
                                        guint32  *shim_pid,
                                        guint32  *task_pid,
                                        GError  **error)
{
  Containerd__Task__V2__ConnectResponse *response;

  response = (gpointer) unpack_message (&containerd__task__v2__connect_response__descriptor,
                                        payload, error);
  if (response == NULL)
    return FALSE;
  *shim_pid = response->shim_pid;
  *task_pid = response->task_pid;
  containerd__task__v2__connect_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_pid_response (GBytes   *payload,
                                    guint32  *pid,
                                    GError  **error)
{
  /* CreateTaskResponse and StartResponse are both {pid = 1} */
  Containerd__Task__V2__StartResponse *response;

  response = (gpointer) unpack_message (&containerd__task__v2__start_response__descriptor,
                                        payload, error);
  if (response == NULL)
    return FALSE;
  *pid = response->pid;
  containerd__task__v2__start_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_state_response (GBytes              *payload,
                                      ShimwatchTaskState  *state,
                                      GError             **error)
{
  Containerd__Task__V2__StateResponse *response;

  response = (gpointer) unpack_message (&containerd__task__v2__state_response__descriptor,
                                        payload, error);
  if (response == NULL)
    return FALSE;
  state->status = (int) response->status <= (int) SHIMWATCH_TASK_STATUS_PAUSING
                    ? (ShimwatchTaskStatus) response->status : SHIMWATCH_TASK_STATUS_UNKNOWN;
  state->pid = response->pid;
  state->exit_status = response->exit_status;
  state->exited_at = timestamp_usec (response->exited_at);
  containerd__task__v2__state_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_wait_response (GBytes         *payload,
                                     ShimwatchExit  *exit_info,
                                     GError        **error)
{
  Containerd__Task__V2__WaitResponse *response;

  response = (gpointer) unpack_message (&containerd__task__v2__wait_response__descriptor,
                                        payload, error);
  if (response == NULL)
    return FALSE;
  exit_info->pid = 0;
  exit_info->exit_status = response->exit_status;
  exit_info->exited_at = timestamp_usec (response->exited_at);
  containerd__task__v2__wait_response__free_unpacked (response, NULL);
  return TRUE;
}

gboolean
shimwatch_wire_decode_delete_response (GBytes         *payload,
                                       ShimwatchExit  *exit_info,
                                       GError        **error)
{
  Containerd__Task__V2__DeleteResponse *response;

  response = (gpointer) unpack_message (&containerd__task__v2__delete_response__descriptor,
                                        payload, error);
  if (response == NULL)
    return FALSE;
  exit_info->pid = response->pid;
  exit_info->exit_status = response->exit_status;
  exit_info->exited_at = timestamp_usec (response->exited_at);
  containerd__task__v2__delete_response__free_unpacked (response, NULL);
  return TRUE;
}

GArray *
shimwatch_wire_decode_pids_response (GBytes  *payload,
                                     GError **error)
{
  Containerd__Task__V2__PidsResponse *response;
  GArray *pids;

  response = (gpointer) unpack_message (&containerd__task__v2__pids_response__descriptor,
                                        payload, error);
  if (response == NULL)
    return NULL;
  pids = g_array_sized_new (FALSE, FALSE, sizeof (guint32), response->n_processes);
  for (gsize i = 0; i < response->n_processes; i++)
    g_array_append_val (pids, response->processes[i]->pid);
  containerd__task__v2__pids_response__free_unpacked (response, NULL);
  return pids;
}

gboolean
shimwatch_wire_decode_empty (GBytes  *payload,
                             GError **error)
{
  /* google.protobuf.Empty: anything that parses as a message (unknown fields) is fine */
  Containerd__Task__V2__PidsRequest *message;

  message = (gpointer) unpack_message (&containerd__task__v2__pids_request__descriptor,
                                       payload, error);
  if (message == NULL)
    return FALSE;
  containerd__task__v2__pids_request__free_unpacked (message, NULL);
  return TRUE;
}

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
          unpack_message (&containerd__events__task_create__descriptor, value, error));
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
          unpack_message (&containerd__events__task_start__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        event->pid = m->pid;
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXIT:
      {
        Containerd__Events__TaskExit *m = (gpointer) (message =
          unpack_message (&containerd__events__task_exit__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->id;
        event->pid = m->pid;
        event->exit_status = m->exit_status;
        event->exited_at = timestamp_usec (m->exited_at);
        break;
      }
    case SHIMWATCH_EVENT_TASK_DELETE:
      {
        Containerd__Events__TaskDelete *m = (gpointer) (message =
          unpack_message (&containerd__events__task_delete__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->id;
        event->pid = m->pid;
        event->exit_status = m->exit_status;
        event->exited_at = timestamp_usec (m->exited_at);
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXEC_ADDED:
      {
        Containerd__Events__TaskExecAdded *m = (gpointer) (message =
          unpack_message (&containerd__events__task_exec_added__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        exec_id = m->exec_id;
        break;
      }
    case SHIMWATCH_EVENT_TASK_EXEC_STARTED:
      {
        Containerd__Events__TaskExecStarted *m = (gpointer) (message =
          unpack_message (&containerd__events__task_exec_started__descriptor, value, error));
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
          unpack_message (&containerd__events__task_oom__descriptor, value, error));
        if (m == NULL)
          return FALSE;
        container_id = m->container_id;
        break;
      }
    case SHIMWATCH_EVENT_OTHER:
    default:
      return TRUE;
    }

  if (!check_utf8 ("container_id", container_id, error) ||
      !check_utf8 ("id", exec_id, error) ||
      !check_utf8 ("bundle", bundle, error))
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

  request = (gpointer) unpack_message (
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
  if (!check_utf8 ("namespace", envelope->namespace_, error) ||
      !check_utf8 ("topic", envelope->topic, error) ||
      !check_utf8 ("type_url", envelope->event->type_url, error))
    {
      containerd__services__events__ttrpc__v1__forward_request__free_unpacked (request, NULL);
      return NULL;
    }

  event = g_new0 (ShimwatchEvent, 1);
  event->namespace_ = g_strdup (envelope->namespace_);
  event->topic = g_strdup (envelope->topic);
  event->type_url = g_strdup (envelope->event->type_url);
  event->timestamp = timestamp_usec (envelope->timestamp);
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
        body = pack_message (&m.base);
        break;
      }
    case SHIMWATCH_EVENT_TASK_START:
      {
        Containerd__Events__TaskStart m = CONTAINERD__EVENTS__TASK_START__INIT;
        m.container_id = event->container_id ?: (char *) "";
        m.pid = event->pid;
        body = pack_message (&m.base);
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
        body = pack_message (&m.base);
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
        body = pack_message (&m.base);
        break;
      }
    default:
      {
        Containerd__Events__TaskOOM m = CONTAINERD__EVENTS__TASK_OOM__INIT;
        m.container_id = event->container_id ?: (char *) "";
        body = pack_message (&m.base);
        break;
      }
    }

  for (gsize i = 0; type_url == NULL && i < G_N_ELEMENTS (event_types); i++)
    if (event_types[i].kind == event->kind)
      type_url = event_types[i].type_url;

  timestamp.seconds = event->timestamp / G_USEC_PER_SEC;
  timestamp.nanos = (event->timestamp % G_USEC_PER_SEC) * 1000;
  any.type_url = (char *) (type_url ?: "");
  any.value.data = (guint8 *) bytes_data (body, &length);
  any.value.len = length;
  envelope.timestamp = &timestamp;
  envelope.namespace_ = event->namespace_ ?: (char *) "";
  envelope.topic = event->topic ?: (char *) "";
  envelope.event = &any;
  request.envelope = &envelope;
  return pack_message (&request.base);
}

void
shimwatch_record_free (ShimwatchRecord *record)
{
  if (record == NULL)
    return;
  g_free (record->namespace_);
  g_free (record->id);
  g_free (record->runtime);
  g_free (record->shim_binary);
  g_free (record->task_dir);
  g_free (record->address);
  g_free (record->status);
  g_free (record->pending_signal);
  g_free (record->cgroup_path);
  g_free (record->owner);
  g_free (record->bundle_source);
  g_strfreev (record->command);
  g_clear_pointer (&record->labels, g_variant_unref);
  g_free (record->exit_reason);
  g_free (record);
}

GBytes *
shimwatch_wire_encode_record (const ShimwatchRecord *record)
{
  g_autoptr(JsonBuilder) builder = json_builder_new ();
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  char *text;
  gsize length;

#define STRING(key, value) \
  (json_builder_set_member_name (builder, key), json_builder_add_string_value (builder, (value) != NULL ? (value) : ""))
#define INT(key, value) \
  (json_builder_set_member_name (builder, key), json_builder_add_int_value (builder, (gint64) (value)))
#define BOOL(key, value) \
  (json_builder_set_member_name (builder, key), json_builder_add_boolean_value (builder, value))

  json_builder_begin_object (builder);
  INT ("version", SHIMWATCH_RECORD_VERSION);
  STRING ("namespace", record->namespace_);
  STRING ("id", record->id);
  STRING ("runtime", record->runtime);
  STRING ("shim_binary", record->shim_binary);
  STRING ("task_dir", record->task_dir);
  STRING ("address", record->address);
  INT ("shim_pid", record->shim_pid);
  INT ("task_pid", record->task_pid);
  INT ("task_start_time", record->task_start_time);
  INT ("created_at", record->created_at);
  STRING ("status", record->status);
  STRING ("cgroup_path", record->cgroup_path);
  BOOL ("exit_known", record->exit_known);
  INT ("exit_pid", record->exit.pid);
  INT ("exit_status", record->exit.exit_status);
  INT ("exited_at", record->exit.exited_at);
  BOOL ("exit_emitted", record->exit_emitted);
  BOOL ("disconnected", record->disconnected);
  BOOL ("deleted", record->deleted);
  BOOL ("delete_emitted", record->delete_emitted);
  STRING ("owner", record->owner);
  STRING ("bundle_source", record->bundle_source);
  json_builder_set_member_name (builder, "command");
  json_builder_begin_array (builder);
  for (guint i = 0; record->command != NULL && record->command[i] != NULL; i++)
    json_builder_add_string_value (builder, record->command[i]);
  json_builder_end_array (builder);
  json_builder_set_member_name (builder, "labels");
  json_builder_begin_object (builder);
  if (record->labels != NULL)
    {
      GVariantIter iter;
      const char *key;
      const char *value;

      g_variant_iter_init (&iter, record->labels);
      while (g_variant_iter_next (&iter, "{&s&s}", &key, &value))
        {
          json_builder_set_member_name (builder, key);
          json_builder_add_string_value (builder, value);
        }
    }
  json_builder_end_object (builder);
  INT ("started_at", record->started_at);
  STRING ("exit_reason", record->exit_reason);
  BOOL ("oom", record->oom);
  STRING ("pending_signal", record->pending_signal);
  /* last, and a number: the ledger flips this one digit in place */
  INT ("pending_sent", record->pending_sent ? 1 : 0);
  json_builder_end_object (builder);
#undef STRING
#undef INT
#undef BOOL

  root = json_builder_get_root (builder);
  json_generator_set_root (generator, root);
  json_generator_set_pretty (generator, TRUE);
  text = json_generator_to_data (generator, &length);
  return g_bytes_new_take (text, length);
}

static gboolean
record_member (JsonObject  *object,
               const char  *key,
               GType        type,
               JsonNode   **node,
               GError     **error)
{
  *node = json_object_get_member (object, key);
  if (*node != NULL && JSON_NODE_HOLDS_VALUE (*node) && json_node_get_value_type (*node) == type)
    return TRUE;
  g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
               "record field \"%s\" is missing or not a %s", key,
               type == G_TYPE_STRING ? "string" : type == G_TYPE_BOOLEAN ? "boolean" : "number");
  return FALSE;
}

/* the optional members that describe the task (owner, bundle_source, command, labels,
 * started_at, exit_reason, oom): absent is empty, present must have the right type */
static gboolean
decode_record_description (JsonObject       *object,
                           ShimwatchRecord  *record,
                           GError          **error)
{
  static const struct { const char *key; gsize offset; } strings[] = {
    { "owner", G_STRUCT_OFFSET (ShimwatchRecord, owner) },
    { "bundle_source", G_STRUCT_OFFSET (ShimwatchRecord, bundle_source) },
    { "exit_reason", G_STRUCT_OFFSET (ShimwatchRecord, exit_reason) },
  };
  g_autoptr(GPtrArray) command = g_ptr_array_new_with_free_func (g_free);
  GVariantBuilder labels;
  JsonNode *node;

  for (guint i = 0; i < G_N_ELEMENTS (strings); i++)
    {
      if (json_object_has_member (object, strings[i].key))
        {
          if (!record_member (object, strings[i].key, G_TYPE_STRING, &node, error))
            return FALSE;
          G_STRUCT_MEMBER (char *, record, strings[i].offset) =
            g_utf8_make_valid (json_node_get_string (node), -1);
        }
      else
        G_STRUCT_MEMBER (char *, record, strings[i].offset) = g_strdup ("");
    }
  if (json_object_has_member (object, "started_at"))
    {
      if (!record_member (object, "started_at", G_TYPE_INT64, &node, error))
        return FALSE;
      record->started_at = MAX (json_node_get_int (node), 0);
    }
  if (json_object_has_member (object, "oom"))
    {
      if (!record_member (object, "oom", G_TYPE_BOOLEAN, &node, error))
        return FALSE;
      record->oom = json_node_get_boolean (node);
    }

  node = json_object_get_member (object, "command");
  if (node != NULL)
    {
      JsonArray *array = JSON_NODE_HOLDS_ARRAY (node) ? json_node_get_array (node) : NULL;

      for (guint i = 0; array != NULL && i < json_array_get_length (array); i++)
        {
          JsonNode *arg = json_array_get_element (array, i);

          if (!JSON_NODE_HOLDS_VALUE (arg) || json_node_get_value_type (arg) != G_TYPE_STRING)
            array = NULL;
          else
            g_ptr_array_add (command, g_utf8_make_valid (json_node_get_string (arg), -1));
        }
      if (array == NULL)
        {
          g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                               "record field \"command\" is not an array of strings");
          return FALSE;
        }
    }
  g_ptr_array_add (command, NULL);
  record->command = (GStrv) g_ptr_array_steal (command, NULL);

  g_variant_builder_init (&labels, G_VARIANT_TYPE ("a{ss}"));
  node = json_object_get_member (object, "labels");
  if (node != NULL)
    {
      JsonObject *map = JSON_NODE_HOLDS_OBJECT (node) ? json_node_get_object (node) : NULL;
      g_autoptr(GList) members = map != NULL ? json_object_get_members (map) : NULL;

      for (GList *l = members; map != NULL && l != NULL; l = l->next)
        {
          JsonNode *value = json_object_get_member (map, l->data);
          g_autofree char *key = g_utf8_make_valid (l->data, -1);
          g_autofree char *text = NULL;

          if (!JSON_NODE_HOLDS_VALUE (value) || json_node_get_value_type (value) != G_TYPE_STRING)
            {
              map = NULL;
              break;
            }
          text = g_utf8_make_valid (json_node_get_string (value), -1);
          g_variant_builder_add (&labels, "{ss}", key, text);
        }
      if (map == NULL)
        {
          g_variant_builder_clear (&labels);
          g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                               "record field \"labels\" is not an object of strings");
          return FALSE;
        }
    }
  record->labels = g_variant_ref_sink (g_variant_builder_end (&labels));
  return TRUE;
}

ShimwatchRecord *
shimwatch_wire_decode_record (const char  *data,
                              gsize        length,
                              GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(ShimwatchRecord) record = g_new0 (ShimwatchRecord, 1);
  g_autoptr(GError) local_error = NULL;
  JsonObject *object;
  JsonNode *root;
  JsonNode *node;
  static const struct { const char *key; gsize offset; } strings[] = {
    { "namespace", G_STRUCT_OFFSET (ShimwatchRecord, namespace_) },
    { "id", G_STRUCT_OFFSET (ShimwatchRecord, id) },
    { "runtime", G_STRUCT_OFFSET (ShimwatchRecord, runtime) },
    { "shim_binary", G_STRUCT_OFFSET (ShimwatchRecord, shim_binary) },
    { "task_dir", G_STRUCT_OFFSET (ShimwatchRecord, task_dir) },
    { "address", G_STRUCT_OFFSET (ShimwatchRecord, address) },
    { "status", G_STRUCT_OFFSET (ShimwatchRecord, status) },
  };
  static const struct { const char *key; gsize offset; } flags[] = {
    { "exit_known", G_STRUCT_OFFSET (ShimwatchRecord, exit_known) },
    { "exit_emitted", G_STRUCT_OFFSET (ShimwatchRecord, exit_emitted) },
    { "disconnected", G_STRUCT_OFFSET (ShimwatchRecord, disconnected) },
    { "deleted", G_STRUCT_OFFSET (ShimwatchRecord, deleted) },
    { "delete_emitted", G_STRUCT_OFFSET (ShimwatchRecord, delete_emitted) },
  };
  gint64 numbers[7];
  static const char *number_keys[] = { "version", "shim_pid", "task_pid", "task_start_time",
                                       "created_at", "exit_pid", "exit_status" };

  if (!load_json (parser, data, length, &local_error))
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                   "record: %s", local_error->message);
      return NULL;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "record is not a JSON object");
      return NULL;
    }
  object = json_node_get_object (root);

  for (guint i = 0; i < G_N_ELEMENTS (strings); i++)
    {
      if (!record_member (object, strings[i].key, G_TYPE_STRING, &node, error))
        return NULL;
      G_STRUCT_MEMBER (char *, record, strings[i].offset) = g_strdup (json_node_get_string (node));
    }
  for (guint i = 0; i < G_N_ELEMENTS (flags); i++)
    {
      if (!record_member (object, flags[i].key, G_TYPE_BOOLEAN, &node, error))
        return NULL;
      G_STRUCT_MEMBER (gboolean, record, flags[i].offset) = json_node_get_boolean (node);
    }
  for (guint i = 0; i < G_N_ELEMENTS (number_keys); i++)
    {
      if (!record_member (object, number_keys[i], G_TYPE_INT64, &node, error))
        return NULL;
      numbers[i] = json_node_get_int (node);
      if (numbers[i] < 0 || (i != 3 && i != 4 && numbers[i] > G_MAXUINT32))
        {
          g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                       "record field \"%s\" is out of range", number_keys[i]);
          return NULL;
        }
    }
  if (!record_member (object, "exited_at", G_TYPE_INT64, &node, error))
    return NULL;
  record->exit.exited_at = MAX (json_node_get_int (node), 0);

  if (numbers[0] != SHIMWATCH_RECORD_VERSION)
    {
      g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_UNSUPPORTED,
                   "record version %" G_GINT64_FORMAT " is not %d", numbers[0],
                   SHIMWATCH_RECORD_VERSION);
      return NULL;
    }
  record->shim_pid = (guint32) numbers[1];
  record->task_pid = (guint32) numbers[2];
  record->task_start_time = (guint64) numbers[3];
  record->created_at = numbers[4];
  record->exit.pid = (guint32) numbers[5];
  record->exit.exit_status = (guint32) numbers[6];

  /* optional: records of 0.1.0 before the ledger flipped marks have neither */
  node = json_object_get_member (object, "pending_signal");
  if (node != NULL)
    {
      static const char *signals[] = { "", "ShimDisconnected", "TaskExit", "TaskDelete", NULL };
      JsonNode *sent;

      if (!record_member (object, "pending_signal", G_TYPE_STRING, &node, error) ||
          !record_member (object, "pending_sent", G_TYPE_INT64, &sent, error))
        return NULL;
      if (!g_strv_contains (signals, json_node_get_string (node)) ||
          (json_node_get_int (sent) != 0 && json_node_get_int (sent) != 1))
        {
          g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                               "record fields \"pending_signal\" and \"pending_sent\" must "
                               "name a signal and be 0 or 1");
          return NULL;
        }
      if (json_node_get_string (node)[0] != '\0')
        record->pending_signal = g_strdup (json_node_get_string (node));
      record->pending_sent = json_node_get_int (sent) == 1;
    }

  /* optional: records written before tasks had cgroups of their own have none */
  node = json_object_get_member (object, "cgroup_path");
  if (node != NULL)
    {
      if (!record_member (object, "cgroup_path", G_TYPE_STRING, &node, error))
        return NULL;
      if (json_node_get_string (node)[0] != '\0')
        record->cgroup_path = g_strdup (json_node_get_string (node));
    }
  if (!decode_record_description (object, record, error))
    return NULL;

  /* what names files and processes must be as safe as what a D-Bus caller may send */
  if (!shimwatch_identifier_validate ("namespace", record->namespace_, error) ||
      !shimwatch_identifier_validate ("id", record->id, error))
    return NULL;
  if (!g_path_is_absolute (record->task_dir) ||
      (record->shim_binary[0] != '\0' && !g_path_is_absolute (record->shim_binary)))
    {
      g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "record paths must be absolute");
      return NULL;
    }
  return g_steal_pointer (&record);
}
