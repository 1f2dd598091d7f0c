/* SPDX-License-Identifier: Apache-2.0
 *
 * Exactly once across a SIGKILL of the service: a task's record must say "TaskExit was
 * sent" if and only if the signal reached the bus. GDBus writes messages from its worker
 * thread, so a record renamed on the main thread before (or after) the emission leaves a
 * thread switch between the two facts, and a SIGKILL under load lands in it: a signal
 * lost (or sent twice) after a restart.
 *
 * The ledger closes that gap. The caller writes the new record ahead of time, its
 * signal marked "not sent" (shimwatch_records_prepare()), hands it to the ledger with
 * the signal it belongs to, and emits the signal. An outgoing message filter, which
 * GDBus runs in its worker thread right before it writes the message to the socket,
 * marks it "sent" with one store to the record's mapped page. What remains between the
 * two facts is a few instructions before the sendmsg(2) in the same thread: no syscall
 * in which a SIGKILL could wait (an earlier version renamed the record there, and a
 * rename can wait for the file system's journal for milliseconds under load).
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

/* after the connection was flushed: whether the signal went out, and so its record is
 * marked (then made durable). A signal that never went out (no connection, connection
 * closed) leaves its record marked "not sent", so a restarted service sends it. Logs
 * either way. */
gboolean shimwatch_signal_ledger_settle  (ShimwatchSignalLedger *ledger,
                                          const char            *member,
                                          const char            *subject);

G_END_DECLS
