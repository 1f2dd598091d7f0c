/* SPDX-License-Identifier: Apache-2.0
 *
 * Task records: <runtime dir>/records/<namespace>/<id>.json, written atomically (temp
 * file, fsync, rename, fsync of the directory) at every change a restarted service needs
 * to know about, removed when the task is completely gone. A record that does not parse
 * is moved aside (<id>.json.broken-<time>) with a log line, never dropped silently.
 */
#pragma once

#include <glib.h>

#include "shimwatch-commit-queue.h"
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

/* A record that must change at the very moment something else happens (a signal goes
 * out). @record names the signal in pending_signal and sets its flag ahead of time.
 * prepare() writes it like shimwatch_records_write(), with "pending_sent": 0, and maps
 * it; commit() turns that digit into 1 with a single store to the mapped page: no
 * syscall, nothing to fail, callable from any thread. shimwatch_records_load() takes
 * the flag of a pending signal not sent for unset. commit_sync() makes the mark survive
 * a crash of the machine (the service's own death never loses it); free() unmaps.
 * With a @queue, prepare() writes and renames at once and leaves the syncs to the group
 * commit: commit_wait() (any thread but the main one) waits until they are done;
 * commit_sync_later() has the commit thread sync the mark, then frees the commit (at once
 * with a volatile @queue: nothing to sync). */
typedef struct _ShimwatchRecordCommit ShimwatchRecordCommit;

ShimwatchRecordCommit *shimwatch_records_prepare     (const char            *records_dir,
                                                      const ShimwatchRecord *record,
                                                      ShimwatchCommitQueue  *queue,
                                                      GError               **error);
ShimwatchRecordCommit *shimwatch_records_prepare_encoded (const char           *path,
                                                          GBytes               *bytes,
                                                          ShimwatchCommitQueue *queue,
                                                          GError              **error);
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
gboolean   shimwatch_records_remove_queued (const char           *records_dir,
                                            const char           *namespace_,
                                            const char           *id,
                                            ShimwatchCommitQueue *queue,
                                            GError              **error);
/* a record that reads well but cannot be trusted: moved aside as a broken one is */
void       shimwatch_records_set_aside (const char         *records_dir,
                                        const char         *namespace_,
                                        const char         *id,
                                        const char         *reason);
/* every readable record (a regular file of at most 64 KiB), flags of pending signals not sent unset; broken ones are moved aside and their "ns/id" (when the file
 * name tells it) added to broken_keys */
GPtrArray *shimwatch_records_load   (const char            *records_dir,
                                     GPtrArray             *broken_keys);

/* start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or 0 */
guint64    shimwatch_process_start_time (guint32            pid);

G_END_DECLS
