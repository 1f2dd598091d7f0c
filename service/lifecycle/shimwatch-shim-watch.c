/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShimWatch: watching one shim process (see shimwatch-shim-watch.h)
 */
#define G_LOG_DOMAIN "ShimwatchShim"

#include "config.h"

#include "shimwatch-shim-watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include "shimwatch-logging.h"

void
shimwatch_shim_watch_init (ShimwatchShimWatch *self,
                           const char         *namespace_,
                           const char         *id,
                           ShimwatchDbusShim  *iface)
{
  *self = (ShimwatchShimWatch) {
    .namespace_ = namespace_,
    .id = id,
    .iface = iface,
    .pidfd = -1,
    .pidfd_kept = -1,
  };
}

static gboolean
connected (ShimwatchShimWatch *self)
{
  return self->client != NULL &&
         !shimwatch_ttrpc_is_closed (shimwatch_task_client_get_ttrpc (self->client));
}

static gboolean
shim_process_exited_cb (int                   fd,
                        ShimwatchPollerEvents events,
                        gpointer              user_data)
{
  ShimwatchShimWatch *self = user_data;

  if (self->dead_at == 0)
    self->dead_at = g_get_monotonic_time ();
  /* out of the epoll set first: what follows may end the shim's connection, which closes
   * this pidfd (shimwatch_shim_watch_stop()), and a new fd of that number (the task's
   * pidfd that the cleanup watches) must not lose its watch when this one goes */
  g_clear_pointer (&self->pidfd_watch, shimwatch_poller_watch_remove);
  /* The socket's EOF comes with the death, but the poller may hand over the pidfd first
   * (many shims dying at once): read what the socket has now, so that a plain death
   * goes the socket's way, ShimDisconnected first and no warning. Still connected after
   * that: a child inherited the socket. */
  if (connected (self))
    shimwatch_ttrpc_collect (shimwatch_task_client_get_ttrpc (self->client));
  if (connected (self))
    {
      /* and may hold the shim's FIFOs too: they are read to the end */
      self->dead_at = -1;
      shimwatch_log_task (G_LOG_LEVEL_WARNING,
                          LOG_EVENT_OF (self->iface, self->namespace_, self->id, "disconnected",
                                        NULL),
                          "shim process %u is dead but its connection is still open (a child of "
                          "the shim holds the socket); treating the shim as gone",
                          shimwatch_dbus_shim_get_shim_pid (self->iface));
      shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->client));
    }
  return G_SOURCE_REMOVE;
}

void
shimwatch_shim_watch_start (ShimwatchShimWatch       *self,
                            ShimwatchTaskClient      *client,
                            guint32                   pid,
                            ShimwatchHealthScheduler *scheduler,
                            ShimwatchHealthFunc       func,
                            gpointer                  user_data)
{
  self->client = client;
  if (pid > 0)
    {
      self->pidfd = pidfd_open ((pid_t) pid, 0);
      if (self->pidfd >= 0)
        {
          g_autoptr(GError) error = NULL;

          self->pidfd_watch = shimwatch_poller_add (shimwatch_poller_get_default (), self->pidfd,
                                                    SHIMWATCH_POLLER_IN, shim_process_exited_cb,
                                                    self, NULL, &error);
          if (self->pidfd_watch == NULL)
            shimwatch_log_task (G_LOG_LEVEL_WARNING,
                                LOG_EVENT_OF (self->iface, self->namespace_, self->id, "create",
                                              NULL),
                                "cannot watch shim process %u: %s (its death is seen when "
                                "its socket closes)", pid, error->message);
        }
    }
  /* no keepalive in ttrpc: a hung shim is only seen by asking it (the health scheduler
   * does, for every shim, and tells when the answer changes) */
  if (scheduler != NULL)
    {
      self->scheduler = g_object_ref (scheduler);
      self->health = shimwatch_health_scheduler_add (scheduler, client, func, user_data);
    }
}

void
shimwatch_shim_watch_stop (ShimwatchShimWatch *self,
                           gboolean            keep_pidfd)
{
  /* a shim dying as its connection closed may not have said so through its pidfd yet */
  if (keep_pidfd && self->dead_at == 0 && self->pidfd >= 0 && self->pidfd_watch != NULL &&
      self->pidfd_kept < 0)
    {
      g_clear_pointer (&self->pidfd_watch, shimwatch_poller_watch_remove);
      self->pidfd_kept = g_steal_fd (&self->pidfd);
    }
  g_clear_pointer (&self->pidfd_watch, shimwatch_poller_watch_remove);
  if (self->health != NULL)
    shimwatch_health_scheduler_remove (self->scheduler, g_steal_pointer (&self->health));
  g_clear_object (&self->scheduler);
  if (self->pidfd >= 0)
    close (g_steal_fd (&self->pidfd));
}

gboolean
shimwatch_shim_watch_has_pidfd (ShimwatchShimWatch *self)
{
  return self->pidfd >= 0;
}

gboolean
shimwatch_shim_watch_kill (ShimwatchShimWatch *self)
{
  int ready;

  if (self->pidfd < 0)
    return FALSE;
  /* a pidfd turns readable once its process has exited: a dead shim is left alone. The
   * poller may have found it ready in the batch it is handing out (the socket's end told
   * first): then it is dead, without asking the kernel again */
  ready = self->pidfd_watch != NULL && shimwatch_poller_watch_is_ready (self->pidfd_watch)
          ? 1 : poll (&(struct pollfd) { .fd = self->pidfd, .events = POLLIN }, 1, 0);
  if (ready > 0 && self->dead_at == 0)
    self->dead_at = g_get_monotonic_time ();
  return ready == 0 && pidfd_send_signal (self->pidfd, SIGKILL, NULL, 0) == 0;
}

void
shimwatch_shim_watch_look_again (ShimwatchShimWatch *self,
                                 gboolean            last_time)
{
  if (self->pidfd_kept < 0)
    return;
  if (poll (&(struct pollfd) { .fd = self->pidfd_kept, .events = POLLIN }, 1, 0) > 0)
    {
      if (self->dead_at == 0)
        self->dead_at = g_get_monotonic_time ();
    }
  else if (!last_time)
    return;
  close (g_steal_fd (&self->pidfd_kept));
}

void
shimwatch_shim_watch_clear (ShimwatchShimWatch *self)
{
  shimwatch_shim_watch_stop (self, FALSE);
  if (self->pidfd_kept >= 0)
    close (g_steal_fd (&self->pidfd_kept));
  self->client = NULL;
}
