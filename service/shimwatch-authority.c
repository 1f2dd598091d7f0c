/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchAuthority"

#include "config.h"

#include <unistd.h>
#include <polkit/polkit.h>

#include "shimwatch-authority.h"
#include "shimwatch-error.h"
#include "shimwatch-names.h"

struct _ShimwatchAuthority
{
  GObject          parent_instance;

  GDBusConnection *connection;
  gboolean         use_polkit;
  PolkitAuthority *polkit;     /* NULL until the first check needs it */
};

G_DEFINE_TYPE (ShimwatchAuthority, shimwatch_authority, G_TYPE_OBJECT)

typedef struct {
  char                        *sender;
  char                        *action_id;
  char                        *namespace_;
  char                        *id;
  gboolean                     interactive;
  guint32                      uid;
} CheckData;

static void
check_data_free (CheckData *data)
{
  g_free (data->sender);
  g_free (data->action_id);
  g_free (data->namespace_);
  g_free (data->id);
  g_free (data);
}

/* one structured audit line per privileged call, with the caller's identity */
static void
audit (const CheckData *data,
       const char      *result)
{
  g_autofree char *uid_text = g_strdup_printf ("%u", data->uid);
  g_autofree char *target = data->namespace_ == NULL ? g_strdup ("")
                            : g_strdup_printf (" on %s/%s", data->namespace_,
                                               data->id != NULL ? data->id : "");

  g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_MESSAGE,
                    "MESSAGE_ID", SHIMWATCH_MESSAGE_ID_AUTH,
                    SHIMWATCH_LOG_FIELD_CALLER, data->sender,
                    "SHIMWATCH_CALLER_UID", uid_text,
                    "SHIMWATCH_ACTION", data->action_id,
                    SHIMWATCH_LOG_FIELD_NAMESPACE, data->namespace_ != NULL ? data->namespace_ : "",
                    SHIMWATCH_LOG_FIELD_TASK_ID, data->id != NULL ? data->id : "",
                    "MESSAGE", "%s%s by %s (uid %u): %s", data->action_id, target,
                    data->sender, data->uid, result);
}

gboolean
shimwatch_authority_result_to_error (gboolean     authorized,
                                     gboolean     is_challenge,
                                     gboolean     dismissed,
                                     gboolean     interactive,
                                     const char  *action_id,
                                     GError     **error)
{
  if (authorized)
    return TRUE;
  if (dismissed)
    g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                 "not authorized for %s: the authentication dialog was dismissed", action_id);
  else if (is_challenge && !interactive)
    g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED_CAN_OBTAIN,
                 "%s needs authentication: call again allowing interactive authorization",
                 action_id);
  else
    g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                 "not authorized for %s", action_id);
  return FALSE;
}

static void
polkit_checked_cb (GObject      *source,
                   GAsyncResult *result,
                   gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(PolkitAuthorizationResult) answer = NULL;
  g_autoptr(GError) error = NULL;

  answer = polkit_authority_check_authorization_finish (POLKIT_AUTHORITY (source), result, &error);
  if (answer == NULL)
    {
      audit (data, "polkit failed");
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                               "cannot check authorization for %s: %s", data->action_id,
                               error->message);
      return;
    }
  if (!shimwatch_authority_result_to_error (polkit_authorization_result_get_is_authorized (answer),
                                            polkit_authorization_result_get_is_challenge (answer),
                                            polkit_authorization_result_get_dismissed (answer),
                                            data->interactive, data->action_id, &error))
    {
      audit (data, error->message);
      g_task_return_error (task, g_steal_pointer (&error));
      return;
    }
  audit (data, "authorized");
  g_task_return_boolean (task, TRUE);
}

static void
check_with_polkit (ShimwatchAuthority *self,
                   GTask              *task)
{
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(PolkitSubject) subject = polkit_system_bus_name_new (data->sender);
  g_autoptr(PolkitDetails) details = polkit_details_new ();
  g_autoptr(GError) error = NULL;

  if (self->polkit == NULL)
    self->polkit = polkit_authority_get_sync (NULL, &error);
  if (self->polkit == NULL)
    {
      audit (data, "polkit not available");
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                               "polkit is not available: %s", error->message);
      g_object_unref (task);
      return;
    }
  if (data->namespace_ != NULL)
    polkit_details_insert (details, "namespace", data->namespace_);
  if (data->id != NULL)
    polkit_details_insert (details, "id", data->id);
  /* the subject is the caller's bus name, never its pid (which could be reused) */
  polkit_authority_check_authorization (self->polkit, subject, data->action_id, details,
                                        data->interactive
                                          ? POLKIT_CHECK_AUTHORIZATION_FLAGS_ALLOW_USER_INTERACTION
                                          : POLKIT_CHECK_AUTHORIZATION_FLAGS_NONE,
                                        NULL, polkit_checked_cb, task);
}

static void
get_uid_cb (GObject      *source,
            GAsyncResult *result,
            gpointer      user_data)
{
  GTask *task = user_data;
  ShimwatchAuthority *self = g_task_get_source_object (task);
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;

  reply = g_dbus_connection_call_finish (G_DBUS_CONNECTION (source), result, &error);
  if (reply == NULL)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                               "cannot identify the caller %s: %s", data->sender,
                               error->message);
      g_object_unref (task);
      return;
    }
  g_variant_get (reply, "(u)", &data->uid);

  if (self->use_polkit)
    {
      check_with_polkit (self, task);
      return;
    }
  /* development on a session bus: no polkit to ask */
  if (data->uid != 0 && data->uid != geteuid ())
    {
      audit (data, "denied (no polkit: only root and the service's user)");
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                               "not authorized for %s", data->action_id);
    }
  else
    {
      audit (data, "authorized");
      g_task_return_boolean (task, TRUE);
    }
  g_object_unref (task);
}

void
shimwatch_authority_check_async (ShimwatchAuthority    *self,
                                 GDBusMethodInvocation *invocation,
                                 const char            *action_id,
                                 const char            *namespace_,
                                 const char            *id,
                                 GAsyncReadyCallback    callback,
                                 gpointer               user_data)
{
  GDBusMessage *message = g_dbus_method_invocation_get_message (invocation);
  GTask *task;
  CheckData *data;

  g_return_if_fail (SHIMWATCH_IS_AUTHORITY (self));

  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, shimwatch_authority_check_async);
  data = g_new0 (CheckData, 1);
  data->sender = g_strdup (g_dbus_method_invocation_get_sender (invocation));
  data->action_id = g_strdup (action_id);
  data->namespace_ = g_strdup (namespace_);
  data->id = g_strdup (id);
  /* polkit may only prompt when the caller said it can wait for a dialog */
  data->interactive = (g_dbus_message_get_flags (message) &
                       G_DBUS_MESSAGE_FLAGS_ALLOW_INTERACTIVE_AUTHORIZATION) != 0;
  data->uid = G_MAXUINT32;
  g_task_set_task_data (task, data, (GDestroyNotify) check_data_free);

  if (data->sender == NULL)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                               "%s needs a caller on a message bus", action_id);
      g_object_unref (task);
      return;
    }
  /* the uid is for the audit line; polkit decides from the bus name itself */
  g_dbus_connection_call (self->connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                          "org.freedesktop.DBus", "GetConnectionUnixUser",
                          g_variant_new ("(s)", data->sender), G_VARIANT_TYPE ("(u)"),
                          G_DBUS_CALL_FLAGS_NONE, -1, NULL, get_uid_cb, task);
}

gboolean
shimwatch_authority_check_finish (ShimwatchAuthority  *self,
                                  GAsyncResult        *result,
                                  GError             **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), FALSE);
  return g_task_propagate_boolean (G_TASK (result), error);
}

ShimwatchAuthority *
shimwatch_authority_new (GDBusConnection *connection,
                         gboolean         use_polkit)
{
  ShimwatchAuthority *self = g_object_new (SHIMWATCH_TYPE_AUTHORITY, NULL);

  self->connection = g_object_ref (connection);
  self->use_polkit = use_polkit;
  if (use_polkit)
    {
      g_autoptr(GError) error = NULL;

      /* once, at start-up; a failure here is retried at the first check */
      self->polkit = polkit_authority_get_sync (NULL, &error);
      if (self->polkit == NULL)
        g_warning ("polkit is not available yet: %s", error->message);
    }
  return self;
}

static void
shimwatch_authority_finalize (GObject *object)
{
  ShimwatchAuthority *self = SHIMWATCH_AUTHORITY (object);

  g_clear_object (&self->connection);
  g_clear_object (&self->polkit);
  G_OBJECT_CLASS (shimwatch_authority_parent_class)->finalize (object);
}

static void
shimwatch_authority_class_init (ShimwatchAuthorityClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_authority_finalize;
}

static void
shimwatch_authority_init (ShimwatchAuthority *self)
{
}
