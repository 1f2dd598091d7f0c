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

ShimwatchAuthority *shimwatch_authority_new          (GDBusConnection              *connection);
void                shimwatch_authority_check_async  (ShimwatchAuthority           *self,
                                                      GDBusMethodInvocation        *invocation,
                                                      const char                   *action_id,
                                                      GAsyncReadyCallback           callback,
                                                      gpointer                      user_data);
gboolean            shimwatch_authority_check_finish (ShimwatchAuthority           *self,
                                                      GAsyncResult                 *result,
                                                      GError                      **error);

G_END_DECLS
