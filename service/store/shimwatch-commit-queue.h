/* SPDX-License-Identifier: Apache-2.0
 *
 * Group commit: the fsyncs of every file written in one turn of the main loop, done
 * together in one thread, so that the main loop never waits for a disk.
 *
 * The main thread writes a file (a task record: a temp file renamed over the old one)
 * and hands the still-open descriptor and its directory to the queue. Everything handed
 * over during one turn of the main loop forms one batch; as the turn ends, before the
 * loop polls again, the batch goes to the commit thread, which syncs each file once (fdatasync) and each
 * directory whose entries changed once (fsync), however many files it holds. Then every
 * ticket of the batch is durable. Whoever must not act before a file is on disk (the
 * signal ledger, before it marks a signal sent) waits for its ticket, in its own thread;
 * the main thread is told through a callback.
 *
 * A file that the service has written (and renamed) is already what a restarted service
 * reads after a SIGKILL, durable or not: the page cache outlives the process. What the
 * ticket adds is survival of a crash of the whole machine.
 *
 * On a file system whose content does not survive the machine anyway (tmpfs, ramfs: /run,
 * where the records live in production) there is nothing to sync: a volatile queue makes
 * every ticket durable when it is added, and nobody waits for a thread.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _ShimwatchCommitQueue  ShimwatchCommitQueue;
typedef struct _ShimwatchCommitTicket ShimwatchCommitTicket;

/* @done (may be NULL) runs on the queue's main context once the ticket is settled */
typedef void (*ShimwatchCommitDoneFunc) (ShimwatchCommitTicket *ticket,
                                         gpointer               user_data);
/* runs in the commit thread, before the syncs of the batch it was added to */
typedef void (*ShimwatchCommitJobFunc)  (gpointer               data);

/* batches end with the turns of @context (NULL: the thread-default main context) */
ShimwatchCommitQueue  *shimwatch_commit_queue_new   (GMainContext          *context);
/* syncs what is still queued, then stops the thread */
void                   shimwatch_commit_queue_free  (ShimwatchCommitQueue  *queue);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCommitQueue, shimwatch_commit_queue_free)

/* @fd (taken, may be -1) was written; @dir (may be NULL) had an entry added, replaced
 * or removed. Main thread only. */
ShimwatchCommitTicket *shimwatch_commit_queue_add   (ShimwatchCommitQueue  *queue,
                                                     int                    fd,
                                                     const char            *dir,
                                                     ShimwatchCommitDoneFunc done,
                                                     gpointer               user_data);
/* @func (@data) runs in the commit thread with the next batch (e.g. an msync), and
 * @destroy after it. Main thread only. */
void                   shimwatch_commit_queue_add_job (ShimwatchCommitQueue  *queue,
                                                       ShimwatchCommitJobFunc func,
                                                       gpointer               data,
                                                       GDestroyNotify         destroy);
/* hand the current batch over now instead of at the end of the turn */
void                   shimwatch_commit_queue_flush (ShimwatchCommitQueue  *queue);
/* blocks until everything handed over is synced: at shutdown, and in tests */
void                   shimwatch_commit_queue_wait_idle (ShimwatchCommitQueue *queue);
/* nothing queued, nothing being synced */
gboolean               shimwatch_commit_queue_is_idle (ShimwatchCommitQueue *queue);
/* TRUE: the queue's files live on a file system that does not outlive the machine, so
 * nothing is synced: tickets are durable when added (their @done still runs on the main
 * context, later). Main thread only, before anything is added. */
void                   shimwatch_commit_queue_set_volatile (ShimwatchCommitQueue *queue,
                                                            gboolean              is_volatile);
gboolean               shimwatch_commit_queue_is_volatile  (ShimwatchCommitQueue *queue);
/* whether @path (or, while it does not exist, the nearest directory above it) is on a
 * file system kept only in memory: tmpfs or ramfs */
gboolean               shimwatch_commit_path_is_volatile   (const char           *path);
#ifdef SHIMWATCH_TEST_HOOKS
/* tests (-Dtest_hooks): how many batches the thread has synced */
guint64                shimwatch_commit_queue_get_n_batches (ShimwatchCommitQueue *queue);
/* tests: how many fsync/fdatasync calls it made */
guint64                shimwatch_commit_queue_get_n_syncs   (ShimwatchCommitQueue *queue);
/* tests: while held, the commit thread takes no batch (what is queued waits) */
void                   shimwatch_commit_queue_set_held (ShimwatchCommitQueue  *queue,
                                                        gboolean               held);
#endif

ShimwatchCommitTicket *shimwatch_commit_ticket_ref   (ShimwatchCommitTicket *ticket);
void                   shimwatch_commit_ticket_unref (ShimwatchCommitTicket *ticket);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCommitTicket, shimwatch_commit_ticket_unref)

/* any thread but the main one: waits until the ticket is settled or @deadline
 * (g_get_monotonic_time() clock) passes. TRUE: durable. FALSE: a sync failed (@error
 * says which) or the deadline passed (G_IO_ERROR_TIMED_OUT). */
gboolean               shimwatch_commit_ticket_wait    (ShimwatchCommitTicket *ticket,
                                                        gint64                 deadline,
                                                        GError               **error);
/* settled (durable or failed), without waiting */
gboolean               shimwatch_commit_ticket_is_settled (ShimwatchCommitTicket *ticket);
/* the batch the ticket was synced in, counted from 1; 0 while not settled */
guint64                shimwatch_commit_ticket_get_batch  (ShimwatchCommitTicket *ticket);

G_END_DECLS
