/* SPDX-License-Identifier: Apache-2.0
 *
 * The lifecycle signals' table (see shimwatch-lifecycle-signal.h)
 */
#include "config.h"

#include "shimwatch-lifecycle-signal.h"

/* the {signal → record flag} table: emitting, records and a restart use only this */
static const struct {
  ShimwatchLifecycleSignal signal;
  const char              *member;
  gsize                    flag_offset;   /* a gboolean in ShimwatchRecord */
} lifecycle_signals[] = {
  { SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED, "ShimDisconnected",
    G_STRUCT_OFFSET (ShimwatchRecord, disconnected) },
  { SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT, "TaskExit",
    G_STRUCT_OFFSET (ShimwatchRecord, exit_emitted) },
  { SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE, "TaskDelete",
    G_STRUCT_OFFSET (ShimwatchRecord, delete_emitted) },
};

G_STATIC_ASSERT (G_N_ELEMENTS (lifecycle_signals) == SHIMWATCH_LIFECYCLE_N_SIGNALS);

const char *
shimwatch_lifecycle_signal_member (ShimwatchLifecycleSignal signal)
{
  for (guint i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    if (lifecycle_signals[i].signal == signal)
      return lifecycle_signals[i].member;
  return NULL;
}

ShimwatchLifecycleSignal
shimwatch_lifecycle_signal_from_member (const char *member)
{
  for (guint i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    if (g_strcmp0 (lifecycle_signals[i].member, member) == 0)
      return lifecycle_signals[i].signal;
  return SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
}

guint
shimwatch_lifecycle_signal_to_slot (ShimwatchLifecycleSignal signal)
{
  for (guint i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    if (lifecycle_signals[i].signal == signal)
      return i;
  return G_MAXUINT;
}

ShimwatchLifecycleSignal
shimwatch_lifecycle_signal_from_slot (guint slot)
{
  return slot < G_N_ELEMENTS (lifecycle_signals) ? lifecycle_signals[slot].signal
                                                 : SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
}

gboolean *
shimwatch_lifecycle_signal_record_flag (ShimwatchLifecycleSignal  signal,
                                        ShimwatchRecord          *record)
{
  for (guint i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    if (lifecycle_signals[i].signal == signal)
      return G_STRUCT_MEMBER_P (record, lifecycle_signals[i].flag_offset);
  return NULL;
}

void
shimwatch_lifecycle_signal_undo_unsent (ShimwatchRecord *record)
{
  gboolean *flag;

  if (record->pending_signal == NULL || record->pending_sent)
    return;
  flag = shimwatch_lifecycle_signal_record_flag (
    shimwatch_lifecycle_signal_from_member (record->pending_signal), record);
  if (flag != NULL)
    *flag = FALSE;
}

guint
shimwatch_lifecycle_signals_from_record (const ShimwatchRecord *record)
{
  guint sent = 0;

  for (guint i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    if (G_STRUCT_MEMBER (gboolean, record, lifecycle_signals[i].flag_offset))
      sent |= lifecycle_signals[i].signal;
  return sent;
}

void
shimwatch_lifecycle_signals_to_record (guint            sent,
                                       ShimwatchRecord *record)
{
  for (guint i = 0; i < G_N_ELEMENTS (lifecycle_signals); i++)
    G_STRUCT_MEMBER (gboolean, record, lifecycle_signals[i].flag_offset) =
      (sent & lifecycle_signals[i].signal) != 0;
}
