/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchRecordCommitter: every write of a task record, in order, without making the
 * main loop wait.
 *
 * A record is written (and renamed into place) when asked, and made durable by the
 * group commit with everything else written in the same turn of the main loop
 * (shimwatch-commit-queue.h). A signal's mark (its slot in the task's marks file, see
 * shimwatch-marks.h: "pending", with the status and exit that go with it) is written in
 * place, and handed to the signal ledger, whose filter marks it sent right before the
 * signal is written to the bus (shimwatch-signal-ledger.h). The record itself is not
 * written for a signal, unless the task has none yet or the mark cannot hold what
 * changed; each record names the last mark it includes.
 *
 * One rule keeps that exact: while a task's mark waits for its signal, nothing replaces
 * it. A record written over it would either claim the signal (lost if the service dies
 * before the signal goes out) or drop it (sent twice). So what a task asks for meanwhile
 * (a newer record, another signal's mark, the removal) waits, in order, until the signal
 * is settled; of several plain writes only the newest is made. Waiting is for the files
 * only: the signal itself is emitted at once, and the ledger's filter holds it until its
 * mark is there.
 *
 * The removal of a record after TaskDelete waits until that signal's mark says sent
 * (GDBus writes it next: a restart would not send it again either), or, for a signal
 * that went out unmarked, until it is really written (a flush of the connection); if the
 * signal never went out the record stays, so the next start of the service sends it.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-commit-queue.h"
#include "shimwatch-records.h"
#include "shimwatch-signal-ledger.h"

G_BEGIN_DECLS

typedef struct _ShimwatchRecordCommitter ShimwatchRecordCommitter;

/* the ledger must be attached to the connection the signals go out on, if any. Records
 * on a tmpfs (/run) are not synced: the queue is volatile (shimwatch-commit-queue.h) */
ShimwatchRecordCommitter *shimwatch_record_committer_new  (const char               *records_dir,
                                                           ShimwatchSignalLedger    *ledger);
void                      shimwatch_record_committer_free (ShimwatchRecordCommitter *self);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchRecordCommitter, shimwatch_record_committer_free)

/* where the signals go out: what a record's removal flushes before it */
void     shimwatch_record_committer_set_connection (ShimwatchRecordCommitter *self,
                                                    GDBusConnection          *connection);

/* a record without a signal */
gboolean shimwatch_record_committer_save   (ShimwatchRecordCommitter *self,
                                            const ShimwatchRecord    *record,
                                            GError                  **error);
/* Right before the signal record->pending_signal about the object @subject is emitted:
 * @record has its flag set and pending_sent FALSE. @crash_point (a static string, or
 * NULL) is reached once the signal is settled (sent or not). FALSE: the record could not be encoded or written
 * (@error), and the signal goes out unmarked. */
gboolean shimwatch_record_committer_expect (ShimwatchRecordCommitter *self,
                                            const ShimwatchRecord    *record,
                                            const char               *subject,
                                            const char               *crash_point,
                                            GError                  **error);
/* the task is completely gone */
void     shimwatch_record_committer_remove (ShimwatchRecordCommitter *self,
                                            const char               *namespace_,
                                            const char               *id);

/* no task has a write waiting, no signal is unsettled, nothing is unsynced */
gboolean shimwatch_record_committer_is_idle (ShimwatchRecordCommitter *self);
/* at shutdown: runs the main context until idle or @timeout_ms; TRUE if idle */
gboolean shimwatch_record_committer_drain   (ShimwatchRecordCommitter *self,
                                             guint                     timeout_ms);
ShimwatchCommitQueue *shimwatch_record_committer_get_queue (ShimwatchRecordCommitter *self);
#ifdef SHIMWATCH_TEST_HOOKS
/* tests (-Dtest_hooks): how many removals waited for a flush of the connection */
guint    shimwatch_record_committer_get_n_flushes (ShimwatchRecordCommitter *self);
#endif

G_END_DECLS
