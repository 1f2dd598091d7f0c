/* SPDX-License-Identifier: Apache-2.0
 *
 * The three lifecycle signals that go out exactly once per task (ShimDisconnected,
 * TaskExit, TaskDelete), and the one table that ties each to its D-Bus member, its flag
 * in a task record and its slot in the task's marks file (shimwatch-marks.h). Emitting,
 * writing and restoring records, and marking, all use this table and nothing else; it
 * knows no state machine (shimwatch-shim-state.h uses it, as the store does).
 */
#pragma once

#include <glib.h>

#include "shimwatch-wire.h"

G_BEGIN_DECLS

/* the lifecycle signals that go out exactly once per task, as bits */
typedef enum {
  SHIMWATCH_LIFECYCLE_SIGNAL_NONE              = 0,
  SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED = 1 << 0,
  SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT         = 1 << 1,
  SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE       = 1 << 2,
} ShimwatchLifecycleSignal;

/* how many: the slots of a task's marks file (shimwatch-marks.h), in the table's order */
#define SHIMWATCH_LIFECYCLE_N_SIGNALS 3

/* the {signal → record flag} table: the D-Bus member of a signal, and its flag in a record */
const char        *shimwatch_lifecycle_signal_member (ShimwatchLifecycleSignal  signal);
ShimwatchLifecycleSignal shimwatch_lifecycle_signal_from_member (const char     *member);
gboolean          *shimwatch_lifecycle_signal_record_flag (ShimwatchLifecycleSignal signal,
                                                           ShimwatchRecord         *record);
/* the signal's slot in a marks file (its place in the table), or G_MAXUINT; and back */
guint              shimwatch_lifecycle_signal_to_slot   (ShimwatchLifecycleSignal signal);
ShimwatchLifecycleSignal shimwatch_lifecycle_signal_from_slot (guint              slot);
/* a record whose pending signal did not go out: its flag, set ahead of time, is undone */
void               shimwatch_lifecycle_signal_undo_unsent (ShimwatchRecord         *record);

/* the signals whose flags @record has set, as bits; and the flags from bits */
guint              shimwatch_lifecycle_signals_from_record (const ShimwatchRecord   *record);
void               shimwatch_lifecycle_signals_to_record   (guint                    sent,
                                                            ShimwatchRecord         *record);

G_END_DECLS
