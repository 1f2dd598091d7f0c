/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl: the command line every command shares: the global options, each
 * command's parsing with them, and the usage error.
 */
#include "config.h"

#include <stdarg.h>
#include <glib/gi18n.h>

#include "shimwatchctl.h"

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

GOptionEntry *
ctl_global_options (Ctl *ctl)
{
  g_autoptr(GPtrArray) entries = g_ptr_array_new_with_free_func (g_free);

  add_global_entries (entries, ctl);
  return flatten_entries (entries);
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
