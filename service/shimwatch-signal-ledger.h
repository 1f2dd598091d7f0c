/* SPDX-License-Identifier: Apache-2.0
 *
 * Exactly once across a SIGKILL of the service: a task's record must say "TaskExit was
 * sent" if and only if the signal reached the bus. GDBus writes messages from its worker
 * thread, so a record renamed on the main thread before (or after) the emission leaves a
 * thread switch between the two facts, and a SIGKILL under load lands in it: a signal
 * lost (or sent twice) after a restart.
 *
 * The ledger closes that gap. The caller prepares the new record (a fsync'd temp file),
 * hands it to the ledger with the signal it belongs to, and emits the signal. An outgoing
 * message filter, which GDBus runs in its worker thread right before it writes the
 * message to the socket, renames the record into place. What remains between the two
 * facts is a rename(2) and a sendmsg(2) in the same thread.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-records.h"

G_BEGIN_DECLS

typedef struct _ShimwatchSignalLedger ShimwatchSignalLedger;

ShimwatchSignalLedger *shimwatch_signal_ledger_new    (const char            *interface_name);
ShimwatchSignalLedger *shimwatch_signal_ledger_ref    (ShimwatchSignalLedger *ledger);
void                   shimwatch_signal_ledger_unref  (ShimwatchSignalLedger *ledger);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchSignalLedger, shimwatch_signal_ledger_unref)

/* watches @connection's outgoing signals of the ledger's interface; returns the filter id */
guint    shimwatch_signal_ledger_attach  (ShimwatchSignalLedger *ledger,
                                          GDBusConnection       *connection);

/* @commit (taken) is committed when the signal @member whose first argument is the
 * object path @subject is written to the bus */
void     shimwatch_signal_ledger_expect  (ShimwatchSignalLedger *ledger,
                                          const char            *member,
                                          const char            *subject,
                                          ShimwatchRecordCommit *commit);

/* after the connection was flushed: TRUE if the signal went out and its record is in
 * place. FALSE if it never went out (no connection, connection closed): the prepared
 * record is dropped, so a restarted service sends the signal again. FALSE too if it went
 * out but the rename failed (the error says which). */
gboolean shimwatch_signal_ledger_settle  (ShimwatchSignalLedger *ledger,
                                          const char            *member,
                                          const char            *subject,
                                          GError               **error);

G_END_DECLS
