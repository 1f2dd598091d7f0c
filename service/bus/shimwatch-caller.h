/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchCaller: what a D-Bus caller could do to a file themselves. org.shimwatch.manage
 * makes the service act as root on the caller's behalf; it acts only on files the caller
 * could use without it. The owner, group and other mode bits are matched against the
 * caller's uid and groups (those of its process when the bus tells them, else those of
 * its user); ACLs and capabilities are not
 * consulted, so access granted only through them is refused. uid 0 may do anything.
 */
#pragma once

#include <glib.h>
#include <sys/stat.h>

G_BEGIN_DECLS

typedef struct _ShimwatchCaller ShimwatchCaller;

/* @gids: the caller's groups as the bus saw them (GetConnectionCredentials'
 * UnixGroupIDs), or NULL to take its user's groups from getgrouplist() */
ShimwatchCaller *shimwatch_caller_new  (guint32                 uid,
                                        GArray                 *gids);
void             shimwatch_caller_free (ShimwatchCaller        *caller);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCaller, shimwatch_caller_free)

guint32          shimwatch_caller_get_uid (const ShimwatchCaller *caller);
/* @want: R_OK, W_OK, X_OK or'ed, checked against @st's owner, group and mode */
gboolean         shimwatch_caller_may     (const ShimwatchCaller *caller,
                                           const struct stat     *st,
                                           int                    want);
/* the caller can search every directory above @path (its first missing one ends the walk
 * with FALSE); the first one it cannot is returned in @blocked */
gboolean         shimwatch_caller_can_reach (const ShimwatchCaller  *caller,
                                             const char             *path,
                                             char                  **blocked);

G_END_DECLS
