/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl metrics: the service's metrics (GetMetrics), in the Prometheus text
 * format, as node_exporter's textfile collector gets them.
 */
#include "config.h"

#include <glib/gi18n.h>

#include "shimwatchctl.h"

int
ctl_cmd_metrics (Ctl              *ctl,
                 const CtlCommand *command,
                 int               argc,
                 char            **argv)
{
  const GOptionEntry entries[] = { { NULL } };
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  const char *text;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 0, 0, &exit_code))
    return exit_code;
  if (!ctl_connect (ctl, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, CTL_MANAGER_PATH, CTL_MANAGER_IFACE, "GetMetrics", NULL, "(s)", FALSE,
                    NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "GetMetrics", _("cannot read the metrics"));
  g_variant_get (reply, "(&s)", &text);
  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "metrics");
      json_builder_add_string_value (builder, text);
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, TRUE);
      return CTL_EXIT_OK;
    }
  g_print ("%s", text);
  return CTL_EXIT_OK;
}
