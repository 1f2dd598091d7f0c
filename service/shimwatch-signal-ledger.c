/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchLedger"

#include "config.h"

#include "shimwatch-signal-ledger.h"

typedef struct
{
  ShimwatchRecordCommit *commit;
  gboolean               sent;
} Entry;

struct _ShimwatchSignalLedger
{
  gatomicrefcount  ref_count;
  char            *interface_name;
  GMutex           mutex;
  GHashTable      *entries;          /* "member\nsubject" -> Entry */
};

static void
entry_free (Entry *entry)
{
  shimwatch_record_commit_free (entry->commit);
  g_free (entry);
}

static char *
make_key (const char *member,
          const char *subject)
{
  return g_strconcat (member, "\n", subject, NULL);
}

ShimwatchSignalLedger *
shimwatch_signal_ledger_new (const char *interface_name)
{
  ShimwatchSignalLedger *ledger = g_new0 (ShimwatchSignalLedger, 1);

  g_atomic_ref_count_init (&ledger->ref_count);
  ledger->interface_name = g_strdup (interface_name);
  g_mutex_init (&ledger->mutex);
  ledger->entries = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                           (GDestroyNotify) entry_free);
  return ledger;
}

ShimwatchSignalLedger *
shimwatch_signal_ledger_ref (ShimwatchSignalLedger *ledger)
{
  g_atomic_ref_count_inc (&ledger->ref_count);
  return ledger;
}

void
shimwatch_signal_ledger_unref (ShimwatchSignalLedger *ledger)
{
  if (ledger == NULL || !g_atomic_ref_count_dec (&ledger->ref_count))
    return;
  g_hash_table_unref (ledger->entries);
  g_mutex_clear (&ledger->mutex);
  g_free (ledger->interface_name);
  g_free (ledger);
}

/* GDBus's worker thread, right before @message is written: only the ledger's own state,
 * under its mutex, and a store to the record's mapped page */
static GDBusMessage *
outgoing_filter (GDBusConnection *connection,
                 GDBusMessage    *message,
                 gboolean         incoming,
                 gpointer         user_data)
{
  ShimwatchSignalLedger *ledger = user_data;
  GVariant *body;
  const char *subject;
  g_autofree char *key = NULL;
  Entry *entry;

  if (incoming || g_dbus_message_get_message_type (message) != G_DBUS_MESSAGE_TYPE_SIGNAL ||
      g_strcmp0 (g_dbus_message_get_interface (message), ledger->interface_name) != 0)
    return message;
  body = g_dbus_message_get_body (message);
  if (body == NULL || !g_variant_is_container (body) || g_variant_n_children (body) == 0)
    return message;
  {
    g_autoptr(GVariant) first = g_variant_get_child_value (body, 0);

    if (!g_variant_is_of_type (first, G_VARIANT_TYPE_OBJECT_PATH))
      return message;
    subject = g_variant_get_string (first, NULL);
    key = make_key (g_dbus_message_get_member (message), subject);
  }

  g_mutex_lock (&ledger->mutex);
  entry = g_hash_table_lookup (ledger->entries, key);
  if (entry != NULL && !entry->sent)
    {
      /* nothing else here: every instruction between the mark and GDBus's sendmsg() is
       * a moment in which a SIGKILL would lose the signal (no logging: settle() logs) */
      entry->sent = TRUE;
      shimwatch_records_commit (entry->commit);
    }
  g_mutex_unlock (&ledger->mutex);
  return message;
}

guint
shimwatch_signal_ledger_attach (ShimwatchSignalLedger *ledger,
                                GDBusConnection       *connection)
{
  /* the ledger outlives any late run of the filter: GDBus drops its reference only once
   * the filter can no longer run */
  return g_dbus_connection_add_filter (connection, outgoing_filter,
                                       shimwatch_signal_ledger_ref (ledger),
                                       (GDestroyNotify) shimwatch_signal_ledger_unref);
}

void
shimwatch_signal_ledger_expect (ShimwatchSignalLedger *ledger,
                                const char            *member,
                                const char            *subject,
                                ShimwatchRecordCommit *commit)
{
  Entry *entry = g_new0 (Entry, 1);

  entry->commit = commit;
  g_mutex_lock (&ledger->mutex);
  g_hash_table_replace (ledger->entries, make_key (member, subject), entry);
  g_mutex_unlock (&ledger->mutex);
}

gboolean
shimwatch_signal_ledger_settle (ShimwatchSignalLedger *ledger,
                                const char            *member,
                                const char            *subject)
{
  g_autofree char *key = make_key (member, subject);
  g_autofree char *stolen_key = NULL;
  g_autoptr(GError) error = NULL;
  Entry *entry = NULL;
  gboolean sent;

  g_mutex_lock (&ledger->mutex);
  g_hash_table_steal_extended (ledger->entries, key, (gpointer *) &stolen_key,
                               (gpointer *) &entry);
  g_mutex_unlock (&ledger->mutex);
  g_return_val_if_fail (entry != NULL, FALSE);

  sent = entry->sent;
  if (!sent)
    g_warning ("%s of %s was not written to the bus; its record says so, and the next "
               "start of the service sends it", member, subject);
  else if (!shimwatch_records_commit_sync (entry->commit, &error))
    g_warning ("%s of %s went out, but its record may not survive a crash of the "
               "machine: %s", member, subject, error->message);
  else
    g_debug ("%s of %s went out with its record marked", member, subject);
  entry_free (entry);
  return sent;
}
