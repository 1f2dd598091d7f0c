/* SPDX-License-Identifier: Apache-2.0
 *
 * Unit tests of the service's building blocks that need no bus: configuration, the
 * D-Bus error mapping, task-directory removal, finding a shim by its directory, and the
 * signal ledger (over a peer-to-peer D-Bus connection).
 */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-authority.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-config.h"
#include "shimwatch-error.h"
#include "shimwatch-fair-queue.h"
#include "shimwatch-file.h"
#include "shimwatch-publisher.h"
#include "shimwatch-record-committer.h"
#include "shimwatch-records.h"
#include "shimwatch-shim-state.h"
#include "shimwatch-signal-ledger.h"
#include "shimwatch-stdio.h"
#include "shimwatch-ttrpc.h"
#include "shimwatch-test-dir.h"
#include "shimwatch-test-seccomp.h"
#include "shimwatch-test-util.h"

#include "shimwatch-test-malloc.h"

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
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swconf-XXXXXX", NULL);
  g_autofree char *missing = g_build_filename (dir, "missing.conf", NULL);
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;
  const char *bad[] = {
    "[Service]\nCleanupTimeout=0\n",
    "[Service]\nCleanupTimeout=601\n",
    "[Service]\nCleanupTimeout=soon\n",
    "[Service]\nCleanupConcurrency=0\n",
    "[Service]\nCleanupConcurrency=257\n",
    "[Service]\nCleanupConcurrency=cores\n",
    "[Service]\nRuntimeDirectory=relative/dir\n",
    "[Service]\nRuntimePath=/usr/bin;bin\n",
    "this is not a key file",
  };

  /* defaults */
  g_assert_cmpstr (config->runtime_dir, ==, "/run/shimwatch");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  g_assert_cmpuint (config->cleanup_timeout_ms, ==, 5000);
  g_assert_true (g_strv_contains ((const char * const *) config->runtime_path, "/usr/bin"));
  /* shim deletes at once: four per CPU, at least 4 */
  g_assert_cmpuint (config->cleanup_concurrency, ==, MAX (4, 4 * g_get_num_processors ()));

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
  {
    g_autoptr(ShimwatchConfig) other = shimwatch_config_new ();
    g_autofree char *path = write_config (dir, "[Service]\nCleanupConcurrency=3\n");
    g_autofree char *automatic = write_config (dir, "[Service]\nCleanupConcurrency= auto\n");

    g_assert_true (shimwatch_config_load_file (other, path, TRUE, &error));
    g_assert_true (shimwatch_config_load_file (other, automatic, TRUE, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (other->cleanup_concurrency, ==,
                      shimwatch_config_default_cleanup_concurrency ());
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
  g_assert_true (shimwatch_config_apply_environment (config, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (config->runtime_dir, ==, "/run/from-systemd");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  /* a relative one is refused, not silently ignored, and changes nothing */
  g_setenv ("RUNTIME_DIRECTORY", "run/elsewhere", TRUE);
  g_assert_false (shimwatch_config_apply_environment (config, &error));
  g_assert_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE);
  g_assert_nonnull (strstr (error->message, "RUNTIME_DIRECTORY"));
  g_clear_error (&error);
  g_setenv ("RUNTIME_DIRECTORY", "/run/again", TRUE);
  g_setenv ("STATE_DIRECTORY", "relative", TRUE);
  g_assert_false (shimwatch_config_apply_environment (config, &error));
  g_assert_nonnull (strstr (error->message, "STATE_DIRECTORY"));
  g_clear_error (&error);
  g_assert_cmpstr (config->runtime_dir, ==, "/run/from-systemd");
  g_assert_cmpstr (config->state_dir, ==, "/var/lib/shimwatch");
  g_unsetenv ("RUNTIME_DIRECTORY");
  g_unsetenv ("STATE_DIRECTORY");

  {
    g_autofree char *path = g_build_filename (dir, "shimwatch.conf", NULL);

    g_unlink (path);
  }
  shimwatch_test_dir_remove (dir);
}

/* issue 8 item 14: typos, an empty RuntimePath and a world-writable runtime directory
 * passed silently */
static void
test_config_mistakes (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swconf-XXXXXX", NULL);
  g_autofree char *open_dir = g_build_filename (dir, "anyone", NULL);
  g_autofree char *sticky = g_build_filename (dir, "sticky", NULL);
  g_autofree char *below = g_build_filename (sticky, "shims", NULL);
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;

  {
    g_autofree char *path = write_config (dir, "[Service]\nCleanupTimout=9\nFrobnicate=1\n"
                                               "[Servce]\nCleanupTimeout=3\n");

    g_test_expect_message ("ShimwatchConfig", G_LOG_LEVEL_WARNING,
                           "*unknown key CleanupTimout in [Service] is ignored; did you mean "
                           "CleanupTimeout?");
    g_test_expect_message ("ShimwatchConfig", G_LOG_LEVEL_WARNING,
                           "*unknown key Frobnicate in [Service] is ignored (known: *");
    g_test_expect_message ("ShimwatchConfig", G_LOG_LEVEL_WARNING,
                           "*unknown group [Servce] is ignored*");
    g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
    g_test_assert_expected_messages ();
    g_assert_no_error (error);
    g_assert_cmpuint (config->cleanup_timeout_ms, ==, 5000);
  }
  {
    g_autofree char *path = write_config (dir, "[Service]\nRuntimePath=\n");

    g_assert_false (shimwatch_config_load_file (config, path, TRUE, &error));
    g_assert_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE);
    g_assert_nonnull (strstr (error->message, "RuntimePath is empty"));
    g_clear_error (&error);
  }
  {
    g_autofree char *path = write_config (dir, "[Service]\nRuntimePath=/usr/bin;;/opt/shims\n");

    g_assert_false (shimwatch_config_load_file (config, path, TRUE, &error));
    g_assert_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE);
    g_assert_nonnull (strstr (error->message, "RuntimePath has an empty entry (entry 2)"));
    g_clear_error (&error);
  }
  {
    g_autofree char *path = write_config (dir, "[Service]\nRuntimePath=/usr/bin/;/opt//shims\n");

    g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
    g_assert_no_error (error);
    g_assert_cmpstr (config->runtime_path[0], ==, "/usr/bin");
    g_assert_cmpstr (config->runtime_path[1], ==, "/opt/shims");
  }

  /* anyone may put a containerd-shim-* into a world-writable directory: refused */
  g_assert_cmpint (g_mkdir (open_dir, 0755), ==, 0);
  g_assert_cmpint (chmod (open_dir, 0777), ==, 0);
  g_strfreev (config->runtime_path);
  config->runtime_path = g_strsplit (open_dir, ";", -1);
  g_assert_false (shimwatch_config_check (config, &error));
  g_assert_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE);
  g_assert_nonnull (strstr (error->message, "writable by every user"));
  g_clear_error (&error);
  /* below a world-writable directory only if its sticky bit keeps others' names safe */
  g_assert_cmpint (g_mkdir (sticky, 0755), ==, 0);
  g_assert_cmpint (g_mkdir (below, 0755), ==, 0);
  g_assert_cmpint (chmod (sticky, 01777), ==, 0);
  g_strfreev (config->runtime_path);
  config->runtime_path = g_strsplit (below, ";", -1);
  g_assert_true (shimwatch_config_check (config, &error));
  g_assert_no_error (error);
  g_assert_cmpint (chmod (sticky, 0777), ==, 0);
  g_assert_false (shimwatch_config_check (config, &error));
  g_clear_error (&error);

  g_rmdir (below);
  g_rmdir (sticky);
  g_rmdir (open_dir);
  {
    g_autofree char *path = g_build_filename (dir, "shimwatch.conf", NULL);

    g_unlink (path);
  }
  shimwatch_test_dir_remove (dir);
}

/* issue 8 item 5: a FIFO (or a device) where a file is expected blocked the main loop */
static void
test_untrusted_files (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swfile-XXXXXX", NULL);
  g_autofree char *fifo = g_build_filename (dir, "fifo", NULL);
  g_autofree char *regular = g_build_filename (dir, "regular", NULL);
  g_autofree char *link = g_build_filename (dir, "link", NULL);
  g_autofree char *records = g_build_filename (dir, "records", NULL);
  g_autofree char *ns = g_build_filename (records, "default", NULL);
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GPtrArray) broken = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) loaded = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GDir) listing = NULL;
  g_autofree char *contents = NULL;
  g_autofree char *big = g_strnfill (70000, ' ');
  const char *name;
  guint n_aside = 0;
  gsize length = 0;

  g_assert_cmpint (mkfifo (fifo, 0600), ==, 0);
  g_assert_true (g_file_set_contents (regular, "[Service]\n", -1, NULL));
  g_assert_cmpint (symlink (regular, link), ==, 0);

  /* a hang is the failure this guards against: let it end the test instead */
  alarm (20);
  g_assert_null (shimwatch_read_regular_file_at (AT_FDCWD, fifo, 100, SHIMWATCH_FILE_NONE,
                                                 NULL, NULL, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL);
  g_assert_nonnull (strstr (error->message, "a FIFO"));
  g_clear_error (&error);
  g_assert_null (shimwatch_read_regular_file_at (AT_FDCWD, link, 100, SHIMWATCH_FILE_NONE,
                                                 NULL, NULL, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL);
  g_clear_error (&error);
  contents = shimwatch_read_regular_file_at (AT_FDCWD, link, 100, SHIMWATCH_FILE_FOLLOW_LINK,
                                             &length, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (contents, ==, "[Service]\n");
  g_assert_cmpuint (length, ==, 10);
  g_assert_null (shimwatch_read_regular_file_at (AT_FDCWD, regular, 9, SHIMWATCH_FILE_NONE,
                                                 NULL, NULL, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL);
  g_clear_error (&error);
  g_assert_null (shimwatch_read_regular_file_at (AT_FDCWD, "/dev/zero", 100,
                                                 SHIMWATCH_FILE_FOLLOW_LINK, NULL, NULL, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL);
  g_clear_error (&error);

  /* the config file */
  g_assert_false (shimwatch_config_load_file (config, fifo, TRUE, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL);
  g_clear_error (&error);

  /* task records: a FIFO, a link to /dev/zero, one too large; all set aside */
  g_assert_cmpint (g_mkdir_with_parents (ns, 0700), ==, 0);
  {
    g_autofree char *rec_fifo = g_build_filename (ns, "fifo.json", NULL);
    g_autofree char *rec_zero = g_build_filename (ns, "zero.json", NULL);
    g_autofree char *rec_big = g_build_filename (ns, "big.json", NULL);

    g_assert_cmpint (mkfifo (rec_fifo, 0600), ==, 0);
    g_assert_cmpint (symlink ("/dev/zero", rec_zero), ==, 0);
    g_assert_true (g_file_set_contents (rec_big, big, -1, NULL));
  }
  g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING, "*is broken*");
  g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING, "*is broken*");
  g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING, "*is broken*");
  loaded = shimwatch_records_load (records, broken);
  g_test_assert_expected_messages ();
  alarm (0);
  g_assert_cmpuint (loaded->len, ==, 0);
  g_assert_cmpuint (broken->len, ==, 3);
  listing = g_dir_open (ns, 0, NULL);
  while ((name = g_dir_read_name (listing)) != NULL)
    {
      g_autofree char *path = g_build_filename (ns, name, NULL);

      g_assert_nonnull (strstr (name, ".json.broken-"));
      n_aside++;
      g_unlink (path);
    }
  g_assert_cmpuint (n_aside, ==, 3);

  g_rmdir (ns);
  g_rmdir (records);
  g_unlink (link);
  g_unlink (regular);
  g_unlink (fifo);
  shimwatch_test_dir_remove (dir);
}

/* issue 8 item 12: what containerd-shim-runc-v2 would choke on is refused up front */
static void
test_stdio_parse (void)
{
  static const struct {
    const char *in[3];
    gboolean    terminal;
    const char *stderr_after;   /* NULL: refused */
  } cases[] = {
    { { NULL, NULL, NULL }, FALSE, "" },
    { { NULL, "/run/o", "/run/e" }, FALSE, "/run/e" },
    { { "/run/i", "/run/o", "/run/o" }, FALSE, "/run/o" },
    { { NULL, "file:///var/log/t.log", NULL }, FALSE, "file:///var/log/t.log" },
    { { NULL, "file:///var/log/t.log", "file:///var/log/t.log" }, FALSE, "file:///var/log/t.log" },
    { { NULL, "binary:///usr/bin/logger?tag=x", NULL }, FALSE, "binary:///usr/bin/logger?tag=x" },
    { { "/run/i", "/run/o", NULL }, TRUE, "" },
    { { NULL, "relative", "/run/e" }, FALSE, NULL },
    { { NULL, "/run/o", "relative" }, FALSE, NULL },
    { { "relative", "/run/o", "/run/e" }, FALSE, NULL },
    { { "file:///in", "/run/o", "/run/e" }, FALSE, NULL },
    { { NULL, "fifo:///run/o", "/run/e" }, FALSE, NULL },
    { { NULL, "http://h/x", "/run/e" }, FALSE, NULL },
    { { NULL, "file://host/x", NULL }, FALSE, NULL },
    { { NULL, "file:///a%2fb", NULL }, FALSE, NULL },
    { { NULL, "file:///a?b", NULL }, FALSE, NULL },
    { { NULL, "file:///a", "file:///b" }, FALSE, NULL },
    { { NULL, "file:///a", "/run/e" }, FALSE, NULL },
    { { NULL, "/run/o", "file:///a" }, FALSE, NULL },
    { { NULL, "file:///a", NULL }, TRUE, NULL },
    { { "/run/i", "binary:///usr/bin/logger", NULL }, FALSE, NULL },
    { { NULL, "/run/o", NULL }, FALSE, NULL },
    { { NULL, NULL, "/run/e" }, FALSE, NULL },
    { { "/run/i", NULL, NULL }, FALSE, NULL },
    { { NULL, "/run/o\n", "/run/e" }, FALSE, NULL },
    { { NULL, "/run/\xff", "/run/e" }, FALSE, NULL },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      char *stdio[3];
      gboolean ok;

      for (guint j = 0; j < 3; j++)
        stdio[j] = g_strdup (cases[i].in[j]);
      ok = shimwatch_stdio_parse (stdio, cases[i].terminal, &error);
      if (cases[i].stderr_after != NULL)
        {
          g_assert_no_error (error);
          g_assert_true (ok);
          g_assert_cmpstr (stdio[2] != NULL ? stdio[2] : "", ==, cases[i].stderr_after);
        }
      else
        {
          g_assert_false (ok);
          g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
        }
      for (guint j = 0; j < 3; j++)
        g_free (stdio[j]);
    }
}

/* the runc shim closes a file given as both stdout and stderr when stdout ends, losing
 * stderr's later output: it gets two names for the file */
static void
test_stdio_prepare (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swstdio-XXXXXX", NULL);
  g_autofree char *task_dir = g_build_filename (dir, "task", NULL);
  g_autofree char *file = g_build_filename (dir, "out.log", NULL);
  g_autofree char *fifo = g_build_filename (dir, "out.fifo", NULL);
  g_autofree char *link = g_build_filename (task_dir, SHIMWATCH_STDIO_STDERR_LINK, NULL);
  g_autofree char *target = NULL;
  g_autoptr(GError) error = NULL;
  char *stdio[3] = { NULL, g_strconcat ("file://", file, NULL), NULL };
  struct stat st;

  g_assert_cmpint (g_mkdir (task_dir, 0700), ==, 0);
  g_assert_true (shimwatch_stdio_parse (stdio, FALSE, &error));
  g_assert_true (shimwatch_stdio_prepare (stdio, task_dir, &error));
  g_assert_no_error (error);
  /* created as the shim would, then a plain path for stdout and a link for stderr */
  g_assert_cmpint (stat (file, &st), ==, 0);
  g_assert_true (S_ISREG (st.st_mode));
  g_assert_cmpstr (stdio[1], ==, file);
  g_assert_cmpstr (stdio[2], ==, link);
  target = g_file_read_link (link, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (target, ==, file);
  g_unlink (link);

  /* one regular file as both plain paths: the same */
  g_free (stdio[2]);
  stdio[2] = g_strdup (file);
  g_assert_true (shimwatch_stdio_prepare (stdio, task_dir, &error));
  g_assert_cmpstr (stdio[1], ==, file);
  g_assert_cmpstr (stdio[2], ==, link);
  g_unlink (link);

  /* a FIFO is opened once per stream anyway; two paths are two files already */
  g_assert_cmpint (mkfifo (fifo, 0600), ==, 0);
  for (guint i = 1; i < 3; i++)
    {
      g_free (stdio[i]);
      stdio[i] = g_strdup (fifo);
    }
  g_assert_true (shimwatch_stdio_prepare (stdio, task_dir, &error));
  g_assert_cmpstr (stdio[2], ==, fifo);
  g_free (stdio[2]);
  stdio[2] = g_strdup (file);
  g_assert_true (shimwatch_stdio_prepare (stdio, task_dir, &error));
  g_assert_cmpstr (stdio[1], ==, fifo);
  g_assert_cmpstr (stdio[2], ==, file);
  g_assert_false (g_file_test (link, G_FILE_TEST_EXISTS | G_FILE_TEST_IS_SYMLINK));

  for (guint i = 0; i < 3; i++)
    g_free (stdio[i]);
  g_unlink (fifo);
  g_unlink (file);
  g_rmdir (task_dir);
  shimwatch_test_dir_remove (dir);
}

static void
test_error_names (void)
{
  const char *names[] = { "Failed", "InvalidArgument", "NotFound", "AlreadyExists", "BadState",
                          "NotAuthorized", "NotAuthorizedCanObtain", "ShimFailed", "Busy",
                          "NotSupported" };

  g_assert_cmpuint (G_N_ELEMENTS (names), ==, SHIMWATCH_N_ERRORS);

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
  g_autofree char *root = shimwatch_test_dir_new (NULL, "swrm-XXXXXX", NULL);
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
  shimwatch_test_dir_remove (root);
}

/* a `sleep` in @dir, killed by its PID whatever ends the test: a failed assertion's abort
 * (shimwatch_test_child_add()) as well as its end. Not on the test's output: one that
 * outlived it would hold the pipe of meson (or GLib's, in a g_test_trap_subprocess()
 * child) open. */
static GPid
spawn_sleep (const char *dir)
{
  const char *argv[] = { "sleep", "1000", NULL };
  GPid pid = 0;

  g_assert_true (g_spawn_async (dir, (char **) argv, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                                G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL, NULL,
                                NULL, &pid, NULL));
  shimwatch_test_child_add (pid);
  return pid;
}

static void
test_kill_processes_in (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swkill-XXXXXX", NULL);
  g_autofree char *elsewhere = shimwatch_test_dir_new (NULL, "swkeep-XXXXXX", NULL);
  siginfo_t info = { 0 };
  GPid inside = spawn_sleep (dir);
  GPid outside = spawn_sleep (elsewhere);
  int status;

  g_assert_cmpuint (shimwatch_cleanup_kill_processes_in (dir), ==, 1);
  status = shimwatch_test_child_wait (inside);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGKILL);
  /* still running (looked at without reaping it) */
  g_assert_no_errno (waitid (P_PID, (id_t) outside, &info, WEXITED | WNOHANG | WNOWAIT));
  g_assert_cmpint (info.si_pid, ==, 0);
  shimwatch_test_child_kill (outside);
  shimwatch_test_dir_remove (dir);
  shimwatch_test_dir_remove (elsewhere);
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
 * watches and a receiver that reads the records, as a restarted service would, when a
 * signal arrives */
typedef struct
{
  char            *records_dir;
  GDBusConnection *sender;
  GDBusConnection *receiver;
  int              n_received;          /* atomic: set in the receiver's worker */
  int              marked_on_arrival;   /* atomic */
  char            *ns_dir;
  ShimwatchSignalLedger *ledger;
  ShimwatchRecordCommitter *committer;
  ShimwatchCommitQueue *queue;          /* the committer's */
  guint            filter;
  GPtrArray       *settled;             /* "member sent|unsent[ marked]" */
  GMutex           lock;
  GPtrArray       *received;            /* "member marked|unmarked", under lock */
  gboolean         removed;             /* the test removed the record of ns/t1 */
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

/* what a restarted service reads: the one record of ns/t1 */
static ShimwatchRecord *
load_record (const char *records_dir)
{
  g_autoptr(GPtrArray) broken = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) records = shimwatch_records_load (records_dir, broken);

  g_assert_cmpuint (broken->len, ==, 0);
  g_assert_cmpuint (records->len, ==, 1);
  return g_ptr_array_steal_index (records, 0);
}

/* the flag a signal sets in the record */
static gboolean
signal_flag (const ShimwatchRecord *record,
             const char            *member)
{
  if (g_str_equal (member, "TaskExit"))
    return record->exit_emitted;
  if (g_str_equal (member, "TaskDelete"))
    return record->delete_emitted;
  g_assert_cmpstr (member, ==, "ShimDisconnected");
  return record->disconnected;
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

/* the receiver's worker thread, as soon as a message is read off the socket */
static GDBusMessage *
on_ledger_message (GDBusConnection *connection,
                   GDBusMessage    *message,
                   gboolean         incoming,
                   gpointer         user_data)
{
  LedgerFixture *f = user_data;
  const char *member = g_dbus_message_get_member (message);
  GVariant *body = g_dbus_message_get_body (message);
  const char *subject;

  if (!incoming || g_dbus_message_get_message_type (message) != G_DBUS_MESSAGE_TYPE_SIGNAL ||
      g_strcmp0 (g_dbus_message_get_interface (message), LEDGER_IFACE) != 0)
    return message;
  g_variant_get_child (body, 0, "&o", &subject);
  if (g_str_equal (subject, LEDGER_SUBJECT) && !g_str_equal (member, "TaskStart"))
    {
      /* what a restart would believe, read without the loader's tidying up (the
       * service is alive and writing) */
      g_autofree char *path = shimwatch_records_path (f->records_dir, "ns", "t1");
      g_autofree char *marks_path = shimwatch_marks_path (f->records_dir, "ns", "t1");
      g_autofree char *text = NULL;
      g_autofree char *marks_text = NULL;
      g_autoptr(ShimwatchRecord) record = NULL;
      ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS];
      gsize length;
      gboolean sent;

      g_assert_true (g_file_get_contents (path, &text, &length, NULL));
      record = shimwatch_wire_decode_record (text, length, NULL);
      g_assert_nonnull (record);
      g_assert_true (g_file_get_contents (marks_path, &marks_text, &length, NULL));
      g_assert_true (shimwatch_marks_decode ((const guint8 *) marks_text, length, marks, NULL,
                                             NULL));
      shimwatch_marks_apply (record, marks);
      sent = signal_flag (record, member) &&
             (g_strcmp0 (record->pending_signal, member) != 0 || record->pending_sent);
      g_atomic_int_set (&f->marked_on_arrival, sent);
      g_mutex_lock (&f->lock);
      g_ptr_array_add (f->received, g_strdup_printf ("%s %s", member,
                                                     sent ? "marked" : "unmarked"));
      g_mutex_unlock (&f->lock);
    }
  g_atomic_int_inc (&f->n_received);
  return message;
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

  /* "tmpfs": where production keeps its records (/run); else wherever TMPDIR is, always
   * with syncs, which these tests hold up */
  if (g_strcmp0 (data, "tmpfs") == 0)
    f->records_dir = shimwatch_test_dir_new ("/dev/shm", "swledger-XXXXXX", NULL);
  else
    f->records_dir = shimwatch_test_dir_new (NULL, "swledger-XXXXXX", NULL);
  g_assert_nonnull (f->records_dir);
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
  g_dbus_connection_add_filter (f->receiver, on_ledger_message, f, NULL);
  f->ns_dir = g_build_filename (f->records_dir, "ns", NULL);
  f->ledger = shimwatch_signal_ledger_new (LEDGER_IFACE);
  f->filter = shimwatch_signal_ledger_attach (f->ledger, f->sender);
  f->committer = shimwatch_record_committer_new (f->records_dir, f->ledger);
  shimwatch_record_committer_set_connection (f->committer, f->sender);
  f->queue = shimwatch_record_committer_get_queue (f->committer);
  if (g_strcmp0 (data, "tmpfs") != 0)
    shimwatch_commit_queue_set_volatile (f->queue, FALSE);
  f->settled = g_ptr_array_new_with_free_func (g_free);
  g_mutex_init (&f->lock);
  f->received = g_ptr_array_new_with_free_func (g_free);
}

static void
ledger_teardown (LedgerFixture *f,
                 gconstpointer  data)
{
  g_dbus_connection_remove_filter (f->sender, f->filter);
  g_clear_pointer (&f->committer, shimwatch_record_committer_free);
  g_clear_pointer (&f->ledger, shimwatch_signal_ledger_unref);
  g_ptr_array_unref (f->settled);
  g_ptr_array_unref (f->received);
  g_mutex_clear (&f->lock);
  g_free (f->ns_dir);
  g_dbus_connection_close_sync (f->sender, NULL, NULL);
  g_clear_object (&f->sender);
  g_clear_object (&f->receiver);
  if (!f->removed)
    g_assert_true (shimwatch_records_remove (f->records_dir, "ns", "t1", NULL));
  g_assert_cmpint (g_rmdir (f->records_dir), ==, 0);
  shimwatch_test_dir_remove (f->records_dir);
  g_free (f->records_dir);
}

/* the record as it is to be once @member went out: exit known, the flags set */
static void
signal_record (ShimwatchRecord *record,
               const char      *member)
{
  base_record (record);
  record->status = (char *) "stopped";
  record->disconnected = TRUE;
  record->exit_known = !g_str_equal (member, "ShimDisconnected");
  record->exit_emitted = record->exit_known;
  record->exit.pid = 42;
  record->exit.exit_status = 137;
  record->delete_emitted = g_str_equal (member, "TaskDelete");
  record->pending_signal = (char *) member;
}

static ShimwatchRecordCommit *
prepare_record (LedgerFixture *f,
                const char    *member)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *path = shimwatch_marks_path (f->records_dir, "ns", "t1");
  g_autoptr(ShimwatchMarksFile) marks = shimwatch_marks_file_open (path, f->queue, &error);
  ShimwatchLifecycleSignal signal = shimwatch_lifecycle_signal_from_member (member);
  ShimwatchRecord record = { 0 };
  ShimwatchMark mark;
  ShimwatchRecordCommit *commit;

  g_assert_no_error (error);
  signal_record (&record, member);
  g_assert_true (shimwatch_mark_from_record (&mark, &record, SHIMWATCH_MARK_PENDING,
                                             shimwatch_marks_file_next_seq (marks)));
  commit = shimwatch_records_prepare_mark (marks, shimwatch_lifecycle_signal_to_slot (signal),
                                           &mark, f->queue);
  g_assert_nonnull (commit);
  return commit;
}

/* no flush: the ledger may hold the message, and the main thread must not wait for it */
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
}

static void
on_settled (const char            *member,
            const char            *subject,
            gboolean               sent,
            ShimwatchRecordCommit *commit,
            gpointer               user_data)
{
  LedgerFixture *f = user_data;

  g_ptr_array_add (f->settled, g_strdup_printf ("%s %s%s", member, sent ? "sent" : "unsent",
                                                commit != NULL ? " marked" : ""));
  shimwatch_record_commit_free (commit);
}

/* the ledger expects @member of the fixture's task, with its pending mark made */
static void
expect_marked (LedgerFixture *f,
               const char    *member)
{
  shimwatch_signal_ledger_expect (f->ledger, member, LEDGER_SUBJECT, on_settled, f, NULL);
  shimwatch_signal_ledger_set_commit (f->ledger, member, LEDGER_SUBJECT,
                                      prepare_record (f, member));
}

static gboolean
timeout_cb (gpointer user_data)
{
  *(gboolean *) user_data = TRUE;
  return G_SOURCE_REMOVE;
}

/* runs the main loop for @ms, or until @until (may be NULL) holds */
static gboolean
iterate (guint       ms,
         gboolean  (*until) (LedgerFixture *f),
         LedgerFixture *f)
{
  gint64 deadline = g_get_monotonic_time () + ms * G_TIME_SPAN_MILLISECOND;

  /* other threads change what @until looks at without waking the main context */
  while (g_get_monotonic_time () < deadline && (until == NULL || !until (f)))
    {
      gboolean woken = FALSE;
      guint id = g_timeout_add (10, timeout_cb, &woken);

      g_main_context_iteration (NULL, TRUE);
      if (!woken)
        g_source_remove (id);
    }
  return until == NULL || until (f);
}

/* -- a bus that does not read ------------------------------------------------------------ */

#define ROOM_PAIRS        64
#define ROOM_FILLER_BYTES (16 * 1024)

/* @user_data: the subjects settled as sent, in the order they settled */
static void
on_room_settled (const char            *member,
                 const char            *subject,
                 gboolean               sent,
                 ShimwatchRecordCommit *commit,
                 gpointer               user_data)
{
  if (sent)
    g_ptr_array_add (user_data, g_strdup (subject));
  shimwatch_record_commit_free (commit);
}

/* the ledger's warnings once the connection closed: only "not written" ones, counted */
static void
on_room_warning (const char     *domain,
                 GLogLevelFlags  level,
                 const char     *message,
                 gpointer        user_data)
{
  g_assert_nonnull (strstr (message, " was not written to the bus"));
  (*(guint *) user_data)++;
}

/* one line of the client's SASL exchange, without its "\r\n" (and the leading NUL byte) */
static char *
read_auth_line (int fd)
{
  GString *line = g_string_new (NULL);

  for (;;)
    {
      char c;
      ssize_t n = read (fd, &c, 1);

      g_assert_cmpint (n, ==, 1);
      if (c == '\0' && line->len == 0)
        continue;
      if (c == '\n' && line->len > 0 && line->str[line->len - 1] == '\r')
        {
          g_string_truncate (line, line->len - 1);
          return g_string_free (line, FALSE);
        }
      g_string_append_c (line, c);
    }
}

static void
write_auth_line (int         fd,
                 const char *line)
{
  g_autofree char *text = g_strconcat (line, "\r\n", NULL);

  g_assert_cmpint (write (fd, text, strlen (text)), ==, (gssize) strlen (text));
}

/* The server's side of the D-Bus authentication, by hand on @fd: afterwards nothing
 * reads the socket unless the test does */
static void
accept_auth (int fd)
{
  for (;;)
    {
      g_autofree char *line = read_auth_line (fd);

      if (g_str_equal (line, "BEGIN"))
        return;
      if (g_str_equal (line, "NEGOTIATE_UNIX_FD"))
        write_auth_line (fd, "AGREE_UNIX_FD");
      else if (g_str_has_prefix (line, "AUTH EXTERNAL") ||
               g_str_has_prefix (line, "AUTH ANONYMOUS"))
        write_auth_line (fd, "OK 0123456789abcdef0123456789abcdef");
      else
        write_auth_line (fd, "REJECTED EXTERNAL ANONYMOUS");
    }
}

/* A signal the ledger calls sent is in the socket: GDBus writes it right after the mark,
 * with no wait for the bus to make room. A bus that does not read fills the socket;
 * then, after each big untracked message, the next small lifecycle signal would find no
 * room and wait, its mark saying "sent": a SIGKILL of the service there (here: the
 * connection closed) loses it for good. Every signal settled as sent before the close
 * must reach the peer. */
static void
test_ledger_sent_means_in_the_socket (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GSocket) socket = NULL;
  g_autoptr(GSocketConnection) stream = NULL;
  g_autoptr(GDBusConnection) sender = NULL;
  g_autoptr(GByteArray) received = g_byte_array_new ();
  g_autofree char *filler = g_malloc (ROOM_FILLER_BYTES + 1);
  ShimwatchSignalLedger *ledger;
  g_autoptr(GPtrArray) sent = g_ptr_array_new_with_free_func (g_free);
  guint filter;
  guint handler;
  guint n_sent;
  guint n_unsent = 0;
  int fds[2];

  memset (filler, 'x', ROOM_FILLER_BYTES);
  filler[ROOM_FILLER_BYTES] = '\0';
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), ==, 0);
  socket = g_socket_new_from_fd (fds[0], &error);
  g_assert_no_error (error);
  stream = g_socket_connection_factory_create_connection (socket);
  g_dbus_connection_new (G_IO_STREAM (stream), NULL,
                         G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT, NULL, NULL,
                         on_server_connection, &sender);
  accept_auth (fds[1]);
  while (sender == NULL)
    g_main_context_iteration (NULL, TRUE);

  ledger = shimwatch_signal_ledger_new (LEDGER_IFACE);
  filter = shimwatch_signal_ledger_attach (ledger, sender);
  for (guint i = 0; i < ROOM_PAIRS; i++)
    {
      g_autofree char *subject = g_strdup_printf ("/org/shimwatch/Shimwatch1/shims/ns/t%04u",
                                                  i);
      g_autofree char *other = g_strdup_printf ("/org/shimwatch/Shimwatch1/shims/ns/f%04u", i);

      g_dbus_connection_emit_signal (sender, NULL, "/org/shimwatch/Shimwatch1", LEDGER_IFACE,
                                     "Filler", g_variant_new ("(os)", other, filler), &error);
      g_assert_no_error (error);
      shimwatch_signal_ledger_expect (ledger, "TaskExit", subject, on_room_settled, sent,
                                      NULL);
      shimwatch_signal_ledger_set_commit (ledger, "TaskExit", subject, NULL);
      g_dbus_connection_emit_signal (sender, NULL, "/org/shimwatch/Shimwatch1", LEDGER_IFACE,
                                     "TaskExit",
                                     g_variant_new ("(osssuut)", subject, "ns", "t1", "t1", 42,
                                                    137, (guint64) 1),
                                     &error);
      g_assert_no_error (error);
    }
  /* the socket fills: GDBus's worker waits for room. What settled by then is judged. */
  for (guint previous = G_MAXUINT, rounds = 0;
       (sent->len != previous || sent->len == 0) && rounds < 100; rounds++)
    {
      previous = sent->len;
      iterate (300, NULL, NULL);
    }
  n_sent = sent->len;
  g_assert_cmpuint (n_sent, >, 0);
  g_assert_cmpuint (n_sent, <, ROOM_PAIRS);
  g_dbus_connection_close (sender, NULL, NULL, NULL);
  /* the peer reads all it is given, until the close */
  for (;;)
    {
      guint8 buffer[65536];
      ssize_t n = read (fds[1], buffer, sizeof buffer);

      g_assert_cmpint (n, >=, 0);
      if (n == 0)
        break;
      g_byte_array_append (received, buffer, n);
    }
  for (guint i = 0; i < n_sent; i++)
    {
      const char *subject = sent->pdata[i];
      gsize length = strlen (subject) + 1;    /* an object path is sent with its NUL */
      gboolean found = FALSE;

      for (gsize at = 0; !found && at + length <= received->len; at++)
        found = memcmp (received->data + at, subject, length) == 0;
      if (!found)
        g_error ("%s was settled as sent (%u of %u were) but never reached the peer", subject,
                 i + 1, n_sent);
    }

  /* what was still queued at the close was not written, and is said so: its record keeps
   * saying "pending" */
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  handler = g_log_set_handler ("ShimwatchLedger", G_LOG_LEVEL_WARNING, on_room_warning,
                               &n_unsent);
  g_dbus_connection_remove_filter (sender, filter);
  iterate (200, NULL, NULL);
  g_log_remove_handler ("ShimwatchLedger", handler);
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  g_assert_cmpuint (n_unsent + sent->len, <=, ROOM_PAIRS);
  shimwatch_signal_ledger_unref (ledger);
  close (fds[1]);
}

#ifdef SHIMWATCH_TEST_HOOKS
static gboolean
has_three_received (LedgerFixture *f)
{
  return g_atomic_int_get (&f->n_received) >= 3;
}
#endif

/* all four signals a round of /service/ledger/marks-when-durable emits */
#ifdef SHIMWATCH_TEST_HOOKS
static gboolean
has_four_received (LedgerFixture *f)
{
  return g_atomic_int_get (&f->n_received) >= 4;
}
#endif

static gboolean
has_settled (LedgerFixture *f)
{
  return f->settled->len > 0;
}

static gboolean
committer_idle (LedgerFixture *f)
{
  return shimwatch_record_committer_is_idle (f->committer);
}

/* Group commit: the filter holds a signal until its record is durable, and only then
 * marks it; the main thread never waits */
#ifdef SHIMWATCH_TEST_HOOKS  /* the commit queue's hold and counters */
static void
test_ledger_marks_when_durable (LedgerFixture *f,
                                gconstpointer  data)
{
  const char *members[] = { "TaskExit", "TaskDelete" };

  for (guint i = 0; i < G_N_ELEMENTS (members); i++)
    {
      guint64 batches = shimwatch_commit_queue_get_n_batches (f->queue);

      g_atomic_int_set (&f->n_received, 0);
      g_ptr_array_set_size (f->settled, 0);
      g_mutex_lock (&f->lock);
      g_ptr_array_set_size (f->received, 0);
      g_mutex_unlock (&f->lock);
      shimwatch_commit_queue_set_held (f->queue, TRUE);
      expect_marked (f, members[i]);
      /* written, not yet sent: a restart would send it */
      {
        g_autoptr(ShimwatchRecord) record = load_record (f->records_dir);

        g_assert_false (signal_flag (record, members[i]));
        g_assert_true (record->exit_known);
        g_assert_cmpuint (record->exit.exit_status, ==, 137);
        /* the record and its marks */
        g_assert_cmpuint (count_files (f->ns_dir), ==, 2);
      }
      /* another task's signal and another signal of this task go out unheld; ours
       * waits for the disk, and so does what follows it */
      emit_signal (f, members[i], "/org/shimwatch/Shimwatch1/shims/ns/other");
      emit_signal (f, "TaskStart", LEDGER_SUBJECT);
      emit_signal (f, members[i], LEDGER_SUBJECT);
      emit_signal (f, "TaskStart", "/org/shimwatch/Shimwatch1/shims/ns/other");
      /* (the receiver shares GDBus's worker thread, which the filter holds: it may not
       * even read the two that went out) */
      g_assert_false (iterate (300, has_three_received, f));
      g_mutex_lock (&f->lock);
      g_assert_cmpuint (f->received->len, ==, 0);
      g_mutex_unlock (&f->lock);
      g_assert_cmpuint (f->settled->len, ==, 0);
      {
        g_autoptr(ShimwatchRecord) record = load_record (f->records_dir);

        g_assert_false (signal_flag (record, members[i]));
      }
      /* synced: marked, then written; whoever receives it finds the mark */
      shimwatch_commit_queue_set_held (f->queue, FALSE);
      g_assert_true (iterate (10000, has_settled, f));
      {
        g_autofree char *expected = g_strdup_printf ("%s sent marked", members[i]);

        g_assert_cmpstr (f->settled->pdata[0], ==, expected);
      }
      /* all four, the one after ours too: one still on its way when the next round sets
       * the count to 0 would count as that round's, a third with its two unheld ones */
      g_assert_true (iterate (10000, has_four_received, f));
      g_assert_true (g_atomic_int_get (&f->marked_on_arrival));
      g_assert_cmpuint (shimwatch_commit_queue_get_n_batches (f->queue), ==, batches + 1);
      {
        g_autoptr(ShimwatchRecord) record = load_record (f->records_dir);

        g_assert_true (signal_flag (record, members[i]));
        g_assert_true (record->pending_sent);
      }
    }
}
#endif

static void
test_ledger_unsent_reads_unsent (LedgerFixture *f,
                                 gconstpointer  data)
{
  /* emitted on a closed connection: never written, settled as such */
  expect_marked (f, "ShimDisconnected");
  g_assert_true (g_dbus_connection_close_sync (f->sender, NULL, NULL));
  g_dbus_connection_emit_signal (f->sender, NULL, "/org/shimwatch/Shimwatch1", LEDGER_IFACE,
                                 "ShimDisconnected",
                                 g_variant_new ("(ossu)", LEDGER_SUBJECT, "ns", "t1", 41),
                                 NULL);
  g_test_expect_message ("ShimwatchLedger", G_LOG_LEVEL_WARNING,
                         "ShimDisconnected of * not written*");
  g_assert_true (iterate (10000, has_settled, f));
  g_test_assert_expected_messages ();
  g_assert_cmpstr (f->settled->pdata[0], ==, "ShimDisconnected unsent marked");

  /* expected after the close: settled at once */
  shimwatch_signal_ledger_expect (f->ledger, "TaskExit", LEDGER_SUBJECT, on_settled, f, NULL);
  g_test_expect_message ("ShimwatchLedger", G_LOG_LEVEL_WARNING, "TaskExit of * not written*");
  iterate (200, NULL, f);
  g_test_assert_expected_messages ();
  g_assert_cmpuint (f->settled->len, ==, 2);
  g_assert_cmpstr (f->settled->pdata[1], ==, "TaskExit unsent");

  /* the record says "not sent", so a restart sends it; no temp file is left */
  {
    g_autoptr(ShimwatchRecord) record = load_record (f->records_dir);

    g_assert_false (record->disconnected);
    g_assert_cmpstr (record->pending_signal, ==, "ShimDisconnected");
    g_assert_cmpuint (count_files (f->ns_dir), ==, 2);
  }
  g_assert_cmpint (g_atomic_int_get (&f->n_received), ==, 0);
}

#ifdef SHIMWATCH_TEST_HOOKS
#define HALT_STEP "ledger-halt-test"

/* The child of test_ledger_crash_point_stops_later_marks: a signal goes out, its crash
 * point is asked for, and another signal is sent right after */
static void
test_ledger_crash_point_child (LedgerFixture *f,
                               gconstpointer  data)
{
  expect_marked (f, "ShimDisconnected");
  emit_signal (f, "ShimDisconnected", LEDGER_SUBJECT);
  g_assert_true (iterate (10000, has_settled, f));
  g_assert_cmpstr (f->settled->pdata[0], ==, "ShimDisconnected sent marked");
  /* as the record committer does once a signal settled: the crash comes after the write */
  shimwatch_signal_ledger_crash_point_after_write (f->ledger, HALT_STEP);
  expect_marked (f, "TaskExit");
  emit_signal (f, "TaskExit", LEDGER_SUBJECT);
  iterate (10000, NULL, f);
  g_assert_not_reached ();
}

/* A crash point after a signal went out lets no later signal be marked sent. Marked
 * right before GDBus's write, a later signal could be marked and not yet written when
 * the crash point, reached on the main thread once the flush is done, kills the
 * service: then it is lost for good, its mark saying it went out (seen in the crash
 * point tests, with GDBus's worker preempted between the two). The child is SIGKILLed
 * at the crash point, so that its records stay for this test to read, as a restart
 * would. */
static void
test_ledger_crash_point_stops_later_marks (void)
{
  g_autofree char *tmp = shimwatch_test_dir_new (NULL, "swhalt-XXXXXX", NULL);
  g_autofree char *old_tmp = g_strdup (g_getenv ("TMPDIR"));
  g_autoptr(GDir) dir = NULL;
  g_autofree char *records_dir = NULL;
  g_autoptr(ShimwatchRecord) record = NULL;
  const char *name;

  g_assert_nonnull (tmp);
  /* the child's records in here (its fixture's directory is made in TMPDIR) */
  g_setenv ("TMPDIR", tmp, TRUE);
  g_setenv ("SHIMWATCH_TEST_CRASH_AT", HALT_STEP, TRUE);
  g_setenv ("SHIMWATCH_TEST_CRASH_SIGNAL", "KILL", TRUE);
  g_test_trap_subprocess ("/service/ledger/crash-point-stops-later-marks/subprocess",
                          60 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("SHIMWATCH_TEST_CRASH_SIGNAL");
  g_unsetenv ("SHIMWATCH_TEST_CRASH_AT");
  if (old_tmp != NULL)
    g_setenv ("TMPDIR", old_tmp, TRUE);
  else
    g_unsetenv ("TMPDIR");
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*crash point " HALT_STEP " reached, SIGKILL*");

  dir = g_dir_open (tmp, 0, NULL);
  g_assert_nonnull (dir);
  while ((name = g_dir_read_name (dir)) != NULL)
    if (g_str_has_prefix (name, "swledger-"))
      records_dir = g_build_filename (tmp, name, NULL);
  g_assert_nonnull (records_dir);
  /* what a restart finds: the first signal sent, the second still to send */
  record = load_record (records_dir);
  g_assert_true (record->disconnected);
  g_assert_false (record->exit_emitted);
  shimwatch_test_dir_remove (tmp);
}
#endif

static gboolean
count_cb (gpointer user_data)
{
  (*(guint *) user_data)++;
  return G_SOURCE_REMOVE;
}

/* A turn's batch goes to the commit thread as the turn ends, before the loop polls again:
 * it costs no main-loop iteration of its own, and what else is ready is not held back by
 * one. (Handed over from a G_PRIORITY_HIGH source's dispatch, it took the next iteration
 * alone: a ready source of the highest priority is dispatched without the others.) */
static void
test_commit_no_iteration_of_its_own (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swcommit-XXXXXX", &error);
  g_autofree char *path = NULL;
  g_autoptr(ShimwatchCommitQueue) queue = shimwatch_commit_queue_new (NULL);
  g_autoptr(ShimwatchCommitTicket) ticket = NULL;
  gint64 deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  guint ran = 0;
  int fd;

  g_assert_no_error (error);
  shimwatch_commit_queue_set_volatile (queue, FALSE);
  while (g_main_context_iteration (NULL, FALSE))
    ;
  /* a turn that writes a file, and has something else ready for the next */
  path = g_build_filename (dir, "record", NULL);
  fd = open (path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (write (fd, "x", 1), ==, 1);
  ticket = shimwatch_commit_queue_add (queue, fd, dir, NULL, NULL);
  g_idle_add (count_cb, &ran);

  /* one iteration: the idle runs, and the batch has gone to the thread, which syncs it
   * with no more iteration of the loop */
  g_main_context_iteration (NULL, FALSE);
  g_assert_cmpuint (ran, ==, 1);
  while (!shimwatch_commit_ticket_is_settled (ticket) && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  g_assert_true (shimwatch_commit_ticket_is_settled (ticket));
  g_assert_cmpuint (shimwatch_commit_ticket_get_batch (ticket), ==, 1);
  g_assert_false (g_main_context_pending (NULL));

  g_clear_pointer (&queue, shimwatch_commit_queue_free);
  g_assert_no_errno (g_unlink (path));
  g_assert_no_errno (g_rmdir (dir));
  shimwatch_test_dir_remove (dir);
}

/* every record written in one turn of the main loop: one batch, each file synced once,
 * their directory once */
#ifdef SHIMWATCH_TEST_HOOKS  /* the commit queue's hold and counters */
static void
test_commit_one_batch_per_turn (LedgerFixture *f,
                                gconstpointer  data)
{
  guint64 batches = shimwatch_commit_queue_get_n_batches (f->queue);
  guint64 syncs = shimwatch_commit_queue_get_n_syncs (f->queue);
  const char *ids[] = { "b1", "b2", "b3", "b4" };

  iterate (50, NULL, f);
  batches = shimwatch_commit_queue_get_n_batches (f->queue);
  syncs = shimwatch_commit_queue_get_n_syncs (f->queue);
  for (guint i = 0; i < G_N_ELEMENTS (ids); i++)
    {
      g_autoptr(GError) error = NULL;
      ShimwatchRecord record = { 0 };

      base_record (&record);
      record.id = (char *) ids[i];
      g_assert_true (shimwatch_record_committer_save (f->committer, &record, &error));
      g_assert_no_error (error);
    }
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (shimwatch_commit_queue_get_n_batches (f->queue), ==, batches + 1);
  /* 4 records, the 4 marks files made with them, and 1 directory */
  g_assert_cmpuint (shimwatch_commit_queue_get_n_syncs (f->queue), ==, syncs + 9);
  g_assert_cmpuint (count_files (f->ns_dir), ==, 9);

  /* the next turn is the next batch */
  shimwatch_record_committer_remove (f->committer, "ns", "b1");
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (shimwatch_commit_queue_get_n_batches (f->queue), ==, batches + 2);
  g_assert_cmpuint (count_files (f->ns_dir), ==, 7);
  for (guint i = 1; i < G_N_ELEMENTS (ids); i++)
    shimwatch_record_committer_remove (f->committer, "ns", ids[i]);
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (count_files (f->ns_dir), ==, 1);
}
#endif

#ifdef SHIMWATCH_TEST_HOOKS
static gboolean
has_three_settled_and_idle (LedgerFixture *f)
{
  return g_atomic_int_get (&f->n_received) >= 3 && committer_idle (f);
}
#endif

/* the lifecycle of a dead shim's task, in order: for each signal the committer is told
 * its record, then the signal goes out */
#ifdef SHIMWATCH_TEST_HOOKS
static void
expect_and_emit_all (LedgerFixture *f)
{
  const char *members[] = { "ShimDisconnected", "TaskExit", "TaskDelete" };

  for (guint i = 0; i < G_N_ELEMENTS (members); i++)
    {
      g_autoptr(GError) error = NULL;
      ShimwatchRecord record = { 0 };

      signal_record (&record, members[i]);
      g_assert_true (shimwatch_record_committer_expect (f->committer, &record, LEDGER_SUBJECT,
                                                        NULL, &error));
      g_assert_no_error (error);
      emit_signal (f, members[i], LEDGER_SUBJECT);
    }
}
#endif

/* every signal arrived, in order, and found its record saying it was sent */
#ifdef SHIMWATCH_TEST_HOOKS
static void
assert_all_received_marked (LedgerFixture *f)
{
  g_mutex_lock (&f->lock);
  g_assert_cmpuint (f->received->len, ==, 3);
  g_assert_cmpstr (f->received->pdata[0], ==, "ShimDisconnected marked");
  g_assert_cmpstr (f->received->pdata[1], ==, "TaskExit marked");
  g_assert_cmpstr (f->received->pdata[2], ==, "TaskDelete marked");
  g_mutex_unlock (&f->lock);
}
#endif

/* While a task's mark waits for its signal, nothing replaces it: the marks of the
 * signals after it are written in turn, each before its signal is marked, and every
 * signal arrives with its marks saying it was sent. The record itself is not written. */
#ifdef SHIMWATCH_TEST_HOOKS  /* the commit queue's hold and counters */
static void
test_committer_in_order (LedgerFixture *f,
                         gconstpointer  data)
{
  g_autofree char *json_path = shimwatch_records_path (f->records_dir, "ns", "t1");
  g_autofree char *json_before = NULL;
  struct stat st_before;

  /* the marks file, made with the task's first record */
  {
    ShimwatchRecord record = { 0 };

    base_record (&record);
    g_assert_true (shimwatch_record_committer_save (f->committer, &record, NULL));
    g_assert_true (iterate (10000, committer_idle, f));
  }
  g_assert_true (g_file_get_contents (json_path, &json_before, NULL, NULL));
  g_assert_cmpint (stat (json_path, &st_before), ==, 0);

  shimwatch_commit_queue_set_held (f->queue, TRUE);
  expect_and_emit_all (f);
  /* one turn later: the first mark is there, unsynced; the others wait for it */
  iterate (300, NULL, f);
  g_assert_cmpint (g_atomic_int_get (&f->n_received), ==, 0);
  {
    g_autoptr(ShimwatchRecord) record = load_record (f->records_dir);

    g_assert_cmpstr (record->pending_signal, ==, "ShimDisconnected");
    g_assert_false (record->pending_sent);
    g_assert_false (record->disconnected);
    g_assert_false (record->exit_emitted);
  }
  shimwatch_commit_queue_set_held (f->queue, FALSE);
  g_assert_true (iterate (10000, has_three_settled_and_idle, f));
  assert_all_received_marked (f);
  {
    g_autoptr(ShimwatchRecord) record = load_record (f->records_dir);

    g_assert_true (record->disconnected && record->exit_emitted && record->delete_emitted);
    g_assert_true (record->pending_sent);
    g_assert_cmpstr (record->status, ==, "stopped");
    g_assert_cmpuint (record->exit.exit_status, ==, 137);
  }
  /* the signals were marked, the record itself never written again: same file, same text */
  {
    g_autofree char *json_after = NULL;
    struct stat st_after;

    g_assert_true (g_file_get_contents (json_path, &json_after, NULL, NULL));
    g_assert_cmpint (stat (json_path, &st_after), ==, 0);
    g_assert_cmpstr (json_after, ==, json_before);
    g_assert_cmpuint (st_after.st_ino, ==, st_before.st_ino);
  }
  /* one batch per mark at most: each waited for the signal before it */
  g_assert_cmpuint (shimwatch_commit_queue_get_n_batches (f->queue), <=, 3 + 3);

  /* gone once TaskDelete is marked sent, without a flush of the connection (GDBus writes
   * it next; a restart would not send it again) */
  shimwatch_record_committer_remove (f->committer, "ns", "t1");
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (count_files (f->ns_dir), ==, 0);
  g_assert_cmpuint (shimwatch_record_committer_get_n_flushes (f->committer), ==, 0);
  f->removed = TRUE;
}
#endif

/* a TaskDelete that did not go out keeps its record, saying so, for the next start */
static void
test_committer_unsent_keeps_record (LedgerFixture *f,
                                    gconstpointer  data)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };

  g_assert_true (g_dbus_connection_close_sync (f->sender, NULL, NULL));
  signal_record (&record, "TaskDelete");
  g_assert_true (shimwatch_record_committer_expect (f->committer, &record, LEDGER_SUBJECT, NULL,
                                                    &error));
  g_dbus_connection_emit_signal (f->sender, NULL, "/org/shimwatch/Shimwatch1", LEDGER_IFACE,
                                 "TaskDelete",
                                 g_variant_new ("(osssuut)", LEDGER_SUBJECT, "ns", "t1", "t1",
                                                42, 137, (guint64) 1), NULL);
  shimwatch_record_committer_remove (f->committer, "ns", "t1");
  g_test_expect_message ("ShimwatchLedger", G_LOG_LEVEL_WARNING, "TaskDelete of * not written*");
  /* (the committer's "task record kept" warning is a structured one, which
   * g_test_expect_message() does not see: not fatal here) */
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  g_assert_true (iterate (10000, committer_idle, f));
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  g_test_assert_expected_messages ();
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (f->records_dir);

    g_assert_false (loaded->delete_emitted);
    g_assert_cmpstr (loaded->pending_signal, ==, "TaskDelete");
  }
}

/* Records on a tmpfs (/run) do not outlive the machine: nothing is synced, and no signal
 * waits for the commit thread, which may be held for good here. Each signal still goes
 * out with its record marked sent, in order. */
#ifdef SHIMWATCH_TEST_HOOKS  /* the commit queue's hold and counters */
static void
test_committer_tmpfs_does_not_wait (LedgerFixture *f,
                                    gconstpointer  data)
{
  if (!shimwatch_commit_path_is_volatile (f->records_dir))
    {
      g_test_skip ("/dev/shm is not a tmpfs here");
      return;
    }
  g_assert_true (shimwatch_commit_queue_is_volatile (f->queue));
  g_assert_false (shimwatch_commit_path_is_volatile ("/proc"));
  shimwatch_commit_queue_set_held (f->queue, TRUE);
  expect_and_emit_all (f);
  g_assert_true (iterate (10000, has_three_received, f));
  assert_all_received_marked (f);

  shimwatch_record_committer_remove (f->committer, "ns", "t1");
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (count_files (f->ns_dir), ==, 0);
  f->removed = TRUE;
  /* the held thread never got anything to sync */
  g_assert_cmpuint (shimwatch_commit_queue_get_n_batches (f->queue), ==, 0);
  g_assert_cmpuint (shimwatch_commit_queue_get_n_syncs (f->queue), ==, 0);
  shimwatch_commit_queue_set_held (f->queue, FALSE);
}
#endif

/* -- the namespace's directory of records: one rmdir, with its last record ---------------- */

static volatile gint n_rmdirs;

#if defined(__x86_64__) && defined(__NR_rmdir)
/* SIGSYS of the seccomp filter: rmdir(2) counted, and done as unlinkat(AT_REMOVEDIR) */
static void
count_rmdir (int        sig,
             siginfo_t *info,
             void      *context)
{
  ucontext_t *uc = context;
  int saved_errno = errno;
  long result;

  n_rmdirs++;
  result = syscall (__NR_unlinkat, AT_FDCWD, (const char *) uc->uc_mcontext.gregs[REG_RDI],
                    AT_REMOVEDIR);
  uc->uc_mcontext.gregs[REG_RAX] = result < 0 ? -errno : result;
  errno = saved_errno;
}
#endif

static void
save_task (LedgerFixture *f,
           const char    *id)
{
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };

  base_record (&record);
  record.id = (char *) id;
  g_assert_true (shimwatch_record_committer_save (f->committer, &record, &error));
  g_assert_no_error (error);
}

#ifdef SHIMWATCH_TEST_MALLOC_COUNT
#define N_SIGNAL_TASKS 8
#define PER_SIGNAL_MAX 14

static gboolean
all_received (LedgerFixture *f)
{
  return g_atomic_int_get (&f->n_received) >= N_SIGNAL_TASKS &&
         shimwatch_record_committer_is_idle (f->committer);
}

/* What a lifecycle signal of a task costs the record committer and the ledger on the
 * main thread, in allocations, as its mark is handed over: TaskExit and TaskDelete at
 * each death, and ShimDisconnected. The committer's state of the task is made for each
 * mark and dropped once the mark is handed over: its key, namespace, id and the record's
 * path were 5 allocations each time (and the key once more to look it up), and the
 * signal's name and crash point were copied; now its strings are one block with it, the
 * path is made only for a record written, and the name and crash point are static:
 * 19 allocations per signal before, 12 now (GLib 2.74). */
static void
test_committer_signal_allocations (LedgerFixture *f,
                                   gconstpointer  data)
{
  char ids[N_SIGNAL_TASKS][8];
  char subjects[N_SIGNAL_TASKS][64];
  ShimwatchRecord records[N_SIGNAL_TASKS] = { 0 };
  guint before;
  guint per_signal;

  for (guint i = 0; i < N_SIGNAL_TASKS; i++)
    {
      g_snprintf (ids[i], sizeof ids[i], "a%u", i);
      g_snprintf (subjects[i], sizeof subjects[i], "/org/shimwatch/Shimwatch1/shims/ns/%s",
                  ids[i]);
      save_task (f, ids[i]);
      signal_record (&records[i], "TaskExit");
      records[i].id = ids[i];
    }
  g_assert_true (iterate (10000, committer_idle, f));

  before = n_mallocs;
  malloc_counting = TRUE;
  for (guint i = 0; i < N_SIGNAL_TASKS; i++)
    shimwatch_record_committer_expect (f->committer, &records[i], subjects[i], "exit-emitted",
                                       NULL);
  malloc_counting = FALSE;
  per_signal = (n_mallocs - before) / N_SIGNAL_TASKS;

  /* the signals go out and settle; the tasks go */
  for (guint i = 0; i < N_SIGNAL_TASKS; i++)
    emit_signal (f, "TaskExit", subjects[i]);
  g_assert_true (iterate (10000, all_received, f));
  for (guint i = 0; i < N_SIGNAL_TASKS; i++)
    shimwatch_record_committer_remove (f->committer, "ns", ids[i]);
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (count_files (f->ns_dir), ==, 1);     /* ns/t1, the fixture's */

  /* valgrind replaces malloc() wherever it is, this one too: nothing is counted there */
  if (n_mallocs == before)
    {
      g_test_message ("malloc() is not this test's own here (valgrind): nothing counted");
      return;
    }
  g_test_message ("allocations per signal handed to the committer: %u", per_signal);
  g_assert_cmpuint (per_signal, <=, PER_SIGNAL_MAX);
}
#endif

/* The death of a task while another of its namespace lives tried an rmdir of the
 * namespace's directory of records on the main thread, which failed ENOTEMPTY every
 * time. It is tried once, with the last record of the namespace, and then it works. */
static void
test_committer_namespace_dir_once (LedgerFixture *f,
                                   gconstpointer  data)
{
#if defined(__x86_64__) && defined(__NR_rmdir)
  const long rmdir_call[] = { __NR_rmdir };

  if (!shimwatch_test_trap_under_filter (rmdir_call, 1, count_rmdir))
    return;

  save_task (f, "t1");
  save_task (f, "t2");
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (count_files (f->ns_dir), ==, 4);   /* two records, their marks */

  shimwatch_record_committer_remove (f->committer, "ns", "t2");
  g_assert_true (iterate (10000, committer_idle, f));
  g_assert_cmpuint (count_files (f->ns_dir), ==, 2);
  g_assert_cmpint (n_rmdirs, ==, 0);

  shimwatch_record_committer_remove (f->committer, "ns", "t1");
  g_assert_true (iterate (10000, committer_idle, f));
  f->removed = TRUE;
  g_assert_cmpint (n_rmdirs, ==, 1);
  g_assert_false (g_file_test (f->ns_dir, G_FILE_TEST_EXISTS));
#else
  g_test_skip ("the rmdir(2) counter is written for x86_64");
#endif
}

#ifdef SHIMWATCH_TEST_HOOKS
static ShimwatchMarkState
mark_state (LedgerFixture *f,
            const char    *member)
{
  g_autofree char *path = shimwatch_marks_path (f->records_dir, "ns", "t1");
  g_autofree char *data = NULL;
  gsize length;
  ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS];

  g_assert_true (g_file_get_contents (path, &data, &length, NULL));
  g_assert_true (shimwatch_marks_decode ((const guint8 *) data, length, marks, NULL, NULL));
  return marks[shimwatch_lifecycle_signal_to_slot (
    shimwatch_lifecycle_signal_from_member (member))].state;
}
#endif

/* A task's next mark does not wait for the main loop to hear that the signal before it
 * went out: GDBus's thread settled ShimDisconnected, and TaskExit's mark is written as it
 * is asked for, so TaskExit is not held in the filter until the main thread hands its
 * mark over. No main-loop turn between the two here. */
#ifdef SHIMWATCH_TEST_HOOKS  /* the commit queue's hold and counters */
static void
test_committer_takes_settled_at_once (LedgerFixture *f,
                                      gconstpointer  data)
{
  const char *members[] = { "ShimDisconnected", "TaskExit", "TaskDelete" };
  gint64 deadline;

  if (!shimwatch_commit_path_is_volatile (f->records_dir))
    {
      g_test_skip ("/dev/shm is not a tmpfs here");
      return;
    }
  for (guint i = 0; i < G_N_ELEMENTS (members); i++)
    {
      g_autoptr(GError) error = NULL;
      ShimwatchRecord record = { 0 };

      signal_record (&record, members[i]);
      g_assert_true (shimwatch_record_committer_expect (f->committer, &record, LEDGER_SUBJECT,
                                                        NULL, &error));
      g_assert_no_error (error);
      g_assert_cmpint (mark_state (f, members[i]), ==, SHIMWATCH_MARK_PENDING);
      emit_signal (f, members[i], LEDGER_SUBJECT);
      /* the receiver's filter runs in its own GDBus thread: no main loop needed */
      deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
      while (g_atomic_int_get (&f->n_received) < (gint) i + 1 &&
             g_get_monotonic_time () < deadline)
        g_usleep (1000);
      g_assert_cmpint (g_atomic_int_get (&f->n_received), ==, i + 1);
      g_assert_cmpint (mark_state (f, members[i]), ==, SHIMWATCH_MARK_SENT);
    }
  g_assert_true (iterate (10000, committer_idle, f));
  assert_all_received_marked (f);
  shimwatch_record_committer_remove (f->committer, "ns", "t1");
  g_assert_true (iterate (10000, committer_idle, f));
  f->removed = TRUE;
  /* nothing waited for the main thread: GDBus's thread never woke it to settle, the
   * record went once the main loop's next turns took TaskDelete's settle in */
  g_assert_cmpuint (shimwatch_signal_ledger_get_n_wakeups (f->ledger), ==, 0);
  /* each mark was handed over before its signal was emitted: the filter never waited for
   * one, so neither thread woke it (a condition broadcast is a futex syscall even when
   * nobody waits: there were six, three on the main thread, for three signals) */
  g_assert_cmpuint (shimwatch_signal_ledger_get_n_broadcasts (f->ledger), ==, 0);
  g_assert_cmpuint (count_files (f->ns_dir), ==, 0);
}
#endif

/* the on-disk form of the pending mark: what a restart believes, old records, bad values */
/* what the marks file says of one slot, written as the service writes it */
static void
write_mark (ShimwatchMarksFile       *marks,
            ShimwatchLifecycleSignal  signal,
            const ShimwatchRecord    *record,
            gboolean                  sent)
{
  ShimwatchMark mark;
  ShimwatchRecordCommit *commit;

  g_assert_true (shimwatch_mark_from_record (&mark, record, SHIMWATCH_MARK_PENDING,
                                             shimwatch_marks_file_next_seq (marks)));
  commit = shimwatch_records_prepare_mark (marks, shimwatch_lifecycle_signal_to_slot (signal),
                                           &mark, NULL);
  if (sent)
    shimwatch_records_commit (commit);
  shimwatch_record_commit_free (commit);
}

static void
set_mark_state (ShimwatchMarksFile *marks,
                guint               slot,
                ShimwatchMarkState  state)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (shimwatch_marks_file_set_state (marks, slot, state, &error));
  g_assert_no_error (error);
}

/* a bit of a file changed behind the service's back */
static void
flip_bit (const char *path,
          goffset     offset,
          guint8      bit)
{
  int fd = open (path, O_RDWR | O_CLOEXEC);
  guint8 byte;

  g_assert_cmpint (fd, >=, 0);
  g_assert_cmpint (pread (fd, &byte, 1, offset), ==, 1);
  byte ^= bit;
  g_assert_cmpint (pwrite (fd, &byte, 1, offset), ==, 1);
  g_assert_no_errno (close (fd));
}

static guint
count_broken (const char *dir,
              const char *suffix)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  guint n = 0;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    if (strstr (name, suffix) != NULL)
      n++;
  return n;
}

/* whether @path is mapped into this process */
static gboolean
is_mapped (const char *path)
{
  g_autofree char *maps = NULL;
  g_autofree char *suffix = g_strconcat (" ", path, "\n", NULL);

  g_assert_true (g_file_get_contents ("/proc/self/maps", &maps, NULL, NULL));
  return strstr (maps, suffix) != NULL;
}

/* The marks file on disk: a restart lays the marks newer than the record over it (sent:
 * the flag holds; pending: it does not, and the status and exit come with it); a record
 * written after them includes them; a write cut short is an empty slot; a broken slot or
 * file is logged and changes nothing else, and the task record is never lost */
static void
test_records_marks (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swmarks-XXXXXX", NULL);
  g_autofree char *ns_dir = g_build_filename (dir, "ns", NULL);
  g_autofree char *marks_path = shimwatch_marks_path (dir, "ns", "t1");
  g_autoptr(ShimwatchMarksFile) marks = NULL;
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };

  base_record (&record);
  g_assert_true (shimwatch_records_write (dir, &record, &error));
  marks = shimwatch_marks_file_open (marks_path, NULL, &error);
  g_assert_no_error (error);

  /* ShimDisconnected sent, TaskExit prepared but not sent */
  record.status = (char *) "disconnected";
  write_mark (marks, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED, &record, TRUE);
  record.status = (char *) "cleaning";
  record.exit_known = TRUE;
  record.exit = (ShimwatchExit) { .pid = 42, .exit_status = 137, .exited_at = 5 };
  record.exit_reason = (char *) "shim-died";
  write_mark (marks, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT, &record, FALSE);
  /* written with pwrite(), not through a mapping: a mapping's first store was a page
   * fault, and its munmap at the task's end a TLB shootdown on every CPU the service ran
   * on (5.7 % of the main thread's samples in the bench's mass deaths) */
  g_assert_false (is_mapped (marks_path));
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (dir);

    g_assert_true (loaded->disconnected);
    g_assert_false (loaded->exit_emitted);
    g_assert_false (loaded->delete_emitted);
    g_assert_cmpstr (loaded->status, ==, "cleaning");
    g_assert_true (loaded->exit_known);
    g_assert_cmpuint (loaded->exit.pid, ==, 42);
    g_assert_cmpuint (loaded->exit.exit_status, ==, 137);
    g_assert_cmpint (loaded->exit.exited_at, ==, 5);
    g_assert_cmpstr (loaded->exit_reason, ==, "shim-died");
    g_assert_cmpstr (loaded->pending_signal, ==, "TaskExit");
    g_assert_false (loaded->pending_sent);
  }
  /* the same mark, sent (the ledger's one write of its state byte): now the flag holds */
  set_mark_state (marks, 1, SHIMWATCH_MARK_SENT);
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (dir);

    g_assert_true (loaded->disconnected && loaded->exit_emitted);
    g_assert_true (loaded->pending_sent);
  }

  /* a record written after the marks includes them: they are not laid over it again */
  {
    ShimwatchRecord later = { 0 };

    base_record (&later);
    later.status = (char *) "stopped";
    later.marks_seq = shimwatch_marks_file_last_seq (marks);
    g_assert_true (shimwatch_records_write (dir, &later, &error));
    {
      g_autoptr(ShimwatchRecord) loaded = load_record (dir);

      g_assert_cmpstr (loaded->status, ==, "stopped");
      g_assert_false (loaded->disconnected || loaded->exit_emitted || loaded->exit_known);
      g_assert_null (loaded->pending_signal);
    }
    g_assert_true (shimwatch_records_write (dir, &record, &error));
  }

  /* a slot whose state byte says empty (as an earlier version's write cut short left it) */
  record.delete_emitted = TRUE;
  write_mark (marks, SHIMWATCH_LIFECYCLE_SIGNAL_TASK_DELETE, &record, TRUE);
  set_mark_state (marks, 2, SHIMWATCH_MARK_EMPTY);
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (dir);

    g_assert_false (loaded->delete_emitted);
    g_assert_true (loaded->exit_emitted);
  }

  /* a broken slot: logged, ignored (its signal is sent again), the others hold */
  set_mark_state (marks, 2, SHIMWATCH_MARK_SENT);
  flip_bit (marks_path, 16 + 2 * 96 + 40, 0x20);
  g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING,
                         "*broken slots ignored (TaskDelete: checksum mismatch)*");
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (dir);

    g_test_assert_expected_messages ();
    g_assert_false (loaded->delete_emitted);
    g_assert_true (loaded->disconnected && loaded->exit_emitted);
  }

  /* a truncated file: moved aside, logged; the record alone counts */
  g_assert_cmpint (truncate (marks_path, 100), ==, 0);
  g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING,
                         "*signal marks*are broken (marks file of 100 bytes*moved aside*");
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (dir);

    g_test_assert_expected_messages ();
    g_assert_cmpstr (loaded->status, ==, "cleaning");
    g_assert_false (loaded->disconnected || loaded->exit_emitted || loaded->delete_emitted);
  }
  g_assert_cmpuint (count_broken (ns_dir, ".marks.broken-"), ==, 1);
  g_assert_false (g_file_test (marks_path, G_FILE_TEST_EXISTS));

  /* opened again, the service starts a fresh file; whatever else is there is reset */
  g_clear_pointer (&marks, shimwatch_marks_file_unref);
  g_assert_true (g_file_set_contents (marks_path, "garbage", -1, NULL));
  g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING,
                         "*marks file * is broken*started again*");
  marks = shimwatch_marks_file_open (marks_path, NULL, &error);
  g_test_assert_expected_messages ();
  g_assert_no_error (error);
  write_mark (marks, SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED, &record, TRUE);
  {
    g_autoptr(ShimwatchRecord) loaded = load_record (dir);

    g_assert_true (loaded->disconnected);
  }

  /* marks whose record is gone are removed */
  {
    g_autofree char *json = shimwatch_records_path (dir, "ns", "t1");
    g_autoptr(GPtrArray) records = NULL;

    g_assert_cmpint (g_unlink (json), ==, 0);
    records = shimwatch_records_load (dir, NULL);
    g_assert_cmpuint (records->len, ==, 0);
    g_assert_false (g_file_test (marks_path, G_FILE_TEST_EXISTS));
  }
  {
    g_autoptr(GDir) d = g_dir_open (ns_dir, 0, NULL);
    const char *name;

    while ((name = g_dir_read_name (d)) != NULL)
      {
        g_autofree char *file = g_build_filename (ns_dir, name, NULL);

        g_assert_cmpint (g_unlink (file), ==, 0);
      }
  }
  g_assert_cmpint (g_rmdir (ns_dir), ==, 0);
  g_assert_cmpint (g_rmdir (dir), ==, 0);
  shimwatch_test_dir_remove (dir);
}

static glong
thread_minor_faults (void)
{
  struct rusage usage;

  g_assert_cmpint (getrusage (RUSAGE_THREAD, &usage), ==, 0);
  return usage.ru_minflt;
}

/* A signal's mark, made between the shim's EOF and its ShimDisconnected, is no page fault
 * there (35 to 110 µs on the bench's VM): the marks file is not mapped, its marks are
 * written with pwrite(), fresh (a new task) or with marks in it (a task adopted after a
 * restart). */
static void
test_records_marks_no_fault (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swmarks-XXXXXX", NULL);
  g_autofree char *ns_dir = g_build_filename (dir, "ns", NULL);
  g_autofree char *marks_path = shimwatch_marks_path (dir, "ns", "t1");
  const char *preload = g_getenv ("LD_PRELOAD");
  gboolean counted = preload == NULL || strstr (preload, "vgpreload") == NULL;
  ShimwatchRecord record = { 0 };

  /* valgrind runs the code on pages of its own: its faults are not the service's */
  if (!counted)
    g_test_message ("page faults are not this test's own here (valgrind): nothing counted");
  base_record (&record);
  record.status = (char *) "disconnected";
  for (guint i = 0; i < 2; i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(ShimwatchMarksFile) marks = shimwatch_marks_file_open (marks_path, NULL, &error);
      ShimwatchLifecycleSignal signal = i == 0 ? SHIMWATCH_LIFECYCLE_SIGNAL_SHIM_DISCONNECTED
                                               : SHIMWATCH_LIFECYCLE_SIGNAL_TASK_EXIT;
      ShimwatchMark mark;
      glong faults;

      g_assert_no_error (error);
      g_assert_true (shimwatch_mark_from_record (&mark, &record, SHIMWATCH_MARK_PENDING,
                                                 shimwatch_marks_file_next_seq (marks)));
      faults = thread_minor_faults ();
      g_assert_true (shimwatch_marks_file_write (marks, shimwatch_lifecycle_signal_to_slot (signal),
                                                 &mark, &error));
      g_assert_true (shimwatch_marks_file_set_state (marks,
                                                     shimwatch_lifecycle_signal_to_slot (signal),
                                                     SHIMWATCH_MARK_SENT, &error));
      if (counted)
        g_assert_cmpint (thread_minor_faults () - faults, ==, 0);
    }
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *content = NULL;
    gsize size;
    ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS];

    /* the marks of both runs are there, the file as it was written */
    g_assert_true (g_file_get_contents (marks_path, &content, &size, &error));
    g_assert_true (shimwatch_marks_decode ((const guint8 *) content, size, marks, NULL, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (marks[0].state, ==, SHIMWATCH_MARK_SENT);
    g_assert_cmpuint (marks[1].state, ==, SHIMWATCH_MARK_SENT);
  }
  g_assert_cmpint (g_unlink (marks_path), ==, 0);
  g_assert_cmpint (g_rmdir (ns_dir), ==, 0);
  g_assert_cmpint (g_rmdir (dir), ==, 0);
  shimwatch_test_dir_remove (dir);
}

static void
test_records_pending_mark (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swrecords-XXXXXX", NULL);
  g_autofree char *path = shimwatch_records_path (dir, "ns", "t1");
  g_autofree char *ns_dir = g_build_filename (dir, "ns", NULL);
  g_autoptr(GError) error = NULL;
  ShimwatchRecord record = { 0 };
  static const struct { const char *from; const char *to; gboolean broken; } edits[] = {
    /* sent: the flag holds */
    { "\"pending_sent\" : 0", "\"pending_sent\" : 1", FALSE },
    /* a record written before the mark existed */
    { ",\n  \"pending_signal\" : \"TaskExit\",\n  \"pending_sent\" : 0", "", FALSE },
    { "\"pending_sent\" : 0", "\"pending_sent\" : 2", TRUE },
    { "\"pending_sent\" : 0", "\"pending_sent\" : \"0\"", TRUE },
    { "\"TaskExit\"", "\"TaskStart\"", TRUE },
    { ",\n  \"pending_sent\" : 0", "", TRUE },
  };

  base_record (&record);
  record.exit_known = record.exit_emitted = TRUE;
  record.pending_signal = (char *) "TaskExit";
  for (guint i = 0; i < G_N_ELEMENTS (edits); i++)
    {
      g_autoptr(GBytes) bytes = shimwatch_wire_encode_record (&record);
      g_autofree char *text = g_strndup (g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes));
      g_auto(GStrv) parts = g_strsplit (text, edits[i].from, -1);
      g_autofree char *edited = g_strjoinv (edits[i].to, parts);
      g_autoptr(GPtrArray) broken = g_ptr_array_new_with_free_func (g_free);
      g_autoptr(GPtrArray) records = NULL;

      g_test_message ("edit %u: %s -> %s", i, edits[i].from, edits[i].to);
      g_assert_cmpuint (g_strv_length (parts), ==, 2);
      g_assert_true (g_mkdir_with_parents (ns_dir, 0700) == 0);
      g_assert_true (g_file_set_contents (path, edited, -1, &error));
      g_assert_no_error (error);
      if (edits[i].broken)
        g_test_expect_message ("ShimwatchRecords", G_LOG_LEVEL_WARNING, "*is broken*");
      records = shimwatch_records_load (dir, broken);
      g_test_assert_expected_messages ();
      g_assert_cmpuint (records->len, ==, edits[i].broken ? 0 : 1);
      g_assert_cmpuint (broken->len, ==, edits[i].broken ? 1 : 0);
      if (!edits[i].broken)
        g_assert_true (((ShimwatchRecord *) records->pdata[0])->exit_emitted);
      /* the record, or the broken one moved aside */
      {
        g_autoptr(GDir) d = g_dir_open (ns_dir, 0, NULL);
        const char *name;

        while ((name = g_dir_read_name (d)) != NULL)
          {
            g_autofree char *file = g_build_filename (ns_dir, name, NULL);

            g_assert_cmpint (g_unlink (file), ==, 0);
          }
      }
    }
  g_assert_true (shimwatch_records_remove (dir, "ns", "t1", NULL));
  g_assert_cmpint (g_rmdir (dir), ==, 0);
  shimwatch_test_dir_remove (dir);
}

/* -- the bounded, fair queue of authorization checks ------------------------------------ */

#define ITEM(uid, n) GUINT_TO_POINTER ((uid) * 1000 + (n) + 1)

/* a flood from one uid does not delay another uid's item by more than one turn */
static void
test_fair_queue_round_robin (void)
{
  const ShimwatchFairQueueLimits limits = { .max_running = 1, .max_running_per_uid = 1,
                                            .max_queued = 100, .max_queued_per_uid = 50 };
  g_autoptr(ShimwatchFairQueue) queue = shimwatch_fair_queue_new (&limits);
  guint32 uid = 0;
  gpointer item;

  for (guint n = 0; n < 40; n++)
    g_assert_true (shimwatch_fair_queue_push (queue, 65534, ITEM (65534, n), NULL));
  g_assert_true (shimwatch_fair_queue_push (queue, 0, ITEM (0, 0), NULL));
  g_assert_true (shimwatch_fair_queue_push (queue, 0, ITEM (0, 1), NULL));

  /* the flooder's first item, then root's, then the flooder's again, root's again */
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (65534, 0));
  g_assert_null (shimwatch_fair_queue_pop (queue, NULL));     /* one may run at a time */
  shimwatch_fair_queue_done (queue, uid);
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (0, 0));
  g_assert_cmpuint (uid, ==, 0);
  shimwatch_fair_queue_done (queue, uid);
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (65534, 1));
  shimwatch_fair_queue_done (queue, uid);
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (0, 1));
  shimwatch_fair_queue_done (queue, uid);
  /* root is done; the flooder's items come in their order */
  for (guint n = 2; n < 40; n++)
    {
      item = shimwatch_fair_queue_pop (queue, &uid);
      g_assert_true (item == ITEM (65534, n));
      shimwatch_fair_queue_done (queue, uid);
    }
  g_assert_null (shimwatch_fair_queue_pop (queue, NULL));
  g_assert_cmpuint (shimwatch_fair_queue_get_n_queued (queue), ==, 0);
  g_assert_cmpuint (shimwatch_fair_queue_get_n_running (queue), ==, 0);
}

static void
test_fair_queue_limits (void)
{
  const ShimwatchFairQueueLimits limits = { .max_running = 4, .max_running_per_uid = 2,
                                            .max_queued = 10, .max_queued_per_uid = 6 };
  g_autoptr(ShimwatchFairQueue) queue = shimwatch_fair_queue_new (&limits);
  g_autoptr(GError) error = NULL;
  guint32 uid;

  /* a uid's share: waiting and running together */
  for (guint n = 0; n < 6; n++)
    g_assert_true (shimwatch_fair_queue_push (queue, 1000, ITEM (1000, n), NULL));
  g_assert_false (shimwatch_fair_queue_push (queue, 1000, ITEM (1000, 6), &error));
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY);
  g_clear_error (&error);

  /* at most two of one uid run at once, even with room for more */
  g_assert_nonnull (shimwatch_fair_queue_pop (queue, &uid));
  g_assert_nonnull (shimwatch_fair_queue_pop (queue, &uid));
  g_assert_null (shimwatch_fair_queue_pop (queue, &uid));
  g_assert_false (shimwatch_fair_queue_push (queue, 1000, ITEM (1000, 6), NULL));

  /* another uid still has its share, up to the total */
  for (guint n = 0; n < 4; n++)
    g_assert_true (shimwatch_fair_queue_push (queue, 0, ITEM (0, n), NULL));
  g_assert_false (shimwatch_fair_queue_push (queue, 0, ITEM (0, 4), &error));
  g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_BUSY);
  g_assert_false (shimwatch_fair_queue_push (queue, 7, ITEM (7, 0), NULL));
  g_assert_cmpuint (shimwatch_fair_queue_get_n_queued (queue), ==, 10);

  /* and runs at once, beside the other's two */
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (0, 0));
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (0, 1));
  g_assert_null (shimwatch_fair_queue_pop (queue, &uid));       /* four run: the total */
  g_assert_cmpuint (shimwatch_fair_queue_get_n_running (queue), ==, 4);

  /* an answer frees a share */
  shimwatch_fair_queue_done (queue, 1000);
  g_assert_true (shimwatch_fair_queue_push (queue, 1000, ITEM (1000, 6), NULL));
  g_assert_true (shimwatch_fair_queue_pop (queue, &uid) == ITEM (1000, 2));
  g_assert_cmpuint (uid, ==, 1000);
}


/* -- a death's signals allocate no type of their own ------------------------------------ */

#ifdef SHIMWATCH_TEST_MALLOC_COUNT
#define N_MESSAGES 20

/* allocations per TaskDelete message, as GDBus makes it on the emitting thread: the
 * body, the message, its header fields and its bytes */
static guint
mallocs_per_task_delete (guint n)
{
  guint before = n_mallocs;

  malloc_counting = TRUE;
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(GDBusMessage) message = g_dbus_message_new_signal (LEDGER_SUBJECT, LEDGER_IFACE,
                                                                   "TaskDelete");
      g_autoptr(GError) error = NULL;
      g_autofree guchar *blob = NULL;
      gsize size;

      g_dbus_message_set_body (message,
                               shimwatch_publisher_task_exit_args (LEDGER_SUBJECT, "ns", "t1",
                                                                   42 + i, 137,
                                                                   1700000000000000));
      blob = g_dbus_message_to_blob (message, &size, G_DBUS_CAPABILITY_FLAGS_NONE, &error);
      g_assert_no_error (error);
    }
  malloc_counting = FALSE;
  return (n_mallocs - before) / n;
}

/* the types a TaskDelete message is made of: its header fields and its body */
static const char * const task_delete_types[] = { "a{yv}", "(osssuut)" };

/* GLib keeps what it knows of a container type only while a value of the type exists:
 * each signal of a death worked it out again (allocations, and a lock) for its body's
 * type and for the a{yv} of its header fields, and dropped it once sent. The publisher
 * keeps one value of each. Three counts, after a first message has made what GLib makes
 * once: a message with nothing kept; with the test holding a value of each of the
 * message's types itself (what keeping them can save); with the publisher alone. The
 * publisher's count must be no more than the second, which must be below the first (with
 * Debian 12's GLib 2.74: 105 and 117); no number of GLib's own is asserted. In a child
 * with G_SLICE=always-malloc: GLib 2.74 takes a type's small blocks from its slice
 * magazines, unseen by malloc(), and only an a{yv} not kept showed (62 against 68, with
 * or without the body's type); newer GLib's slices are malloc() anyway. Counted without
 * a connection: no other thread handles a message (and holds its types) meanwhile. */
static void
test_publisher_types_kept (void)
{
  g_autoptr(ShimwatchDbusManager) manager = NULL;
  g_autoptr(ShimwatchPublisher) publisher = NULL;
  g_autoptr(GPtrArray) held = NULL;
  guint unkept, held_by_test, kept;

  /* the directory is the parent's: a failed assertion ends the child with _exit (1),
   * which no handler sees */
  if (!g_test_subprocess ())
    {
      g_autofree char *dir = shimwatch_test_dir_new (NULL, "swpublisher-XXXXXX", NULL);

      g_assert_nonnull (dir);
      g_setenv ("SHIMWATCH_TEST_PUBLISHER_DIR", dir, TRUE);
      g_setenv ("G_SLICE", "always-malloc", TRUE);
      g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDERR);
      g_unsetenv ("G_SLICE");
      g_unsetenv ("SHIMWATCH_TEST_PUBLISHER_DIR");
      g_test_trap_assert_passed ();
      g_assert_no_errno (g_rmdir (dir));
      shimwatch_test_dir_remove (dir);
      return;
    }
  /* valgrind replaces malloc() wherever it is, this one too: there the count is not
   * taken (the unit suite takes it; valgrind's run checks the memory) */
  if (mallocs_per_task_delete (1) == 0)
    {
      g_test_message ("malloc() is not this test's own here (valgrind): nothing counted");
      return;
    }
  manager = shimwatch_dbus_manager_skeleton_new ();
  held = g_ptr_array_new_with_free_func ((GDestroyNotify) g_variant_unref);
  unkept = mallocs_per_task_delete (N_MESSAGES);

  for (guint i = 0; i < G_N_ELEMENTS (task_delete_types); i++)
    g_ptr_array_add (held, g_variant_ref_sink (g_variant_new_maybe (
                                                 G_VARIANT_TYPE (task_delete_types[i]), NULL)));
  held_by_test = mallocs_per_task_delete (N_MESSAGES);
  g_ptr_array_set_size (held, 0);

  publisher = shimwatch_publisher_new (manager, g_getenv ("SHIMWATCH_TEST_PUBLISHER_DIR"), NULL);
  kept = mallocs_per_task_delete (N_MESSAGES);
  g_test_message ("allocations per TaskDelete message: %u with nothing kept, %u with its "
                  "types held by the test, %u with the publisher", unkept, held_by_test, kept);
  /* else this GLib keeps them anyway, and the test cannot tell */
  g_assert_cmpuint (held_by_test, <, unkept);
  g_assert_cmpuint (kept, <=, held_by_test);
}
#endif

/* -- the tests' own directories -------------------------------------------------------- */

/* A test that ends before its teardown (a failed assertion's abort, a fatal log message's
 * G_BREAKPOINT, a timeout's SIGTERM) leaves no directory of shimwatch_test_dir_new()
 * behind, nor what it held, nor a process of shimwatch_test_child_add(): a child makes
 * one, in a directory of the parent's, as a ledger fixture does, fills it, starts a
 * `sleep` (its PID in the parent's directory), and dies */
static void
test_dir_gone_after_fatal_signal (gconstpointer data)
{
  int signum = GPOINTER_TO_INT (data);
  g_autofree char *parent = NULL;

  if (g_test_subprocess ())
    {
      g_autofree char *made = shimwatch_test_dir_new (g_getenv ("SHIMWATCH_TEST_DIR_PARENT"),
                                                      "swledger-XXXXXX", NULL);
      g_autofree char *deep = NULL;
      g_autofree char *file = NULL;
      g_autofree char *fifo = NULL;
      g_autofree char *link = NULL;
      g_autofree char *pid_file = g_build_filename (g_getenv ("SHIMWATCH_TEST_DIR_PARENT"),
                                                    "pid", NULL);
      g_autofree char *pid_text = NULL;
      GPid sleeper;

      g_assert_nonnull (made);
      sleeper = spawn_sleep (made);
      pid_text = g_strdup_printf ("%d", sleeper);
      g_assert_true (g_file_set_contents (pid_file, pid_text, -1, NULL));
      deep = g_build_filename (made, "ns", "t1", "rootfs", NULL);
      file = g_build_filename (deep, "f", NULL);
      fifo = g_build_filename (made, "ns", "fifo", NULL);
      link = g_build_filename (made, "ns", "t1", "root", NULL);
      g_assert_no_errno (g_mkdir_with_parents (deep, 0700));
      g_assert_true (g_file_set_contents (file, "x", -1, NULL));
      g_assert_no_errno (mkfifo (fifo, 0600));
      g_assert_no_errno (symlink ("/", link));    /* removed, never followed */
      /* as a failed g_assert(), or a fatal log message, ends a test outside a subprocess
       * (in one, GLib ends it with _exit (1) instead) */
      if (signum == SIGABRT)
        abort ();
      if (signum == SIGTRAP)
        G_BREAKPOINT ();
      raise (signum);
      g_assert_not_reached ();
    }
  parent = shimwatch_test_dir_new (NULL, "swdirs-XXXXXX", NULL);
  g_assert_nonnull (parent);
  g_setenv ("SHIMWATCH_TEST_DIR_PARENT", parent, TRUE);
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_unsetenv ("SHIMWATCH_TEST_DIR_PARENT");
  g_test_trap_assert_failed ();
  /* its sleep was killed (by the time its parent was gone: then a zombie of init's, or
   * reaped) */
  {
    g_autofree char *pid_file = g_build_filename (parent, "pid", NULL);
    g_autofree char *pid_text = NULL;
    gint64 deadline = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;
    guint32 sleeper;
    gboolean dead;

    g_assert_true (g_file_get_contents (pid_file, &pid_text, NULL, NULL));
    sleeper = (guint32) g_ascii_strtoull (pid_text, NULL, 10);
    g_assert_cmpuint (sleeper, >, 0);
    /* SIGKILL sent is not yet SIGKILL taken */
    while (!(dead = shimwatch_test_process_is_dead (sleeper)) &&
           g_get_monotonic_time () < deadline)
      g_usleep (10000);
    /* a handler that missed it: it goes, by its PID, before the test fails */
    if (!dead)
      kill ((pid_t) sleeper, SIGKILL);
    g_assert_true (dead);
    g_assert_no_errno (g_unlink (pid_file));
  }
  /* the child's directory is gone: the parent's is empty */
  g_assert_no_errno (g_rmdir (parent));
  shimwatch_test_dir_remove (parent);
}

/* A child forked without exec (a test's stand-in process) that dies of a signal removes
 * none of its parent's directories */
static void
test_dir_kept_by_forked_child (void)
{
  g_autofree char *dir = shimwatch_test_dir_new (NULL, "swkeep-XXXXXX", NULL);
  int status;
  pid_t pid;

  g_assert_nonnull (dir);
  g_assert_cmpuint (shimwatch_test_dir_get_n (), ==, 1);
  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    raise (SIGTERM);
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFSIGNALED (status) && WTERMSIG (status) == SIGTERM);
  g_assert_true (g_file_test (dir, G_FILE_TEST_IS_DIR));
  shimwatch_test_dir_remove (dir);
  g_assert_false (g_file_test (dir, G_FILE_TEST_EXISTS));
  g_assert_cmpuint (shimwatch_test_dir_get_n (), ==, 0);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/service/config", test_config);
  g_test_add_func ("/service/config-mistakes", test_config_mistakes);
  g_test_add_func ("/service/untrusted-files", test_untrusted_files);
  g_test_add_func ("/service/stdio-parse", test_stdio_parse);
  g_test_add_func ("/service/stdio-prepare", test_stdio_prepare);
  g_test_add_func ("/service/error-names", test_error_names);
  g_test_add_func ("/service/error-convert", test_error_convert);
  g_test_add_func ("/service/authority-results", test_authority_results);
  g_test_add_func ("/service/fair-queue/round-robin", test_fair_queue_round_robin);
  g_test_add_func ("/service/fair-queue/limits", test_fair_queue_limits);
  g_test_add_func ("/service/remove-task-dir", test_remove_task_dir);
  g_test_add_func ("/service/kill-processes-in", test_kill_processes_in);
  g_test_add_data_func ("/service/test-dir/gone-after-abort", GINT_TO_POINTER (SIGABRT),
                        test_dir_gone_after_fatal_signal);
  g_test_add_data_func ("/service/test-dir/gone-after-breakpoint", GINT_TO_POINTER (SIGTRAP),
                        test_dir_gone_after_fatal_signal);
  g_test_add_data_func ("/service/test-dir/gone-after-sigterm", GINT_TO_POINTER (SIGTERM),
                        test_dir_gone_after_fatal_signal);
  g_test_add_func ("/service/test-dir/kept-by-forked-child", test_dir_kept_by_forked_child);
  g_test_add_func ("/service/records/pending-mark", test_records_pending_mark);
  g_test_add_func ("/service/records/marks", test_records_marks);
  g_test_add_func ("/service/records/marks-no-fault", test_records_marks_no_fault);
#ifdef SHIMWATCH_TEST_HOOKS
  g_test_add ("/service/ledger/marks-when-durable", LedgerFixture, NULL, ledger_setup,
              test_ledger_marks_when_durable, ledger_teardown);
#endif
  g_test_add ("/service/ledger/unsent-reads-unsent", LedgerFixture, NULL, ledger_setup,
              test_ledger_unsent_reads_unsent, ledger_teardown);
#ifdef SHIMWATCH_TEST_HOOKS
  g_test_add_func ("/service/ledger/crash-point-stops-later-marks",
                   test_ledger_crash_point_stops_later_marks);
  g_test_add ("/service/ledger/crash-point-stops-later-marks/subprocess", LedgerFixture, NULL,
              ledger_setup, test_ledger_crash_point_child, ledger_teardown);
#endif
  g_test_add_func ("/service/ledger/sent-means-in-the-socket",
                   test_ledger_sent_means_in_the_socket);
#ifdef SHIMWATCH_TEST_HOOKS
  g_test_add ("/service/commit/one-batch-per-turn", LedgerFixture, NULL, ledger_setup,
              test_commit_one_batch_per_turn, ledger_teardown);
#endif
  g_test_add_func ("/service/commit/no-iteration-of-its-own",
                   test_commit_no_iteration_of_its_own);
#ifdef SHIMWATCH_TEST_HOOKS
  g_test_add ("/service/committer/in-order", LedgerFixture, NULL, ledger_setup,
              test_committer_in_order, ledger_teardown);
#endif
  g_test_add ("/service/committer/unsent-keeps-record", LedgerFixture, NULL, ledger_setup,
              test_committer_unsent_keeps_record, ledger_teardown);
  g_test_add ("/service/committer/namespace-dir-once", LedgerFixture, NULL, ledger_setup,
              test_committer_namespace_dir_once, ledger_teardown);
#ifdef SHIMWATCH_TEST_HOOKS
  g_test_add ("/service/committer/tmpfs-does-not-wait", LedgerFixture, "tmpfs", ledger_setup,
              test_committer_tmpfs_does_not_wait, ledger_teardown);
#endif
#ifdef SHIMWATCH_TEST_HOOKS
  g_test_add ("/service/committer/takes-settled-at-once", LedgerFixture, "tmpfs", ledger_setup,
              test_committer_takes_settled_at_once, ledger_teardown);
#endif
#ifdef SHIMWATCH_TEST_MALLOC_COUNT
  g_test_add_func ("/service/publisher/types-kept", test_publisher_types_kept);
  g_test_add ("/service/committer/signal-allocations", LedgerFixture, "tmpfs", ledger_setup,
              test_committer_signal_allocations, ledger_teardown);
#endif
  return g_test_run ();
}
