/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchShim: watching the shim (its pidfd, the health check)
 */
#define G_LOG_DOMAIN "ShimwatchShim"

#include "config.h"

#include <sys/pidfd.h>
#include <unistd.h>

#include "shimwatch-shim-private.h"

void
shimwatch_shim_stop_watching (ShimwatchShim *self)
{
  g_clear_pointer (&self->shim_pidfd_watch, shimwatch_poller_watch_remove);
  if (self->health != NULL)
    shimwatch_health_scheduler_remove (self->services.health, g_steal_pointer (&self->health));
  if (self->shim_pidfd >= 0)
    {
      close (self->shim_pidfd);
      self->shim_pidfd = -1;
    }
}

static gboolean
shim_process_exited_cb (int                   fd,
                        ShimwatchPollerEvents events,
                        gpointer              user_data)
{
  ShimwatchShim *self = user_data;

  if (self->shim_dead_at == 0)
    self->shim_dead_at = g_get_monotonic_time ();
  /* out of the epoll set first: what follows may end the shim's connection, which closes
   * this pidfd (shimwatch_shim_stop_watching), and a new fd of that number (the task's
   * pidfd that the cleanup watches) must not lose its watch when this one goes */
  g_clear_pointer (&self->shim_pidfd_watch, shimwatch_poller_watch_remove);
  /* The socket's EOF comes with the death, but the poller may hand over the pidfd first
   * (many shims dying at once): read what the socket has now, so that a plain death
   * goes the socket's way, ShimDisconnected first and no warning. Still connected after
   * that: a child inherited the socket. */
  if (shimwatch_shim_is_connected (self) && self->handle != NULL)
    shimwatch_ttrpc_collect (shimwatch_task_client_get_ttrpc (self->handle->client));
  if (shimwatch_shim_is_connected (self) && self->handle != NULL)
    {
      /* and may hold the shim's FIFOs too: they are read to the end */
      self->shim_dead_at = -1;
      shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "disconnected"),
                          "shim process %u is dead but its connection is still open (a child of "
                          "the shim holds the socket); treating the shim as gone",
                          shimwatch_dbus_shim_get_shim_pid (SHIMWATCH_DBUS_SHIM (self)));
      shimwatch_ttrpc_close (shimwatch_task_client_get_ttrpc (self->handle->client));
    }
  return G_SOURCE_REMOVE;
}

/* no keepalive in ttrpc: a hung shim is only seen by asking it (the health scheduler
 * does, for every shim, and tells when the answer changes) */
static void
health_changed_cb (gboolean responsive,
                   gpointer user_data)
{
  ShimwatchShim *self = user_data;
  ShimwatchDbusShim *iface = SHIMWATCH_DBUS_SHIM (self);

  if (responsive == shimwatch_dbus_shim_get_responsive (iface))
    return;
  shimwatch_dbus_shim_set_responsive (iface, responsive);
  if (responsive)
    shimwatch_log_task (G_LOG_LEVEL_MESSAGE, LOG_EVENT (self, "responsive"), "shim answers again");
  else
    shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "unresponsive"),
                        "shim does not answer within %u ms; Reap can clean it up",
                        SHIMWATCH_HEALTH_TIMEOUT_MS);
  if (!responsive && shimwatch_publisher_get_metrics (self->services.publisher) != NULL)
    shimwatch_metrics_count_unresponsive (shimwatch_publisher_get_metrics (self->services.publisher));
}

/* from now on the shim's pidfd and its health are watched (shimwatch_shim_attach()) */
void
shimwatch_shim_start_watching (ShimwatchShim *self)
{
  guint32 shim_pid = self->handle->shim_pid;

  if (shim_pid > 0)
    {
      self->shim_pidfd = pidfd_open ((pid_t) shim_pid, 0);
      self->shim_start_time = shimwatch_process_start_time (shim_pid);
      if (self->shim_pidfd >= 0)
        {
          g_autoptr(GError) error = NULL;

          self->shim_pidfd_watch = shimwatch_poller_add (shimwatch_poller_get_default (),
                                                         self->shim_pidfd, SHIMWATCH_POLLER_IN,
                                                         shim_process_exited_cb, self, NULL,
                                                         &error);
          if (self->shim_pidfd_watch == NULL)
            shimwatch_log_task (G_LOG_LEVEL_WARNING, LOG_EVENT (self, "create"),
                                "cannot watch shim process %u: %s (its death is seen when "
                                "its socket closes)", shim_pid, error->message);
        }
    }
  if (self->services.config->health_interval_ms > 0 && self->services.health != NULL)
    self->health = shimwatch_health_scheduler_add (self->services.health, self->handle->client,
                                                   health_changed_cb, self);
}
