/* SPDX-License-Identifier: Apache-2.0
 *
 * The one task lifecycle (shimwatch-task-lifecycle.h), as both kinds of task object use
 * it, on a plain Shim skeleton and without a bus: the Status each input publishes, each
 * lifecycle signal exactly once with the properties that go with it, a recorded task
 * restored, and the owner's part of the record.
 */
#include "config.h"

#include <glib/gstdio.h>

#include "shimwatch-records.h"
#include "shimwatch-task-lifecycle.h"

typedef struct {
  char                  *dir;
  ShimwatchDbusManager  *manager;
  ShimwatchPublisher    *publisher;
  ShimwatchDbusShim     *iface;
  ShimwatchTaskLifecycle lifecycle;
  guint                  n_flushes;
} Fixture;

static void
fill_record (gpointer         owner,
             ShimwatchRecord *record)
{
  record->runtime = (char *) "io.containerd.runc.v2";
  record->task_dir = (char *) "/run/bundle";
  record->shim_binary = (char *) "";
}

static void
flush_changes (gpointer owner)
{
  Fixture *f = owner;

  f->n_flushes++;
}

static const ShimwatchTaskLifecycleOwner owner = {
  .fill_record = fill_record,
  .flush_changes = flush_changes,
};

static void
fixture_set_up (Fixture      *f,
                gconstpointer data)
{
  f->dir = g_dir_make_tmp ("shimwatch-task-lifecycle-XXXXXX", NULL);
  g_assert_nonnull (f->dir);
  f->manager = shimwatch_dbus_manager_skeleton_new ();
  f->publisher = shimwatch_publisher_new (f->manager, f->dir, NULL);
  f->iface = shimwatch_dbus_shim_skeleton_new ();
  shimwatch_dbus_shim_set_owner (f->iface, "containerd");
  shimwatch_dbus_shim_set_exit_reason (f->iface, "");
  shimwatch_task_lifecycle_init (&f->lifecycle, &(ShimwatchTaskLifecycleSetup) {
    .iface = f->iface,
    .path = "/org/shimwatch/Shimwatch1/containerd/ns/t1",
    .namespace_ = "ns",
    .id = "t1",
    .publisher = f->publisher,
    .committer = shimwatch_publisher_get_committer (f->publisher),
    .log_domain = "ShimwatchTest",
    .owner = &owner,
    .owner_data = f,
  });
}

static gboolean
committer_idle (Fixture *f)
{
  gint64 deadline = g_get_monotonic_time () + 10 * G_TIME_SPAN_SECOND;

  while (!shimwatch_record_committer_is_idle (shimwatch_publisher_get_committer (f->publisher)))
    {
      if (g_get_monotonic_time () > deadline)
        return FALSE;
      g_main_context_iteration (NULL, FALSE);
      g_usleep (1000);
    }
  return TRUE;
}

static void
remove_tree (const char *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const char *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree char *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR))
        remove_tree (child);
      else
        g_assert_cmpint (g_remove (child), ==, 0);
    }
  g_assert_cmpint (g_rmdir (path), ==, 0);
}

static void
fixture_tear_down (Fixture      *f,
                   gconstpointer data)
{
  g_assert_true (committer_idle (f));
  g_clear_object (&f->iface);
  g_clear_object (&f->publisher);
  g_clear_object (&f->manager);
  remove_tree (f->dir);
  g_free (f->dir);
}

static void
assert_status (Fixture    *f,
               const char *status)
{
  g_assert_cmpstr (shimwatch_dbus_shim_get_status (f->iface), ==, status);
}

/* a shim dies under a running task: ShimDisconnected, the exit (reported while the
 * cleanup runs, Status stays), the cleanup, TaskDelete; each once */
static void
test_death (Fixture      *f,
            gconstpointer data)
{
  ShimwatchTaskLifecycle *lc = &f->lifecycle;

  assert_status (f, "created");
  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_ATTACHED);
  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING);
  assert_status (f, "running");

  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_CONNECTION_LOST);
  g_assert_true (shimwatch_task_lifecycle_emit_disconnected (lc, 42, NULL, TRUE));
  assert_status (f, "disconnected");
  /* flush: the new Status went out before the signal */
  g_assert_cmpuint (f->n_flushes, ==, 1);
  g_assert_false (shimwatch_task_lifecycle_emit_disconnected (lc, 42, NULL, TRUE));

  g_assert_true (shimwatch_task_lifecycle_emit_exit (lc, 7, 128 + 9, 0, NULL));
  g_assert_cmpuint (shimwatch_dbus_shim_get_exit_status (f->iface), ==, 137);
  g_assert_cmpuint (shimwatch_dbus_shim_get_exited_at (f->iface), >, 0);
  g_assert_cmpstr (shimwatch_dbus_shim_get_exit_reason (f->iface), ==, "signaled");
  g_assert_cmpuint (lc->exit.pid, ==, 7);
  assert_status (f, "disconnected");
  g_assert_false (shimwatch_task_lifecycle_emit_exit (lc, 7, 0, 0, "exited"));
  g_assert_cmpuint (shimwatch_dbus_shim_get_exit_status (f->iface), ==, 137);

  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED);
  assert_status (f, "cleaning");
  g_assert_true (shimwatch_task_lifecycle_emit_delete (lc));
  g_assert_false (shimwatch_task_lifecycle_emit_delete (lc));
  g_assert_true (shimwatch_task_lifecycle_has_sent (lc, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE));
}

/* containerd's (or a normal) delete: TaskExit, then TaskDelete without ShimDisconnected */
static void
test_normal_delete (Fixture      *f,
                    gconstpointer data)
{
  ShimwatchTaskLifecycle *lc = &f->lifecycle;

  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_RUNTIME_RUNNING);
  /* no TaskDelete while the task lives */
  g_assert_false (shimwatch_task_lifecycle_emit_delete (lc));
  g_assert_true (shimwatch_task_lifecycle_emit_exit (lc, 7, 3, 1000, NULL));
  g_assert_cmpstr (shimwatch_dbus_shim_get_exit_reason (f->iface), ==, "exited");
  g_assert_cmpuint (shimwatch_dbus_shim_get_exited_at (f->iface), ==, 1000);
  assert_status (f, "stopped");
  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_DELETED);
  g_assert_true (shimwatch_task_lifecycle_is_deleted (lc));
  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_SHIM_GONE);
  assert_status (f, "stopped");
  g_assert_true (shimwatch_task_lifecycle_emit_delete (lc));
  g_assert_false (shimwatch_task_lifecycle_has_sent (lc,
                                                     SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED));
}

/* a task an earlier run recorded between ShimDisconnected and TaskExit: what went out is
 * not sent again, its properties are back, and this run's cleanup ends it */
static void
test_restore (Fixture      *f,
              gconstpointer data)
{
  ShimwatchTaskLifecycle *lc = &f->lifecycle;
  ShimwatchRecord record = {
    .namespace_ = (char *) "ns",
    .id = (char *) "t1",
    .address = (char *) "unix:///run/s/1",
    .shim_pid = 42,
    .task_pid = 7,
    .created_at = 5,
    .started_at = 6,
    .status = (char *) "cleaning",
    .disconnected = TRUE,
    .exit_reason = (char *) "",
    .owner = (char *) "containerd",
  };

  /* no records here: with no bus, a mark written ahead would never settle */
  lc->setup.committer = NULL;
  shimwatch_task_lifecycle_restore (lc, &record);
  g_assert_true (lc->persistent);
  assert_status (f, "cleaning");
  g_assert_cmpuint (shimwatch_dbus_shim_get_shim_pid (f->iface), ==, 42);
  g_assert_cmpuint (shimwatch_dbus_shim_get_task_pid (f->iface), ==, 7);
  g_assert_cmpstr (shimwatch_dbus_shim_get_address (f->iface), ==, "unix:///run/s/1");
  g_assert_cmpuint (shimwatch_dbus_shim_get_started_at (f->iface), ==, 6);
  /* the recorded cleanup is not this run's: it has to start again */
  g_assert_false (shimwatch_task_lifecycle_emit_delete (lc));
  g_assert_false (shimwatch_task_lifecycle_emit_disconnected (lc, 42, NULL, FALSE));
  assert_status (f, "disconnected");
  g_assert_true (shimwatch_task_lifecycle_emit_exit (lc, 7, 137, 0, "shim-died"));
  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_CLEANUP_STARTED);
  g_assert_true (shimwatch_task_lifecycle_emit_delete (lc));
  shimwatch_task_lifecycle_forget (lc);
  g_assert_false (lc->persistent);
}

/* the record: the owner's fields, the lifecycle's, the flags; gone when forgotten */
static void
test_record (Fixture      *f,
             gconstpointer data)
{
  ShimwatchTaskLifecycle *lc = &f->lifecycle;
  g_autoptr(GPtrArray) records = NULL;
  ShimwatchRecord *record;

  /* not persistent yet: nothing written */
  shimwatch_task_lifecycle_save (lc);
  g_assert_true (committer_idle (f));
  records = shimwatch_records_load (f->dir, NULL);
  g_assert_cmpuint (records->len, ==, 0);
  g_clear_pointer (&records, g_ptr_array_unref);

  lc->persistent = TRUE;
  shimwatch_dbus_shim_set_shim_pid (f->iface, 42);
  shimwatch_task_lifecycle_transition (lc, SHIMWATCH_SHIM_INPUT_RUNTIME_PAUSED);
  shimwatch_task_lifecycle_save (lc);
  g_assert_true (committer_idle (f));
  records = shimwatch_records_load (f->dir, NULL);
  g_assert_cmpuint (records->len, ==, 1);
  record = g_ptr_array_index (records, 0);
  g_assert_cmpstr (record->namespace_, ==, "ns");
  g_assert_cmpstr (record->id, ==, "t1");
  g_assert_cmpstr (record->status, ==, "paused");
  g_assert_cmpstr (record->runtime, ==, "io.containerd.runc.v2");
  g_assert_cmpstr (record->task_dir, ==, "/run/bundle");
  g_assert_cmpstr (record->owner, ==, "containerd");
  g_assert_cmpuint (record->shim_pid, ==, 42);
  g_assert_false (record->disconnected || record->exit_emitted || record->delete_emitted);
  g_clear_pointer (&records, g_ptr_array_unref);

  shimwatch_task_lifecycle_forget (lc);
  g_assert_true (committer_idle (f));
  records = shimwatch_records_load (f->dir, NULL);
  g_assert_cmpuint (records->len, ==, 0);
}

int
main (int   argc,
      char *argv[])
{
  g_test_init (&argc, &argv, NULL);

  g_test_add ("/task-lifecycle/death", Fixture, NULL, fixture_set_up, test_death,
              fixture_tear_down);
  g_test_add ("/task-lifecycle/normal-delete", Fixture, NULL, fixture_set_up,
              test_normal_delete, fixture_tear_down);
  g_test_add ("/task-lifecycle/restore", Fixture, NULL, fixture_set_up, test_restore,
              fixture_tear_down);
  g_test_add ("/task-lifecycle/record", Fixture, NULL, fixture_set_up, test_record,
              fixture_tear_down);
  return g_test_run ();
}
