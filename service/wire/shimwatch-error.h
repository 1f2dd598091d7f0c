/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchError: the one error domain at the D-Bus boundary. Each code is registered
 * with its org.shimwatch.Shimwatch1.Error.* name (docs/dbus-api.xml).
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef enum {
  SHIMWATCH_ERROR_FAILED,
  SHIMWATCH_ERROR_INVALID_ARGUMENT,
  SHIMWATCH_ERROR_NOT_FOUND,
  SHIMWATCH_ERROR_ALREADY_EXISTS,
  SHIMWATCH_ERROR_BAD_STATE,
  SHIMWATCH_ERROR_NOT_AUTHORIZED,
  SHIMWATCH_ERROR_NOT_AUTHORIZED_CAN_OBTAIN,
  SHIMWATCH_ERROR_SHIM_FAILED,
  SHIMWATCH_ERROR_BUSY,                 /* API 1.1: a limit was hit; try again later */
  SHIMWATCH_ERROR_NOT_SUPPORTED,        /* API 1.1: the runtime or the task's owner cannot */
} ShimwatchError;
#define SHIMWATCH_N_ERRORS (SHIMWATCH_ERROR_NOT_SUPPORTED + 1)

#define SHIMWATCH_ERROR (shimwatch_error_quark ())
GQuark shimwatch_error_quark (void);

/* Any error to a ShimwatchError, keeping the message: wire and ttrpc errors become
 * InvalidArgument or ShimFailed, everything unknown Failed. */
GError *shimwatch_error_convert (const GError *error);

/* An a{sv} option of a D-Bus call: FALSE and InvalidArgument ("option "KEY" must be of
 * type T, not U") unless value is of type expected. */
gboolean shimwatch_error_check_option_type (const char          *key,
                                            GVariant            *value,
                                            const GVariantType  *expected,
                                            GError             **error);

/* A task's namespace and id as a D-Bus caller gave them: FALSE and InvalidArgument (the
 * identifier rule's words) unless both are valid. */
gboolean shimwatch_error_check_task_name   (const char          *namespace_,
                                            const char          *id,
                                            GError             **error);

G_END_DECLS
