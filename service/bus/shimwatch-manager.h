/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchManager: org.shimwatch.Shimwatch1.Manager on /org/shimwatch/Shimwatch1, the
 * ObjectManager for one ShimwatchShim per supervised task, and the owner of what they
 * share: the launcher, the events socket, the cleanup worker and the authority.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-authority.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-config.h"
#include "shimwatch-dbus-generated.h"
#include "shimwatch-health-scheduler.h"
#include "shimwatch-history.h"
#include "shimwatch-launcher.h"
#include "shimwatch-signal-ledger.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_MANAGER (shimwatch_manager_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchManager, shimwatch_manager, SHIMWATCH, MANAGER,
                      ShimwatchDbusManagerSkeleton)

ShimwatchManager   *shimwatch_manager_new                 (const ShimwatchConfig  *config,
                                                           GError                **error);
/* use_polkit: ask polkit (system bus); otherwise only root and our own user may change
 * anything (development on a session bus) */
gboolean            shimwatch_manager_export              (ShimwatchManager       *self,
                                                           GDBusConnection        *connection,
                                                           gboolean                use_polkit,
                                                           GError                **error);
/* before the bus name is taken: read the tasks an earlier run recorded and export their
 * objects, as the records describe them (no shim is contacted) */
void                shimwatch_manager_load                (ShimwatchManager       *self);
/* once the name is owned: reach the loaded tasks' shims, all at once (live ones taken
 * over again, dead ones cleaned with their events), and clean task directories no
 * record explains */
void                shimwatch_manager_reach_shims         (ShimwatchManager       *self);
/* stop supervising without touching any shim: they outlive the service */
void                shimwatch_manager_shutdown            (ShimwatchManager       *self);
guint               shimwatch_manager_get_n_cleanups      (ShimwatchManager       *self);
/* every task record asked for is written and synced, every signal's mark settled */
gboolean            shimwatch_manager_records_settled     (ShimwatchManager       *self);
/* the history's queued events and the counters are on disk when this returns */
void                shimwatch_manager_sync_history        (ShimwatchManager       *self);

const ShimwatchConfig *shimwatch_manager_get_config       (ShimwatchManager       *self);

G_END_DECLS
