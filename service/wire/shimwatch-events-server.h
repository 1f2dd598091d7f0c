/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchEventsServer: the ttrpc socket shims get as TTRPC_ADDRESS. It serves
 * containerd.services.events.ttrpc.v1.Events/Forward and emits "event" for every
 * decoded envelope. Only peers with the service's own uid are accepted (SO_PEERCRED).
 *
 * Each connection knows its peer: the pid from SO_PEERCRED and that process's start time,
 * read while a pidfd of the peer (SO_PEERPIDFD, or pidfd_open() before Linux 6.5) showed it
 * alive, so that a pid reused later never passes for it. A sender check, when set, decides
 * whether that peer may publish an event (a task's events come from its own shim); what it
 * refuses is answered PERMISSION_DENIED, logged, and not emitted.
 *
 * A peer that does not read its replies is closed once SHIMWATCH_TTRPC_OUTPUT_LIMIT bytes
 * wait for it (logged); a shim reconnects when it next publishes.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_EVENTS_SERVICE "containerd.services.events.ttrpc.v1.Events"

#define SHIMWATCH_TYPE_EVENTS_SERVER (shimwatch_events_server_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchEventsServer, shimwatch_events_server, SHIMWATCH, EVENTS_SERVER, GObject)

typedef struct {
  guint32 pid;          /* of the process that connected (SO_PEERCRED) */
  guint32 uid;
  guint64 start_time;   /* of that process, /proc/<pid>/stat field 22; 0 = unknown */
} ShimwatchEventsPeer;

/* TRUE to accept @event from @peer; FALSE with *why set (freed by the server) to drop it */
typedef gboolean (*ShimwatchEventsSenderCheck) (const ShimwatchEvent      *event,
                                                const ShimwatchEventsPeer *peer,
                                                char                     **why,
                                                gpointer                   user_data);

ShimwatchEventsServer *shimwatch_events_server_new      (const char            *path,
                                                         GError               **error);
void                   shimwatch_events_server_set_sender_check (ShimwatchEventsServer      *self,
                                                                 ShimwatchEventsSenderCheck  check,
                                                                 gpointer                    user_data);
guint                  shimwatch_events_server_get_n_connections (ShimwatchEventsServer *self);
void                   shimwatch_events_server_stop     (ShimwatchEventsServer *self);

G_END_DECLS
