/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl: the client's own errors and the rule of a task's name
 */
#include "config.h"

#include <string.h>

#include "shimwatchctl-common.h"

GQuark
ctl_error_quark (void)
{
  return g_quark_from_static_string ("shimwatchctl-error-quark");
}

/* containerd's identifier rule: ^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$, at most 76 characters */
gboolean
ctl_valid_identifier (const char *name)
{
  gboolean after_separator = TRUE;
  size_t len = strlen (name);

  if (len == 0 || len > 76)
    return FALSE;
  for (const char *p = name; *p != '\0'; p++)
    {
      if (g_ascii_isalnum (*p))
        after_separator = FALSE;
      else if ((*p == '.' || *p == '_' || *p == '-') && !after_separator)
        after_separator = TRUE;
      else
        return FALSE;
    }
  return !after_separator;
}
