/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchContainerd"

#include "config.h"

#include "shimwatch-containerd-connection.h"

#include <errno.h>
#include <glib-unix.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shimwatch-error.h"
#include "shimwatch-task-client.h"
#include "shimwatch-ttrpc.h"

#define CALL_TIMEOUT_MS       5000
/* runc writes init.pid before the shim files the container: Connect may say NOT_FOUND
 * for a moment */
#define NOT_FOUND_RETRY_MS    100
#define NOT_FOUND_RETRIES     50
/* after an EOF with the socket still there: how long the shim gets to be seen dead */
#define DEATH_WAIT_MS         3000
#define RECONNECT_DELAY_MS    1000
#define RECONNECT_ATTEMPTS    10

typedef struct {
  ShimwatchContainerdConnection *self;   /* not a reference */
  char                *namespace_;
  char                *id;
  ShimwatchTaskClient *client;
  guint                retries;
  guint                retry_source;
  gboolean             connected;
  gboolean             exited;
  gboolean             removed;
} Task;

struct _ShimwatchContainerdConnection
{
  GObject         parent_instance;

  char           *address;
  char           *socket_path;
  int             version;
  ShimwatchTtrpc *ttrpc;
  gulong          closed_id;
  gboolean        connecting;
  gboolean        finished;
  gboolean        closed_by_us;
  guint32         shim_pid;
  int             shim_pidfd;
  guint           pidfd_source;
  guint           timer_source;
  guint           reconnects;
  GHashTable     *tasks;   /* id → Task */
};

enum {
  SIGNAL_TASK_CONNECTED,
  SIGNAL_TASK_EXITED,
  SIGNAL_TASK_UNKNOWN,
  SIGNAL_SHIM_DIED,
  SIGNAL_SHIM_EXITED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

G_DEFINE_TYPE (ShimwatchContainerdConnection, shimwatch_containerd_connection, G_TYPE_OBJECT)

static void connect_socket (ShimwatchContainerdConnection *self);
static void start_task     (Task *task);

static void
task_free (Task *task)
{
  g_clear_handle_id (&task->retry_source, g_source_remove);
  g_clear_object (&task->client);
  g_free (task->namespace_);
  g_free (task->id);
  g_free (task);
}

gboolean
shimwatch_containerd_socket_answers (const char *path)
{
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int fd;
  gboolean answers;

  if (path == NULL || strlen (path) >= sizeof addr.sun_path)
    return FALSE;
  strcpy (addr.sun_path, path);
  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return FALSE;
  /* a listening socket accepts at once (or EAGAIN with a full backlog: still alive) */
  answers = connect (fd, (struct sockaddr *) &addr, sizeof addr) == 0 || errno == EAGAIN ||
            errno == EINPROGRESS;
  close (fd);
  return answers;
}

static gboolean
socket_file_exists (ShimwatchContainerdConnection *self)
{
  struct stat st;

  if (self->socket_path == NULL)
    return TRUE;   /* abstract: only the pidfd can tell */
  return lstat (self->socket_path, &st) == 0;
}

static gboolean
pidfd_readable (int pidfd)
{
  struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

  return pidfd >= 0 && poll (&pfd, 1, 0) == 1;
}

static void
stop_watching (ShimwatchContainerdConnection *self)
{
  g_clear_handle_id (&self->pidfd_source, g_source_remove);
  g_clear_handle_id (&self->timer_source, g_source_remove);
}

static void
finish (ShimwatchContainerdConnection *self,
        gboolean                       died)
{
  g_autoptr(ShimwatchContainerdConnection) keep G_GNUC_UNUSED = g_object_ref (self);

  if (self->finished)
    return;
  self->finished = TRUE;
  stop_watching (self);
  if (died)
    g_signal_emit (self, signals[SIGNAL_SHIM_DIED], 0, self->shim_pid);
  else
    g_signal_emit (self, signals[SIGNAL_SHIM_EXITED], 0);
}

/* A normal delete needs every task of the shim stopped first (containerd refuses to
 * delete a running task, and `ctr task rm -f` kills and waits), and the shim answers our
 * Wait before it closes: an EOF while a task still runs is a death, whatever became of
 * the socket file meanwhile (containerd's own `shim delete` may already have removed it
 * when a busy main loop gets to the EOF). */
static gboolean
every_task_exited (ShimwatchContainerdConnection *self)
{
  GHashTableIter iter;
  Task *task;

  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &task))
    if (!task->exited)
      return FALSE;
  return TRUE;
}

/* the EOF is explained: decide from the tasks, the socket file and the shim's pidfd */
static void
classify (ShimwatchContainerdConnection *self)
{
  if (!socket_file_exists (self) && !every_task_exited (self))
    {
      g_debug ("containerd: %s closed while a task ran: the shim died", self->address);
      finish (self, TRUE);
      return;
    }
  if (!socket_file_exists (self))
    {
      g_debug ("containerd: %s closed and its socket is gone: the shim exited", self->address);
      finish (self, FALSE);
      return;
    }
  if (pidfd_readable (self->shim_pidfd) || !shimwatch_containerd_socket_answers (self->socket_path))
    {
      finish (self, TRUE);
      return;
    }
  /* the shim runs and answers: only our connection was lost */
  if (self->reconnects++ >= RECONNECT_ATTEMPTS)
    {
      g_warning ("containerd: the shim on %s keeps closing our connection; giving up on it",
                 self->address);
      return;
    }
  connect_socket (self);
}

static gboolean
death_wait_pidfd_cb (int          fd,
                     GIOCondition condition,
                     gpointer     user_data)
{
  ShimwatchContainerdConnection *self = user_data;

  self->pidfd_source = 0;
  g_clear_handle_id (&self->timer_source, g_source_remove);
  classify (self);
  return G_SOURCE_REMOVE;
}

static gboolean
death_wait_timeout_cb (gpointer user_data)
{
  ShimwatchContainerdConnection *self = user_data;

  self->timer_source = 0;
  g_clear_handle_id (&self->pidfd_source, g_source_remove);
  classify (self);
  return G_SOURCE_REMOVE;
}

static void
closed_cb (ShimwatchTtrpc                *ttrpc,
           GError                        *reason,
           ShimwatchContainerdConnection *self)
{
  GHashTableIter iter;
  Task *task;

  g_clear_signal_handler (&self->closed_id, self->ttrpc);
  g_clear_object (&self->ttrpc);
  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &task))
    {
      g_clear_object (&task->client);
      g_clear_handle_id (&task->retry_source, g_source_remove);
      task->connected = FALSE;
    }
  if (self->closed_by_us || self->finished)
    return;
  g_debug ("containerd: connection to %s closed: %s", self->address,
           reason != NULL ? reason->message : "EOF");
  /* the socket file goes before the shim closes its connections on a normal exit; after
   * a SIGKILL the kernel closes them first and the pidfd turns readable a moment later */
  if (!socket_file_exists (self) || pidfd_readable (self->shim_pidfd) || self->shim_pidfd < 0)
    {
      classify (self);
      return;
    }
  self->pidfd_source = g_unix_fd_add (self->shim_pidfd, G_IO_IN, death_wait_pidfd_cb, self);
  self->timer_source = g_timeout_add (DEATH_WAIT_MS, death_wait_timeout_cb, self);
}

static gboolean
retry_task_cb (gpointer user_data)
{
  Task *task = user_data;

  task->retry_source = 0;
  start_task (task);
  return G_SOURCE_REMOVE;
}

static void
wait_cb (GObject      *source,
         GAsyncResult *result,
         gpointer      user_data)
{
  g_autoptr(ShimwatchContainerdConnection) self = user_data;
  ShimwatchTaskClient *client = SHIMWATCH_TASK_CLIENT (source);
  g_autoptr(GError) error = NULL;
  ShimwatchExit exit_info = { 0 };
  GHashTableIter iter;
  Task *task = NULL, *candidate;
  gboolean ok = shimwatch_task_client_wait_finish (client, result, &exit_info, &error);

  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &candidate))
    if (candidate->client == client)
      task = candidate;
  if (task == NULL || task->exited)
    return;   /* removed, or the connection closed and was made again */
  if (!ok)
    {
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED))
        return;   /* the "closed" handler explains */
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_NOT_FOUND))
        {
          g_signal_emit (self, signals[SIGNAL_TASK_UNKNOWN], 0, task->namespace_, task->id);
          return;
        }
      g_warning ("containerd: Wait for %s/%s: %s", task->namespace_, task->id, error->message);
      return;
    }
  task->exited = TRUE;
  g_signal_emit (self, signals[SIGNAL_TASK_EXITED], 0, task->namespace_, task->id, exit_info.pid,
                 exit_info.exit_status, exit_info.exited_at);
}

static void
task_connect_cb (GObject      *source,
                 GAsyncResult *result,
                 gpointer      user_data)
{
  g_autoptr(ShimwatchContainerdConnection) self = user_data;
  ShimwatchTaskClient *client = SHIMWATCH_TASK_CLIENT (source);
  g_autoptr(GError) error = NULL;
  guint32 shim_pid = 0, task_pid = 0;
  GHashTableIter iter;
  Task *task = NULL, *candidate;
  gboolean ok = shimwatch_task_client_connect_finish (client, result, &shim_pid, &task_pid,
                                                      &error);

  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &candidate))
    if (candidate->client == client)
      task = candidate;
  if (task == NULL)
    return;
  if (!ok)
    {
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_TTRPC_ERROR_CLOSED))
        return;
      if (g_error_matches (error, SHIMWATCH_TTRPC_ERROR, SHIMWATCH_GRPC_NOT_FOUND) &&
          task->retries++ < NOT_FOUND_RETRIES)
        {
          g_clear_object (&task->client);
          task->retry_source = g_timeout_add (NOT_FOUND_RETRY_MS, retry_task_cb, task);
          return;
        }
      g_message ("containerd: Connect for %s/%s: %s", task->namespace_, task->id, error->message);
      g_signal_emit (self, signals[SIGNAL_TASK_UNKNOWN], 0, task->namespace_, task->id);
      return;
    }
  if (self->shim_pid == 0 && shim_pid > 0)
    {
      self->shim_pid = shim_pid;
      self->shim_pidfd = pidfd_open ((pid_t) shim_pid, 0);
      if (self->shim_pidfd < 0)
        g_debug ("containerd: pidfd of shim %u: %s", shim_pid, g_strerror (errno));
    }
  task->connected = TRUE;
  g_signal_emit (self, signals[SIGNAL_TASK_CONNECTED], 0, task->namespace_, task->id, shim_pid,
                 task_pid);
  if (task->client == client && !task->exited)
    shimwatch_task_client_wait_async (client, 0, wait_cb, g_object_ref (self));
}

static void
start_task (Task *task)
{
  ShimwatchContainerdConnection *self = task->self;

  if (self->ttrpc == NULL || task->client != NULL)
    return;
  task->client = shimwatch_task_client_new (self->ttrpc, task->namespace_, task->id,
                                            self->version);
  shimwatch_task_client_connect_async (task->client, CALL_TIMEOUT_MS, task_connect_cb,
                                       g_object_ref (self));
}

static gboolean
reconnect_cb (gpointer user_data)
{
  ShimwatchContainerdConnection *self = user_data;

  self->timer_source = 0;
  connect_socket (self);
  return G_SOURCE_REMOVE;
}

static void
socket_connected_cb (GObject      *source,
                     GAsyncResult *result,
                     gpointer      user_data)
{
  g_autoptr(ShimwatchContainerdConnection) self = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchTtrpc) ttrpc = shimwatch_ttrpc_connect_finish (result, &error);
  GHashTableIter iter;
  Task *task;

  self->connecting = FALSE;
  if (self->closed_by_us || self->finished)
    {
      if (ttrpc != NULL)
        shimwatch_ttrpc_close (ttrpc);
      return;
    }
  if (ttrpc == NULL)
    {
      /* nothing listens: gone after a normal exit, or a dead shim's file is left */
      if (!socket_file_exists (self))
        finish (self, FALSE);
      else if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED))
        finish (self, TRUE);
      else if (self->reconnects++ < RECONNECT_ATTEMPTS)
        {
          g_message ("containerd: cannot connect to %s: %s", self->address, error->message);
          self->timer_source = g_timeout_add (RECONNECT_DELAY_MS, reconnect_cb, self);
        }
      else
        g_warning ("containerd: cannot connect to %s: %s; giving up", self->address,
                   error->message);
      return;
    }
  self->ttrpc = g_steal_pointer (&ttrpc);
  self->closed_id = g_signal_connect (self->ttrpc, "closed", G_CALLBACK (closed_cb), self);
  shimwatch_ttrpc_start (self->ttrpc);
  g_hash_table_iter_init (&iter, self->tasks);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &task))
    start_task (task);
}

static void
connect_socket (ShimwatchContainerdConnection *self)
{
  if (self->connecting || self->ttrpc != NULL || self->finished || self->closed_by_us)
    return;
  self->connecting = TRUE;
  shimwatch_ttrpc_connect_async (self->address, NULL, socket_connected_cb, g_object_ref (self));
}

void
shimwatch_containerd_connection_add_task (ShimwatchContainerdConnection *self,
                                          const char                    *namespace_,
                                          const char                    *id)
{
  Task *task;

  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self));

  if (g_hash_table_contains (self->tasks, id))
    return;
  task = g_new0 (Task, 1);
  task->self = self;
  task->namespace_ = g_strdup (namespace_);
  task->id = g_strdup (id);
  g_hash_table_insert (self->tasks, task->id, task);
  if (self->ttrpc != NULL)
    start_task (task);
  else
    connect_socket (self);
}

void
shimwatch_containerd_connection_remove_task (ShimwatchContainerdConnection *self,
                                             const char                    *id)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self));

  g_hash_table_remove (self->tasks, id);
}

guint
shimwatch_containerd_connection_get_n_tasks (ShimwatchContainerdConnection *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), 0);

  return g_hash_table_size (self->tasks);
}

gboolean
shimwatch_containerd_connection_is_finished (ShimwatchContainerdConnection *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), TRUE);

  return self->finished;
}

const char *
shimwatch_containerd_connection_get_address (ShimwatchContainerdConnection *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), NULL);

  return self->address;
}

const char *
shimwatch_containerd_connection_get_socket_path (ShimwatchContainerdConnection *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), NULL);

  return self->socket_path;
}

guint32
shimwatch_containerd_connection_get_shim_pid (ShimwatchContainerdConnection *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), 0);

  return self->shim_pid;
}

gboolean
shimwatch_containerd_connection_shim_is_gone (ShimwatchContainerdConnection *self)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), FALSE);

  if (self->shim_pidfd >= 0)
    return pidfd_readable (self->shim_pidfd);
  return self->socket_path != NULL && !shimwatch_containerd_socket_answers (self->socket_path);
}

gboolean
shimwatch_containerd_connection_kill_shim (ShimwatchContainerdConnection *self,
                                           GError                       **error)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self), FALSE);

  if (self->shim_pidfd < 0)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                   "the shim's process is not known");
      return FALSE;
    }
  if (pidfd_send_signal (self->shim_pidfd, SIGKILL, NULL, 0) != 0 && errno != ESRCH)
    {
      int saved_errno = errno;

      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_FAILED, "kill shim %u: %s",
                   self->shim_pid, g_strerror (saved_errno));
      return FALSE;
    }
  return TRUE;
}

static void
pids_cb (GObject      *source,
         GAsyncResult *result,
         gpointer      user_data)
{
  g_autoptr(GTask) task = user_data;
  GError *error = NULL;
  GArray *pids = shimwatch_task_client_pids_finish (SHIMWATCH_TASK_CLIENT (source), result,
                                                    &error);

  if (pids == NULL)
    g_task_return_error (task, error);
  else
    g_task_return_pointer (task, pids, (GDestroyNotify) g_array_unref);
}

void
shimwatch_containerd_connection_pids_async (ShimwatchContainerdConnection *self,
                                            const char                    *id,
                                            GAsyncReadyCallback            callback,
                                            gpointer                       user_data)
{
  g_autoptr(GTask) task = g_task_new (self, NULL, callback, user_data);
  Task *entry = g_hash_table_lookup (self->tasks, id);

  g_task_set_source_tag (task, shimwatch_containerd_connection_pids_async);
  if (entry == NULL || entry->client == NULL || !entry->connected)
    {
      g_task_return_new_error (task, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BAD_STATE,
                               "not connected to the task's shim");
      return;
    }
  shimwatch_task_client_pids_async (entry->client, CALL_TIMEOUT_MS, pids_cb,
                                    g_steal_pointer (&task));
}

GArray *
shimwatch_containerd_connection_pids_finish (ShimwatchContainerdConnection *self,
                                             GAsyncResult                  *result,
                                             GError                       **error)
{
  g_return_val_if_fail (g_task_is_valid (result, self), NULL);

  return g_task_propagate_pointer (G_TASK (result), error);
}

void
shimwatch_containerd_connection_close (ShimwatchContainerdConnection *self)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_CONNECTION (self));

  self->closed_by_us = TRUE;
  stop_watching (self);
  if (self->ttrpc != NULL)
    shimwatch_ttrpc_close (self->ttrpc);   /* "closed" runs, and does nothing more */
}

ShimwatchContainerdConnection *
shimwatch_containerd_connection_new (const char *address,
                                     int         version)
{
  ShimwatchContainerdConnection *self;

  g_return_val_if_fail (address != NULL, NULL);

  self = g_object_new (SHIMWATCH_TYPE_CONTAINERD_CONNECTION, NULL);
  self->address = g_strdup (address);
  if (g_str_has_prefix (address, "unix://"))
    self->socket_path = g_strdup (address + strlen ("unix://"));
  self->version = version;
  return self;
}

static void
shimwatch_containerd_connection_dispose (GObject *object)
{
  ShimwatchContainerdConnection *self = SHIMWATCH_CONTAINERD_CONNECTION (object);

  self->closed_by_us = TRUE;
  stop_watching (self);
  if (self->ttrpc != NULL)
    {
      g_clear_signal_handler (&self->closed_id, self->ttrpc);
      shimwatch_ttrpc_close (self->ttrpc);
      g_clear_object (&self->ttrpc);
    }
  g_hash_table_remove_all (self->tasks);

  G_OBJECT_CLASS (shimwatch_containerd_connection_parent_class)->dispose (object);
}

static void
shimwatch_containerd_connection_finalize (GObject *object)
{
  ShimwatchContainerdConnection *self = SHIMWATCH_CONTAINERD_CONNECTION (object);

  if (self->shim_pidfd >= 0)
    close (self->shim_pidfd);
  g_hash_table_unref (self->tasks);
  g_free (self->address);
  g_free (self->socket_path);

  G_OBJECT_CLASS (shimwatch_containerd_connection_parent_class)->finalize (object);
}

static void
shimwatch_containerd_connection_class_init (ShimwatchContainerdConnectionClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_containerd_connection_dispose;
  object_class->finalize = shimwatch_containerd_connection_finalize;

  /* (namespace, id, shim pid, task pid): Connect answered */
  signals[SIGNAL_TASK_CONNECTED] =
    g_signal_new ("task-connected", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 4, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_UINT, G_TYPE_UINT);
  /* (namespace, id, pid, exit status, exited at): Wait returned */
  signals[SIGNAL_TASK_EXITED] =
    g_signal_new ("task-exited", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 5, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_UINT, G_TYPE_UINT,
                  G_TYPE_INT64);
  /* (namespace, id): the shim does not know the task (deleted while the shim runs on) */
  signals[SIGNAL_TASK_UNKNOWN] =
    g_signal_new ("task-unknown", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 2, G_TYPE_STRING, G_TYPE_STRING);
  /* (shim pid, 0 if never known): the shim process died with its socket left behind */
  signals[SIGNAL_SHIM_DIED] =
    g_signal_new ("shim-died", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 1, G_TYPE_UINT);
  /* the shim exited and removed its socket: a normal delete */
  signals[SIGNAL_SHIM_EXITED] =
    g_signal_new ("shim-exited", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 0);
}

static void
shimwatch_containerd_connection_init (ShimwatchContainerdConnection *self)
{
  self->shim_pidfd = -1;
  self->version = 2;
  self->tasks = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, (GDestroyNotify) task_free);
}
