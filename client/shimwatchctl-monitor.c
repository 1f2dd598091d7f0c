/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl monitor: one line per signal of the service as it arrives (objects added
 * and removed, property changes, the service coming and going), until interrupted.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <glib/gi18n.h>
#include <glib-unix.h>

#include "shimwatchctl.h"

/* argument names of the manager's signals (docs/dbus-api.xml and introspection/) */
static const struct {
  const char *signal;
  const char *args[8];
} signal_args[] = {
  { "ShimDisconnected", { "shim", "namespace", "id", "shim_pid" } },
  { "TaskExit", { "shim", "namespace", "container_id", "id", "pid", "exit_status", "exited_at" } },
  { "TaskDelete",
    { "shim", "namespace", "container_id", "id", "pid", "exit_status", "exited_at" } },
  { "TaskCreate", { "shim", "namespace", "container_id", "bundle", "pid" } },
  { "TaskStart", { "shim", "namespace", "container_id", "pid" } },
  { "TaskOOM", { "shim", "namespace", "container_id" } },
};

typedef struct {
  Ctl      *ctl;
  CtlFollow follow;
  char     *only;            /* "namespace/id" or NULL */
  char     *only_prefix;     /* "namespace/" (-n without a task) or NULL */
} Monitor;

static const char * const *
args_of (const char *signal)
{
  for (guint i = 0; i < G_N_ELEMENTS (signal_args); i++)
    if (g_str_equal (signal_args[i].signal, signal))
      return signal_args[i].args;
  return NULL;
}

/* the line: a list of (name, GVariant) pairs, printed as text or as one JSON object */
typedef struct {
  const char *name;
  GVariant   *value;
} Field;

static void
emit_line (Monitor    *monitor,
           const char *signal,
           const char *task,
           GArray     *fields)
{
  Ctl *ctl = monitor->ctl;
  gint64 now = g_get_real_time ();

  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "time");
      json_builder_add_int_value (builder, now);
      json_builder_set_member_name (builder, "signal");
      json_builder_add_string_value (builder, signal);
      for (guint i = 0; i < fields->len; i++)
        {
          Field *field = &g_array_index (fields, Field, i);

          json_builder_set_member_name (builder, field->name);
          json_builder_add_value (builder, ctl_json_from_variant (field->value));
        }
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, FALSE);
    }
  else
    {
      g_autoptr(GDateTime) time = g_date_time_new_from_unix_local (now / G_USEC_PER_SEC);
      g_autofree char *clock = g_date_time_format (time, "%H:%M:%S");
      GString *line = g_string_new (NULL);
      g_autofree char *text = NULL;

      g_autofree char *shown_task = ctl_escape (task != NULL ? task : "-");

      g_string_append_printf (line, "%s.%03d  %s%-18s%s %s", clock,
                              (int) (now % G_USEC_PER_SEC / 1000), ctl_color (ctl, "\033[1m"),
                              signal, ctl_color (ctl, NULL), shown_task);
      for (guint i = 0; i < fields->len; i++)
        {
          Field *field = &g_array_index (fields, Field, i);
          g_autofree char *value = NULL;

          if (g_str_equal (field->name, "object_path") || g_str_equal (field->name, "namespace") ||
              g_str_equal (field->name, "id"))
            continue;
          if (g_variant_is_of_type (field->value, G_VARIANT_TYPE_STRING))
            value = ctl_escape (g_variant_get_string (field->value, NULL));
          else
            value = g_variant_print (field->value, FALSE);
          g_string_append_printf (line, " %s=%s", field->name, value);
        }
      text = g_string_free (line, FALSE);
      g_print ("%s\n", text);
      fflush (stdout);
    }
  for (guint i = 0; i < fields->len; i++)
    g_variant_unref (g_array_index (fields, Field, i).value);
}

static void
add_field (GArray     *fields,
           const char *name,
           GVariant   *value)
{
  Field field = { name, g_variant_ref_sink (value) };

  g_array_append_val (fields, field);
}

static gboolean
wanted (Monitor    *monitor,
        const char *task)
{
  if (monitor->only_prefix != NULL)
    return task != NULL && g_str_has_prefix (task, monitor->only_prefix);
  return monitor->only == NULL || g_strcmp0 (monitor->only, task) == 0;
}

static void
manager_signal (Monitor    *monitor,
                const char *signal,
                GVariant   *parameters)
{
  g_autoptr(GArray) fields = g_array_new (FALSE, FALSE, sizeof (Field));
  const char * const *names = args_of (signal);
  g_autofree char *task = NULL;
  const char *namespace_ = NULL;
  const char *id = NULL;
  gsize n = g_variant_n_children (parameters);

  if (names == NULL)
    {
      /* a signal of a newer service: its arguments in order */
      if (monitor->only != NULL || monitor->only_prefix != NULL)
        return;
      add_field (fields, "args", g_variant_ref (parameters));
      emit_line (monitor, signal, NULL, fields);
      return;
    }
  for (gsize i = 0; i < n && names[i] != NULL; i++)
    {
      g_autoptr(GVariant) value = g_variant_get_child_value (parameters, i);

      if (g_str_equal (names[i], "namespace"))
        namespace_ = g_variant_get_string (value, NULL);
      else if (g_str_equal (names[i], "id") ||
               (g_str_equal (names[i], "container_id") && id == NULL))
        id = g_variant_get_string (value, NULL);
    }
  if (namespace_ != NULL && id != NULL)
    task = g_strdup_printf ("%s/%s", namespace_, id);
  if (!wanted (monitor, task))
    return;
  for (gsize i = 0; i < n && names[i] != NULL; i++)
    add_field (fields, g_str_equal (names[i], "shim") ? "object_path" : names[i],
               g_variant_get_child_value (parameters, i));
  if (args_of (signal) != NULL && id != NULL &&
      g_strv_contains ((const char * const *) names, "container_id") &&
      !g_strv_contains ((const char * const *) names, "id"))
    add_field (fields, "id", g_variant_new_string (id));
  emit_line (monitor, signal, task, fields);
}

static void
object_signal (Monitor    *monitor,
               const char *path,
               const char *signal,
               GVariant   *parameters)
{
  g_autoptr(GArray) fields = g_array_new (FALSE, FALSE, sizeof (Field));
  g_autofree char *task = NULL;
  const char *object = path;

  if (g_str_equal (signal, "InterfacesAdded") || g_str_equal (signal, "InterfacesRemoved"))
    g_variant_get_child (parameters, 0, "&o", &object);
  task = ctl_task_name_from_path (object);
  if (!wanted (monitor, task))
    return;
  add_field (fields, "object_path", g_variant_new_object_path (object));
  if (task != NULL)
    {
      g_auto(GStrv) parts = g_strsplit (task, "/", 2);

      add_field (fields, "namespace", g_variant_new_string (parts[0]));
      add_field (fields, "id", g_variant_new_string (parts[1]));
    }
  if (g_str_equal (signal, "InterfacesAdded"))
    {
      g_autoptr(GVariant) interfaces = g_variant_get_child_value (parameters, 1);
      g_autoptr(GVariant) properties = g_variant_lookup_value (interfaces, CTL_SHIM_IFACE,
                                                               G_VARIANT_TYPE_VARDICT);

      if (properties != NULL)
        {
          const char *status = NULL;

          if (g_variant_lookup (properties, "Status", "&s", &status))
            add_field (fields, "status", g_variant_new_string (status));
        }
    }
  else if (g_str_equal (signal, "InterfacesRemoved"))
    {
      /* nothing more to say */
    }
  else if (g_str_equal (signal, "PropertiesChanged"))
    {
      g_autoptr(GVariant) changed = g_variant_get_child_value (parameters, 1);
      GVariantIter iter;
      const char *name;
      GVariant *value;

      /* the changed properties, by their snake_case names */
      g_variant_iter_init (&iter, changed);
      while (g_variant_iter_loop (&iter, "{&sv}", &name, &value))
        {
          char *member = ctl_snake_case (name);

          /* the name must outlive the line: keep it in the quark table */
          add_field (fields, g_intern_string (member), g_variant_ref (value));
          g_free (member);
        }
    }
  emit_line (monitor, signal, task, fields);
}

static void
service_signal_cb (GDBusConnection *connection,
                   const char      *sender,
                   const char      *path,
                   const char      *interface,
                   const char      *signal,
                   GVariant        *parameters,
                   gpointer         user_data)
{
  Monitor *monitor = user_data;

  if (g_str_equal (interface, CTL_MANAGER_IFACE))
    manager_signal (monitor, signal, parameters);
  else if (g_str_equal (interface, "org.freedesktop.DBus.ObjectManager") ||
           g_str_equal (interface, "org.freedesktop.DBus.Properties"))
    object_signal (monitor, path, signal, parameters);
}

static void
name_owner_changed_cb (GDBusConnection *connection,
                       const char      *sender,
                       const char      *path,
                       const char      *interface,
                       const char      *signal,
                       GVariant        *parameters,
                       gpointer         user_data)
{
  Monitor *monitor = user_data;
  g_autoptr(GArray) fields = g_array_new (FALSE, FALSE, sizeof (Field));
  const char *name, *old_owner, *new_owner;

  g_variant_get (parameters, "(&s&s&s)", &name, &old_owner, &new_owner);
  add_field (fields, "owner", g_variant_new_string (new_owner));
  /* the service stopped, started or was replaced */
  emit_line (monitor, "NameOwnerChanged", NULL, fields);
}

static gboolean
quit_cb (gpointer user_data)
{
  Monitor *monitor = user_data;

  g_main_loop_quit (monitor->follow.loop);
  return G_SOURCE_REMOVE;
}

int
ctl_cmd_monitor (Ctl              *ctl,
                 const CtlCommand *command,
                 int               argc,
                 char            **argv)
{
  g_autofree char *namespace_ = NULL;
  g_autofree char *id = NULL;
  Monitor monitor = { ctl };
  guint service_sub;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 0, 1, &exit_code))
    return exit_code;
  if (argc == 2)
    {
      if (!ctl_parse_task (ctl, command, argv[1], &namespace_, &id, &exit_code))
        return exit_code;
      monitor.only = g_strdup_printf ("%s/%s", namespace_, id);
    }
  else if (ctl->namespace_ != NULL)
    monitor.only_prefix = g_strdup_printf ("%s/", ctl->namespace_);
  if (!ctl_connect (ctl, &exit_code))
    return exit_code;

  monitor.follow.loop = g_main_loop_new (NULL, FALSE);
  service_sub = g_dbus_connection_signal_subscribe (ctl->connection, CTL_BUS_NAME, NULL, NULL,
                                                    NULL, NULL, G_DBUS_SIGNAL_FLAGS_NONE,
                                                    service_signal_cb, &monitor, NULL);
  ctl_follow_start (&monitor.follow, ctl, name_owner_changed_cb, &monitor);
  g_unix_signal_add (SIGINT, quit_cb, &monitor);
  g_unix_signal_add (SIGTERM, quit_cb, &monitor);
  /* nothing is missed from the moment the line below is printed */
  ctl_follow_sync (&monitor.follow);
  if (monitor.only != NULL)
    g_printerr (_("Monitoring %s. Press Ctrl+C to stop.\n"), monitor.only);
  else if (ctl->namespace_ != NULL)
    g_printerr (_("Monitoring namespace %s. Press Ctrl+C to stop.\n"), ctl->namespace_);
  else
    g_printerr (_("Monitoring shimwatchd. Press Ctrl+C to stop.\n"));

  g_main_loop_run (monitor.follow.loop);

  g_dbus_connection_signal_unsubscribe (ctl->connection, service_sub);
  ctl_follow_end (&monitor.follow);
  g_main_loop_unref (monitor.follow.loop);
  g_free (monitor.only);
  g_free (monitor.only_prefix);
  return monitor.follow.exit_code;
}
