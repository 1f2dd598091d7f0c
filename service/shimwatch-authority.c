/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchAuthority"

#include "config.h"

#include "shimwatch-authority.h"
#include "shimwatch-error.h"
#include "shimwatch-names.h"

struct _ShimwatchAuthority
{
  GObject          parent_instance;

  GDBusConnection *connection;
};

G_DEFINE_TYPE (ShimwatchAuthority, shimwatch_authority, G_TYPE_OBJECT)

typedef struct {
  char *sender;
  char *action_id;
} CheckData;

static void
check_data_free (CheckData *data)
{
  g_free (data->sender);
  g_free (data->action_id);
  g_free (data);
}

static void
audit (const CheckData *data,
       guint32          uid,
       const char      *result)
{
  g_autofree char *uid_text = g_strdup_printf ("%u", uid);

  g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_MESSAGE,
                    SHIMWATCH_LOG_FIELD_CALLER, data->sender,
                    "SHIMWATCH_CALLER_UID", uid_text,
                    "SHIMWATCH_ACTION", data->action_id,
                    "MESSAGE", "%s by %s (uid %u): %s", data->action_id, data->sender, uid,
                    result);
}

static void
get_uid_cb (GObject      *source,
            GAsyncResult *result,
            gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  guint32 uid;

  reply = g_dbus_connection_call_finish (G_DBUS_CONNECTION (source), result, &error);
  if (reply == NULL)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                               "cannot identify the caller %s: %s", data->sender,
                               error->message);
      return;
    }
  g_variant_get (reply, "(u)", &uid);

  /* without a polkit authority, only root is trusted with privileged actions */
  if (uid != 0)
    {
      audit (data, uid, "denied");
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                               "%s is not allowed for uid %u", data->action_id, uid);
      return;
    }
  audit (data, uid, "authorized");
  g_task_return_boolean (task, TRUE);
}

void
shimwatch_authority_check_async (ShimwatchAuthority    *self,
                                 GDBusMethodInvocation *invocation,
                                 const char            *action_id,
                                 GAsyncReadyCallback    callback,
                                 gpointer               user_data)
{
  g_autoptr(GTask) task = NULL;
  CheckData *data;

  g_return_if_fail (SHIMWATCH_IS_AUTHORITY (self));

  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, shimwatch_authority_check_async);
  data = g_new0 (CheckData, 1);
  data->sender = g_strdup (g_dbus_method_invocation_get_sender (invocation));
  data->action_id = g_strdup (action_id);
  g_task_set_task_data (task, data, (GDestroyNotify) check_data_free);

  if (data->sender == NULL)
    {
      /* a peer-to-peer connection has no bus to vouch for the caller */
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                               "%s needs a caller on a message bus", action_id);
      return;
    }
  g_dbus_connection_call (self->connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                          "org.freedesktop.DBus", "GetConnectionUnixUser",
                          g_variant_new ("(s)", data->sender), G_VARIANT_TYPE ("(u)"),
                          G_DBUS_CALL_FLAGS_NONE, -1, NULL, get_uid_cb, g_steal_pointer (&task));
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
shimwatch_authority_new (GDBusConnection *connection)
{
  ShimwatchAuthority *self = g_object_new (SHIMWATCH_TYPE_AUTHORITY, NULL);

  self->connection = g_object_ref (connection);
  return self;
}

static void
shimwatch_authority_finalize (GObject *object)
{
  ShimwatchAuthority *self = SHIMWATCH_AUTHORITY (object);

  g_clear_object (&self->connection);
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
