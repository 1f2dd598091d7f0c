/* SPDX-License-Identifier: Apache-2.0
 *
 * What every part of shimwatchctl shares and that needs none of them: the service's
 * names on the bus, the exit codes, the client's own errors and containerd's rule for
 * a namespace or an id.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define CTL_BUS_NAME       "org.shimwatch.Shimwatch1"
#define CTL_MANAGER_PATH   "/org/shimwatch/Shimwatch1"
#define CTL_MANAGER_IFACE  CTL_BUS_NAME ".Manager"
#define CTL_SHIM_IFACE     CTL_BUS_NAME ".Shim"
#define CTL_ERROR_PREFIX   CTL_BUS_NAME ".Error."
#define CTL_DEFAULT_NAMESPACE "default"

/* exit codes, as documented in shimwatchctl(1) */
typedef enum {
  CTL_EXIT_OK             = 0,
  CTL_EXIT_FAILURE        = 1,
  CTL_EXIT_USAGE          = 2,
  CTL_EXIT_NOT_FOUND      = 3,
  CTL_EXIT_NOT_AUTHORIZED = 4,
} CtlExit;

/* errors the client itself diagnoses */
#define CTL_ERROR (ctl_error_quark ())
typedef enum {
  CTL_ERROR_NO_AGENT,        /* NotAuthorized only because nobody could be asked */
} CtlError;
GQuark   ctl_error_quark      (void);

/* containerd's identifier rule, for a namespace or an id */
gboolean ctl_valid_identifier (const char *name);

G_END_DECLS
