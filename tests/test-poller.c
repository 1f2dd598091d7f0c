/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchPoller: many fds cost the main context one fd; readiness, end of file and
 * hang-ups reach the right callback; a watch removed during a dispatch (its own or another
 * of the same batch) is never called again, even when its fd number is reused at once; the
 * fds ready together are dispatched by their watches' priorities. The bare timer source
 * (shimwatch_timer_source_new()) fires at its ready time only.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gio/gio.h>
#include <glib/gstdio.h>

#include "shimwatch-poller.h"

typedef struct {
  int                   fd;
  guint                 calls;
  ShimwatchPollerEvents last;
  gboolean              drain;      /* read what is there, so the fd is no longer ready */
  gboolean              keep;
  guint                 destroyed;
} Counter;

static gboolean
count_cb (int                   fd,
          ShimwatchPollerEvents events,
          gpointer              user_data)
{
  Counter *counter = user_data;

  g_assert_cmpint (fd, ==, counter->fd);
  counter->calls++;
  counter->last = events;
  if (counter->drain)
    {
      char buffer[64];

      while (read (fd, buffer, sizeof buffer) > 0)
        ;
    }
  return counter->keep;
}

static void
count_destroy (gpointer user_data)
{
  ((Counter *) user_data)->destroyed++;
}

/* one iteration at a time until nothing is pending (a loaded machine may be slow to make
 * an fd ready: the caller waits for what it expects with wait_for ()) */
static void
drain_context (void)
{
  while (g_main_context_iteration (NULL, FALSE))
    ;
}

static void
wait_for (gboolean (*done) (gpointer), gpointer data)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;

  while (!done (data))
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (NULL, TRUE);
    }
}

static gboolean
called (gpointer data)
{
  return ((Counter *) data)->calls > 0;
}

static void
make_socketpair (int fds[2])
{
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), ==, 0);
}

/* how many fds the default main context polls: one iteration's prepare and query, without
 * the poll, then its check and dispatch (with nothing ready) */
static gint
context_fds (void)
{
  GMainContext *context = g_main_context_default ();
  GPollFD fds[64];
  gint timeout, priority, n;

  g_assert_true (g_main_context_acquire (context));
  g_main_context_prepare (context, &priority);
  n = g_main_context_query (context, priority, &timeout, fds, G_N_ELEMENTS (fds));
  g_assert_cmpint (n, <=, (gint) G_N_ELEMENTS (fds));
  for (gint i = 0; i < n; i++)
    fds[i].revents = 0;
  if (g_main_context_check (context, priority, fds, n))
    g_main_context_dispatch (context);
  g_main_context_release (context);
  return n;
}

static void
test_many_fds (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  struct rlimit limit;
  guint n = 400;
  g_autofree Counter *counters = NULL;
  g_autofree int *peers = NULL;
  gint before;

  /* two fds per socketpair: stay within the soft limit */
  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &limit), ==, 0);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < 2 * n + 64)
    n = (guint) (limit.rlim_cur - 64) / 2;
  counters = g_new0 (Counter, n);
  peers = g_new0 (int, n);

  drain_context ();
  before = context_fds ();
  for (guint i = 0; i < n; i++)
    {
      int fds[2];

      make_socketpair (fds);
      counters[i].fd = fds[0];
      counters[i].drain = TRUE;
      counters[i].keep = TRUE;
      peers[i] = fds[1];
      g_assert_nonnull (shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb,
                                              &counters[i], count_destroy, NULL));
    }
  g_assert_cmpuint (shimwatch_poller_get_n_watches (poller), >=, n);
  /* the main context polls the one epoll fd, whatever the number of watches */
  g_assert_cmpint (context_fds (), <=, before + 1);

  /* every seventh peer writes: exactly those callbacks run, once each (they drain) */
  for (guint i = 0; i < n; i += 7)
    g_assert_cmpint (write (peers[i], "x", 1), ==, 1);
  wait_for (called, &counters[(n - 1) / 7 * 7]);
  for (guint i = 0; i < n; i += 7)
    wait_for (called, &counters[i]);
  drain_context ();
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (counters[i].calls, ==, i % 7 == 0 ? 1 : 0);

  /* hang-ups: closing every peer reaches every watch */
  for (guint i = 0; i < n; i++)
    close (peers[i]);
  for (guint i = 0; i < n; i++)
    {
      counters[i].keep = FALSE;
      counters[i].calls = 0;
    }
  for (guint i = 0; i < n; i++)
    wait_for (called, &counters[i]);
  for (guint i = 0; i < n; i++)
    {
      g_assert_cmpuint (counters[i].calls, ==, 1);     /* returned FALSE: removed */
      g_assert_cmpuint (counters[i].destroyed, ==, 1);
      g_assert_true (counters[i].last & SHIMWATCH_POLLER_IN);
      close (counters[i].fd);
    }
  drain_context ();
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (counters[i].calls, ==, 1);
}

/* end of file and hang-up, as a shim's socket shows its death */
static void
test_eof_and_hangup (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  Counter counter = { .keep = FALSE };
  int fds[2];

  make_socketpair (fds);
  counter.fd = fds[0];
  g_assert_nonnull (shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb,
                                          &counter, count_destroy, NULL));
  drain_context ();
  g_assert_cmpuint (counter.calls, ==, 0);
  close (fds[1]);
  wait_for (called, &counter);
  g_assert_true (counter.last & SHIMWATCH_POLLER_IN);
  g_assert_true (counter.last & SHIMWATCH_POLLER_HUP);
  g_assert_cmpint (read (fds[0], &(char) { 0 }, 1), ==, 0);    /* EOF */
  g_assert_cmpuint (counter.destroyed, ==, 1);
  close (fds[0]);
}

/* asked for PEER_CLOSED alone: data does not wake anyone, the peer's close does */
static void
test_peer_closed_only (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  Counter counter = { .keep = FALSE };
  ShimwatchPollerWatch *watch;
  int fds[2];

  make_socketpair (fds);
  counter.fd = fds[0];
  watch = shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_PEER_CLOSED, count_cb,
                                &counter, NULL, NULL);
  g_assert_nonnull (watch);
  g_assert_cmpint (write (fds[1], "reply", 5), ==, 5);
  /* the data is there, and stays there: the main loop has nothing to do */
  g_assert_false (g_main_context_iteration (NULL, FALSE));
  g_assert_cmpuint (counter.calls, ==, 0);

  /* asking for IN again makes the waiting data wake the loop */
  counter.keep = TRUE;
  counter.drain = TRUE;
  g_assert_true (shimwatch_poller_watch_set_events (watch, SHIMWATCH_POLLER_IN |
                                                    SHIMWATCH_POLLER_PEER_CLOSED, NULL));
  wait_for (called, &counter);
  g_assert_cmpuint (counter.calls, ==, 1);
  g_assert_false (counter.last & SHIMWATCH_POLLER_PEER_CLOSED);

  counter.calls = 0;
  counter.keep = FALSE;
  g_assert_true (shimwatch_poller_watch_set_events (watch, SHIMWATCH_POLLER_PEER_CLOSED, NULL));
  g_assert_cmpint (write (fds[1], "more", 4), ==, 4);
  g_assert_false (g_main_context_iteration (NULL, FALSE));
  close (fds[1]);
  wait_for (called, &counter);
  g_assert_true (counter.last & SHIMWATCH_POLLER_PEER_CLOSED);
  close (fds[0]);
}

/* level-triggered, as g_unix_fd_add (): what is not read is reported again */
static void
test_level_triggered (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  Counter counter = { .keep = TRUE };
  ShimwatchPollerWatch *watch;
  int fds[2];

  make_socketpair (fds);
  counter.fd = fds[0];
  watch = shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb, &counter,
                                count_destroy, NULL);
  g_assert_cmpint (write (fds[1], "x", 1), ==, 1);
  wait_for (called, &counter);
  g_main_context_iteration (NULL, FALSE);
  g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (counter.calls, >=, 3);
  shimwatch_poller_watch_remove (watch);
  g_assert_cmpuint (counter.destroyed, ==, 1);
  counter.calls = 0;
  drain_context ();
  g_assert_cmpuint (counter.calls, ==, 0);
  close (fds[0]);
  close (fds[1]);
}

/* the first callback of a batch removes the other watch of the batch, closes its fd and
 * watches a new fd that gets the same number: the removed one is not called for its event,
 * and the newcomer is not called for the old fd's event */
typedef struct {
  ShimwatchPoller      *poller;
  ShimwatchPollerWatch *watches[2];
  int                   fds[2];
  int                   peers[2];
  int                   old_peer;
  int                   survivor;
  ShimwatchPollerWatch *newcomer_watch;
  Counter               newcomer;
  gboolean              reused;
  guint                 calls;
} Batch;

static gboolean
batch_cb (int                   fd,
          ShimwatchPollerEvents events G_GNUC_UNUSED,
          gpointer              user_data)
{
  Batch *batch = user_data;
  int victim = batch->fds[0] == fd ? 1 : 0;
  int fds[2];

  batch->calls++;
  batch->survivor = 1 - victim;
  shimwatch_poller_watch_remove (batch->watches[victim]);
  close (batch->fds[victim]);
  make_socketpair (fds);
  batch->reused = fds[0] == batch->fds[victim];
  batch->newcomer.fd = fds[0];
  batch->newcomer.keep = TRUE;
  batch->newcomer_watch = shimwatch_poller_add (batch->poller, fds[0], SHIMWATCH_POLLER_IN,
                                                count_cb, &batch->newcomer, NULL, NULL);
  g_assert_nonnull (batch->newcomer_watch);
  batch->old_peer = batch->peers[victim];
  batch->peers[victim] = fds[1];
  /* and itself too, while being dispatched */
  shimwatch_poller_watch_remove (batch->watches[1 - victim]);
  return G_SOURCE_REMOVE;    /* already removed: must not be removed twice */
}

static gboolean
batch_done (gpointer data)
{
  return ((Batch *) data)->calls > 0;
}

static void
test_remove_during_dispatch (void)
{
  Batch batch = { .poller = shimwatch_poller_get_default () };

  for (int i = 0; i < 2; i++)
    {
      int fds[2];

      make_socketpair (fds);
      batch.fds[i] = fds[0];
      batch.peers[i] = fds[1];
      batch.watches[i] = shimwatch_poller_add (batch.poller, fds[0], SHIMWATCH_POLLER_IN,
                                               batch_cb, &batch, NULL, NULL);
    }
  /* both ready before the loop looks: one epoll_wait takes both events */
  g_assert_cmpint (write (batch.peers[0], "a", 1), ==, 1);
  g_assert_cmpint (write (batch.peers[1], "b", 1), ==, 1);
  wait_for (batch_done, &batch);
  drain_context ();
  g_assert_cmpuint (batch.calls, ==, 1);
  g_assert_cmpuint (batch.newcomer.calls, ==, 0);
  if (!batch.reused)
    g_test_message ("the fd number was not reused; the removal was still checked");

  shimwatch_poller_watch_remove (batch.newcomer_watch);
  close (batch.newcomer.fd);
  close (batch.fds[batch.survivor]);
  close (batch.old_peer);
  for (int i = 0; i < 2; i++)
    close (batch.peers[i]);
}

typedef struct {
  ShimwatchPoller      *poller;
  int                   fd;
  int                   peer;
  guint                 calls;
  Counter               newcomer;
  int                   newcomer_peer;
  ShimwatchPollerWatch *newcomer_watch;
} Reuse;

/* what a shim's pidfd callback once set off: the shim's connection ended, which closed the
 * pidfd, and the cleanup watched the task's pidfd, given the number just freed; then the
 * callback returned G_SOURCE_REMOVE */
static gboolean
close_own_fd_cb (int                   fd,
                 ShimwatchPollerEvents events G_GNUC_UNUSED,
                 gpointer              user_data)
{
  Reuse *reuse = user_data;
  int fds[2];

  reuse->calls++;
  g_assert_cmpint (close (fd), ==, 0);
  make_socketpair (fds);
  if (fds[0] != fd)
    {
      /* the lowest free number is the one closed; made sure of, whatever else is open */
      g_assert_cmpint (dup3 (fds[0], fd, O_CLOEXEC), ==, fd);
      close (fds[0]);
    }
  reuse->newcomer.fd = fd;
  reuse->newcomer.keep = TRUE;
  reuse->newcomer.drain = TRUE;
  reuse->newcomer_peer = fds[1];
  reuse->newcomer_watch = shimwatch_poller_add (reuse->poller, fd, SHIMWATCH_POLLER_IN,
                                                count_cb, &reuse->newcomer, NULL, NULL);
  g_assert_nonnull (reuse->newcomer_watch);
  return G_SOURCE_REMOVE;
}

static gboolean
tick_cb (gpointer data G_GNUC_UNUSED)
{
  return G_SOURCE_CONTINUE;
}

static gboolean
reuse_called (gpointer data)
{
  return ((Reuse *) data)->calls > 0;
}

/* a callback that closed its own fd before returning G_SOURCE_REMOVE, while a new watch
 * took the number: removing the old watch leaves the new one in the set (a task's death
 * was once seen only at the cleanup's kill deadline, 2 s late) */
static void
test_fd_closed_in_callback (void)
{
  Reuse reuse = { .poller = shimwatch_poller_get_default () };
  guint before = shimwatch_poller_get_n_watches (reuse.poller);
  guint tick;
  int fds[2];

  make_socketpair (fds);
  reuse.fd = fds[0];
  reuse.peer = fds[1];
  g_assert_nonnull (shimwatch_poller_add (reuse.poller, reuse.fd, SHIMWATCH_POLLER_IN,
                                          close_own_fd_cb, &reuse, NULL, NULL));
  g_assert_cmpint (write (reuse.peer, "a", 1), ==, 1);
  wait_for (reuse_called, &reuse);
  drain_context ();
  g_assert_cmpuint (reuse.calls, ==, 1);
  g_assert_cmpuint (shimwatch_poller_get_n_watches (reuse.poller), ==, before + 1);

  /* the new watch of the number still wakes (the tick ends the wait of a loop that
   * nothing else would wake), and goes when it is removed */
  g_assert_cmpint (write (reuse.newcomer_peer, "b", 1), ==, 1);
  tick = g_timeout_add (100, tick_cb, NULL);
  wait_for (called, &reuse.newcomer);
  g_source_remove (tick);
  g_assert_cmpint (reuse.newcomer.fd, ==, reuse.fd);
  shimwatch_poller_watch_remove (reuse.newcomer_watch);
  g_assert_cmpuint (shimwatch_poller_get_n_watches (reuse.poller), ==, before);
  reuse.newcomer.calls = 0;
  g_assert_cmpint (write (reuse.newcomer_peer, "c", 1), ==, 1);
  drain_context ();
  g_assert_cmpuint (reuse.newcomer.calls, ==, 0);

  close (reuse.newcomer.fd);
  close (reuse.newcomer_peer);
  close (reuse.peer);
}

/* a pidfd turns readable when its process exits: how a shim's death is seen when a child
 * of the shim keeps its socket open */
static void
test_pidfd (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  Counter counter = { .keep = FALSE };
  int status;
  pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      pause ();
      _exit (0);
    }
  counter.fd = pidfd_open (pid, 0);
  if (counter.fd < 0)
    {
      int saved_errno = errno;

      kill (pid, SIGKILL);
      g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
      /* valgrind does not know the system call; the kernels we run on all have it */
      if (saved_errno == ENOSYS)
        {
          g_test_skip ("pidfd_open: not implemented here");
          return;
        }
      g_error ("pidfd_open: %s", g_strerror (saved_errno));
    }
  g_assert_nonnull (shimwatch_poller_add (poller, counter.fd, SHIMWATCH_POLLER_IN, count_cb,
                                          &counter, count_destroy, NULL));
  drain_context ();
  g_assert_cmpuint (counter.calls, ==, 0);
  g_assert_cmpint (pidfd_send_signal (counter.fd, SIGKILL, NULL, 0), ==, 0);
  wait_for (called, &counter);
  g_assert_true (counter.last & SHIMWATCH_POLLER_IN);
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  close (counter.fd);
}

static gboolean
log_order_cb (int                   fd,
              ShimwatchPollerEvents events,
              gpointer              user_data)
{
  g_array_append_val ((GArray *) user_data, fd);
  return G_SOURCE_REMOVE;
}

/* four peers hang up in turn, all before the main loop looks: one batch, in which the two
 * of G_PRIORITY_HIGH (as a shim's connection) come first, each group in the kernel's
 * order (the order of the hang-ups) */
static void
test_priority_within_a_batch (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  g_autoptr(GArray) order = g_array_new (FALSE, FALSE, sizeof (int));
  const int priorities[4] = { G_PRIORITY_DEFAULT, G_PRIORITY_HIGH, G_PRIORITY_DEFAULT,
                              G_PRIORITY_HIGH };
  const guint expected[4] = { 1, 3, 0, 2 };
  int fds[4][2];

  drain_context ();
  for (guint i = 0; i < 4; i++)
    {
      ShimwatchPollerWatch *watch;

      make_socketpair (fds[i]);
      watch = shimwatch_poller_add (poller, fds[i][0], SHIMWATCH_POLLER_PEER_CLOSED,
                                    log_order_cb, order, NULL, NULL);
      g_assert_nonnull (watch);
      g_assert_cmpint (shimwatch_poller_watch_get_priority (watch), ==, G_PRIORITY_DEFAULT);
      shimwatch_poller_watch_set_priority (watch, priorities[i]);
      g_assert_cmpint (shimwatch_poller_watch_get_priority (watch), ==, priorities[i]);
    }
  for (guint i = 0; i < 4; i++)
    close (fds[i][1]);
  /* each hang-up is in the epoll set's ready list once close() returns */
  g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (order->len, ==, 4);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (g_array_index (order, int, i), ==, fds[expected[i]][0]);
  for (guint i = 0; i < 4; i++)
    close (fds[i][0]);
}

static gboolean
set_flag_cb (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

/* GLib wakes a context when a source that cannot recurse is dispatched (its fds are taken
 * out of the poll and put back): an empty iteration after each dispatch. The poller's
 * dispatch leaves nothing of the sort: the next iteration sleeps until something happens */
static void
test_no_wakeup_of_its_own (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  Counter counter = { .drain = TRUE, .keep = TRUE };
  gboolean fired = FALSE;
  ShimwatchPollerWatch *watch;
  int fds[2];

  make_socketpair (fds);
  counter.fd = fds[0];
  watch = shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb, &counter,
                                NULL, NULL);
  drain_context ();
  g_assert_cmpint (write (fds[1], "x", 1), ==, 1);
  wait_for (called, &counter);
  /* the one thing to come is the timeout: the first iteration dispatches it */
  g_timeout_add (20, set_flag_cb, &fired);
  g_assert_true (g_main_context_iteration (NULL, TRUE));
  g_assert_true (fired);
  g_assert_cmpuint (counter.calls, ==, 1);
  shimwatch_poller_watch_remove (watch);
  close (fds[0]);
  close (fds[1]);
}

typedef struct {
  Counter  *other;
  guint     other_calls_seen;
  guint     iterations;
} Nester;

/* a callback that runs the main context itself (as a test's crash point does) */
static gboolean
nest_cb (int                   fd,
         ShimwatchPollerEvents events,
         gpointer              user_data)
{
  Nester *nester = user_data;
  gboolean fired = FALSE;

  g_timeout_add (30, set_flag_cb, &fired);
  while (!fired)
    {
      g_main_context_iteration (NULL, TRUE);
      nester->iterations++;
    }
  nester->other_calls_seen = nester->other->calls;
  return G_SOURCE_REMOVE;
}

/* a main-loop iteration nested in a callback hands out nothing of the batch being
 * dispatched (the other fd, ready in the same batch, comes after, once), and it sleeps:
 * the epoll fd, ready until the batch is done, is left out of its poll. Afterwards the
 * poller works as before. */
static void
test_nested_iteration (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  Counter other = { .keep = FALSE }, later = { .drain = TRUE, .keep = FALSE };
  Nester nester = { .other = &other };
  ShimwatchPollerWatch *first;
  int a[2], b[2], c[2];

  make_socketpair (a);
  make_socketpair (b);
  make_socketpair (c);
  other.fd = b[0];
  later.fd = c[0];
  drain_context ();
  first = shimwatch_poller_add (poller, a[0], SHIMWATCH_POLLER_PEER_CLOSED, nest_cb, &nester,
                                NULL, NULL);
  shimwatch_poller_watch_set_priority (first, G_PRIORITY_HIGH);
  g_assert_nonnull (shimwatch_poller_add (poller, b[0], SHIMWATCH_POLLER_PEER_CLOSED, count_cb,
                                          &other, NULL, NULL));
  g_assert_nonnull (shimwatch_poller_add (poller, c[0], SHIMWATCH_POLLER_IN, count_cb, &later,
                                          NULL, NULL));
  close (b[1]);
  close (a[1]);
  g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (nester.other_calls_seen, ==, 0);
  /* a poll that did not sleep would have come back thousands of times in 30 ms */
  g_assert_cmpuint (nester.iterations, <=, 5);
  g_assert_cmpuint (other.calls, ==, 1);

  g_assert_cmpint (write (c[1], "x", 1), ==, 1);
  wait_for (called, &later);
  g_assert_cmpuint (later.calls, ==, 1);
  close (a[0]);
  close (b[0]);
  close (c[0]);
  close (c[1]);
}

/* A FIFO held O_RDWR never sees an end of file: its last read before the close finds
 * nothing (EAGAIN) whenever its callback read everything. That read may be left out
 * only where the poller knows it would find nothing: an epoll_wait() that began after
 * the writers were gone looked at every ready fd (fewer events than asked for) and did
 * not find this one, nor did any since. Never otherwise: data written before the
 * writers went, a sweep that did not look at everything (a full batch), a watch added
 * after the sweep. */
static void
sweep_with (Counter *other,
            int      peer)
{
  other->calls = 0;
  g_assert_cmpint (write (peer, "x", 1), ==, 1);
  wait_for (called, other);
}

/* is_ready(): what the last epoll_wait() found ready, also while its callback is still
 * to come in the same batch (a callback dispatched first asks) */
typedef struct {
  Counter              counter;
  ShimwatchPollerWatch *other;
  gboolean              other_ready;
} AskingCounter;

static gboolean
ask_cb (int                   fd,
        ShimwatchPollerEvents events,
        gpointer              user_data)
{
  AskingCounter *asking = user_data;

  asking->other_ready = shimwatch_poller_watch_is_ready (asking->other);
  return count_cb (fd, events, &asking->counter);
}

static void
test_ready_in_the_batch (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  g_autoptr(GError) error = NULL;
  AskingCounter first = { 0 };
  Counter second = { 0 };
  ShimwatchPollerWatch *first_watch, *second_watch;
  int a[2], b[2];

  make_socketpair (a);
  make_socketpair (b);
  first.counter.fd = a[0];
  first.counter.keep = TRUE;
  first.counter.drain = TRUE;
  second.fd = b[0];
  second.keep = TRUE;
  second.drain = TRUE;
  first_watch = shimwatch_poller_add (poller, a[0], SHIMWATCH_POLLER_IN, ask_cb, &first, NULL,
                                      &error);
  g_assert_no_error (error);
  shimwatch_poller_watch_set_priority (first_watch, G_PRIORITY_HIGH);
  second_watch = shimwatch_poller_add (poller, b[0], SHIMWATCH_POLLER_IN, count_cb, &second,
                                       NULL, &error);
  g_assert_no_error (error);
  first.other = second_watch;
  g_assert_false (shimwatch_poller_watch_is_ready (second_watch));

  /* both ready in one batch: the first, dispatched first, sees the second ready */
  g_assert_cmpint (write (b[1], "x", 1), ==, 1);
  g_assert_cmpint (write (a[1], "x", 1), ==, 1);
  while (first.counter.calls == 0 || second.calls == 0)
    {
      first.counter.calls = second.calls = 0;
      first.other_ready = FALSE;
      g_main_context_iteration (NULL, TRUE);
      if (first.counter.calls == 0 || second.calls == 0)
        {
          /* the kernel made them ready apart: once more, together */
          g_assert_cmpint (write (b[1], "x", 1), ==, 1);
          g_assert_cmpint (write (a[1], "x", 1), ==, 1);
          g_usleep (1000);
        }
    }
  g_assert_true (first.other_ready);
  g_assert_true (shimwatch_poller_watch_is_ready (second_watch));

  /* a batch without it: no longer */
  first.counter.calls = 0;
  g_assert_cmpint (write (a[1], "x", 1), ==, 1);
  wait_for (called, &first.counter);
  g_assert_false (first.other_ready);
  g_assert_false (shimwatch_poller_watch_is_ready (second_watch));

  shimwatch_poller_watch_remove (first_watch);
  shimwatch_poller_watch_remove (second_watch);
  for (guint i = 0; i < 2; i++)
    {
      close (a[i]);
      close (b[i]);
    }
}

static void
test_drained (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("swpoller-XXXXXX", &error);
  g_autofree char *path = NULL;
  g_autofree Counter *many = NULL;
  g_autofree int *many_peers = NULL;
  g_autofree ShimwatchPollerWatch **many_watches = NULL;
  Counter fifo = { 0 }, other = { 0 }, late = { 0 };
  ShimwatchPollerWatch *watch, *other_watch, *late_watch;
  struct rlimit limit;
  int pair[2], late_pipe[2], writer;
  guint n_many = 300;
  char buffer[16];
  gint64 gone;

  g_assert_no_error (error);
  path = g_build_filename (dir, "fifo", NULL);
  g_assert_no_errno (mkfifo (path, 0600));
  fifo.fd = open (path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  g_assert_cmpint (fifo.fd, >=, 0);
  fifo.keep = TRUE;          /* reads nothing: what is written stays until the test reads */
  writer = open (path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  g_assert_cmpint (writer, >=, 0);
  make_socketpair (pair);
  other.fd = pair[0];
  other.keep = TRUE;
  other.drain = TRUE;
  watch = shimwatch_poller_add (poller, fifo.fd, SHIMWATCH_POLLER_IN, count_cb, &fifo, NULL,
                                &error);
  g_assert_no_error (error);
  other_watch = shimwatch_poller_add (poller, other.fd, SHIMWATCH_POLLER_IN, count_cb, &other,
                                      NULL, &error);
  g_assert_no_error (error);
  sweep_with (&other, pair[1]);

  /* nothing is known while the writers are not known gone */
  g_assert_false (shimwatch_poller_watch_is_drained (watch, 0));

  /* a line written before its writer went: no sweep since, then one that found it */
  g_assert_cmpint (write (writer, "line\n", 5), ==, 5);
  close (writer);
  g_usleep (2);
  gone = g_get_monotonic_time ();
  g_usleep (2);
  g_assert_false (shimwatch_poller_watch_is_drained (watch, gone));
  wait_for (called, &fifo);
  g_assert_false (shimwatch_poller_watch_is_drained (watch, gone));
  /* still there: every sweep finds it again */
  fifo.calls = 0;
  sweep_with (&other, pair[1]);
  g_assert_cmpuint (fifo.calls, >=, 1);
  g_assert_false (shimwatch_poller_watch_is_drained (watch, gone));

  /* read to the end: the sweep after that does not find it, and it is drained; not for
   * writers gone after that sweep began */
  g_assert_cmpint (read (fifo.fd, buffer, sizeof buffer), ==, 5);
  g_assert_false (shimwatch_poller_watch_is_drained (watch, gone));
  fifo.calls = 0;
  sweep_with (&other, pair[1]);
  g_assert_cmpuint (fifo.calls, ==, 0);
  g_assert_true (shimwatch_poller_watch_is_drained (watch, gone));
  g_assert_false (shimwatch_poller_watch_is_drained (watch, g_get_monotonic_time ()));

  /* a watch added after the last sweep: that sweep did not look at it */
  g_assert_no_errno (pipe2 (late_pipe, O_NONBLOCK | O_CLOEXEC));
  late.fd = late_pipe[0];
  late.keep = TRUE;
  late_watch = shimwatch_poller_add (poller, late.fd, SHIMWATCH_POLLER_IN, count_cb, &late,
                                     NULL, &error);
  g_assert_no_error (error);
  g_assert_false (shimwatch_poller_watch_is_drained (late_watch, gone));
  sweep_with (&other, pair[1]);
  g_assert_true (shimwatch_poller_watch_is_drained (late_watch, gone));

  /* more ready fds than one epoll_wait() takes: a batch that did not look at all of them
   * is no sweep, whatever it did not hand out */
  g_assert_no_errno (getrlimit (RLIMIT_NOFILE, &limit));
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < 2 * n_many + 64)
    {
      limit.rlim_cur = MIN (limit.rlim_max, 2 * n_many + 64);
      g_assert_no_errno (setrlimit (RLIMIT_NOFILE, &limit));
    }
  g_assert_cmpuint (limit.rlim_cur, >=, 2 * n_many + 64);
  many = g_new0 (Counter, n_many);
  many_peers = g_new0 (int, n_many);
  many_watches = g_new0 (ShimwatchPollerWatch *, n_many);
  for (guint i = 0; i < n_many; i++)
    {
      int fds[2];

      make_socketpair (fds);
      many[i].fd = fds[0];
      many[i].keep = TRUE;    /* stays ready */
      many_peers[i] = fds[1];
      g_assert_cmpint (write (fds[1], "x", 1), ==, 1);
      many_watches[i] = shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb,
                                              &many[i], NULL, &error);
      g_assert_no_error (error);
    }
  g_usleep (2);
  gone = g_get_monotonic_time ();
  g_usleep (2);
  for (guint round = 0; round < 4; round++)
    g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (many[0].calls + many[n_many - 1].calls, >, 0);
  g_assert_false (shimwatch_poller_watch_is_drained (watch, gone));
  g_assert_false (shimwatch_poller_watch_is_drained (late_watch, gone));
  for (guint i = 0; i < n_many; i++)
    {
      shimwatch_poller_watch_remove (many_watches[i]);
      close (many[i].fd);
      close (many_peers[i]);
    }
  sweep_with (&other, pair[1]);
  g_assert_true (shimwatch_poller_watch_is_drained (watch, gone));

  shimwatch_poller_watch_remove (late_watch);
  shimwatch_poller_watch_remove (other_watch);
  shimwatch_poller_watch_remove (watch);
  close (late_pipe[0]);
  close (late_pipe[1]);
  close (pair[0]);
  close (pair[1]);
  close (fifo.fd);
  g_assert_no_errno (g_unlink (path));
  g_assert_no_errno (g_rmdir (dir));
}

static void
test_refused_fd (void)
{
  ShimwatchPoller *poller = shimwatch_poller_get_default ();
  g_autoptr(GError) error = NULL;
  g_autofree char *path = NULL;
  int fd = g_file_open_tmp ("shimwatch-poller-XXXXXX", &path, NULL);
  int fds[2];
  guint before = shimwatch_poller_get_n_watches (poller);
  ShimwatchPollerWatch *watch;

  /* a regular file cannot be in an epoll set: a clear error, nothing watched */
  g_assert_null (shimwatch_poller_add (poller, fd, SHIMWATCH_POLLER_IN, count_cb, NULL, NULL,
                                       &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED);
  g_assert_cmpuint (shimwatch_poller_get_n_watches (poller), ==, before);
  close (fd);
  unlink (path);
  g_clear_error (&error);

  /* the same fd twice */
  make_socketpair (fds);
  watch = shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb, NULL, NULL, NULL);
  g_assert_null (shimwatch_poller_add (poller, fds[0], SHIMWATCH_POLLER_IN, count_cb, NULL,
                                       NULL, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS);
  shimwatch_poller_watch_remove (watch);
  g_assert_cmpuint (shimwatch_poller_get_n_watches (poller), ==, before);
  close (fds[0]);
  close (fds[1]);
}

typedef struct {
  GSource *source;
  guint    calls;
  gint64   ready_at;     /* the ready time it was armed for */
  gint64   late_at;      /* when the dispatch came */
  guint    rearm;        /* times left to re-arm itself from its dispatch */
} Timer;

static gboolean
timer_cb (gpointer user_data)
{
  Timer *timer = user_data;

  timer->calls++;
  timer->late_at = g_get_monotonic_time ();
  /* never before its time */
  g_assert_cmpint (timer->late_at, >=, timer->ready_at);
  if (timer->rearm > 0)
    {
      timer->rearm--;
      timer->ready_at = g_get_monotonic_time () + 10 * 1000;
      g_source_set_ready_time (timer->source, timer->ready_at);
    }
  else
    g_source_set_ready_time (timer->source, -1);
  return G_SOURCE_CONTINUE;
}

static gboolean
timer_called (gpointer data)
{
  return ((Timer *) data)->calls > 0;
}

static gboolean
timer_called_4_times (gpointer data)
{
  return ((Timer *) data)->calls == 4;
}

/* shimwatch_timer_source_new(): a timer at -1 never fires; armed, it fires once its time
 * has come (never before), as often as it is re-armed from its own dispatch, and not again
 * once left at -1 (no interval of its own, unlike a GLib timeout) */
static void
test_timer_source (void)
{
  Timer timer = { 0 };
  gboolean fired = FALSE;

  timer.source = shimwatch_timer_source_new (-1);
  g_source_set_callback (timer.source, timer_cb, &timer, NULL);
  g_source_attach (timer.source, NULL);
  g_timeout_add (50, set_flag_cb, &fired);
  while (!fired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (timer.calls, ==, 0);

  timer.ready_at = g_get_monotonic_time () + 20 * 1000;
  g_source_set_ready_time (timer.source, timer.ready_at);
  wait_for (timer_called, &timer);
  g_assert_cmpuint (timer.calls, ==, 1);

  /* armed, then re-armed twice from its dispatch, then left at -1: 3 more calls */
  timer.rearm = 2;
  timer.ready_at = g_get_monotonic_time () + 10 * 1000;
  g_source_set_ready_time (timer.source, timer.ready_at);
  wait_for (timer_called_4_times, &timer);
  g_assert_cmpint (g_source_get_ready_time (timer.source), ==, -1);
  fired = FALSE;
  g_timeout_add (50, set_flag_cb, &fired);
  while (!fired)
    g_main_context_iteration (NULL, TRUE);
  g_assert_cmpuint (timer.calls, ==, 4);

  /* a ready time set before it is attached holds (as the spawn's timer is made) */
  g_source_destroy (timer.source);
  g_source_unref (timer.source);
  timer = (Timer) { .ready_at = g_get_monotonic_time () + 10 * 1000 };
  timer.source = shimwatch_timer_source_new (timer.ready_at);
  g_assert_cmpint (g_source_get_ready_time (timer.source), ==, timer.ready_at);
  g_source_set_callback (timer.source, timer_cb, &timer, NULL);
  g_source_attach (timer.source, NULL);
  wait_for (timer_called, &timer);
  g_assert_cmpuint (timer.calls, ==, 1);
  g_source_destroy (timer.source);
  g_source_unref (timer.source);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/poller/many-fds", test_many_fds);
  g_test_add_func ("/poller/eof-and-hangup", test_eof_and_hangup);
  g_test_add_func ("/poller/peer-closed-only", test_peer_closed_only);
  g_test_add_func ("/poller/level-triggered", test_level_triggered);
  g_test_add_func ("/poller/remove-during-dispatch", test_remove_during_dispatch);
  g_test_add_func ("/poller/fd-closed-in-callback", test_fd_closed_in_callback);
  g_test_add_func ("/poller/pidfd", test_pidfd);
  g_test_add_func ("/poller/priority-within-a-batch", test_priority_within_a_batch);
  g_test_add_func ("/poller/no-wakeup-of-its-own", test_no_wakeup_of_its_own);
  g_test_add_func ("/poller/nested-iteration", test_nested_iteration);
  g_test_add_func ("/poller/refused-fd", test_refused_fd);
  g_test_add_func ("/poller/timer-source", test_timer_source);
  g_test_add_func ("/poller/drained", test_drained);
  g_test_add_func ("/poller/ready-in-the-batch", test_ready_in_the_batch);

  return g_test_run ();
}
