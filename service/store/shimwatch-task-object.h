/* SPDX-License-Identifier: Apache-2.0
 *
 * The name a task goes by in the service's tables, where its D-Bus object lives and how it
 * is put on the bus: the same for the
 * service's own shims (under SHIMWATCH_DBUS_SHIMS_PATH) and for the containerd
 * companion's tasks (under SHIMWATCH_DBUS_CONTAINERD_PATH), so that an admin GUI sees
 * both through one ObjectManager alike.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-dbus-generated.h"

G_BEGIN_DECLS

/* "<namespace>/<id>" (valid identifiers hold no '/'), the key of a task's table entries */
char *shimwatch_task_key           (const char               *namespace_,
                                    const char               *id);
/* <base>/<namespace>/<id>, each part escaped with g_dbus_escape_object_path() */
char *shimwatch_task_object_path   (const char               *base,
                                    const char               *namespace_,
                                    const char               *id);
/* an object at path with the Shim interface only (InterfacesAdded); it goes again with
 * g_dbus_object_manager_server_unexport() (InterfacesRemoved) */
void  shimwatch_task_object_export (GDBusObjectManagerServer *object_manager,
                                    const char               *path,
                                    ShimwatchDbusShim        *shim);

G_END_DECLS
