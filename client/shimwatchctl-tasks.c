/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl's task commands: list, status, run and the lifecycle calls (start, stop,
 * kill, pause, resume, delete, reap).
 */
#include "config.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <glib/gi18n.h>

#include "shimwatchctl.h"

/* --- common parts -------------------------------------------------------------------- */

typedef struct {
  char *namespace_;
  char *id;
  char *name;         /* "namespace/id" */
  char *path;         /* the Shim object, once looked up */
} Task;

static void
task_clear (Task *task)
{
  g_free (task->namespace_);
  g_free (task->id);
  g_free (task->name);
  g_free (task->path);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Task, task_clear)

/* parse NS/ID, connect, and (with lookup) find the task's object */
static gboolean
task_prepare (Ctl              *ctl,
              const CtlCommand *command,
              const char       *arg,
              gboolean          lookup,
              Task             *task,
              int              *exit_code)
{
  if (!ctl_parse_task (ctl, command, arg, &task->namespace_, &task->id, exit_code))
    return FALSE;
  task->name = g_strdup_printf ("%s/%s", task->namespace_, task->id);
  if (!ctl_connect (ctl, exit_code))
    return FALSE;
  if (lookup)
    {
      task->path = ctl_get_shim_path (ctl, task->namespace_, task->id, exit_code);
      if (task->path == NULL)
        return FALSE;
    }
  return TRUE;
}

static JsonBuilder *
task_json_begin (const Task *task)
{
  JsonBuilder *builder = json_builder_new ();

  json_builder_begin_object (builder);
  json_builder_set_member_name (builder, "namespace");
  json_builder_add_string_value (builder, task->namespace_);
  json_builder_set_member_name (builder, "id");
  json_builder_add_string_value (builder, task->id);
  return builder;
}

static void
task_json_end (JsonBuilder *builder)
{
  g_autoptr(JsonNode) root = NULL;

  json_builder_end_object (builder);
  root = json_builder_get_root (builder);
  ctl_print_json (root, TRUE);
}

/* --json for a call that ended @task: its exit status, and when it exited if the call
 * says (@exited_at may be NULL) */
static void
task_json_exit (const Task    *task,
                guint32        status,
                const guint64 *exited_at)
{
  g_autoptr(JsonBuilder) builder = task_json_begin (task);

  json_builder_set_member_name (builder, "exit_status");
  json_builder_add_int_value (builder, status);
  if (exited_at != NULL)
    {
      guint64 when = *exited_at;

      json_builder_set_member_name (builder, "exited_at");
      json_builder_add_int_value (builder, (gint64) when);
    }
  task_json_end (builder);
}

/* every property of a Shim object, as a JSON object with snake_case members */
static void
add_properties_json (JsonBuilder *builder,
                     const char  *path,
                     GVariant    *properties)
{
  GVariantIter iter;
  const char *name;
  GVariant *value;

  json_builder_set_member_name (builder, "object_path");
  json_builder_add_string_value (builder, path);
  g_variant_iter_init (&iter, properties);
  while (g_variant_iter_loop (&iter, "{&sv}", &name, &value))
    {
      g_autofree char *member = ctl_snake_case (name);

      json_builder_set_member_name (builder, member);
      json_builder_add_value (builder, ctl_json_from_variant (value));
    }
}

static const char *
lookup_string (GVariant   *properties,
               const char *name)
{
  const char *value = NULL;

  if (!g_variant_lookup (properties, name, "&s", &value))
    return "";
  return value;
}

static guint64
lookup_uint (GVariant   *properties,
             const char *name)
{
  g_autoptr(GVariant) value = g_variant_lookup_value (properties, name, NULL);

  if (value == NULL)
    return 0;
  if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT32))
    return g_variant_get_uint32 (value);
  if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT64))
    return g_variant_get_uint64 (value);
  return 0;
}

static GVariant *
get_all_properties (Ctl        *ctl,
                    const char *path,
                    GError    **error)
{
  g_autoptr(GVariant) reply = NULL;
  GVariant *properties;

  reply = ctl_call (ctl, path, "org.freedesktop.DBus.Properties", "GetAll",
                    g_variant_new ("(s)", CTL_SHIM_IFACE), "(a{sv})", FALSE, NULL, error);
  if (reply == NULL)
    return NULL;
  g_variant_get (reply, "(@a{sv})", &properties);
  return properties;
}

/* --- list ---------------------------------------------------------------------------- */

typedef struct {
  const char *path;
  GVariant   *properties;   /* borrowed from the reply */
  const char *namespace_;
  const char *id;
} Row;

static int
compare_rows (gconstpointer a,
              gconstpointer b)
{
  const Row *x = a;
  const Row *y = b;
  int by_namespace = g_strcmp0 (x->namespace_, y->namespace_);

  return by_namespace != 0 ? by_namespace : g_strcmp0 (x->id, y->id);
}

int
ctl_cmd_list (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
  g_autofree char *namespace_ = NULL;
  gboolean all = FALSE;
  gboolean quiet = FALSE;
  /* -n NS is a global option: the namespace, for every command */
  const GOptionEntry entries[] = {
    { "all-namespaces", 'A', 0, G_OPTION_ARG_NONE, &all,
      N_("List the tasks of every namespace"), NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet,
      N_("Print only the task names (NS/ID), one per line"), NULL },
    { NULL }
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) objects = NULL;
  g_autoptr(GArray) rows = g_array_new (FALSE, TRUE, sizeof (Row));
  g_autoptr(JsonBuilder) builder = NULL;
  g_autoptr(CtlTable) table = NULL;
  gint64 now = g_get_real_time ();
  GVariantIter iter;
  const char *path;
  GVariant *interfaces;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 0, 0, &exit_code))
    return exit_code;
  namespace_ = g_strdup (ctl->namespace_);
  if (all && namespace_ != NULL)
    return ctl_usage_error (command, _("--all-namespaces and --namespace exclude each other"));
  if (namespace_ == NULL && !all)
    namespace_ = g_strdup (CTL_DEFAULT_NAMESPACE);
  if (!ctl_connect (ctl, &exit_code))
    return exit_code;

  reply = ctl_call (ctl, CTL_MANAGER_PATH, "org.freedesktop.DBus.ObjectManager",
                    "GetManagedObjects", NULL, "(a{oa{sa{sv}}})", FALSE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "GetManagedObjects", _("cannot list tasks"));
  objects = g_variant_get_child_value (reply, 0);
  g_variant_iter_init (&iter, objects);
  while (g_variant_iter_next (&iter, "{&o@a{sa{sv}}}", &path, &interfaces))
    {
      GVariant *properties = g_variant_lookup_value (interfaces, CTL_SHIM_IFACE,
                                                     G_VARIANT_TYPE_VARDICT);
      Row row = { path, properties, NULL, NULL };

      g_variant_unref (interfaces);
      if (properties == NULL)
        continue;
      row.namespace_ = lookup_string (properties, "Namespace");
      row.id = lookup_string (properties, "Id");
      if (namespace_ != NULL && !g_str_equal (row.namespace_, namespace_))
        {
          g_variant_unref (properties);
          continue;
        }
      g_array_append_val (rows, row);
    }
  g_array_sort (rows, compare_rows);

  if (ctl->json)
    {
      builder = json_builder_new ();
      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "tasks");
      json_builder_begin_array (builder);
      for (guint i = 0; i < rows->len; i++)
        {
          Row *row = &g_array_index (rows, Row, i);

          json_builder_begin_object (builder);
          add_properties_json (builder, row->path, row->properties);
          json_builder_end_object (builder);
        }
      json_builder_end_array (builder);
      json_builder_end_object (builder);
      {
        g_autoptr(JsonNode) root = json_builder_get_root (builder);

        ctl_print_json (root, TRUE);
      }
    }
  else if (quiet)
    {
      for (guint i = 0; i < rows->len; i++)
        {
          Row *row = &g_array_index (rows, Row, i);
          g_autofree char *name = g_strdup_printf ("%s/%s", row->namespace_, row->id);
          g_autofree char *shown = ctl_escape (name);

          g_print ("%s\n", shown);
        }
    }
  else if (rows->len == 0)
    {
      if (namespace_ != NULL)
        g_print (_("No tasks in namespace “%s”.\n"), namespace_);
      else
        g_print (_("No tasks.\n"));
    }
  else
    {
      table = ctl_table_new (ctl);
      /* priority: which columns stay when the terminal is narrow (0 = always) */
      ctl_table_add_column (table, _("NAMESPACE"), 0, TRUE, FALSE);
      ctl_table_add_column (table, _("ID"), 0, TRUE, FALSE);
      ctl_table_add_column (table, _("STATUS"), 0, FALSE, FALSE);
      ctl_table_add_column (table, _("PID"), 1, FALSE, TRUE);
      ctl_table_add_column (table, _("SHIM PID"), 4, FALSE, TRUE);
      ctl_table_add_column (table, _("RUNTIME"), 5, TRUE, FALSE);
      ctl_table_add_column (table, _("AGE"), 2, FALSE, TRUE);
      ctl_table_add_column (table, _("OWNER"), 3, FALSE, FALSE);
      for (guint i = 0; i < rows->len; i++)
        {
          Row *row = &g_array_index (rows, Row, i);
          const char *status = lookup_string (row->properties, "Status");
          const char *owner = lookup_string (row->properties, "Owner");
          g_autofree char *pid = g_strdup_printf ("%" G_GUINT64_FORMAT,
                                                  lookup_uint (row->properties, "TaskPid"));
          g_autofree char *shim_pid = g_strdup_printf ("%" G_GUINT64_FORMAT,
                                                       lookup_uint (row->properties, "ShimPid"));
          g_autofree char *age = ctl_format_age (lookup_uint (row->properties, "CreatedAt"),
                                                 now);

          ctl_table_add_row (table, row->namespace_, row->id, status, pid, shim_pid,
                             lookup_string (row->properties, "Runtime"), age,
                             *owner != '\0' ? owner : "-", NULL);
          ctl_table_set_cell_color (table, 2, ctl_status_color (ctl, status));
        }
      ctl_table_print (table);
    }
  for (guint i = 0; i < rows->len; i++)
    g_variant_unref (g_array_index (rows, Row, i).properties);
  return CTL_EXIT_OK;
}

/* --- status -------------------------------------------------------------------------- */

typedef enum {
  SHOW_STRING,
  SHOW_PID,
  SHOW_TIME,
  SHOW_EXIT,
  SHOW_BOOL,
  SHOW_LIST,
  SHOW_MAP,
} ShowKind;

static const struct {
  const char *property;
  const char *label;
  ShowKind    kind;
} shown_properties[] = {
  { "Status", N_("Status"), SHOW_STRING },
  { "ExitStatus", N_("Exit status"), SHOW_EXIT },
  { "ExitReason", N_("Exit reason"), SHOW_STRING },
  { "Owner", N_("Owner"), SHOW_STRING },
  { "Runtime", N_("Runtime"), SHOW_STRING },
  { "TaskPid", N_("Task PID"), SHOW_PID },
  { "ShimPid", N_("Shim PID"), SHOW_PID },
  { "Command", N_("Command"), SHOW_LIST },
  { "Labels", N_("Labels"), SHOW_MAP },
  { "BundleSource", N_("Bundle"), SHOW_STRING },
  { "Bundle", N_("Task directory"), SHOW_STRING },
  { "Address", N_("Shim address"), SHOW_STRING },
  { "CgroupPath", N_("Cgroup"), SHOW_STRING },
  { "CreatedAt", N_("Created"), SHOW_TIME },
  { "StartedAt", N_("Started"), SHOW_TIME },
  { "ExitedAt", N_("Exited"), SHOW_TIME },
  { "Responsive", N_("Responsive"), SHOW_BOOL },
  /* shown in the title */
  { "Namespace", NULL, SHOW_STRING },
  { "Id", NULL, SHOW_STRING },
};

static char *
show_value (GVariant *value,
            ShowKind  kind,
            gint64    now)
{
  switch (kind)
    {
    case SHOW_STRING:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE_STRING))
        return g_strdup (*g_variant_get_string (value, NULL) != '\0'
                         ? g_variant_get_string (value, NULL) : "-");
      break;
    case SHOW_PID:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT32))
        return g_variant_get_uint32 (value) != 0
               ? g_strdup_printf ("%u", g_variant_get_uint32 (value)) : g_strdup ("-");
      break;
    case SHOW_EXIT:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT32))
        return ctl_format_exit_status (g_variant_get_uint32 (value));
      break;
    case SHOW_TIME:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT64))
        {
          guint64 usec = g_variant_get_uint64 (value);
          g_autofree char *when = ctl_format_time (usec);
          g_autofree char *age = NULL;

          if (usec == 0)
            return g_steal_pointer (&when);
          age = ctl_format_age (usec, now);
          /* TRANSLATORS: a time and how long ago it was, e.g. "… 21:50:01 UTC; 3m ago" */
          return g_strdup_printf (_("%s; %s ago"), when, age);
        }
      break;
    case SHOW_BOOL:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE_BOOLEAN))
        return g_strdup (g_variant_get_boolean (value) ? _("yes") : _("no"));
      break;
    case SHOW_LIST:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE_STRING_ARRAY))
        {
          g_autofree const char **items = g_variant_get_strv (value, NULL);
          g_autofree char *joined = g_strjoinv (" ", (char **) items);

          return g_strdup (*joined != '\0' ? joined : "-");
        }
      break;
    case SHOW_MAP:
      if (g_variant_is_of_type (value, G_VARIANT_TYPE ("a{ss}")))
        {
          GString *text = g_string_new (NULL);
          GVariantIter iter;
          const char *key;
          const char *item;

          g_variant_iter_init (&iter, value);
          while (g_variant_iter_next (&iter, "{&s&s}", &key, &item))
            g_string_append_printf (text, "%s%s=%s", text->len > 0 ? " " : "", key, item);
          if (text->len == 0)
            g_string_append_c (text, '-');
          return g_string_free (text, FALSE);
        }
      break;
    default:
      break;
    }
  return g_variant_print (value, FALSE);
}

static gboolean
is_shown_property (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (shown_properties); i++)
    if (g_str_equal (shown_properties[i].property, name))
      return TRUE;
  return FALSE;
}

int
ctl_cmd_status (Ctl              *ctl,
                const CtlCommand *command,
                int               argc,
                char            **argv)
{
  g_auto(Task) task = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) properties = NULL;
  g_autoptr(GVariant) stats_reply = NULL;
  g_autoptr(GVariant) stats = NULL;
  g_autoptr(GVariant) pids_reply = NULL;
  g_autoptr(GVariant) pids = NULL;
  gint64 now = g_get_real_time ();
  const char *status;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 1, 1, &exit_code) ||
      !task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  properties = get_all_properties (ctl, task.path, &error);
  if (properties == NULL)
    return ctl_fail (ctl, error, "GetAll", _("cannot read the properties of %s"), task.name);

  /* 1.1 additions: a service that lacks them, or a task that has no cgroup (any more),
   * still gets its properties shown */
  stats_reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "GetStats", NULL, "(a{sv})", FALSE,
                          NULL, NULL);
  if (stats_reply != NULL)
    stats = g_variant_get_child_value (stats_reply, 0);
  pids_reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "ListPids", NULL, "(au)", FALSE, NULL,
                         NULL);
  if (pids_reply != NULL)
    pids = g_variant_get_child_value (pids_reply, 0);

  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;

      json_builder_begin_object (builder);
      add_properties_json (builder, task.path, properties);
      if (stats != NULL)
        {
          json_builder_set_member_name (builder, "stats");
          json_builder_add_value (builder, ctl_json_from_variant (stats));
        }
      if (pids != NULL)
        {
          json_builder_set_member_name (builder, "pids");
          json_builder_add_value (builder, ctl_json_from_variant (pids));
        }
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, TRUE);
      return CTL_EXIT_OK;
    }

  status = lookup_string (properties, "Status");
  {
    const char *sgr = ctl_status_color (ctl, status);

    g_autofree char *shown = ctl_escape (status);

    g_print ("%s●%s %s - %s%s%s\n", sgr != NULL ? sgr : "", sgr != NULL ? ctl_color (ctl,
                                                                                     NULL) : "",
             task.name, sgr != NULL ? sgr : "", shown, sgr != NULL ? ctl_color (ctl, NULL) : "");
  }
  ctl_print_field (_("Object"), task.path);
  for (guint i = 0; i < G_N_ELEMENTS (shown_properties); i++)
    {
      g_autoptr(GVariant) value = NULL;
      g_autofree char *text = NULL;
      const char *name = shown_properties[i].property;

      if (shown_properties[i].label == NULL)
        continue;
      value = g_variant_lookup_value (properties, name, NULL);
      if (value == NULL)
        continue;
      /* an exit status or reason means nothing before the task exited */
      if ((g_str_equal (name, "ExitStatus") || g_str_equal (name, "ExitReason")) &&
          lookup_uint (properties, "ExitedAt") == 0)
        continue;
      text = show_value (value, shown_properties[i].kind, now);
      ctl_print_field (_(shown_properties[i].label), text);
    }
  {
    GVariantIter iter;
    const char *name;
    GVariant *value;

    /* properties of a newer service, shown as they come */
    g_variant_iter_init (&iter, properties);
    while (g_variant_iter_loop (&iter, "{&sv}", &name, &value))
      if (!is_shown_property (name))
        {
          /* a string as it is (escaped when printed), anything else in GVariant's notation */
          g_autofree char *text = g_variant_is_of_type (value, G_VARIANT_TYPE_STRING)
                                  ? g_variant_dup_string (value, NULL)
                                  : g_variant_print (value, FALSE);

          ctl_print_field (name, text);
        }
  }
  if (stats != NULL)
    {
      guint64 memory = 0, memory_max = 0, cpu = 0;
      guint32 tasks = 0;

      if (g_variant_lookup (stats, "memory_current", "t", &memory))
        {
          g_autofree char *current = ctl_format_bytes (memory);
          g_autofree char *limit = NULL;
          g_autofree char *text = NULL;

          if (g_variant_lookup (stats, "memory_max", "t", &memory_max) && memory_max != 0)
            {
              limit = ctl_format_bytes (memory_max);
              text = g_strdup_printf (_("%s (limit %s)"), current, limit);
            }
          ctl_print_field (_("Memory"), text != NULL ? text : current);
        }
      if (g_variant_lookup (stats, "cpu_usage_usec", "t", &cpu))
        {
          g_autofree char *text = g_strdup_printf (_("%.3f s"), cpu / 1e6);

          ctl_print_field (_("CPU time"), text);
        }
      if (g_variant_lookup (stats, "pids_current", "u", &tasks))
        {
          g_autofree char *text = g_strdup_printf ("%u", tasks);

          ctl_print_field (_("Processes"), text);
        }
    }
  if (pids != NULL && g_variant_n_children (pids) > 0)
    {
      GString *text = g_string_new (NULL);
      g_autofree char *joined = NULL;

      for (gsize i = 0; i < g_variant_n_children (pids); i++)
        {
          guint32 pid;

          g_variant_get_child (pids, i, "u", &pid);
          g_string_append_printf (text, "%s%u", i > 0 ? " " : "", pid);
        }
      joined = g_string_free (text, FALSE);
      ctl_print_field (_("PIDs"), joined);
    }
  return CTL_EXIT_OK;
}

/* --- run ----------------------------------------------------------------------------- */

static gboolean
parse_labels (const CtlCommand *command,
              char            **labels,
              GVariant        **out_labels,
              int              *exit_code)
{
  g_auto(GVariantBuilder) builder = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE ("a{ss}"));

  for (guint i = 0; labels != NULL && labels[i] != NULL; i++)
    {
      const char *equals = strchr (labels[i], '=');
      g_autofree char *key = NULL;

      if (equals == NULL || equals == labels[i])
        {
          *exit_code = ctl_usage_error (command, _("a label is KEY=VALUE, not “%s”"), labels[i]);
          return FALSE;
        }
      key = g_strndup (labels[i], equals - labels[i]);
      g_variant_builder_add (&builder, "{ss}", key, equals + 1);
    }
  *out_labels = g_variant_builder_end (&builder);
  return TRUE;
}

static char *
absolute_path (const char *path)
{
  return path != NULL ? g_canonicalize_filename (path, NULL) : NULL;
}

int
ctl_cmd_run (Ctl              *ctl,
             const CtlCommand *command,
             int               argc,
             char            **argv)
{
  g_autofree char *runtime = NULL;
  g_autofree char *stdin_path = NULL;
  g_autofree char *stdout_path = NULL;
  g_autofree char *stderr_path = NULL;
  g_auto(GStrv) labels = NULL;
  gboolean no_start = FALSE;
  gboolean terminal = FALSE;
  const GOptionEntry entries[] = {
    { "runtime", 0, 0, G_OPTION_ARG_STRING, &runtime,
      N_("Runtime name (default io.containerd.runc.v2)"), N_("NAME") },
    { "no-start", 0, 0, G_OPTION_ARG_NONE, &no_start,
      N_("Create the task but do not start it"), NULL },
    { "label", 'l', 0, G_OPTION_ARG_STRING_ARRAY, &labels,
      N_("Attach a label (repeat for more)"), N_("KEY=VALUE") },
    { "stdin", 0, 0, G_OPTION_ARG_FILENAME, &stdin_path,
      N_("The task’s standard input"), N_("FILE") },
    { "stdout", 0, 0, G_OPTION_ARG_FILENAME, &stdout_path,
      N_("The task’s standard output (default: the task log)"), N_("FILE") },
    { "stderr", 0, 0, G_OPTION_ARG_FILENAME, &stderr_path,
      N_("The task’s standard error (default: the task log)"), N_("FILE") },
    { "terminal", 't', 0, G_OPTION_ARG_NONE, &terminal,
      N_("Give the task a terminal"), NULL },
    { NULL }
  };
  g_auto(Task) task = { 0 };
  g_auto(GVariantBuilder) options = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE_VARDICT);
  g_autoptr(GVariant) labels_value = NULL;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) properties = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *bundle = NULL;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 2, 2, &exit_code))
    return exit_code;
  if (!parse_labels (command, labels, &labels_value, &exit_code))
    return exit_code;
  if (!task_prepare (ctl, command, argv[1], FALSE, &task, &exit_code))
    return exit_code;

  bundle = absolute_path (argv[2]);
  if (runtime != NULL)
    g_variant_builder_add (&options, "{sv}", "runtime", g_variant_new_string (runtime));
  if (no_start)
    g_variant_builder_add (&options, "{sv}", "start", g_variant_new_boolean (FALSE));
  if (g_variant_n_children (labels_value) > 0)
    g_variant_builder_add (&options, "{sv}", "labels", g_steal_pointer (&labels_value));
  if (terminal)
    g_variant_builder_add (&options, "{sv}", "terminal", g_variant_new_boolean (TRUE));
  {
    const char *names[] = { "stdin", "stdout", "stderr" };
    const char *paths[] = { stdin_path, stdout_path, stderr_path };

    for (guint i = 0; i < G_N_ELEMENTS (names); i++)
      if (paths[i] != NULL)
        {
          g_autofree char *absolute = absolute_path (paths[i]);

          g_variant_builder_add (&options, "{sv}", names[i], g_variant_new_string (absolute));
        }
  }

  reply = ctl_call (ctl, CTL_MANAGER_PATH, CTL_MANAGER_IFACE, "CreateTask",
                    g_variant_new ("(sssa{sv})", task.namespace_, task.id, bundle, &options),
                    "(o)", TRUE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "CreateTask", _("cannot create %s"), task.name);
  g_variant_get (reply, "(o)", &task.path);

  properties = get_all_properties (ctl, task.path, &error);
  if (properties == NULL)
    return ctl_fail (ctl, error, "GetAll", _("created %s, but cannot read its properties"),
                     task.name);
  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;

      json_builder_begin_object (builder);
      add_properties_json (builder, task.path, properties);
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, TRUE);
    }
  else if (no_start)
    g_print (_("Created %s (not started).\n"), task.name);
  else
    g_print (_("Created and started %s, pid %u.\n"), task.name,
             (guint) lookup_uint (properties, "TaskPid"));
  return CTL_EXIT_OK;
}

/* --- lifecycle ----------------------------------------------------------------------- */

int
ctl_cmd_start (Ctl              *ctl,
               const CtlCommand *command,
               int               argc,
               char            **argv)
{
  g_auto(Task) task = { 0 };
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  guint32 pid;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 1, 1, &exit_code) ||
      !task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "Start", NULL, "(u)", TRUE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "Start", _("cannot start %s"), task.name);
  g_variant_get (reply, "(u)", &pid);
  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = task_json_begin (&task);

      json_builder_set_member_name (builder, "pid");
      json_builder_add_int_value (builder, pid);
      task_json_end (builder);
    }
  else
    g_print (_("Started %s, pid %u.\n"), task.name, pid);
  return CTL_EXIT_OK;
}

int
ctl_cmd_stop (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
  int timeout = 0;
  const GOptionEntry entries[] = {
    { "timeout", 0, 0, G_OPTION_ARG_INT, &timeout,
      N_("Seconds between SIGTERM and SIGKILL (default: the service’s, 10)"), N_("SECONDS") },
    { NULL }
  };
  g_auto(Task) task = { 0 };
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *status_text = NULL;
  guint32 status;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 1, 1, &exit_code))
    return exit_code;
  if (timeout < 0)
    return ctl_usage_error (command, _("--timeout must not be negative"));
  if (!task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "Stop", g_variant_new ("(u)",
                                                                           (guint32) timeout),
                    "(u)", TRUE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "Stop", _("cannot stop %s"), task.name);
  g_variant_get (reply, "(u)", &status);
  if (ctl->json)
    {
      task_json_exit (&task, status, NULL);
      return CTL_EXIT_OK;
    }
  status_text = ctl_format_exit_status (status);
  g_print (_("Stopped %s: exit status %s.\n"), task.name, status_text);
  return CTL_EXIT_OK;
}

static const struct {
  const char *name;
  int         number;
} signal_names[] = {
  { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT }, { "ILL", SIGILL },
  { "TRAP", SIGTRAP }, { "ABRT", SIGABRT }, { "BUS", SIGBUS }, { "FPE", SIGFPE },
  { "KILL", SIGKILL }, { "USR1", SIGUSR1 }, { "SEGV", SIGSEGV }, { "USR2", SIGUSR2 },
  { "PIPE", SIGPIPE }, { "ALRM", SIGALRM }, { "TERM", SIGTERM }, { "CHLD", SIGCHLD },
  { "CONT", SIGCONT }, { "STOP", SIGSTOP }, { "TSTP", SIGTSTP }, { "TTIN", SIGTTIN },
  { "TTOU", SIGTTOU }, { "URG", SIGURG }, { "XCPU", SIGXCPU }, { "XFSZ", SIGXFSZ },
  { "VTALRM", SIGVTALRM }, { "PROF", SIGPROF }, { "WINCH", SIGWINCH }, { "IO", SIGIO },
  { "PWR", SIGPWR }, { "SYS", SIGSYS },
};

/* "KILL", "SIGKILL", "kill" or "9" */
static int
parse_signal (const char *text)
{
  const char *name = text;
  guint64 number;

  if (g_ascii_string_to_unsigned (text, 10, 1, 64, &number, NULL))
    return (int) number;
  if (g_ascii_strncasecmp (name, "SIG", 3) == 0)
    name += 3;
  for (guint i = 0; i < G_N_ELEMENTS (signal_names); i++)
    if (g_ascii_strcasecmp (signal_names[i].name, name) == 0)
      return signal_names[i].number;
  return -1;
}

static const char *
signal_name (int number)
{
  for (guint i = 0; i < G_N_ELEMENTS (signal_names); i++)
    if (signal_names[i].number == number)
      return signal_names[i].name;
  return NULL;
}

int
ctl_cmd_kill (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
  g_autofree char *signal_text = NULL;
  gboolean all = FALSE;
  const GOptionEntry entries[] = {
    { "signal", 's', 0, G_OPTION_ARG_STRING, &signal_text,
      N_("The signal, by name or number (default TERM)"), N_("SIGNAL") },
    { "all", 'a', 0, G_OPTION_ARG_NONE, &all,
      N_("Signal every process of the task, not only its init"), NULL },
    { NULL }
  };
  g_auto(Task) task = { 0 };
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *shown = NULL;
  int number = SIGTERM;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 1, 1, &exit_code))
    return exit_code;
  if (signal_text != NULL && (number = parse_signal (signal_text)) < 0)
    return ctl_usage_error (command, _("unknown signal “%s”"), signal_text);
  if (!task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "Kill",
                    g_variant_new ("(ub)", (guint32) number, all), "()", TRUE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "Kill", _("cannot signal %s"), task.name);
  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = task_json_begin (&task);

      json_builder_set_member_name (builder, "signal");
      json_builder_add_int_value (builder, number);
      json_builder_set_member_name (builder, "all");
      json_builder_add_boolean_value (builder, all);
      task_json_end (builder);
      return CTL_EXIT_OK;
    }
  shown = signal_name (number) != NULL ? g_strconcat ("SIG", signal_name (number), NULL)
                                       : g_strdup_printf ("%d", number);
  if (all)
    g_print (_("Sent %s to every process of %s.\n"), shown, task.name);
  else
    g_print (_("Sent %s to %s.\n"), shown, task.name);
  return CTL_EXIT_OK;
}

static int
pause_or_resume (Ctl              *ctl,
                 const CtlCommand *command,
                 const char       *method,
                 int               argc,
                 char            **argv)
{
  g_auto(Task) task = { 0 };
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) properties = NULL;
  g_autoptr(GError) error = NULL;
  gboolean pausing = g_str_equal (method, "Pause");
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 1, 1, &exit_code) ||
      !task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, method, NULL, "()", TRUE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, method, pausing ? _("cannot pause %s") : _("cannot resume %s"),
                     task.name);
  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = task_json_begin (&task);

      properties = get_all_properties (ctl, task.path, NULL);
      json_builder_set_member_name (builder, "status");
      json_builder_add_string_value (builder, properties != NULL
                                              ? lookup_string (properties, "Status") : "");
      task_json_end (builder);
    }
  else if (pausing)
    g_print (_("Paused %s.\n"), task.name);
  else
    g_print (_("Resumed %s.\n"), task.name);
  return CTL_EXIT_OK;
}

int
ctl_cmd_pause (Ctl              *ctl,
               const CtlCommand *command,
               int               argc,
               char            **argv)
{
  return pause_or_resume (ctl, command, "Pause", argc, argv);
}

int
ctl_cmd_resume (Ctl              *ctl,
                const CtlCommand *command,
                int               argc,
                char            **argv)
{
  return pause_or_resume (ctl, command, "Resume", argc, argv);
}

int
ctl_cmd_delete (Ctl              *ctl,
                const CtlCommand *command,
                int               argc,
                char            **argv)
{
  g_auto(Task) task = { 0 };
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *status_text = NULL;
  guint32 status;
  guint64 exited_at;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 1, 1, &exit_code) ||
      !task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "Delete", NULL, "(ut)", TRUE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "Delete", _("cannot delete %s"), task.name);
  g_variant_get (reply, "(ut)", &status, &exited_at);
  if (ctl->json)
    {
      task_json_exit (&task, status, &exited_at);
      return CTL_EXIT_OK;
    }
  status_text = ctl_format_exit_status (status);
  g_print (_("Deleted %s: exit status %s.\n"), task.name, status_text);
  return CTL_EXIT_OK;
}

int
ctl_cmd_reap (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
  int timeout = 0;
  const GOptionEntry entries[] = {
    { "timeout", 0, 0, G_OPTION_ARG_INT, &timeout,
      N_("Seconds the cleanup command may take (default: the service’s CleanupTimeout)"),
      N_("SECONDS") },
    { NULL }
  };
  g_auto(Task) task = { 0 };
  g_auto(GVariantBuilder) options = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE_VARDICT);
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *status_text = NULL;
  guint32 status;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 1, 1, &exit_code))
    return exit_code;
  if (timeout < 0)
    return ctl_usage_error (command, _("--timeout must not be negative"));
  /* no lookup: Reap also cleans what is left on disk of a task nobody supervises */
  if (!task_prepare (ctl, command, argv[1], FALSE, &task, &exit_code))
    return exit_code;
  if (timeout > 0)
    g_variant_builder_add (&options, "{sv}", "timeout", g_variant_new_uint32 ((guint32) timeout));
  reply = ctl_call (ctl, CTL_MANAGER_PATH, CTL_MANAGER_IFACE, "Reap",
                    g_variant_new ("(ssa{sv})", task.namespace_, task.id, &options), "(u)", TRUE,
                    NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "Reap", _("cannot reap %s"), task.name);
  g_variant_get (reply, "(u)", &status);
  if (ctl->json)
    {
      task_json_exit (&task, status, NULL);
      return CTL_EXIT_OK;
    }
  status_text = ctl_format_exit_status (status);
  g_print (_("Reaped %s: exit status %s.\n"), task.name, status_text);
  return CTL_EXIT_OK;
}

/* --- label --------------------------------------------------------------------------- */

int
ctl_cmd_label (Ctl              *ctl,
               const CtlCommand *command,
               int               argc,
               char            **argv)
{
  g_auto(Task) task = { 0 };
  g_autoptr(GVariant) properties = NULL;
  g_autoptr(GVariant) current = NULL;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GHashTable) labels = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_autoptr(GError) error = NULL;
  g_auto(GVariantBuilder) builder = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE ("a{ss}"));
  g_autoptr(GList) keys = NULL;
  GVariantIter iter;
  const char *key;
  const char *value;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL,
                               _("KEY=VALUE sets a label, KEY- removes one; the other labels "
                                 "stay."),
                               &argc, &argv, 2, -1, &exit_code))
    return exit_code;
  /* every change is checked before anything is asked of the service */
  for (int i = 2; i < argc; i++)
    {
      const char *equals = strchr (argv[i], '=');

      if (equals == NULL && !(g_str_has_suffix (argv[i], "-") && argv[i][1] != '\0'))
        return ctl_usage_error (command, _("a label change is KEY=VALUE or KEY-, not “%s”"),
                                argv[i]);
      if (equals == argv[i])
        return ctl_usage_error (command, _("a label change is KEY=VALUE or KEY-, not “%s”"),
                                argv[i]);
    }
  if (!task_prepare (ctl, command, argv[1], TRUE, &task, &exit_code))
    return exit_code;
  properties = get_all_properties (ctl, task.path, &error);
  if (properties == NULL)
    return ctl_fail (ctl, error, "GetAll", _("cannot read the labels of %s"), task.name);
  current = g_variant_lookup_value (properties, "Labels", G_VARIANT_TYPE ("a{ss}"));
  if (current != NULL)
    {
      g_variant_iter_init (&iter, current);
      while (g_variant_iter_next (&iter, "{&s&s}", &key, &value))
        g_hash_table_insert (labels, g_strdup (key), g_strdup (value));
    }
  /* in the order given: "a=1 a-" leaves no a */
  for (int i = 2; i < argc; i++)
    {
      const char *equals = strchr (argv[i], '=');

      if (equals != NULL)
        g_hash_table_insert (labels, g_strndup (argv[i], equals - argv[i]),
                             g_strdup (equals + 1));
      else
        {
          g_autofree char *name = g_strndup (argv[i], strlen (argv[i]) - 1);

          g_hash_table_remove (labels, name);
        }
    }
  /* SetLabels replaces them all */
  keys = g_list_sort (g_hash_table_get_keys (labels), (GCompareFunc) strcmp);
  for (GList *l = keys; l != NULL; l = l->next)
    g_variant_builder_add (&builder, "{ss}", l->data, g_hash_table_lookup (labels, l->data));
  reply = ctl_call (ctl, task.path, CTL_SHIM_IFACE, "SetLabels",
                    g_variant_new ("(@a{ss})", g_variant_builder_end (&builder)), "()", TRUE,
                    NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "SetLabels", _("cannot set the labels of %s"), task.name);
  if (ctl->json)
    {
      g_autoptr(JsonBuilder) json = task_json_begin (&task);

      json_builder_set_member_name (json, "labels");
      json_builder_begin_object (json);
      for (GList *l = keys; l != NULL; l = l->next)
        {
          json_builder_set_member_name (json, l->data);
          json_builder_add_string_value (json, g_hash_table_lookup (labels, l->data));
        }
      json_builder_end_object (json);
      task_json_end (json);
    }
  else
    {
      GString *text = g_string_new (NULL);
      g_autofree char *joined = NULL;
      g_autofree char *shown = NULL;

      for (GList *l = keys; l != NULL; l = l->next)
        g_string_append_printf (text, "%s%s=%s", text->len > 0 ? " " : "", (char *) l->data,
                                (char *) g_hash_table_lookup (labels, l->data));
      joined = g_string_free (text, FALSE);
      shown = ctl_escape (joined);
      if (*shown != '\0')
        g_print (_("Labels of %s: %s\n"), task.name, shown);
      else
        g_print (_("%s has no labels.\n"), task.name);
    }
  return CTL_EXIT_OK;
}
