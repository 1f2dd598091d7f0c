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
#define SHIMWATCH_ACTION_READ_LOGS     "org.shimwatch.read-logs"

#define SHIMWATCH_DEFAULT_RUNTIME      "io.containerd.runc.v2"

/* structured log fields (journald: upper case, [A-Z0-9_]) */
#define SHIMWATCH_LOG_FIELD_NAMESPACE  "SHIMWATCH_NAMESPACE"
#define SHIMWATCH_LOG_FIELD_TASK_ID    "SHIMWATCH_TASK_ID"
#define SHIMWATCH_LOG_FIELD_SHIM_PID   "SHIMWATCH_SHIM_PID"
#define SHIMWATCH_LOG_FIELD_TASK_PID   "SHIMWATCH_TASK_PID"
#define SHIMWATCH_LOG_FIELD_EVENT      "SHIMWATCH_EVENT"
#define SHIMWATCH_LOG_FIELD_CALLER     "SHIMWATCH_CALLER"

/* journald MESSAGE_IDs of the lifecycle events: journalctl MESSAGE_ID=<id> */
#define SHIMWATCH_MESSAGE_ID_CREATE              "ff15e076a9a25d1a8ffebc55f07d3406"
#define SHIMWATCH_MESSAGE_ID_START               "6ca7ca5ff54b5ce6bd4b2ac0182e5c67"
#define SHIMWATCH_MESSAGE_ID_EXIT                "a80df50adef2537b9c2e47339b23f662"
#define SHIMWATCH_MESSAGE_ID_DISCONNECTED        "ef0887e1e47f5decbfe799b6c72157fa"
#define SHIMWATCH_MESSAGE_ID_CLEANED             "f0cc51a26bec58ac92efdec034e9da34"
#define SHIMWATCH_MESSAGE_ID_DELETE              "5850d8e939f652ce9ea1adf982389e6d"
#define SHIMWATCH_MESSAGE_ID_READOPT             "4b3be26717935857bf648c8c543183d7"
#define SHIMWATCH_MESSAGE_ID_UNRESPONSIVE        "a6eede1bde595a38a74f9d520bf19818"
#define SHIMWATCH_MESSAGE_ID_RESPONSIVE          "28b040f7ea92598d9acd04033a6befed"
#define SHIMWATCH_MESSAGE_ID_OOM                 "6c765673986d5bbbbe440ffe5fd9b37c"
#define SHIMWATCH_MESSAGE_ID_REAP                "92e407848b625a7b99582c6fc20a6094"
#define SHIMWATCH_MESSAGE_ID_CREATE_FAILED       "f5b452a6c98b584e97aefb66f8929b6b"
#define SHIMWATCH_MESSAGE_ID_ORPHAN              "2e172776897f5bf782be01f0eccaee17"
#define SHIMWATCH_MESSAGE_ID_AUTH                "68c385081309526ca4c19668dabd6fe0"
#define SHIMWATCH_MESSAGE_ID_RECORD              "9b448c7ce01057259e723e13223fbabb"
