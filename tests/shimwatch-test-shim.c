/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatch-test-shim: a stand-in for containerd-shim-runc-v2 that lets the tests inject
 * faults the real shim cannot produce. It is run exactly like a runtime-v2 shim:
 *
 *   shimwatch-test-shim -namespace NS -id ID -address ADDR -publish-binary X
 *                       [-bundle B] [-debug] start|delete
 *
 * Go-style flags (-flag value, -flag=value, --flag) in any order; -namespace, -id and
 * -address are required; unknown flags are ignored (as value-less flags) with a warning.
 * cwd is the task directory, holding config.json and the "log" FIFO.
 *
 * Mode: the "org.shimwatch.test.mode" string in config.json's "annotations", else
 * $SHIMWATCH_TEST_SHIM_MODE, else "normal". An unknown mode is a usage error (exit 2).
 * "The first request" means the first ttrpc Request the server process receives, on any
 * connection; it is not executed.
 *
 *   normal            a minimal working shim (below)
 *   garbage           the first request is answered with a Response frame on its stream id
 *                     whose 32-byte body is 0xff bytes (does not decode as ttrpc.Response),
 *                     immediately followed by a 16-byte junk frame: header {length 6, same
 *                     stream id, type 0x7f, flags 0} and 6 random bytes; later requests
 *                     are served normally
 *   oversize          the first request is answered with a Response header claiming
 *                     5 MiB (over the 4 MiB ttrpc limit) on its stream id, followed by
 *                     5 MiB of zero bytes; later requests are served normally, on the same
 *                     connection too
 *   hang-connect      connections are accepted and requests read, but nothing is answered
 *   close-on-request  the first request closes its connection at once, with no answer;
 *                     the server keeps listening and serves later requests normally
 *   hang-delete       the delete action pauses forever (until killed)
 *   hang-delete-once-no-pid
 *                     hang-delete-no-pid, but only the first delete hangs (it leaves the
 *                     file delete-hung in the task directory); later ones work
 *   leak-socket       normal, but the container inherits every open connection to the
 *                     server: when the server dies, its clients see no EOF (the socket is
 *                     still held), as with a shim whose forked child keeps it open
 *   hang-delete-no-pid
 *                     hang-delete, and Connect, Create and Start report the container's
 *                     pid as 0: the supervisor can neither watch nor kill the container,
 *                     so no exit status can be known when this shim dies
 *   fail-start        start writes "test shim: start failed on purpose" to stderr, exits 1
 *   bad-start         start writes "this is not an address" to stdout (no newline), exits 0
 *   hang-start        start writes "test shim: start hangs on purpose" to stderr and pauses
 *                     forever (until killed)
 *   report-start      normal, and start first writes ./start-fds: one line "FD TARGET" per
 *                     descriptor it was started with (what its caller let it inherit)
 *   gate-create       normal, but Create first writes ./create-waiting, then holds the whole
 *                     server until ./create-gate exists (checked every 10 ms, for at most
 *                     60 s): a test can act while the supervisor's CreateTask is under way
 *
 * start: listens (0600) on /tmp/shimwatch-test-shim-<first 32 hex digits of
 * sha256("ADDR/NS/ID")>.sock (a stale file is removed first), writes ./address, forks the
 * server (new session; stdin and stdout on /dev/null; stderr on ./log, else /dev/null),
 * writes "unix://<socket>" (no newline) to stdout and exits 0. The socket is listening
 * before start exits.
 *
 * Server: unary containerd.task.v2.Task and containerd.task.v3.Task, any number of
 * connections at once:
 *   Connect   {shim_pid, task_pid (0 before Create)}
 *   Create    spawns "/bin/sleep 100000" in its own session as the container and writes
 *             its pid to ./init.pid; ALREADY_EXISTS while that container is alive
 *   Start     {pid}
 *   State     {id, bundle, pid, status RUNNING while alive else STOPPED, exit_status,
 *             exited_at once exited}
 *   Pids      the container pid (empty list before Create)
 *   Kill      kill(pid, signal), or the container's process group with "all"; Empty
 *   Wait      answered once the container exits: {exit_status (128+signal if signalled),
 *             exited_at}
 *   Delete    SIGKILLs and reaps the container if alive; {pid, exit_status, exited_at=now}
 *   Shutdown  answers Empty, removes the socket, exits 0 once the answer is written
 *   other     UNIMPLEMENTED "method X"; another service: UNIMPLEMENTED "service X"
 * Before Create, Kill and Wait fail with NOT_FOUND. A request frame over 4 MiB is skipped
 * and failed with RESOURCE_EXHAUSTED; Response and Data frames are ignored. Connections
 * closing do not end the server: only Shutdown or a signal (SIGTERM: default action) do.
 *
 * delete: SIGKILLs the pid in ./init.pid if that process is still a "sleep" (so a reused
 * pid is never killed), writes a raw containerd.task.v2.DeleteResponse {pid = init.pid or
 * 0, exit_status 137, exited_at now} to stdout, "test shim: cleaned up" to stderr, removes
 * the socket file and exits 0.
 *
 * Usage errors (unknown action, missing flag, bad mode) exit 2.
 */
#define G_LOG_DOMAIN "ShimwatchTestShim"

#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib.h>
#include <glib/gstdio.h>

#include "shim.pb-c.h"
#include "task_types.pb-c.h"
#include "timestamp.pb-c.h"

#include "shimwatch-wire.h"

#define MODE_ENV          "SHIMWATCH_TEST_SHIM_MODE"
#define MODE_ANNOTATION   "org.shimwatch.test.mode"
#define TASK_SERVICE_V2   "containerd.task.v2.Task"
#define TASK_SERVICE_V3   "containerd.task.v3.Task"
#define CONTAINER_BINARY  "/bin/sleep"
#define CONTAINER_ARGUMENT "100000"
#define GARBAGE_LENGTH    32
#define JUNK_FRAME_LENGTH 16
#define OVERSIZE_LENGTH   (5u << 20)
#define READ_CHUNK        65536
#define DELETE_EXIT_STATUS (128 + SIGKILL)
#define CREATE_GATE_POLL_US (10 * 1000)
#define CREATE_GATE_MAX_US  (60 * G_USEC_PER_SEC)

typedef enum {
  MODE_NORMAL,
  MODE_GARBAGE,
  MODE_OVERSIZE,
  MODE_HANG_CONNECT,
  MODE_CLOSE_ON_REQUEST,
  MODE_HANG_DELETE,
  MODE_HANG_DELETE_NO_PID,
  MODE_HANG_DELETE_ONCE_NO_PID,
  MODE_LEAK_SOCKET,
  MODE_FAIL_START,
  MODE_BAD_START,
  MODE_HANG_START,
  MODE_REPORT_START,
  MODE_GATE_CREATE,
} Mode;

static const char * const mode_names[] = {
  [MODE_NORMAL]           = "normal",
  [MODE_GARBAGE]          = "garbage",
  [MODE_OVERSIZE]         = "oversize",
  [MODE_HANG_CONNECT]     = "hang-connect",
  [MODE_CLOSE_ON_REQUEST] = "close-on-request",
  [MODE_HANG_DELETE]      = "hang-delete",
  [MODE_HANG_DELETE_NO_PID] = "hang-delete-no-pid",
  [MODE_HANG_DELETE_ONCE_NO_PID] = "hang-delete-once-no-pid",
  [MODE_LEAK_SOCKET]      = "leak-socket",
  [MODE_FAIL_START]       = "fail-start",
  [MODE_BAD_START]        = "bad-start",
  [MODE_HANG_START]       = "hang-start",
  [MODE_REPORT_START]     = "report-start",
  [MODE_GATE_CREATE]      = "gate-create",
};

typedef struct {
  char     *namespace_;
  char     *id;
  char     *address;
  char     *publish_binary;
  char     *bundle;
  gboolean  debug;
  char     *action;
} Options;

typedef struct {
  int         fd;
  GByteArray *in;
  GByteArray *out;
  gsize       discard;   /* body bytes of an oversized frame still to skip */
  GArray     *waits;     /* guint32 stream ids of Wait calls not answered yet */
  gboolean    closed;
} Connection;

typedef struct {
  Mode        mode;
  char       *socket_path;
  char       *bundle;
  int         listen_fd;
  int         sigchld_pipe[2];
  int         devnull_fd;
  GPtrArray  *connections;
  gboolean    first_request_seen;
  gboolean    shutdown_requested;
  Connection *shutdown_connection;  /* exit once its answer is written (or it closes) */

  /* the "container" */
  pid_t       child_pid;
  gboolean    child_exited;
  guint32     child_exit_status;
  gint64      child_exited_at;
} Server;

static Options options;
static Server server = { .listen_fd = -1, .sigchld_pipe = { -1, -1 }, .devnull_fd = -1 };

/* Helpers */

static gboolean
write_all (int         fd,
           const void *data,
           gsize       length)
{
  const guint8 *p = data;

  while (length > 0)
    {
      gssize n = write (fd, p, length);

      if (n < 0)
        {
          if (errno == EINTR)
            continue;
          return FALSE;
        }
      p += n;
      length -= n;
    }
  return TRUE;
}

static GBytes *
pack_message (const ProtobufCMessage *message)
{
  gsize size = protobuf_c_message_get_packed_size (message);
  guint8 *buffer = g_malloc (MAX (size, 1));

  protobuf_c_message_pack (message, buffer);
  return g_bytes_new_take (buffer, size);
}

static ProtobufCMessage *
unpack_payload (const ProtobufCMessageDescriptor *descriptor,
                GBytes                           *payload)
{
  /* protobuf-c wants a non-NULL buffer even for zero-length input */
  static const guint8 empty[1];
  gsize length = 0;
  const guint8 *data = payload != NULL ? g_bytes_get_data (payload, &length) : NULL;

  return protobuf_c_message_unpack (descriptor, NULL, length, data != NULL ? data : empty);
}

static void
timestamp_set (Google__Protobuf__Timestamp *timestamp,
               gint64                       usec)
{
  timestamp->seconds = usec / G_USEC_PER_SEC;
  timestamp->nanos = (usec % G_USEC_PER_SEC) * 1000;
}

static char *
socket_path_for (const Options *opts)
{
  g_autofree char *key = g_strdup_printf ("%s/%s/%s", opts->address, opts->namespace_,
                                          opts->id);
  g_autofree char *digest = g_compute_checksum_for_string (G_CHECKSUM_SHA256, key, -1);

  return g_strdup_printf ("/tmp/shimwatch-test-shim-%.32s.sock", digest);
}

/* Command line and mode */

static char **
flag_target (Options    *opts,
             const char *name)
{
  if (strcmp (name, "namespace") == 0)
    return &opts->namespace_;
  if (strcmp (name, "id") == 0)
    return &opts->id;
  if (strcmp (name, "address") == 0)
    return &opts->address;
  if (strcmp (name, "publish-binary") == 0)
    return &opts->publish_binary;
  if (strcmp (name, "bundle") == 0)
    return &opts->bundle;
  return NULL;
}

static gboolean
parse_args (int       argc,
            char    **argv,
            Options  *opts,
            char    **error_message)
{
  gboolean flags_done = FALSE;

  for (int i = 1; i < argc; i++)
    {
      const char *arg = argv[i];
      const char *name;
      const char *equals;
      const char *value = NULL;
      g_autofree char *flag = NULL;
      char **target;

      /* unlike Go's flag package, flags may also follow the action */
      if (flags_done || arg[0] != '-' || arg[1] == '\0')
        {
          if (opts->action != NULL)
            {
              *error_message = g_strdup_printf ("unexpected argument \"%s\" after \"%s\"",
                                                arg, opts->action);
              return FALSE;
            }
          opts->action = g_strdup (arg);
          continue;
        }
      if (strcmp (arg, "--") == 0)
        {
          flags_done = TRUE;
          continue;
        }

      name = arg + (arg[1] == '-' ? 2 : 1);
      equals = strchr (name, '=');
      if (equals != NULL)
        {
          flag = g_strndup (name, equals - name);
          value = equals + 1;
        }
      else
        flag = g_strdup (name);

      if (strcmp (flag, "debug") == 0)
        {
          opts->debug = value == NULL || !(strcmp (value, "false") == 0 ||
                                           strcmp (value, "0") == 0);
          continue;
        }

      target = flag_target (opts, flag);
      if (target == NULL)
        {
          g_printerr ("test shim: ignoring unknown flag %s\n", arg);
          continue;
        }
      if (value == NULL)
        {
          if (i + 1 >= argc)
            {
              *error_message = g_strdup_printf ("flag needs an argument: -%s", flag);
              return FALSE;
            }
          value = argv[++i];
        }
      g_free (*target);
      *target = g_strdup (value);
    }
  return TRUE;
}

/* The mode annotation in ./config.json, or NULL if there is none: the first "<key>": "<value>"
 * whose value has no escapes (mode names need none). The key is found, not the document
 * parsed: the shim runs twice per task (start, delete), and a JSON library and what it links
 * (GIO, GObject, libmount, ...) made each run cost 1.7 times the CPU, which the scale
 * benchmark's 1,000 deaths paid on two CPUs; a GRegex pulled in PCRE2 for this one match. */
static char *
read_mode_annotation (void)
{
  static const char key[] = "\"" MODE_ANNOTATION "\"";
  g_autoptr(GError) error = NULL;
  g_autofree char *contents = NULL;

  if (!g_file_get_contents ("config.json", &contents, NULL, &error))
    {
      if (!g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        g_printerr ("test shim: ignoring config.json: %s\n", error->message);
      return NULL;
    }
  for (const char *at = strstr (contents, key); at != NULL; at = strstr (at + 1, key))
    {
      const char *value = at + sizeof key - 1;
      gsize length;

      while (g_ascii_isspace (*value))
        value++;
      if (*value++ != ':')
        continue;
      while (g_ascii_isspace (*value))
        value++;
      if (*value++ != '"')
        continue;
      length = strcspn (value, "\"\\");
      if (value[length] == '"')
        return g_strndup (value, length);
    }
  return NULL;
}

static gboolean
determine_mode (Mode  *mode,
                char **error_message)
{
  g_autofree char *annotation = read_mode_annotation ();
  const char *name = annotation != NULL ? annotation : g_getenv (MODE_ENV);

  if (name == NULL || *name == '\0')
    name = mode_names[MODE_NORMAL];
  for (guint i = 0; i < G_N_ELEMENTS (mode_names); i++)
    {
      if (strcmp (name, mode_names[i]) == 0)
        {
          *mode = i;
          return TRUE;
        }
    }
  *error_message = g_strdup_printf ("unknown mode \"%s\" (from %s)", name,
                                    annotation != NULL ? "config.json" : MODE_ENV);
  return FALSE;
}

/* Server: connections and output */

static Connection *
connection_new (int fd)
{
  Connection *conn = g_new0 (Connection, 1);

  conn->fd = fd;
  conn->in = g_byte_array_new ();
  conn->out = g_byte_array_new ();
  conn->waits = g_array_new (FALSE, FALSE, sizeof (guint32));
  return conn;
}

static void
connection_free (gpointer data)
{
  Connection *conn = data;

  if (conn->fd >= 0)
    close (conn->fd);
  g_byte_array_unref (conn->in);
  g_byte_array_unref (conn->out);
  g_array_unref (conn->waits);
  g_free (conn);
}

/* The fd is closed at once; the struct goes in the next sweep, so indices stay valid. */
static void
connection_close (Connection *conn)
{
  if (conn->closed)
    return;
  conn->closed = TRUE;
  close (conn->fd);
  conn->fd = -1;
  g_array_set_size (conn->waits, 0);
}

static void
connection_flush (Connection *conn)
{
  while (!conn->closed && conn->out->len > 0)
    {
      gssize n = send (conn->fd, conn->out->data, conn->out->len,
                       MSG_NOSIGNAL | MSG_DONTWAIT);

      if (n < 0)
        {
          if (errno == EINTR)
            continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
          /* the peer went away; nothing left to say to it */
          connection_close (conn);
          return;
        }
      g_byte_array_remove_range (conn->out, 0, n);
    }
}

static void
queue_header (Connection *conn,
              guint32     length,
              guint32     stream_id,
              guint8      type)
{
  ShimwatchTtrpcHeader header = {
    .length = length,
    .stream_id = stream_id,
    .type = type,
    .flags = 0,
  };
  guint8 buffer[SHIMWATCH_TTRPC_HEADER_LENGTH];

  shimwatch_wire_header_encode (&header, buffer);
  g_byte_array_append (conn->out, buffer, sizeof buffer);
}

static void
send_response (Connection *conn,
               guint32     stream_id,
               int         code,
               const char *message,
               GBytes     *payload)
{
  g_autoptr(GBytes) body = NULL;
  gsize length;
  const guint8 *data;

  if (conn->closed)
    return;
  body = shimwatch_wire_encode_response (code, message, payload);
  data = g_bytes_get_data (body, &length);
  queue_header (conn, length, stream_id, SHIMWATCH_TTRPC_TYPE_RESPONSE);
  if (length > 0)
    g_byte_array_append (conn->out, data, length);
}

static void
reply_message (Connection             *conn,
               guint32                 stream_id,
               const ProtobufCMessage *message)
{
  g_autoptr(GBytes) payload = message != NULL ? pack_message (message) : NULL;

  send_response (conn, stream_id, SHIMWATCH_GRPC_OK, NULL, payload);
}

static void
reply_error (Connection *conn,
             guint32     stream_id,
             int         code,
             const char *message)
{
  send_response (conn, stream_id, code, message, NULL);
}

/* Server: the container process */

static void
send_wait_response (Connection *conn,
                    guint32     stream_id)
{
  Containerd__Task__V2__WaitResponse response = CONTAINERD__TASK__V2__WAIT_RESPONSE__INIT;
  Google__Protobuf__Timestamp exited_at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;

  response.exit_status = server.child_exit_status;
  timestamp_set (&exited_at, server.child_exited_at);
  response.exited_at = &exited_at;
  reply_message (conn, stream_id, &response.base);
}

static void
answer_waits (void)
{
  for (guint i = 0; i < server.connections->len; i++)
    {
      Connection *conn = g_ptr_array_index (server.connections, i);

      for (guint j = 0; j < conn->waits->len; j++)
        send_wait_response (conn, g_array_index (conn->waits, guint32, j));
      g_array_set_size (conn->waits, 0);
      connection_flush (conn);
    }
}

static void
record_child_exit (int status)
{
  server.child_exited = TRUE;
  if (WIFSIGNALED (status))
    server.child_exit_status = 128 + WTERMSIG (status);
  else
    server.child_exit_status = WEXITSTATUS (status);
  server.child_exited_at = g_get_real_time ();
  g_printerr ("test shim: container %d exited with status %u\n",
              (int) server.child_pid, server.child_exit_status);
  answer_waits ();
}

static void
reap_children (void)
{
  for (;;)
    {
      int status;
      pid_t pid = waitpid (-1, &status, WNOHANG);

      /* 0: nobody exited; -1: no children (or EINTR, retried on the next loop turn) */
      if (pid <= 0)
        break;
      if (pid == server.child_pid && !server.child_exited)
        record_child_exit (status);
    }
}

static gboolean
child_alive (void)
{
  /* reaping first means a zombie container counts as exited */
  reap_children ();
  return server.child_pid > 0 && !server.child_exited;
}

static void
on_sigchld (int signo G_GNUC_UNUSED)
{
  int saved_errno = errno;
  char byte = 0;
  gssize n;

  n = write (server.sigchld_pipe[1], &byte, 1);
  (void) n;
  errno = saved_errno;
}

/* Server: Task methods */

/* the container pid as the supervisor gets to see it */
static guint32
reported_pid (void)
{
  if (server.mode == MODE_HANG_DELETE_NO_PID || server.mode == MODE_HANG_DELETE_ONCE_NO_PID)
    return 0;
  return (guint32) MAX (server.child_pid, 0);
}

static void
handle_connect (Connection            *conn,
                guint32                stream_id,
                ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  Containerd__Task__V2__ConnectResponse response =
    CONTAINERD__TASK__V2__CONNECT_RESPONSE__INIT;

  response.shim_pid = getpid ();
  response.task_pid = reported_pid ();
  reply_message (conn, stream_id, &response.base);
}

/* gate-create: tell the test the Create is here, then wait for it to open the gate */
static void
wait_at_create_gate (void)
{
  g_autoptr(GError) error = NULL;
  gint64 give_up;

  if (!g_file_set_contents ("create-waiting", "", 0, &error))
    g_printerr ("test shim: %s\n", error->message);
  give_up = g_get_monotonic_time () + CREATE_GATE_MAX_US;
  while (!g_file_test ("create-gate", G_FILE_TEST_EXISTS))
    {
      if (g_get_monotonic_time () >= give_up)
        {
          g_printerr ("test shim: create-gate not opened in time, creating anyway\n");
          return;
        }
      g_usleep (CREATE_GATE_POLL_US);
    }
  g_printerr ("test shim: create-gate opened\n");
}

static void
handle_create (Connection            *conn,
               guint32                stream_id,
               ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  Containerd__Task__V2__CreateTaskResponse response =
    CONTAINERD__TASK__V2__CREATE_TASK_RESPONSE__INIT;
  g_autoptr(GError) error = NULL;
  g_autofree char *pid_text = NULL;
  pid_t pid;

  if (server.mode == MODE_GATE_CREATE)
    wait_at_create_gate ();

  if (child_alive ())
    {
      g_autofree char *message = g_strdup_printf ("container %s: already exists",
                                                  options.id);

      reply_error (conn, stream_id, SHIMWATCH_GRPC_ALREADY_EXISTS, message);
      return;
    }

  pid = fork ();
  if (pid < 0)
    {
      reply_error (conn, stream_id, SHIMWATCH_GRPC_INTERNAL, g_strerror (errno));
      return;
    }
  if (pid == 0)
    {
      /* the container outlives a SIGKILLed shim, and must not hold the log FIFO open */
      setsid ();
      dup2 (server.devnull_fd, STDIN_FILENO);
      dup2 (server.devnull_fd, STDOUT_FILENO);
      dup2 (server.devnull_fd, STDERR_FILENO);
      signal (SIGPIPE, SIG_DFL);
      if (server.mode == MODE_LEAK_SOCKET)
        for (guint i = 0; i < server.connections->len; i++)
          {
            Connection *leaked = g_ptr_array_index (server.connections, i);

            fcntl (leaked->fd, F_SETFD, 0);     /* survives the exec */
          }
      execl (CONTAINER_BINARY, CONTAINER_BINARY, CONTAINER_ARGUMENT, (char *) NULL);
      _exit (127);
    }

  server.child_pid = pid;
  server.child_exited = FALSE;
  server.child_exit_status = 0;
  server.child_exited_at = 0;
  g_printerr ("test shim: created container %d\n", (int) pid);

  pid_text = g_strdup_printf ("%d", (int) pid);
  if (!g_file_set_contents ("init.pid", pid_text, -1, &error))
    g_printerr ("test shim: %s\n", error->message);

  response.pid = reported_pid ();
  reply_message (conn, stream_id, &response.base);
}

static void
handle_start (Connection            *conn,
              guint32                stream_id,
              ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  Containerd__Task__V2__StartResponse response = CONTAINERD__TASK__V2__START_RESPONSE__INIT;

  response.pid = reported_pid ();
  reply_message (conn, stream_id, &response.base);
}

static void
handle_state (Connection            *conn,
              guint32                stream_id,
              ShimwatchTtrpcRequest *request)
{
  Containerd__Task__V2__StateResponse response = CONTAINERD__TASK__V2__STATE_RESPONSE__INIT;
  Google__Protobuf__Timestamp exited_at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  Containerd__Task__V2__StateRequest *state_request;
  gboolean alive = child_alive ();

  state_request = (Containerd__Task__V2__StateRequest *)
    unpack_payload (&containerd__task__v2__state_request__descriptor, request->payload);
  if (state_request == NULL)
    {
      reply_error (conn, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                   "payload does not decode as StateRequest");
      return;
    }

  response.id = (state_request->id != NULL && *state_request->id != '\0')
                ? state_request->id : options.id;
  response.bundle = server.bundle;
  response.pid = MAX (server.child_pid, 0);
  response.status = alive ? CONTAINERD__V1__TYPES__STATUS__RUNNING
                          : CONTAINERD__V1__TYPES__STATUS__STOPPED;
  response.exit_status = server.child_exit_status;
  if (server.child_exited)
    {
      timestamp_set (&exited_at, server.child_exited_at);
      response.exited_at = &exited_at;
    }
  reply_message (conn, stream_id, &response.base);
  containerd__task__v2__state_request__free_unpacked (state_request, NULL);
}

static void
handle_pids (Connection            *conn,
             guint32                stream_id,
             ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  Containerd__Task__V2__PidsResponse response = CONTAINERD__TASK__V2__PIDS_RESPONSE__INIT;
  Containerd__V1__Types__ProcessInfo info = CONTAINERD__V1__TYPES__PROCESS_INFO__INIT;
  Containerd__V1__Types__ProcessInfo *processes[1] = { &info };

  if (server.child_pid > 0)
    {
      info.pid = server.child_pid;
      response.processes = processes;
      response.n_processes = 1;
    }
  reply_message (conn, stream_id, &response.base);
}

static void
handle_kill (Connection            *conn,
             guint32                stream_id,
             ShimwatchTtrpcRequest *request)
{
  Containerd__Task__V2__KillRequest *kill_request;

  kill_request = (Containerd__Task__V2__KillRequest *)
    unpack_payload (&containerd__task__v2__kill_request__descriptor, request->payload);
  if (kill_request == NULL)
    {
      reply_error (conn, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT,
                   "payload does not decode as KillRequest");
      return;
    }

  /* never kill (0, ...): that would signal our own process group */
  if (server.child_pid <= 0)
    reply_error (conn, stream_id, SHIMWATCH_GRPC_NOT_FOUND,
                 "container not created: not found");
  else if (child_alive () &&
           kill (kill_request->all ? -server.child_pid : server.child_pid,
                 kill_request->signal) < 0 &&
           errno != ESRCH)
    reply_error (conn, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT, g_strerror (errno));
  else
    reply_message (conn, stream_id, NULL);   /* google.protobuf.Empty */

  containerd__task__v2__kill_request__free_unpacked (kill_request, NULL);
}

static void
handle_wait (Connection            *conn,
             guint32                stream_id,
             ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  if (server.child_pid <= 0)
    reply_error (conn, stream_id, SHIMWATCH_GRPC_NOT_FOUND,
                 "container not created: not found");
  else if (!child_alive ())
    send_wait_response (conn, stream_id);
  else
    g_array_append_val (conn->waits, stream_id);   /* answered by record_child_exit() */
}

static void
handle_delete (Connection            *conn,
               guint32                stream_id,
               ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  Containerd__Task__V2__DeleteResponse response = CONTAINERD__TASK__V2__DELETE_RESPONSE__INIT;
  Google__Protobuf__Timestamp exited_at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;

  if (child_alive ())
    {
      int status;
      pid_t pid;

      kill (server.child_pid, SIGKILL);
      do
        pid = waitpid (server.child_pid, &status, 0);
      while (pid < 0 && errno == EINTR);
      record_child_exit (pid == server.child_pid ? status : SIGKILL);
    }

  response.pid = MAX (server.child_pid, 0);
  response.exit_status = server.child_exit_status;
  timestamp_set (&exited_at, g_get_real_time ());
  response.exited_at = &exited_at;
  reply_message (conn, stream_id, &response.base);
}

static void
handle_shutdown (Connection            *conn,
                 guint32                stream_id,
                 ShimwatchTtrpcRequest *request G_GNUC_UNUSED)
{
  reply_message (conn, stream_id, NULL);   /* google.protobuf.Empty */

  server.shutdown_requested = TRUE;
  server.shutdown_connection = conn;
  if (server.listen_fd >= 0)
    {
      close (server.listen_fd);
      server.listen_fd = -1;
      g_unlink (server.socket_path);
    }
}

typedef void (*MethodHandler) (Connection            *conn,
                               guint32                stream_id,
                               ShimwatchTtrpcRequest *request);

static const struct {
  const char    *name;
  MethodHandler  handler;
} methods[] = {
  { "Connect",  handle_connect },
  { "Create",   handle_create },
  { "Start",    handle_start },
  { "State",    handle_state },
  { "Pids",     handle_pids },
  { "Kill",     handle_kill },
  { "Wait",     handle_wait },
  { "Delete",   handle_delete },
  { "Shutdown", handle_shutdown },
};

/* Server: faults */

static void
inject_garbage (Connection *conn,
                guint32     stream_id)
{
  guint8 garbage[GARBAGE_LENGTH];
  guint8 junk[JUNK_FRAME_LENGTH];
  ShimwatchTtrpcHeader junk_header = {
    .length = JUNK_FRAME_LENGTH - SHIMWATCH_TTRPC_HEADER_LENGTH,
    .stream_id = stream_id,
    .type = 0x7f,
    .flags = 0,
  };

  /* 0xff... is an over-long varint tag: no protobuf decoder accepts it */
  memset (garbage, 0xff, sizeof garbage);
  queue_header (conn, sizeof garbage, stream_id, SHIMWATCH_TTRPC_TYPE_RESPONSE);
  g_byte_array_append (conn->out, garbage, sizeof garbage);

  shimwatch_wire_header_encode (&junk_header, junk);
  for (gsize i = SHIMWATCH_TTRPC_HEADER_LENGTH; i < sizeof junk; i++)
    junk[i] = g_random_int_range (0, 256);
  g_byte_array_append (conn->out, junk, sizeof junk);
}

static void
inject_oversize (Connection *conn,
                 guint32     stream_id)
{
  guint start;

  queue_header (conn, OVERSIZE_LENGTH, stream_id, SHIMWATCH_TTRPC_TYPE_RESPONSE);
  start = conn->out->len;
  g_byte_array_set_size (conn->out, start + OVERSIZE_LENGTH);
  memset (conn->out->data + start, 0, OVERSIZE_LENGTH);
}

/* Server: requests */

static void
handle_request (Connection   *conn,
                guint32       stream_id,
                const guint8 *body,
                gsize         length)
{
  g_autoptr(ShimwatchTtrpcRequest) request = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree char *message = NULL;

  if (server.mode == MODE_HANG_CONNECT)
    {
      if (options.debug)
        g_printerr ("test shim: ignoring request on stream %u (hang-connect)\n", stream_id);
      return;
    }

  if (!server.first_request_seen)
    {
      server.first_request_seen = TRUE;
      switch (server.mode)
        {
        case MODE_GARBAGE:
          g_printerr ("test shim: answering stream %u with garbage\n", stream_id);
          inject_garbage (conn, stream_id);
          return;
        case MODE_OVERSIZE:
          g_printerr ("test shim: answering stream %u with a %u-byte frame\n", stream_id,
                      OVERSIZE_LENGTH);
          inject_oversize (conn, stream_id);
          return;
        case MODE_CLOSE_ON_REQUEST:
          g_printerr ("test shim: closing the connection on stream %u\n", stream_id);
          connection_close (conn);
          return;
        case MODE_NORMAL:
        case MODE_HANG_CONNECT:
        case MODE_HANG_DELETE:
        case MODE_HANG_DELETE_NO_PID:
        case MODE_HANG_DELETE_ONCE_NO_PID:
        case MODE_LEAK_SOCKET:
        case MODE_FAIL_START:
        case MODE_BAD_START:
        case MODE_HANG_START:
        case MODE_REPORT_START:
        case MODE_GATE_CREATE:
        default:
          break;
        }
    }

  request = shimwatch_wire_decode_request (body, length, &error);
  if (request == NULL)
    {
      reply_error (conn, stream_id, SHIMWATCH_GRPC_INVALID_ARGUMENT, error->message);
      return;
    }
  if (options.debug)
    g_printerr ("test shim: /%s/%s on stream %u\n", request->service, request->method,
                stream_id);

  if (strcmp (request->service, TASK_SERVICE_V2) != 0 &&
      strcmp (request->service, TASK_SERVICE_V3) != 0)
    {
      message = g_strdup_printf ("service %s", request->service);
      reply_error (conn, stream_id, SHIMWATCH_GRPC_UNIMPLEMENTED, message);
      return;
    }

  for (guint i = 0; i < G_N_ELEMENTS (methods); i++)
    {
      if (strcmp (request->method, methods[i].name) == 0)
        {
          methods[i].handler (conn, stream_id, request);
          return;
        }
    }
  message = g_strdup_printf ("method %s", request->method);
  reply_error (conn, stream_id, SHIMWATCH_GRPC_UNIMPLEMENTED, message);
}

/* Split the buffered input into frames; a partial frame waits for more input. */
static void
process_input (Connection *conn)
{
  while (!conn->closed)
    {
      ShimwatchTtrpcHeader header;
      gsize frame_length;

      if (conn->discard > 0)
        {
          gsize n = MIN (conn->discard, conn->in->len);

          g_byte_array_remove_range (conn->in, 0, n);
          conn->discard -= n;
          if (conn->discard > 0)
            break;
          continue;
        }

      if (conn->in->len < SHIMWATCH_TTRPC_HEADER_LENGTH)
        break;
      shimwatch_wire_header_decode (conn->in->data, &header);

      if (header.length > SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX)
        {
          /* as ttrpc's server does: skip the body, fail that stream, keep the connection */
          g_byte_array_remove_range (conn->in, 0, SHIMWATCH_TTRPC_HEADER_LENGTH);
          conn->discard = header.length;
          if (header.type == SHIMWATCH_TTRPC_TYPE_REQUEST && server.mode != MODE_HANG_CONNECT)
            {
              g_autofree char *message =
                g_strdup_printf ("message length %u exceed maximum message size of %u",
                                 header.length, SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX);

              reply_error (conn, header.stream_id, SHIMWATCH_GRPC_RESOURCE_EXHAUSTED, message);
            }
          continue;
        }

      frame_length = SHIMWATCH_TTRPC_HEADER_LENGTH + header.length;
      if (conn->in->len < frame_length)
        break;

      if (header.type == SHIMWATCH_TTRPC_TYPE_REQUEST)
        handle_request (conn, header.stream_id,
                        conn->in->data + SHIMWATCH_TTRPC_HEADER_LENGTH, header.length);
      else if (options.debug)
        g_printerr ("test shim: ignoring frame of type %u on stream %u\n",
                    header.type, header.stream_id);

      if (!conn->closed)
        g_byte_array_remove_range (conn->in, 0, frame_length);
    }
}

static void
connection_read (Connection *conn)
{
  guint8 buffer[READ_CHUNK];
  gssize n;

  do
    n = recv (conn->fd, buffer, sizeof buffer, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);

  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return;
  if (n <= 0)
    {
      if (options.debug)
        g_printerr ("test shim: connection closed\n");
      connection_close (conn);
      return;
    }

  g_byte_array_append (conn->in, buffer, n);
  process_input (conn);
  connection_flush (conn);
}

static void
accept_connections (void)
{
  for (;;)
    {
      int fd = accept4 (server.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

      if (fd < 0)
        {
          if (errno == EINTR || errno == ECONNABORTED)
            continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK)
            g_printerr ("test shim: accept: %s\n", g_strerror (errno));
          return;
        }
      if (options.debug)
        g_printerr ("test shim: new connection\n");
      g_ptr_array_add (server.connections, connection_new (fd));
    }
}

static void
sweep_connections (void)
{
  for (guint i = server.connections->len; i > 0; i--)
    {
      Connection *conn = g_ptr_array_index (server.connections, i - 1);

      if (!conn->closed)
        continue;
      if (conn == server.shutdown_connection)
        server.shutdown_connection = NULL;
      g_ptr_array_remove_index (server.connections, i - 1);
    }
}

static void G_GNUC_NORETURN
serve (void)
{
  g_autofree struct pollfd *fds = NULL;

  for (;;)
    {
      guint n_fds = 0;
      guint first_connection;
      guint n_connections;
      int n;

      reap_children ();
      sweep_connections ();

      if (server.shutdown_requested &&
          (server.shutdown_connection == NULL || server.shutdown_connection->out->len == 0))
        {
          g_printerr ("test shim: shut down\n");
          exit (0);
        }

      fds = g_renew (struct pollfd, fds, 2 + server.connections->len);
      fds[n_fds++] = (struct pollfd) { .fd = server.sigchld_pipe[0], .events = POLLIN };
      if (server.listen_fd >= 0)
        fds[n_fds++] = (struct pollfd) { .fd = server.listen_fd, .events = POLLIN };
      first_connection = n_fds;
      n_connections = server.connections->len;
      for (guint i = 0; i < n_connections; i++)
        {
          Connection *conn = g_ptr_array_index (server.connections, i);

          fds[n_fds++] = (struct pollfd) {
            .fd = conn->fd,
            .events = POLLIN | (conn->out->len > 0 ? POLLOUT : 0),
          };
        }

      /* no timeout: SIGCHLD wakes us through the self-pipe (a container that exits
       * between the reap above and this poll has written to it already), and nothing
       * else happens on a clock. An idle shim sleeps as a real one does: with 1,000 of
       * them in the bench's scale scenario, a wake-up each per second was a background
       * load growing with their number (4 % of a CPU) that the service was measured in */
      n = poll (fds, n_fds, -1);
      if (n < 0)
        {
          if (errno == EINTR)
            continue;
          g_printerr ("test shim: poll: %s\n", g_strerror (errno));
          exit (1);
        }
      if (n == 0)
        continue;

      if (fds[0].revents != 0)
        {
          char drain[64];

          while (read (server.sigchld_pipe[0], drain, sizeof drain) > 0)
            ;
          reap_children ();
        }
      if (first_connection > 1 && fds[1].revents != 0 && server.listen_fd >= 0)
        accept_connections ();

      for (guint i = 0; i < n_connections; i++)
        {
          Connection *conn = g_ptr_array_index (server.connections, i);
          short revents = fds[first_connection + i].revents;

          if (!conn->closed && (revents & (POLLIN | POLLHUP | POLLERR)) != 0)
            connection_read (conn);
          if (!conn->closed && (revents & POLLOUT) != 0)
            connection_flush (conn);
        }
    }
}

/* Close whatever the caller leaked to us, so nobody waits on a pipe we hold open */
static void
close_inherited_fds (int keep)
{
  g_autoptr(GArray) fds = g_array_new (FALSE, FALSE, sizeof (int));
  DIR *dir = opendir ("/proc/self/fd");
  struct dirent *entry;

  if (dir == NULL)
    return;
  while ((entry = readdir (dir)) != NULL)
    {
      char *end;
      long value = strtol (entry->d_name, &end, 10);
      int fd = value;

      if (end == entry->d_name || *end != '\0')
        continue;
      if (fd > STDERR_FILENO && fd != keep && fd != dirfd (dir))
        g_array_append_val (fds, fd);
    }
  closedir (dir);
  for (guint i = 0; i < fds->len; i++)
    close (g_array_index (fds, int, i));
}

/* The forked server: detach from the caller's session and stdio, then serve forever */
static void G_GNUC_NORETURN
run_server (Mode  mode,
            int   listen_fd,
            char *socket_path)
{
  struct sigaction action = { 0 };
  int log_fd;

  setsid ();
  close_inherited_fds (listen_fd);

  /* the caller waits for EOF on start's stdout: the server must not hold it */
  server.devnull_fd = open ("/dev/null", O_RDWR | O_CLOEXEC);
  dup2 (server.devnull_fd, STDIN_FILENO);
  dup2 (server.devnull_fd, STDOUT_FILENO);

  /* O_NONBLOCK so that a FIFO without a reader fails (ENXIO) instead of blocking */
  log_fd = open ("log", O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (log_fd >= 0)
    fcntl (log_fd, F_SETFL, fcntl (log_fd, F_GETFL) & ~O_NONBLOCK);
  else
    log_fd = open ("/dev/null", O_WRONLY | O_CLOEXEC);
  if (log_fd >= 0 && log_fd != STDERR_FILENO)
    {
      dup2 (log_fd, STDERR_FILENO);
      close (log_fd);
    }

  signal (SIGPIPE, SIG_IGN);
  if (pipe2 (server.sigchld_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
    {
      g_printerr ("test shim: pipe: %s\n", g_strerror (errno));
      exit (1);
    }
  action.sa_handler = on_sigchld;
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset (&action.sa_mask);
  sigaction (SIGCHLD, &action, NULL);

  fcntl (listen_fd, F_SETFL, fcntl (listen_fd, F_GETFL) | O_NONBLOCK);

  server.mode = mode;
  server.listen_fd = listen_fd;
  server.socket_path = socket_path;
  server.bundle = options.bundle != NULL ? g_strdup (options.bundle) : g_get_current_dir ();
  server.connections = g_ptr_array_new_with_free_func (connection_free);

  g_printerr ("test shim: pid %d serving unix://%s in mode %s\n", (int) getpid (),
              socket_path, mode_names[mode]);
  serve ();
}

/* Actions */

/* ./start-fds: "FD TARGET" per descriptor this process was started with */
static gboolean
report_fds (void)
{
  g_autoptr(GString) report = g_string_new (NULL);
  g_autoptr(GDir) dir = g_dir_open ("/proc/self/fd", 0, NULL);
  const char *name;

  if (dir == NULL)
    return FALSE;
  while ((name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *link = g_build_filename ("/proc/self/fd", name, NULL);
      g_autofree char *target = g_file_read_link (link, NULL);

      /* the directory being listed is the only descriptor opened here */
      if (target != NULL && strcmp (target, "/proc/self/fd") != 0 &&
          !g_str_has_prefix (target, "/proc/"))
        g_string_append_printf (report, "%s %s\n", name, target);
    }
  return g_file_set_contents ("start-fds", report->str, (gssize) report->len, NULL);
}

static int
action_start (Mode mode)
{
  struct sockaddr_un sockaddr = { .sun_family = AF_UNIX };
  g_autoptr(GError) error = NULL;
  g_autofree char *path = NULL;
  g_autofree char *address = NULL;
  mode_t old_umask;
  int fd;
  int result;
  int saved_errno;
  pid_t pid;

  if (mode == MODE_FAIL_START)
    {
      g_printerr ("test shim: start failed on purpose\n");
      return 1;
    }
  if (mode == MODE_REPORT_START && !report_fds ())
    {
      g_printerr ("test shim: cannot write start-fds\n");
      return 1;
    }
  if (mode == MODE_HANG_START)
    {
      g_printerr ("test shim: start hangs on purpose\n");
      for (;;)
        pause ();
    }
  if (mode == MODE_BAD_START)
    {
      static const char bad_address[] = "this is not an address";

      return write_all (STDOUT_FILENO, bad_address, strlen (bad_address)) ? 0 : 1;
    }

  path = socket_path_for (&options);
  if (strlen (path) >= sizeof sockaddr.sun_path)
    {
      g_printerr ("test shim: socket path %s is too long\n", path);
      return 1;
    }
  strcpy (sockaddr.sun_path, path);

  if (g_unlink (path) < 0 && errno != ENOENT)
    {
      g_printerr ("test shim: cannot remove stale %s: %s\n", path, g_strerror (errno));
      return 1;
    }

  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    {
      g_printerr ("test shim: socket: %s\n", g_strerror (errno));
      return 1;
    }
  /* the umask makes the socket 0600 from the start, as the real shim's is */
  old_umask = umask (0177);
  result = bind (fd, (struct sockaddr *) &sockaddr, sizeof sockaddr);
  saved_errno = errno;
  umask (old_umask);
  if (result < 0 || listen (fd, 64) < 0)
    {
      if (result >= 0)
        saved_errno = errno;
      g_printerr ("test shim: cannot listen on %s: %s\n", path, g_strerror (saved_errno));
      close (fd);
      g_unlink (path);
      return 1;
    }

  address = g_strconcat ("unix://", path, NULL);
  if (!g_file_set_contents ("address", address, -1, &error))
    {
      g_printerr ("test shim: %s\n", error->message);
      close (fd);
      g_unlink (path);
      return 1;
    }

  fflush (stdout);
  fflush (stderr);
  pid = fork ();
  if (pid < 0)
    {
      g_printerr ("test shim: fork: %s\n", g_strerror (errno));
      close (fd);
      g_unlink (path);
      return 1;
    }
  if (pid == 0)
    run_server (mode, fd, g_steal_pointer (&path));

  /* the socket is already listening, so the caller may connect as soon as we exit */
  close (fd);
  return write_all (STDOUT_FILENO, address, strlen (address)) ? 0 : 1;
}

/* Only kill what still looks like the container, never a process that reused its pid */
static gboolean
process_is_container (pid_t pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%d/cmdline", (int) pid);
  g_autofree char *cmdline = NULL;
  g_autofree char *basename = NULL;
  gsize length;

  if (!g_file_get_contents (path, &cmdline, &length, NULL) || length == 0)
    return FALSE;
  basename = g_path_get_basename (cmdline);   /* argv[0]: cmdline is NUL-separated */
  return strcmp (basename, "sleep") == 0;
}

static int
action_delete (Mode mode)
{
  Containerd__Task__V2__DeleteResponse response = CONTAINERD__TASK__V2__DELETE_RESPONSE__INIT;
  Google__Protobuf__Timestamp exited_at = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  g_autofree char *contents = NULL;
  g_autofree char *path = NULL;
  g_autoptr(GBytes) packed = NULL;
  const guint8 *data;
  gsize length;
  pid_t pid = 0;

  if (mode == MODE_HANG_DELETE_ONCE_NO_PID &&
      !g_file_test ("delete-hung", G_FILE_TEST_EXISTS))
    {
      g_file_set_contents ("delete-hung", "", 0, NULL);
      mode = MODE_HANG_DELETE;
    }
  if (mode == MODE_HANG_DELETE || mode == MODE_HANG_DELETE_NO_PID)
    {
      g_printerr ("test shim: delete hangs on purpose\n");
      for (;;)
        pause ();
    }

  if (g_file_get_contents ("init.pid", &contents, NULL, NULL))
    {
      guint64 value;

      if (g_ascii_string_to_unsigned (g_strstrip (contents), 10, 2, G_MAXINT32, &value, NULL))
        pid = value;
    }
  if (pid > 0 && process_is_container (pid) && kill (pid, SIGKILL) < 0 && errno != ESRCH)
    g_printerr ("test shim: cannot kill %d: %s\n", (int) pid, g_strerror (errno));

  response.pid = pid;
  response.exit_status = DELETE_EXIT_STATUS;
  timestamp_set (&exited_at, g_get_real_time ());
  response.exited_at = &exited_at;
  packed = pack_message (&response.base);
  data = g_bytes_get_data (packed, &length);
  if (!write_all (STDOUT_FILENO, data, length))
    {
      g_printerr ("test shim: cannot write the delete response: %s\n", g_strerror (errno));
      return 1;
    }

  g_printerr ("test shim: cleaned up\n");
  path = socket_path_for (&options);
  g_unlink (path);
  return 0;
}

static int
usage_error (const char *message)
{
  g_printerr ("test shim: %s\n"
              "usage: shimwatch-test-shim -namespace NS -id ID -address ADDR "
              "-publish-binary BIN [-bundle DIR] [-debug] start|delete\n", message);
  return 2;
}

int
main (int    argc,
      char **argv)
{
  g_autofree char *error_message = NULL;
  const char *missing = NULL;
  Mode mode = MODE_NORMAL;

  if (!parse_args (argc, argv, &options, &error_message))
    return usage_error (error_message);
  if (options.action == NULL)
    return usage_error ("no action given");
  if (strcmp (options.action, "start") != 0 && strcmp (options.action, "delete") != 0)
    {
      error_message = g_strdup_printf ("unknown action \"%s\"", options.action);
      return usage_error (error_message);
    }

  if (options.namespace_ == NULL || *options.namespace_ == '\0')
    missing = "-namespace";
  else if (options.id == NULL || *options.id == '\0')
    missing = "-id";
  else if (options.address == NULL || *options.address == '\0')
    missing = "-address";
  if (missing != NULL)
    {
      error_message = g_strdup_printf ("missing flag %s", missing);
      return usage_error (error_message);
    }

  if (!determine_mode (&mode, &error_message))
    return usage_error (error_message);

  if (strcmp (options.action, "start") == 0)
    return action_start (mode);
  return action_delete (mode);
}
