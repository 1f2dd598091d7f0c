/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchCommit"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <gio/gio.h>

#include "shimwatch-commit-queue.h"

typedef enum {
  TICKET_PENDING,
  TICKET_DURABLE,
  TICKET_FAILED,
} TicketState;

struct _ShimwatchCommitTicket
{
  gatomicrefcount          ref_count;
  int                      fd;
  char                    *dir;
  ShimwatchCommitDoneFunc  done;
  gpointer                 user_data;
  /* under tickets_lock */
  TicketState              state;
  GError                  *error;
  guint64                  batch;
};

typedef struct {
  ShimwatchCommitJobFunc func;
  gpointer               data;
  GDestroyNotify         destroy;
} Job;

typedef struct {
  GPtrArray *tickets;      /* ShimwatchCommitTicket, owned */
  GArray    *jobs;         /* Job */
} Batch;

typedef struct {
  GSource               source;
  ShimwatchCommitQueue *queue;
} TurnSource;

struct _ShimwatchCommitQueue
{
  GMainContext *context;
  GSource      *turn_source;
  Batch        *current;      /* main thread: what this turn handed over so far */
  gboolean      is_volatile;  /* main thread: nothing to sync (tmpfs) */

  GMutex        lock;         /* the fields below */
  GCond         changed;
  GQueue        batches;      /* Batch, waiting for the thread */
  gboolean      busy;         /* the thread works on a batch */
#ifdef SHIMWATCH_TEST_HOOKS
  gboolean      held;             /* tests: the thread takes no batch */
  guint64       n_syncs;          /* tests */
#endif
  gboolean      stopping;
  guint64       n_batches;
  GThread      *thread;
};

/* every ticket's state: tickets outlive their queue (a waiter may hold one) */
static GMutex tickets_lock;
static GCond  tickets_settled;

static Batch *
batch_new (void)
{
  Batch *batch = g_new0 (Batch, 1);

  batch->tickets = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_commit_ticket_unref);
  batch->jobs = g_array_new (FALSE, FALSE, sizeof (Job));
  return batch;
}

static void
batch_free (Batch *batch)
{
  g_ptr_array_unref (batch->tickets);
  g_array_unref (batch->jobs);
  g_free (batch);
}

static gboolean
batch_is_empty (const Batch *batch)
{
  return batch == NULL || (batch->tickets->len == 0 && batch->jobs->len == 0);
}

ShimwatchCommitTicket *
shimwatch_commit_ticket_ref (ShimwatchCommitTicket *ticket)
{
  g_atomic_ref_count_inc (&ticket->ref_count);
  return ticket;
}

void
shimwatch_commit_ticket_unref (ShimwatchCommitTicket *ticket)
{
  if (ticket == NULL || !g_atomic_ref_count_dec (&ticket->ref_count))
    return;
  if (ticket->fd >= 0)
    close (ticket->fd);
  g_clear_error (&ticket->error);
  g_free (ticket->dir);
  g_free (ticket);
}

gboolean
shimwatch_commit_ticket_wait (ShimwatchCommitTicket  *ticket,
                              gint64                  deadline,
                              GError                **error)
{
  gboolean durable;

  g_mutex_lock (&tickets_lock);
  while (ticket->state == TICKET_PENDING)
    if (!g_cond_wait_until (&tickets_settled, &tickets_lock, deadline) &&
        ticket->state == TICKET_PENDING)
      {
        g_mutex_unlock (&tickets_lock);
        g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                             "the file was not synced in time");
        return FALSE;
      }
  durable = ticket->state == TICKET_DURABLE;
  if (!durable)
    g_propagate_error (error, g_error_copy (ticket->error));
  g_mutex_unlock (&tickets_lock);
  return durable;
}

gboolean
shimwatch_commit_ticket_is_settled (ShimwatchCommitTicket *ticket)
{
  gboolean settled;

  g_mutex_lock (&tickets_lock);
  settled = ticket->state != TICKET_PENDING;
  g_mutex_unlock (&tickets_lock);
  return settled;
}

guint64
shimwatch_commit_ticket_get_batch (ShimwatchCommitTicket *ticket)
{
  guint64 batch;

  g_mutex_lock (&tickets_lock);
  batch = ticket->batch;
  g_mutex_unlock (&tickets_lock);
  return batch;
}

/* -- the commit thread ------------------------------------------------------------------ */

static int
sync_fd (int fd,
         gboolean data_only)
{
  int result;

  do
    result = data_only ? fdatasync (fd) : fsync (fd);
  while (result != 0 && errno == EINTR);
  return result == 0 ? 0 : errno;
}

static gboolean
call_done_cb (gpointer user_data)
{
  GPtrArray *tickets = user_data;

  for (guint i = 0; i < tickets->len; i++)
    {
      ShimwatchCommitTicket *ticket = g_ptr_array_index (tickets, i);

      ticket->done (ticket, ticket->user_data);
    }
  return G_SOURCE_REMOVE;
}

/* tests hold the thread back; the shipped daemon never does (queue->lock held) */
static inline gboolean
is_held (ShimwatchCommitQueue *queue)
{
#ifdef SHIMWATCH_TEST_HOOKS
  return queue->held;
#else
  (void) queue;
  return FALSE;
#endif
}

static void
commit_batch (ShimwatchCommitQueue *queue,
              Batch                *batch,
              guint64               number)
{
  g_autoptr(GHashTable) dir_errors = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, NULL);
  g_autoptr(GPtrArray) with_done = NULL;
#ifdef SHIMWATCH_TEST_HOOKS
  guint64 n_syncs = 0;
#endif

  for (guint i = 0; i < batch->jobs->len; i++)
    {
      Job *job = &g_array_index (batch->jobs, Job, i);

      job->func (job->data);
      if (job->destroy != NULL)
        job->destroy (job->data);
    }

  /* each file once, then each directory once however many of its entries changed */
  for (guint i = 0; i < batch->tickets->len; i++)
    {
      ShimwatchCommitTicket *ticket = g_ptr_array_index (batch->tickets, i);
      int saved_errno;

      if (ticket->fd < 0)
        continue;
      saved_errno = sync_fd (ticket->fd, TRUE);
#ifdef SHIMWATCH_TEST_HOOKS
      n_syncs++;
#endif
      close (ticket->fd);
      ticket->fd = -1;
      if (saved_errno != 0)
        ticket->error = g_error_new (G_IO_ERROR, g_io_error_from_errno (saved_errno),
                                     "fdatasync: %s", g_strerror (saved_errno));
    }
  for (guint i = 0; i < batch->tickets->len; i++)
    {
      ShimwatchCommitTicket *ticket = g_ptr_array_index (batch->tickets, i);
      int fd;
      int saved_errno = 0;

      if (ticket->dir == NULL || g_hash_table_contains (dir_errors, ticket->dir))
        continue;
      fd = open (ticket->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0)
        saved_errno = errno;
      else
        {
          saved_errno = sync_fd (fd, FALSE);
#ifdef SHIMWATCH_TEST_HOOKS
          n_syncs++;
#endif
          close (fd);
        }
      /* ENOENT: the directory went with its last entry, which is what was to be synced */
      g_hash_table_insert (dir_errors, ticket->dir,
                           GINT_TO_POINTER (saved_errno == ENOENT ? 0 : saved_errno));
    }

  g_mutex_lock (&tickets_lock);
  for (guint i = 0; i < batch->tickets->len; i++)
    {
      ShimwatchCommitTicket *ticket = g_ptr_array_index (batch->tickets, i);
      int dir_errno = ticket->dir != NULL
        ? GPOINTER_TO_INT (g_hash_table_lookup (dir_errors, ticket->dir)) : 0;

      if (ticket->error == NULL && dir_errno != 0)
        ticket->error = g_error_new (G_IO_ERROR, g_io_error_from_errno (dir_errno),
                                     "fsync %s: %s", ticket->dir, g_strerror (dir_errno));
      ticket->state = ticket->error == NULL ? TICKET_DURABLE : TICKET_FAILED;
      ticket->batch = number;
      if (ticket->done != NULL)
        {
          if (with_done == NULL)
            with_done = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_commit_ticket_unref);
          g_ptr_array_add (with_done, shimwatch_commit_ticket_ref (ticket));
        }
    }
  g_cond_broadcast (&tickets_settled);
  g_mutex_unlock (&tickets_lock);

#ifdef SHIMWATCH_TEST_HOOKS
  g_mutex_lock (&queue->lock);
  queue->n_syncs += n_syncs;
  g_mutex_unlock (&queue->lock);
#endif

  if (with_done != NULL)
    g_main_context_invoke_full (queue->context, G_PRIORITY_DEFAULT, call_done_cb,
                                g_steal_pointer (&with_done),
                                (GDestroyNotify) g_ptr_array_unref);
}

static gpointer
commit_thread (gpointer user_data)
{
  ShimwatchCommitQueue *queue = user_data;

  g_mutex_lock (&queue->lock);
  for (;;)
    {
      Batch *batch;
      guint64 number;

      while (!queue->stopping && (is_held (queue) || g_queue_is_empty (&queue->batches)))
        g_cond_wait (&queue->changed, &queue->lock);
      if (g_queue_is_empty (&queue->batches))
        break;        /* stopping, and nothing is left */
      batch = g_queue_pop_head (&queue->batches);
      number = ++queue->n_batches;
      queue->busy = TRUE;
      g_mutex_unlock (&queue->lock);

      commit_batch (queue, batch, number);
      batch_free (batch);

      g_mutex_lock (&queue->lock);
      queue->busy = FALSE;
      g_cond_broadcast (&queue->changed);
    }
  g_mutex_unlock (&queue->lock);
  return NULL;
}

/* -- the main thread -------------------------------------------------------------------- */

void
shimwatch_commit_queue_flush (ShimwatchCommitQueue *queue)
{
  if (batch_is_empty (queue->current))
    return;
  g_mutex_lock (&queue->lock);
  g_queue_push_tail (&queue->batches, g_steal_pointer (&queue->current));
  g_cond_broadcast (&queue->changed);
  g_mutex_unlock (&queue->lock);
}

/* The turn has ended: what it handed over goes to the commit thread now, before the loop
 * polls again. GLib prepares the sources on the context's thread before every poll, the
 * context unlocked, this one first (G_PRIORITY_HIGH). It is never ready: a batch handed
 * over from its dispatch, in the next iteration, cost an iteration of its own per turn
 * that wrote anything (a ready source of G_PRIORITY_HIGH is dispatched alone), and held
 * back by one iteration all else that was ready. */
static gboolean
turn_prepare (GSource *source,
              gint    *timeout)
{
  *timeout = -1;
  shimwatch_commit_queue_flush (((TurnSource *) source)->queue);
  return FALSE;
}

static gboolean
turn_dispatch (GSource     *source,
               GSourceFunc  callback,
               gpointer     user_data)
{
  return G_SOURCE_CONTINUE;
}

static GSourceFuncs turn_funcs = {
  .prepare = turn_prepare,
  .dispatch = turn_dispatch,
};

static Batch *
current_batch (ShimwatchCommitQueue *queue)
{
  if (queue->current == NULL)
    queue->current = batch_new ();
  return queue->current;
}

ShimwatchCommitTicket *
shimwatch_commit_queue_add (ShimwatchCommitQueue    *queue,
                            int                      fd,
                            const char              *dir,
                            ShimwatchCommitDoneFunc  done,
                            gpointer                 user_data)
{
  ShimwatchCommitTicket *ticket = g_new0 (ShimwatchCommitTicket, 1);

  g_atomic_ref_count_init (&ticket->ref_count);
  ticket->fd = fd;
  ticket->dir = g_strdup (dir);
  ticket->done = done;
  ticket->user_data = user_data;
  ticket->state = TICKET_PENDING;
  if (queue->is_volatile)
    {
      /* what a sync would keep is lost with the machine anyway: durable as it is */
      if (ticket->fd >= 0)
        close (ticket->fd);
      ticket->fd = -1;
      ticket->state = TICKET_DURABLE;
      if (done != NULL)
        {
          GPtrArray *with_done = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_commit_ticket_unref);
          g_autoptr(GSource) idle = g_idle_source_new ();

          /* never from within the caller, as with a batch */
          g_ptr_array_add (with_done, shimwatch_commit_ticket_ref (ticket));
          g_source_set_priority (idle, G_PRIORITY_DEFAULT);
          g_source_set_static_name (idle, "shimwatch commit done");
          g_source_set_callback (idle, call_done_cb, with_done, (GDestroyNotify) g_ptr_array_unref);
          g_source_attach (idle, queue->context);
        }
      return ticket;
    }
  g_ptr_array_add (current_batch (queue)->tickets, shimwatch_commit_ticket_ref (ticket));
  return ticket;
}

void
shimwatch_commit_queue_add_job (ShimwatchCommitQueue   *queue,
                                ShimwatchCommitJobFunc  func,
                                gpointer                data,
                                GDestroyNotify          destroy)
{
  Job job = { func, data, destroy };

  g_array_append_val (current_batch (queue)->jobs, job);
}

void
shimwatch_commit_queue_wait_idle (ShimwatchCommitQueue *queue)
{
  shimwatch_commit_queue_flush (queue);
  g_mutex_lock (&queue->lock);
  while (queue->busy || (!g_queue_is_empty (&queue->batches) && !is_held (queue)))
    g_cond_wait (&queue->changed, &queue->lock);
  g_mutex_unlock (&queue->lock);
}

gboolean
shimwatch_commit_queue_is_idle (ShimwatchCommitQueue *queue)
{
  gboolean idle;

  if (!batch_is_empty (queue->current))
    return FALSE;
  g_mutex_lock (&queue->lock);
  idle = !queue->busy && g_queue_is_empty (&queue->batches);
  g_mutex_unlock (&queue->lock);
  return idle;
}

void
shimwatch_commit_queue_set_volatile (ShimwatchCommitQueue *queue,
                                     gboolean              is_volatile)
{
  g_return_if_fail (batch_is_empty (queue->current));
  queue->is_volatile = is_volatile;
}

gboolean
shimwatch_commit_queue_is_volatile (ShimwatchCommitQueue *queue)
{
  return queue->is_volatile;
}

gboolean
shimwatch_commit_path_is_volatile (const char *path)
{
  g_autofree char *at = g_strdup (path);
  struct statfs st;

  /* the directory may be made later: the file system it will be made on */
  while (statfs (at, &st) != 0)
    {
      char *up;

      if (errno != ENOENT || g_str_equal (at, "/") || g_str_equal (at, "."))
        return FALSE;
      up = g_path_get_dirname (at);
      g_free (at);
      at = up;
    }
  return st.f_type == TMPFS_MAGIC || st.f_type == RAMFS_MAGIC;
}

#ifdef SHIMWATCH_TEST_HOOKS
guint64
shimwatch_commit_queue_get_n_batches (ShimwatchCommitQueue *queue)
{
  guint64 n;

  g_mutex_lock (&queue->lock);
  n = queue->n_batches;
  g_mutex_unlock (&queue->lock);
  return n;
}

guint64
shimwatch_commit_queue_get_n_syncs (ShimwatchCommitQueue *queue)
{
  guint64 n;

  g_mutex_lock (&queue->lock);
  n = queue->n_syncs;
  g_mutex_unlock (&queue->lock);
  return n;
}

void
shimwatch_commit_queue_set_held (ShimwatchCommitQueue *queue,
                                 gboolean              held)
{
  g_mutex_lock (&queue->lock);
  queue->held = held;
  g_cond_broadcast (&queue->changed);
  g_mutex_unlock (&queue->lock);
}
#endif

ShimwatchCommitQueue *
shimwatch_commit_queue_new (GMainContext *context)
{
  ShimwatchCommitQueue *queue = g_new0 (ShimwatchCommitQueue, 1);

  queue->context = context != NULL ? g_main_context_ref (context)
                                   : g_main_context_ref_thread_default ();
  g_mutex_init (&queue->lock);
  g_cond_init (&queue->changed);
  g_queue_init (&queue->batches);
  queue->turn_source = g_source_new (&turn_funcs, sizeof (TurnSource));
  ((TurnSource *) queue->turn_source)->queue = queue;
  /* prepared before anything else: the sooner synced, the sooner signalled */
  g_source_set_priority (queue->turn_source, G_PRIORITY_HIGH);
  g_source_set_static_name (queue->turn_source, "shimwatch group commit");
  g_source_attach (queue->turn_source, queue->context);
  queue->thread = g_thread_new ("commit", commit_thread, queue);
  return queue;
}

void
shimwatch_commit_queue_free (ShimwatchCommitQueue *queue)
{
  if (queue == NULL)
    return;
  shimwatch_commit_queue_flush (queue);
  g_mutex_lock (&queue->lock);
#ifdef SHIMWATCH_TEST_HOOKS
  queue->held = FALSE;
#endif
  queue->stopping = TRUE;
  g_cond_broadcast (&queue->changed);
  g_mutex_unlock (&queue->lock);
  g_thread_join (queue->thread);
  g_source_destroy (queue->turn_source);
  g_source_unref (queue->turn_source);
  g_main_context_unref (queue->context);
  g_mutex_clear (&queue->lock);
  g_cond_clear (&queue->changed);
  g_free (queue);
}
