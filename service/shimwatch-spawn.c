/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib-unix.h>

#include "shimwatch-spawn.h"

typedef struct {
  GPid        pid;
  int         pidfd;
  guint       pidfd_watch;
  guint       timeout_id;
  int         fds[2];           /* our ends of the child's stdout and stderr */
  guint       watches[2];
  GByteArray *output[2];
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
spawn_data_free (SpawnData *data)
{
  g_clear_handle_id (&data->pidfd_watch, g_source_remove);
  g_clear_handle_id (&data->timeout_id, g_source_remove);
  for (guint i = 0; i < 2; i++)
    {
      g_clear_handle_id (&data->watches[i], g_source_remove);
      if (data->fds[i] >= 0)
        close (data->fds[i]);
      if (data->output[i] != NULL)
        g_byte_array_unref (data->output[i]);
    }
  if (data->pidfd >= 0)
    close (data->pidfd);
  shimwatch_spawn_result_free (data->result);
  g_free (data);
}

/* what the pipe holds now; FALSE at EOF or on an error */
static gboolean
drain (SpawnData *data,
       guint      i)
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
    }
}

static void
close_pipe (SpawnData *data,
            guint      i)
{
  g_clear_handle_id (&data->watches[i], g_source_remove);
  if (data->fds[i] >= 0)
    {
      close (data->fds[i]);
      data->fds[i] = -1;
    }
}

static gboolean
pipe_cb (int          fd,
         GIOCondition condition,
         gpointer     user_data)
{
  GTask *task = user_data;
  SpawnData *data = g_task_get_task_data (task);
  guint i = fd == data->fds[0] ? 0 : 1;

  if (drain (data, i))
    return G_SOURCE_CONTINUE;
  data->watches[i] = 0;
  close (data->fds[i]);
  data->fds[i] = -1;
  return G_SOURCE_REMOVE;
}

static gboolean
exited_cb (int          fd,
           GIOCondition condition,
           gpointer     user_data)
{
  g_autoptr(GTask) task = user_data;
  SpawnData *data = g_task_get_task_data (task);
  int status = 0;
  pid_t reaped;

  data->pidfd_watch = 0;
  g_clear_handle_id (&data->timeout_id, g_source_remove);
  do
    reaped = waitpid (data->pid, &status, 0);
  while (reaped < 0 && errno == EINTR);
  data->result->wait_status = reaped == data->pid ? status : W_EXITCODE (255, 0);
  /* everything the process wrote is in the pipes now (what a child it left behind may
   * still write is not waited for) */
  for (guint i = 0; i < 2; i++)
    {
      if (data->fds[i] >= 0)
        drain (data, i);
      close_pipe (data, i);
    }
  data->result->stdout_bytes = g_byte_array_free_to_bytes (g_steal_pointer (&data->output[0]));
  data->result->stderr_bytes = g_byte_array_free_to_bytes (g_steal_pointer (&data->output[1]));
  g_task_return_pointer (task, g_steal_pointer (&data->result),
                         (GDestroyNotify) shimwatch_spawn_result_free);
  return G_SOURCE_REMOVE;
}

static gboolean
timeout_cb (gpointer user_data)
{
  GTask *task = user_data;
  SpawnData *data = g_task_get_task_data (task);

  data->timeout_id = 0;
  data->result->timed_out = TRUE;
  pidfd_send_signal (data->pidfd, SIGKILL, NULL, 0);
  return G_SOURCE_REMOVE;
}

void
shimwatch_spawn_async (const char * const  *argv,
                       const char * const  *envp,
                       const char          *cwd,
                       int                  stdin_fd,
                       guint                timeout_ms,
                       GAsyncReadyCallback  callback,
                       gpointer             user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, NULL, callback, user_data);
  SpawnData *data = g_new0 (SpawnData, 1);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  sigset_t signals;
  int out[2] = { -1, -1 };
  int err[2] = { -1, -1 };
  int null_fd = -1;
  int saved_errno = 0;

  g_task_set_source_tag (task, shimwatch_spawn_async);
  data->pidfd = data->fds[0] = data->fds[1] = -1;
  data->result = g_new0 (ShimwatchSpawnResult, 1);
  data->output[0] = g_byte_array_new ();
  data->output[1] = g_byte_array_new ();
  g_task_set_task_data (task, data, (GDestroyNotify) spawn_data_free);

  if (stdin_fd < 0)
    stdin_fd = null_fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  if (stdin_fd < 0 || pipe2 (out, O_CLOEXEC) != 0 || pipe2 (err, O_CLOEXEC) != 0)
    {
      saved_errno = errno;
      goto out;
    }

  posix_spawn_file_actions_init (&actions);
  posix_spawn_file_actions_adddup2 (&actions, stdin_fd, 0);
  posix_spawn_file_actions_adddup2 (&actions, out[1], 1);
  posix_spawn_file_actions_adddup2 (&actions, err[1], 2);
  posix_spawn_file_actions_addchdir_np (&actions, cwd);
  posix_spawn_file_actions_addclosefrom_np (&actions, 3);
  posix_spawnattr_init (&attr);
  /* nothing of the service's signal handling is inherited */
  sigemptyset (&signals);
  posix_spawnattr_setsigmask (&attr, &signals);
  sigfillset (&signals);
  posix_spawnattr_setsigdefault (&attr, &signals);
  posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  saved_errno = posix_spawn (&data->pid, argv[0], &actions, &attr, (char * const *) argv,
                             (char * const *) envp);
  posix_spawn_file_actions_destroy (&actions);
  posix_spawnattr_destroy (&attr);
  if (saved_errno != 0)
    goto out;

  data->pidfd = pidfd_open (data->pid, 0);
  if (data->pidfd < 0)
    {
      /* cannot happen on a kernel the service runs on (5.3+); never leave a zombie */
      saved_errno = errno;
      kill (data->pid, SIGKILL);
      waitpid (data->pid, NULL, 0);
      goto out;
    }
  for (guint i = 0; i < 2; i++)
    {
      data->fds[i] = i == 0 ? out[0] : err[0];
      g_unix_set_fd_nonblocking (data->fds[i], TRUE, NULL);
      data->watches[i] = g_unix_fd_add (data->fds[i], G_IO_IN | G_IO_HUP | G_IO_ERR, pipe_cb,
                                        task);
    }
  out[0] = err[0] = -1;
  data->pidfd_watch = g_unix_fd_add (data->pidfd, G_IO_IN, exited_cb, g_object_ref (task));
  if (timeout_ms > 0)
    data->timeout_id = g_timeout_add (timeout_ms, timeout_cb, task);

out:
  for (guint i = 0; i < 2; i++)
    {
      if (out[i] >= 0)
        close (out[i]);
      if (err[i] >= 0)
        close (err[i]);
    }
  if (null_fd >= 0)
    close (null_fd);
  if (saved_errno != 0)
    g_task_return_new_error (task, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                             "cannot run %s: %s", argv[0], g_strerror (saved_errno));
}

ShimwatchSpawnResult *
shimwatch_spawn_finish (GAsyncResult  *result,
                        GError       **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}
