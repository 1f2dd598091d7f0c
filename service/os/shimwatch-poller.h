/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchPoller: one epoll set, wrapped in one GSource, for every file descriptor the
 * service watches per shim (ttrpc sockets, pidfds, log FIFOs, task output). GLib's own
 * g_unix_fd_add() gives every fd a source of its own, and every main-loop iteration walks
 * all sources and poll()s all their fds: O(shims) per wakeup. Here the main loop polls the
 * one epoll fd; a wakeup costs O(ready fds), whatever the number of fds watched.
 *
 * Watches are level-triggered, as g_unix_fd_add()'s: a callback is called again, on a later
 * iteration, while its fd stays ready. A watch may be removed, or its events changed, from
 * any callback, its own included; a removed watch's callback is never called again, even
 * for an event already taken from the kernel in the same batch. Remove a watch before
 * closing its fd. (A watch whose fd was closed first, and whose number was watched again
 * since, is only forgotten when removed: the newer watch of that number stays.)
 *
 * The fds found ready together are dispatched in the order of their watches' priorities
 * (as GSource priorities: lower values first; G_PRIORITY_DEFAULT unless set), in the
 * kernel's order among equals: what must be told first (a shim's death) is not queued
 * behind what the same moment made ready too. The poller as a whole is one GSource of
 * G_PRIORITY_DEFAULT, so that no fd, however busy, starves the other sources.
 *
 * A poller belongs to one GMainContext and is used from the thread that runs it.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* What a watch waits for, and what its callback is told (several may be set at once) */
typedef enum {
  SHIMWATCH_POLLER_IN          = 1 << 0, /* readable: data, or end of file */
  SHIMWATCH_POLLER_OUT         = 1 << 1, /* writable */
  SHIMWATCH_POLLER_PRI         = 1 << 2, /* priority data */
  SHIMWATCH_POLLER_PEER_CLOSED = 1 << 3, /* EPOLLRDHUP: the peer closed or shut down its end;
                                          * asked for without IN, arriving data wakes nobody */
  SHIMWATCH_POLLER_ERR         = 1 << 4, /* always reported */
  SHIMWATCH_POLLER_HUP         = 1 << 5, /* always reported */
} ShimwatchPollerEvents;

typedef struct _ShimwatchPoller      ShimwatchPoller;
typedef struct _ShimwatchPollerWatch ShimwatchPollerWatch;

/* Return G_SOURCE_REMOVE to remove the watch (its destroy notify runs), as with
 * g_unix_fd_add(). */
typedef gboolean (*ShimwatchPollerFunc) (int                   fd,
                                         ShimwatchPollerEvents events,
                                         gpointer              user_data);

/* The poller of the thread-default main context, made and attached on first use; it lives
 * as long as that context. Not a new reference. */
ShimwatchPoller      *shimwatch_poller_get_default      (void);

ShimwatchPoller      *shimwatch_poller_new              (GMainContext          *context);
ShimwatchPoller      *shimwatch_poller_ref              (ShimwatchPoller       *self);
void                  shimwatch_poller_unref            (ShimwatchPoller       *self);
guint                 shimwatch_poller_get_n_watches    (ShimwatchPoller       *self);

/* NULL with @error set if the kernel refuses the fd (not pollable, already watched, …) */
ShimwatchPollerWatch *shimwatch_poller_add              (ShimwatchPoller       *self,
                                                         int                    fd,
                                                         ShimwatchPollerEvents  events,
                                                         ShimwatchPollerFunc    func,
                                                         gpointer               user_data,
                                                         GDestroyNotify         destroy,
                                                         GError               **error);
/* Changes what the watch waits for; a no-op when nothing changes. FALSE with @error if the
 * kernel refuses (the watch keeps its old events). */
gboolean              shimwatch_poller_watch_set_events (ShimwatchPollerWatch  *watch,
                                                         ShimwatchPollerEvents  events,
                                                         GError               **error);
/* Its place within a batch of ready fds (see above); a new watch has G_PRIORITY_DEFAULT */
void                  shimwatch_poller_watch_set_priority (ShimwatchPollerWatch  *watch,
                                                           int                    priority);
int                   shimwatch_poller_watch_get_priority (ShimwatchPollerWatch  *watch);
ShimwatchPollerEvents shimwatch_poller_watch_get_events (ShimwatchPollerWatch  *watch);
int                   shimwatch_poller_watch_get_fd     (ShimwatchPollerWatch  *watch);
/* Whether a watched fd (a FIFO held O_RDWR, which never sees an end of file) is known to
 * be empty, so that a last read before closing it, which would find nothing (EAGAIN), can
 * be left out without losing anything: every writer of it was gone at @writers_gone_at
 * (g_get_monotonic_time(); 0: not known), and an epoll_wait() that began after that
 * looked at every ready fd (it took fewer than it could) and did not find this one, nor
 * did any call since. FALSE whenever that is not known. */
gboolean              shimwatch_poller_watch_is_drained (ShimwatchPollerWatch  *watch,
                                                         gint64                 writers_gone_at);
/* Whether the last epoll_wait() found the fd ready: also while its callback, later in
 * the same batch, has not run yet (another callback of the batch asks). For an fd that
 * stays ready once it is (a pidfd: its process has exited), TRUE says so without a
 * system call. */
gboolean              shimwatch_poller_watch_is_ready   (ShimwatchPollerWatch  *watch);
/* Removes the watch: its callback is not called again, its destroy notify runs now. */
void                  shimwatch_poller_watch_remove     (ShimwatchPollerWatch  *watch);

/* A bare timer: a GSource with no descriptor and no prepare or check of its own, dispatched
 * once its ready time (g_source_set_ready_time(), g_get_monotonic_time() µs; -1: never)
 * has come. Its callback is a GSourceFunc, set with g_source_set_callback(); it may set
 * the next ready time itself and return G_SOURCE_CONTINUE. Unlike g_timeout_source_new(),
 * which re-arms itself one interval after every dispatch, it fires only when asked to:
 * one source serves any number of times to come (a run's output check and deadline, a
 * scheduler's ticks), re-armed without a source per time and without a wake-up of the
 * context when re-armed from its own dispatch. @ready_time is set before the source is
 * attached (a new ready time of an attached source wakes its context). */
GSource              *shimwatch_timer_source_new        (gint64                 ready_time);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchPoller, shimwatch_poller_unref)

G_END_DECLS
