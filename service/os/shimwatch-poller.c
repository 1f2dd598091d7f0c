/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchPoller"

#include "config.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <gio/gio.h>

#include "shimwatch-poller.h"

/* events taken from the kernel per dispatch; more stay ready for the next iteration (the
 * kernel hands level-triggered events out round-robin, so none starves) */
#define MAX_EVENTS 256

struct _ShimwatchPoller
{
  GSource     source;
  int         epfd;
  gpointer    epfd_tag;
  GQueue      watches;      /* every watch added and not removed: the poller owns them */
  GHashTable *by_fd;        /* fd number → the watch added last for it, while it is added */
  gboolean    dispatching;  /* a batch is being handed out */
  gboolean    muted;        /* the epoll fd is left out of the poll (a nested iteration) */
  guint64     n_waits;      /* epoll_wait() calls so far */
  guint64     last_sweep;   /* the last of them that took every ready fd (0: none yet) */
  gint64      last_sweep_started;   /* when it was called (monotonic) */
};

struct _ShimwatchPollerWatch
{
  ShimwatchPoller       *poller;      /* owned: a watch keeps its poller */
  int                    fd;
  ShimwatchPollerEvents  events;
  int                    priority;    /* order within a batch: lower first */
  ShimwatchPollerFunc    func;
  gpointer               user_data;
  GDestroyNotify         destroy;
  guint                  ref_count;   /* 1 while added, +1 while in a dispatched batch */
  gboolean               removed;
  gboolean               fd_lost;     /* closed while watched, its number taken since */
  guint64                in_from;     /* the first epoll_wait() that looked for its IN */
  guint64                reported;    /* the last epoll_wait() that found it ready */
  GList                  link;        /* in poller->watches while added */
};

static guint32
to_epoll (ShimwatchPollerEvents events)
{
  return ((events & SHIMWATCH_POLLER_IN) ? EPOLLIN : 0) |
         ((events & SHIMWATCH_POLLER_OUT) ? EPOLLOUT : 0) |
         ((events & SHIMWATCH_POLLER_PRI) ? EPOLLPRI : 0) |
         ((events & SHIMWATCH_POLLER_PEER_CLOSED) ? EPOLLRDHUP : 0);
}

static ShimwatchPollerEvents
from_epoll (guint32 events)
{
  return ((events & EPOLLIN) ? SHIMWATCH_POLLER_IN : 0) |
         ((events & EPOLLOUT) ? SHIMWATCH_POLLER_OUT : 0) |
         ((events & EPOLLPRI) ? SHIMWATCH_POLLER_PRI : 0) |
         ((events & EPOLLRDHUP) ? SHIMWATCH_POLLER_PEER_CLOSED : 0) |
         ((events & EPOLLERR) ? SHIMWATCH_POLLER_ERR : 0) |
         ((events & EPOLLHUP) ? SHIMWATCH_POLLER_HUP : 0);
}

static void
watch_unref (ShimwatchPollerWatch *watch)
{
  if (--watch->ref_count > 0)
    return;
  shimwatch_poller_unref (watch->poller);
  g_free (watch);
}

/* a stable insertion sort: a batch is short, and mostly of one priority (then nothing
 * moves) */
static void
sort_by_priority (struct epoll_event *ready,
                  int                 n)
{
  for (int i = 1; i < n; i++)
    {
      struct epoll_event event = ready[i];
      int priority = ((ShimwatchPollerWatch *) event.data.ptr)->priority;
      int j = i;

      for (; j > 0 && ((ShimwatchPollerWatch *) ready[j - 1].data.ptr)->priority > priority; j--)
        ready[j] = ready[j - 1];
      ready[j] = event;
    }
}

static gboolean
poller_dispatch (GSource     *source,
                 GSourceFunc  callback G_GNUC_UNUSED,
                 gpointer     user_data G_GNUC_UNUSED)
{
  ShimwatchPoller *self = (ShimwatchPoller *) source;
  struct epoll_event ready[MAX_EVENTS];
  gint64 started;
  int n;

  /* a main-loop iteration run from one of our callbacks: the batch is not done */
  if (self->dispatching)
    return G_SOURCE_CONTINUE;
  started = g_get_monotonic_time ();
  n = epoll_wait (self->epfd, ready, MAX_EVENTS, 0);
  if (n < 0)
    {
      if (errno != EINTR)
        g_warning ("epoll_wait: %s", g_strerror (errno));
      return G_SOURCE_CONTINUE;
    }
  /* Fewer than asked for: the kernel looked at every fd on its ready list, and a
   * level-triggered fd with data to read is on it (shimwatch_poller_watch_is_drained()) */
  self->n_waits++;
  if (n < MAX_EVENTS)
    {
      self->last_sweep = self->n_waits;
      self->last_sweep_started = started;
    }

  /* a callback may remove any watch of the batch (and close its fd, and have a new watch
   * take the same fd number): each stays allocated, marked removed, until the batch ends */
  for (int i = 0; i < n; i++)
    {
      ShimwatchPollerWatch *watch = ready[i].data.ptr;

      watch->ref_count++;
      watch->reported = self->n_waits;
    }
  sort_by_priority (ready, n);
  self->dispatching = TRUE;
  for (int i = 0; i < n; i++)
    {
      ShimwatchPollerWatch *watch = ready[i].data.ptr;

      if (!watch->removed && !watch->func (watch->fd, from_epoll (ready[i].events),
                                           watch->user_data) && !watch->removed)
        shimwatch_poller_watch_remove (watch);
    }
  self->dispatching = FALSE;
  if (self->muted)
    {
      g_source_modify_unix_fd (source, self->epfd_tag, G_IO_IN);
      self->muted = FALSE;
    }
  for (int i = 0; i < n; i++)
    watch_unref (ready[i].data.ptr);
  return G_SOURCE_CONTINUE;
}

/* Only in a main-loop iteration nested in one of our callbacks (a callback that runs the
 * main context itself): the epoll fd stays ready until the batch is done, so it is left
 * out of that iteration's poll, which would not sleep otherwise. */
static gboolean
poller_prepare (GSource *source,
                gint    *timeout)
{
  ShimwatchPoller *self = (ShimwatchPoller *) source;

  *timeout = -1;
  if (self->dispatching && !self->muted)
    {
      g_source_modify_unix_fd (source, self->epfd_tag, 0);
      self->muted = TRUE;
    }
  return FALSE;
}

static void
poller_finalize (GSource *source)
{
  ShimwatchPoller *self = (ShimwatchPoller *) source;

  if (self->epfd >= 0)
    close (self->epfd);
  g_clear_pointer (&self->by_fd, g_hash_table_unref);
}

static GSourceFuncs poller_funcs = {
  .prepare = poller_prepare,
  .check = NULL,        /* dispatched whenever the epoll fd is readable */
  .dispatch = poller_dispatch,
  .finalize = poller_finalize,
};

ShimwatchPoller *
shimwatch_poller_new (GMainContext *context)
{
  ShimwatchPoller *self;
  int saved_errno;

  self = (ShimwatchPoller *) g_source_new (&poller_funcs, sizeof (ShimwatchPoller));
  self->epfd = epoll_create1 (EPOLL_CLOEXEC);
  self->by_fd = g_hash_table_new (g_direct_hash, g_direct_equal);
  if (self->epfd < 0)
    {
      /* only ENFILE/EMFILE/ENOMEM: nothing could be watched at all */
      saved_errno = errno;
      g_error ("cannot create an epoll set: %s", g_strerror (saved_errno));
    }
  g_source_set_name (&self->source, "ShimwatchPoller");
  self->epfd_tag = g_source_add_unix_fd (&self->source, self->epfd, G_IO_IN);
  /* GLib blocks a source that cannot recurse for its dispatch: it takes the source's fds
   * out of the context's poll and puts them back, and each of the two wakes the context
   * (GLib 2.74): two writes to its eventfd and an empty iteration after every dispatch,
   * on the path of every shim's death. The poller needs none of that: it guards its
   * batch against nested iterations itself (poller_prepare, poller_dispatch) */
  g_source_set_can_recurse (&self->source, TRUE);
  g_source_attach (&self->source, context);
  return self;
}

static GMutex defaults_lock;
static GHashTable *defaults;     /* GMainContext (not owned) → ShimwatchPoller (owned) */

ShimwatchPoller *
shimwatch_poller_get_default (void)
{
  g_autoptr(GMainContext) context = g_main_context_ref_thread_default ();
  ShimwatchPoller *self;

  g_mutex_lock (&defaults_lock);
  if (defaults == NULL)
    defaults = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
                                      (GDestroyNotify) shimwatch_poller_unref);
  self = g_hash_table_lookup (defaults, context);
  /* a destroyed one belonged to a context that is gone (its address reused since) */
  if (self == NULL || g_source_is_destroyed (&self->source))
    {
      self = shimwatch_poller_new (context);
      g_hash_table_insert (defaults, context, self);
    }
  g_mutex_unlock (&defaults_lock);
  return self;
}

ShimwatchPoller *
shimwatch_poller_ref (ShimwatchPoller *self)
{
  g_return_val_if_fail (self != NULL, NULL);
  return (ShimwatchPoller *) g_source_ref (&self->source);
}

void
shimwatch_poller_unref (ShimwatchPoller *self)
{
  g_return_if_fail (self != NULL);
  g_source_unref (&self->source);
}

guint
shimwatch_poller_get_n_watches (ShimwatchPoller *self)
{
  g_return_val_if_fail (self != NULL, 0);
  return self->watches.length;
}

ShimwatchPollerWatch *
shimwatch_poller_add (ShimwatchPoller        *self,
                      int                     fd,
                      ShimwatchPollerEvents   events,
                      ShimwatchPollerFunc     func,
                      gpointer                user_data,
                      GDestroyNotify          destroy,
                      GError                **error)
{
  ShimwatchPollerWatch *watch;
  ShimwatchPollerWatch *previous;
  struct epoll_event event = { 0 };
  int saved_errno;

  g_return_val_if_fail (self != NULL, NULL);
  g_return_val_if_fail (fd >= 0, NULL);
  g_return_val_if_fail (func != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  watch = g_new0 (ShimwatchPollerWatch, 1);
  event.events = to_epoll (events);
  event.data.ptr = watch;
  if (epoll_ctl (self->epfd, EPOLL_CTL_ADD, fd, &event) != 0)
    {
      saved_errno = errno;
      g_free (watch);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot watch fd %d: %s", fd, g_strerror (saved_errno));
      return NULL;
    }
  watch->poller = shimwatch_poller_ref (self);
  watch->fd = fd;
  watch->events = events;
  watch->priority = G_PRIORITY_DEFAULT;
  watch->func = func;
  watch->user_data = user_data;
  watch->destroy = destroy;
  watch->ref_count = 1;
  watch->in_from = self->n_waits + 1;
  watch->link.data = watch;
  g_queue_push_tail_link (&self->watches, &watch->link);
  /* The kernel keys its set by file and number, so an added watch of the same number
   * means the older one's fd was closed while watched (by a callback that closed it
   * before returning G_SOURCE_REMOVE, say) and the number now names this file. Removing
   * the older watch must not take this one's registration with it: a pidfd that never
   * wakes anybody. */
  previous = g_hash_table_lookup (self->by_fd, GINT_TO_POINTER (fd));
  if (previous != NULL)
    {
      previous->fd_lost = TRUE;
      g_debug ("fd %d was closed while watched; its number is watched again", fd);
    }
  g_hash_table_insert (self->by_fd, GINT_TO_POINTER (fd), watch);
  return watch;
}

gboolean
shimwatch_poller_watch_set_events (ShimwatchPollerWatch   *watch,
                                   ShimwatchPollerEvents   events,
                                   GError                **error)
{
  struct epoll_event event = { 0 };
  int saved_errno;

  g_return_val_if_fail (watch != NULL && !watch->removed, FALSE);

  if (events == watch->events)
    return TRUE;
  if (watch->fd_lost)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_CLOSED,
                   "fd %d was closed while watched", watch->fd);
      return FALSE;
    }
  event.events = to_epoll (events);
  event.data.ptr = watch;
  if (epoll_ctl (watch->poller->epfd, EPOLL_CTL_MOD, watch->fd, &event) != 0)
    {
      saved_errno = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot change the watch of fd %d: %s", watch->fd, g_strerror (saved_errno));
      return FALSE;
    }
  if ((events & SHIMWATCH_POLLER_IN) && !(watch->events & SHIMWATCH_POLLER_IN))
    watch->in_from = watch->poller->n_waits + 1;
  watch->events = events;
  return TRUE;
}

void
shimwatch_poller_watch_set_priority (ShimwatchPollerWatch *watch,
                                     int                   priority)
{
  g_return_if_fail (watch != NULL && !watch->removed);

  watch->priority = priority;
}

int
shimwatch_poller_watch_get_priority (ShimwatchPollerWatch *watch)
{
  g_return_val_if_fail (watch != NULL, G_PRIORITY_DEFAULT);
  return watch->priority;
}

ShimwatchPollerEvents
shimwatch_poller_watch_get_events (ShimwatchPollerWatch *watch)
{
  g_return_val_if_fail (watch != NULL, 0);
  return watch->events;
}

int
shimwatch_poller_watch_get_fd (ShimwatchPollerWatch *watch)
{
  g_return_val_if_fail (watch != NULL, -1);
  return watch->fd;
}

gboolean
shimwatch_poller_watch_is_ready (ShimwatchPollerWatch *watch)
{
  g_return_val_if_fail (watch != NULL, FALSE);

  return !watch->removed && watch->reported != 0 && watch->reported == watch->poller->n_waits;
}

gboolean
shimwatch_poller_watch_is_drained (ShimwatchPollerWatch *watch,
                                   gint64                writers_gone_at)
{
  ShimwatchPoller *self;

  g_return_val_if_fail (watch != NULL, FALSE);

  self = watch->poller;
  /* The last complete epoll_wait() began after the writers were gone, and the fd was
   * watched for IN then. Had the fd held anything, the kernel would have handed it out
   * in that call (level-triggered, fewer events than asked for); it did not, and no
   * call since did: the fd was empty then, and nobody has written to it since. */
  return writers_gone_at > 0 && !watch->removed && !watch->fd_lost &&
         (watch->events & SHIMWATCH_POLLER_IN) != 0 &&
         self->last_sweep != 0 && self->last_sweep_started > writers_gone_at &&
         watch->in_from <= self->last_sweep && watch->reported < self->last_sweep;
}

void
shimwatch_poller_watch_remove (ShimwatchPollerWatch *watch)
{
  GDestroyNotify destroy;
  gpointer user_data;

  g_return_if_fail (watch != NULL && !watch->removed);

  watch->removed = TRUE;
  g_queue_unlink (&watch->poller->watches, &watch->link);
  if (g_hash_table_lookup (watch->poller->by_fd, GINT_TO_POINTER (watch->fd)) == watch)
    g_hash_table_remove (watch->poller->by_fd, GINT_TO_POINTER (watch->fd));
  /* EBADF/ENOENT: the fd was closed first, and the kernel dropped it from the set itself;
   * closed and its number watched again: that number is no longer this watch's */
  if (!watch->fd_lost &&
      epoll_ctl (watch->poller->epfd, EPOLL_CTL_DEL, watch->fd, NULL) != 0 &&
      errno != EBADF && errno != ENOENT)
    g_warning ("cannot stop watching fd %d: %s", watch->fd, g_strerror (errno));
  destroy = watch->destroy;
  user_data = watch->user_data;
  watch->destroy = NULL;
  watch->func = NULL;
  watch_unref (watch);
  if (destroy != NULL)
    destroy (user_data);
}

/* -- the timer ---------------------------------------------------------------------------- */

static gboolean
timer_dispatch (GSource    *source,
                GSourceFunc callback,
                gpointer    user_data)
{
  g_return_val_if_fail (callback != NULL, G_SOURCE_REMOVE);
  return callback (user_data);
}

static GSourceFuncs timer_funcs = {
  .dispatch = timer_dispatch,   /* GLib dispatches it at its ready time: no prepare, check */
};

GSource *
shimwatch_timer_source_new (gint64 ready_time)
{
  GSource *source = g_source_new (&timer_funcs, sizeof (GSource));

  g_source_set_ready_time (source, ready_time);
  return source;
}
