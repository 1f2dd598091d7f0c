/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchRecords"

#include "config.h"

#include <string.h>

#include "shimwatch-crash-point.h"
#include "shimwatch-logging.h"
#include "shimwatch-record-committer.h"
#include "shimwatch-lifecycle-signal.h"

typedef enum {
  OP_SAVE,
  OP_SIGNAL,
  OP_REMOVE,
} OpKind;

typedef struct _PathState PathState;

/* one write a task asked for; main thread only, but for its reference count */
typedef struct {
  gatomicrefcount           ref_count;    /* the ledger may drop its own in any thread */
  OpKind                    kind;
  ShimwatchRecordCommitter *committer;   /* NULL once the committer is gone */
  PathState                *state;
  GBytes                   *bytes;       /* OP_SAVE: the encoded record */
  ShimwatchMarksFile       *marks;       /* OP_SIGNAL: the task's marks, NULL if unusable */
  guint                     slot;        /* OP_SIGNAL: the signal's, and its pending mark */
  ShimwatchMark             mark;
  const char               *member;      /* OP_SIGNAL: the table's (static) */
  char                     *key;         /* OP_SIGNAL: the task's */
  char                     *subject;
  const char               *crash_point; /* static (see the header) */
  gboolean                  settled;     /* OP_SIGNAL: the ledger told */
  gboolean                  sent;
} Op;

/* a task with writes waiting, or a record waiting for its signal. Made for each mark and
 * gone once it is handed over: its strings are in its own block, and the record's path
 * is made only for a record written (path_of()) */
struct _PathState {
  char    *key;             /* namespace/id, in the block */
  char    *namespace_;      /* in the block */
  char    *id;              /* in the block */
  char    *path;            /* NULL until asked for */
  GQueue   ops;             /* Op, in the order asked */
  Op      *inflight;        /* its record written, its signal not settled */
  gboolean flushing;        /* its removal waits for the connection to be flushed */
  gboolean unsent;          /* a signal of this task did not go out */
};

struct _ShimwatchRecordCommitter
{
  char                  *records_dir;
  ShimwatchSignalLedger *ledger;
  ShimwatchCommitQueue  *queue;
  GDBusConnection       *connection;
  GHashTable            *states;          /* key -> PathState */
  GHashTable            *marks;           /* key -> TaskMarks: the tasks known this run */
  GHashTable            *namespaces;      /* namespace -> how many of its tasks marks holds */
  GHashTable            *unsettled;       /* Op: signals the ledger has not settled */
  GPtrArray             *flush_waiting;   /* PathState: removals the running flush covers */
  GPtrArray             *flush_next;      /* PathState: removals for the next flush */
  gboolean               flush_running;
#ifdef SHIMWATCH_TEST_HOOKS
  guint                  n_flushes;       /* tests */
#endif
};

/* a task's marks file, open from its first record (or mark) to its removal */
typedef struct {
  ShimwatchMarksFile *file;
  gboolean            has_record;    /* its JSON record is there (or on its way) */
  gboolean            last_sent;     /* its last signal's mark says sent: GDBus writes it */
} TaskMarks;

static void run (ShimwatchRecordCommitter *self,
                 PathState                *state);
static const char *path_of (ShimwatchRecordCommitter *self,
                            PathState                *state);

static void
task_marks_free (TaskMarks *marks)
{
  shimwatch_marks_file_unref (marks->file);
  g_free (marks);
}

/* How many tasks of a namespace this run knows (those in marks); 0: none any more */
static guint
count_task (ShimwatchRecordCommitter *self,
            const char               *namespace_,
            int                       change)
{
  guint n = GPOINTER_TO_UINT (g_hash_table_lookup (self->namespaces, namespace_));

  n = change < 0 ? n - MIN (n, (guint) -change) : n + (guint) change;
  if (n == 0)
    g_hash_table_remove (self->namespaces, namespace_);
  else
    g_hash_table_replace (self->namespaces, g_strdup (namespace_), GUINT_TO_POINTER (n));
  return n;
}

/* NULL (logged) when the file cannot be made: the task's signals then go out unmarked,
 * and a restart sends them again */
static TaskMarks *
get_marks (ShimwatchRecordCommitter *self,
           PathState                *state)
{
  TaskMarks *marks = g_hash_table_lookup (self->marks, state->key);
  g_autofree char *path = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchMarksFile *file;

  if (marks != NULL)
    return marks;
  path = shimwatch_marks_path (self->records_dir, state->namespace_, state->id);
  file = shimwatch_marks_file_open (path, self->queue, &error);
  if (file == NULL)
    {
      ShimwatchLogTask task = { .namespace_ = state->namespace_, .id = state->id,
                                .event = "record" };

      shimwatch_log_task (G_LOG_LEVEL_WARNING, &task, "cannot make signal marks: %s",
                          error->message);
      return NULL;
    }
  marks = g_new0 (TaskMarks, 1);
  marks->file = file;
  marks->has_record = g_file_test (path_of (self, state), G_FILE_TEST_EXISTS);
  g_hash_table_insert (self->marks, g_strdup (state->key), marks);
  count_task (self, state->namespace_, +1);
  return marks;
}

static Op *
op_new (OpKind     kind,
        PathState *state)
{
  Op *op = g_new0 (Op, 1);

  g_atomic_ref_count_init (&op->ref_count);
  op->kind = kind;
  op->state = state;
  return op;
}

static Op *
op_ref (Op *op)
{
  g_atomic_ref_count_inc (&op->ref_count);
  return op;
}

static void
op_unref (Op *op)
{
  if (op == NULL || !g_atomic_ref_count_dec (&op->ref_count))
    return;
  g_clear_pointer (&op->bytes, g_bytes_unref);
  g_clear_pointer (&op->marks, shimwatch_marks_file_unref);
  g_free (op->key);
  g_free (op->subject);
  g_free (op);
}

static void
path_state_free (PathState *state)
{
  Op *op;

  /* the committer is going: what still waits is not written (the records on disk are
   * consistent with what went out), and a late settle finds no committer */
  while ((op = g_queue_pop_head (&state->ops)) != NULL)
    {
      op->committer = NULL;
      op_unref (op);
    }
  if (state->inflight != NULL)
    {
      state->inflight->committer = NULL;
      op_unref (state->inflight);
    }
  g_free (state->path);
  g_free (state);
}

static const char *
path_of (ShimwatchRecordCommitter *self,
         PathState                *state)
{
  if (state->path == NULL)
    state->path = shimwatch_records_path (self->records_dir, state->namespace_, state->id);
  return state->path;
}

static PathState *
get_state (ShimwatchRecordCommitter *self,
           const char               *namespace_,
           const char               *id)
{
  gsize ns_len = strlen (namespace_);
  gsize id_len = strlen (id);
  /* looked up without a key of its own: namespace and id are identifiers, a few dozen
   * bytes; a longer key (none the service makes) is allocated */
  char stack_key[256];
  g_autofree char *heap_key = NULL;
  char *key = stack_key;
  PathState *state;
  char *strings;

  if (ns_len + id_len + 2 > sizeof stack_key)
    key = heap_key = g_malloc (ns_len + id_len + 2);
  memcpy (key, namespace_, ns_len);
  key[ns_len] = '/';
  memcpy (key + ns_len + 1, id, id_len + 1);
  state = g_hash_table_lookup (self->states, key);
  if (state != NULL)
    return state;

  /* one block: the state, then "namespace/id", "namespace" and "id" */
  state = g_malloc0 (sizeof (PathState) + 2 * (ns_len + id_len + 2));
  strings = (char *) (state + 1);
  state->key = memcpy (strings, key, ns_len + id_len + 2);
  state->namespace_ = memcpy (strings + ns_len + id_len + 2, namespace_, ns_len);
  state->namespace_[ns_len] = '\0';
  state->id = memcpy (state->namespace_ + ns_len + 1, id, id_len + 1);
  g_queue_init (&state->ops);
  g_hash_table_insert (self->states, state->key, state);
  return state;
}

static void
log_record (PathState  *state,
            const char *text)
{
  ShimwatchLogTask task = { .namespace_ = state->namespace_, .id = state->id,
                            .event = "record" };

  shimwatch_log_task (G_LOG_LEVEL_WARNING, &task, "%s", text);
}

/* -- removal, after a flush of the connection ---------------------------------------------- */

static void start_flush (ShimwatchRecordCommitter *self);

static void
remove_now (ShimwatchRecordCommitter *self,
            PathState                *state)
{
  g_autoptr(GError) error = NULL;
  /* a record kept stays on disk for the next start; this run is done with the task. The
   * namespace's directory goes with its last record: while another task of it is known,
   * an rmdir would fail ENOTEMPTY (it did at every death), and is not tried */
  gboolean may_be_last = g_hash_table_remove (self->marks, state->key)
    ? count_task (self, state->namespace_, -1) == 0
    : !g_hash_table_contains (self->namespaces, state->namespace_);

  if (state->unsent)
    log_record (state, "task record kept: a signal of the task did not go out, the next "
                "start sends it");
  else if (!shimwatch_records_remove_queued (self->records_dir, state->namespace_, state->id,
                                             may_be_last, self->queue, &error))
    log_record (state, error->message);
}

static void
flush_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  ShimwatchRecordCommitter *self = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) done = NULL;

  if (!g_dbus_connection_flush_finish (G_DBUS_CONNECTION (source), result, &error))
    g_debug ("flushing the bus connection: %s", error->message);
  self->flush_running = FALSE;
  done = g_steal_pointer (&self->flush_waiting);
  self->flush_waiting = g_ptr_array_new ();
  for (guint i = 0; i < done->len; i++)
    {
      PathState *state = g_ptr_array_index (done, i);

      state->flushing = FALSE;
      remove_now (self, state);
      run (self, state);
    }
  if (self->flush_next->len > 0)
    start_flush (self);
}

static void
start_flush (ShimwatchRecordCommitter *self)
{
  g_autoptr(GPtrArray) next = g_steal_pointer (&self->flush_next);

  self->flush_next = g_ptr_array_new ();
  g_ptr_array_extend_and_steal (self->flush_waiting, g_steal_pointer (&next));
  self->flush_running = TRUE;
#ifdef SHIMWATCH_TEST_HOOKS
  self->n_flushes++;
#endif
  /* the committer outlives the flush: free() drains first */
  g_dbus_connection_flush (self->connection, NULL, flush_done_cb, self);
}

/* -- the writes of one task, in order ------------------------------------------------------ */

static void
signal_settled_cb (const char            *member,
                   const char            *subject,
                   gboolean               sent,
                   ShimwatchRecordCommit *commit,
                   gpointer               user_data)
{
  Op *op = user_data;
  ShimwatchRecordCommitter *self = op->committer;
  PathState *state = op->state;     /* NULL: its record is not waited for */
  TaskMarks *marks;

  op->settled = TRUE;
  op->sent = sent;
  if (self == NULL)
    {
      shimwatch_record_commit_free (commit);
      return;
    }
  g_hash_table_remove (self->unsettled, op);
  /* its mark says sent: the ledger stored it right before GDBus's write */
  marks = g_hash_table_lookup (self->marks, op->key);
  if (marks != NULL)
    marks->last_sent = sent && commit != NULL;
  /* the mark survives a crash of the machine too, with the next batch */
  if (commit != NULL && sent)
    shimwatch_records_commit_sync_later (commit, self->queue);
  else
    shimwatch_record_commit_free (commit);
  if (!sent && state != NULL)
    state->unsent = TRUE;
  /* the ledger settles a signal right before GDBus writes it: a crash point that means
   * "sent" is reached after the write, or the abort could beat it */
  if (op->crash_point != NULL && shimwatch_crash_point_armed (op->crash_point))
    shimwatch_signal_ledger_crash_point_after_write (self->ledger, op->crash_point);
  if (state != NULL && state->inflight == op)
    {
      state->inflight = NULL;
      op_unref (op);
      run (self, state);
    }
}

static gboolean
last_signal_marked_sent (ShimwatchRecordCommitter *self,
                         PathState                *state)
{
  TaskMarks *marks = g_hash_table_lookup (self->marks, state->key);

  return marks != NULL && marks->last_sent;
}

static void
run (ShimwatchRecordCommitter *self,
     PathState                *state)
{
  Op *op;

  while (state->inflight == NULL && !state->flushing &&
         (op = g_queue_pop_head (&state->ops)) != NULL)
    {
      g_autoptr(GError) error = NULL;

      switch (op->kind)
        {
        case OP_SAVE:
          /* a newer record of this task follows: this one would be replaced unread */
          {
            Op *next = g_queue_peek_head (&state->ops);

            if (next != NULL && next->kind == OP_SAVE)
              break;
          }
          if (!shimwatch_records_write_encoded (path_of (self, state), op->bytes, self->queue,
                                                &error))
            {
              g_autofree char *text = g_strdup_printf ("cannot write task record: %s",
                                                       error->message);

              log_record (state, text);
            }
          break;

        case OP_SIGNAL:
          {
            /* one pwrite of a slot of the marks: no encoding, no file written */
            ShimwatchRecordCommit *commit =
              op->marks != NULL ? shimwatch_records_prepare_mark (op->marks, op->slot, &op->mark,
                                                                  self->queue)
                                : NULL;
            gboolean written = commit != NULL;
            TaskMarks *marks = g_hash_table_lookup (self->marks, state->key);

            if (marks != NULL)
              marks->last_sent = FALSE;
            /* NULL: the signal goes out unmarked. The ledger frees a mark whose signal
             * was settled before (no bus): it stays "not sent" */
            shimwatch_signal_ledger_set_commit (self->ledger, op->member, op->subject,
                                                commit);
            if (written && !op->settled)
              state->inflight = op_ref (op);
            else
              op->state = NULL;       /* the state may go before the settle */
          }
          break;

        case OP_REMOVE:
          /* After a signal whose mark says sent (TaskDelete, at the end of a task) no
           * flush: GDBus's thread marks it right before it writes it, so a record gone
           * from now on claims nothing a restart could still send; the flush, a thread
           * round trip per death, would add nothing */
          if (self->connection == NULL || g_dbus_connection_is_closed (self->connection) ||
              last_signal_marked_sent (self, state))
            {
              remove_now (self, state);
              break;
            }
          /* the signals before it are not all marked, and maybe not written yet */
          state->flushing = TRUE;
          g_ptr_array_add (self->flush_next, state);
          if (!self->flush_running)
            start_flush (self);
          break;
        }
      op_unref (op);
    }
  if (state->inflight == NULL && !state->flushing && g_queue_is_empty (&state->ops))
    g_hash_table_remove (self->states, state->key);
}

/* -- the API -------------------------------------------------------------------------------- */

static void
submit (ShimwatchRecordCommitter *self,
        PathState                *state,
        Op                       *op)
{
  op->committer = self;
  g_queue_push_tail (&state->ops, op);
  run (self, state);
}

static void
submit_save (ShimwatchRecordCommitter *self,
             PathState                *state,
             const ShimwatchRecord    *record)
{
  TaskMarks *marks = get_marks (self, state);
  ShimwatchRecord copy = *record;
  Op *op = op_new (OP_SAVE, state);

  /* it includes every mark so far: a restart lays only later ones over it */
  copy.marks_seq = marks != NULL ? shimwatch_marks_file_last_seq (marks->file) : 0;
  op->bytes = shimwatch_wire_encode_record (&copy);
  if (marks != NULL)
    marks->has_record = TRUE;
  submit (self, state, op);
}

gboolean
shimwatch_record_committer_save (ShimwatchRecordCommitter  *self,
                                 const ShimwatchRecord     *record,
                                 GError                   **error)
{
  submit_save (self, get_state (self, record->namespace_, record->id), record);
  return TRUE;
}

gboolean
shimwatch_record_committer_expect (ShimwatchRecordCommitter  *self,
                                   const ShimwatchRecord     *record,
                                   const char                *subject,
                                   const char                *crash_point,
                                   GError                   **error)
{
  ShimwatchLifecycleSignal signal;
  PathState *state;
  TaskMarks *marks;
  Op *op;

  g_return_val_if_fail (record->pending_signal != NULL && !record->pending_sent, FALSE);
  signal = shimwatch_lifecycle_signal_from_member (record->pending_signal);
  g_return_val_if_fail (signal != SHIMWATCH_LIFECYCLE_SIGNAL_NONE, FALSE);

  /* the task's signal before this one has most often gone out meanwhile (GDBus's thread
   * settled it, the main loop has not heard yet): this mark need not queue behind it,
   * and its signal then never waits in the filter for the main thread to hand it over */
  shimwatch_signal_ledger_settle_now (self->ledger);
  state = get_state (self, record->namespace_, record->id);
  op = op_new (OP_SIGNAL, state);
  marks = get_marks (self, state);
  if (marks != NULL)
    {
      guint64 seq = shimwatch_marks_file_next_seq (marks->file);

      op->marks = shimwatch_marks_file_ref (marks->file);
      op->slot = shimwatch_lifecycle_signal_to_slot (signal);
      /* the mark carries what changed with the signal (status, exit); the record itself
       * is written only when there is none yet, or the mark cannot say it all */
      if (!shimwatch_mark_from_record (&op->mark, record, SHIMWATCH_MARK_PENDING, seq) ||
          !marks->has_record)
        {
          ShimwatchRecord unmarked = *record;
          Op *save = op_new (OP_SAVE, state);

          /* without the signal: that is the mark's to say */
          *shimwatch_lifecycle_signal_record_flag (signal, &unmarked) = FALSE;
          unmarked.pending_signal = NULL;
          unmarked.marks_seq = seq - 1;
          save->bytes = shimwatch_wire_encode_record (&unmarked);
          marks->has_record = TRUE;
          submit (self, state, save);
        }
    }
  op->member = shimwatch_lifecycle_signal_member (signal);
  op->key = g_strdup (state->key);
  op->subject = g_strdup (subject);
  op->crash_point = crash_point;
  op->committer = self;
  g_hash_table_add (self->unsettled, op);
  /* before the emission, which follows this call: the filter must know the signal */
  shimwatch_signal_ledger_expect (self->ledger, op->member, op->subject, signal_settled_cb,
                                  op_ref (op), (GDestroyNotify) op_unref);
  submit (self, state, op);
  return TRUE;
}

void
shimwatch_record_committer_remove (ShimwatchRecordCommitter *self,
                                   const char               *namespace_,
                                   const char               *id)
{
  PathState *state;

  /* likewise: a TaskDelete already marked sent lets the record go at once */
  shimwatch_signal_ledger_settle_now (self->ledger);
  state = get_state (self, namespace_, id);
  submit (self, state, op_new (OP_REMOVE, state));
}

void
shimwatch_record_committer_set_connection (ShimwatchRecordCommitter *self,
                                           GDBusConnection          *connection)
{
  g_set_object (&self->connection, connection);
}

gboolean
shimwatch_record_committer_is_idle (ShimwatchRecordCommitter *self)
{
  return g_hash_table_size (self->states) == 0 && !self->flush_running &&
         shimwatch_signal_ledger_get_n_pending (self->ledger) == 0 &&
         shimwatch_commit_queue_is_idle (self->queue);
}

static gboolean
drain_timeout_cb (gpointer user_data)
{
  gboolean *timed_out = user_data;

  *timed_out = TRUE;
  return G_SOURCE_REMOVE;
}

gboolean
shimwatch_record_committer_drain (ShimwatchRecordCommitter *self,
                                  guint                     timeout_ms)
{
  gboolean timed_out = FALSE;
  guint timeout_id;

  timeout_id = g_timeout_add (timeout_ms, drain_timeout_cb, &timed_out);
  while (!timed_out && (g_hash_table_size (self->states) > 0 || self->flush_running ||
                        shimwatch_signal_ledger_get_n_pending (self->ledger) > 0))
    g_main_context_iteration (NULL, TRUE);
  if (!timed_out)
    g_source_remove (timeout_id);
  shimwatch_commit_queue_wait_idle (self->queue);
  return shimwatch_record_committer_is_idle (self);
}

ShimwatchCommitQueue *
shimwatch_record_committer_get_queue (ShimwatchRecordCommitter *self)
{
  return self->queue;
}

#ifdef SHIMWATCH_TEST_HOOKS
guint
shimwatch_record_committer_get_n_flushes (ShimwatchRecordCommitter *self)
{
  return self->n_flushes;
}
#endif

ShimwatchRecordCommitter *
shimwatch_record_committer_new (const char            *records_dir,
                                ShimwatchSignalLedger *ledger)
{
  ShimwatchRecordCommitter *self = g_new0 (ShimwatchRecordCommitter, 1);

  self->records_dir = g_strdup (records_dir);
  self->ledger = shimwatch_signal_ledger_ref (ledger);
  self->queue = shimwatch_commit_queue_new (NULL);
  /* /run is a tmpfs: records there do not outlive the machine, so no signal waits for a
   * sync of one */
  if (shimwatch_commit_path_is_volatile (records_dir))
    {
      shimwatch_commit_queue_set_volatile (self->queue, TRUE);
      g_info ("task records in %s are kept in memory only (tmpfs): they are not synced",
              records_dir);
    }
  self->states = g_hash_table_new_full (g_str_hash, g_str_equal, NULL,
                                        (GDestroyNotify) path_state_free);
  self->marks = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                       (GDestroyNotify) task_marks_free);
  self->namespaces = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  self->unsettled = g_hash_table_new (NULL, NULL);
  self->flush_waiting = g_ptr_array_new ();
  self->flush_next = g_ptr_array_new ();
  return self;
}

void
shimwatch_record_committer_free (ShimwatchRecordCommitter *self)
{
  GHashTableIter iter;
  gpointer op;

  if (self == NULL)
    return;
  /* a flush in flight holds self: wait for it (the connection answers or closes) */
  while (self->flush_running)
    g_main_context_iteration (NULL, TRUE);
  /* a late settle finds no committer */
  g_hash_table_iter_init (&iter, self->unsettled);
  while (g_hash_table_iter_next (&iter, &op, NULL))
    ((Op *) op)->committer = NULL;
  g_hash_table_unref (self->unsettled);
  g_hash_table_unref (self->states);
  g_hash_table_unref (self->marks);
  g_hash_table_unref (self->namespaces);
  g_ptr_array_unref (self->flush_waiting);
  g_ptr_array_unref (self->flush_next);
  shimwatch_commit_queue_free (self->queue);
  g_clear_object (&self->connection);
  shimwatch_signal_ledger_unref (self->ledger);
  g_free (self->records_dir);
  g_free (self);
}
