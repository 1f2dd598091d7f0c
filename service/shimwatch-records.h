/* SPDX-License-Identifier: Apache-2.0
 *
 * Task records: <runtime dir>/records/<namespace>/<id>.json, written atomically (temp
 * file, fsync, rename, fsync of the directory) at every change a restarted service needs
 * to know about, removed when the task is completely gone. A record that does not parse
 * is moved aside (<id>.json.broken-<time>) with a log line, never dropped silently.
 */
#pragma once

#include <glib.h>

#include "shimwatch-wire.h"

G_BEGIN_DECLS

char      *shimwatch_records_path   (const char            *records_dir,
                                     const char            *namespace_,
                                     const char            *id);
gboolean   shimwatch_records_write  (const char            *records_dir,
                                     const ShimwatchRecord *record,
                                     GError               **error);

/* A change in two steps, for a record that must change at the very moment something
 * else happens (a signal goes out). prepare() writes and fsyncs a temp file beside the
 * record, and commit() renames it into place; prepare_removal() prepares nothing, and
 * commit() removes the record (and its namespace directory once empty). commit() may be
 * called from any thread; free() removes the temp file of a change never committed.
 * shimwatch_records_sync() then makes the change survive a crash of the machine. */
typedef struct _ShimwatchRecordCommit ShimwatchRecordCommit;

ShimwatchRecordCommit *shimwatch_records_prepare     (const char            *records_dir,
                                                      const ShimwatchRecord *record,
                                                      GError               **error);
ShimwatchRecordCommit *shimwatch_records_prepare_removal (const char        *records_dir,
                                                          const char        *namespace_,
                                                          const char        *id);
gboolean               shimwatch_records_commit      (ShimwatchRecordCommit *commit,
                                                      GError               **error);
void                   shimwatch_record_commit_free  (ShimwatchRecordCommit *commit);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchRecordCommit, shimwatch_record_commit_free)

/* fsync of the namespace directory (of the records directory if it is gone) */
void       shimwatch_records_sync   (const char            *records_dir,
                                     const char            *namespace_);
gboolean   shimwatch_records_remove (const char            *records_dir,
                                     const char            *namespace_,
                                     const char            *id,
                                     GError               **error);
/* every readable record; broken ones are moved aside and their "ns/id" (when the file
 * name tells it) added to broken_keys */
GPtrArray *shimwatch_records_load   (const char            *records_dir,
                                     GPtrArray             *broken_keys);

/* start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or 0 */
guint64    shimwatch_process_start_time (guint32            pid);

G_END_DECLS
