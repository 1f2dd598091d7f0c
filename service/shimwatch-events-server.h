/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchEventsServer: the ttrpc socket shims get as TTRPC_ADDRESS. It serves
 * containerd.services.events.ttrpc.v1.Events/Forward and emits "event" for every
 * decoded envelope. Only peers with the service's own uid are accepted (SO_PEERCRED).
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_EVENTS_SERVICE "containerd.services.events.ttrpc.v1.Events"

#define SHIMWATCH_TYPE_EVENTS_SERVER (shimwatch_events_server_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchEventsServer, shimwatch_events_server, SHIMWATCH, EVENTS_SERVER, GObject)

ShimwatchEventsServer *shimwatch_events_server_new      (const char            *path,
                                                         GError               **error);
guint                  shimwatch_events_server_get_n_connections (ShimwatchEventsServer *self);
void                   shimwatch_events_server_stop     (ShimwatchEventsServer *self);

G_END_DECLS
