/* SPDX-License-Identifier: Apache-2.0
 *
 * The task lifecycle as a state machine, without D-Bus: which inputs each state takes,
 * that every lifecycle signal is due exactly once, the {signal → record flag} table, and
 * a restart that undoes the flag of a signal that never went out.
 */
#include "config.h"

#include <glib/gstdio.h>

#include "shimwatch-records.h"
#include "shimwatch-shim-state.h"

#define ALL_SIGNALS (SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED | \
                     SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT | \
                     SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE)

static const ShimwatchShimInput all_inputs[] = {
  SHIMWATCH_SHIM_INPUT_CREATED, SHIMWATCH_SHIM_INPUT_STARTED, SHIMWATCH_SHIM_INPUT_PAUSED,
  SHIMWATCH_SHIM_INPUT_RESUMED, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_INPUT_DELETED,
  SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED,
  SHIMWATCH_SHIM_INPUT_ABANDONED, SHIMWATCH_SHIM_INPUT_FINISHED,
  SHIMWATCH_SHIM_INPUT_RUNTIME_CREATED, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING,
  SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSING, SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED,
  SHIMWATCH_SHIM_INPUT_ATTACHED, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST,
  SHIMWATCH_SHIM_INPUT_DETACHED,
};

/* one step that must be taken, with what it must give */
static void
assert_step (ShimwatchShimMachine     *machine,
             ShimwatchShimInput        input,
             ShimwatchShimStep         expected_step,
             ShimwatchShimState        expected_state,
             ShimwatchLifecycleSignal  expected_emit)
{
  ShimwatchLifecycleSignal emit = 0xff;
  ShimwatchShimStep step = shimwatch_shim_machine_step (machine, input, &emit);

  g_test_message ("%s → %s", shimwatch_shim_input_to_string (input),
                  shimwatch_shim_state_to_status (machine->state));
  g_assert_cmpint (step, ==, expected_step);
  g_assert_cmpint (machine->state, ==, expected_state);
  g_assert_cmpint (emit, ==, expected_emit);
}

static void
test_normal_delete (void)
{
  ShimwatchShimMachine m;

  shimwatch_shim_machine_init (&m);
  g_assert_cmpstr (shimwatch_shim_state_to_status (m.state), ==, "created");
  assert_step (&m, SHIMWATCH_SHIM_INPUT_CREATED, SHIMWATCH_SHIM_STEP_IGNORED,
               SHIMWATCH_SHIM_STATE_CREATED, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_STARTED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_RUNNING, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_PAUSED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_PAUSED, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_RESUMED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_RUNNING, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_STOPPED, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT);
  /* the shim's TaskExit and our own State answer: the second is not a second TaskExit */
  assert_step (&m, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_STEP_IGNORED,
               SHIMWATCH_SHIM_STATE_STOPPED, 0);
  /* a late TaskStart does not make an exited task run */
  assert_step (&m, SHIMWATCH_SHIM_INPUT_STARTED, SHIMWATCH_SHIM_STEP_IGNORED,
               SHIMWATCH_SHIM_STATE_STOPPED, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_DELETED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_DELETED, 0);
  g_assert_cmpstr (shimwatch_shim_state_to_status (m.state), ==, "stopped");
  g_assert_false (shimwatch_shim_machine_is_cleaning (&m));
  /* the shim shuts down after Delete: no crash, no ShimDisconnected */
  assert_step (&m, SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_TEARDOWN, 0);
  g_assert_true (shimwatch_shim_machine_is_cleaning (&m));
  assert_step (&m, SHIMWATCH_SHIM_INPUT_FINISHED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_TEARDOWN, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_FINISHED, SHIMWATCH_SHIM_STEP_IGNORED,
               SHIMWATCH_SHIM_STATE_TEARDOWN, 0);
  g_assert_cmpuint (m.sent, ==, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT |
                                SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE);
}

static void
test_dead_shim (void)
{
  ShimwatchShimMachine m;

  shimwatch_shim_machine_init (&m);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_STARTED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_RUNNING, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_DISCONNECTED, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED);
  g_assert_cmpstr (shimwatch_shim_state_to_status (m.state), ==, "disconnected");
  g_assert_true (shimwatch_shim_machine_is_cleaning (&m));
  /* a closed connection closes once; events of a dead shim change nothing */
  assert_step (&m, SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_STEP_ILLEGAL,
               SHIMWATCH_SHIM_STATE_DISCONNECTED, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_STARTED, SHIMWATCH_SHIM_STEP_ILLEGAL,
               SHIMWATCH_SHIM_STATE_DISCONNECTED, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_FINISHED, SHIMWATCH_SHIM_STEP_ILLEGAL,
               SHIMWATCH_SHIM_STATE_DISCONNECTED, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_CLEANING, 0);
  g_assert_cmpstr (shimwatch_shim_state_to_status (m.state), ==, "cleaning");
  assert_step (&m, SHIMWATCH_SHIM_INPUT_PAUSED, SHIMWATCH_SHIM_STEP_ILLEGAL,
               SHIMWATCH_SHIM_STATE_CLEANING, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_DELETED, SHIMWATCH_SHIM_STEP_ILLEGAL,
               SHIMWATCH_SHIM_STATE_CLEANING, 0);
  /* the cleanup killed the container: TaskExit, and Status stays "cleaning" */
  assert_step (&m, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_CLEANING, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_STEP_IGNORED,
               SHIMWATCH_SHIM_STATE_CLEANING, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_FINISHED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_CLEANING, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE);
  g_assert_cmpuint (m.sent, ==, ALL_SIGNALS);
}

/* inputs that make no sense in a state are refused and change nothing */
static void
test_illegal (void)
{
  static const struct {
    ShimwatchShimState state;
    ShimwatchShimInput input;
  } cases[] = {
    { SHIMWATCH_SHIM_STATE_RUNNING, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED },
    { SHIMWATCH_SHIM_STATE_RUNNING, SHIMWATCH_SHIM_INPUT_FINISHED },
    { SHIMWATCH_SHIM_STATE_STOPPED, SHIMWATCH_SHIM_INPUT_CREATED },
    { SHIMWATCH_SHIM_STATE_PAUSED, SHIMWATCH_SHIM_INPUT_CREATED },
    { SHIMWATCH_SHIM_STATE_DELETED, SHIMWATCH_SHIM_INPUT_STARTED },
    { SHIMWATCH_SHIM_STATE_DELETED, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING },
    { SHIMWATCH_SHIM_STATE_DELETED, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED },
    { SHIMWATCH_SHIM_STATE_DELETED, SHIMWATCH_SHIM_INPUT_FINISHED },
    { SHIMWATCH_SHIM_STATE_CLEANING, SHIMWATCH_SHIM_INPUT_SHIM_GONE },
    { SHIMWATCH_SHIM_STATE_CLEANING, SHIMWATCH_SHIM_INPUT_RESUMED },
    { SHIMWATCH_SHIM_STATE_CLEANING, SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED },
    { SHIMWATCH_SHIM_STATE_TEARDOWN, SHIMWATCH_SHIM_INPUT_SHIM_GONE },
    { SHIMWATCH_SHIM_STATE_TEARDOWN, SHIMWATCH_SHIM_INPUT_DELETED },
    { SHIMWATCH_SHIM_STATE_TEARDOWN, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      ShimwatchShimMachine m = { .state = cases[i].state,
                                 .sent = SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED };
      ShimwatchLifecycleSignal emit;

      g_test_message ("%s in %u", shimwatch_shim_input_to_string (cases[i].input),
                      cases[i].state);
      g_assert_cmpint (shimwatch_shim_machine_step (&m, cases[i].input, &emit), ==,
                       SHIMWATCH_SHIM_STEP_ILLEGAL);
      g_assert_cmpint (m.state, ==, cases[i].state);
      g_assert_cmpuint (m.sent, ==, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED);
      g_assert_cmpint (emit, ==, SHIMWATCH_LIFECYCLE_SIGNAL_NONE);
    }
}

/* from every state, through every sequence of three inputs: a signal is due at most once,
 * its flag is set when it is due, and an illegal or ignored step changes nothing */
static void
test_exactly_once_everywhere (void)
{
  gsize n = G_N_ELEMENTS (all_inputs);

  for (guint state = 0; state < SHIMWATCH_SHIM_N_STATES; state++)
    /* restored or not, and each link to the shim */
    for (guint start = 0; start < 2 * (SHIMWATCH_SHIM_LINK_DETACHED + 1); start++)
      for (gsize a = 0; a < n; a++)
        for (gsize b = 0; b < n; b++)
          for (gsize c = 0; c < n; c++)
            {
              ShimwatchShimMachine m = { .state = state, .restored = start % 2,
                                         .link = start / 2 };
              ShimwatchShimInput seq[] = { all_inputs[a], all_inputs[b], all_inputs[c] };
              guint emitted = 0;

              for (guint i = 0; i < G_N_ELEMENTS (seq); i++)
                {
                  ShimwatchShimMachine before = m;
                  ShimwatchLifecycleSignal emit;
                  ShimwatchShimStep step = shimwatch_shim_machine_step (&m, seq[i], &emit);

                  g_assert_nonnull (shimwatch_shim_state_to_status (m.state));
                  if (step != SHIMWATCH_SHIM_STEP_CHANGED)
                    {
                      g_assert_cmpint (emit, ==, SHIMWATCH_LIFECYCLE_SIGNAL_NONE);
                      g_assert_cmpmem (&before, sizeof before, &m, sizeof m);
                      continue;
                    }
                  /* the link and the task's state move separately */
                  if (seq[i] == SHIMWATCH_SHIM_INPUT_ATTACHED ||
                      seq[i] == SHIMWATCH_SHIM_INPUT_CONNECTION_LOST ||
                      seq[i] == SHIMWATCH_SHIM_INPUT_DETACHED)
                    {
                      g_assert_cmpint (m.state, ==, before.state);
                      g_assert_cmpuint (m.sent, ==, before.sent);
                    }
                  else
                    g_assert_cmpint (m.link, ==, before.link);
                  g_assert_cmpuint (emitted & emit, ==, 0);
                  g_assert_cmpuint (before.sent & emit, ==, 0);
                  g_assert_cmpuint (m.sent, ==, before.sent | emit);
                  emitted |= emit;
                }
            }
}

/* the link to the shim: attached once, lost once; a detached shim is left alone */
static void
test_link (void)
{
  ShimwatchShimMachine m;
  ShimwatchRecord record = { 0 };

  shimwatch_shim_machine_init (&m);
  g_assert_cmpint (m.link, ==, SHIMWATCH_SHIM_LINK_NONE);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_ATTACHED, NULL), ==,
                   SHIMWATCH_SHIM_STEP_CHANGED);
  g_assert_cmpint (m.link, ==, SHIMWATCH_SHIM_LINK_CONNECTED);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_ATTACHED, NULL), ==,
                   SHIMWATCH_SHIM_STEP_ILLEGAL);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST, NULL),
                   ==, SHIMWATCH_SHIM_STEP_CHANGED);
  g_assert_cmpint (m.link, ==, SHIMWATCH_SHIM_LINK_GONE);
  g_assert_cmpint (m.state, ==, SHIMWATCH_SHIM_STATE_CREATED);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST, NULL),
                   ==, SHIMWATCH_SHIM_STEP_IGNORED);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_ATTACHED, NULL), ==,
                   SHIMWATCH_SHIM_STEP_ILLEGAL);

  /* a loaded task waits for its shim, which is reached again or found dead */
  record.status = (char *) "running";
  shimwatch_shim_machine_restore (&m, &record);
  g_assert_cmpint (m.link, ==, SHIMWATCH_SHIM_LINK_LOADING);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_ATTACHED, NULL), ==,
                   SHIMWATCH_SHIM_STEP_CHANGED);
  g_assert_cmpint (m.link, ==, SHIMWATCH_SHIM_LINK_CONNECTED);
  g_assert_cmpint (m.state, ==, SHIMWATCH_SHIM_STATE_RUNNING);

  /* the service stops: what the shim does afterwards is not ours to see */
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_DETACHED, NULL), ==,
                   SHIMWATCH_SHIM_STEP_CHANGED);
  g_assert_cmpint (shimwatch_shim_machine_step (&m, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST, NULL),
                   ==, SHIMWATCH_SHIM_STEP_ILLEGAL);
  g_assert_cmpint (m.link, ==, SHIMWATCH_SHIM_LINK_DETACHED);
}

/* the table: each signal's D-Bus member and record flag, and nothing else */
static void
test_signal_table (void)
{
  static const struct {
    ShimwatchLifecycleSignal signal;
    const char *member;
    gsize offset;
  } expected[] = {
    { SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED, "ShimDisconnected",
      G_STRUCT_OFFSET (ShimwatchRecord, disconnected) },
    { SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT, "TaskExit",
      G_STRUCT_OFFSET (ShimwatchRecord, exit_emitted) },
    { SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE, "TaskDelete",
      G_STRUCT_OFFSET (ShimwatchRecord, delete_emitted) },
  };
  ShimwatchRecord record = { 0 };

  for (guint i = 0; i < G_N_ELEMENTS (expected); i++)
    {
      g_assert_cmpstr (shimwatch_lifecycle_signal_member (expected[i].signal), ==,
                       expected[i].member);
      g_assert_cmpint (shimwatch_lifecycle_signal_from_member (expected[i].member), ==,
                       expected[i].signal);
      g_assert_true (shimwatch_lifecycle_signal_record_flag (expected[i].signal, &record) ==
                     G_STRUCT_MEMBER_P (&record, expected[i].offset));
    }
  g_assert_null (shimwatch_lifecycle_signal_member (SHIMWATCH_LIFECYCLE_SIGNAL_NONE));
  g_assert_cmpint (shimwatch_lifecycle_signal_from_member ("TaskStart"), ==,
                   SHIMWATCH_LIFECYCLE_SIGNAL_NONE);
  g_assert_null (shimwatch_lifecycle_signal_record_flag (SHIMWATCH_LIFECYCLE_SIGNAL_NONE,
                                                         &record));
}

/* the record the machine writes is the one it is restored from */
static void
test_record_round_trip (void)
{
  for (guint state = 0; state < SHIMWATCH_SHIM_N_STATES; state++)
    for (guint sent = 0; sent <= ALL_SIGNALS; sent++)
      {
        ShimwatchShimMachine m = { .state = state, .sent = sent };
        ShimwatchShimMachine back;
        ShimwatchRecord record = { 0 };

        shimwatch_shim_machine_fill_record (&m, &record);
        g_assert_cmpstr (record.status, ==, shimwatch_shim_state_to_status (state));
        g_assert_cmpint (record.disconnected, ==,
                         (sent & SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED) != 0);
        g_assert_cmpint (record.exit_emitted, ==,
                         (sent & SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT) != 0);
        g_assert_cmpint (record.exit_known, ==, record.exit_emitted);
        g_assert_cmpint (record.delete_emitted, ==,
                         (sent & SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE) != 0);
        shimwatch_shim_machine_restore (&back, &record);
        g_assert_cmpuint (back.sent, ==, sent);
        /* a teardown is recorded as a completed Delete: it is finished after a restart */
        g_assert_cmpint (back.state, ==,
                         state == SHIMWATCH_SHIM_STATE_TEARDOWN ? SHIMWATCH_SHIM_STATE_DELETED
                                                                : state);
        g_assert_cmpint (back.restored, ==, state == SHIMWATCH_SHIM_STATE_DISCONNECTED ||
                                            state == SHIMWATCH_SHIM_STATE_CLEANING);
      }
}

/* a record from a service that died during its cleanup: this run's cleanup starts again,
 * and a ShimDisconnected that went out is not sent twice */
static void
test_restore_cleaning (void)
{
  ShimwatchRecord record = { 0 };
  ShimwatchShimMachine m;

  record.status = (char *) "cleaning";
  record.disconnected = TRUE;
  shimwatch_shim_machine_restore (&m, &record);
  g_assert_cmpint (m.state, ==, SHIMWATCH_SHIM_STATE_CLEANING);
  g_assert_false (shimwatch_shim_machine_is_cleaning (&m));
  assert_step (&m, SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_DISCONNECTED, 0);
  g_assert_true (shimwatch_shim_machine_is_cleaning (&m));
  assert_step (&m, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_CLEANING, 0);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_CLEANING, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT);

  /* ... and one whose shim turned out to be alive is supervised again */
  record.status = (char *) "disconnected";
  shimwatch_shim_machine_restore (&m, &record);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_RUNNING, 0);
  g_assert_false (m.restored);

  /* a completed Delete: the shim's end is a teardown, not a crash */
  record.status = (char *) "stopped";
  record.deleted = TRUE;
  record.disconnected = FALSE;
  shimwatch_shim_machine_restore (&m, &record);
  assert_step (&m, SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_STEP_CHANGED,
               SHIMWATCH_SHIM_STATE_TEARDOWN, 0);
}

static void
base_record (ShimwatchRecord *record)
{
  record->namespace_ = (char *) "ns";
  record->id = (char *) "t1";
  record->runtime = (char *) "io.containerd.runc.v2";
  record->shim_binary = (char *) "/usr/bin/containerd-shim-runc-v2";
  record->task_dir = (char *) "/run/shimwatch/tasks/ns/t1";
  record->address = (char *) "unix:///run/containerd/s/0";
}

/* Exactly once across a SIGKILL of the service: the machine marks a signal and its mark
 * is prepared pending; if the service dies before the signal goes out (no commit), the
 * restart leaves exactly that flag unset and the machine owes the signal again; once
 * committed, it stays sent. Through the real record and marks files. */
static void
test_restart_undoes_unsent (gconstpointer data)
{
  ShimwatchLifecycleSignal signal = GPOINTER_TO_UINT (data);
  g_autofree char *dir = g_dir_make_tmp ("shimwatch-state-XXXXXX", NULL);

  for (guint committed = 0; committed < 2; committed++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GPtrArray) records = NULL;
      ShimwatchShimMachine m = { .state = SHIMWATCH_SHIM_STATE_RUNNING };
      ShimwatchShimMachine restored;
      ShimwatchLifecycleSignal emit = SHIMWATCH_LIFECYCLE_SIGNAL_NONE;
      ShimwatchRecord record = { 0 };
      g_autofree char *marks_path = shimwatch_marks_path (dir, "ns", "t1");
      g_autoptr(ShimwatchMarksFile) marks = NULL;
      ShimwatchRecordCommit *commit;
      ShimwatchMark mark;
      ShimwatchShimInput path[] = {
        SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED,
        SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_INPUT_FINISHED,
      };
      guint before;

      /* the task's record, written while it ran; its marks file made with it */
      base_record (&record);
      shimwatch_shim_machine_fill_record (&m, &record);
      g_assert_true (shimwatch_records_write (dir, &record, &error));
      g_assert_no_error (error);
      marks = shimwatch_marks_file_open (marks_path, NULL, &error);
      g_assert_no_error (error);

      /* the dead-shim path up to the signal under test, the signals before it sent */
      for (guint i = 0; i < G_N_ELEMENTS (path) && emit != signal; i++)
        {
          shimwatch_shim_machine_step (&m, path[i], &emit);
          if (emit != SHIMWATCH_LIFECYCLE_SIGNAL_NONE && emit != signal)
            {
              shimwatch_shim_machine_fill_record (&m, &record);
              g_assert_true (shimwatch_mark_from_record (&mark, &record, SHIMWATCH_MARK_PENDING,
                                                         shimwatch_marks_file_next_seq (marks)));
              commit = shimwatch_records_prepare_mark (marks,
                                                       shimwatch_lifecycle_signal_to_slot (emit),
                                                       &mark, NULL);
              shimwatch_records_commit (commit);
              shimwatch_record_commit_free (commit);
            }
        }
      g_assert_cmpint (emit, ==, signal);
      before = m.sent & ~signal;

      base_record (&record);
      shimwatch_shim_machine_fill_record (&m, &record);
      /* the signal's mark, in the slot the table gives it; the record is not written */
      g_assert_true (shimwatch_mark_from_record (&mark, &record, SHIMWATCH_MARK_PENDING,
                                                 shimwatch_marks_file_next_seq (marks)));
      commit = shimwatch_records_prepare_mark (marks, shimwatch_lifecycle_signal_to_slot (signal),
                                               &mark, NULL);
      g_assert_nonnull (commit);
      if (committed)
        shimwatch_records_commit (commit);
      shimwatch_record_commit_free (commit);

      /* the restarted service */
      records = shimwatch_records_load (dir, NULL);
      g_assert_cmpuint (records->len, ==, 1);
      shimwatch_shim_machine_restore (&restored, g_ptr_array_index (records, 0));
      if (committed)
        g_assert_cmpuint (restored.sent, ==, m.sent);
      else
        g_assert_cmpuint (restored.sent, ==, before);
      /* the undone signal is owed again, once; a sent one is not sent twice */
      if (!committed && signal == SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED)
        assert_step (&restored, SHIMWATCH_SHIM_INPUT_SHIM_GONE, SHIMWATCH_SHIM_STEP_CHANGED,
                     SHIMWATCH_SHIM_STATE_DISCONNECTED, signal);
      else if (!committed && signal == SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT)
        {
          shimwatch_shim_machine_step (&restored, SHIMWATCH_SHIM_INPUT_SHIM_GONE, NULL);
          g_assert_cmpint (restored.state, ==, SHIMWATCH_SHIM_STATE_DISCONNECTED);
          assert_step (&restored, SHIMWATCH_SHIM_INPUT_EXITED, SHIMWATCH_SHIM_STEP_CHANGED,
                       SHIMWATCH_SHIM_STATE_DISCONNECTED, signal);
        }
      else if (committed)
        {
          ShimwatchLifecycleSignal again = SHIMWATCH_LIFECYCLE_SIGNAL_NONE;

          for (guint i = 0; i < G_N_ELEMENTS (path); i++)
            {
              shimwatch_shim_machine_step (&restored, path[i], &emit);
              again |= emit;
            }
          g_assert_cmpuint (again & signal, ==, 0);
        }
      g_assert_true (shimwatch_records_remove (dir, "ns", "t1", NULL));
    }
  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

/* What each method of a task may do in each state: the contract in the task's Status, as
 * docs/dbus-api.md states it (Start: created; Kill: created, running, paused; Stop:
 * created, running; Pause: running; Resume: paused; Delete: not running nor paused;
 * GetStats and ListPids: created, running, paused). The guards ask the machine, never
 * the string: a state whose Status is listed allows the action, and no other. */
static void
test_guards (void)
{
  static const struct {
    ShimwatchShimAction action;
    const char         *statuses[4];
    gboolean            all_but;
  } contract[] = {
    { SHIMWATCH_SHIM_ACTION_START, { "created" }, FALSE },
    { SHIMWATCH_SHIM_ACTION_KILL, { "created", "running", "paused" }, FALSE },
    { SHIMWATCH_SHIM_ACTION_STOP, { "created", "running" }, FALSE },
    { SHIMWATCH_SHIM_ACTION_PAUSE, { "running" }, FALSE },
    { SHIMWATCH_SHIM_ACTION_RESUME, { "paused" }, FALSE },
    { SHIMWATCH_SHIM_ACTION_DELETE, { "running", "paused" }, TRUE },
    { SHIMWATCH_SHIM_ACTION_PROCESSES, { "created", "running", "paused" }, FALSE },
  };

  G_STATIC_ASSERT (G_N_ELEMENTS (contract) == SHIMWATCH_SHIM_N_ACTIONS);
  for (guint a = 0; a < G_N_ELEMENTS (contract); a++)
    for (ShimwatchShimState state = 0; state < SHIMWATCH_SHIM_N_STATES; state++)
      {
        const char *status = shimwatch_shim_state_to_status (state);
        gboolean listed = g_strv_contains (contract[a].statuses, status);
        gboolean expected = listed != contract[a].all_but;

        if (shimwatch_shim_state_allows (state, contract[a].action) != expected)
          g_error ("action %d in state %s (%s): %s", contract[a].action,
                   shimwatch_shim_state_to_status (state), status,
                   expected ? "refused" : "allowed");
      }
  /* "pausing" is none of them: a task being paused is asked nothing until it is paused */
  for (ShimwatchShimAction action = 0; action < SHIMWATCH_SHIM_N_ACTIONS; action++)
    g_assert_cmpint (shimwatch_shim_state_allows (SHIMWATCH_SHIM_STATE_PAUSING, action), ==,
                     action == SHIMWATCH_SHIM_ACTION_DELETE);
  for (ShimwatchShimState state = 0; state < SHIMWATCH_SHIM_N_STATES; state++)
    g_assert_cmpint (shimwatch_shim_state_is_stopped (state), ==,
                     g_str_equal (shimwatch_shim_state_to_status (state), "stopped"));
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/shim-state/normal-delete", test_normal_delete);
  g_test_add_func ("/shim-state/dead-shim", test_dead_shim);
  g_test_add_func ("/shim-state/illegal", test_illegal);
  g_test_add_func ("/shim-state/exactly-once-everywhere", test_exactly_once_everywhere);
  g_test_add_func ("/shim-state/link", test_link);
  g_test_add_func ("/shim-state/signal-table", test_signal_table);
  g_test_add_func ("/shim-state/record-round-trip", test_record_round_trip);
  g_test_add_func ("/shim-state/restore-cleaning", test_restore_cleaning);
  g_test_add_func ("/shim-state/guards", test_guards);
  g_test_add_data_func ("/shim-state/restart-undoes-unsent/ShimDisconnected",
                        GUINT_TO_POINTER (SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED),
                        test_restart_undoes_unsent);
  g_test_add_data_func ("/shim-state/restart-undoes-unsent/TaskExit",
                        GUINT_TO_POINTER (SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT),
                        test_restart_undoes_unsent);
  g_test_add_data_func ("/shim-state/restart-undoes-unsent/TaskDelete",
                        GUINT_TO_POINTER (SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE),
                        test_restart_undoes_unsent);
  return g_test_run ();
}
