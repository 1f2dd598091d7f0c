/* SPDX-License-Identifier: Apache-2.0
 *
 * wire: JSON from others (depth limit, the OCI config)
 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shimwatch-wire-private.h"

/* -- JSON from others ------------------------------------------------------------------- */

static gint
json_hex4 (const char *data,
           gsize       length,
           gsize       at)
{
  gint value = 0;

  for (guint k = 0; k < 4; k++)
    {
      if (at + k >= length || !g_ascii_isxdigit (data[at + k]))
        return -1;
      value = value * 16 + g_ascii_xdigit_value (data[at + k]);
    }
  return value;
}

/* What json-glib's scanner would take but RFC 8259 forbids in a string: a raw control
 * character, or an escape other than \" \\ \/ \b \f \n \r \t and \uXXXX. Also refused: a
 * \uXXXX that is half of a surrogate pair alone, and \u0000, which no C string holds.
 * json-glib reads "\2" as a raw byte and a lone surrogate as invalid UTF-8: what such a
 * text decodes to would not survive being written back. */
static gboolean
json_string_byte_is_invalid (const char *data,
                             gsize       length,
                             gsize      *i)
{
  guchar c = (guchar) data[*i];
  gint unit, low;

  if (c < 0x20)
    return TRUE;
  if (c != '\\')
    return FALSE;
  if (++*i >= length)
    return TRUE;
  switch (data[*i])
    {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
      return FALSE;
    case 'u':
      unit = json_hex4 (data, length, *i + 1);
      if (unit <= 0 || (unit >= 0xdc00 && unit <= 0xdfff))
        return TRUE;
      *i += 4;
      if (unit < 0xd800 || unit > 0xdbff)
        return FALSE;
      /* a high surrogate: its low half must follow at once */
      if (*i + 2 >= length || data[*i + 1] != '\\' || data[*i + 2] != 'u')
        return TRUE;
      low = json_hex4 (data, length, *i + 3);
      if (low < 0xdc00 || low > 0xdfff)
        return TRUE;
      *i += 6;
      return FALSE;
    default:
      return TRUE;
    }
}

gboolean
shimwatch_wire_json_check (const char  *data,
                           gsize        length,
                           guint        max_depth,
                           GError     **error)
{
  gboolean in_string = FALSE;
  guint depth = 0;

  /* json-glib recurses once per level on the caller's stack: bound it before parsing.
   * Brackets inside strings do not count. Strings are held to RFC 8259 here, because
   * json-glib's scanner is lenient about escapes and control characters. */
  for (gsize i = 0; i < length; i++)
    {
      char c = data[i];

      if (in_string)
        {
          if (c == '"')
            in_string = FALSE;
          else if (json_string_byte_is_invalid (data, length, &i))
            {
              g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                           "it is not valid JSON: a control character or a bad escape in "
                           "a string at byte %" G_GSIZE_FORMAT, i);
              return FALSE;
            }
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
gboolean
shimwatch_wire_load_json (JsonParser  *parser,
                          const char  *data,
                          gsize        length,
                          GError     **error)
{
  g_autoptr(GError) local_error = NULL;
  guint line = 0;
  guint column = 0;
  const char *what;

  if (!shimwatch_wire_json_check (data, length, SHIMWATCH_WIRE_JSON_MAX_DEPTH, error))
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

/* config.json is JSON within the limits of shimwatch_wire_load_json(); its root is then
 * the parser's */
static gboolean
load_oci_config (JsonParser  *parser,
                 const char  *contents,
                 gsize        length,
                 GError     **error)
{
  g_autoptr(GError) local_error = NULL;

  if (shimwatch_wire_load_json (parser, contents, length, &local_error))
    return TRUE;
  g_set_error (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID, "config.json: %s",
               local_error->message);
  return FALSE;
}

char *
shimwatch_wire_oci_config_root_path (const char  *contents,
                                     gsize        length,
                                     GError     **error)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  JsonNode *node;
  JsonNode *path_node = NULL;

  if (!load_oci_config (parser, contents, length, error))
    return NULL;
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
  JsonNode *node;
  JsonArray *array;
  gsize bytes = 0;
  guint kept = 0;
  guint n_cut = 0;
  gboolean cut_one = FALSE;

  if (!load_oci_config (parser, contents, length, error))
    return NULL;
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
          if (kept < SHIMWATCH_COMMAND_MAX_ARGS && bytes < SHIMWATCH_COMMAND_MAX_BYTES)
            {
              const char *text = json_node_get_string (arg);
              gsize len = strlen (text);
              gsize room = SHIMWATCH_COMMAND_MAX_BYTES - bytes;

              if (len + 1 > room)
                {
                  /* the argument that does not fit: what fits of it, whole characters */
                  gsize keep = room > sizeof "…" ? room - sizeof "…" : 0;

                  while (keep > 0 && ((guchar) text[keep] & 0xc0) == 0x80)
                    keep--;
                  g_ptr_array_add (args, g_strdup_printf ("%.*s…", (int) keep, text));
                  bytes = SHIMWATCH_COMMAND_MAX_BYTES;
                  cut_one = TRUE;
                }
              else
                {
                  g_ptr_array_add (args, g_strdup (text));
                  bytes += len + 1;
                }
              kept++;
            }
          else
            n_cut++;
        }
    }
  if (n_cut > 0 || cut_one)
    g_ptr_array_add (args, g_strdup_printf (SHIMWATCH_COMMAND_CUT_FORMAT, n_cut));
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

  if (!load_oci_config (parser, contents, length, error))
    return NULL;
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
