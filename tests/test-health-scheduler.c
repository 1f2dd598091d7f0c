/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchHealthScheduler against fake shims: real ttrpc servers on socketpairs in this
 * process, answering Connect (or not). Checks are spread over the interval, one timer
 * ticks for all targets, a check without an answer by its deadline makes its target
 * unresponsive and the next answered one responsive again; an answer that came in time
 * but was not read yet still counts; a DEFERRED answer does not wake the main loop.
 */
#include "config.h"

#include <sys/socket.h>
#include <unistd.h>

#include "shimwatch-health-scheduler.h"
#include "shimwatch-poller.h"
#include "shimwatch-task-client.h"
#include "shimwatch-ttrpc.h"

typedef struct {
  ShimwatchHealthScheduler *scheduler;
  ShimwatchTtrpc           *server;
  ShimwatchTtrpc           *client_ttrpc;
  ShimwatchTaskClient      *client;
  ShimwatchHealthTarget    *target;
  gboolean                  hung;        /* requests read, never answered */
  guint                     delay_ms;    /* answers after this long */
  guint                     requests;
  GArray                   *ticks;       /* the scheduler's tick count at each request */
  guint                     verdicts;
  gboolean                  responsive;
} FakeShim;

static ShimwatchTtrpc *
ttrpc_for_fd (int fd)
{
  g_autoptr(GSocket) socket = g_socket_new_from_fd (fd, NULL);
  g_autoptr(GSocketConnection) connection = NULL;

  g_assert_nonnull (socket);
  connection = g_socket_connection_factory_create_connection (socket);
  return shimwatch_ttrpc_new (connection);
}

typedef struct {
  ShimwatchTtrpc *server;
  guint32         stream_id;
} Answer;

static gboolean
answer_later_cb (gpointer user_data)
{
  Answer *answer = user_data;

  shimwatch_ttrpc_respond (answer->server, answer->stream_id, SHIMWATCH_GRPC_OK, NULL, NULL);
  g_object_unref (answer->server);
  g_free (answer);
  return G_SOURCE_REMOVE;
}

static void
handle_request (ShimwatchTtrpc        *server,
                guint32                stream_id,
                ShimwatchTtrpcRequest *request,
                gpointer               user_data)
{
  FakeShim *shim = user_data;
  guint64 tick = shimwatch_health_scheduler_get_n_ticks (shim->scheduler);

  g_assert_cmpstr (request->method, ==, "Connect");
  shim->requests++;
  g_array_append_val (shim->ticks, tick);
  if (shim->hung)
    return;
  if (shim->delay_ms > 0)
    {
      Answer *answer = g_new0 (Answer, 1);

      answer->server = g_object_ref (server);
      answer->stream_id = stream_id;
      g_timeout_add (shim->delay_ms, answer_later_cb, answer);
      return;
    }
  /* an empty ConnectResponse: a shim that does not tell its pids */
  shimwatch_ttrpc_respond (server, stream_id, SHIMWATCH_GRPC_OK, NULL, NULL);
}

static void
verdict_cb (gboolean responsive,
            gpointer user_data)
{
  FakeShim *shim = user_data;

  shim->verdicts++;
  shim->responsive = responsive;
}

static FakeShim *
fake_shim_new (ShimwatchHealthScheduler *scheduler,
               guint                     index)
{
  FakeShim *shim = g_new0 (FakeShim, 1);
  g_autofree char *id = g_strdup_printf ("fake%u", index);
  int fds[2];

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  shim->scheduler = scheduler;
  shim->responsive = TRUE;
  shim->ticks = g_array_new (FALSE, FALSE, sizeof (guint64));
  shim->server = ttrpc_for_fd (fds[0]);
  shimwatch_ttrpc_set_request_handler (shim->server, handle_request, shim, NULL);
  shimwatch_ttrpc_start (shim->server);
  shim->client_ttrpc = ttrpc_for_fd (fds[1]);
  shimwatch_ttrpc_start (shim->client_ttrpc);
  shim->client = shimwatch_task_client_new (shim->client_ttrpc, "test", id, 3);
  shim->target = shimwatch_health_scheduler_add (scheduler, shim->client, verdict_cb, shim);
  return shim;
}

static void
fake_shim_free (FakeShim *shim)
{
  if (shim->target != NULL)
    shimwatch_health_scheduler_remove (shim->scheduler, shim->target);
  shimwatch_ttrpc_close (shim->client_ttrpc);
  shimwatch_ttrpc_close (shim->server);
  g_object_unref (shim->client);
  g_object_unref (shim->client_ttrpc);
  g_object_unref (shim->server);
  g_array_unref (shim->ticks);
  g_free (shim);
}

static void
run_until (gboolean (*done) (gpointer), gpointer data, guint timeout_s)
{
  gint64 deadline = g_get_monotonic_time () + timeout_s * G_USEC_PER_SEC;

  while (!done (data))
    {
      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (g_main_context_get_thread_default (), TRUE);
    }
}

typedef struct {
  FakeShim **shims;
  guint      n;
  guint      rounds;
} Fleet;

static gboolean
all_checked (gpointer data)
{
  Fleet *fleet = data;

  for (guint i = 0; i < fleet->n; i++)
    if (fleet->shims[i]->requests < fleet->rounds)
      return FALSE;
  return TRUE;
}

/* 40 shims added at once (as after a burst of CreateTask): one timer for all of them; they
 * are checked in slices of N × tick / interval, every one once per round, not all at once */
static void
test_spread (void)
{
  g_autoptr(ShimwatchHealthScheduler) scheduler = shimwatch_health_scheduler_new (2000, 5000);
  FakeShim *shims[40];
  Fleet fleet = { shims, G_N_ELEMENTS (shims), 2 };
  g_autoptr(GHashTable) per_tick = g_hash_table_new (g_direct_hash, g_direct_equal);
  guint most = 0;
  guint64 ticks_before;

  shimwatch_health_scheduler_set_min_tick (scheduler, 250);
  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    shims[i] = fake_shim_new (scheduler, i);
  g_assert_cmpuint (shimwatch_health_scheduler_get_n_targets (scheduler), ==, 40);
  /* 2000 ms / 40 = 50 ms, below the shortest tick: 8 ticks per interval, 5 checks each */
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 250);

  run_until (all_checked, &fleet, 30);
  ticks_before = shimwatch_health_scheduler_get_n_ticks (scheduler);
  g_assert_cmpuint (ticks_before, >=, 2 * 8 - 1);

  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    {
      /* once per round: the second check of each shim came a round after its first */
      g_assert_cmpuint (shims[i]->ticks->len, >=, 2);
      g_assert_cmpuint (g_array_index (shims[i]->ticks, guint64, 1) -
                        g_array_index (shims[i]->ticks, guint64, 0), >=, 8 - 1);
      g_assert_cmpuint (g_array_index (shims[i]->ticks, guint64, 1) -
                        g_array_index (shims[i]->ticks, guint64, 0), <=, 8 + 1);
      for (guint j = 0; j < 2; j++)
        {
          gpointer tick = GUINT_TO_POINTER ((guint) g_array_index (shims[i]->ticks, guint64, j));
          guint count = GPOINTER_TO_UINT (g_hash_table_lookup (per_tick, tick)) + 1;

          g_hash_table_insert (per_tick, tick, GUINT_TO_POINTER (count));
          most = MAX (most, count);
        }
    }
  /* the 80 checks of two rounds came in slices: 5 a tick (a request read an iteration
   * late may count with the next tick's), never 40 at once */
  g_test_message ("%u ticks with checks, at most %u checks in one", g_hash_table_size (per_tick),
                  most);
  g_assert_cmpuint (most, <=, 10);
  g_assert_cmpuint (g_hash_table_size (per_tick), >=, 8);
  /* all answered: nobody was ever unresponsive */
  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    {
      g_assert_cmpuint (shims[i]->verdicts, ==, 0);
      fake_shim_free (shims[i]);
    }
  g_assert_cmpuint (shimwatch_health_scheduler_get_n_targets (scheduler), ==, 0);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 0);
}

/* the tick follows the number of targets: interval / N, never below the shortest tick;
 * with 1,000 shims at 10 s, one tick a second checks 100 */
static void
test_tick_follows_targets (void)
{
  g_autoptr(ShimwatchHealthScheduler) scheduler = shimwatch_health_scheduler_new (10000, 5000);
  g_autoptr(ShimwatchHealthScheduler) off = shimwatch_health_scheduler_new (0, 5000);
  ShimwatchHealthTarget *targets[1000];
  FakeShim *shim;

  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 0);
  shim = fake_shim_new (scheduler, 0);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 10000);
  /* the same client a thousand times over: only the count matters here */
  for (guint i = 1; i < G_N_ELEMENTS (targets); i++)
    targets[i] = shimwatch_health_scheduler_add (scheduler, shim->client, verdict_cb, shim);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 1000);
  for (guint i = 3; i < G_N_ELEMENTS (targets); i++)
    shimwatch_health_scheduler_remove (scheduler, targets[i]);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 3333);
  for (guint i = 1; i < 3; i++)
    shimwatch_health_scheduler_remove (scheduler, targets[i]);
  fake_shim_free (shim);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 0);

  /* HealthInterval=0: targets are kept, never checked */
  shim = fake_shim_new (off, 0);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (off), ==, 0);
  while (g_main_context_iteration (NULL, FALSE))
    ;
  g_assert_cmpuint (shimwatch_health_scheduler_get_n_ticks (off), ==, 0);
  fake_shim_free (shim);
}

static gboolean
verdict_seen (gpointer data)
{
  return ((FakeShim *) data)->verdicts > 0;
}

/* a hung shim: no answer by the deadline, unresponsive; no second check while the first
 * waits; once it answers again, responsive again */
static void
test_deadline_and_recovery (void)
{
  g_autoptr(ShimwatchHealthScheduler) scheduler = shimwatch_health_scheduler_new (200, 500);
  FakeShim *shim;
  guint requests_when_hung;

  shimwatch_health_scheduler_set_min_tick (scheduler, 50);
  shim = fake_shim_new (scheduler, 0);
  shim->hung = TRUE;
  run_until (verdict_seen, shim, 20);
  g_assert_false (shim->responsive);
  g_assert_cmpuint (shim->verdicts, ==, 1);
  /* ticks every 200 ms, deadline 500 ms: the ticks that came while the check waited did
   * not start another (one more may have come in the verdict's own iteration) */
  g_assert_cmpuint (shimwatch_health_scheduler_get_n_ticks (scheduler), >=, 3);
  g_assert_cmpuint (shim->requests, <=, 2);
  requests_when_hung = shim->requests;

  shim->hung = FALSE;
  shim->verdicts = 0;
  run_until (verdict_seen, shim, 20);
  g_assert_true (shim->responsive);
  g_assert_cmpuint (shim->verdicts, ==, 1);
  g_assert_cmpuint (shim->requests, >, requests_when_hung);
  fake_shim_free (shim);
}

static gboolean
checked_twice (gpointer data)
{
  return ((FakeShim *) data)->requests >= 2;
}

/* an answer that came well within the deadline, but had not been read when the deadline
 * came (one target: the next tick is a whole interval away), still counts */
static void
test_unread_answer_in_time (void)
{
  g_autoptr(ShimwatchHealthScheduler) scheduler = shimwatch_health_scheduler_new (1500, 500);
  FakeShim *shim;

  shimwatch_health_scheduler_set_min_tick (scheduler, 50);
  shim = fake_shim_new (scheduler, 0);
  shim->delay_ms = 50;
  run_until (checked_twice, shim, 20);
  g_assert_cmpuint (shim->verdicts, ==, 0);
  g_assert_true (shim->responsive);
  fake_shim_free (shim);
}

static gboolean
answered_cb_done (gpointer data)
{
  return *(gboolean *) data;
}

static void
probe_done_cb (GObject      *source,
               GAsyncResult *result,
               gpointer      user_data)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (shimwatch_task_client_probe_finish (SHIMWATCH_TASK_CLIENT (source), result,
                                                     &error));
  g_assert_no_error (error);
  *(gboolean *) user_data = TRUE;
}

/* the answer to a DEFERRED call waits in the socket: the main loop does not wake for it;
 * collecting reads it; the peer's hang-up is still seen at once. The connection lives in
 * a main context of its own: what the earlier tests left to finish in the global one (a
 * stream closing in GIO's pool, late under load) must not count as a wake-up here. */
static void
test_deferred_answer_wakes_nobody (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(ShimwatchTtrpc) client_ttrpc = NULL;
  g_autoptr(ShimwatchTaskClient) client = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchTtrpcRequest) request = NULL;
  g_autoptr(GBytes) body = NULL;
  guint8 header_raw[SHIMWATCH_TTRPC_HEADER_LENGTH];
  ShimwatchTtrpcHeader header;
  g_autofree guint8 *request_body = NULL;
  gboolean answered = FALSE;
  gsize length;
  const guint8 *data;
  int fds[2];

  g_main_context_push_thread_default (context);
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  client_ttrpc = ttrpc_for_fd (fds[0]);
  shimwatch_ttrpc_start (client_ttrpc);
  client = shimwatch_task_client_new (client_ttrpc, "test", "raw", 3);
  shimwatch_task_client_probe_async (client, 10000, probe_done_cb, &answered);

  /* the peer, by hand: read the request, answer it */
  g_assert_cmpint (read (fds[1], header_raw, sizeof header_raw), ==, sizeof header_raw);
  shimwatch_wire_header_decode (header_raw, &header);
  request_body = g_malloc (header.length);
  g_assert_cmpint (read (fds[1], request_body, header.length), ==, (gssize) header.length);
  request = shimwatch_wire_decode_request (request_body, header.length, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (request->method, ==, "Connect");
  body = shimwatch_wire_encode_response (SHIMWATCH_GRPC_OK, NULL, NULL);
  data = g_bytes_get_data (body, &length);
  header.length = (guint32) length;
  header.type = SHIMWATCH_TTRPC_TYPE_RESPONSE;
  shimwatch_wire_header_encode (&header, header_raw);
  g_assert_cmpint (write (fds[1], header_raw, sizeof header_raw), ==, sizeof header_raw);
  g_assert_cmpint (write (fds[1], data, length), ==, (gssize) length);

  /* nothing to do for the main loop, however often it looks */
  for (guint i = 0; i < 5; i++)
    g_assert_false (g_main_context_iteration (context, FALSE));
  g_assert_false (answered);

  shimwatch_ttrpc_collect (client_ttrpc);
  run_until (answered_cb_done, &answered, 10);

  /* idle, the connection still sees its peer go */
  close (fds[1]);
  while (!shimwatch_ttrpc_is_closed (client_ttrpc))
    g_main_context_iteration (context, TRUE);
  g_clear_object (&client);
  g_clear_object (&client_ttrpc);
  while (g_main_context_iteration (context, FALSE))
    ;
  g_main_context_pop_thread_default (context);
}

static gboolean
set_flag (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

static void
call_failed_cb (GObject      *source,
                GAsyncResult *result,
                gpointer      user_data)
{
  GError **error = user_data;
  g_autoptr(GBytes) reply = shimwatch_ttrpc_call_finish (SHIMWATCH_TTRPC (source), result,
                                                         error);

  g_assert_null (reply);
  g_assert_nonnull (*error);
}

/* A call's deadline is kept in the main context the call was made in, as its answer is:
 * a client in a context of its own (a thread's, pushed as thread-default) times out while
 * only that context runs. Nothing here iterates the global default context, where the
 * deadline used to be attached and never fired. */
static void
test_timeout_in_own_context (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(GSource) guard = g_timeout_source_new_seconds (20);
  g_autoptr(ShimwatchTtrpc) client = NULL;
  g_autoptr(GError) error = NULL;
  gboolean gave_up = FALSE;
  int fds[2];

  g_main_context_push_thread_default (context);
  g_source_set_callback (guard, set_flag, &gave_up, NULL);
  g_source_attach (guard, context);
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  client = ttrpc_for_fd (fds[0]);
  shimwatch_ttrpc_start (client);
  /* the peer never answers */
  shimwatch_ttrpc_call_async (client, "containerd.task.v2.Task", "Connect", NULL, "test", 100,
                              call_failed_cb, &error);
  while (error == NULL && !gave_up)
    g_main_context_iteration (context, TRUE);
  g_assert_error (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_DEADLINE_EXCEEDED);
  /* the connection stays up: a late answer is only dropped */
  g_assert_false (shimwatch_ttrpc_is_closed (client));

  g_source_destroy (guard);
  close (fds[1]);
  while (!shimwatch_ttrpc_is_closed (client))
    g_main_context_iteration (context, TRUE);
  g_clear_object (&client);
  while (g_main_context_iteration (context, FALSE))
    ;
  g_main_context_pop_thread_default (context);
}

static void
run_for (guint ms)
{
  gboolean over = FALSE;

  g_timeout_add (ms, set_flag, &over);
  while (!over)
    g_main_context_iteration (NULL, TRUE);
}

static gboolean
checked_once (gpointer data)
{
  return ((FakeShim *) data)->requests >= 1;
}

/* a connection that closes during a check gives no verdict (the disconnect path has the
 * shim); a removed target gets no verdict either, and is never checked again */
static void
test_close_and_remove (void)
{
  g_autoptr(ShimwatchHealthScheduler) scheduler = shimwatch_health_scheduler_new (200, 600);
  FakeShim *gone, *removed;

  shimwatch_health_scheduler_set_min_tick (scheduler, 50);
  gone = fake_shim_new (scheduler, 0);
  removed = fake_shim_new (scheduler, 1);
  gone->hung = TRUE;
  removed->hung = TRUE;
  run_until (checked_once, gone, 20);
  run_until (checked_once, removed, 20);

  shimwatch_ttrpc_close (gone->server);
  shimwatch_health_scheduler_remove (scheduler, removed->target);
  removed->target = NULL;
  /* past the deadline of both checks, and a few more ticks */
  run_for (1500);
  g_assert_true (shimwatch_ttrpc_is_closed (gone->client_ttrpc));
  g_assert_cmpuint (gone->verdicts, ==, 0);
  g_assert_true (gone->responsive);
  g_assert_cmpuint (removed->verdicts, ==, 0);
  g_assert_cmpuint (removed->requests, ==, 1);
  fake_shim_free (gone);
  fake_shim_free (removed);
}

static guint poll_ready;

/* the main context's poll, counting what it found ready */
static gint
counting_poll (GPollFD *fds,
               guint    nfds,
               gint     timeout)
{
  gint n = g_poll (fds, nfds, timeout);

  if (n > 0)
    poll_ready += (guint) n;
  return n;
}

/* runs the thread-default main context for @ms */
static void
run_context_for (guint ms)
{
  GMainContext *context = g_main_context_get_thread_default ();
  g_autoptr(GSource) timeout = g_timeout_source_new (ms);
  gboolean over = FALSE;

  g_source_set_callback (timeout, set_flag, &over, NULL);
  g_source_attach (timeout, context);
  while (!over)
    g_main_context_iteration (context, TRUE);
}

/* the last target goes (a lone shim's death, right after its ShimDisconnected): nothing
 * wakes the main context for it; the tick that was armed comes once, finds nothing to
 * check and disarms the timer, and no tick comes after it */
static void
test_last_target_gone_wakes_nobody (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(ShimwatchHealthScheduler) scheduler = NULL;
  FakeShim *shim;
  guint64 ticks;

  g_main_context_push_thread_default (context);
  scheduler = shimwatch_health_scheduler_new (200, 600);
  shimwatch_health_scheduler_set_min_tick (scheduler, 50);
  shim = fake_shim_new (scheduler, 0);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 200);
  while (g_main_context_iteration (context, FALSE))
    ;

  g_main_context_set_poll_func (context, counting_poll);
  poll_ready = 0;
  shimwatch_health_scheduler_remove (scheduler, shim->target);
  shim->target = NULL;
  g_assert_false (g_main_context_iteration (context, FALSE));
  g_assert_cmpuint (poll_ready, ==, 0);
  g_main_context_set_poll_func (context, g_poll);

  ticks = shimwatch_health_scheduler_get_n_ticks (scheduler);
  run_context_for (400);
  g_assert_cmpuint (shimwatch_health_scheduler_get_n_ticks (scheduler), <=, ticks + 1);
  ticks = shimwatch_health_scheduler_get_n_ticks (scheduler);
  run_context_for (400);
  g_assert_cmpuint (shimwatch_health_scheduler_get_n_ticks (scheduler), ==, ticks);
  g_assert_cmpuint (shim->requests, ==, 0);

  /* a target added later is checked again */
  shim->target = shimwatch_health_scheduler_add (scheduler, shim->client, verdict_cb, shim);
  run_until (checked_once, shim, 20);
  g_assert_cmpuint (shim->requests, ==, 1);
  fake_shim_free (shim);
  g_clear_object (&scheduler);
  while (g_main_context_iteration (context, FALSE))
    ;
  g_main_context_pop_thread_default (context);
}

/* the sources attached to @context: the ids of a fresh context count up from 1 */
static guint
count_sources (GMainContext *context)
{
  g_autoptr(GSource) probe = g_idle_source_new ();
  guint last = g_source_attach (probe, context), n = 0;

  g_source_destroy (probe);
  for (guint id = 1; id < last; id++)
    if (g_main_context_find_source_by_id (context, id) != NULL)
      n++;
  return n;
}

static void
free_fleet (FakeShim **shims,
            guint      n)
{
  GMainContext *context = g_main_context_get_thread_default ();

  for (guint i = 0; i < n; i++)
    fake_shim_free (shims[i]);
  while (g_main_context_iteration (context, FALSE))
    ;
}

/* 100 shims, one tick a second that checks all of them: no dispatch of the timer starts
 * more than SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH checks (a death coming during the tick
 * waits for no more than that), and every one is still checked in each tick, answered and
 * read. Counted per main-loop iteration, each of which dispatches the timer once at most. */
static void
test_checks_per_dispatch_bounded (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(ShimwatchHealthScheduler) scheduler = NULL;
  FakeShim *shims[100];
  Fleet fleet = { shims, G_N_ELEMENTS (shims), 2 };
  gint64 deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  guint64 most = 0, iterations_with_checks = 0;

  g_main_context_push_thread_default (context);
  scheduler = shimwatch_health_scheduler_new (1000, 30000);
  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    shims[i] = fake_shim_new (scheduler, i);
  g_assert_cmpuint (shimwatch_health_scheduler_get_tick_ms (scheduler), ==, 1000);

  while (!all_checked (&fleet))
    {
      guint64 before = shimwatch_health_scheduler_get_n_checks (scheduler);
      guint64 started;

      g_assert_cmpint (g_get_monotonic_time (), <, deadline);
      g_main_context_iteration (context, TRUE);
      started = shimwatch_health_scheduler_get_n_checks (scheduler) - before;
      most = MAX (most, started);
      if (started > 0)
        iterations_with_checks++;
    }
  g_test_message ("200 checks in %" G_GUINT64_FORMAT " iterations, at most %" G_GUINT64_FORMAT
                  " in one", iterations_with_checks, most);
  g_assert_cmpuint (most, >, 0);
  g_assert_cmpuint (most, <=, SHIMWATCH_HEALTH_CHECKS_PER_DISPATCH);
  /* each tick checked every shim: two ticks for the two rounds, and the answers read */
  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    {
      g_assert_cmpuint (shims[i]->verdicts, ==, 0);
      g_assert_cmpuint (g_array_index (shims[i]->ticks, guint64, 1), ==,
                        g_array_index (shims[i]->ticks, guint64, 0) + 1);
    }
  free_fleet (shims, G_N_ELEMENTS (shims));
  g_clear_object (&scheduler);
  g_main_context_pop_thread_default (context);
}

/* 40 hung shims, all checked at once: their checks wait for one deadline, the scheduler's,
 * not for a timeout source each in the main context (each of which every iteration of the
 * main loop walks) */
static void
test_one_deadline_for_all (void)
{
  g_autoptr(GMainContext) context = g_main_context_new ();
  g_autoptr(ShimwatchHealthScheduler) scheduler = NULL;
  FakeShim *shims[40];
  Fleet fleet = { shims, G_N_ELEMENTS (shims), 1 };
  guint before, after;

  g_main_context_push_thread_default (context);
  scheduler = shimwatch_health_scheduler_new (1000, 30000);
  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    {
      shims[i] = fake_shim_new (scheduler, i);
      shims[i]->hung = TRUE;
    }
  while (g_main_context_iteration (context, FALSE))
    ;
  before = count_sources (context);
  run_until (all_checked, &fleet, 60);
  after = count_sources (context);
  g_test_message ("%u sources before the checks, %u while 40 wait for their answers", before,
                  after);
  g_assert_cmpuint (after, <=, before + 1);
  for (guint i = 0; i < G_N_ELEMENTS (shims); i++)
    g_assert_cmpuint (shims[i]->verdicts, ==, 0);
  free_fleet (shims, G_N_ELEMENTS (shims));
  g_clear_object (&scheduler);
  g_main_context_pop_thread_default (context);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/health-scheduler/spread", test_spread);
  g_test_add_func ("/health-scheduler/tick-follows-targets", test_tick_follows_targets);
  g_test_add_func ("/health-scheduler/deadline-and-recovery", test_deadline_and_recovery);
  g_test_add_func ("/health-scheduler/unread-answer-in-time", test_unread_answer_in_time);
  g_test_add_func ("/health-scheduler/close-and-remove", test_close_and_remove);
  g_test_add_func ("/health-scheduler/last-target-gone-wakes-nobody",
                   test_last_target_gone_wakes_nobody);
  g_test_add_func ("/health-scheduler/checks-per-dispatch-bounded",
                   test_checks_per_dispatch_bounded);
  g_test_add_func ("/health-scheduler/one-deadline-for-all", test_one_deadline_for_all);
  g_test_add_func ("/ttrpc/deferred-answer-wakes-nobody", test_deferred_answer_wakes_nobody);
  g_test_add_func ("/ttrpc/timeout-in-own-context", test_timeout_in_own_context);

  return g_test_run ();
}
