/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl: global options, the command table and the dispatch to one command.
 */
#include "config.h"

#include <locale.h>
#include <stdlib.h>
#include <glib/gi18n.h>

#include "shimwatchctl.h"

static const CtlCommand commands[] = {
  { "list", N_("[--all-namespaces | -n NS]"), N_("List supervised tasks"), ctl_cmd_list },
  { "status", N_("NS/ID"), N_("Show every property of a task"), ctl_cmd_status },
  { "monitor", N_("[NS/ID]"), N_("Print the service’s signals as they arrive"), ctl_cmd_monitor },
  { "run", N_("NS/ID BUNDLE"), N_("Create (and start) a task from an OCI bundle"), ctl_cmd_run },
  { "start", N_("NS/ID"), N_("Start a created task"), ctl_cmd_start },
  { "stop", N_("NS/ID"), N_("Stop a task: SIGTERM, then SIGKILL after a timeout"), ctl_cmd_stop },
  { "kill", N_("NS/ID"), N_("Send a signal to a task"), ctl_cmd_kill },
  { "pause", N_("NS/ID"), N_("Freeze every process of a task"), ctl_cmd_pause },
  { "resume", N_("NS/ID"), N_("Thaw a paused task"), ctl_cmd_resume },
  { "delete", N_("NS/ID"), N_("Delete a task that is not running"), ctl_cmd_delete },
  { "reap", N_("NS/ID"), N_("Kill a task’s shim and clean up everything it leaves"), ctl_cmd_reap },
  { "logs", N_("NS/ID"), N_("Print a task’s output"), ctl_cmd_logs },
  { "history", N_("[NS/ID]"), N_("Show recent lifecycle events"), ctl_cmd_history },
  { "label", N_("NS/ID KEY=VALUE… KEY-…"), N_("Set or remove labels of a task"), ctl_cmd_label },
  { "wait", N_("NS/ID"), N_("Wait until a task exits; exit with its exit status"),
    ctl_cmd_wait },
  { "version", "", N_("Show the client’s and the service’s version and counters"),
    ctl_cmd_version },
  { "help", N_("[COMMAND]"), N_("Show the commands, or one command’s options"), ctl_cmd_help },
  { "metrics", "", N_("Print the service’s metrics in the Prometheus text format"),
    ctl_cmd_metrics },
};

/* the main help, for "help" without a command */
static GOptionContext *main_context;

const CtlCommand *
ctl_lookup_command (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    if (g_str_equal (commands[i].name, name))
      return &commands[i];
  return NULL;
}

static void
add_global_entries (GPtrArray *entries,
                    Ctl       *ctl)
{
  const GOptionEntry global[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &ctl->json,
      N_("Print JSON (one document; one object per line for monitor and logs -f)"), NULL },
    { "system", 0, 0, G_OPTION_ARG_NONE, &ctl->system,
      N_("Talk to the service on the system bus (the default)"), NULL },
    { "session", 0, 0, G_OPTION_ARG_NONE, &ctl->session,
      N_("Talk to the service on the session bus (development)"), NULL },
    { "address", 0, 0, G_OPTION_ARG_STRING, &ctl->address,
      N_("Talk to the service on the message bus at ADDRESS"), N_("ADDRESS") },
    { "namespace", 'n', 0, G_OPTION_ARG_STRING, &ctl->namespace_,
      N_("The namespace of a bare ID, and the one list shows (default: “default”)"),
      N_("NS") },
    { "no-ask-password", 0, 0, G_OPTION_ARG_NONE, &ctl->no_ask_password,
      N_("Never let polkit ask for a password"), NULL },
    { "version", 0, 0, G_OPTION_ARG_NONE, &ctl->version,
      N_("Print the version and exit"), NULL },
  };

  for (guint i = 0; i < G_N_ELEMENTS (global); i++)
    g_ptr_array_add (entries, g_memdup2 (&global[i], sizeof global[i]));
}

static GOptionEntry *
flatten_entries (GPtrArray *entries)
{
  GOptionEntry *flat = g_new0 (GOptionEntry, entries->len + 1);

  for (guint i = 0; i < entries->len; i++)
    flat[i] = *(GOptionEntry *) g_ptr_array_index (entries, i);
  return flat;
}

int
ctl_usage_error (const CtlCommand *command,
                 const char       *format,
                 ...)
{
  g_autofree char *message = NULL;
  g_autofree char *escaped = NULL;
  va_list args;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  /* it may quote an argument, as typed or as a script made it */
  escaped = ctl_escape (message);
  g_free (message);
  message = g_steal_pointer (&escaped);
  if (command != NULL)
    {
      g_printerr ("%s %s: %s\n", g_get_prgname (), command->name, message);
      g_printerr (_("Run “%s %s --help” for its options.\n"), g_get_prgname (), command->name);
    }
  else
    {
      g_printerr ("%s: %s\n", g_get_prgname (), message);
      g_printerr (_("Run “%s --help” for the commands and options.\n"), g_get_prgname ());
    }
  return CTL_EXIT_USAGE;
}

gboolean
ctl_parse_command_line (Ctl                *ctl,
                        const CtlCommand   *command,
                        const GOptionEntry *entries,
                        const char         *description,
                        int                *argc,
                        char             ***argv,
                        int                 min_args,
                        int                 max_args,
                        int                *exit_code)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GPtrArray) all = g_ptr_array_new_with_free_func (g_free);
  g_autofree GOptionEntry *flat = NULL;
  g_autofree char *parameters = NULL;
  g_autoptr(GError) error = NULL;

  /* gettext ("") is the catalogue's header: a command without parameters has none */
  parameters = *command->parameters != '\0'
               ? g_strdup_printf ("%s %s", command->name, _(command->parameters))
               : g_strdup (command->name);
  context = g_option_context_new (parameters);
  g_option_context_set_translation_domain (context, GETTEXT_PACKAGE);
  g_option_context_set_summary (context, _(command->summary));
  if (description != NULL)
    g_option_context_set_description (context, description);
  for (guint i = 0; entries != NULL && entries[i].long_name != NULL; i++)
    g_ptr_array_add (all, g_memdup2 (&entries[i], sizeof entries[i]));
  add_global_entries (all, ctl);
  flat = flatten_entries (all);
  g_option_context_add_main_entries (context, flat, GETTEXT_PACKAGE);

  if (!g_option_context_parse (context, argc, argv, &error))
    {
      *exit_code = ctl_usage_error (command, "%s", error->message);
      return FALSE;
    }
  if (ctl->version)
    {
      g_print ("shimwatchctl %s\n", PACKAGE_VERSION);
      *exit_code = CTL_EXIT_OK;
      return FALSE;
    }
  if (ctl->address != NULL && ctl->session)
    {
      *exit_code = ctl_usage_error (command, _("--address and --session exclude each other"));
      return FALSE;
    }
  if (ctl->namespace_ != NULL && !ctl_valid_identifier (ctl->namespace_))
    {
      *exit_code = ctl_usage_error (command, _("“%s” is not a namespace name"), ctl->namespace_);
      return FALSE;
    }
  /* (*argv)[0] is the command */
  if (*argc - 1 < min_args)
    {
      *exit_code = ctl_usage_error (command, _("missing argument: %s"),
                                    _(command->parameters));
      return FALSE;
    }
  if (max_args >= 0 && *argc - 1 > max_args)
    {
      *exit_code = ctl_usage_error (command, _("unexpected argument “%s”"),
                                    (*argv)[max_args + 1]);
      return FALSE;
    }
  ctl_output_init (ctl);
  return TRUE;
}

int
ctl_cmd_help (Ctl   *ctl,
              int    argc,
              char **argv)
{
  const CtlCommand *command = ctl_lookup_command ("help");
  const CtlCommand *topic;
  char *help_argv[] = { NULL, (char *) "--help", NULL };
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 0, 1, &exit_code))
    return exit_code;
  if (argc < 2)
    {
      g_autofree char *text = g_option_context_get_help (main_context, TRUE, NULL);

      g_print ("%s", text);
      return CTL_EXIT_OK;
    }
  topic = ctl_lookup_command (argv[1]);
  if (topic == NULL)
    return ctl_usage_error (command, _("unknown command “%s”"), argv[1]);
  /* the very text of "COMMAND --help": the command's own option parser prints it */
  help_argv[0] = (char *) topic->name;
  return topic->func (ctl, 2, help_argv);
}

static char *
commands_description (void)
{
  GString *text = g_string_new (_("Commands:"));

  g_string_append_c (text, '\n');
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    g_string_append_printf (text, "  %-10s %s\n", commands[i].name, _(commands[i].summary));
  g_string_append_c (text, '\n');
  g_string_append (text, _("NS/ID names a task by its containerd namespace and id; a bare ID "
                           "means the namespace “default”."));
  g_string_append_c (text, '\n');
  g_string_append (text, _("Exit status: 0 success, 1 failure, 2 usage error, 3 no such task, "
                           "4 not authorized."));
  g_string_append_c (text, '\n');
  g_string_append (text, _("See shimwatchctl(1) for the JSON fields."));
  return g_string_free (text, FALSE);
}

int
main (int    argc,
      char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GPtrArray) entries = g_ptr_array_new_with_free_func (g_free);
  g_autofree GOptionEntry *flat = NULL;
  g_autofree char *description = NULL;
  g_autoptr(GError) error = NULL;
  const CtlCommand *command;
  char *default_argv[] = { (char *) "list", NULL };
  Ctl ctl = { 0 };
  int status;

  setlocale (LC_ALL, "");
  bindtextdomain (GETTEXT_PACKAGE, LOCALEDIR);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
  textdomain (GETTEXT_PACKAGE);
  g_set_prgname ("shimwatchctl");
  g_setenv ("GIO_USE_VFS", "local", TRUE);

  context = g_option_context_new (_("COMMAND [ARGUMENT…]"));
  g_option_context_set_translation_domain (context, GETTEXT_PACKAGE);
  g_option_context_set_summary (context, _("Control shimwatchd, the container shim supervisor."));
  description = commands_description ();
  g_option_context_set_description (context, description);
  /* options after the command belong to it (and it accepts the global ones too) */
  g_option_context_set_strict_posix (context, TRUE);
  add_global_entries (entries, &ctl);
  flat = flatten_entries (entries);
  g_option_context_add_main_entries (context, flat, GETTEXT_PACKAGE);
  main_context = context;
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return ctl_usage_error (NULL, "%s", error->message);
  if (ctl.version)
    {
      g_print ("shimwatchctl %s\n", PACKAGE_VERSION);
      return CTL_EXIT_OK;
    }

  if (argc < 2)
    {
      argc = 1;
      argv = default_argv;
    }
  else
    {
      argc--;
      argv++;
    }
  command = ctl_lookup_command (argv[0]);
  if (command == NULL)
    return ctl_usage_error (NULL, _("unknown command “%s”"), argv[0]);

  status = command->func (&ctl, argc, argv);
  g_clear_object (&ctl.connection);
  g_free (ctl.address);
  g_free (ctl.namespace_);
  return status;
}
