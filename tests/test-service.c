/* SPDX-License-Identifier: Apache-2.0
 *
 * Unit tests of the service's building blocks that need no bus: configuration, the
 * D-Bus error mapping, task-directory removal, finding a shim by its directory, and the
 * signal ledger (over a peer-to-peer D-Bus connection).
 */
#include "config.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-authority.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-config.h"
#include "shimwatch-error.h"
#include "shimwatch-records.h"
#include "shimwatch-signal-ledger.h"
#include "shimwatch-ttrpc.h"

static char *
write_config (const char *dir,
              const char *text)
{
  char *path = g_build_filename (dir, "shimwatch.conf", NULL);

  g_assert_true (g_file_set_contents (path, text, -1, NULL));
  return path;
}

static void
test_config (void)
{
  g_autofree char *dir = g_dir_make_tmp ("swconf-XXXXXX", NULL);
  g_autofree char *missing = g_build_filename (dir, "missing.conf", NULL);
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;
  const char *bad[] = {
    "[Service]\nCleanupTimeout=0\n",
    "[Service]\nCleanupTimeout=601\n",
    "[Service]\nCleanupTimeout=soon\n",
    "[Service]\nCleanupConcurrency=0\n",
    "[Service]\nRuntimeDirectory=relative/dir\n",
    "[Service]\nRuntimePath=/usr/bin;bin\n",
    "this is not a key file",
  };

  /* defaults */
  g_assert_cmpstr (config->runtime_dir, ==, "/run/shimwatch");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  g_assert_cmpuint (config->cleanup_timeout_ms, ==, 5000);
  g_assert_true (g_strv_contains ((const char * const *) config->runtime_path, "/usr/bin"));

  /* a missing default file is fine, a missing named one is not */
  g_assert_true (shimwatch_config_load_file (config, missing, FALSE, &error));
  g_assert_no_error (error);
  g_assert_false (shimwatch_config_load_file (config, missing, TRUE, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
  g_clear_error (&error);

  {
    g_autofree char *path = write_config (dir, "[Service]\nRuntimeDirectory=/run/sw\n"
                                               "RuntimePath=/opt/shims;/usr/bin\n"
                                               "CleanupTimeout=9\nCleanupConcurrency=3\n");

    g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
    g_assert_no_error (error);
    g_assert_cmpstr (config->runtime_dir, ==, "/run/sw");
    g_assert_cmpstr (config->runtime_path[0], ==, "/opt/shims");
    g_assert_cmpuint (config->cleanup_timeout_ms, ==, 9000);
    g_assert_cmpuint (config->cleanup_concurrency, ==, 3);
  }

  /* broken values are errors that name the file and change nothing */
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autofree char *path = write_config (dir, bad[i]);

      g_assert_false (shimwatch_config_load_file (config, path, TRUE, &error));
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, path));
      g_clear_error (&error);
      g_assert_cmpstr (config->runtime_dir, ==, "/run/sw");
      g_assert_cmpuint (config->cleanup_timeout_ms, ==, 9000);
    }

  /* systemd's environment wins over the file; several directories: the first is ours */
  g_setenv ("RUNTIME_DIRECTORY", "/run/from-systemd:/run/other", TRUE);
  g_setenv ("STATE_DIRECTORY", "relative", TRUE);
  shimwatch_config_apply_environment (config);
  g_assert_cmpstr (config->runtime_dir, ==, "/run/from-systemd");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  g_unsetenv ("RUNTIME_DIRECTORY");
  g_unsetenv ("STATE_DIRECTORY");

  {
    g_autofree char *path = g_build_filename (dir, "shimwatch.conf", NULL);

    g_unlink (path);
    g_rmdir (dir);
  }
}

static void
test_error_names (void)
{
  const char *names[] = { "Failed", "InvalidArgument", "NotFound", "AlreadyExists", "BadState",
                          "NotAuthorized", "NotAuthorizedCanObtain", "ShimFailed" };

  for (guint code = 0; code < G_N_ELEMENTS (names); code++)
    {
      g_autoptr(GError) error = g_error_new (SHIMWATCH_ERROR, (int) code, "text %u", code);
      g_autofree char *expected = g_strconcat ("org.shimwatch.Shimwatch1.Error.", names[code], NULL);
      g_autofree char *name = g_dbus_error_encode_gerror (error);
      g_autoptr(GError) back = g_dbus_error_new_for_dbus_error (name, "text");

      g_assert_cmpstr (name, ==, expected);
      g_assert_error (back, SHIMWATCH_ERROR, (int) code);
    }
}

static void
test_error_convert (void)
{
  struct {
    GQuark domain;
    int    code;
    int    expected;
  } cases[] = {
    { 0, SHIMWATCH_WIRE_ERROR_INVALID, SHIMWATCH_ERROR_INVALID_ARGUMENT },
    { 0, SHIMWATCH_WIRE_ERROR_UNSUPPORTED, SHIMWATCH_ERROR_SHIM_FAILED },
    { 0, SHIMWATCH_TTRPC_ERROR_CLOSED, SHIMWATCH_ERROR_SHIM_FAILED },
    { 0, G_IO_ERROR_NOT_FOUND, SHIMWATCH_ERROR_NOT_FOUND },
    { 0, G_IO_ERROR_EXISTS, SHIMWATCH_ERROR_ALREADY_EXISTS },
    { 0, G_IO_ERROR_PERMISSION_DENIED, SHIMWATCH_ERROR_FAILED },
  };

  cases[0].domain = cases[1].domain = SHIMWATCH_WIRE_ERROR;
  cases[2].domain = SHIMWATCH_TTRPC_ERROR;
  cases[3].domain = cases[4].domain = cases[5].domain = G_IO_ERROR;
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = g_error_new (cases[i].domain, cases[i].code, "why %u", i);
      g_autoptr(GError) converted = shimwatch_error_convert (error);
      g_autofree char *message = g_strdup_printf ("why %u", i);

      g_assert_error (converted, SHIMWATCH_ERROR, cases[i].expected);
      g_assert_cmpstr (converted->message, ==, message);
    }
}

static void
test_remove_task_dir (void)
{
  g_autofree char *root = g_dir_make_tmp ("swrm-XXXXXX", NULL);
  g_autofree char *outside = g_build_filename (root, "outside.txt", NULL);
  g_autofree char *ns_dir = g_build_filename (root, "tasks", "ns", NULL);
  g_autofree char *task = g_build_filename (ns_dir, "t1", NULL);
  g_autofree char *other = g_build_filename (ns_dir, "t2", NULL);
  g_autofree char *deep = g_build_filename (task, "rootfs", "a", "b", NULL);
  g_autofree char *file = g_build_filename (deep, "f", NULL);
  g_autofree char *link = g_build_filename (task, "work", NULL);
  g_autofree char *fifo = g_build_filename (task, "log", NULL);
  g_autoptr(GError) error = NULL;

  g_assert_no_errno (g_mkdir_with_parents (deep, 0700));
  g_assert_no_errno (g_mkdir_with_parents (other, 0700));
  g_assert_true (g_file_set_contents (file, "x", -1, NULL));
  g_assert_true (g_file_set_contents (outside, "keep me", -1, NULL));
  g_assert_no_errno (symlink (root, link));     /* a symlink out must never be followed */
  g_assert_no_errno (mkfifo (fifo, 0600));

  g_assert_true (shimwatch_cleanup_remove_task_dir (task, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (task, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (outside, G_FILE_TEST_EXISTS));
  g_assert_true (g_file_test (other, G_FILE_TEST_IS_DIR));
  /* no .t1 leftover */
  {
    g_autofree char *hidden = g_build_filename (ns_dir, ".t1", NULL);

    g_assert_false (g_file_test (hidden, G_FILE_TEST_EXISTS));
  }

  /* already done is fine; the namespace directory goes with its last task */
  g_assert_true (shimwatch_cleanup_remove_task_dir (task, &error));
  g_assert_true (shimwatch_cleanup_remove_task_dir (other, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (ns_dir, G_FILE_TEST_EXISTS));

  g_unlink (outside);
  {
    g_autofree char *tasks = g_build_filename (root, "tasks", NULL);

    g_rmdir (tasks);
  }
  g_assert_no_errno (g_rmdir (root));
}

static void
test_kill_processes_in (void)
{
  g_autofree char *dir = g_dir_make_tmp ("swkill-XXXXXX", NULL);
  g_autofree char *elsewhere = g_dir_make_tmp ("swkeep-XXXXXX", NULL);
  const char *argv[] = { "sleep", "1000", NULL };
  GPid inside = 0;
  GPid outside = 0;
  int status;

  g_assert_true (g_spawn_async (dir, (char **) argv, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
                                &inside, NULL));
  g_assert_true (g_spawn_async (elsewhere, (char **) argv, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
                                &outside, NULL));
  g_assert_cmpuint (shimwatch_cleanup_kill_processes_in (dir), ==, 1);
  g_assert_cmpint (waitpid (inside, &status, 0), ==, inside);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
  g_assert_cmpint (waitpid (outside, &status, WNOHANG), ==, 0);
  kill (outside, SIGKILL);
  waitpid (outside, &status, 0);
  g_rmdir (dir);
  g_rmdir (elsewhere);
}

static void
test_authority_results (void)
{
  /* every combination polkit can answer, with and without interaction allowed */
  for (guint bits = 0; bits < 16; bits++)
    {
      gboolean authorized = (bits & 1) != 0;
      gboolean challenge = (bits & 2) != 0;
      gboolean dismissed = (bits & 4) != 0;
      gboolean interactive = (bits & 8) != 0;
      g_autoptr(GError) error = NULL;
      gboolean ok = shimwatch_authority_result_to_error (authorized, challenge, dismissed,
                                                         interactive, "org.shimwatch.reap",
                                                         &error);

      if (authorized)
        {
          g_assert_true (ok);
          g_assert_no_error (error);
        }
      else if (challenge && !dismissed && !interactive)
        g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED_CAN_OBTAIN);
      else
        g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED);
      if (!authorized)
        g_assert_nonnull (strstr (error->message, "org.shimwatch.reap"));
    }
}

/* the ledger, over a peer-to-peer connection pair: a sender whose outgoing signals it
 * watches and a receiver that checks the record on disk when a signal arrives */
typedef struct
{
  char            *records_dir;
  GDBusConnection *sender;
  GDBusConnection *receiver;
  guint            n_received;
  gboolean         in_place_on_arrival;
  gboolean         gone_on_arrival;
  char            *ns_dir;
  ShimwatchSignalLedger *ledger;
  guint            filter;
} LedgerFixture;

#define LEDGER_IFACE   "org.shimwatch.Shimwatch1.Manager"
#define LEDGER_SUBJECT "/org/shimwatch/Shimwatch1/shims/ns/t1"

static void
base_record (ShimwatchRecord *record)
{
  record->namespace_ = (char *) "ns";
  record->id = (char *) "t1";
  record->runtime = (char *) "io.containerd.runc.v2";
  record->shim_binary = (char *) "/usr/bin/containerd-shim-runc-v2";
  record->task_dir = (char *) "/run/shimwatch/tasks/ns/t1";
  record->address = (char *) "unix:///run/containerd/s/0";
  record->status = (char *) "running";
}

/* what the record file says now (not shimwatch_records_load(), which would tidy up) */
static ShimwatchRecord *
read_record (const char *records_dir)
{
  g_autofree char *path = shimwatch_records_path (records_dir, "ns", "t1");
  g_autofree char *contents = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchRecord *record;
  gsize length;

  g_assert_true (g_file_get_contents (path, &contents, &length, &error));
  record = shimwatch_wire_decode_record (contents, length, &error);
  g_assert_no_error (error);
  return record;
}

static guint
count_files (const char *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  guint n = 0;

  while (d != NULL && g_dir_read_name (d) != NULL)
    n++;
  return n;
}

static void
on_ledger_signal (GDBusConnection *connection,
                  const char      *sender,
                  const char      *path,
                  const char      *interface,
                  const char      *member,
                  GVariant        *parameters,
                  gpointer         user_data)
{
  LedgerFixture *f = user_data;
  g_autofree char *record_path = shimwatch_records_path (f->records_dir, "ns", "t1");
  const char *subject;

  f->n_received++;
  g_variant_get_child (parameters, 0, "&o", &subject);
  if (!g_str_equal (subject, LEDGER_SUBJECT))
    return;
  if (g_str_equal (member, "TaskDelete"))
    f->gone_on_arrival = !g_file_test (record_path, G_FILE_TEST_EXISTS);
  else
    {
      g_autoptr(ShimwatchRecord) record = read_record (f->records_dir);

      f->in_place_on_arrival = record->exit_emitted;
    }
}

static void
on_server_connection (GObject      *source,
                      GAsyncResult *result,
                      gpointer      user_data)
{
  GDBusConnection **out = user_data;
  g_autoptr(GError) error = NULL;

  *out = g_dbus_connection_new_finish (result, &error);
  g_assert_no_error (error);
}

static void
ledger_setup (LedgerFixture *f,
              gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *guid = g_dbus_generate_guid ();
  g_autoptr(GSocket) a = NULL;
  g_autoptr(GSocket) b = NULL;
  g_autoptr(GSocketConnection) ca = NULL;
  g_autoptr(GSocketConnection) cb = NULL;
  ShimwatchRecord record = { 0 };
  int fds[2];

  f->records_dir = g_dir_make_tmp ("swledger-XXXXXX", NULL);
  base_record (&record);
  g_assert_true (shimwatch_records_write (f->records_dir, &record, &error));
  g_assert_no_error (error);

  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  a = g_socket_new_from_fd (fds[0], &error);
  g_assert_no_error (error);
  b = g_socket_new_from_fd (fds[1], &error);
  g_assert_no_error (error);
  ca = g_socket_connection_factory_create_connection (a);
  cb = g_socket_connection_factory_create_connection (b);
  g_dbus_connection_new (G_IO_STREAM (cb), guid,
                         G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_SERVER |
                         G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_ALLOW_ANONYMOUS,
                         NULL, NULL, on_server_connection, &f->receiver);
  f->sender = g_dbus_connection_new_sync (G_IO_STREAM (ca), NULL,
                                          G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT,
                                          NULL, NULL, &error);
  g_assert_no_error (error);
  while (f->receiver == NULL)
    g_main_context_iteration (NULL, TRUE);
  g_dbus_connection_signal_subscribe (f->receiver, NULL, LEDGER_IFACE, NULL, NULL, NULL,
                                      G_DBUS_SIGNAL_FLAGS_NONE, on_ledger_signal, f, NULL);
  f->ns_dir = g_build_filename (f->records_dir, "ns", NULL);
  f->ledger = shimwatch_signal_ledger_new (LEDGER_IFACE);
  f->filter = shimwatch_signal_ledger_attach (f->ledger, f->sender);
}

static void
ledger_teardown (LedgerFixture *f,
                 gconstpointer  data)
{
  g_dbus_connection_remove_filter (f->sender, f->filter);
  g_clear_pointer (&f->ledger, shimwatch_signal_ledger_unref);
  g_free (f->ns_dir);
  g_dbus_connection_close_sync (f->sender, NULL, NULL);
  g_clear_object (&f->sender);
  g_clear_object (&f->receiver);
  g_assert_true (shimwatch_records_remove (f->records_dir, "ns", "t1", NULL));
  g_assert_cmpint (g_rmdir (f->records_dir), ==, 0);
  g_free (f->records_dir);
}

static ShimwatchRecordCommit *
prepare_exit_record (LedgerFixture *f)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };
  ShimwatchRecordCommit *commit;

  base_record (&record);
  record.status = (char *) "stopped";
  record.exit_known = record.exit_emitted = TRUE;
  record.exit.pid = 42;
  record.exit.exit_status = 137;
  commit = shimwatch_records_prepare (f->records_dir, &record, &error);
  g_assert_no_error (error);
  g_assert_nonnull (commit);
  return commit;
}

static void
emit_signal (LedgerFixture *f,
             const char    *member,
             const char    *subject)
{
  g_autoptr(GError) error = NULL;

  g_dbus_connection_emit_signal (f->sender, NULL, "/org/shimwatch/Shimwatch1", LEDGER_IFACE,
                                 member,
                                 g_variant_new ("(osssuut)", subject, "ns", "t1", "t1", 42,
                                                137, (guint64) 1),
                                 &error);
  g_assert_no_error (error);
  g_assert_true (g_dbus_connection_flush_sync (f->sender, NULL, &error));
  g_assert_no_error (error);
}

static void
test_ledger_commits_as_sent (LedgerFixture *f,
                             gconstpointer  data)
{
  ShimwatchSignalLedger *ledger = f->ledger;
  const char *ns_dir = f->ns_dir;
  g_autoptr(GError) error = NULL;

  shimwatch_signal_ledger_expect (ledger, "TaskExit", LEDGER_SUBJECT, prepare_exit_record (f));
  /* prepared: the old record still holds, beside its temp file */
  {
    g_autoptr(ShimwatchRecord) record = read_record (f->records_dir);

    g_assert_false (record->exit_emitted);
    g_assert_cmpuint (count_files (ns_dir), ==, 2);
  }
  /* another task's TaskExit does not commit this one */
  emit_signal (f, "TaskExit", "/org/shimwatch/Shimwatch1/shims/ns/other");
  {
    g_autoptr(ShimwatchRecord) record = read_record (f->records_dir);

    g_assert_false (record->exit_emitted);
  }
  emit_signal (f, "TaskExit", LEDGER_SUBJECT);
  g_assert_true (shimwatch_signal_ledger_settle (ledger, "TaskExit", LEDGER_SUBJECT, &error));
  g_assert_no_error (error);
  {
    g_autoptr(ShimwatchRecord) record = read_record (f->records_dir);

    g_assert_true (record->exit_emitted);
    g_assert_cmpuint (record->exit.exit_status, ==, 137);
    g_assert_cmpuint (count_files (ns_dir), ==, 1);
  }
  /* whoever receives the signal finds the record already saying it was sent */
  while (f->n_received < 2)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (f->in_place_on_arrival);

  /* TaskDelete's change is the record's removal, namespace directory included: whoever
   * receives it finds no record left */
  shimwatch_signal_ledger_expect (ledger, "TaskDelete", LEDGER_SUBJECT,
                                  shimwatch_records_prepare_removal (f->records_dir, "ns", "t1"));
  g_assert_cmpuint (count_files (ns_dir), ==, 1);
  emit_signal (f, "TaskDelete", LEDGER_SUBJECT);
  g_assert_true (shimwatch_signal_ledger_settle (ledger, "TaskDelete", LEDGER_SUBJECT, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (ns_dir, G_FILE_TEST_EXISTS));
  while (f->n_received < 3)
    g_main_context_iteration (NULL, TRUE);
  g_assert_true (f->gone_on_arrival);
}

static void
test_ledger_unsent_changes_nothing (LedgerFixture *f,
                                    gconstpointer  data)
{
  ShimwatchSignalLedger *ledger = f->ledger;
  const char *ns_dir = f->ns_dir;
  g_autoptr(GError) error = NULL;

  /* nothing emitted */
  shimwatch_signal_ledger_expect (ledger, "TaskExit", LEDGER_SUBJECT, prepare_exit_record (f));
  g_assert_false (shimwatch_signal_ledger_settle (ledger, "TaskExit", LEDGER_SUBJECT, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED);
  g_clear_error (&error);

  /* emitted on a closed connection: never written */
  shimwatch_signal_ledger_expect (ledger, "TaskExit", LEDGER_SUBJECT, prepare_exit_record (f));
  g_assert_true (g_dbus_connection_close_sync (f->sender, NULL, NULL));
  g_dbus_connection_emit_signal (f->sender, NULL, "/org/shimwatch/Shimwatch1", LEDGER_IFACE,
                                 "TaskExit",
                                 g_variant_new ("(osssuut)", LEDGER_SUBJECT, "ns", "t1", "t1",
                                                42, 137, (guint64) 1),
                                 NULL);
  g_dbus_connection_flush_sync (f->sender, NULL, NULL);
  g_assert_false (shimwatch_signal_ledger_settle (ledger, "TaskExit", LEDGER_SUBJECT, &error));
  g_assert_error (error, G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED);

  /* the record still says "not sent", so a restart would send it; no temp file is left */
  {
    g_autoptr(ShimwatchRecord) record = read_record (f->records_dir);

    g_assert_false (record->exit_emitted);
    g_assert_cmpuint (count_files (ns_dir), ==, 1);
  }
  g_assert_cmpuint (f->n_received, ==, 0);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/service/config", test_config);
  g_test_add_func ("/service/error-names", test_error_names);
  g_test_add_func ("/service/error-convert", test_error_convert);
  g_test_add_func ("/service/authority-results", test_authority_results);
  g_test_add_func ("/service/remove-task-dir", test_remove_task_dir);
  g_test_add_func ("/service/kill-processes-in", test_kill_processes_in);
  g_test_add ("/service/ledger/commits-as-sent", LedgerFixture, NULL, ledger_setup,
              test_ledger_commits_as_sent, ledger_teardown);
  g_test_add ("/service/ledger/unsent-changes-nothing", LedgerFixture, NULL, ledger_setup,
              test_ledger_unsent_changes_nothing, ledger_teardown);
  return g_test_run ();
}
