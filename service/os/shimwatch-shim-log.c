/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchShimLog"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <glib-unix.h>

#include "shimwatch-logging.h"
#include "shimwatch-names.h"
#include "shimwatch-poller.h"
#include "shimwatch-shim-log.h"

#define MAX_LINE 8192

struct _ShimwatchShimLog
{
  GObject  parent_instance;

  char    *namespace_;
  char    *id;
  int      fd;
  ShimwatchPollerWatch *watch;
  GString *line;
  gint64   writers_gone_at;   /* 0: not known */
};

G_DEFINE_TYPE (ShimwatchShimLog, shimwatch_shim_log, G_TYPE_OBJECT)

static void
emit_line (ShimwatchShimLog *self)
{
  if (self->line->len == 0)
    return;
  shimwatch_log_task (G_LOG_LEVEL_MESSAGE,
                      (&(ShimwatchLogTask) { .namespace_ = self->namespace_, .id = self->id,
                                             .prefix = "shim " }),
                      "%s", self->line->str);
  g_string_truncate (self->line, 0);
}

static gboolean
readable_cb (int                   fd,
             ShimwatchPollerEvents events,
             gpointer              user_data)
{
  ShimwatchShimLog *self = user_data;
  char buffer[4096];

  for (;;)
    {
      gssize n = read (fd, buffer, sizeof buffer);

      if (n < 0 && errno == EINTR)
        continue;
      /* we hold the FIFO O_RDWR ourselves, so there is no EOF; EAGAIN means drained */
      if (n <= 0)
        break;
      for (gssize i = 0; i < n; i++)
        {
          if (buffer[i] == '\n')
            emit_line (self);
          else if (self->line->len < MAX_LINE)
            g_string_append_c (self->line, buffer[i]);
        }
      if ((gsize) n < sizeof buffer)
        break;
    }
  return G_SOURCE_CONTINUE;
}

ShimwatchShimLog *
shimwatch_shim_log_open (const char  *task_dir,
                         const char  *namespace_,
                         const char  *id,
                         GError     **error)
{
  g_autoptr(ShimwatchShimLog) self = NULL;
  g_autofree char *path = g_build_filename (task_dir, "log", NULL);
  struct stat st;
  int saved_errno;

  if (mkfifo (path, 0700) != 0 && errno != EEXIST)
    {
      saved_errno = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create the shim log FIFO %s: %s", path, g_strerror (saved_errno));
      return NULL;
    }

  self = g_object_new (SHIMWATCH_TYPE_SHIM_LOG, NULL);
  self->namespace_ = g_strdup (namespace_);
  self->id = g_strdup (id);
  /* O_RDWR, as containerd: the open never blocks and there is never an EOF */
  self->fd = open (path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (self->fd < 0 || fstat (self->fd, &st) != 0 || !S_ISFIFO (st.st_mode))
    {
      saved_errno = self->fd < 0 ? errno : EINVAL;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot open the shim log FIFO %s: %s", path, g_strerror (saved_errno));
      return NULL;
    }
  self->watch = shimwatch_poller_add (shimwatch_poller_get_default (), self->fd,
                                      SHIMWATCH_POLLER_IN, readable_cb, self, NULL, error);
  if (self->watch == NULL)
    return NULL;
  return g_steal_pointer (&self);
}

void
shimwatch_shim_log_close (ShimwatchShimLog *self)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM_LOG (self));

  if (self->fd < 0)
    return;
  /* what is still in the FIFO: a read, unless the poller knows there is nothing */
  if (!shimwatch_poller_watch_is_drained (self->watch, self->writers_gone_at))
    readable_cb (self->fd, SHIMWATCH_POLLER_IN, self);
  emit_line (self);
  g_clear_pointer (&self->watch, shimwatch_poller_watch_remove);
  g_close (self->fd, NULL);
  self->fd = -1;
}

void
shimwatch_shim_log_set_writers_gone (ShimwatchShimLog *self,
                                     gint64            when)
{
  g_return_if_fail (SHIMWATCH_IS_SHIM_LOG (self));

  self->writers_gone_at = when;
}

static void
shimwatch_shim_log_finalize (GObject *object)
{
  ShimwatchShimLog *self = SHIMWATCH_SHIM_LOG (object);

  shimwatch_shim_log_close (self);
  g_string_free (self->line, TRUE);
  g_free (self->namespace_);
  g_free (self->id);

  G_OBJECT_CLASS (shimwatch_shim_log_parent_class)->finalize (object);
}

static void
shimwatch_shim_log_class_init (ShimwatchShimLogClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = shimwatch_shim_log_finalize;
}

static void
shimwatch_shim_log_init (ShimwatchShimLog *self)
{
  self->fd = -1;
  self->line = g_string_new (NULL);
}
