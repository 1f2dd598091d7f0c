/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchEvents"

#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <gio/gunixsocketaddress.h>

#include "shimwatch-events-server.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-ttrpc.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77      /* Linux 6.5 */
#endif

struct _ShimwatchEventsServer
{
  GObject         parent_instance;

  char           *path;
  GSocketService *service;
  GPtrArray      *connections;   /* Connection */
  ShimwatchEventsSenderCheck check;
  gpointer        check_data;
};

typedef struct {
  ShimwatchEventsServer *server;     /* not owned: it closes its connections first */
  ShimwatchTtrpc        *ttrpc;
  ShimwatchEventsPeer    peer;
  guint                  n_refused;
} Connection;

static void
connection_free (Connection *connection)
{
  g_object_unref (connection->ttrpc);
  g_free (connection);
}

enum {
  SIGNAL_EVENT,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

G_DEFINE_TYPE (ShimwatchEventsServer, shimwatch_events_server, G_TYPE_OBJECT)

/* the sender check said no: answered and logged (in full once per connection) */
static void
refuse (Connection           *connection,
        guint32               stream_id,
        const ShimwatchEvent *event,
        const char           *why)
{
  g_autofree char *text = g_strdup_printf ("event %s for %s/%s refused: %s", event->topic,
                                           event->namespace_, event->container_id, why);

  if (connection->n_refused++ == 0)
    shimwatch_log_task (G_LOG_LEVEL_WARNING,
                        (&(ShimwatchLogTask) { .namespace_ = event->namespace_,
                                               .id = event->container_id, .bare = TRUE }),
                        "events socket: %s (later refusals on this connection are counted "
                        "when it closes)", text);
  else
    g_debug ("events socket: %s", text);
  shimwatch_ttrpc_respond (connection->ttrpc, stream_id, SHIMWATCH_GRPC_PERMISSION_DENIED, text,
                           NULL);
}

static void
handle_request (ShimwatchTtrpc        *ttrpc,
                guint32                stream_id,
                ShimwatchTtrpcRequest *request,
                gpointer               user_data)
{
  Connection *connection = user_data;
  ShimwatchEventsServer *self = connection->server;
  g_autoptr(ShimwatchEvent) event = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;

  if (g_strcmp0 (request->service, SHIMWATCH_EVENTS_SERVICE) != 0)
    {
      text = g_strdup_printf ("service %s", request->service);
      shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_UNIMPLEMENTED, text, NULL);
      return;
    }
  if (g_strcmp0 (request->method, "Forward") != 0)
    {
      text = g_strdup_printf ("method %s", request->method);
      shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_UNIMPLEMENTED, text, NULL);
      return;
    }

  event = shimwatch_wire_decode_forward_request (request->payload, &error);
  if (event == NULL)
    {
      g_message ("rejected a Forward request: %s", error->message);
      shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                               error->message, NULL);
      return;
    }
  /* the same checks as containerd's Exchange.Forward */
  if (!shimwatch_identifier_validate ("namespace", event->namespace_, &error) ||
      event->topic == NULL || event->topic[0] != '/' || event->timestamp == 0)
    {
      g_autofree char *reason =
        error != NULL ? g_strdup (error->message)
                      : g_strdup_printf ("envelope needs a topic starting with '/' and a timestamp");

      g_message ("rejected a Forward request: %s", reason);
      shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT, reason, NULL);
      return;
    }

  if (self->check != NULL)
    {
      g_autofree char *why = NULL;

      if (!self->check (event, &connection->peer, &why, self->check_data))
        {
          refuse (connection, stream_id, event, why != NULL ? why : "not its shim");
          return;
        }
    }
  g_debug ("event %s namespace=%s container=%s pid=%u from pid %u", event->topic,
           event->namespace_, event->container_id != NULL ? event->container_id : "",
           event->pid, connection->peer.pid);
  shimwatch_ttrpc_respond (ttrpc, stream_id, SHIMWATCH_GRPC_OK, NULL, NULL);
  g_signal_emit (self, signals[SIGNAL_EVENT], 0, event);
}

static void
connection_closed_cb (ShimwatchTtrpc *ttrpc,
                      GError         *reason,
                      gpointer        user_data)
{
  Connection *connection = user_data;

  if (g_error_matches (reason, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_OUTPUT_FULL))
    g_warning ("events socket: closed the connection of pid %u: %s (a shim reconnects when "
               "it next publishes)", connection->peer.pid, reason->message);
  if (connection->n_refused > 1)
    g_warning ("events socket: pid %u had %u events refused in all", connection->peer.pid,
               connection->n_refused);
  g_signal_handlers_disconnect_by_data (ttrpc, connection);
  shimwatch_ttrpc_set_request_handler (ttrpc, NULL, NULL, NULL);
  g_ptr_array_remove_fast (connection->server->connections, connection);
}

/* /proc/<pid>/stat field 22, the start time in clock ticks since boot; 0 if unknown */
static guint64
read_start_time (guint32 pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%u/stat", pid);
  g_autofree char *stat = NULL;
  const char *field;
  guint64 value = 0;

  if (!g_file_get_contents (path, &stat, NULL, NULL))
    return 0;
  /* "pid (comm) state ppid ...": comm may hold anything; the fields follow the last ')' */
  field = strrchr (stat, ')');
  for (guint n = 2; field != NULL && n < 22; n++)
    field = strchr (field + 1, ' ');
  if (field == NULL || sscanf (field + 1, "%" G_GUINT64_FORMAT, &value) != 1)
    return 0;
  return value;
}

/* who is at the other end, for good: the start time is read while a pidfd of the peer
 * says it still runs, so the pid cannot have been reused by then */
static void
identify_peer (GSocket             *socket,
               ShimwatchEventsPeer *peer)
{
  int pidfd = -1;
  socklen_t length = sizeof pidfd;
  struct pollfd ready = { -1, POLLIN, 0 };

  if (getsockopt (g_socket_get_fd (socket), SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) != 0)
    pidfd = pidfd_open ((pid_t) peer->pid, 0);    /* older kernels: the best there is */
  if (pidfd < 0)
    return;
  peer->start_time = read_start_time (peer->pid);
  ready.fd = pidfd;
  if (poll (&ready, 1, 0) != 0)
    peer->start_time = 0;       /* it exited: the pid may name another process now */
  close (pidfd);
}

static gboolean
incoming_cb (GSocketService    *service,
             GSocketConnection *connection,
             GObject           *source_object,
             gpointer           user_data)
{
  ShimwatchEventsServer *self = user_data;
  g_autoptr(GCredentials) credentials = NULL;
  g_autoptr(GError) error = NULL;
  Connection *peer;
  uid_t uid;

  credentials = g_socket_get_credentials (g_socket_connection_get_socket (connection), &error);
  if (credentials == NULL)
    {
      g_warning ("events socket: cannot read peer credentials, connection refused: %s",
                 error->message);
      g_io_stream_close (G_IO_STREAM (connection), NULL, NULL);
      return TRUE;
    }
  uid = g_credentials_get_unix_user (credentials, NULL);
  if (uid != geteuid ())
    {
      g_warning ("events socket: refused a peer with uid %u (pid %d): only uid %u may publish",
                 (guint) uid, (int) g_credentials_get_unix_pid (credentials, NULL),
                 (guint) geteuid ());
      g_io_stream_close (G_IO_STREAM (connection), NULL, NULL);
      return TRUE;
    }

  peer = g_new0 (Connection, 1);
  peer->server = self;
  peer->peer.pid = (guint32) g_credentials_get_unix_pid (credentials, NULL);
  peer->peer.uid = (guint32) uid;
  identify_peer (g_socket_connection_get_socket (connection), &peer->peer);
  peer->ttrpc = shimwatch_ttrpc_new (connection);
  shimwatch_ttrpc_set_request_handler (peer->ttrpc, handle_request, peer, NULL);
  g_signal_connect (peer->ttrpc, "closed", G_CALLBACK (connection_closed_cb), peer);
  g_ptr_array_add (self->connections, peer);
  shimwatch_ttrpc_start (peer->ttrpc);
  return TRUE;
}

ShimwatchEventsServer *
shimwatch_events_server_new (const char  *path,
                             GError     **error)
{
  g_autoptr(ShimwatchEventsServer) self = NULL;
  g_autoptr(GSocketAddress) address = NULL;
  struct stat st;

  g_return_val_if_fail (path != NULL && g_path_is_absolute (path), NULL);

  self = g_object_new (SHIMWATCH_TYPE_EVENTS_SERVER, NULL);
  self->path = g_strdup (path);

  /* a socket file left by an earlier run is stale: nobody else serves our path */
  if (g_lstat (path, &st) == 0 && S_ISSOCK (st.st_mode))
    g_unlink (path);

  address = g_unix_socket_address_new (path);
  self->service = g_socket_service_new ();
  if (!g_socket_listener_add_address (G_SOCKET_LISTENER (self->service), address,
                                      G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT,
                                      NULL, NULL, error))
    return NULL;
  if (g_chmod (path, 0600) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot restrict %s to mode 0600: %s", path, g_strerror (saved_errno));
      return NULL;
    }
  g_signal_connect (self->service, "incoming", G_CALLBACK (incoming_cb), self);
  g_socket_service_start (self->service);
  return g_steal_pointer (&self);
}

void
shimwatch_events_server_set_sender_check (ShimwatchEventsServer      *self,
                                          ShimwatchEventsSenderCheck  check,
                                          gpointer                    user_data)
{
  g_return_if_fail (SHIMWATCH_IS_EVENTS_SERVER (self));

  self->check = check;
  self->check_data = user_data;
}

guint
shimwatch_events_server_get_n_connections (ShimwatchEventsServer *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_EVENTS_SERVER (self), 0);
  return self->connections->len;
}

void
shimwatch_events_server_stop (ShimwatchEventsServer *self)
{
  g_return_if_fail (SHIMWATCH_IS_EVENTS_SERVER (self));

  if (self->service == NULL)
    return;
  g_signal_handlers_disconnect_by_data (self->service, self);
  g_socket_service_stop (self->service);
  g_socket_listener_close (G_SOCKET_LISTENER (self->service));
  g_clear_object (&self->service);
  while (self->connections->len > 0)
    {
      Connection *connection = g_ptr_array_index (self->connections, 0);

      shimwatch_ttrpc_close (connection->ttrpc);
    }
  g_unlink (self->path);
}

static void
shimwatch_events_server_dispose (GObject *object)
{
  ShimwatchEventsServer *self = SHIMWATCH_EVENTS_SERVER (object);

  if (self->path != NULL)
    shimwatch_events_server_stop (self);

  G_OBJECT_CLASS (shimwatch_events_server_parent_class)->dispose (object);
}

static void
shimwatch_events_server_finalize (GObject *object)
{
  ShimwatchEventsServer *self = SHIMWATCH_EVENTS_SERVER (object);

  g_ptr_array_unref (self->connections);
  g_free (self->path);

  G_OBJECT_CLASS (shimwatch_events_server_parent_class)->finalize (object);
}

static void
shimwatch_events_server_class_init (ShimwatchEventsServerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_events_server_dispose;
  object_class->finalize = shimwatch_events_server_finalize;

  /**
   * ShimwatchEventsServer::event:
   * @event: (type ShimwatchEvent): the decoded envelope
   */
  signals[SIGNAL_EVENT] = g_signal_new ("event", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST,
                                        0, NULL, NULL, NULL, G_TYPE_NONE, 1,
                                        SHIMWATCH_TYPE_EVENT | G_SIGNAL_TYPE_STATIC_SCOPE);
}

static void
shimwatch_events_server_init (ShimwatchEventsServer *self)
{
  self->connections = g_ptr_array_new_with_free_func ((GDestroyNotify) connection_free);
}
