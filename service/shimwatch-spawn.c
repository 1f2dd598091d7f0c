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

/* pidfd_open(2) failed with ENOSYS or EPERM once: it will again, do not ask each time */
static gint pidfd_open_unavailable;
/* pidfd_open(2) fails with this errno instead of being called (0: it is called) */
static int pidfd_open_errno_for_tests;

typedef struct {
  GPid                  pid;
  int                   pidfd;  /* -1: a waiter thread watches the exit (wait_thread) */
  GSource              *pidfd_source;
  GSource              *timeout_source;
  int                   fds[2]; /* our ends of the child's stdout and stderr */
  GSource              *pipe_sources[2];
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
  clear_source (&data->pidfd_source);
  clear_source (&data->timeout_source);
  for (guint i = 0; i < 2; i++)
    {
      clear_source (&data->pipe_sources[i]);
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
  clear_source (&data->pipe_sources[i]);
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
  close_pipe (data, i);
  return G_SOURCE_REMOVE;
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

  clear_source (&data->timeout_source);
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
}

static gboolean
pidfd_readable_cb (int          fd,
                   GIOCondition condition,
                   gpointer     user_data)
{
  g_autoptr(GTask) task = user_data;
  SpawnData *data = g_task_get_task_data (task);

  g_clear_pointer (&data->pidfd_source, g_source_unref);
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

static gboolean
timeout_cb (gpointer user_data)
{
  GTask *task = user_data;
  SpawnData *data = g_task_get_task_data (task);

  g_clear_pointer (&data->timeout_source, g_source_unref);
  data->result->timed_out = TRUE;
  /* not reaped yet (child_exited ends this deadline when it reaps): the pid is still the
   * child's, alive or a zombie, with or without a pidfd */
  if (data->pidfd >= 0)
    pidfd_send_signal (data->pidfd, SIGKILL, NULL, 0);
  else
    kill (data->pid, SIGKILL);
  return G_SOURCE_REMOVE;
}

void
shimwatch_spawn_set_pidfd_open_errno_for_tests (int errno_value)
{
  pidfd_open_errno_for_tests = errno_value;
}

/* a pidfd for the child, or -1 with errno set */
static int
open_pidfd (GPid pid)
{
  int pidfd;

  if (G_UNLIKELY (pidfd_open_errno_for_tests != 0))
    {
      errno = pidfd_open_errno_for_tests;
      return -1;
    }
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
      data->pidfd_source = attach (task, g_unix_fd_source_new (data->pidfd, G_IO_IN),
                                   G_SOURCE_FUNC (pidfd_readable_cb),
                                   g_object_ref (task), "[shimwatch] spawned process pidfd");
      return TRUE;
    }

  saved_errno = errno;
  if (g_once_init_enter (&logged))
    {
      g_message ("pidfd_open() failed (%s): the exit of each command the service runs is "
                 "waited for in a thread", g_strerror (saved_errno));
      g_once_init_leave (&logged, 1);
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

void
shimwatch_spawn_async (const char * const *argv,
                       const char * const *envp,
                       const char         *cwd,
                       int                 stdin_fd,
                       guint               timeout_ms,
                       GAsyncReadyCallback callback,
                       gpointer            user_data)
{
  g_autoptr(GTask) task = g_task_new (NULL, NULL, callback, user_data);
  g_autoptr(GError) error = NULL;
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
      g_set_error (&error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot run %s: %s", argv[0], g_strerror (saved_errno));
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
  for (guint i = 0; i < 2; i++)
    {
      data->fds[i] = i == 0 ? out[0] : err[0];
      g_unix_set_fd_nonblocking (data->fds[i], TRUE, NULL);
      data->pipe_sources[i] = attach (task,
                                      g_unix_fd_source_new (data->fds[i],
                                                            G_IO_IN | G_IO_HUP | G_IO_ERR),
                                      G_SOURCE_FUNC (pipe_cb), task,
                                      "[shimwatch] spawned process output");
    }
  out[0] = err[0] = -1;
  if (timeout_ms > 0)
    data->timeout_source = attach (task, g_timeout_source_new (timeout_ms), timeout_cb, task,
                                   "[shimwatch] spawned process deadline");

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
  if (error != NULL)
    g_task_return_error (task, g_steal_pointer (&error));
}

ShimwatchSpawnResult *
shimwatch_spawn_finish (GAsyncResult *result,
                        GError      **error)
{
  g_return_val_if_fail (g_task_is_valid (result, NULL), NULL);
  return g_task_propagate_pointer (G_TASK (result), error);
}
