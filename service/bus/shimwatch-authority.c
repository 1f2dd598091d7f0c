/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchAuthority"

#include "config.h"

#include <unistd.h>
#include <polkit/polkit.h>

#include "shimwatch-authority.h"
#include "shimwatch-error.h"
#include "shimwatch-fair-queue.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"

/* Bounds on polkit checks. dbus-daemon lets one connection wait for at most 128 replies
 * (max_replies_per_connection); past that it answers LimitsExceeded, for everyone's calls.
 * So the service asks polkit about a bounded number of calls at once, queues the rest
 * fairly by uid, and refuses with Busy what would wait beyond a caller's share. */
#define MAX_CHECKS_PER_NAME    32    /* unanswered checks of one bus connection */
#define MAX_CHECKS_PER_UID     64    /* queued or running, all connections of one uid */
#define MAX_CHECKS_QUEUED      1024  /* queued or running, everyone */
#define MAX_CHECKS_RUNNING     16    /* sent to polkit and not answered yet */
#define MAX_RUNNING_PER_UID    4
#define BUSY_LOG_INTERVAL_US   G_USEC_PER_SEC
/* a check that may not prompt and gets no answer holds its place for at most this long:
 * a hung polkitd must not take authorization away for good (one that may prompt waits
 * for a person, however long) */
#define CHECK_TIMEOUT_S        30

struct _ShimwatchAuthority
{
  GObject             parent_instance;

  GDBusConnection    *connection;
  gboolean            use_polkit;
  PolkitAuthority    *polkit;     /* NULL until polkit_authority_get_async() answered */
  gboolean            getting_polkit;
  GHashTable         *callers;    /* unique bus name → Caller, while it has checks */
  ShimwatchFairQueue *queue;      /* GTasks whose caller's uid is known */
  gint64              busy_logged_at;
  guint               busy_unlogged;
};

G_DEFINE_TYPE (ShimwatchAuthority, shimwatch_authority, G_TYPE_OBJECT)

/* one bus connection with checks under way; its uid is asked once for all of them (a
 * unique name is never reused, and the uid of a connection never changes) */
typedef struct {
  char     *sender;
  guint     n_checks;        /* not answered yet, in any stage */
  gboolean  uid_known;
  guint32   uid;
  GQueue    waiting_for_uid; /* GTasks */
} Caller;

static void
caller_free (Caller *caller)
{
  g_queue_clear (&caller->waiting_for_uid);
  g_free (caller->sender);
  g_free (caller);
}

typedef struct {
  char                        *sender;
  char                        *action_id;
  char                        *namespace_;
  char                        *id;
  gboolean                     interactive;
  guint32                      uid;
  GCancellable                *cancellable;   /* while with polkit, without interaction */
  GSource                     *timeout;
} CheckData;

static void
check_data_free (CheckData *data)
{
  if (data->timeout != NULL)
    {
      g_source_destroy (data->timeout);
      g_source_unref (data->timeout);
    }
  g_clear_object (&data->cancellable);
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

  const char * const extra[] = {
    SHIMWATCH_LOG_FIELD_CALLER, data->sender,
    "SHIMWATCH_CALLER_UID", uid_text,
    "SHIMWATCH_ACTION", data->action_id,
    NULL
  };

  shimwatch_log_task (G_LOG_LEVEL_MESSAGE,
                      (&(ShimwatchLogTask) { .namespace_ = data->namespace_ ?: "",
                                             .id = data->id ?: "", .event = "auth",
                                             .bare = TRUE, .extra = extra }),
                      "%s%s by %s (uid %u): %s", data->action_id, target, data->sender,
                      data->uid, result);
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

/* -- answering: every check ends here, once ------------------------------------------- */

static void dispatch (ShimwatchAuthority *self);

/* the caller's share is freed once its check is answered */
static void
release_caller (ShimwatchAuthority *self,
                const char         *sender)
{
  Caller *caller = g_hash_table_lookup (self->callers, sender);

  g_return_if_fail (caller != NULL && caller->n_checks > 0);
  if (--caller->n_checks == 0)
    g_hash_table_remove (self->callers, sender);
}

static void
answer (GTask  *task,
        GError *error)
{
  ShimwatchAuthority *self = g_task_get_source_object (task);
  CheckData *data = g_task_get_task_data (task);

  release_caller (self, data->sender);
  if (error != NULL)
    g_task_return_error (task, error);
  else
    g_task_return_boolean (task, TRUE);
  g_object_unref (task);
}

/* a flood is refused with one line a second, not one per call */
static void
log_busy (ShimwatchAuthority *self,
          const CheckData    *data,
          const char         *reason)
{
  gint64 now = g_get_monotonic_time ();
  g_autofree char *text = NULL;

  if (self->busy_logged_at != 0 && now - self->busy_logged_at < BUSY_LOG_INTERVAL_US)
    {
      self->busy_unlogged++;
      return;
    }
  text = self->busy_unlogged > 0
           ? g_strdup_printf ("busy: %s (and %u more refused in the last second)", reason,
                              self->busy_unlogged)
           : g_strdup_printf ("busy: %s", reason);
  self->busy_logged_at = now;
  self->busy_unlogged = 0;
  audit (data, text);
}

/* -- polkit ----------------------------------------------------------------------------- */

/* tests (-Dtest_hooks): SHIMWATCH_TEST_POLKIT_TIMEOUT_MS shortens the wait */
static guint
check_timeout_ms (void)
{
#ifdef SHIMWATCH_TEST_HOOKS
  const char *text = g_getenv ("SHIMWATCH_TEST_POLKIT_TIMEOUT_MS");
  guint64 value;

  if (text != NULL && g_ascii_string_to_unsigned (text, 10, 1, CHECK_TIMEOUT_S * 1000, &value,
                                                  NULL))
    return (guint) value;
#endif
  return CHECK_TIMEOUT_S * 1000;
}

static void
polkit_checked_cb (GObject      *source,
                   GAsyncResult *result,
                   gpointer      user_data)
{
  GTask *task = user_data;
  ShimwatchAuthority *self = g_object_ref (g_task_get_source_object (task));
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(PolkitAuthorizationResult) answered = NULL;
  g_autoptr(GError) error = NULL;

  shimwatch_fair_queue_done (self->queue, data->uid);
  if (data->timeout != NULL)
    {
      g_source_destroy (data->timeout);
      g_clear_pointer (&data->timeout, g_source_unref);
    }
  answered = polkit_authority_check_authorization_finish (POLKIT_AUTHORITY (source), result,
                                                          &error);
  if (answered == NULL && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    {
      audit (data, "polkit did not answer in time");
      answer (task, g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                                 "cannot check authorization for %s: polkit did not answer "
                                 "within %.1f s", data->action_id, check_timeout_ms () / 1000.0));
    }
  else if (answered == NULL)
    {
      audit (data, "polkit failed");
      answer (task, g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                                 "cannot check authorization for %s: %s", data->action_id,
                                 error->message));
    }
  else if (!shimwatch_authority_result_to_error (polkit_authorization_result_get_is_authorized (answered),
                                                 polkit_authorization_result_get_is_challenge (answered),
                                                 polkit_authorization_result_get_dismissed (answered),
                                                 data->interactive, data->action_id, &error))
    {
      audit (data, error->message);
      answer (task, g_steal_pointer (&error));
    }
  else
    {
      audit (data, "authorized");
      answer (task, NULL);
    }
  dispatch (self);
  g_object_unref (self);
}

static gboolean
check_timed_out_cb (gpointer user_data)
{
  g_cancellable_cancel (user_data);
  return G_SOURCE_REMOVE;
}

static void
check_with_polkit (ShimwatchAuthority *self,
                   GTask              *task)
{
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(PolkitSubject) subject = polkit_system_bus_name_new (data->sender);
  g_autoptr(PolkitDetails) details = polkit_details_new ();

  if (data->namespace_ != NULL)
    polkit_details_insert (details, "namespace", data->namespace_);
  if (data->id != NULL)
    polkit_details_insert (details, "id", data->id);
  if (!data->interactive)
    {
      data->cancellable = g_cancellable_new ();
      data->timeout = g_timeout_source_new (check_timeout_ms ());
      g_source_set_callback (data->timeout, check_timed_out_cb, data->cancellable, NULL);
      g_source_attach (data->timeout, NULL);
    }
  /* the subject is the caller's bus name, never its pid (which could be reused) */
  polkit_authority_check_authorization (self->polkit, subject, data->action_id, details,
                                        data->interactive
                                          ? POLKIT_CHECK_AUTHORIZATION_FLAGS_ALLOW_USER_INTERACTION
                                          : POLKIT_CHECK_AUTHORIZATION_FLAGS_NONE,
                                        data->cancellable, polkit_checked_cb, task);
}

static void
got_polkit_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  g_autoptr(ShimwatchAuthority) self = user_data;
  g_autoptr(GError) error = NULL;
  GTask *task;
  guint32 uid;

  self->getting_polkit = FALSE;
  self->polkit = polkit_authority_get_finish (result, &error);
  if (self->polkit != NULL)
    {
      dispatch (self);
      return;
    }
  /* what waits now fails; the next check asks again */
  g_warning ("polkit is not available: %s", error->message);
  while ((task = shimwatch_fair_queue_pop (self->queue, &uid)) != NULL)
    {
      CheckData *data = g_task_get_task_data (task);

      shimwatch_fair_queue_done (self->queue, uid);
      audit (data, "polkit not available");
      answer (task, g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED,
                                 "polkit is not available: %s", error->message));
    }
}

/* start as many queued checks as the bounds allow, the callers' uids in turn */
static void
dispatch (ShimwatchAuthority *self)
{
  GTask *task;

  if (shimwatch_fair_queue_get_n_queued (self->queue) == 0)
    return;
  if (self->polkit == NULL)
    {
      /* never blocking: the main loop serves everyone else meanwhile */
      if (!self->getting_polkit)
        {
          self->getting_polkit = TRUE;
          polkit_authority_get_async (NULL, got_polkit_cb, g_object_ref (self));
        }
      return;
    }
  while ((task = shimwatch_fair_queue_pop (self->queue, NULL)) != NULL)
    check_with_polkit (self, task);
}

/* -- the caller's uid, then the queue ---------------------------------------------------- */

static void
decide (ShimwatchAuthority *self,
        GTask              *task)
{
  CheckData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;

  if (self->use_polkit)
    {
      if (!shimwatch_fair_queue_push (self->queue, data->uid, task, &error))
        {
          log_busy (self, data, error->message);
          answer (task, g_steal_pointer (&error));
          return;
        }
      dispatch (self);
      return;
    }
  /* development on a session bus: no polkit to ask */
  if (data->uid != 0 && data->uid != geteuid ())
    {
      audit (data, "denied (no polkit: only root and the service's user)");
      answer (task, g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                                 "not authorized for %s", data->action_id));
    }
  else
    {
      audit (data, "authorized");
      answer (task, NULL);
    }
}

typedef struct {
  ShimwatchAuthority *self;
  char               *sender;
} LookupData;

static void
get_uid_cb (GObject      *source,
            GAsyncResult *result,
            gpointer      user_data)
{
  LookupData *lookup = user_data;
  g_autoptr(ShimwatchAuthority) self = lookup->self;
  g_autofree char *sender = lookup->sender;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  Caller *caller;
  GQueue waiting;
  GTask *task;

  g_free (lookup);
  caller = g_hash_table_lookup (self->callers, sender);
  g_return_if_fail (caller != NULL);
  reply = g_dbus_connection_call_finish (G_DBUS_CONNECTION (source), result, &error);
  if (reply != NULL)
    {
      g_variant_get (reply, "(u)", &caller->uid);
      caller->uid_known = TRUE;
    }
  /* answering may free the caller: work on a copy of its list */
  waiting = caller->waiting_for_uid;
  g_queue_init (&caller->waiting_for_uid);
  while ((task = g_queue_pop_head (&waiting)) != NULL)
    {
      CheckData *data = g_task_get_task_data (task);

      if (reply == NULL)
        {
          answer (task, g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
                                     "cannot identify the caller %s: %s", sender,
                                     error->message));
          continue;
        }
      data->uid = caller->uid;
      decide (self, task);
    }
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
  Caller *caller;

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

  caller = g_hash_table_lookup (self->callers, data->sender);
  if (caller != NULL && caller->n_checks >= MAX_CHECKS_PER_NAME)
    {
      g_autoptr(GError) error = NULL;

      if (caller->uid_known)
        data->uid = caller->uid;
      error = g_error_new (SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY,
                           "too many requests of %s are waiting for authorization (limit %u); "
                           "try again later", data->sender, MAX_CHECKS_PER_NAME);
      log_busy (self, data, error->message);
      g_task_return_error (task, g_steal_pointer (&error));
      g_object_unref (task);
      return;
    }
  if (caller == NULL)
    {
      caller = g_new0 (Caller, 1);
      caller->sender = g_strdup (data->sender);
      g_queue_init (&caller->waiting_for_uid);
      g_hash_table_insert (self->callers, caller->sender, caller);
    }
  caller->n_checks++;
  if (caller->uid_known)
    {
      data->uid = caller->uid;
      decide (self, task);
      return;
    }
  g_queue_push_tail (&caller->waiting_for_uid, task);
  if (caller->waiting_for_uid.length == 1)
    {
      LookupData *lookup = g_new0 (LookupData, 1);

      lookup->self = g_object_ref (self);
      lookup->sender = g_strdup (data->sender);
      /* the uid is for the queue and the audit line; polkit decides from the bus name */
      g_dbus_connection_call (self->connection, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                              "org.freedesktop.DBus", "GetConnectionUnixUser",
                              g_variant_new ("(s)", data->sender), G_VARIANT_TYPE ("(u)"),
                              G_DBUS_CALL_FLAGS_NONE, -1, NULL, get_uid_cb, lookup);
    }
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
  /* asked once now, without blocking; a failure is retried by the next check */
  if (use_polkit)
    {
      self->getting_polkit = TRUE;
      polkit_authority_get_async (NULL, got_polkit_cb, g_object_ref (self));
    }
  return self;
}

static void
shimwatch_authority_finalize (GObject *object)
{
  ShimwatchAuthority *self = SHIMWATCH_AUTHORITY (object);

  g_clear_object (&self->connection);
  g_clear_object (&self->polkit);
  g_hash_table_unref (self->callers);
  shimwatch_fair_queue_free (self->queue);
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
  const ShimwatchFairQueueLimits limits = {
    .max_running = MAX_CHECKS_RUNNING,
    .max_running_per_uid = MAX_RUNNING_PER_UID,
    .max_queued = MAX_CHECKS_QUEUED,
    .max_queued_per_uid = MAX_CHECKS_PER_UID,
  };

  self->callers = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
                                         (GDestroyNotify) caller_free);
  self->queue = shimwatch_fair_queue_new (&limits);
}
