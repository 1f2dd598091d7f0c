/* SPDX-License-Identifier: Apache-2.0
 *
 * Every bus name, object path, interface, polkit action and structured-log field
 * shimwatch uses, in one place.
 */
#pragma once

#define SHIMWATCH_DBUS_NAME            "org.shimwatch.Shimwatch1"
#define SHIMWATCH_DBUS_PATH            "/org/shimwatch/Shimwatch1"
#define SHIMWATCH_DBUS_SHIMS_PATH      SHIMWATCH_DBUS_PATH "/shims"
#define SHIMWATCH_DBUS_MANAGER_IFACE   SHIMWATCH_DBUS_NAME ".Manager"
#define SHIMWATCH_DBUS_SHIM_IFACE      SHIMWATCH_DBUS_NAME ".Shim"

#define SHIMWATCH_ACTION_REAP          "org.shimwatch.reap"
#define SHIMWATCH_ACTION_MANAGE        "org.shimwatch.manage"

#define SHIMWATCH_DEFAULT_RUNTIME      "io.containerd.runc.v2"

/* structured log fields (journald: upper case, [A-Z0-9_]) */
#define SHIMWATCH_LOG_FIELD_NAMESPACE  "SHIMWATCH_NAMESPACE"
#define SHIMWATCH_LOG_FIELD_TASK_ID    "SHIMWATCH_TASK_ID"
#define SHIMWATCH_LOG_FIELD_SHIM_PID   "SHIMWATCH_SHIM_PID"
#define SHIMWATCH_LOG_FIELD_TASK_PID   "SHIMWATCH_TASK_PID"
#define SHIMWATCH_LOG_FIELD_EVENT      "SHIMWATCH_EVENT"
#define SHIMWATCH_LOG_FIELD_CALLER     "SHIMWATCH_CALLER"
