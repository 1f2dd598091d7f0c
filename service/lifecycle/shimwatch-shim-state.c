/* SPDX-License-Identifier: Apache-2.0
 *
 * The lifecycle of a task as a state machine (see shimwatch-shim-state.h). Nothing here
 * knows D-Bus: ShimwatchShim feeds it inputs and publishes what it says.
 */
#include "config.h"

#include "shimwatch-shim-state.h"


static const char * const statuses[SHIMWATCH_SHIM_N_STATES] = {
  [SHIMWATCH_SHIM_STATE_CREATED] = "created",
  [SHIMWATCH_SHIM_STATE_RUNNING] = "running",
  [SHIMWATCH_SHIM_STATE_PAUSING] = "pausing",
  [SHIMWATCH_SHIM_STATE_PAUSED] = "paused",
  [SHIMWATCH_SHIM_STATE_STOPPED] = "stopped",
  [SHIMWATCH_SHIM_STATE_DELETED] = "stopped",
  [SHIMWATCH_SHIM_STATE_DISCONNECTED] = "disconnected",
  [SHIMWATCH_SHIM_STATE_CLEANING] = "cleaning",
  [SHIMWATCH_SHIM_STATE_TEARDOWN] = "stopped",
};

const char *
shimwatch_shim_state_to_status (ShimwatchShimState state)
{
  g_return_val_if_fail (state < SHIMWATCH_SHIM_N_STATES, "unknown");
  return statuses[state];
}

#define STATE_BIT(state) (1u << SHIMWATCH_SHIM_STATE_ ## state)

/* for each action, the states that allow it */
static const guint allowed_in[SHIMWATCH_SHIM_N_ACTIONS] = {
  [SHIMWATCH_SHIM_ACTION_START] = STATE_BIT (CREATED),
  [SHIMWATCH_SHIM_ACTION_KILL] = STATE_BIT (CREATED) | STATE_BIT (RUNNING) | STATE_BIT (PAUSED),
  [SHIMWATCH_SHIM_ACTION_STOP] = STATE_BIT (CREATED) | STATE_BIT (RUNNING),
  [SHIMWATCH_SHIM_ACTION_PAUSE] = STATE_BIT (RUNNING),
  [SHIMWATCH_SHIM_ACTION_RESUME] = STATE_BIT (PAUSED),
  [SHIMWATCH_SHIM_ACTION_DELETE] = ((1u << SHIMWATCH_SHIM_N_STATES) - 1) &
                                   ~(STATE_BIT (RUNNING) | STATE_BIT (PAUSED)),
  [SHIMWATCH_SHIM_ACTION_PROCESSES] = STATE_BIT (CREATED) | STATE_BIT (RUNNING) |
                                      STATE_BIT (PAUSED),
};

gboolean
shimwatch_shim_state_allows (ShimwatchShimState  state,
                             ShimwatchShimAction action)
{
  g_return_val_if_fail (state < SHIMWATCH_SHIM_N_STATES, FALSE);
  g_return_val_if_fail (action < SHIMWATCH_SHIM_N_ACTIONS, FALSE);
  return (allowed_in[action] & (1u << state)) != 0;
}

gboolean
shimwatch_shim_state_is_stopped (ShimwatchShimState state)
{
  return state == SHIMWATCH_SHIM_STATE_STOPPED || state == SHIMWATCH_SHIM_STATE_DELETED ||
         state == SHIMWATCH_SHIM_STATE_TEARDOWN;
}

const char *
shimwatch_shim_input_to_string (ShimwatchShimInput input)
{
  static const char * const names[] = {
    [SHIMWATCH_SHIM_INPUT_CREATED] = "created",
    [SHIMWATCH_SHIM_INPUT_STARTED] = "started",
    [SHIMWATCH_SHIM_INPUT_PAUSED] = "paused",
    [SHIMWATCH_SHIM_INPUT_RESUMED] = "resumed",
    [SHIMWATCH_SHIM_INPUT_EXITED] = "exited",
    [SHIMWATCH_SHIM_INPUT_DELETED] = "deleted",
    [SHIMWATCH_SHIM_INPUT_SHIM_GONE] = "shim-gone",
    [SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED] = "cleanup-started",
    [SHIMWATCH_SHIM_INPUT_ABANDONED] = "abandoned",
    [SHIMWATCH_SHIM_INPUT_FINISHED] = "finished",
    [SHIMWATCH_SHIM_INPUT_RUNTIME_CREATED] = "runtime-created",
    [SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING] = "runtime-running",
    [SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSING] = "runtime-pausing",
    [SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED] = "runtime-paused",
    [SHIMWATCH_SHIM_INPUT_ATTACHED] = "attached",
    [SHIMWATCH_SHIM_INPUT_CONNECTION_LOST] = "connection-lost",
    [SHIMWATCH_SHIM_INPUT_DETACHED] = "detached",
  };

  return input < G_N_ELEMENTS (names) && names[input] != NULL ? names[input] : "unknown";
}

void
shimwatch_shim_machine_init (ShimwatchShimMachine *machine)
{
  *machine = (ShimwatchShimMachine) { .state = SHIMWATCH_SHIM_STATE_CREATED };
}

static gboolean
is_live (ShimwatchShimState state)
{
  return state <= SHIMWATCH_SHIM_STATE_STOPPED;
}

gboolean
shimwatch_shim_machine_is_cleaning (const ShimwatchShimMachine *machine)
{
  return !machine->restored && (machine->state == SHIMWATCH_SHIM_STATE_DISCONNECTED ||
                                machine->state == SHIMWATCH_SHIM_STATE_CLEANING ||
                                machine->state == SHIMWATCH_SHIM_STATE_TEARDOWN);
}

gboolean
shimwatch_shim_machine_has_sent (const ShimwatchShimMachine *machine,
                                 ShimwatchLifecycleSignal    signal)
{
  return (machine->sent & signal) != 0;
}

/* the task is known to run or to have run, and this run has not started to clean it */
static gboolean
is_supervised (const ShimwatchShimMachine *machine)
{
  return is_live (machine->state) || machine->restored;
}

ShimwatchShimStep
shimwatch_shim_machine_step (ShimwatchShimMachine     *machine,
                             ShimwatchShimInput        input,
                             ShimwatchLifecycleSignal *emit)
{
  ShimwatchShimState to = machine->state;
  ShimwatchShimLink link = machine->link;
  ShimwatchLifecycleSignal due = SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
  gboolean exited = shimwatch_shim_machine_has_sent (machine, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT);

  if (emit != NULL)
    *emit = SHIMWATCH_LIFECYCLE_SIGNAL_NONE;

  switch (input)
    {
    case SHIMWATCH_SHIM_INPUT_CREATED:
      if (machine->state != SHIMWATCH_SHIM_STATE_CREATED &&
          machine->state != SHIMWATCH_SHIM_STATE_RUNNING)
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      break;

    case SHIMWATCH_SHIM_INPUT_STARTED:
    case SHIMWATCH_SHIM_INPUT_RESUMED:
    case SHIMWATCH_SHIM_INPUT_PAUSED:
      if (!is_supervised (machine))
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      /* an exited task does not run again; a late event changes nothing */
      if (exited)
        return SHIMWATCH_SHIM_STEP_IGNORED;
      to = input == SHIMWATCH_SHIM_INPUT_PAUSED ? SHIMWATCH_SHIM_STATE_PAUSED
                                                : SHIMWATCH_SHIM_STATE_RUNNING;
      break;

    case SHIMWATCH_SHIM_INPUT_RUNTIME_CREATED:
    case SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING:
    case SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSING:
    case SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED:
      if (!is_supervised (machine))
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      to = input == SHIMWATCH_SHIM_INPUT_RUNTIME_CREATED ? SHIMWATCH_SHIM_STATE_CREATED
         : input == SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING ? SHIMWATCH_SHIM_STATE_RUNNING
         : input == SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSING ? SHIMWATCH_SHIM_STATE_PAUSING
                                                         : SHIMWATCH_SHIM_STATE_PAUSED;
      break;

    case SHIMWATCH_SHIM_INPUT_EXITED:
      /* always legal: the exit of a task being cleaned up is reported too, once */
      if (is_supervised (machine))
        to = SHIMWATCH_SHIM_STATE_STOPPED;
      if (!exited)
        due = SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT;
      break;

    case SHIMWATCH_SHIM_INPUT_DELETED:
      if (!is_supervised (machine))
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      to = SHIMWATCH_SHIM_STATE_DELETED;
      break;

    case SHIMWATCH_SHIM_INPUT_SHIM_GONE:
      if (machine->state == SHIMWATCH_SHIM_STATE_DELETED)
        to = SHIMWATCH_SHIM_STATE_TEARDOWN;   /* the end of a normal Delete: no crash */
      else if (is_supervised (machine))
        {
          to = SHIMWATCH_SHIM_STATE_DISCONNECTED;
          if (!shimwatch_shim_machine_has_sent (machine,
                                                SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED))
            due = SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED;
        }
      else
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      break;

    case SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED:
      if (machine->restored || machine->state != SHIMWATCH_SHIM_STATE_DISCONNECTED)
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      to = SHIMWATCH_SHIM_STATE_CLEANING;
      break;

    case SHIMWATCH_SHIM_INPUT_ABANDONED:
      to = SHIMWATCH_SHIM_STATE_TEARDOWN;
      break;

    case SHIMWATCH_SHIM_INPUT_FINISHED:
      if (machine->restored || (machine->state != SHIMWATCH_SHIM_STATE_CLEANING &&
                                machine->state != SHIMWATCH_SHIM_STATE_TEARDOWN))
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      if (!shimwatch_shim_machine_has_sent (machine, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE))
        due = SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE;
      break;

    case SHIMWATCH_SHIM_INPUT_ATTACHED:
      if (machine->link != SHIMWATCH_SHIM_LINK_NONE && machine->link != SHIMWATCH_SHIM_LINK_LOADING)
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      link = SHIMWATCH_SHIM_LINK_CONNECTED;
      break;

    case SHIMWATCH_SHIM_INPUT_CONNECTION_LOST:
      if (machine->link == SHIMWATCH_SHIM_LINK_DETACHED)
        return SHIMWATCH_SHIM_STEP_ILLEGAL;
      link = SHIMWATCH_SHIM_LINK_GONE;
      break;

    case SHIMWATCH_SHIM_INPUT_DETACHED:
      link = SHIMWATCH_SHIM_LINK_DETACHED;
      break;

    default:
      g_return_val_if_reached (SHIMWATCH_SHIM_STEP_ILLEGAL);
    }

  /* the link's inputs leave the task's state alone */
  if (input == SHIMWATCH_SHIM_INPUT_ATTACHED || input == SHIMWATCH_SHIM_INPUT_CONNECTION_LOST ||
      input == SHIMWATCH_SHIM_INPUT_DETACHED)
    {
      if (link == machine->link)
        return SHIMWATCH_SHIM_STEP_IGNORED;
      machine->link = link;
      return SHIMWATCH_SHIM_STEP_CHANGED;
    }
  if (to == machine->state && due == SHIMWATCH_LIFECYCLE_SIGNAL_NONE &&
      (!machine->restored || input == SHIMWATCH_SHIM_INPUT_CREATED))
    return SHIMWATCH_SHIM_STEP_IGNORED;
  /* a recorded cleanup state ends with the first input of this run that moves on */
  if (input != SHIMWATCH_SHIM_INPUT_CREATED)
    machine->restored = FALSE;
  machine->state = to;
  machine->sent |= due;
  if (emit != NULL)
    *emit = due;
  return SHIMWATCH_SHIM_STEP_CHANGED;
}

static ShimwatchShimState
state_from_status (const char *status)
{
  for (guint i = 0; i < G_N_ELEMENTS (statuses); i++)
    if (i != SHIMWATCH_SHIM_STATE_DELETED && i != SHIMWATCH_SHIM_STATE_TEARDOWN &&
        g_strcmp0 (statuses[i], status) == 0)
      return (ShimwatchShimState) i;
  return SHIMWATCH_SHIM_STATE_CREATED;     /* "" (0.1.0) or a status of the runtime */
}

void
shimwatch_shim_machine_restore (ShimwatchShimMachine  *machine,
                                const ShimwatchRecord *record)
{
  shimwatch_shim_machine_init (machine);
  machine->link = SHIMWATCH_SHIM_LINK_LOADING;
  machine->state = record->deleted ? SHIMWATCH_SHIM_STATE_DELETED
                                   : state_from_status (record->status);
  machine->restored = machine->state == SHIMWATCH_SHIM_STATE_DISCONNECTED ||
                      machine->state == SHIMWATCH_SHIM_STATE_CLEANING;
  machine->sent = shimwatch_lifecycle_signals_from_record (record);
}

void
shimwatch_shim_machine_fill_record (const ShimwatchShimMachine *machine,
                                    ShimwatchRecord            *record)
{
  record->status = (char *) shimwatch_shim_state_to_status (machine->state);
  record->deleted = machine->state == SHIMWATCH_SHIM_STATE_DELETED ||
                    machine->state == SHIMWATCH_SHIM_STATE_TEARDOWN;
  shimwatch_lifecycle_signals_to_record (machine->sent, record);
  record->exit_known = (machine->sent & SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) != 0;
}
