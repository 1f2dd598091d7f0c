/* SPDX-License-Identifier: Apache-2.0
 *
 * a task's key, its object path and its export (see shimwatch-task-object.h)
 */

#include "config.h"

#include "shimwatch-task-object.h"

char *
shimwatch_task_key (const char *namespace_,
                    const char *id)
{
  return g_strconcat (namespace_, "/", id, NULL);
}

char *
shimwatch_task_object_path (const char *base,
                            const char *namespace_,
                            const char *id)
{
  g_autofree char *ns_part = g_dbus_escape_object_path (namespace_);
  g_autofree char *id_part = g_dbus_escape_object_path (id);

  return g_strconcat (base, "/", ns_part, "/", id_part, NULL);
}

void
shimwatch_task_object_export (GDBusObjectManagerServer *object_manager,
                              const char               *path,
                              ShimwatchDbusShim        *shim)
{
  g_autoptr(ShimwatchDbusObjectSkeleton) object = shimwatch_dbus_object_skeleton_new (path);

  shimwatch_dbus_object_skeleton_set_shim (object, shim);
  g_dbus_object_manager_server_export (object_manager, G_DBUS_OBJECT_SKELETON (object));
}
