/* SPDX-License-Identifier: Apache-2.0
 *
 * Exactly once across a SIGKILL of the service: a task's record must say "TaskExit was
 * sent" if and only if the signal reached the bus. GDBus writes messages from its worker
 * thread, so a record renamed on the main thread before (or after) the emission leaves a
 * thread switch between the two facts, and a SIGKILL under load lands in it: a signal
 * lost (or sent twice) after a restart.
 *
 * The ledger closes that gap. The caller writes the signal's mark ahead of time, into
 * the task's marks file, as "pending" (shimwatch_records_prepare_mark()), hands it
 * to the ledger with the signal it belongs to, and emits the signal. An outgoing message
 * filter, which GDBus runs in its worker thread right before it writes the message to
 * the socket, marks it "sent" with one pwrite() of the slot's state byte into the page
 * cache (on a disk file system the mapped page of an earlier version took a write fault
 * there, as the group commit's msync had cleaned it: no more). What remains between
 * the two facts is GDBus's write of the message in the same thread: no file-system call
 * in which a SIGKILL could wait (an earlier version renamed the record there, and a
 * rename can wait for the file system's journal for milliseconds under load).
 *
 * Nothing here makes the main thread wait. The pending mark is made durable by the group
 * commit (shimwatch-commit-queue.h) after the emission; the filter holds the message
 * until then, so a signal is never marked sent in a mark that a crash of the machine
 * could still lose. The filter holds every message after it too, which keeps the bus
 * order of everything the service emits. The main thread learns the outcome from a
 * callback: the ledger confirms each signal asynchronously.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-records.h"

G_BEGIN_DECLS

typedef struct _ShimwatchSignalLedger ShimwatchSignalLedger;

/* on the ledger's main context. @sent: the mark is set and the message goes out right
 * after; FALSE: it never will (no connection, connection closed, the record never came).
 * @commit (transfer full, may be NULL): the record that was to be marked. */
typedef void (*ShimwatchSignalSettledFunc) (const char            *member,
                                            const char            *subject,
                                            gboolean               sent,
                                            ShimwatchRecordCommit *commit,
                                            gpointer               user_data);

/* settled callbacks run on the thread-default main context of the caller */
ShimwatchSignalLedger *shimwatch_signal_ledger_new    (const char            *interface_name);
ShimwatchSignalLedger *shimwatch_signal_ledger_ref    (ShimwatchSignalLedger *ledger);
void                   shimwatch_signal_ledger_unref  (ShimwatchSignalLedger *ledger);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchSignalLedger, shimwatch_signal_ledger_unref)

/* watches @connection's outgoing signals of the ledger's interface; returns the filter
 * id. A closed connection settles whatever was not sent. */
guint    shimwatch_signal_ledger_attach  (ShimwatchSignalLedger *ledger,
                                          GDBusConnection       *connection);

/* Right before the signal @member whose first argument is the object path @subject is
 * emitted. The filter holds that message until the record is given (set_commit) and
 * durable, then marks it. @settled (may be NULL) runs once either way, unless the
 * ledger goes first; @destroy (may be NULL) frees @user_data after that. */
void     shimwatch_signal_ledger_expect  (ShimwatchSignalLedger      *ledger,
                                          const char                 *member,
                                          const char                 *subject,
                                          ShimwatchSignalSettledFunc  settled,
                                          gpointer                    user_data,
                                          GDestroyNotify              destroy);
/* the record to mark (taken); NULL: none could be written, the signal goes out unmarked */
void     shimwatch_signal_ledger_set_commit (ShimwatchSignalLedger *ledger,
                                             const char            *member,
                                             const char            *subject,
                                             ShimwatchRecordCommit *commit);
/* On the ledger's main context: the settled callbacks of the signals GDBus's thread has
 * settled so far run now, not in the next turn of the main loop (which still comes, and
 * finds less to do). */
void     shimwatch_signal_ledger_settle_now (ShimwatchSignalLedger *ledger);
/* how many expected signals are not settled yet */
guint    shimwatch_signal_ledger_get_n_pending (ShimwatchSignalLedger *ledger);

#ifdef SHIMWATCH_TEST_HOOKS
/* tests (-Dtest_hooks): how often another thread woke the main context to settle */
guint    shimwatch_signal_ledger_get_n_wakeups (ShimwatchSignalLedger *ledger);
/* tests: how often a filter waiting for a commit was told to look again */
guint    shimwatch_signal_ledger_get_n_broadcasts (ShimwatchSignalLedger *ledger);
/* tests: the crash point @step (a static string) once what was sent so far is written;
 * from the call on, no later signal is marked sent: the filter of any message sent later
 * reaches the crash point first */
void     shimwatch_signal_ledger_crash_point_after_write (ShimwatchSignalLedger *ledger,
                                                          const char            *step);

/* tests: the crash point @step (a static string) once the signals emitted before are
 * written (armed only); no later signal is marked sent meanwhile, as above */
void     shimwatch_signal_ledger_crash_point_after_earlier (ShimwatchSignalLedger *ledger,
                                                            const char            *step);
#else
/* without test hooks there are no crash points: nothing to wait for */
static inline void
shimwatch_signal_ledger_crash_point_after_write (ShimwatchSignalLedger *ledger,
                                                 const char            *step)
{
  (void) ledger;
  (void) step;
}

static inline void
shimwatch_signal_ledger_crash_point_after_earlier (ShimwatchSignalLedger *ledger,
                                                   const char            *step)
{
  (void) ledger;
  (void) step;
}
#endif

G_END_DECLS
