/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchDaemon"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-instance-lock.h"

#define LOCK_FILE_NAME "shimwatchd.lock"

/* the pid the holder wrote into the file, for the message only (0 if unreadable) */
static guint32
read_holder_pid (int fd)
{
  char text[32] = { 0 };
  ssize_t n = pread (fd, text, sizeof text - 1, 0);
  guint64 pid = 0;

  if (n <= 0 || !g_ascii_string_to_unsigned (g_strstrip (text), 10, 1, G_MAXINT32, &pid, NULL))
    return 0;
  return (guint32) pid;
}

int
shimwatch_instance_lock_acquire (const char  *runtime_dir,
                                 GError     **error)
{
  g_autofree char *path = NULL;
  g_autofree char *pid_text = NULL;
  int fd;

  g_return_val_if_fail (runtime_dir != NULL, -1);

  if (g_mkdir_with_parents (runtime_dir, 0711) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create %s: %s", runtime_dir, g_strerror (saved_errno));
      return -1;
    }
  path = g_build_filename (runtime_dir, LOCK_FILE_NAME, NULL);
  fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
  if (fd < 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot open the instance lock %s: %s", path, g_strerror (saved_errno));
      return -1;
    }
  if (flock (fd, LOCK_EX | LOCK_NB) != 0)
    {
      int saved_errno = errno;
      guint32 holder = saved_errno == EWOULDBLOCK ? read_holder_pid (fd) : 0;
      g_autofree char *who = holder > 0 ? g_strdup_printf ("pid %u", holder)
                                        : g_strdup ("another process");

      if (saved_errno == EWOULDBLOCK)
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_BUSY,
                     "another shimwatchd (%s) already serves the runtime directory %s "
                     "(it holds %s); not starting a second one", who, runtime_dir, path);
      else
        g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                     "cannot lock %s: %s", path, g_strerror (saved_errno));
      close (fd);
      return -1;
    }
  /* for the message a second instance prints; the lock itself is the flock */
  pid_text = g_strdup_printf ("%d\n", (int) getpid ());
  if (ftruncate (fd, 0) != 0 ||
      pwrite (fd, pid_text, strlen (pid_text), 0) != (ssize_t) strlen (pid_text))
    g_debug ("cannot write the pid into %s: %s", path, g_strerror (errno));
  return fd;
}
