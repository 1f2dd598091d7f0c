/* SPDX-License-Identifier: Apache-2.0
 *
 * Which task holds which cgroup. A cgroup holds one task: a new task's cgroup may be
 * neither one a task already has, nor inside one, nor around one. Each answer costs the
 * depth of the path, not the number of tasks: CreateTask asks once per task, and with
 * 1,000 tasks supervised a scan of every claim made each create slower than the last.
 *
 * "Inside" and "around" are meant as shimwatch_cgroup_paths_overlap() means them: b is
 * inside a when b starts with a followed by '/', and everything that starts with '/' is
 * inside "/". Owners are strings ("namespace/id"); the index keeps copies.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _ShimwatchCgroupClaims ShimwatchCgroupClaims;

ShimwatchCgroupClaims *shimwatch_cgroup_claims_new     (void);
void                   shimwatch_cgroup_claims_free    (ShimwatchCgroupClaims *claims);

/* path is held by owner from now on (an earlier owner of the same path is replaced) */
void                   shimwatch_cgroup_claims_set     (ShimwatchCgroupClaims *claims,
                                                        const char            *path,
                                                        const char            *owner);
/* path is free again, if owner holds it (someone else's claim stays) */
void                   shimwatch_cgroup_claims_release (ShimwatchCgroupClaims *claims,
                                                        const char            *path,
                                                        const char            *owner);
/* the owner of path, of a claim inside it or of one around it; NULL if none */
const char            *shimwatch_cgroup_claims_overlap (ShimwatchCgroupClaims *claims,
                                                        const char            *path);
guint                  shimwatch_cgroup_claims_size    (ShimwatchCgroupClaims *claims);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCgroupClaims, shimwatch_cgroup_claims_free)

G_END_DECLS
