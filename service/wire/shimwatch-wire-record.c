/* SPDX-License-Identifier: Apache-2.0
 *
 * wire: task records (JSON on disk)
 */
#define G_LOG_DOMAIN "ShimwatchWire"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "shimwatch-wire-private.h"

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
  /* the last mark of the task's marks file this record includes (shimwatch-marks.h) */
  INT ("marks_seq", record->marks_seq);
  /* read from records written before the marks file, whose last digit the ledger
   * flipped in place; written as "" and 0 since */
  STRING ("pending_signal", record->pending_signal);
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

  if (!shimwatch_wire_load_json (parser, data, length, &local_error))
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

  /* optional: records written before the marks file have no marks to look at */
  node = json_object_get_member (object, "marks_seq");
  if (node != NULL)
    {
      if (!record_member (object, "marks_seq", G_TYPE_INT64, &node, error))
        return NULL;
      if (json_node_get_int (node) < 0)
        {
          g_set_error_literal (error, SHIMWATCH_WIRE_ERROR, SHIMWATCH_WIRE_ERROR_INVALID,
                               "record field \"marks_seq\" must not be negative");
          return NULL;
        }
      record->marks_seq = (guint64) json_node_get_int (node);
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

