/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shimwatch-file.h"

char *
shimwatch_read_regular_file_at (int                 dir_fd,
                                const char         *name,
                                gsize               max_size,
                                ShimwatchFileFlags  flags,
                                gsize              *length,
                                struct stat        *st,
                                GError            **error)
{
  g_autofree char *buffer = NULL;
  struct stat own_st;
  gsize done = 0;
  int open_flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  int saved_errno;
  int fd;

  g_return_val_if_fail (name != NULL, NULL);
  g_return_val_if_fail (max_size < G_MAXSIZE, NULL);

  if (st == NULL)
    st = &own_st;
  if (!(flags & SHIMWATCH_FILE_FOLLOW_LINK))
    open_flags |= O_NOFOLLOW;
  /* O_NONBLOCK: a FIFO swapped in opens at once, and is then refused by its type */
  fd = openat (dir_fd, name, open_flags);
  if (fd < 0)
    {
      saved_errno = errno;
      if (saved_errno == ELOOP && !(flags & SHIMWATCH_FILE_FOLLOW_LINK))
        g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                     "%s is a symbolic link, which is not followed", name);
      else
        g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved_errno),
                     "cannot open %s: %s", name, g_strerror (saved_errno));
      return NULL;
    }
  if (fstat (fd, st) != 0)
    {
      saved_errno = errno;
      close (fd);
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved_errno),
                   "cannot stat %s: %s", name, g_strerror (saved_errno));
      return NULL;
    }
  if (!S_ISREG (st->st_mode))
    {
      close (fd);
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s is not a regular file (%s)",
                   name, S_ISDIR (st->st_mode) ? "a directory" :
                         S_ISFIFO (st->st_mode) ? "a FIFO" :
                         S_ISCHR (st->st_mode) || S_ISBLK (st->st_mode) ? "a device" :
                         S_ISSOCK (st->st_mode) ? "a socket" : "not a plain file");
      return NULL;
    }
  if ((guint64) st->st_size > max_size)
    {
      close (fd);
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s is larger than %" G_GSIZE_FORMAT
                   " bytes", name, max_size);
      return NULL;
    }

  /* the size may change under us: read at most one byte past the cap to see it */
  buffer = g_malloc ((gsize) st->st_size + 2);
  while (done < (gsize) st->st_size + 1)
    {
      gssize n = read (fd, buffer + done, (gsize) st->st_size + 1 - done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          saved_errno = errno;
          close (fd);
          g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved_errno),
                       "cannot read %s: %s", name, g_strerror (saved_errno));
          return NULL;
        }
      if (n == 0)
        break;
      done += (gsize) n;
    }
  close (fd);
  if (done > (gsize) st->st_size)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s changed while it was read",
                   name);
      return NULL;
    }
  buffer[done] = '\0';
  if (length != NULL)
    *length = done;
  return g_steal_pointer (&buffer);
}
