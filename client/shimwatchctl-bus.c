/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl's side of the bus: the connection, calls (interactive authorization unless
 * --no-ask-password), and every error turned into one short, translated sentence with
 * its exit status.
 */
#include "config.h"

#include <stdarg.h>
#include <string.h>
#include <glib/gi18n.h>

#include "shimwatchctl.h"

gboolean
ctl_connect (Ctl *ctl,
             int *exit_code)
{
  g_autoptr(GError) error = NULL;

  if (ctl->address != NULL)
    ctl->connection = g_dbus_connection_new_for_address_sync (
      ctl->address,
      G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
      G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
      NULL, NULL, &error);
  else
    ctl->connection = g_bus_get_sync (ctl->session ? G_BUS_TYPE_SESSION : G_BUS_TYPE_SYSTEM,
                                      NULL, &error);
  if (ctl->connection == NULL)
    {
      g_autofree char *escaped = NULL;

      g_dbus_error_strip_remote_error (error);
      escaped = ctl_escape (error->message);
      g_free (error->message);
      error->message = g_steal_pointer (&escaped);
      if (ctl->address != NULL)
        g_printerr (_("%s: cannot connect to the message bus at %s: %s\n"), g_get_prgname (),
                    ctl->address, error->message);
      else if (ctl->session)
        g_printerr (_("%s: cannot connect to the session bus: %s\n"), g_get_prgname (),
                    error->message);
      else
        g_printerr (_("%s: cannot connect to the system bus: %s\n"), g_get_prgname (),
                    error->message);
      *exit_code = CTL_EXIT_FAILURE;
      return FALSE;
    }
  return TRUE;
}

static gboolean
is_remote_error (const GError *error,
                 const char   *name)
{
  g_autofree char *remote = NULL;

  if (error == NULL || !g_dbus_error_is_remote_error (error))
    return FALSE;
  remote = g_dbus_error_get_remote_error (error);
  return g_strcmp0 (remote, name) == 0;
}

static gboolean
is_service_error (const GError *error,
                  const char   *short_name)
{
  g_autofree char *name = g_strconcat (CTL_ERROR_PREFIX, short_name, NULL);

  return is_remote_error (error, name);
}

gboolean
ctl_error_is_unknown_method (const GError *error)
{
  return g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_UNKNOWN_METHOD) ||
         is_remote_error (error, "org.freedesktop.DBus.Error.UnknownMethod");
}

GVariant *
ctl_call (Ctl          *ctl,
          const char   *path,
          const char   *interface,
          const char   *method,
          GVariant     *parameters,
          const char   *reply_type,
          gboolean      changes_state,
          GUnixFDList **out_fd_list,
          GError      **error)
{
  g_autoptr(GVariant) params = parameters != NULL ? g_variant_ref_sink (parameters) : NULL;
  g_autoptr(GError) local_error = NULL;
  GDBusCallFlags flags = G_DBUS_CALL_FLAGS_NONE;
  GVariant *reply;
  /* a password prompt, a Stop or a Reap may take long: only reads have a timeout */
  int timeout = changes_state ? G_MAXINT : -1;
  const GVariantType *type = reply_type != NULL ? G_VARIANT_TYPE (reply_type) : NULL;

  if (changes_state && !ctl->no_ask_password)
    flags |= G_DBUS_CALL_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION;
  reply = g_dbus_connection_call_with_unix_fd_list_sync (ctl->connection, CTL_BUS_NAME, path,
                                                         interface, method, params, type, flags,
                                                         timeout, NULL, out_fd_list, NULL,
                                                         &local_error);
  if (reply != NULL)
    return reply;

  /* "not authorized" although interaction was allowed: polkit may have found no agent to
   * ask. A refused call changed nothing, so asking again without interaction is safe and
   * tells the two cases apart: a caller who could authenticate gets NotAuthorizedCanObtain. */
  if ((flags & G_DBUS_CALL_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION) &&
      is_service_error (local_error, "NotAuthorized"))
    {
      g_autoptr(GError) retry_error = NULL;

      reply = g_dbus_connection_call_with_unix_fd_list_sync (ctl->connection, CTL_BUS_NAME,
                                                             path, interface, method, params,
                                                             type, G_DBUS_CALL_FLAGS_NONE,
                                                             timeout, NULL, out_fd_list, NULL,
                                                             &retry_error);
      if (reply != NULL)
        return reply;
      if (is_service_error (retry_error, "NotAuthorizedCanObtain"))
        {
          g_set_error_literal (error, CTL_ERROR, CTL_ERROR_NO_AGENT, "no agent");
          return NULL;
        }
    }
  g_propagate_error (error, g_steal_pointer (&local_error));
  return NULL;
}

static char *
service_detail (const GError *error)
{
  g_autoptr(GError) copy = g_error_copy (error);

  g_dbus_error_strip_remote_error (copy);
  return g_strdup (copy->message);
}

/* one short sentence for the error, and the exit status that goes with it */
static char *
describe_error (const GError *error,
                const char   *method,
                int          *exit_code)
{
  g_autofree char *detail = service_detail (error);

  *exit_code = CTL_EXIT_FAILURE;
  if (g_error_matches (error, CTL_ERROR, CTL_ERROR_NO_AGENT))
    {
      *exit_code = CTL_EXIT_NOT_AUTHORIZED;
      return g_strdup (_("authentication is required, but no polkit authentication agent is "
                         "running to ask for a password. Run it as root, or start an agent "
                         "(for example pkttyagent) in this session"));
    }
  if (is_service_error (error, "NotAuthorizedCanObtain"))
    {
      *exit_code = CTL_EXIT_NOT_AUTHORIZED;
      return g_strdup (_("authentication is required: run it without --no-ask-password where "
                         "an authentication agent runs, or as root"));
    }
  if (is_service_error (error, "NotAuthorized"))
    {
      *exit_code = CTL_EXIT_NOT_AUTHORIZED;
      return g_strdup (_("not authorized: polkit does not allow it"));
    }
  if (is_service_error (error, "NotFound") ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_UNKNOWN_OBJECT) ||
      is_remote_error (error, "org.freedesktop.DBus.Error.UnknownObject"))
    {
      *exit_code = CTL_EXIT_NOT_FOUND;
      return g_strdup (_("no such task"));
    }
  if (is_service_error (error, "InvalidArgument"))
    {
      *exit_code = CTL_EXIT_USAGE;
      return g_strdup_printf (_("the service refused an argument: %s"), detail);
    }
  if (is_service_error (error, "AlreadyExists"))
    return g_strdup (_("a task with this namespace and id already exists"));
  if (is_service_error (error, "BadState"))
    return g_strdup_printf (_("not possible in the task’s current state (%s)"), detail);
  if (is_service_error (error, "ShimFailed"))
    return g_strdup_printf (_("the shim or the runtime reported an error: %s"), detail);
  if (is_service_error (error, "Busy"))
    return g_strdup_printf (_("the service is busy: %s"), detail);
  if (is_service_error (error, "NotSupported"))
    return g_strdup_printf (_("not supported for this task (%s)"), detail);
  if (is_service_error (error, "Failed"))
    return g_strdup_printf (_("the service failed: %s"), detail);
  if (ctl_error_is_unknown_method (error))
    return g_strdup_printf (_("the service does not support %s (too old?)"), method);
  if (g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_SERVICE_UNKNOWN) ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_NAME_HAS_NO_OWNER) ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND) ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_EXEC_FAILED) ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_CHILD_EXITED))
    return g_strdup (_("shimwatchd is not running and could not be started"));
  if (g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_ACCESS_DENIED))
    {
      *exit_code = CTL_EXIT_NOT_AUTHORIZED;
      return g_strdup (_("the bus policy does not allow this call (is shimwatch’s D-Bus policy "
                         "installed?)"));
    }
  if (g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_NO_REPLY) ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_TIMEOUT) ||
      g_error_matches (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT))
    return g_strdup (_("the service did not answer in time"));
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CLOSED) ||
      g_error_matches (error, G_DBUS_ERROR, G_DBUS_ERROR_DISCONNECTED))
    return g_strdup (_("the connection to the bus was closed"));
  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT))
    return g_strdup_printf (_("the service sent an unexpected reply (%s)"), detail);
  return g_strdup (detail);
}

int
ctl_fail (Ctl          *ctl,
          const GError *error,
          const char   *method,
          const char   *format,
          ...)
{
  g_autofree char *what = NULL;
  g_autofree char *why = NULL;
  g_autofree char *escaped_what = NULL;
  g_autofree char *escaped_why = NULL;
  int exit_code;
  va_list args;

  va_start (args, format);
  what = g_strdup_vprintf (format, args);
  va_end (args);
  why = describe_error (error, method, &exit_code);
  /* the service's own words may quote what a caller gave it: shown escaped */
  escaped_what = ctl_escape (what);
  escaped_why = ctl_escape (why);
  g_printerr ("%s: %s: %s\n", g_get_prgname (), escaped_what, escaped_why);
  return exit_code;
}

/* NS/ID, or a bare ID in the namespace of -n (default "default"); a usage error for
 * anything else, and for an NS/ID whose namespace is not the one -n names */
gboolean
ctl_parse_task (Ctl              *ctl,
                const CtlCommand *command,
                const char       *arg,
                char            **out_namespace,
                char            **out_id,
                int              *exit_code)
{
  const char *slash = strchr (arg, '/');
  g_autofree char *namespace_ = NULL;
  g_autofree char *id = NULL;

  if (slash == NULL)
    {
      namespace_ = g_strdup (ctl->namespace_ != NULL ? ctl->namespace_ : CTL_DEFAULT_NAMESPACE);
      id = g_strdup (arg);
    }
  else
    {
      namespace_ = g_strndup (arg, slash - arg);
      id = g_strdup (slash + 1);
    }
  if (!ctl_valid_identifier (namespace_) || !ctl_valid_identifier (id))
    {
      *exit_code = ctl_usage_error (command, _("“%s” is not a task name: NS/ID, each made of "
                                               "letters, digits and . _ - (at most 76)"), arg);
      return FALSE;
    }
  if (ctl->namespace_ != NULL && !g_str_equal (namespace_, ctl->namespace_))
    {
      *exit_code = ctl_usage_error (command, _("“%s” is in namespace “%s”, but -n says “%s”"),
                                    arg, namespace_, ctl->namespace_);
      return FALSE;
    }
  *out_namespace = g_steal_pointer (&namespace_);
  *out_id = g_steal_pointer (&id);
  return TRUE;
}

char *
ctl_get_shim_path (Ctl        *ctl,
                   const char *namespace_,
                   const char *id,
                   int        *exit_code)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) reply = NULL;
  char *path = NULL;

  reply = ctl_call (ctl, CTL_MANAGER_PATH, CTL_MANAGER_IFACE, "GetShim",
                    g_variant_new ("(ss)", namespace_, id), "(o)", FALSE, NULL, &error);
  if (reply == NULL)
    {
      if (is_service_error (error, "NotFound"))
        {
          g_printerr (_("%s: no task %s/%s\n"), g_get_prgname (), namespace_, id);
          /* -n used to be the number of lines of logs and history */
          if (ctl->namespace_ != NULL &&
              strspn (ctl->namespace_, "0123456789") == strlen (ctl->namespace_))
            g_printerr (_("(-n names the namespace; the number of lines is -N)\n"));
          *exit_code = CTL_EXIT_NOT_FOUND;
        }
      else
        *exit_code = ctl_fail (ctl, error, "GetShim", _("cannot look up %s/%s"), namespace_, id);
      return NULL;
    }
  g_variant_get (reply, "(o)", &path);
  return path;
}

/* "namespace/id" from a shim object path (…/shims/<e(ns)>/<e(id)>), NULL if it is none */
char *
ctl_task_name_from_path (const char *path)
{
  g_auto(GStrv) parts = g_strsplit (path, "/", -1);
  guint n = g_strv_length (parts);
  g_autofree char *namespace_ = NULL;
  g_autofree char *id = NULL;

  /* "", org, shimwatch, Shimwatch1, <kind>, ns, id */
  if (n != 7 || !g_str_has_prefix (path, CTL_MANAGER_PATH "/"))
    return NULL;
  namespace_ = (char *) g_dbus_unescape_object_path (parts[5]);
  id = (char *) g_dbus_unescape_object_path (parts[6]);
  if (namespace_ == NULL || id == NULL)
    return NULL;
  return g_strdup_printf ("%s/%s", namespace_, id);
}

static void
follow_closed_cb (GDBusConnection *connection,
                  gboolean         remote_peer_vanished,
                  GError          *error,
                  gpointer         user_data)
{
  CtlFollow *follow = user_data;

  g_printerr (_("%s: the connection to the bus was closed\n"), g_get_prgname ());
  follow->exit_code = CTL_EXIT_FAILURE;
  if (follow->loop != NULL)
    g_main_loop_quit (follow->loop);
}

void
ctl_follow_start (CtlFollow          *follow,
                  Ctl                *ctl,
                  GDBusSignalCallback owner_changed,
                  gpointer            user_data)
{
  follow->ctl = ctl;
  follow->exit_code = CTL_EXIT_OK;
  g_dbus_connection_set_exit_on_close (ctl->connection, FALSE);
  follow->owner_sub = g_dbus_connection_signal_subscribe (ctl->connection, "org.freedesktop.DBus",
                                                          "org.freedesktop.DBus",
                                                          "NameOwnerChanged",
                                                          "/org/freedesktop/DBus", CTL_BUS_NAME,
                                                          G_DBUS_SIGNAL_FLAGS_NONE,
                                                          owner_changed, user_data, NULL);
  g_signal_connect (ctl->connection, "closed", G_CALLBACK (follow_closed_cb), follow);
}

void
ctl_follow_sync (CtlFollow *follow)
{
  g_autoptr(GVariant) reply = NULL;

  /* a round trip: the bus has the match rules once it answers */
  reply = g_dbus_connection_call_sync (follow->ctl->connection, "org.freedesktop.DBus",
                                       "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                       "GetId", NULL, G_VARIANT_TYPE ("(s)"),
                                       G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL);
}

void
ctl_follow_end (CtlFollow *follow)
{
  g_dbus_connection_signal_unsubscribe (follow->ctl->connection, follow->owner_sub);
  g_signal_handlers_disconnect_by_func (follow->ctl->connection, follow_closed_cb, follow);
}
