/* SPDX-License-Identifier: Apache-2.0
 *
 * Task records: <runtime dir>/records/<namespace>/<id>.json, written atomically (temp
 * file, fsync, rename, fsync of the directory) when what a restarted service needs to
 * know of the task changes, removed when the task is completely gone. Beside each, its
 * signal marks, <id>.marks (shimwatch-marks.h), changed in place at every lifecycle
 * signal; the record is read with its marks laid over it. A record that does not parse
 * is moved aside (<id>.json.broken-<time>) with a log line, never dropped silently.
 */
#pragma once

#include <glib.h>

#include "shimwatch-commit-queue.h"
#include "shimwatch-marks.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

char      *shimwatch_records_path   (const char            *records_dir,
                                     const char            *namespace_,
                                     const char            *id);
gboolean   shimwatch_records_write  (const char            *records_dir,
                                     const ShimwatchRecord *record,
                                     GError               **error);
/* an encoded record to its path; with a @queue visible at once, its syncs shared with
 * the turn's other writes (see shimwatch-commit-queue.h) */
gboolean   shimwatch_records_write_encoded (const char           *path,
                                            GBytes               *bytes,
                                            ShimwatchCommitQueue *queue,
                                            GError              **error);

/* A signal's mark, which must change at the very moment the signal goes out.
 * prepare_mark() writes @mark (pending: the record's flag of the signal does not hold
 * yet) into @slot of the task's marks file (shimwatch-marks.h), NULL if it cannot (the
 * signal then goes out unmarked); commit() marks it sent with one pwrite() of the slot's
 * state byte, callable from any thread. shimwatch_records_load() lays the marks over the record: the flag of a
 * signal holds only if its mark says sent. commit_sync() makes the mark survive a crash
 * of the machine (the service's own death never loses it); free() lets the file go.
 * With a @queue, prepare_mark() leaves the fdatasync of the pending mark to the group
 * commit: commit_wait() (any thread but the main one) waits until it is done (at once on
 * a volatile @queue); commit_sync_later() has the commit thread sync the sent mark, then
 * frees the commit (at once with a volatile @queue: nothing to sync). Without a @queue,
 * prepare_mark() syncs at once. */
typedef struct _ShimwatchRecordCommit ShimwatchRecordCommit;

ShimwatchRecordCommit *shimwatch_records_prepare_mark (ShimwatchMarksFile   *marks,
                                                       guint                 slot,
                                                       const ShimwatchMark  *mark,
                                                       ShimwatchCommitQueue *queue);
void                   shimwatch_records_commit      (ShimwatchRecordCommit *commit);
gboolean               shimwatch_records_commit_sync (ShimwatchRecordCommit *commit,
                                                      GError               **error);
gboolean               shimwatch_records_commit_wait (ShimwatchRecordCommit *commit,
                                                      gint64                 deadline,
                                                      GError               **error);
void                   shimwatch_records_commit_sync_later (ShimwatchRecordCommit *commit,
                                                            ShimwatchCommitQueue  *queue);
void                   shimwatch_record_commit_free  (ShimwatchRecordCommit *commit);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchRecordCommit, shimwatch_record_commit_free)

gboolean   shimwatch_records_remove (const char            *records_dir,
                                     const char            *namespace_,
                                     const char            *id,
                                     GError               **error);
/* @may_be_last: no other record of the namespace is known to be there, so its directory
 * is removed if it is empty now (an rmdir that would fail ENOTEMPTY is not tried) */
gboolean   shimwatch_records_remove_queued (const char           *records_dir,
                                            const char           *namespace_,
                                            const char           *id,
                                            gboolean              may_be_last,
                                            ShimwatchCommitQueue *queue,
                                            GError              **error);
/* a record that reads well but cannot be trusted: moved aside as a broken one is */
void       shimwatch_records_set_aside (const char         *records_dir,
                                        const char         *namespace_,
                                        const char         *id,
                                        const char         *reason);
/* every readable record (a regular file of at most 64 KiB) with its marks laid over it
 * (flags of signals not marked sent unset; marks that cannot be read moved aside, logged);
 * broken records are moved aside and their "ns/id" (when the file name tells it) added to
 * broken_keys; marks without a record are removed */
GPtrArray *shimwatch_records_load   (const char            *records_dir,
                                     GPtrArray             *broken_keys);

/* start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or 0 */
guint64    shimwatch_process_start_time (guint32            pid);

G_END_DECLS
