/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchSpawn"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib-unix.h>

#include "shimwatch-poller.h"
#include "shimwatch-spawn.h"
#include "shimwatch-spawner.h"

/* how long a spawner that does not take a request (its socket full) is waited for */
#define SPAWNER_SEND_WAIT_MS  2000
/* how long after a deadline's kill the spawner has to report the end of the child */
#define SPAWNER_KILL_GRACE_MS 5000
/* how long a lost spawner, killed, is waited for before it is left to a later reaping */
#define SPAWNER_REAP_WAIT_MS  1000
/* how long a run goes before its output is read as it comes, not only at its end (see
 * shimwatch_spawn_async()) */
#define OUTPUT_WATCH_DELAY_MS 3000
/* the spawner's replies taken by one recvmmsg(2); the buffer's pages that no record
 * reaches are never touched, and take no memory */
#define REPLY_BATCH           8

/* The spawner of this process (shimwatch-spawner.h), if one was started. Once it is lost
 * (it died, or broke the protocol and was killed), commands are spawned directly again.
 * Its replies are read, and its runs' deadlines kept, on the context it was started on
 * (the global default one in shimwatchd), whichever context a run completes on. */
static struct {
  GMutex                lock;
  int                   fd;      /* our end of its socket; -1: no spawner */
  /* which spawner is read: one more each time one is started, stopped or given up on. A
   * run's callback may do either, and a reading of replies must stop then; the fd's
   * number cannot tell (a spawner started again gets the number its predecessor had) */
  guint                 generation;
  GPid                  pid;
  gboolean              lost;
  GMainContext         *context;
  ShimwatchPollerWatch *watch;   /* its socket, in the poller of that context */
  GHashTable           *runs;    /* &Run.id → the Run (owned) */
  guint64               last_id;
  /* one timer for every run's deadline and kill grace: the soonest of them, or sooner */
  GSource              *timer;
  gint64                timer_at;
  guint8               *reply;   /* REPLY_BATCH records of SHIMWATCH_SPAWNER_REPLY_MAX */
} spawner = { .fd = -1 };

/* pidfd_open(2) failed with ENOSYS or EPERM once: it will again, do not ask each time */
static gint pidfd_open_unavailable;
#ifdef SHIMWATCH_TEST_HOOKS
/* tests: pidfd_open(2) fails with this errno instead of being called (0: it is called) */
static int pidfd_open_errno_for_tests;
#endif

/* Without a spawner, a run's descriptors (the child's pidfd, the output pipes) are
 * watched through the one ShimwatchPoller of the task's context, not through a GSource
 * each: GLib (2.74) wakes its context, a write to its eventfd and one more main-loop
 * iteration, whenever a source with descriptors is attached or destroyed, and twice at
 * each dispatch of one (it takes the source's descriptors out of the poll and puts them
 * back); with a `shim delete` per death that was 13 wake-ups of the main thread by
 * itself per death. A poller watch costs an epoll_ctl(2) to add and to remove, nothing
 * at dispatch. */
typedef struct {
  char                 *program; /* argv[0], for the errors */
  ShimwatchPoller      *poller;  /* of the task's context */
  GPid                  pid;
  int                   pidfd;  /* -1: a waiter thread watches the exit (wait_thread) */
  ShimwatchPollerWatch *pidfd_watch;   /* holds a reference on the task */
  /* one timer per run: the output's watch (output_at), then the deadline (deadline_at),
   * each a g_get_monotonic_time(), 0 once done or when there is none */
  GSource              *timer;
  gint64                output_at;
  gint64                deadline_at;
  int                   fds[2]; /* our ends of the child's stdout and stderr */
  ShimwatchPollerWatch *pipe_watches[2];
  gboolean              ended;         /* completed or failed */
  GByteArray           *output[2];
  ShimwatchSpawnResult *result;
} SpawnData;

void
shimwatch_spawn_result_free (ShimwatchSpawnResult *result)
{
  if (result == NULL)
    return;
  g_clear_pointer (&result->stdout_bytes, g_bytes_unref);
  g_clear_pointer (&result->stderr_bytes, g_bytes_unref);
  g_free (result);
}

static void
clear_source (GSource **source)
{
  if (*source == NULL)
    return;
  g_source_destroy (*source);
  g_clear_pointer (source, g_source_unref);
}

static void
spawn_data_free (SpawnData *data)
{
  /* the pidfd watch holds the task: it is gone by now; the pipes' are removed whenever
   * the run ends, and before its descriptors are closed */
  g_clear_pointer (&data->pidfd_watch, shimwatch_poller_watch_remove);
  clear_source (&data->timer);
  g_free (data->program);
  for (guint i = 0; i < 2; i++)
    {
      g_clear_pointer (&data->pipe_watches[i], shimwatch_poller_watch_remove);
      if (data->fds[i] >= 0)
        close (data->fds[i]);
      if (data->output[i] != NULL)
        g_byte_array_unref (data->output[i]);
    }
  if (data->pidfd >= 0)
    close (data->pidfd);
  g_clear_pointer (&data->poller, shimwatch_poller_unref);
  shimwatch_spawn_result_free (data->result);
  g_free (data);
}

/* every source of a run is attached to the context the task completes on */
static GSource *
attach (GTask      *task,
        GSource    *source,
        GSourceFunc callback,
        gpointer    user_data,
        const char *name)
{
  g_source_set_callback (source, callback, user_data, NULL);
  g_source_set_static_name (source, name);
  g_source_attach (source, g_task_get_context (task));
  return source;
}

/* what the pipe holds now; FALSE at EOF or on an error. @to_eof: every writer is gone
 * (a hang-up), read on to the end. Else a read shorter than asked emptied the pipe (a pipe
 * hands over all it holds, up to the size asked): the next read would only fail with
 * EAGAIN, a syscall per output of each `shim delete`, and the watch tells of more. */
static gboolean
drain (SpawnData *data,
       guint      i,
       gboolean   to_eof)
{
  guint8 buffer[16384];

  for (;;)
    {
      gssize n = read (data->fds[i], buffer, sizeof buffer);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return errno == EAGAIN;
      if (n == 0)
        return FALSE;
      /* more than a shim has any reason to print is dropped, not kept */
      if (data->output[i]->len < SHIMWATCH_SPAWN_OUTPUT_MAX)
        g_byte_array_append (data->output[i], buffer,
                             MIN ((guint) n, SHIMWATCH_SPAWN_OUTPUT_MAX - data->output[i]->len));
      if (!to_eof && (gsize) n < sizeof buffer)
        return TRUE;
    }
}

static void
close_pipe (SpawnData *data,
            guint      i)
{
  g_clear_pointer (&data->pipe_watches[i], shimwatch_poller_watch_remove);
  if (data->fds[i] >= 0)
    {
      close (data->fds[i]);
      data->fds[i] = -1;
    }
}

static gboolean
pipe_cb (int                   fd,
         ShimwatchPollerEvents events,
         gpointer              user_data)
{
  GTask *task = user_data;
  SpawnData *data = g_task_get_task_data (task);
  guint i = fd == data->fds[0] ? 0 : 1;

  if (drain (data, i, (events & (SHIMWATCH_POLLER_HUP | SHIMWATCH_POLLER_ERR)) != 0))
    return G_SOURCE_CONTINUE;
  /* removes this watch (it holds no reference: the task lives on) */
  close_pipe (data, i);
  return G_SOURCE_REMOVE;
}

/* the output is read as it comes from now on; FALSE with @error set if the poller refuses
 * a pipe */
static gboolean
watch_output (GTask   *task,
              GError **error)
{
  SpawnData *data = g_task_get_task_data (task);

  for (guint i = 0; i < 2; i++)
    {
      if (data->fds[i] < 0 || data->pipe_watches[i] != NULL)
        continue;
      data->pipe_watches[i] = shimwatch_poller_add (data->poller, data->fds[i],
                                                    SHIMWATCH_POLLER_IN, pipe_cb, task, NULL,
                                                    error);
      if (data->pipe_watches[i] == NULL)
        return FALSE;
    }
  return TRUE;
}

/* the run goes on: a child that writes more than its pipes hold waits for a reader, so
 * its output is read as it comes from now on */
static void
output_due (GTask *task)
{
  SpawnData *data = g_task_get_task_data (task);
  g_autoptr(GError) error = NULL;

  if (!watch_output (task, &error))
    g_warning ("cannot watch the output of %s (%s): it is read when it ends",
               data->program, error->message);
}

/* Room in each pipe for all the output that is kept (a privileged service may make a
 * pipe that large; the pages are only taken as they are written): FALSE where one is
 * smaller, and a child could block on it. */
static gboolean
make_room (SpawnData *data)
{
  for (guint i = 0; i < 2; i++)
    if (fcntl (data->fds[i], F_SETPIPE_SZ, (int) SHIMWATCH_SPAWN_OUTPUT_MAX) <
        (int) SHIMWATCH_SPAWN_OUTPUT_MAX)
      return FALSE;
  return TRUE;
}

/* The child has exited and is reaped (@wait_status): what it wrote is in the pipes. */
static void
complete (GTask *task,
          int    wait_status)
{
  SpawnData *data = g_task_get_task_data (task);

  clear_source (&data->timer);
  data->ended = TRUE;
  data->result->wait_status = wait_status;
  /* everything the process wrote is in the pipes now (what a child it left behind may
   * still write is not waited for) */
  for (guint i = 0; i < 2; i++)
    {
      if (data->fds[i] >= 0)
        drain (data, i, FALSE);
      close_pipe (data, i);
    }
  data->result->stdout_bytes = g_byte_array_free_to_bytes (g_steal_pointer (&data->output[0]));
  data->result->stderr_bytes = g_byte_array_free_to_bytes (g_steal_pointer (&data->output[1]));
  g_task_return_pointer (task, g_steal_pointer (&data->result),
                         (GDestroyNotify) shimwatch_spawn_result_free);
}

/* The child has exited and nobody reaped it: reap it here, on the task's context. This is
 * the only place that reaps it, and it ends the deadline, so that the deadline's kill can
 * never reach a pid the kernel has handed to another process since. */
static void
child_exited (GTask *task)
{
  SpawnData *data = g_task_get_task_data (task);
  int status = 0;
  pid_t reaped;

  clear_source (&data->timer);
  do
    reaped = waitpid (data->pid, &status, 0);
  while (reaped < 0 && errno == EINTR);
  complete (task, reaped == data->pid ? status : W_EXITCODE (255, 0));
}

static gboolean
pidfd_readable_cb (int                   fd,
                   ShimwatchPollerEvents events,
                   gpointer              user_data)
{
  /* the watch's reference goes with the watch */
  g_autoptr(GTask) task = g_object_ref (user_data);
  SpawnData *data = g_task_get_task_data (task);

  g_clear_pointer (&data->pidfd_watch, shimwatch_poller_watch_remove);
  child_exited (task);
  return G_SOURCE_REMOVE;
}

static gboolean
waited_cb (gpointer user_data)
{
  g_autoptr(GTask) task = user_data;

  child_exited (task);
  return G_SOURCE_REMOVE;
}

/* Without a pidfd (pidfd_open(2) is missing under valgrind 3.19 and before Linux 5.3, and a
 * seccomp filter may refuse it), a thread of its own blocks in waitid(2) with WNOWAIT until
 * the child has exited, and leaves the reaping to the task's context. A GLib child watch
 * would not do: GLib reaps in its worker thread before the callback runs on ours, and a
 * deadline firing in between would signal a pid that may no longer be the child's. */
static gpointer
wait_thread (gpointer user_data)
{
  GTask *task = user_data;                 /* a reference, handed on to waited_cb */
  SpawnData *data = g_task_get_task_data (task);
  GSource *source;
  siginfo_t info;

  while (waitid (P_PID, (id_t) data->pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR)
    ;
  source = g_idle_source_new ();
  g_source_set_priority (source, G_PRIORITY_DEFAULT);
  attach (task, source, waited_cb, task, "[shimwatch] spawned process exited");
  g_source_unref (source);
  return NULL;
}

/* the deadline has come */
static void
deadline (GTask *task)
{
  SpawnData *data = g_task_get_task_data (task);

  if (data->ended)
    return;
  data->result->timed_out = TRUE;
  /* Not reaped yet (child_exited ends this deadline when it reaps): the pid is still the
   * child's, alive or a zombie, and so is the pidfd. */
  if (data->pidfd >= 0)
    pidfd_send_signal (data->pidfd, SIGKILL, NULL, 0);
  else
    kill (data->pid, SIGKILL);
}

/* the sooner of the run's two times still to come; 0: none */
static gint64
next_time (SpawnData *data)
{
  if (data->output_at == 0 || (data->deadline_at != 0 && data->deadline_at < data->output_at))
    return data->deadline_at;
  return data->output_at;
}

static gboolean
timer_cb (gpointer user_data)
{
  g_autoptr(GTask) task = g_object_ref (user_data);
  SpawnData *data = g_task_get_task_data (task);
  gint64 now = g_get_monotonic_time ();
  gint64 next;

  if (data->output_at != 0 && now >= data->output_at)
    {
      data->output_at = 0;
      output_due (task);
    }
  if (data->deadline_at != 0 && now >= data->deadline_at)
    {
      data->deadline_at = 0;
      deadline (task);
    }
  /* ended (the timer is gone with it), or nothing more to come */
  if (data->timer == NULL)
    return G_SOURCE_REMOVE;
  next = next_time (data);
  if (next == 0)
    {
      g_clear_pointer (&data->timer, g_source_unref);
      return G_SOURCE_REMOVE;
    }
  /* (no wake-up of the context: GLib does not wake it for a source in its dispatch) */
  g_source_set_ready_time (data->timer, next);
  return G_SOURCE_CONTINUE;
}

/* -- the spawner ------------------------------------------------------------------------- */

static gboolean
reap_later_cb (gpointer user_data)
{
  pid_t pid = GPOINTER_TO_INT (user_data);

  return waitpid (pid, NULL, WNOHANG) == 0 ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* The spawner died, or misbehaves: it is killed (it is our child and not reaped: the pid
 * is still its own) and reaped, and commands are spawned by the service from now on. Runs
 * once, whoever notices first. */
static void
spawner_lost (const char *why)
{
  g_autofree char *how = NULL;
  char pid_text[16];
  GPid pid;
  int status = 0;
  pid_t reaped;

  g_mutex_lock (&spawner.lock);
  if (spawner.fd < 0 || spawner.lost)
    {
      g_mutex_unlock (&spawner.lock);
      return;
    }
  spawner.lost = TRUE;
  pid = spawner.pid;
  g_mutex_unlock (&spawner.lock);

  kill (pid, SIGKILL);
  /* dead, or dying of the SIGKILL: a zombie within microseconds, unless it is stuck in
   * the kernel (uninterruptible sleep), which must not stall the caller's thread */
  for (gint64 until = g_get_monotonic_time () + SPAWNER_REAP_WAIT_MS * 1000;;)
    {
      reaped = waitpid (pid, &status, WNOHANG);
      if (reaped != 0 || g_get_monotonic_time () >= until)
        break;
      g_usleep (1000);
    }
  if (reaped == 0)
    {
      how = g_strdup ("does not end yet (it is reaped once it does)");
      g_timeout_add_seconds (1, reap_later_cb, GINT_TO_POINTER (pid));
    }
  else if (reaped != pid)
    how = g_strdup ("was reaped by someone else");
  else if (WIFSIGNALED (status))
    how = g_strdup_printf ("ended by signal %d", WTERMSIG (status));
  else
    how = g_strdup_printf ("exited with status %d", WEXITSTATUS (status));
  g_snprintf (pid_text, sizeof pid_text, "%d", (int) pid);
  g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING,
                    "SHIMWATCH_SPAWNER_PID", pid_text,
                    "MESSAGE", "the process spawner (pid %d) %s and %s: the service starts "
                    "shim start and shim delete itself from now on", (int) pid, why, how);
}

/* A run of the spawner's, from its request to its DONE. No GTask: its end is handed
 * straight to its callback (a GTask per run, beside the one of the launcher's that asks
 * for it, was a GObject made, notified and finalized on the main thread at every `shim
 * delete`). */
typedef struct {
  guint64                id; /* the key in spawner.runs */
  char                  *program; /* argv[0], for the errors */
  ShimwatchSpawnDoneFunc done;
  gpointer               user_data;
  GMainContext          *context; /* the thread-default one of its caller: where it ends */
  ShimwatchSpawnResult  *result;  /* its end, when it is handed over in an idle */
  GError                *error;
  /* g_get_monotonic_time()s, 0 when there is none: the deadline (0 once passed), then
   * the time by which the spawner must have told the end after the deadline's kill */
  gint64      deadline_at;
  gint64      grace_at;
  gboolean    timed_out;
  GByteArray *output[2];    /* what OUTPUT records brought; NULL: none yet */
} Run;

static void
run_free (Run *run)
{
  g_free (run->program);
  g_main_context_unref (run->context);
  shimwatch_spawn_result_free (run->result);
  g_clear_error (&run->error);
  for (guint i = 0; i < 2; i++)
    if (run->output[i] != NULL)
      g_byte_array_unref (run->output[i]);
  g_free (run);
}

static gboolean
run_end_cb (gpointer user_data)
{
  Run *run = user_data;

  run->done (g_steal_pointer (&run->result), g_steal_pointer (&run->error), run->user_data);
  return G_SOURCE_REMOVE;
}

/* The end of @run (taken out of spawner.runs), handed to its callback (@result and @error
 * are the callback's): at once where the run ends on the context dispatching now,
 * which is where a DONE is read; else, and for every error (a spawner lost or stopped
 * outside any dispatch), in an idle of the run's context, never inside the caller's
 * own call. */
static void
run_end (Run                  *run,
         ShimwatchSpawnResult *result,
         GError               *error,
         gboolean              now)
{
  GSource *source;

  if (now && g_main_context_is_owner (run->context) && g_main_current_source () != NULL &&
      g_source_get_context (g_main_current_source ()) == run->context)
    {
      run->done (result, error, run->user_data);
      run_free (run);
      return;
    }
  run->result = result;
  run->error = error;
  source = g_idle_source_new ();
  g_source_set_priority (source, G_PRIORITY_DEFAULT);
  g_source_set_callback (source, run_end_cb, run, (GDestroyNotify) run_free);
  g_source_set_static_name (source, "[shimwatch] spawned process ended");
  g_source_attach (source, run->context);
  g_source_unref (source);
}

static gboolean deadlines_cb (gpointer user_data);
static gboolean read_replies (void);

/* The timer is due at @at or sooner (spawner.lock held). A timer due later is replaced,
 * not moved: g_source_set_ready_time() on an attached source wakes its context, while a
 * timer attached (with its time set before) by the thread that owns the context, or by one
 * while none does, does not. A run that ends takes nothing off the timer: it fires at
 * worst once for nothing, and is set then for the next deadline, if any. */
static void
timer_due_by (gint64 at)
{
  if (spawner.timer != NULL && spawner.timer_at <= at)
    return;
  clear_source (&spawner.timer);
  spawner.timer = shimwatch_timer_source_new (at);
  g_source_set_callback (spawner.timer, deadlines_cb, NULL, NULL);
  g_source_set_static_name (spawner.timer, "[shimwatch] spawner deadlines");
  g_source_attach (spawner.timer, spawner.context);
  spawner.timer_at = at;
}

/* Every run the spawner had, ended with an error (on the spawner's context, with the
 * spawner lost or stopped): nothing more will be told of them. */
static void
fail_runs (const char *how)
{
  g_autoptr(GPtrArray) runs = g_ptr_array_new ();
  GHashTableIter iter;
  gpointer run;

  g_mutex_lock (&spawner.lock);
  clear_source (&spawner.timer);
  if (spawner.runs != NULL)
    {
      g_hash_table_iter_init (&iter, spawner.runs);
      while (g_hash_table_iter_next (&iter, NULL, &run))
        {
          g_ptr_array_add (runs, run);
          g_hash_table_iter_steal (&iter);
        }
    }
  g_mutex_unlock (&spawner.lock);
  for (guint i = 0; i < runs->len; i++)
    {
      Run *failed = g_ptr_array_index (runs, i);

      run_end (failed, NULL,
               g_error_new (G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                            "the process spawner %s while %s ran", how, failed->program),
               FALSE);
    }
}

/* The spawner is given up on: killed and reaped (spawner_lost()), its socket no longer
 * read, and its runs ended with an error. Its replies queued before were read. */
static void
spawner_abandon (const char *why)
{
  spawner_lost (why);
  g_clear_pointer (&spawner.watch, shimwatch_poller_watch_remove);
  g_mutex_lock (&spawner.lock);
  spawner.generation++;
  g_mutex_unlock (&spawner.lock);
  fail_runs ("died");
}

/* the deadlines and kill graces that have come: a KILL to the spawner for each run past
 * its deadline; a spawner that did not tell the end of one it was told to kill
 * SPAWNER_KILL_GRACE_MS before is given up on */
static gboolean
deadlines_cb (gpointer user_data)
{
  g_autofree char *stuck = NULL;
  gint64 now;
  gint64 next = 0;
  GHashTableIter iter;
  gpointer value;

  /* what the spawner told and we were not woken for yet: a run that ended is not killed,
   * nor told it timed out */
  if (spawner.watch != NULL && !read_replies ())
    return G_SOURCE_REMOVE;   /* (the timer went with the runs) */
  now = g_get_monotonic_time ();
  g_mutex_lock (&spawner.lock);
  g_hash_table_iter_init (&iter, spawner.runs);
  while (stuck == NULL && g_hash_table_iter_next (&iter, NULL, &value))
    {
      Run *run = value;

      if (run->grace_at != 0 && run->grace_at <= now)
        stuck = g_strdup_printf ("did not report the end of %s %u s after its deadline's "
                                 "kill", run->program, SPAWNER_KILL_GRACE_MS / 1000);
      else if (run->deadline_at != 0 && run->deadline_at <= now)
        {
          ShimwatchSpawnerRequest kill = { .magic = SHIMWATCH_SPAWNER_MAGIC,
                                           .kind = SHIMWATCH_SPAWNER_KILL, .id = run->id };

          run->deadline_at = 0;
          run->timed_out = TRUE;
          run->grace_at = now + SPAWNER_KILL_GRACE_MS * 1000;
          if (send (spawner.fd, &kill, sizeof kill, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            stuck = g_strdup ("does not take a kill");
        }
      if (run->deadline_at != 0 && (next == 0 || run->deadline_at < next))
        next = run->deadline_at;
      if (run->grace_at != 0 && (next == 0 || run->grace_at < next))
        next = run->grace_at;
    }
  if (stuck != NULL || next == 0)
    {
      /* (its dispatch ends its life: no wake-up) */
      g_clear_pointer (&spawner.timer, g_source_unref);
      g_mutex_unlock (&spawner.lock);
      if (stuck != NULL)
        spawner_abandon (stuck);
      return G_SOURCE_REMOVE;
    }
  /* (no wake-up of the context: GLib does not wake it for a source in its dispatch) */
  g_source_set_ready_time (spawner.timer, next);
  spawner.timer_at = next;
  g_mutex_unlock (&spawner.lock);
  return G_SOURCE_CONTINUE;
}

/* One record of the spawner's: FALSE if it is not the protocol. */
static gboolean
take_reply (const guint8 *bytes,
            gsize         length)
{
  ShimwatchSpawnerReply header;
  ShimwatchSpawnResult *result;
  const guint8 *output[2];
  Run *run;

  if (length < sizeof header)
    return FALSE;
  memcpy (&header, bytes, sizeof header);
  if ((header.kind != SHIMWATCH_SPAWNER_OUTPUT && header.kind != SHIMWATCH_SPAWNER_DONE) ||
      length != sizeof header + (gsize) header.lengths[0] + header.lengths[1])
    return FALSE;
  output[0] = bytes + sizeof header;
  output[1] = output[0] + header.lengths[0];

  /* (runs leave the table on this context alone: an OUTPUT's run stays while it is read) */
  g_mutex_lock (&spawner.lock);
  run = g_hash_table_lookup (spawner.runs, &header.id);
  if (run != NULL && header.kind == SHIMWATCH_SPAWNER_DONE)
    g_hash_table_steal (spawner.runs, &header.id);   /* ours now */
  g_mutex_unlock (&spawner.lock);
  if (run == NULL)
    return FALSE;

  for (guint i = 0; i < 2; i++)
    if (header.lengths[i] > 0 &&
        (header.kind == SHIMWATCH_SPAWNER_OUTPUT || run->output[i] != NULL))
      {
        if (run->output[i] == NULL)
          run->output[i] = g_byte_array_new ();
        if (run->output[i]->len + header.lengths[i] > SHIMWATCH_SPAWN_OUTPUT_MAX)
          {
            /* (an OUTPUT's run is failed with the others, as the spawner is given up on) */
            if (header.kind == SHIMWATCH_SPAWNER_DONE)
              run_end (run, NULL,
                       g_error_new (G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED,
                                    "the process spawner broke the protocol while %s ran",
                                    run->program),
                       FALSE);
            return FALSE;
          }
        g_byte_array_append (run->output[i], output[i], header.lengths[i]);
      }
  if (header.kind == SHIMWATCH_SPAWNER_OUTPUT)
    return TRUE;

  if (header.error != 0)
    {
      run_end (run, NULL,
               g_error_new (G_IO_ERROR, g_io_error_from_errno (header.error),
                            "cannot run %s: %s", run->program, g_strerror (header.error)),
               TRUE);
      return TRUE;
    }
  result = g_new0 (ShimwatchSpawnResult, 1);
  result->wait_status = header.status;
  result->timed_out = run->timed_out;
  result->stdout_bytes = run->output[0] != NULL
                           ? g_byte_array_free_to_bytes (g_steal_pointer (&run->output[0]))
                           : g_bytes_new (output[0], header.lengths[0]);
  result->stderr_bytes = run->output[1] != NULL
                           ? g_byte_array_free_to_bytes (g_steal_pointer (&run->output[1]))
                           : g_bytes_new (output[1], header.lengths[1]);
  run_end (run, result, NULL, TRUE);
  return TRUE;
}

/* The spawner's replies, as many as its socket holds now (up to a bound: the other
 * sources of the context get their turn), taken REPLY_BATCH at a time with recvmmsg(2):
 * a batch shorter than asked for found the socket empty, so the receive that would only
 * fail with EAGAIN, one per wake-up, was one more system call of the main thread at each
 * `shim delete` (the poller is level-triggered: a reply sent after it wakes it again).
 * Each DONE completes its run here and now. FALSE once the spawner is given up on: it
 * closed its socket (it died; what it sent before was read), or it broke the protocol. */
static gboolean
read_replies (void)
{
  /* taken for the batch: a run's callback that iterates the context and reads again
   * (nested) reads into a batch of its own, never into the one being taken */
  g_autofree guint8 *batch = g_steal_pointer (&spawner.reply);
  struct mmsghdr messages[REPLY_BATCH];
  struct iovec iovs[REPLY_BATCH];
  int fd = spawner.fd;
  guint generation = spawner.generation;

  if (batch == NULL)
    batch = g_malloc (REPLY_BATCH * (gsize) SHIMWATCH_SPAWNER_REPLY_MAX);
  for (guint taken = 0; taken < 64;)
    {
      int n;

      memset (messages, 0, sizeof messages);
      for (guint i = 0; i < REPLY_BATCH; i++)
        {
          iovs[i] = (struct iovec) { batch + i * (gsize) SHIMWATCH_SPAWNER_REPLY_MAX,
                                     SHIMWATCH_SPAWNER_REPLY_MAX };
          messages[i].msg_hdr.msg_iov = &iovs[i];
          messages[i].msg_hdr.msg_iovlen = 1;
        }
      /* MSG_TRUNC: each record's real length, should it be longer than we take */
      n = recvmmsg (fd, messages, REPLY_BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && errno == EAGAIN)
        break;
      if (n <= 0)
        {
          spawner_abandon ("closed its socket");
          return FALSE;
        }
      for (int i = 0; i < n; i++)
        {
          gsize length = messages[i].msg_len;

          /* a record is never empty: one of length 0 is the end of the file */
          if (length == 0 || length > SHIMWATCH_SPAWNER_REPLY_MAX ||
              !take_reply (iovs[i].iov_base, length))
            {
              spawner_abandon (length == 0 ? "closed its socket" : "broke the protocol");
              return FALSE;
            }
          /* the run's callback let the spawner go (shimwatch_spawn_stop_spawner() ended
           * its other runs): the rest of the batch is for nobody */
          if (spawner.generation != generation)
            return FALSE;
        }
      taken += (guint) n;
      if (n < REPLY_BATCH)
        break;
    }
  /* kept for the next wake-up, unless a nested read put one back meanwhile */
  if (spawner.reply == NULL)
    spawner.reply = g_steal_pointer (&batch);
  return TRUE;
}

static gboolean
spawner_readable_cb (int                   fd,
                     ShimwatchPollerEvents events,
                     gpointer              user_data)
{
  return read_replies () ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

gboolean
shimwatch_spawn_start_spawner (GError **error)
{
  char pid_text[16];
  GPid pid = 0;
  int fd;

  g_return_val_if_fail (spawner.fd < 0, FALSE);

  fd = shimwatch_spawner_fork (&pid, error);
  if (fd < 0)
    return FALSE;
  g_mutex_lock (&spawner.lock);
  spawner.fd = fd;
  spawner.generation++;
  spawner.pid = pid;
  spawner.lost = FALSE;
  spawner.context = g_main_context_ref_thread_default ();
  if (spawner.runs == NULL)
    spawner.runs = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL,
                                          (GDestroyNotify) run_free);
  if (spawner.reply == NULL)
    spawner.reply = g_malloc (REPLY_BATCH * (gsize) SHIMWATCH_SPAWNER_REPLY_MAX);
  /* its replies, and a spawner that dies between commands, are heard of at once */
  spawner.watch = shimwatch_poller_add (shimwatch_poller_get_default (), fd,
                                        SHIMWATCH_POLLER_IN, spawner_readable_cb, NULL, NULL,
                                        error);
  if (spawner.watch == NULL)
    {
      spawner.fd = -1;
      g_clear_pointer (&spawner.context, g_main_context_unref);
      g_mutex_unlock (&spawner.lock);
      /* EOF: it exits */
      close (fd);
      waitpid (pid, NULL, 0);
      return FALSE;
    }
  g_mutex_unlock (&spawner.lock);
  g_snprintf (pid_text, sizeof pid_text, "%d", (int) pid);
  g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_INFO,
                    "SHIMWATCH_SPAWNER_PID", pid_text,
                    "MESSAGE", "process spawner started (pid %d)", (int) pid);
  return TRUE;
}

GPid
shimwatch_spawn_get_spawner_pid (void)
{
  GPid pid;

  g_mutex_lock (&spawner.lock);
  pid = spawner.fd >= 0 && !spawner.lost ? spawner.pid : 0;
  g_mutex_unlock (&spawner.lock);
  return pid;
}

int
shimwatch_spawn_stop_spawner (void)
{
  gboolean lost;
  int status = -1;
  pid_t reaped;

  g_mutex_lock (&spawner.lock);
  if (spawner.fd < 0)
    {
      g_mutex_unlock (&spawner.lock);
      return -1;
    }
  g_clear_pointer (&spawner.watch, shimwatch_poller_watch_remove);
  /* EOF on its socket: it exits (what it still runs goes on, and is re-parented) */
  close (spawner.fd);
  spawner.fd = -1;
  spawner.generation++;
  lost = spawner.lost;
  g_mutex_unlock (&spawner.lock);
  fail_runs ("was stopped");
  g_mutex_lock (&spawner.lock);
  g_clear_pointer (&spawner.context, g_main_context_unref);
  g_mutex_unlock (&spawner.lock);
  if (lost)
    return -1;
  do
    reaped = waitpid (spawner.pid, &status, 0);
  while (reaped < 0 && errno == EINTR);
  return reaped == spawner.pid ? status : -1;
}

/* watch the child's pidfd (a reference on the task while watched); FALSE with @error set
 * if the poller refuses it */
static gboolean
watch_pidfd (GTask   *task,
             GError **error)
{
  SpawnData *data = g_task_get_task_data (task);

  data->pidfd_watch = shimwatch_poller_add (data->poller, data->pidfd, SHIMWATCH_POLLER_IN,
                                            pidfd_readable_cb, g_object_ref (task),
                                            g_object_unref, error);
  if (data->pidfd_watch == NULL)
    {
      g_object_unref (task);
      return FALSE;
    }
  return TRUE;
}

static gsize
append_string (char       *bytes,
               gsize       at,
               const char *string)
{
  gsize size = strlen (string) + 1;

  memcpy (bytes + at, string, size);
  return at + size;
}

/* Hands the run to the spawner: one message, with @stdin_fd (borrowed: the spawner gets a
 * copy) if there is one; its end comes in the spawner's DONE. FALSE if there is no spawner
 * (or no more), or the request is too large for it: the caller spawns it itself. */
static gboolean
spawn_by_spawner (const char * const    *argv,
                  const char * const    *envp,
                  const char            *cwd,
                  int                    stdin_fd,
                  guint                  timeout_ms,
                  ShimwatchSpawnDoneFunc done,
                  gpointer               user_data)
{
  ShimwatchSpawnerRequest request = { .magic = SHIMWATCH_SPAWNER_MAGIC,
                                      .kind = SHIMWATCH_SPAWNER_RUN };
  char on_stack[8192];
  g_autofree char *on_heap = NULL;
  char *bytes;
  gsize length;
  gsize at;
  union {
    struct cmsghdr header;
    char           space[CMSG_SPACE (sizeof (int))];
  } control;
  struct iovec iov;
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
  Run *run;
  int fd;
  ssize_t sent;

  length = sizeof request + strlen (cwd) + 1;
  for (request.argc = 0; argv[request.argc] != NULL; request.argc++)
    length += strlen (argv[request.argc]) + 1;
  for (request.envc = 0; envp[request.envc] != NULL; request.envc++)
    length += strlen (envp[request.envc]) + 1;
  if (length > SHIMWATCH_SPAWNER_REQUEST_MAX)
    return FALSE;

  /* in the table before the request goes: its DONE may come before this returns */
  g_mutex_lock (&spawner.lock);
  fd = spawner.lost ? -1 : spawner.fd;
  if (fd < 0)
    {
      g_mutex_unlock (&spawner.lock);
      return FALSE;
    }
  run = g_new0 (Run, 1);
  run->id = request.id = ++spawner.last_id;
  run->program = g_strdup (argv[0]);
  run->done = done;
  run->user_data = user_data;
  run->context = g_main_context_ref_thread_default ();
  g_hash_table_insert (spawner.runs, &run->id, run);
  g_mutex_unlock (&spawner.lock);

  /* a request of the usual size is built on the stack: a heap block this large is a
   * "large" request to malloc, which consolidates its free lists each time */
  bytes = length <= sizeof on_stack ? on_stack : (on_heap = g_malloc (length));
  if (stdin_fd >= 0)
    {
      struct cmsghdr *cmsg = &control.header;

      request.flags |= SHIMWATCH_SPAWNER_WITH_STDIN;
      memset (&control, 0, sizeof control);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN (sizeof (int));
      memcpy (CMSG_DATA (cmsg), &stdin_fd, sizeof (int));
      msg.msg_control = control.space;
      msg.msg_controllen = sizeof control.space;
    }
  memcpy (bytes, &request, sizeof request);
  at = sizeof request;
  at = append_string (bytes, at, cwd);
  for (guint i = 0; i < request.argc; i++)
    at = append_string (bytes, at, argv[i]);
  for (guint i = 0; i < request.envc; i++)
    at = append_string (bytes, at, envp[i]);
  g_assert (at == length);
  iov = (struct iovec) { bytes, length };

  for (guint attempt = 0;; attempt++)
    {
      struct pollfd poll_fd = { fd, POLLOUT, 0 };

      sent = sendmsg (fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent >= 0 || (errno != EINTR && errno != EAGAIN) || attempt > 0)
        break;
      /* its socket is full: it is slow, or stuck; wait a little, not forever */
      if (errno == EAGAIN && poll (&poll_fd, 1, SPAWNER_SEND_WAIT_MS) == 0)
        {
          errno = EAGAIN;
          break;
        }
    }
  if (sent < 0)
    {
      int saved_errno = errno;

      /* (frees it: nothing was told of it) */
      g_mutex_lock (&spawner.lock);
      g_hash_table_remove (spawner.runs, &request.id);
      g_mutex_unlock (&spawner.lock);
      if (saved_errno != EMSGSIZE && saved_errno != ENOBUFS && saved_errno != ENOMEM)
        spawner_lost (saved_errno == EAGAIN ? "takes no request" : "does not take requests");
      return FALSE;
    }

  if (timeout_ms > 0)
    {
      g_mutex_lock (&spawner.lock);
      /* (unless its DONE came already) */
      if (g_hash_table_contains (spawner.runs, &request.id))
        {
          run->deadline_at = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
          timer_due_by (run->deadline_at);
        }
      g_mutex_unlock (&spawner.lock);
    }
  return TRUE;
}

#ifdef SHIMWATCH_TEST_HOOKS
void
shimwatch_spawn_set_pidfd_open_errno_for_tests (int errno_value)
{
  pidfd_open_errno_for_tests = errno_value;
}
#endif

/* a pidfd for the child, or -1 with errno set */
static int
open_pidfd (GPid pid)
{
  int pidfd;

#ifdef SHIMWATCH_TEST_HOOKS
  if (G_UNLIKELY (pidfd_open_errno_for_tests != 0))
    {
      errno = pidfd_open_errno_for_tests;
      return -1;
    }
#endif
  if (g_atomic_int_get (&pidfd_open_unavailable))
    {
      errno = ENOSYS;
      return -1;
    }
  pidfd = pidfd_open (pid, 0);
  if (pidfd < 0 && (errno == ENOSYS || errno == EPERM))
    g_atomic_int_set (&pidfd_open_unavailable, TRUE);
  return pidfd;
}

/* watch for the child's exit: a pidfd in the task's context, or else a waiter thread */
static gboolean
watch_exit (GTask   *task,
            GError **error)
{
  static gsize logged = 0;
  SpawnData *data = g_task_get_task_data (task);
  GThread *thread;
  int saved_errno;

  data->pidfd = open_pidfd (data->pid);
  if (data->pidfd >= 0)
    {
      g_autoptr(GError) local_error = NULL;

      if (watch_pidfd (task, &local_error))
        return TRUE;
      /* the poller refuses it (out of memory, or of epoll watches): a thread waits */
      g_warning ("cannot watch the pidfd of %s (%s): its exit is waited for in a thread",
                 data->program, local_error->message);
      close (data->pidfd);
      data->pidfd = -1;
    }
  else
    {
      saved_errno = errno;
      if (g_once_init_enter (&logged))
        {
          g_message ("pidfd_open() failed (%s): the exit of each command the service runs is "
                     "waited for in a thread", g_strerror (saved_errno));
          g_once_init_leave (&logged, 1);
        }
    }
  thread = g_thread_try_new ("shimwatch-wait", wait_thread, g_object_ref (task), error);
  if (thread == NULL)
    {
      g_object_unref (task);
      return FALSE;
    }
  g_thread_unref (thread);
  return TRUE;
}

/* the stdin of a command given none: one /dev/null for the life of the process, not an
 * open() and a close() per command; -1 with errno set if it cannot be opened (tried again
 * the next time) */
static int
dev_null (void)
{
  static int shared = -1;
  int fd = g_atomic_int_get (&shared);

  if (fd >= 0)
    return fd;
  fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && !g_atomic_int_compare_and_exchange (&shared, -1, fd))
    {
      close (fd);
      fd = g_atomic_int_get (&shared);
    }
  return fd;
}

/* The run, spawned by this process: its pipes read here, its exit watched through a pidfd
 * (or a thread where pidfd_open(2) fails). */
static void
spawn_directly (GTask              *task,
                const char * const *argv,
                const char * const *envp,
                const char         *cwd,
                int                 stdin_fd,
                guint               timeout_ms)
{
  g_autoptr(GError) error = NULL;
  SpawnData *data = g_new0 (SpawnData, 1);
  int out[2] = { -1, -1 };
  int err[2] = { -1, -1 };
  int saved_errno = 0;

  data->program = g_strdup (argv[0]);
  /* the task completes on the thread-default context: the poller of that context */
  data->poller = shimwatch_poller_ref (shimwatch_poller_get_default ());
  data->pidfd = data->fds[0] = data->fds[1] = -1;
  data->result = g_new0 (ShimwatchSpawnResult, 1);
  data->output[0] = g_byte_array_new ();
  data->output[1] = g_byte_array_new ();
  g_task_set_task_data (task, data, (GDestroyNotify) spawn_data_free);

  if (stdin_fd < 0)
    stdin_fd = dev_null ();
  if (stdin_fd < 0 || pipe2 (out, O_CLOEXEC) != 0 || pipe2 (err, O_CLOEXEC) != 0)
    {
      saved_errno = errno;
      g_set_error (&error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot run %s: %s", argv[0], g_strerror (saved_errno));
      goto out;
    }
  /* A short command's output (a shim's delete: its log lines and one reply) is read once
   * it has ended, all at once, in the turn that learns of the end: each line read as it
   * came was one more wake-up of this thread, by the child, on the path of every shim's
   * death. The pipes hold all that is kept of it; a run that goes on for a while has its
   * output read as it comes, as has every run where the pipes cannot be made that large:
   * either way a child that writes more than a pipe holds is never blocked for good. A
   * watch the poller refuses (out of memory or of epoll watches) fails the run before
   * anything runs. */
  data->fds[0] = out[0];
  data->fds[1] = err[0];
  out[0] = err[0] = -1;
  for (guint i = 0; i < 2; i++)
    g_unix_set_fd_nonblocking (data->fds[i], TRUE, NULL);
  if (!make_room (data) && !watch_output (task, &error))
    {
      g_prefix_error (&error, "cannot run %s: ", argv[0]);
      goto out;
    }

  saved_errno = shimwatch_spawner_posix_spawn (&data->pid, cwd, stdin_fd, out[1], err[1],
                                               argv, envp);
  if (saved_errno != 0)
    {
      g_set_error (&error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot run %s: %s", argv[0], g_strerror (saved_errno));
      goto out;
    }

  if (!watch_exit (task, &error))
    {
      /* nobody reaped it: the pid is still the child's; never leave it behind */
      kill (data->pid, SIGKILL);
      waitpid (data->pid, NULL, 0);
      g_prefix_error (&error, "cannot wait for %s: ", argv[0]);
      goto out;
    }

  /* one timer for both (a source per run is walked by every iteration of the context) */
  if (data->pipe_watches[0] == NULL)
    data->output_at = g_get_monotonic_time () + OUTPUT_WATCH_DELAY_MS * 1000;
  if (timeout_ms > 0)
    data->deadline_at = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  if (next_time (data) != 0)
    {
      data->timer = attach (task, shimwatch_timer_source_new (next_time (data)), timer_cb,
                            task, "[shimwatch] spawned process timer");
    }

out:
  for (guint i = 0; i < 2; i++)
    {
      if (out[i] >= 0)
        close (out[i]);
      if (err[i] >= 0)
        close (err[i]);
    }
  if (error != NULL)
    {
      /* nothing runs: the pipes are not watched until the task is gone */
      for (guint i = 0; i < 2; i++)
        close_pipe (data, i);
      g_task_return_error (task, g_steal_pointer (&error));
    }
}

typedef struct {
  ShimwatchSpawnDoneFunc done;
  gpointer               user_data;
} DirectRun;

/* the end of a run spawned by this process, to its callback */
static void
direct_done_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  g_autofree DirectRun *run = user_data;
  GError *error = NULL;
  ShimwatchSpawnResult *outcome = g_task_propagate_pointer (G_TASK (result), &error);

  run->done (outcome, error, run->user_data);
}

void
shimwatch_spawn_run (const char * const    *argv,
                     const char * const    *envp,
                     const char            *cwd,
                     int                    stdin_fd,
                     guint                  timeout_ms,
                     ShimwatchSpawnDoneFunc done,
                     gpointer               user_data)
{
  g_autoptr(GTask) task = NULL;
  DirectRun *run;

  g_return_if_fail (done != NULL);

  if (spawn_by_spawner (argv, envp, cwd, stdin_fd, timeout_ms, done, user_data))
    return;
  /* without a spawner: a GTask carries the run's watches and sources */
  run = g_new (DirectRun, 1);
  run->done = done;
  run->user_data = user_data;
  task = g_task_new (NULL, NULL, direct_done_cb, run);
  g_task_set_source_tag (task, shimwatch_spawn_run);
  spawn_directly (task, argv, envp, cwd, stdin_fd, timeout_ms);
}

static void
async_done (ShimwatchSpawnResult *result,
            GError               *error,
            gpointer              user_data)
{
  g_autoptr(GTask) task = user_data;

  if (error != NULL)
    g_task_return_error (task, error);
  else
    g_task_return_pointer (task, result, (GDestroyNotify) shimwatch_spawn_result_free);
}

void
shimwatch_spawn_async (const char * const *argv,
                       const char * const *envp,
                       const char         *cwd,
                       int                 stdin_fd,
                       guint               timeout_ms,
                       GAsyncReadyCallback callback,
                       gpointer            user_data)
{
  GTask *task = g_task_new (NULL, NULL, callback, user_data);

  g_task_set_source_tag (task, shimwatch_spawn_async);
  shimwatch_spawn_run (argv, envp, cwd, stdin_fd, timeout_ms, async_done, task);
}

ShimwatchSpawnResult *
shimwatch_spawn_finish (GAsyncResult *result,
                        GError      **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}
