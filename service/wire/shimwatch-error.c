/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include "shimwatch-error.h"
#include "shimwatch-ttrpc.h"
#include "shimwatch-wire.h"

#define ERROR_PREFIX "org.shimwatch.Shimwatch1.Error."

static const GDBusErrorEntry shimwatch_error_entries[] = {
  { SHIMWATCH_ERROR_FAILED, ERROR_PREFIX "Failed" },
  { SHIMWATCH_ERROR_INVALID_ARGUMENT, ERROR_PREFIX "InvalidArgument" },
  { SHIMWATCH_ERROR_NOT_FOUND, ERROR_PREFIX "NotFound" },
  { SHIMWATCH_ERROR_ALREADY_EXISTS, ERROR_PREFIX "AlreadyExists" },
  { SHIMWATCH_ERROR_BAD_STATE, ERROR_PREFIX "BadState" },
  { SHIMWATCH_ERROR_NOT_AUTHORIZED, ERROR_PREFIX "NotAuthorized" },
  { SHIMWATCH_ERROR_NOT_AUTHORIZED_CAN_OBTAIN, ERROR_PREFIX "NotAuthorizedCanObtain" },
  { SHIMWATCH_ERROR_SHIM_FAILED, ERROR_PREFIX "ShimFailed" },
  { SHIMWATCH_ERROR_BUSY, ERROR_PREFIX "Busy" },
  { SHIMWATCH_ERROR_NOT_SUPPORTED, ERROR_PREFIX "NotSupported" },
};
G_STATIC_ASSERT (G_N_ELEMENTS (shimwatch_error_entries) == SHIMWATCH_N_ERRORS);

GQuark
shimwatch_error_quark (void)
{
  static gsize quark = 0;

  g_dbus_error_register_error_domain ("shimwatch-error-quark", &quark,
                                      shimwatch_error_entries,
                                      G_N_ELEMENTS (shimwatch_error_entries));
  return (GQuark) quark;
}

GError *
shimwatch_error_convert (const GError *error)
{
  ShimwatchError code = SHIMWATCH_ERROR_FAILED;

  g_return_val_if_fail (error != NULL, NULL);

  if (error->domain == SHIMWATCH_ERROR)
    return g_error_copy (error);
  if (error->domain == SHIMWATCH_WIRE_ERROR && error->code == SHIMWATCH_WIRE_ERROR_INVALID)
    code = SHIMWATCH_ERROR_INVALID_ARGUMENT;
  else if (error->domain == SHIMWATCH_WIRE_ERROR || error->domain == SHIMWATCH_TTRPC_ERROR)
    code = SHIMWATCH_ERROR_SHIM_FAILED;
  else if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND))
    code = SHIMWATCH_ERROR_NOT_FOUND;
  else if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_EXISTS))
    code = SHIMWATCH_ERROR_ALREADY_EXISTS;
  return g_error_new_literal (SHIMWATCH_ERROR, code, error->message);
}

gboolean
shimwatch_error_check_option_type (const char          *key,
                                   GVariant            *value,
                                   const GVariantType  *expected,
                                   GError             **error)
{
  if (g_variant_is_of_type (value, expected))
    return TRUE;
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
               "option \"%s\" must be of type %.*s, not %s", key,
               (int) g_variant_type_get_string_length (expected),
               g_variant_type_peek_string (expected), g_variant_get_type_string (value));
  return FALSE;
}

gboolean
shimwatch_error_check_task_name (const char  *namespace_,
                                 const char  *id,
                                 GError     **error)
{
  g_autoptr(GError) local_error = NULL;

  if (!shimwatch_identifier_validate ("namespace", namespace_, &local_error) ||
      !shimwatch_identifier_validate ("id", id, &local_error))
    {
      g_set_error_literal (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                           local_error->message);
      return FALSE;
    }
  return TRUE;
}
