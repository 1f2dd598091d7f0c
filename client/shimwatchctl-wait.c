/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl wait: block until a task exits, and exit with its exit status, as
 * `ctr task wait` and `podman wait` do.
 */
#include "config.h"

#include <glib/gi18n.h>

#include "shimwatchctl.h"

typedef struct {
  Ctl        *ctl;
  CtlFollow   follow;         /* its loop, and its exit code when it cannot be waited for */
  const char *namespace_;
  const char *id;
  char       *path;           /* the task's object, NULL once it is gone */
  gboolean    done;
  gboolean    deleted;        /* it went before it could be seen exit */
  guint32     exit_status;
  guint64     exited_at;
} Wait;

static void
finish (Wait   *wait,
        guint32 status,
        guint64 exited_at)
{
  if (wait->done)
    return;
  wait->done = TRUE;
  wait->exit_status = status;
  wait->exited_at = exited_at;
  if (wait->follow.loop != NULL)
    g_main_loop_quit (wait->follow.loop);
}

/* look at the task as it is now: exited already, gone, or still to wait for */
static gboolean
check_now (Wait *wait)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) properties = NULL;
  guint64 exited_at = 0;
  guint32 status = 0;
  const char *status_text = "";
  int exit_code = CTL_EXIT_OK;

  g_clear_pointer (&wait->path, g_free);
  wait->path = ctl_get_shim_path (wait->ctl, wait->namespace_, wait->id, &exit_code);
  if (wait->path == NULL)
    {
      wait->follow.exit_code = exit_code;
      return FALSE;
    }
  reply = ctl_call (wait->ctl, wait->path, "org.freedesktop.DBus.Properties", "GetAll",
                    g_variant_new ("(s)", CTL_SHIM_IFACE), "(a{sv})", FALSE, NULL, &error);
  if (reply == NULL)
    {
      wait->follow.exit_code = ctl_fail (wait->ctl, error, "GetAll",
                                         _("cannot read the properties of %s/%s"), wait->namespace_,
                                         wait->id);
      return FALSE;
    }
  g_variant_get (reply, "(@a{sv})", &properties);
  g_variant_lookup (properties, "ExitedAt", "t", &exited_at);
  g_variant_lookup (properties, "ExitStatus", "u", &status);
  g_variant_lookup (properties, "Status", "&s", &status_text);
  /* ExitStatus is valid once the task exited: ExitedAt says when (0 = unknown) */
  if (exited_at != 0 || g_str_equal (status_text, "stopped"))
    finish (wait, status, exited_at);
  return TRUE;
}

static void
manager_signal_cb (GDBusConnection *connection,
                   const char      *sender,
                   const char      *path,
                   const char      *interface,
                   const char      *signal,
                   GVariant        *parameters,
                   gpointer         user_data)
{
  Wait *wait = user_data;
  const char *shim, *namespace_, *container_id, *id;
  guint32 pid, status;
  guint64 exited_at;

  if (!g_variant_is_of_type (parameters, G_VARIANT_TYPE ("(osssuut)")))
    return;
  g_variant_get (parameters, "(&o&s&s&suut)", &shim, &namespace_, &container_id, &id, &pid,
                 &status, &exited_at);
  /* the task's init: its id is the container's (or not given) */
  if (!g_str_equal (namespace_, wait->namespace_) || !g_str_equal (container_id, wait->id) ||
      (*id != '\0' && !g_str_equal (id, container_id)))
    return;
  if (g_str_equal (signal, "TaskDelete"))
    wait->deleted = TRUE;
  finish (wait, status, exited_at);
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
  Wait *wait = user_data;
  const char *name, *old_owner, *new_owner;

  g_variant_get (parameters, "(&s&s&s)", &name, &old_owner, &new_owner);
  /* a restarted service finds its tasks again: look at the task anew. It may have exited
   * meanwhile, or be gone for good. */
  if (*new_owner != '\0' && !check_now (wait))
    {
      wait->done = TRUE;
      g_main_loop_quit (wait->follow.loop);
    }
}

int
ctl_cmd_wait (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
  g_autofree char *namespace_ = NULL;
  g_autofree char *id = NULL;
  Wait wait = { 0 };
  guint exit_sub, delete_sub;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, NULL,
                               _("The exit status of the task becomes the command’s (128+N "
                                 "for a task killed by signal N). Errors of shimwatchctl "
                                 "itself are said on standard error."),
                               &argc, &argv, 1, 1, &exit_code) ||
      !ctl_parse_task (ctl, command, argv[1], &namespace_, &id, &exit_code) ||
      !ctl_connect (ctl, &exit_code))
    return exit_code;
  wait.ctl = ctl;
  wait.namespace_ = namespace_;
  wait.id = id;

  /* subscribe first, then look: an exit between the two is seen either way */
  exit_sub = g_dbus_connection_signal_subscribe (ctl->connection, CTL_BUS_NAME,
                                                 CTL_MANAGER_IFACE, "TaskExit",
                                                 CTL_MANAGER_PATH, NULL,
                                                 G_DBUS_SIGNAL_FLAGS_NONE, manager_signal_cb,
                                                 &wait, NULL);
  delete_sub = g_dbus_connection_signal_subscribe (ctl->connection, CTL_BUS_NAME,
                                                   CTL_MANAGER_IFACE, "TaskDelete",
                                                   CTL_MANAGER_PATH, NULL,
                                                   G_DBUS_SIGNAL_FLAGS_NONE, manager_signal_cb,
                                                   &wait, NULL);
  ctl_follow_start (&wait.follow, ctl, name_owner_changed_cb, &wait);
  ctl_follow_sync (&wait.follow);
  if (check_now (&wait) && !wait.done)
    {
      wait.follow.loop = g_main_loop_new (NULL, FALSE);
      g_main_loop_run (wait.follow.loop);
      g_main_loop_unref (wait.follow.loop);
    }
  g_dbus_connection_signal_unsubscribe (ctl->connection, exit_sub);
  g_dbus_connection_signal_unsubscribe (ctl->connection, delete_sub);
  ctl_follow_end (&wait.follow);
  g_free (wait.path);
  if (wait.follow.exit_code != CTL_EXIT_OK)
    return wait.follow.exit_code;

  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "namespace");
      json_builder_add_string_value (builder, namespace_);
      json_builder_set_member_name (builder, "id");
      json_builder_add_string_value (builder, id);
      json_builder_set_member_name (builder, "exit_status");
      json_builder_add_int_value (builder, wait.exit_status);
      json_builder_set_member_name (builder, "exited_at");
      json_builder_add_int_value (builder, (gint64) wait.exited_at);
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, TRUE);
    }
  else
    {
      g_autofree char *text = ctl_format_exit_status (wait.exit_status);

      if (wait.deleted)
        g_print (_("%s/%s exited and was deleted: exit status %s.\n"), namespace_, id, text);
      else
        g_print (_("%s/%s exited: exit status %s.\n"), namespace_, id, text);
    }
  /* an exit status is 0 to 255; containerd's 128+N for signal N is one already */
  return (int) MIN (wait.exit_status, 255);
}
