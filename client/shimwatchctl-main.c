/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl: the command table, help, and the dispatch to one command.
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

static const CtlCommand *
lookup_command (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    if (g_str_equal (commands[i].name, name))
      return &commands[i];
  return NULL;
}

int
ctl_cmd_help (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
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
  topic = lookup_command (argv[1]);
  if (topic == NULL)
    return ctl_usage_error (command, _("unknown command “%s”"), argv[1]);
  /* the very text of "COMMAND --help": the command's own option parser prints it */
  help_argv[0] = (char *) topic->name;
  return topic->func (ctl, topic, 2, help_argv);
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
  flat = ctl_global_options (&ctl);
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
  command = lookup_command (argv[0]);
  if (command == NULL)
    return ctl_usage_error (NULL, _("unknown command “%s”"), argv[0]);

  status = command->func (&ctl, command, argc, argv);
  g_clear_object (&ctl.connection);
  g_free (ctl.address);
  g_free (ctl.namespace_);
  return status;
}
