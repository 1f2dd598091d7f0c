/* SPDX-License-Identifier: Apache-2.0
 *
 * The lifecycle of a task, in one place and without D-Bus: one state, one transition
 * function, and one table of the lifecycle signals that must go out exactly once.
 *
 *   CREATED ──STARTED──▶ RUNNING ◀──RESUMED── PAUSED/PAUSING
 *      │                    │  ──PAUSED──▶
 *      └────────EXITED──────┴──────────────▶ STOPPED        (TaskExit, once)
 *   any live state ──DELETED──▶ DELETED ──SHIM_GONE──▶ TEARDOWN ──FINISHED──▶ (TaskDelete, once)
 *   any live state ──SHIM_GONE──▶ DISCONNECTED ──CLEANUP_STARTED──▶ CLEANING
 *        (ShimDisconnected, once)                     ──FINISHED──▶ (TaskDelete, once)
 *   any state ──ABANDONED──▶ TEARDOWN                 (a failed CreateTask: no signals)
 *
 * "Live" is CREATED, RUNNING, PAUSING, PAUSED, STOPPED: the shim is there. A signal's
 * flag is set by the step that returns the signal, before it is emitted: the signal's
 * mark, written ahead of the emission into the slot the table gives it, carries it as
 * pending (see shimwatch-marks.h), and a restart that finds it not sent leaves the flag
 * unset, with the same table.
 *
 * Beside the task's state, the machine knows the link to the shim:
 *   NONE ──ATTACHED──▶ CONNECTED ──CONNECTION_LOST──▶ GONE
 *   LOADING (from a record) ──ATTACHED──▶ CONNECTED;  LOADING ──CONNECTION_LOST──▶ GONE
 *   any ──DETACHED──▶ DETACHED (the service stops: nothing more happens)
 */
#pragma once

#include <glib.h>

#include "shimwatch-lifecycle-signal.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

typedef enum {
  SHIMWATCH_SHIM_STATE_CREATED,
  SHIMWATCH_SHIM_STATE_RUNNING,
  SHIMWATCH_SHIM_STATE_PAUSING,
  SHIMWATCH_SHIM_STATE_PAUSED,
  SHIMWATCH_SHIM_STATE_STOPPED,
  SHIMWATCH_SHIM_STATE_DELETED,       /* a normal Delete completed: the shim shuts down */
  SHIMWATCH_SHIM_STATE_DISCONNECTED,  /* the shim is gone: ShimDisconnected */
  SHIMWATCH_SHIM_STATE_CLEANING,      /* the dead-shim cleanup runs */
  SHIMWATCH_SHIM_STATE_TEARDOWN,      /* files and cgroup go, no crash signals */
  SHIMWATCH_SHIM_N_STATES
} ShimwatchShimState;

typedef enum {
  SHIMWATCH_SHIM_LINK_NONE,       /* built; its shim not attached yet (CreateTask) */
  SHIMWATCH_SHIM_LINK_LOADING,    /* from a record; its shim not reached yet */
  SHIMWATCH_SHIM_LINK_CONNECTED,  /* the shim's connection is up */
  SHIMWATCH_SHIM_LINK_GONE,       /* the connection ended, or the shim was found dead */
  SHIMWATCH_SHIM_LINK_DETACHED,   /* the service stops supervising: nothing more happens */
} ShimwatchShimLink;


typedef enum {
  SHIMWATCH_SHIM_INPUT_CREATED,          /* the shim's Create answered */
  SHIMWATCH_SHIM_INPUT_STARTED,          /* Start answered, or the shim's TaskStart */
  SHIMWATCH_SHIM_INPUT_PAUSED,           /* Pause answered, or the shim's TaskPaused */
  SHIMWATCH_SHIM_INPUT_RESUMED,          /* Resume answered, or the shim's TaskResumed */
  SHIMWATCH_SHIM_INPUT_EXITED,           /* the task's exit is known (TaskExit) */
  SHIMWATCH_SHIM_INPUT_DELETED,          /* a normal Delete completed */
  SHIMWATCH_SHIM_INPUT_SHIM_GONE,        /* the connection ended (ShimDisconnected) */
  SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED,  /* after ShimDisconnected: the cleanup runs */
  SHIMWATCH_SHIM_INPUT_ABANDONED,        /* a failed CreateTask is undone */
  SHIMWATCH_SHIM_INPUT_FINISHED,         /* the cleanup ended (TaskDelete) */
  /* after a restart, the shim's State answered: @status is the runtime's */
  SHIMWATCH_SHIM_INPUT_RUNTIME_CREATED,
  SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING,
  SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSING,
  SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED,
  /* the link to the shim */
  SHIMWATCH_SHIM_INPUT_ATTACHED,         /* its connection is watched from now on */
  SHIMWATCH_SHIM_INPUT_CONNECTION_LOST,  /* it ended (or a loaded shim was found dead) */
  SHIMWATCH_SHIM_INPUT_DETACHED,         /* the service stops, leaving the shim running */
} ShimwatchShimInput;

typedef struct {
  ShimwatchShimState state;
  ShimwatchShimLink  link;
  guint              sent;      /* ShimwatchLifecycleSignal: went out (or is marked to) */
  /* loaded from a record: a recorded DISCONNECTED or CLEANING is not this run's cleanup,
   * which still has to start */
  gboolean           restored;
} ShimwatchShimMachine;

typedef enum {
  SHIMWATCH_SHIM_STEP_ILLEGAL,   /* not possible in this state: nothing changed */
  SHIMWATCH_SHIM_STEP_IGNORED,   /* legal, but changes nothing (e.g. TaskExit twice) */
  SHIMWATCH_SHIM_STEP_CHANGED,   /* the state changed, or a signal is due */
} ShimwatchShimStep;

void               shimwatch_shim_machine_init     (ShimwatchShimMachine       *machine);
/* the one transition function: the only writer of the state and of the signal flags.
 * @emit (optional): the signal that must go out now, its flag already set, or NONE */
ShimwatchShimStep  shimwatch_shim_machine_step     (ShimwatchShimMachine       *machine,
                                                    ShimwatchShimInput          input,
                                                    ShimwatchLifecycleSignal   *emit);
/* from a record (its pending signal's flag already undone when it was not sent) */
void               shimwatch_shim_machine_restore  (ShimwatchShimMachine       *machine,
                                                    const ShimwatchRecord      *record);
/* the record's status and signal flags from the machine */
void               shimwatch_shim_machine_fill_record (const ShimwatchShimMachine *machine,
                                                       ShimwatchRecord            *record);

gboolean           shimwatch_shim_machine_has_sent (const ShimwatchShimMachine *machine,
                                                    ShimwatchLifecycleSignal    signal);
/* the shim is gone or going: this run's cleanup (or teardown) has started */
gboolean           shimwatch_shim_machine_is_cleaning (const ShimwatchShimMachine *machine);
/* what a caller asks of a task on the bus, as far as the task's state decides it (the
 * link to the shim is checked apart) */
typedef enum {
  SHIMWATCH_SHIM_ACTION_START,       /* Start: a created task */
  SHIMWATCH_SHIM_ACTION_KILL,        /* Kill: a task with a process (created, running, paused) */
  SHIMWATCH_SHIM_ACTION_STOP,        /* Stop: created or running (a paused one is resumed first) */
  SHIMWATCH_SHIM_ACTION_PAUSE,       /* Pause: a running task */
  SHIMWATCH_SHIM_ACTION_RESUME,      /* Resume: a paused task */
  SHIMWATCH_SHIM_ACTION_DELETE,      /* Delete: any task but a running or paused one */
  SHIMWATCH_SHIM_ACTION_PROCESSES,   /* GetStats, ListPids: created, running or paused */
  SHIMWATCH_SHIM_N_ACTIONS
} ShimwatchShimAction;

/* whether a task in @state may be asked @action: the one answer the method guards ask
 * for, instead of reading the Status string */
gboolean           shimwatch_shim_state_allows     (ShimwatchShimState          state,
                                                    ShimwatchShimAction         action);
/* the task has ended, whether deleted or not (Status "stopped") */
gboolean           shimwatch_shim_state_is_stopped (ShimwatchShimState          state);
/* the Status property of a state */
const char        *shimwatch_shim_state_to_status  (ShimwatchShimState          state);
const char        *shimwatch_shim_input_to_string  (ShimwatchShimInput          input);

G_END_DECLS
