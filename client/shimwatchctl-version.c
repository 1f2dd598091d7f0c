/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl version: the client's version, and the service's version, counters and
 * settings in force (every property of its Manager object).
 */
#include "config.h"

#include <glib/gi18n.h>

#include "shimwatchctl.h"

/* the Manager's properties shown by name (introspection/); the others as they come */
static const struct {
  const char *property;
  const char *label;
} shown_properties[] = {
  { "Version", N_("Service") },
  { "ShimCount", N_("Tasks") },
  { "DisconnectCount", N_("Disconnects") },
  { "ReapCount", N_("Cleanups") },
  { "CleanupFailureCount", N_("Failed cleanups") },
};

static char *
property_text (GVariant *value)
{
  if (g_variant_is_of_type (value, G_VARIANT_TYPE_STRING))
    return g_variant_dup_string (value, NULL);
  if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT32))
    return g_strdup_printf ("%u", g_variant_get_uint32 (value));
  if (g_variant_is_of_type (value, G_VARIANT_TYPE_UINT64))
    return g_strdup_printf ("%" G_GUINT64_FORMAT, g_variant_get_uint64 (value));
  /* a list as shimwatch.conf(5) writes one */
  if (g_variant_is_of_type (value, G_VARIANT_TYPE_STRING_ARRAY))
    {
      g_autofree const char **strv = g_variant_get_strv (value, NULL);

      return g_strjoinv (";", (char **) strv);
    }
  return g_variant_print (value, FALSE);
}

int
ctl_cmd_version (Ctl              *ctl,
                 const CtlCommand *command,
                 int               argc,
                 char            **argv)
{
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) properties = NULL;
  g_autoptr(GError) error = NULL;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL, NULL, &argc, &argv, 0, 0, &exit_code))
    return exit_code;
  /* the client's version even when the service cannot be asked */
  if (!ctl->json)
    ctl_print_field (_("Client"), PACKAGE_VERSION);
  if (!ctl_connect (ctl, &exit_code))
    return exit_code;
  reply = ctl_call (ctl, CTL_MANAGER_PATH, "org.freedesktop.DBus.Properties", "GetAll",
                    g_variant_new ("(s)", CTL_MANAGER_IFACE), "(a{sv})", FALSE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "GetAll", _("cannot read the service’s version"));
  properties = g_variant_get_child_value (reply, 0);

  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;
      GVariantIter iter;
      const char *name;
      GVariant *value;

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "client_version");
      json_builder_add_string_value (builder, PACKAGE_VERSION);
      json_builder_set_member_name (builder, "service");
      json_builder_begin_object (builder);
      g_variant_iter_init (&iter, properties);
      while (g_variant_iter_loop (&iter, "{&sv}", &name, &value))
        {
          g_autofree char *member = ctl_snake_case (name);

          json_builder_set_member_name (builder, member);
          json_builder_add_value (builder, ctl_json_from_variant (value));
        }
      json_builder_end_object (builder);
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, TRUE);
      return CTL_EXIT_OK;
    }
  for (guint i = 0; i < G_N_ELEMENTS (shown_properties); i++)
    {
      g_autoptr(GVariant) value = g_variant_lookup_value (properties,
                                                          shown_properties[i].property, NULL);
      g_autofree char *text = NULL;

      if (value == NULL)
        continue;
      text = property_text (value);
      ctl_print_field (_(shown_properties[i].label), text);
    }
  {
    GVariantIter iter;
    const char *name;
    GVariant *value;

    /* counters and settings of a newer service, by their D-Bus names */
    g_variant_iter_init (&iter, properties);
    while (g_variant_iter_loop (&iter, "{&sv}", &name, &value))
      {
        gboolean known = FALSE;
        g_autofree char *text = NULL;

        for (guint i = 0; i < G_N_ELEMENTS (shown_properties); i++)
          known = known || g_str_equal (shown_properties[i].property, name);
        if (known)
          continue;
        /* the settings in force, one line each by their "Section.Key" */
        if (g_variant_is_of_type (value, G_VARIANT_TYPE_VARDICT))
          {
            GVariantIter settings;
            const char *key;
            GVariant *setting;

            g_variant_iter_init (&settings, value);
            while (g_variant_iter_loop (&settings, "{&sv}", &key, &setting))
              {
                g_autofree char *setting_text = property_text (setting);

                ctl_print_field (key, setting_text);
              }
            continue;
          }
        text = property_text (value);
        ctl_print_field (name, text);
      }
  }
  return CTL_EXIT_OK;
}
