/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchAuthority: decides whether a D-Bus caller may perform a privileged action,
 * asynchronously, so the main loop keeps serving other callers meanwhile. Every decision
 * is logged with the caller's bus name and uid.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef enum {
  SHIMWATCH_AUTHORITY_CHECK_FLAGS_NONE              = 0,
  SHIMWATCH_AUTHORITY_CHECK_FLAGS_ALLOW_INTERACTION = 1 << 0,
} ShimwatchAuthorityCheckFlags;

#define SHIMWATCH_TYPE_AUTHORITY (shimwatch_authority_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchAuthority, shimwatch_authority, SHIMWATCH, AUTHORITY, GObject)

/* use_polkit FALSE (development on a session bus): only root and the service's own
 * user are allowed */
ShimwatchAuthority *shimwatch_authority_new          (GDBusConnection              *connection,
                                                      gboolean                      use_polkit);
/* details: polkit details rules can match (namespace, id), may be NULL */
void                shimwatch_authority_check_async  (ShimwatchAuthority           *self,
                                                      GDBusMethodInvocation        *invocation,
                                                      const char                   *action_id,
                                                      const char                   *namespace_,
                                                      const char                   *id,
                                                      GAsyncReadyCallback           callback,
                                                      gpointer                      user_data);
gboolean            shimwatch_authority_check_finish (ShimwatchAuthority           *self,
                                                      GAsyncResult                 *result,
                                                      GError                      **error);

/* polkit's answer to a D-Bus error (pure; unit-tested for every combination) */
gboolean            shimwatch_authority_result_to_error (gboolean                   authorized,
                                                         gboolean                   is_challenge,
                                                         gboolean                   dismissed,
                                                         gboolean                   interactive,
                                                         const char                *action_id,
                                                         GError                   **error);

G_END_DECLS
