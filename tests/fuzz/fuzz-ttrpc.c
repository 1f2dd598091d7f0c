/* SPDX-License-Identifier: Apache-2.0
 *
 * ttrpc framing as a peer can send it, in both roles, fed in chunks through a real socket
 * on the GLib main loop:
 *   - client role (shimwatchd calling a shim): three calls are in flight on streams 1, 3
 *     and 5; the input is what the "shim" answers;
 *   - server role (the events service a shim forwards to): the input is what the "shim"
 *     sends; each valid request is answered, a Forward request is decoded as an event.
 * The first byte chooses the role and the chunk size (1 to 128 bytes, so that headers and
 * bodies are split anywhere). Then the peer closes. Every call ends exactly once, the
 * connection closes exactly once, and nothing leaks or crashes.
 */
#include "config.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gio/gio.h>

#include "shimwatch-ttrpc.h"
#include "fuzz-common.h"

typedef struct {
  guint calls_done;
  guint closed;
  guint requests;
} State;

static void
call_done_cb (GObject      *source,
              GAsyncResult *result,
              gpointer      user_data)
{
  State *state = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) payload = shimwatch_ttrpc_call_finish (SHIMWATCH_TTRPC (source), result,
                                                           &error);

  g_assert ((payload == NULL) == (error != NULL));
  state->calls_done++;
}

static void
closed_cb (ShimwatchTtrpc *ttrpc,
           GError         *reason,
           gpointer        user_data)
{
  State *state = user_data;

  state->closed++;
}

static void
request_cb (ShimwatchTtrpc        *ttrpc,
            guint32                stream_id,
            ShimwatchTtrpcRequest *request,
            gpointer               user_data)
{
  State *state = user_data;
  g_autoptr(ShimwatchEvent) event = NULL;
  g_autoptr(GError) error = NULL;

  state->requests++;
  if (g_strcmp0 (request->method, "Forward") == 0)
    {
      event = shimwatch_wire_decode_forward_request (request->payload, &error);
      if (event == NULL)
        {
          shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                                   error->message, NULL);
          return;
        }
    }
  shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_OK, NULL, request->payload);
}

static void
drain (int fd)
{
  guint8 sink[65536];

  while (read (fd, sink, sizeof sink) > 0)
    ;
}

static void
run_loop (int peer)
{
  for (guint i = 0; i < 1000 && g_main_context_iteration (NULL, FALSE); i++)
    drain (peer);
  drain (peer);
}

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_quiet_logs ();
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketConnection) connection = NULL;
  g_autoptr(ShimwatchTtrpc) ttrpc = NULL;
  State state = { 0 };
  gboolean server;
  gsize chunk;
  int fds[2];

  if (size < 1)
    return 0;
  server = data[0] & 1;
  chunk = 1 + (data[0] >> 1);
  data++;
  size--;

  g_assert_no_errno (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds));
  socket = g_socket_new_from_fd (fds[0], NULL);
  g_assert_nonnull (socket);
  connection = g_socket_connection_factory_create_connection (socket);
  ttrpc = shimwatch_ttrpc_new (connection);
  g_signal_connect (ttrpc, "closed", G_CALLBACK (closed_cb), &state);
  if (server)
    shimwatch_ttrpc_set_request_handler (ttrpc, request_cb, &state, NULL);
  shimwatch_ttrpc_start (ttrpc);
  if (!server)
    {
      g_autoptr(GBytes) empty = g_bytes_new_static ("", 0);

      for (guint i = 0; i < 3; i++)
        shimwatch_ttrpc_call_async (ttrpc, "containerd.task.v2.Task", "State", empty, "fuzz", 0,
                                    call_done_cb, &state);
    }
  run_loop (fds[1]);

  /* a client reads only while it awaits an answer promptly: once its calls are answered,
   * what else the peer sends waits in the socket (as a deferred health check's answer
   * does) until the socket is full; then the peer can send no more, and stops */
  for (gsize offset = 0, stalled = 0;
       offset < size && stalled < 3 && !shimwatch_ttrpc_is_closed (ttrpc); )
    {
      gsize n = MIN (chunk, size - offset);
      gssize written = write (fds[1], data + offset, n);

      if (written < 0 && errno != EAGAIN)
        break;
      if (written > 0)
        {
          offset += (gsize) written;
          stalled = 0;
        }
      else
        {
          stalled++;
          shimwatch_ttrpc_collect (ttrpc);
        }
      run_loop (fds[1]);
    }

  /* the peer goes away: EOF, then whatever is still pending fails */
  close (fds[1]);
  for (guint i = 0; i < 100 && !shimwatch_ttrpc_is_closed (ttrpc); i++)
    g_main_context_iteration (NULL, FALSE);
  shimwatch_ttrpc_close (ttrpc);
  while (g_main_context_iteration (NULL, FALSE))
    ;
  g_assert_cmpuint (state.closed, ==, 1);
  if (!server)
    g_assert_cmpuint (state.calls_done, ==, 3);
  g_signal_handlers_disconnect_by_data (ttrpc, &state);
  return 0;
}
