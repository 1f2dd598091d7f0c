/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchLedger"

#include "config.h"

#include <errno.h>
#include <poll.h>

#include "shimwatch-signal-ledger.h"
#include "shimwatch-crash-point.h"
#include "shimwatch-logging.h"

/* a record the commit thread does not sync within this time is marked anyway (it is in
 * the page cache, which is all a restart of the service needs), with a warning: a hung
 * disk must not stop the bus */
#define DURABLE_WAIT_US (10 * G_USEC_PER_SEC)

/* A settle nobody waits for does not wake the main thread: the committer's next call
 * takes it in (shimwatch_signal_ledger_settle_now()), or at the latest a timer, armed
 * while signals are expected. GDBus's thread wakes the main thread only when a filter
 * waits for a mark the main thread has yet to hand over (behind a settle it has not
 * heard of), when the connection closed, and with a test's crash point armed. With 200
 * deaths at once that is one main-loop wake-up per SETTLE_LATE_MS instead of up to one
 * per signal. */
#define SETTLE_LATE_MS 20

/* how often a filter waiting for room in the bus socket looks whether the connection
 * closed meanwhile */
#define ROOM_POLL_MS 1000

typedef struct
{
  gatomicrefcount             ref_count;
  char                       *member;
  char                       *subject;
  ShimwatchSignalSettledFunc  settled;
  gpointer                    user_data;
  GDestroyNotify              destroy;
  /* under the ledger's mutex */
  gboolean                    commit_given;
  ShimwatchRecordCommit      *commit;
  gboolean                    done;        /* settled: queued for the main thread */
  gboolean                    sent;
} Entry;

struct _ShimwatchSignalLedger
{
  gatomicrefcount  ref_count;
  char            *interface_name;
  GMainContext    *context;
  GMutex           mutex;
  GCond            commit_given;     /* a filter waits on it: see n_waiting */
  guint            n_waiting;        /* filters waiting on commit_given */
  GHashTable      *entries;          /* "member\nsubject" -> Entry (not settled yet) */
  GPtrArray       *settled;          /* Entry, for the main thread */
  GSource         *settle_source;    /* the idle that settles now */
  GSource         *settle_timer;     /* main thread: armed while signals are expected */
  GDBusConnection *connection;       /* not owned: the one attached to, while open */
  int              fd;               /* its socket, or -1: polled by the filter only */
  gboolean         closed;
#ifdef SHIMWATCH_TEST_HOOKS
  guint            n_broadcasts;     /* tests: of commit_given */
  guint            n_wakeups;        /* tests: by GDBus's thread */
  gboolean         eager;            /* every settle wakes the main thread (crash points) */
  /* tests: a crash point waiting for what went out before it: the filter of any
   * message sent after @halt_serial reaches it first, before any mark (see halt()) */
  const char      *halt_step;        /* static, or NULL */
  guint32          halt_serial;
#endif
};

/* with a test's crash point armed, every settle wakes the main thread: a crash point
 * after a signal means "right after it went out" (never in the shipped daemon) */
static inline gboolean
is_eager (ShimwatchSignalLedger *ledger)
{
#ifdef SHIMWATCH_TEST_HOOKS
  return ledger->eager;
#else
  (void) ledger;
  return FALSE;
#endif
}

static Entry *
entry_ref (Entry *entry)
{
  g_atomic_ref_count_inc (&entry->ref_count);
  return entry;
}

static void
entry_unref (Entry *entry)
{
  if (entry == NULL || !g_atomic_ref_count_dec (&entry->ref_count))
    return;
  shimwatch_record_commit_free (entry->commit);
  if (entry->destroy != NULL)
    entry->destroy (entry->user_data);
  g_free (entry->member);
  g_free (entry->subject);
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
  ledger->context = g_main_context_ref_thread_default ();
  g_mutex_init (&ledger->mutex);
  g_cond_init (&ledger->commit_given);
  ledger->entries = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                           (GDestroyNotify) entry_unref);
  ledger->settled = g_ptr_array_new_with_free_func ((GDestroyNotify) entry_unref);
#ifdef SHIMWATCH_TEST_HOOKS
  ledger->eager = shimwatch_crash_point_any_armed ();
#endif
  ledger->fd = -1;
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
  if (ledger->settle_source != NULL)
    {
      g_source_destroy (ledger->settle_source);
      g_source_unref (ledger->settle_source);
    }
  if (ledger->settle_timer != NULL)
    {
      g_source_destroy (ledger->settle_timer);
      g_source_unref (ledger->settle_timer);
    }
  g_hash_table_unref (ledger->entries);
  g_ptr_array_unref (ledger->settled);
  g_mutex_clear (&ledger->mutex);
  g_cond_clear (&ledger->commit_given);
  g_main_context_unref (ledger->context);
  g_free (ledger->interface_name);
  g_free (ledger);
}

/* -- settling, on the main thread -------------------------------------------------------- */

/* the settled callbacks of what GDBus's thread settled so far; @from_source: the idle
 * it attached runs (else it stays attached, and finds less or nothing to do) */
static void
settle_all (ShimwatchSignalLedger *ledger,
            gboolean               from_source)
{
  g_autoptr(GPtrArray) settled = NULL;

  g_mutex_lock (&ledger->mutex);
  if (from_source)
    g_clear_pointer (&ledger->settle_source, g_source_unref);
  if (ledger->settled->len == 0)
    {
      g_mutex_unlock (&ledger->mutex);
      return;
    }
  settled = g_steal_pointer (&ledger->settled);
  ledger->settled = g_ptr_array_new_with_free_func ((GDestroyNotify) entry_unref);
  g_mutex_unlock (&ledger->mutex);

  for (guint i = 0; i < settled->len; i++)
    {
      Entry *entry = g_ptr_array_index (settled, i);

      if (!entry->sent)
        g_warning ("%s of %s was not written to the bus; its record says so, and the next "
                   "start of the service sends it", entry->member, entry->subject);
      /* g_debug() formats before anyone decides to drop it: not at every death */
      else if (!shimwatch_log_would_drop (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN))
        g_debug ("%s of %s went out%s", entry->member, entry->subject,
                 entry->commit != NULL ? " with its record marked" : "");
      if (entry->settled != NULL)
        entry->settled (entry->member, entry->subject, entry->sent,
                        g_steal_pointer (&entry->commit), entry->user_data);
    }
}

static gboolean
settle_cb (gpointer user_data)
{
  settle_all (user_data, TRUE);
  return G_SOURCE_REMOVE;
}

static gboolean
settle_timer_cb (gpointer user_data)
{
  ShimwatchSignalLedger *ledger = user_data;
  guint pending;

  settle_all (ledger, FALSE);
  g_mutex_lock (&ledger->mutex);
  pending = g_hash_table_size (ledger->entries) + ledger->settled->len;
  g_mutex_unlock (&ledger->mutex);
  if (pending > 0)
    return G_SOURCE_CONTINUE;
  g_clear_pointer (&ledger->settle_timer, g_source_unref);
  return G_SOURCE_REMOVE;
}

void
shimwatch_signal_ledger_settle_now (ShimwatchSignalLedger *ledger)
{
  /* only where the callbacks may run: the thread that runs the context */
  if (!g_main_context_acquire (ledger->context))
    return;
  settle_all (ledger, FALSE);
  g_main_context_release (ledger->context);
}

/* under the mutex; any thread: a filter waiting for an entry's commit (or its settle)
 * looks again. Only when one waits: GLib's g_cond_broadcast() is a futex syscall even
 * with no waiter, and most signals' commits are given before they are emitted, so the
 * filter never waits for them (three per dead shim on the main thread, two or three more
 * in GDBus's thread, for nothing). The filter counts itself in under the mutex before it
 * waits, so no broadcast it needs is skipped. */
static void
commit_given_locked (ShimwatchSignalLedger *ledger)
{
  if (ledger->n_waiting == 0)
    return;
#ifdef SHIMWATCH_TEST_HOOKS
  ledger->n_broadcasts++;
#endif
  g_cond_broadcast (&ledger->commit_given);
}

/* under the mutex; any thread: the main thread settles in its next turn */
static void
wake_locked (ShimwatchSignalLedger *ledger)
{
  if (ledger->settle_source == NULL)
    {
#ifdef SHIMWATCH_TEST_HOOKS
      if (!g_main_context_is_owner (ledger->context))
        ledger->n_wakeups++;
#endif
      /* the callback holds a reference: it may run after the last unref elsewhere */
      ledger->settle_source = g_idle_source_new ();
      g_source_set_priority (ledger->settle_source, G_PRIORITY_DEFAULT);
      g_source_set_static_name (ledger->settle_source, "shimwatch signal ledger");
      g_source_set_callback (ledger->settle_source, settle_cb,
                             shimwatch_signal_ledger_ref (ledger),
                             (GDestroyNotify) shimwatch_signal_ledger_unref);
      g_source_attach (ledger->settle_source, ledger->context);
    }
}

/* under the mutex; any thread. @wake: the main thread hears of it in its next turn, not
 * when it next asks (see SETTLE_LATE_MS) */
static void
settle_locked (ShimwatchSignalLedger *ledger,
               Entry                 *entry,
               gboolean               sent,
               gboolean               wake)
{
  g_autofree char *key = make_key (entry->member, entry->subject);

  entry->done = TRUE;
  entry->sent = sent;
  g_ptr_array_add (ledger->settled, entry_ref (entry));
  if (g_hash_table_lookup (ledger->entries, key) == entry)
    g_hash_table_remove (ledger->entries, key);
  commit_given_locked (ledger);
  if (wake || is_eager (ledger))
    wake_locked (ledger);
}

/* -- the filter, in GDBus's worker thread ------------------------------------------------ */

/* In GDBus's worker, right before a lifecycle signal's mark says "sent". GDBus writes the
 * message once the filters returned, without blocking; but on a socket the bus has not
 * drained, that write waits for room, after the mark: a SIGKILL of the service then loses
 * a signal whose mark says it went out, and no restart sends it again. So the mark waits
 * for room instead. A unix socket polls writable once at most a quarter of its send
 * buffer is queued, and then a lifecycle signal (a few hundred bytes) is taken whole at
 * once. FALSE: the socket failed or the connection closed; the message will not be
 * written. */
static gboolean
wait_for_room (ShimwatchSignalLedger *ledger,
               GDBusConnection       *connection,
               const Entry           *entry)
{
  struct pollfd pfd = { .fd = ledger->fd, .events = POLLOUT };
  gint64 since = g_get_monotonic_time ();
  gboolean warned = FALSE;

  if (ledger->fd < 0)
    return TRUE;
  for (;;)
    {
      int n = poll (&pfd, 1, ROOM_POLL_MS);

      if (n > 0)
        return (pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
      if (n < 0 && errno != EINTR)
        return TRUE;    /* cannot tell: GDBus writes, as it would have */
      if (g_dbus_connection_is_closed (connection))
        return FALSE;
      if (!warned && g_get_monotonic_time () - since >= DURABLE_WAIT_US)
        {
          g_warning ("%s of %s waits: the bus has not read from the service for %d s",
                     entry->member, entry->subject, (int) (DURABLE_WAIT_US / G_USEC_PER_SEC));
          warned = TRUE;
        }
    }
}

/* right before @message is written: wait until its pending mark is durable and the bus
 * socket has room for it, then one pwrite of the slot's state byte in the task's marks
 * file */
static GDBusMessage *
outgoing_filter (GDBusConnection *connection,
                 GDBusMessage    *message,
                 gboolean         incoming,
                 gpointer         user_data)
{
  ShimwatchSignalLedger *ledger = user_data;
  g_autoptr(GError) error = NULL;
  GVariant *body;
  const char *subject;
  g_autofree char *key = NULL;
  Entry *entry;
  ShimwatchRecordCommit *commit;
  gint64 deadline;
  gboolean durable;
  gboolean room;

#ifdef SHIMWATCH_TEST_HOOKS
  /* tests: only with a crash point armed */
  if (G_UNLIKELY (ledger->eager) && !incoming)
    {
      const char *halt_step;

      g_mutex_lock (&ledger->mutex);
      halt_step = ledger->halt_step != NULL &&
                  g_dbus_message_get_serial (message) > ledger->halt_serial
                  ? ledger->halt_step : NULL;
      g_mutex_unlock (&ledger->mutex);
      if (halt_step != NULL)
        shimwatch_crash_point (halt_step);
    }
#endif
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
  if (entry == NULL || entry->done)
    {
      g_mutex_unlock (&ledger->mutex);
      return message;
    }
  entry_ref (entry);
  /* its mark waits behind a signal of the task that went out: the main thread must hear
   * of that to hand this one's over */
  if (!entry->commit_given && ledger->settled->len > 0)
    wake_locked (ledger);
  deadline = g_get_monotonic_time () + DURABLE_WAIT_US;
  ledger->n_waiting++;
  while (!entry->commit_given && !entry->done &&
         g_cond_wait_until (&ledger->commit_given, &ledger->mutex, deadline))
    ;
  ledger->n_waiting--;
  if (!entry->commit_given && !entry->done)
    g_warning ("%s of %s goes out before its record was written", entry->member,
               entry->subject);
  commit = entry->done ? NULL : entry->commit;
  g_mutex_unlock (&ledger->mutex);

  /* the commit stays the entry's: only the main thread frees it, after settling */
  durable = commit != NULL && shimwatch_records_commit_wait (commit, deadline, &error);
  if (commit != NULL && !durable)
    g_warning ("%s of %s: its record may not survive a crash of the machine: %s",
               entry->member, entry->subject, error->message);

  room = wait_for_room (ledger, connection, entry);

  g_mutex_lock (&ledger->mutex);
  if (!entry->done && !room)
    /* not written: the record keeps saying "pending", and the next start sends it */
    settle_locked (ledger, entry, FALSE, TRUE);
  else if (!entry->done)
    {
      /* nothing else between the mark and GDBus's sendmsg(): every instruction there
       * is a moment in which a SIGKILL would lose the signal (settle_cb logs) */
      if (entry->commit != NULL)
        shimwatch_records_commit (entry->commit);
      settle_locked (ledger, entry, TRUE, FALSE);
    }
  g_mutex_unlock (&ledger->mutex);
  entry_unref (entry);
  return message;
}

static void
connection_closed_cb (GDBusConnection *connection,
                      gboolean         remote_peer_vanished,
                      GError          *error,
                      gpointer         user_data)
{
  ShimwatchSignalLedger *ledger = user_data;
  g_autoptr(GPtrArray) open_entries = g_ptr_array_new ();
  GHashTableIter iter;
  gpointer entry;

  g_mutex_lock (&ledger->mutex);
  ledger->closed = TRUE;
  g_hash_table_iter_init (&iter, ledger->entries);
  while (g_hash_table_iter_next (&iter, NULL, &entry))
    g_ptr_array_add (open_entries, entry);
  for (guint i = 0; i < open_entries->len; i++)
    settle_locked (ledger, g_ptr_array_index (open_entries, i), FALSE, TRUE);
  g_mutex_unlock (&ledger->mutex);
}

guint
shimwatch_signal_ledger_attach (ShimwatchSignalLedger *ledger,
                                GDBusConnection       *connection)
{
  GIOStream *stream = g_dbus_connection_get_stream (connection);

  g_mutex_lock (&ledger->mutex);
  ledger->connection = connection;
  ledger->closed = g_dbus_connection_is_closed (connection);
  if (G_IS_SOCKET_CONNECTION (stream))
    ledger->fd = g_socket_get_fd (g_socket_connection_get_socket (G_SOCKET_CONNECTION (stream)));
  g_mutex_unlock (&ledger->mutex);
  g_signal_connect_data (connection, "closed", G_CALLBACK (connection_closed_cb),
                         shimwatch_signal_ledger_ref (ledger),
                         (GClosureNotify) (void (*) (void)) shimwatch_signal_ledger_unref, 0);
  /* the ledger outlives any late run of the filter: GDBus drops its reference only once
   * the filter can no longer run */
  return g_dbus_connection_add_filter (connection, outgoing_filter,
                                       shimwatch_signal_ledger_ref (ledger),
                                       (GDestroyNotify) shimwatch_signal_ledger_unref);
}

void
shimwatch_signal_ledger_expect (ShimwatchSignalLedger      *ledger,
                                const char                 *member,
                                const char                 *subject,
                                ShimwatchSignalSettledFunc  settled,
                                gpointer                    user_data,
                                GDestroyNotify              destroy)
{
  Entry *entry = g_new0 (Entry, 1);
  Entry *old;
  char *key = make_key (member, subject);

  g_atomic_ref_count_init (&entry->ref_count);
  entry->member = g_strdup (member);
  entry->subject = g_strdup (subject);
  entry->settled = settled;
  entry->user_data = user_data;
  entry->destroy = destroy;

  g_mutex_lock (&ledger->mutex);
  old = g_hash_table_lookup (ledger->entries, key);
  if (old != NULL)
    settle_locked (ledger, old, FALSE, TRUE);
  g_hash_table_insert (ledger->entries, key, entry_ref (entry));
  /* nothing will be written: settled at once (in the next turn) */
  if (ledger->connection == NULL || ledger->closed)
    settle_locked (ledger, entry, FALSE, TRUE);
  g_mutex_unlock (&ledger->mutex);
  entry_unref (entry);
  /* on the main thread, like every call but the filter */
  if (ledger->settle_timer == NULL && !is_eager (ledger))
    {
      ledger->settle_timer = g_timeout_source_new (SETTLE_LATE_MS);
      g_source_set_static_name (ledger->settle_timer, "shimwatch signal ledger, late");
      g_source_set_callback (ledger->settle_timer, settle_timer_cb,
                             shimwatch_signal_ledger_ref (ledger),
                             (GDestroyNotify) shimwatch_signal_ledger_unref);
      g_source_attach (ledger->settle_timer, ledger->context);
    }
}

void
shimwatch_signal_ledger_set_commit (ShimwatchSignalLedger *ledger,
                                    const char            *member,
                                    const char            *subject,
                                    ShimwatchRecordCommit *commit)
{
  g_autofree char *key = make_key (member, subject);
  Entry *entry;

  g_mutex_lock (&ledger->mutex);
  entry = g_hash_table_lookup (ledger->entries, key);
  if (entry != NULL && !entry->commit_given)
    {
      entry->commit = g_steal_pointer (&commit);
      entry->commit_given = TRUE;
      commit_given_locked (ledger);
    }
  g_mutex_unlock (&ledger->mutex);
  /* settled before its record came (the connection closed): the record keeps saying
   * "not sent" */
  shimwatch_record_commit_free (commit);
}

#ifdef SHIMWATCH_TEST_HOOKS
guint
shimwatch_signal_ledger_get_n_wakeups (ShimwatchSignalLedger *ledger)
{
  guint n;

  g_mutex_lock (&ledger->mutex);
  n = ledger->n_wakeups;
  g_mutex_unlock (&ledger->mutex);
  return n;
}

guint
shimwatch_signal_ledger_get_n_broadcasts (ShimwatchSignalLedger *ledger)
{
  guint n;

  g_mutex_lock (&ledger->mutex);
  n = ledger->n_broadcasts;
  g_mutex_unlock (&ledger->mutex);
  return n;
}
#endif

guint
shimwatch_signal_ledger_get_n_pending (ShimwatchSignalLedger *ledger)
{
  guint n;

  g_mutex_lock (&ledger->mutex);
  n = g_hash_table_size (ledger->entries) + ledger->settled->len;
  g_mutex_unlock (&ledger->mutex);
  return n;
}

#ifdef SHIMWATCH_TEST_HOOKS
/* tests: A crash point that waits for the messages sent so far to be written must not
 * let any later one be marked meanwhile: a signal is marked "sent" in the filter, right
 * before GDBus writes it, and a crash reached on the main thread between another
 * signal's mark and its write (GDBus's worker preempted there) loses that signal for
 * good, its mark saying it went out. So from here on, the filter of any message sent
 * later reaches the crash point itself, before any mark. Messages of GDBus's own
 * threads may have later serials: they do not matter, nothing of them is marked. Every
 * message sent before is queued, being written or written, which the flush that follows
 * waits for. Returns a reference to the connection, or NULL if it is closed. */
static GDBusConnection *
halt (ShimwatchSignalLedger *ledger,
      const char            *step)
{
  GDBusConnection *connection = NULL;

  g_mutex_lock (&ledger->mutex);
  if (ledger->connection != NULL && !ledger->closed)
    {
      connection = g_object_ref (ledger->connection);
      /* the signals are sent from this thread: the last serial it was given */
      ledger->halt_serial = g_dbus_connection_get_last_serial (connection);
      ledger->halt_step = step;
    }
  g_mutex_unlock (&ledger->mutex);
  return connection;
}

static void
flushed_then_crash_cb (GObject      *source,
                       GAsyncResult *result,
                       gpointer      user_data)
{
  g_autofree char *step = user_data;
  g_autoptr(GError) error = NULL;

  if (!g_dbus_connection_flush_finish (G_DBUS_CONNECTION (source), result, &error))
    g_debug ("flushing the bus connection: %s", error->message);
  shimwatch_crash_point (step);
}

/* Reaches the crash point @step once what GDBus has queued is written to the bus. Only
 * for a test's crash point that means "the signal was sent": a signal is settled right
 * before its write. Asynchronous: GDBus's worker may be waiting in the filter for a
 * record the main thread has yet to hand over. */
void
shimwatch_signal_ledger_crash_point_after_write (ShimwatchSignalLedger *ledger,
                                                 const char            *step)
{
  g_autoptr(GDBusConnection) connection = halt (ledger, step);

  if (connection == NULL)
    {
      shimwatch_crash_point (step);
      return;
    }
  g_dbus_connection_flush (connection, NULL, flushed_then_crash_cb, g_strdup (step));
}

static void
flushed_cb (GObject      *source,
            GAsyncResult *result,
            gpointer      user_data)
{
  g_autoptr(GError) error = NULL;

  if (!g_dbus_connection_flush_finish (G_DBUS_CONNECTION (source), result, &error))
    g_debug ("flushing the bus connection: %s", error->message);
  *(gboolean *) user_data = TRUE;
}

/* Reaches the crash point @step once every signal emitted before is written to the bus
 * (a signal is marked sent right before GDBus writes it, and the write itself is
 * asynchronous): so that a test's crash point before a signal means "this one's mark is
 * pending, those before went out". Only for an armed crash point: it iterates the main
 * context, whose idles may hand records to signals queued before. */
void
shimwatch_signal_ledger_crash_point_after_earlier (ShimwatchSignalLedger *ledger,
                                                   const char            *step)
{
  g_autoptr(GDBusConnection) connection = NULL;
  gboolean flushed = FALSE;

  if (!shimwatch_crash_point_armed (step))
    return;
  connection = halt (ledger, step);
  if (connection != NULL)
    {
      g_dbus_connection_flush (connection, NULL, flushed_cb, &flushed);
      while (!flushed)
        g_main_context_iteration (ledger->context, TRUE);
    }
  shimwatch_crash_point (step);
}
#endif /* SHIMWATCH_TEST_HOOKS */
