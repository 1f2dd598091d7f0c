/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchTtrpc"

#include "config.h"

#include <errno.h>
#include <string.h>
#include <gio/gunixsocketaddress.h>

#include "shimwatch-poller.h"
#include "shimwatch-ttrpc.h"

#define READ_CHUNK 65536
/* one dispatch reads at most this many chunks: a fast peer cannot hold the main loop */
#define READ_CHUNKS_PER_DISPATCH 16

struct _ShimwatchTtrpc
{
  GObject                       parent_instance;

  GSocketConnection            *connection;
  GSocket                      *socket;
  /* one watch in the service's epoll set, for reading and, while a send would block,
   * writing; none before start () with nothing to write */
  ShimwatchPollerWatch         *watch;
  int                           priority;           /* the watch's, in a batch */
  gboolean                      want_write;

  GByteArray                   *inbuf;
  GByteArray                   *outbuf;
  gsize                         output_limit;
  gboolean                      output_full;        /* client role: calls refused */

  /* an oversized frame is skipped, then answered / failed on its stream */
  guint64                       skip_remaining;
  ShimwatchTtrpcHeader          skipped_header;

  guint32                       next_stream_id;     /* client role: 1, 3, 5, … */
  guint32                       last_request_id;    /* server role: must increase */
  GHashTable                   *pending;            /* stream id → GTask */
  guint                         n_prompt;           /* pending calls not DEFERRED */

  ShimwatchTtrpcRequestHandler  handler;
  gpointer                      handler_data;
  GDestroyNotify                handler_destroy;

  gboolean                      started;
  gboolean                      closed;
};

enum {
  SIGNAL_CLOSED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

G_DEFINE_TYPE (ShimwatchTtrpc, shimwatch_ttrpc, G_TYPE_OBJECT)
G_DEFINE_QUARK (shimwatch-ttrpc-error-quark, shimwatch_ttrpc_error)

typedef struct {
  guint32  stream_id;
  gboolean deferred;
  gboolean caller_deadline;   /* no timeout_source: shimwatch_ttrpc_expire_deferred() */
  GSource *timeout_source;
} CallData;

static void
call_data_free (CallData *data)
{
  if (data->timeout_source != NULL)
    {
      g_source_destroy (data->timeout_source);
      g_source_unref (data->timeout_source);
    }
  g_free (data);
}

static void close_with_error (ShimwatchTtrpc *self,
                              GError         *reason);
static void update_watch     (ShimwatchTtrpc *self);

/* the call on @stream_id, no longer pending (the caller owns the reference), or NULL */
static GTask *
take_pending (ShimwatchTtrpc *self,
              guint32         stream_id)
{
  GTask *task = NULL;
  CallData *data;

  if (!g_hash_table_steal_extended (self->pending, GUINT_TO_POINTER (stream_id), NULL,
                                    (gpointer *) &task))
    return NULL;
  data = g_task_get_task_data (task);
  if (!data->deferred && --self->n_prompt == 0)
    update_watch (self);
  return task;
}

static void
fail_pending (ShimwatchTtrpc *self,
              guint32         stream_id,
              GError         *error)
{
  GTask *task = take_pending (self, stream_id);

  if (task == NULL)
    {
      g_error_free (error);
      return;
    }
  g_task_return_error (task, error);
  g_object_unref (task);
}

static void
close_with_error (ShimwatchTtrpc *self,
                  GError         *reason)
{
  g_autoptr(GError) owned_reason = reason;
  g_autoptr(GList) tasks = NULL;
  g_autoptr(GError) close_error = NULL;
  g_autoptr(ShimwatchTtrpc) keep = NULL;

  if (self->closed)
    return;
  self->closed = TRUE;
  /* a handler may drop the last reference elsewhere: the socket is closed below */
  keep = g_object_ref (self);

  /* as the Go client: every pending call fails first, then the on-close callback runs */
  tasks = g_hash_table_get_values (self->pending);
  g_hash_table_steal_all (self->pending);
  self->n_prompt = 0;
  for (GList *l = tasks; l != NULL; l = l->next)
    {
      GTask *task = l->data;

      g_task_return_new_error (task, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED,
                               "ttrpc: closed (%s)", owned_reason->message);
      g_object_unref (task);
    }

  /* before the socket is closed: for a shim, the handler tells its death to the bus, and
   * nothing that can wait (leaving the epoll set, the close) comes before that. The watch
   * meanwhile reads nothing: the connection is closed. */
  g_signal_emit (self, signals[SIGNAL_CLOSED], 0, owned_reason);

  /* out of the epoll set before the fd closes */
  g_clear_pointer (&self->watch, shimwatch_poller_watch_remove);
  if (!g_io_stream_close (G_IO_STREAM (self->connection), NULL, &close_error))
    g_debug ("closing ttrpc socket: %s", close_error->message);
  g_debug ("ttrpc connection closed: %s", owned_reason->message);
}

static void
flush_output (ShimwatchTtrpc *self)
{
  while (self->outbuf->len > 0 && !self->closed)
    {
      g_autoptr(GError) error = NULL;
      gssize n = g_socket_send (self->socket, (const char *) self->outbuf->data,
                                self->outbuf->len, NULL, &error);

      if (n < 0)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            {
              if (!self->want_write)
                {
                  self->want_write = TRUE;
                  update_watch (self);
                }
              return;
            }
          close_with_error (self, g_error_new (SHIMWATCH_TTRPC_ERROR,
                                               SHIMWATCH_TTRPC_ERROR_CLOSED,
                                               "write failed: %s", error->message));
          return;
        }
      g_byte_array_remove_range (self->outbuf, 0, (guint) n);
    }
  if (self->output_full && self->outbuf->len < self->output_limit / 2)
    {
      self->output_full = FALSE;
      g_message ("ttrpc peer reads again: calls are sent again");
    }

  if (self->want_write && !self->closed)
    {
      self->want_write = FALSE;
      update_watch (self);
    }
}

static void
queue_frame (ShimwatchTtrpc *self,
             guint32         stream_id,
             guint8          type,
             guint8          flags,
             GBytes         *body)
{
  ShimwatchTtrpcHeader header = { 0, stream_id, type, flags };
  guint8 raw[SHIMWATCH_TTRPC_HEADER_LENGTH];
  gsize length;
  const guint8 *data = g_bytes_get_data (body, &length);

  header.length = (guint32) length;
  shimwatch_wire_header_encode (&header, raw);
  g_byte_array_append (self->outbuf, raw, sizeof raw);
  if (length > 0)
    g_byte_array_append (self->outbuf, data, (guint) length);
  flush_output (self);
}

void
shimwatch_ttrpc_respond (ShimwatchTtrpc *self,
                         guint32         stream_id,
                         int             code,
                         const char     *message,
                         GBytes         *payload)
{
  g_autoptr(GBytes) body = NULL;

  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  if (self->closed)
    return;
  body = shimwatch_wire_encode_response (code, message, payload);
  if (g_bytes_get_size (body) > SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX)
    {
      g_clear_pointer (&body, g_bytes_unref);
      body = shimwatch_wire_encode_response (SHIMWATCH_GRPC_RESOURCE_EXHAUSTED,
                                             "response exceeds the 4 MiB message limit", NULL);
    }
  queue_frame (self, stream_id, SHIMWATCH_TTRPC_TYPE_RESPONSE, 0, body);
  /* a peer that sends requests and never reads the replies would grow them without
   * bound: at the cap it is closed (as a client, it can reconnect and read) */
  if (!self->closed && self->outbuf->len > self->output_limit)
    close_with_error (self, g_error_new (SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_OUTPUT_FULL,
                                         "the peer does not read its replies: %u bytes unsent, "
                                         "over the %" G_GSIZE_FORMAT "-byte limit",
                                         self->outbuf->len, self->output_limit));
}

static void
handle_response (ShimwatchTtrpc             *self,
                 const ShimwatchTtrpcHeader *header,
                 const guint8               *body)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) payload = NULL;
  g_autofree char *message = NULL;
  GTask *task;
  int code;

  task = g_hash_table_lookup (self->pending, GUINT_TO_POINTER (header->stream_id));
  if (task == NULL)
    {
      g_message ("received message on inactive stream %u; dropped", header->stream_id);
      return;
    }

  if (!shimwatch_wire_decode_response (body, header->length, &code, &message, &payload, &error))
    {
      fail_pending (self, header->stream_id,
                    g_error_new (SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_PROTOCOL,
                                 "stream %u: %s", header->stream_id, error->message));
      return;
    }
  if (code != SHIMWATCH_GRPC_OK)
    {
      fail_pending (self, header->stream_id,
                    g_error_new (SHIMWATCH_TTRPC_ERROR, code, "%s", message));
      return;
    }

  task = take_pending (self, header->stream_id);
  g_task_return_pointer (task, g_steal_pointer (&payload), (GDestroyNotify) g_bytes_unref);
  g_object_unref (task);
}

static void
handle_request (ShimwatchTtrpc             *self,
                const ShimwatchTtrpcHeader *header,
                const guint8               *body)
{
  g_autoptr(ShimwatchTtrpcRequest) request = NULL;
  g_autoptr(GError) error = NULL;
  guint32 sid = header->stream_id;

  /* the same checks as containerd/ttrpc server.go; each answered on the stream */
  if (sid % 2 == 0)
    {
      shimwatch_ttrpc_respond (self, sid, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                               "StreamID must be odd for client initiated streams", NULL);
      return;
    }
  if (sid <= self->last_request_id)
    {
      shimwatch_ttrpc_respond (self, sid, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                               "StreamID cannot be re-used and must increment", NULL);
      return;
    }
  self->last_request_id = sid;

  if (header->flags & SHIMWATCH_TTRPC_FLAG_REMOTE_OPEN)
    {
      shimwatch_ttrpc_respond (self, sid, SHIMWATCH_GRPC_UNIMPLEMENTED,
                               "streaming requests are not supported", NULL);
      return;
    }

  request = shimwatch_wire_decode_request (body, header->length, &error);
  if (request == NULL)
    {
      shimwatch_ttrpc_respond (self, sid, SHIMWATCH_GRPC_INVALID_ARGUMENT, error->message, NULL);
      return;
    }

  if (self->handler == NULL)
    {
      g_autofree char *text = g_strdup_printf ("service %s", request->service);

      shimwatch_ttrpc_respond (self, sid, SHIMWATCH_GRPC_UNIMPLEMENTED, text, NULL);
      return;
    }
  self->handler (self, sid, request, self->handler_data);
}

static void
handle_oversized (ShimwatchTtrpc             *self,
                  const ShimwatchTtrpcHeader *header)
{
  g_message ("stream %u: discarded a %u-byte frame over the %u-byte limit",
             header->stream_id, header->length, SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX);

  if (header->type == SHIMWATCH_TTRPC_TYPE_RESPONSE)
    fail_pending (self, header->stream_id,
                  g_error_new (SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_RESOURCE_EXHAUSTED,
                               "response of %u bytes exceeds the 4 MiB message limit",
                               header->length));
  else if (header->type == SHIMWATCH_TTRPC_TYPE_REQUEST && self->handler != NULL)
    shimwatch_ttrpc_respond (self, header->stream_id, SHIMWATCH_GRPC_RESOURCE_EXHAUSTED,
                             "message exceeds the 4 MiB message limit", NULL);
}

static void
dispatch_frame (ShimwatchTtrpc             *self,
                const ShimwatchTtrpcHeader *header,
                const guint8               *body)
{
  switch (header->type)
    {
    case SHIMWATCH_TTRPC_TYPE_RESPONSE:
      handle_response (self, header, body);
      break;
    case SHIMWATCH_TTRPC_TYPE_REQUEST:
      if (self->handler != NULL)
        handle_request (self, header, body);
      else
        g_message ("stream %u: request from a server peer; dropped", header->stream_id);
      break;
    case SHIMWATCH_TTRPC_TYPE_DATA:
      /* only unary methods are served: no stream is ever open for data */
      if (self->handler != NULL)
        shimwatch_ttrpc_respond (self, header->stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                                 "StreamID is no longer active", NULL);
      else
        g_message ("stream %u: data frame for an inactive stream; dropped", header->stream_id);
      break;
    default:
      if (self->handler != NULL)
        shimwatch_ttrpc_respond (self, header->stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                                 "unknown message type", NULL);
      else
        g_message ("stream %u: frame of unknown type %u; dropped",
                   header->stream_id, header->type);
      break;
    }
}

static void
process_input (ShimwatchTtrpc *self)
{
  gsize offset = 0;

  while (!self->closed)
    {
      ShimwatchTtrpcHeader header;
      gsize available = self->inbuf->len - offset;

      if (self->skip_remaining > 0)
        {
          gsize n = MIN (available, self->skip_remaining);

          offset += n;
          self->skip_remaining -= n;
          if (self->skip_remaining > 0)
            break;
          handle_oversized (self, &self->skipped_header);
          continue;
        }

      if (available < SHIMWATCH_TTRPC_HEADER_LENGTH)
        break;
      shimwatch_wire_header_decode (self->inbuf->data + offset, &header);
      if (header.length > SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX)
        {
          offset += SHIMWATCH_TTRPC_HEADER_LENGTH;
          self->skipped_header = header;
          self->skip_remaining = header.length;
          continue;
        }
      if (available < SHIMWATCH_TTRPC_HEADER_LENGTH + (gsize) header.length)
        break;

      dispatch_frame (self, &header, self->inbuf->data + offset + SHIMWATCH_TTRPC_HEADER_LENGTH);
      offset += SHIMWATCH_TTRPC_HEADER_LENGTH + header.length;
    }

  if (!self->closed && offset > 0)
    g_byte_array_remove_range (self->inbuf, 0, (guint) offset);
}

/* reads what the peer sent, a bounded amount at a time: a fast peer cannot hold the main
 * loop; what is left is read on a later iteration */
static void
read_input (ShimwatchTtrpc *self)
{
  guint8 chunk[READ_CHUNK];

  for (guint chunks = 0; chunks < READ_CHUNKS_PER_DISPATCH && !self->closed; chunks++)
    {
      g_autoptr(GError) error = NULL;
      gssize n = g_socket_receive (self->socket, (char *) chunk, sizeof chunk, NULL, &error);

      if (n == 0)
        {
          close_with_error (self, g_error_new_literal (SHIMWATCH_TTRPC_ERROR,
                                                       SHIMWATCH_TTRPC_ERROR_CLOSED,
                                                       "end of stream"));
          return;
        }
      if (n < 0)
        {
          if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
            return;
          close_with_error (self, g_error_new (SHIMWATCH_TTRPC_ERROR,
                                               SHIMWATCH_TTRPC_ERROR_CLOSED,
                                               "read failed: %s", error->message));
          return;
        }
      g_byte_array_append (self->inbuf, chunk, (guint) n);
      process_input (self);
      if ((gsize) n < sizeof chunk)
        return;
    }
}

static gboolean
io_ready_cb (int                   fd G_GNUC_UNUSED,
             ShimwatchPollerEvents events,
             gpointer              user_data)
{
  ShimwatchTtrpc *self = user_data;
  g_autoptr(ShimwatchTtrpc) keep G_GNUC_UNUSED = g_object_ref (self);

  if (self->want_write &&
      (events & (SHIMWATCH_POLLER_OUT | SHIMWATCH_POLLER_ERR | SHIMWATCH_POLLER_HUP)))
    flush_output (self);
  /* a client whose peer is gone for good (a hang-up: both directions shut) and that awaits
   * no answer: what may be left unread answers no call and would be dropped, so the end is
   * known without reading to it (a dead shim's connection, on the way to ShimDisconnected) */
  if (self->started && !self->closed && self->handler == NULL &&
      (events & SHIMWATCH_POLLER_HUP) && g_hash_table_size (self->pending) == 0)
    {
      close_with_error (self, g_error_new_literal (SHIMWATCH_TTRPC_ERROR,
                                                   SHIMWATCH_TTRPC_ERROR_CLOSED,
                                                   "end of stream"));
      return G_SOURCE_CONTINUE;
    }
  /* an error or hang-up is read too: the read tells which, and ends the connection */
  if (self->started && !self->closed &&
      (events & (SHIMWATCH_POLLER_IN | SHIMWATCH_POLLER_PEER_CLOSED | SHIMWATCH_POLLER_ERR |
                 SHIMWATCH_POLLER_HUP)))
    read_input (self);
  return G_SOURCE_CONTINUE;     /* the watch goes with the connection */
}

/* What the connection waits for. Once started, it always sees the peer hang up; it reads
 * as soon as data arrives when it serves requests or a call's answer is awaited promptly.
 * While only DEFERRED calls are pending, their answers wait in the socket until collected,
 * so a thousand answers to a thousand health checks cost no wakeup each. */
static void
update_watch (ShimwatchTtrpc *self)
{
  ShimwatchPollerEvents events = 0;
  g_autoptr(GError) error = NULL;

  if (self->closed)
    return;
  if (self->started)
    {
      events |= SHIMWATCH_POLLER_PEER_CLOSED;
      if (self->handler != NULL || self->n_prompt > 0)
        events |= SHIMWATCH_POLLER_IN;
    }
  if (self->want_write)
    events |= SHIMWATCH_POLLER_OUT;

  if (events == 0)
    g_clear_pointer (&self->watch, shimwatch_poller_watch_remove);
  else if (self->watch == NULL)
    {
      self->watch = shimwatch_poller_add (shimwatch_poller_get_default (),
                                          g_socket_get_fd (self->socket), events, io_ready_cb,
                                          self, NULL, &error);
      if (self->watch != NULL)
        shimwatch_poller_watch_set_priority (self->watch, self->priority);
    }
  else
    shimwatch_poller_watch_set_events (self->watch, events, &error);
  /* the kernel refuses only for want of memory (or max_user_watches): a connection that
   * cannot be watched could not tell its peer's death, so it ends now, visibly */
  if (error != NULL)
    close_with_error (self, g_error_new (SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED,
                                         "%s", error->message));
}

void
shimwatch_ttrpc_start (ShimwatchTtrpc *self)
{
  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  if (self->started || self->closed)
    return;
  self->started = TRUE;
  update_watch (self);
}

void
shimwatch_ttrpc_set_priority (ShimwatchTtrpc *self,
                              int             priority)
{
  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  self->priority = priority;
  if (self->watch != NULL)
    shimwatch_poller_watch_set_priority (self->watch, priority);
}

void
shimwatch_ttrpc_collect (ShimwatchTtrpc *self)
{
  g_autoptr(ShimwatchTtrpc) keep = NULL;

  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  if (!self->started || self->closed)
    return;
  keep = g_object_ref (self);
  read_input (self);
}

void
shimwatch_ttrpc_expire_deferred (ShimwatchTtrpc *self)
{
  g_autoptr(ShimwatchTtrpc) keep = NULL;
  g_autoptr(GArray) expired = NULL;
  GHashTableIter iter;
  gpointer key, value;

  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  if (self->closed)
    return;
  keep = g_object_ref (self);
  /* an answer that arrived, unread, counts */
  shimwatch_ttrpc_collect (self);
  /* what is still pending after that read: a connection has one or two calls at a time */
  expired = g_array_new (FALSE, FALSE, sizeof (guint32));
  g_hash_table_iter_init (&iter, self->pending);
  while (g_hash_table_iter_next (&iter, &key, &value))
    {
      CallData *data = g_task_get_task_data (value);

      if (data->caller_deadline)
        g_array_append_val (expired, data->stream_id);
    }
  for (guint i = 0; i < expired->len && !self->closed; i++)
    {
      guint32 stream_id = g_array_index (expired, guint32, i);
      GTask *task = g_hash_table_lookup (self->pending, GUINT_TO_POINTER (stream_id));

      if (task == NULL)
        continue;
      /* the connection stays up; a late answer is dropped as an inactive stream */
      fail_pending (self, stream_id,
                    g_error_new (SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_DEADLINE_EXCEEDED,
                                 "%s: no answer within its deadline", g_task_get_name (task)));
    }
}

static gboolean
call_timeout_cb (gpointer user_data)
{
  GTask *task = user_data;
  ShimwatchTtrpc *self = g_task_get_source_object (task);
  CallData *data = g_task_get_task_data (task);

  g_autoptr(GTask) keep G_GNUC_UNUSED = g_object_ref (task);

  g_clear_pointer (&data->timeout_source, g_source_unref);
  /* a deferred call's answer may be waiting, unread: it counts if it came in time */
  if (data->deferred)
    {
      shimwatch_ttrpc_collect (self);
      if (g_hash_table_lookup (self->pending, GUINT_TO_POINTER (data->stream_id)) != task)
        return G_SOURCE_REMOVE;
    }
  /* the connection stays up; a late answer is dropped as an inactive stream */
  fail_pending (self, data->stream_id,
                g_error_new (SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_DEADLINE_EXCEEDED,
                             "%s: no answer within its deadline", g_task_get_name (task)));
  return G_SOURCE_REMOVE;
}

void
shimwatch_ttrpc_call_async (ShimwatchTtrpc      *self,
                            const char          *service,
                            const char          *method,
                            GBytes              *payload,
                            const char          *namespace_,
                            guint                timeout_ms,
                            GAsyncReadyCallback  callback,
                            gpointer             user_data)
{
  shimwatch_ttrpc_call_full_async (self, service, method, payload, namespace_, timeout_ms,
                                   SHIMWATCH_TTRPC_CALL_NONE, callback, user_data);
}

void
shimwatch_ttrpc_call_full_async (ShimwatchTtrpc          *self,
                                 const char              *service,
                                 const char              *method,
                                 GBytes                  *payload,
                                 const char              *namespace_,
                                 guint                    timeout_ms,
                                 ShimwatchTtrpcCallFlags  flags,
                                 GAsyncReadyCallback      callback,
                                 gpointer                 user_data)
{
  g_autoptr(GTask) task = NULL;
  g_autoptr(GBytes) body = NULL;
  g_autofree char *name = NULL;
  CallData *data;

  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));
  g_return_if_fail (service != NULL && method != NULL);
  /* a deferred answer is read at the latest at the deadline: there must be one */
  g_return_if_fail (!(flags & SHIMWATCH_TTRPC_CALL_DEFERRED) || timeout_ms > 0);
  g_return_if_fail (!(flags & SHIMWATCH_TTRPC_CALL_CALLER_DEADLINE) ||
                    (flags & SHIMWATCH_TTRPC_CALL_DEFERRED));

  task = g_task_new (self, NULL, callback, user_data);
  g_task_set_source_tag (task, shimwatch_ttrpc_call_async);
  name = g_strdup_printf ("/%s/%s", service, method);
  g_task_set_name (task, name);

  if (self->closed)
    {
      g_task_return_new_error (task, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED,
                               "ttrpc: closed");
      return;
    }

  body = shimwatch_wire_encode_request (service, method, payload,
                                        (gint64) timeout_ms * G_GINT64_CONSTANT (1000000),
                                        namespace_);
  if (g_bytes_get_size (body) > SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX)
    {
      g_task_return_new_error (task, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_RESOURCE_EXHAUSTED,
                               "%s: request of %zu bytes exceeds the 4 MiB message limit",
                               name, g_bytes_get_size (body));
      return;
    }
  /* a peer that does not read its requests: refuse more rather than close, since for a
   * shim closing would read as its death and its task would be cleaned up */
  if (self->outbuf->len >= self->output_limit)
    {
      if (!self->output_full)
        g_warning ("ttrpc peer does not read its requests (%u bytes unsent); refusing "
                   "calls until it does", self->outbuf->len);
      self->output_full = TRUE;
      g_task_return_new_error (task, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_RESOURCE_EXHAUSTED,
                               "%s: the peer does not read its requests (%u bytes unsent)",
                               name, self->outbuf->len);
      return;
    }
  if (self->next_stream_id > G_MAXUINT32 - 2)
    {
      g_task_return_new_error (task, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_RESOURCE_EXHAUSTED,
                               "%s: stream ids exhausted on this connection", name);
      return;
    }

  data = g_new0 (CallData, 1);
  data->stream_id = self->next_stream_id;
  data->deferred = (flags & SHIMWATCH_TTRPC_CALL_DEFERRED) != 0;
  data->caller_deadline = (flags & SHIMWATCH_TTRPC_CALL_CALLER_DEADLINE) != 0;
  self->next_stream_id += 2;
  g_task_set_task_data (task, data, (GDestroyNotify) call_data_free);
  /* the deadline is kept where the answer is delivered: the caller's thread-default
   * context, which is not the global default one in a thread of its own */
  if (timeout_ms > 0 && !data->caller_deadline)
    {
      data->timeout_source = g_timeout_source_new (timeout_ms);
      g_source_set_callback (data->timeout_source, call_timeout_cb, task, NULL);
      g_source_attach (data->timeout_source, g_task_get_context (task));
    }

  g_hash_table_insert (self->pending, GUINT_TO_POINTER (data->stream_id), g_object_ref (task));
  if (!data->deferred && self->n_prompt++ == 0)
    update_watch (self);
  queue_frame (self, data->stream_id, SHIMWATCH_TTRPC_TYPE_REQUEST, 0, body);
}

GBytes *
shimwatch_ttrpc_call_finish (ShimwatchTtrpc  *self,
                             GAsyncResult    *result,
                             GError         **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

#ifdef SHIMWATCH_TEST_HOOKS
void
shimwatch_ttrpc_set_output_limit (ShimwatchTtrpc *self,
                                  gsize           limit)
{
  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));
  g_return_if_fail (limit > 0);

  self->output_limit = limit;
}
#endif

gsize
shimwatch_ttrpc_get_output_pending (ShimwatchTtrpc *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_TTRPC (self), 0);
  return self->outbuf->len;
}

void
shimwatch_ttrpc_close (ShimwatchTtrpc *self)
{
  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  close_with_error (self, g_error_new_literal (SHIMWATCH_TTRPC_ERROR,
                                               SHIMWATCH_TTRPC_ERROR_CLOSED,
                                               "closed locally"));
}

gboolean
shimwatch_ttrpc_is_closed (ShimwatchTtrpc *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_TTRPC (self), TRUE);
  return self->closed;
}

void
shimwatch_ttrpc_set_request_handler (ShimwatchTtrpc               *self,
                                     ShimwatchTtrpcRequestHandler  handler,
                                     gpointer                      user_data,
                                     GDestroyNotify                destroy)
{
  g_return_if_fail (SHIMWATCH_IS_TTRPC (self));

  if (self->handler_destroy != NULL)
    self->handler_destroy (self->handler_data);
  self->handler = handler;
  self->handler_data = user_data;
  self->handler_destroy = destroy;
  update_watch (self);
}

GSocketAddress *
shimwatch_ttrpc_parse_address (const char  *address,
                               GError     **error)
{
  const char *path;

  g_return_val_if_fail (address != NULL, NULL);

  if (g_str_has_prefix (address, "unix://"))
    {
      path = address + strlen ("unix://");
      if (*path != '/')
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                       "unix socket address %s is not absolute", address);
          return NULL;
        }
      return g_unix_socket_address_new (path);
    }
  if (strstr (address, "://") != NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                   "socket address %s: only unix sockets are supported", address);
      return NULL;
    }
  if (*address == '\0')
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                           "empty socket address");
      return NULL;
    }
  /* Linux shims: an address without unix:// names an abstract socket */
  return g_unix_socket_address_new_with_type (address, -1, G_UNIX_SOCKET_ADDRESS_ABSTRACT);
}

static void
connect_cb (GObject      *source,
            GAsyncResult *result,
            gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  g_autoptr(GError) error = NULL;
  GSocketConnection *connection;

  connection = g_socket_client_connect_finish (G_SOCKET_CLIENT (source), result, &error);
  if (connection == NULL)
    {
      g_task_return_error (task, g_steal_pointer (&error));
      return;
    }
  g_task_return_pointer (task, shimwatch_ttrpc_new (connection), g_object_unref);
  g_object_unref (connection);
}

void
shimwatch_ttrpc_connect_async (const char          *address,
                               GCancellable        *cancellable,
                               GAsyncReadyCallback  callback,
                               gpointer             user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, cancellable, callback, user_data);
  g_autoptr(GSocketClient) client = NULL;
  g_autoptr(GSocketAddress) socket_address = NULL;
  GError *error = NULL;

  g_task_set_source_tag (task, shimwatch_ttrpc_connect_async);
  socket_address = shimwatch_ttrpc_parse_address (address, &error);
  if (socket_address == NULL)
    {
      g_task_return_error (task, error);
      return;
    }
  client = g_socket_client_new ();
  g_socket_client_connect_async (client, G_SOCKET_CONNECTABLE (socket_address), cancellable,
                                 connect_cb, g_steal_pointer (&task));
}

ShimwatchTtrpc *
shimwatch_ttrpc_connect_finish (GAsyncResult  *result,
                                GError       **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}

ShimwatchTtrpc *
shimwatch_ttrpc_new (GSocketConnection *connection)
{
  ShimwatchTtrpc *self;

  g_return_val_if_fail (G_IS_SOCKET_CONNECTION (connection), NULL);

  self = g_object_new (SHIMWATCH_TYPE_TTRPC, NULL);
  self->connection = g_object_ref (connection);
  self->socket = g_object_ref (g_socket_connection_get_socket (connection));
  g_socket_set_blocking (self->socket, FALSE);
  return self;
}

static void
shimwatch_ttrpc_dispose (GObject *object)
{
  ShimwatchTtrpc *self = SHIMWATCH_TTRPC (object);

  if (self->connection != NULL && !self->closed)
    close_with_error (self, g_error_new_literal (SHIMWATCH_TTRPC_ERROR,
                                                 SHIMWATCH_TTRPC_ERROR_CLOSED,
                                                 "connection released"));
  shimwatch_ttrpc_set_request_handler (self, NULL, NULL, NULL);
  g_clear_object (&self->socket);
  g_clear_object (&self->connection);

  G_OBJECT_CLASS (shimwatch_ttrpc_parent_class)->dispose (object);
}

static void
shimwatch_ttrpc_finalize (GObject *object)
{
  ShimwatchTtrpc *self = SHIMWATCH_TTRPC (object);

  g_byte_array_unref (self->inbuf);
  g_byte_array_unref (self->outbuf);
  g_hash_table_unref (self->pending);

  G_OBJECT_CLASS (shimwatch_ttrpc_parent_class)->finalize (object);
}

static void
shimwatch_ttrpc_class_init (ShimwatchTtrpcClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_ttrpc_dispose;
  object_class->finalize = shimwatch_ttrpc_finalize;

  /**
   * ShimwatchTtrpc::closed:
   * @reason: why the connection ended
   *
   * Emitted exactly once, whatever ended the connection, after every pending call failed
   * and before the socket is closed (the connection is closed already: nothing more is
   * read, written or called). @reason is valid during the emission only: a handler that
   * keeps it copies it.
   */
  /* the first thing a dead shim's hang-up runs, before its ShimDisconnected: no copy of
   * the reason for the emission (a GError and its message allocated and freed per death),
   * and a C marshaller fed from the va_list rather than GValues through libffi */
  signals[SIGNAL_CLOSED] = g_signal_new ("closed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                         0, NULL, NULL, g_cclosure_marshal_VOID__BOXED,
                                         G_TYPE_NONE, 1,
                                         G_TYPE_ERROR | G_SIGNAL_TYPE_STATIC_SCOPE);
  g_signal_set_va_marshaller (signals[SIGNAL_CLOSED], G_TYPE_FROM_CLASS (klass),
                              g_cclosure_marshal_VOID__BOXEDv);
}

static void
shimwatch_ttrpc_init (ShimwatchTtrpc *self)
{
  self->inbuf = g_byte_array_new ();
  self->outbuf = g_byte_array_new ();
  self->output_limit = SHIMWATCH_TTRPC_OUTPUT_LIMIT;
  self->priority = G_PRIORITY_DEFAULT;
  self->next_stream_id = 1;
  self->pending = g_hash_table_new (g_direct_hash, g_direct_equal);
}
