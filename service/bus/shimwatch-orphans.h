/* SPDX-License-Identifier: Apache-2.0
 *
 * Orphans: state on disk that no supervised task owns (a task directory without a
 * record, a broken record's, one whose TaskDelete already went out, leftovers of a failed
 * cleanup), and what a task directory says, read without trusting it. The start-up's
 * load and Reap both clean an orphan through here, the way a dead shim's state is
 * cleaned, without its events.
 *
 * A plain struct of what that needs, filled once by the Manager; nothing in it is owned.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-cgroup.h"
#include "shimwatch-cgroup-claims.h"
#include "shimwatch-cleanup.h"

G_BEGIN_DECLS

typedef struct {
  const char * const    *runtime_path; /* where a shim binary we run may live */
  const char            *tasks_dir;    /* <tasks_dir>/<namespace>/<id> */
  const char            *runc_root;    /* runc's state: <runc_root>/<namespace>/<id> */
  ShimwatchCgroupHost   *cgroups;
  ShimwatchCgroupClaims *claims;       /* the cgroups of supervised tasks: never an orphan's */
  ShimwatchCleanup      *cleanup;
} ShimwatchOrphans;

/* a shim binary is run as root: only a containerd-shim-* from the runtime directories */
gboolean  shimwatch_orphans_trusted_shim_binary (const ShimwatchOrphans *self,
                                                 const char             *binary);
/* a small file in a task directory (the shim writes some), stripped; NULL if none */
char     *shimwatch_orphans_read_task_file      (const char             *task_dir,
                                                 const char             *name);
/* clean what is left of namespace_/id, with shimwatch_cleanup_run_async(): callback gets
 * the cleanup's result. FALSE, and callback is not called, if nothing is left. */
gboolean  shimwatch_orphans_start_cleanup       (const ShimwatchOrphans *self,
                                                 const char             *namespace_,
                                                 const char             *id,
                                                 guint                   timeout_ms,
                                                 GAsyncReadyCallback     callback,
                                                 gpointer                user_data);

G_END_DECLS
