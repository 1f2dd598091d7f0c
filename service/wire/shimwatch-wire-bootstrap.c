/* SPDX-License-Identifier: Apache-2.0
 *
 * wire: what `<shim> start` prints
 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shimwatch-wire-private.h"

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

static ShimwatchBootstrap *
parse_start_json (const char  *text,
                  GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) local_error = NULL;
  JsonObject *object;
  JsonNode *root;

  if (!shimwatch_wire_load_json (parser, text, strlen (text), &local_error))
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
  const guint8 *data = shimwatch_wire_bytes_data (output, &length);
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
