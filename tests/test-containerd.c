/* SPDX-License-Identifier: Apache-2.0
 *
 * Companion mode's pieces on their own, without containerd: the Go durations and the
 * cleanup timeout of containerd's config.toml; the bundle watcher over a directory laid
 * out as containerd's state (initial scan, ready only with address and init.pid, removed
 * on the rename to .<id>, namespace filter, a state directory that appears later); the
 * check of the shim binary a bundle names, before a takeover runs it; and whether a
 * socket answers. The takeover itself is a cleanup request: tests/test-cleanup.c.
 */
#include "config.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shimwatch-bundle.h"
#include "shimwatch-cleanup.h"
#include "shimwatch-containerd-config.h"
#include "shimwatch-containerd-connection.h"
#include "shimwatch-containerd-watcher.h"
#include "shimwatch-error.h"

/* -- durations and containerd's configuration ------------------------------------------ */

static void
test_duration (void)
{
  static const struct { const char *text; guint64 usec; } good[] = {
    { "0", 0 }, { "1ms", 1000 }, { "5s", 5000000 }, { "1m30s", 90000000 },
    { "0.5s", 500000 }, { "1h", 3600000000 }, { "1500us", 1500 }, { "2000ns", 2 },
    { "1h2m3s4ms", 3723004000 },
  };
  static const char *bad[] = { "", "5", "-1s", "5x", "s", "1.2.3s", "ms", "1s ", " 1s" };

  for (guint i = 0; i < G_N_ELEMENTS (good); i++)
    {
      g_autoptr(GError) error = NULL;
      guint64 usec = G_MAXUINT64;

      g_assert_true (shimwatch_go_duration_parse (good[i].text, &usec, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (usec, ==, good[i].usec);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      guint64 usec = 7;

      g_assert_false (shimwatch_go_duration_parse (bad[i], &usec, &error));
      g_assert_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT);
      g_assert_cmpuint (usec, ==, 7);
    }
}

static void
test_cleanup_timeout (void)
{
  static const struct { const char *toml; gboolean found; guint ms; } cases[] = {
    { "version = 2\n[timeouts]\n  \"io.containerd.timeout.shim.cleanup\" = \"1ms\"\n", TRUE, 1 },
    { "[timeouts]\n\"io.containerd.timeout.shim.cleanup\"=\"10s\"\n", TRUE, 10000 },
    { "[timeouts]\n  'io.containerd.timeout.shim.cleanup' = '2m'  # comment\n", TRUE, 120000 },
    /* sub-millisecond is one millisecond, never zero */
    { "[timeouts]\n\"io.containerd.timeout.shim.cleanup\" = \"10us\"\n", TRUE, 1 },
    /* other sections, other keys: not it */
    { "[grpc]\n  \"io.containerd.timeout.shim.cleanup\" = \"1s\"\n[timeouts]\n"
      "  \"io.containerd.timeout.shim.shutdown\" = \"3s\"\n", FALSE, 0 },
    { "[timeouts]\n[plugins.x]\n  \"io.containerd.timeout.shim.cleanup\" = \"1s\"\n", FALSE, 0 },
    { "", FALSE, 0 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      guint ms = 4242;

      g_assert_cmpint (shimwatch_containerd_config_parse_cleanup_timeout (cases[i].toml, &ms,
                                                                          &error), ==,
                       cases[i].found);
      g_assert_no_error (error);
      g_assert_cmpuint (ms, ==, cases[i].found ? cases[i].ms : 4242);
    }
}

static void
test_cleanup_timeout_file (void)
{
  g_autofree char *dir = g_dir_make_tmp ("shimwatch-containerd-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "config.toml", NULL);
  g_autofree char *missing = g_build_filename (dir, "missing.toml", NULL);

  g_assert_cmpuint (shimwatch_containerd_config_cleanup_timeout_ms (missing), ==,
                    SHIMWATCH_CONTAINERD_CLEANUP_TIMEOUT_MS);
  g_assert_true (g_file_set_contents (path, "[timeouts]\n"
                                      "  \"io.containerd.timeout.shim.cleanup\" = \"7s\"\n",
                                      -1, NULL));
  g_assert_cmpuint (shimwatch_containerd_config_cleanup_timeout_ms (path), ==, 7000);
  /* a value that is not a duration: the default, with a warning */
  g_assert_true (g_file_set_contents (path, "[timeouts]\n"
                                      "  \"io.containerd.timeout.shim.cleanup\" = \"soon\"\n",
                                      -1, NULL));
  g_test_expect_message ("ShimwatchContainerd", G_LOG_LEVEL_WARNING, "*is not a duration*");
  g_assert_cmpuint (shimwatch_containerd_config_cleanup_timeout_ms (path), ==,
                    SHIMWATCH_CONTAINERD_CLEANUP_TIMEOUT_MS);
  g_test_assert_expected_messages ();
  g_unlink (path);
  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

/* -- the watcher ----------------------------------------------------------------------- */

typedef struct {
  char       *dir;      /* the test's directory */
  char       *state;    /* containerd's state directory inside it */
  GPtrArray  *events;   /* "ready ns/id", "removed ns/id" */
} Fixture;

static void
fixture_set_up (Fixture       *fixture,
                gconstpointer  data)
{
  fixture->dir = g_dir_make_tmp ("shimwatch-containerd-XXXXXX", NULL);
  g_assert_nonnull (fixture->dir);
  fixture->state = g_build_filename (fixture->dir, "state", NULL);
  fixture->events = g_ptr_array_new_with_free_func (g_free);
}

static void
fixture_tear_down (Fixture       *fixture,
                   gconstpointer  data)
{
  g_autofree char *base = g_path_get_basename (fixture->dir);
  g_autofree char *parent = g_path_get_dirname (fixture->dir);
  g_autoptr(GError) error = NULL;

  g_assert_true (shimwatch_cleanup_remove_tree (parent, base, &error));
  g_assert_no_error (error);
  g_ptr_array_unref (fixture->events);
  g_free (fixture->state);
  g_free (fixture->dir);
}

static void
ready_cb (ShimwatchContainerdWatcher *watcher,
          const char                 *namespace_,
          const char                 *id,
          const char                 *bundle,
          Fixture                    *fixture)
{
  g_autofree char *expected = g_build_filename (fixture->state, SHIMWATCH_CONTAINERD_TASK_DIR,
                                                namespace_, id, NULL);

  g_assert_cmpstr (bundle, ==, expected);
  g_ptr_array_add (fixture->events, g_strdup_printf ("ready %s/%s", namespace_, id));
}

static void
removed_cb (ShimwatchContainerdWatcher *watcher,
            const char                 *namespace_,
            const char                 *id,
            Fixture                    *fixture)
{
  g_ptr_array_add (fixture->events, g_strdup_printf ("removed %s/%s", namespace_, id));
}

static char *
bundle_path (Fixture    *fixture,
             const char *namespace_,
             const char *id)
{
  return g_build_filename (fixture->state, SHIMWATCH_CONTAINERD_TASK_DIR, namespace_, id, NULL);
}

/* as the shim and runc do: write aside, then rename into place */
static void
put_file (const char *dir,
          const char *name,
          const char *contents)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents (path, contents, -1, NULL));
}

static char *
make_bundle (Fixture    *fixture,
             const char *namespace_,
             const char *id,
             gboolean    ready)
{
  char *path = bundle_path (fixture, namespace_, id);

  g_assert_cmpint (g_mkdir_with_parents (path, 0700), ==, 0);
  put_file (path, "config.json", "{}");
  if (ready)
    {
      put_file (path, "address", "unix:///run/containerd/s/0123");
      put_file (path, "init.pid", "4242");
    }
  return path;
}

/* iterate until the watcher has said what it will (or a deadline) */
static void
settle (Fixture *fixture,
        guint    expected,
        guint    timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;

  while (g_get_monotonic_time () < deadline &&
         (expected == 0 || fixture->events->len < expected))
    if (!g_main_context_iteration (NULL, FALSE))
      g_usleep (2000);
  /* a little longer: nothing more may come */
  deadline = g_get_monotonic_time () + 100 * 1000;
  while (g_get_monotonic_time () < deadline)
    if (!g_main_context_iteration (NULL, FALSE))
      g_usleep (2000);
}

static void
assert_events (Fixture            *fixture,
               const char * const *expected)
{
  g_ptr_array_add (fixture->events, NULL);
  g_assert_cmpstrv ((const char * const *) fixture->events->pdata, expected);
  g_ptr_array_set_size (fixture->events, 0);
}

static ShimwatchContainerdWatcher *
start_watcher (Fixture            *fixture,
               const char * const *namespaces)
{
  ShimwatchContainerdWatcher *watcher = shimwatch_containerd_watcher_new (fixture->state,
                                                                          namespaces);
  g_autoptr(GError) error = NULL;

  g_signal_connect (watcher, "bundle-ready", G_CALLBACK (ready_cb), fixture);
  g_signal_connect (watcher, "bundle-removed", G_CALLBACK (removed_cb), fixture);
  g_assert_true (shimwatch_containerd_watcher_start (watcher, &error));
  g_assert_no_error (error);
  return watcher;
}

static void
test_watcher_lifecycle (Fixture       *fixture,
                        gconstpointer  data)
{
  g_autoptr(ShimwatchContainerdWatcher) watcher = NULL;
  g_autofree char *first = make_bundle (fixture, "ns1", "first", TRUE);
  g_autofree char *half = make_bundle (fixture, "ns1", "half", FALSE);
  g_autofree char *second = NULL;
  g_autofree char *hidden = NULL;
  const char *scan[] = { "ready ns1/first", NULL };
  const char *later[] = { "ready ns1/second", NULL };
  const char *completed[] = { "ready ns1/half", NULL };
  const char *removed[] = { "removed ns1/first", NULL };
  const char *none[] = { NULL };

  /* the initial scan: a bundle without init.pid is not ready yet */
  watcher = start_watcher (fixture, NULL);
  settle (fixture, 1, 2000);
  assert_events (fixture, scan);
  g_assert_true (shimwatch_containerd_watcher_has_bundle (watcher, "ns1", "first"));

  /* a new bundle: ready once both files are there, not before */
  second = make_bundle (fixture, "ns1", "second", FALSE);
  put_file (second, "address", "unix:///run/containerd/s/4567");
  settle (fixture, 0, 200);
  assert_events (fixture, none);
  put_file (second, "init.pid", "4243");
  settle (fixture, 1, 2000);
  assert_events (fixture, later);

  /* the one seen at the scan completes */
  put_file (half, "address", "unix:///run/containerd/s/89ab");
  put_file (half, "init.pid", "4244");
  settle (fixture, 1, 2000);
  assert_events (fixture, completed);

  /* containerd's bundle.Delete: rename to .<id>, then remove */
  hidden = g_build_filename (fixture->state, SHIMWATCH_CONTAINERD_TASK_DIR, "ns1", ".first", NULL);
  g_assert_cmpint (g_rename (first, hidden), ==, 0);
  settle (fixture, 1, 2000);
  assert_events (fixture, removed);
  g_assert_false (shimwatch_containerd_watcher_has_bundle (watcher, "ns1", "first"));
  {
    g_autofree char *base = g_path_get_basename (hidden);
    g_autofree char *parent = g_path_get_dirname (hidden);

    g_assert_true (shimwatch_cleanup_remove_tree (parent, base, NULL));
  }
  settle (fixture, 0, 200);
  assert_events (fixture, none);
}

static void
test_watcher_filter (Fixture       *fixture,
                     gconstpointer  data)
{
  g_autoptr(ShimwatchContainerdWatcher) watcher = NULL;
  const char *namespaces[] = { "mine", NULL };
  g_autofree char *a = make_bundle (fixture, "mine", "a", TRUE);
  g_autofree char *b = make_bundle (fixture, "other", "b", TRUE);
  g_autofree char *bad = make_bundle (fixture, "mine", "bad..id", TRUE);
  g_autofree char *c = NULL;
  g_autofree char *d = NULL;
  const char *scan[] = { "ready mine/a", NULL };
  const char *later[] = { "ready mine/c", NULL };

  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_nonnull (bad);
  watcher = start_watcher (fixture, namespaces);
  g_assert_true (shimwatch_containerd_watcher_wants (watcher, "mine"));
  g_assert_false (shimwatch_containerd_watcher_wants (watcher, "other"));
  settle (fixture, 1, 2000);
  assert_events (fixture, scan);
  c = make_bundle (fixture, "mine", "c", TRUE);
  d = make_bundle (fixture, "other", "d", TRUE);
  settle (fixture, 1, 2000);
  assert_events (fixture, later);
}

static void
test_watcher_late_state_dir (Fixture       *fixture,
                             gconstpointer  data)
{
  g_autoptr(ShimwatchContainerdWatcher) watcher = NULL;
  g_autofree char *a = NULL;
  const char *found[] = { "ready ns/a", NULL };

  /* containerd not started yet: its state directory does not exist */
  watcher = start_watcher (fixture, NULL);
  settle (fixture, 0, 100);
  a = make_bundle (fixture, "ns", "a", TRUE);
  settle (fixture, 1, 6000);
  assert_events (fixture, found);
}

/* -- the shim binary a bundle names ------------------------------------------------------ */

static void
test_shim_binary (Fixture       *fixture,
                  gconstpointer  data)
{
  g_autofree char *allowed = g_build_filename (fixture->dir, "allowed", NULL);
  g_autofree char *elsewhere = g_build_filename (fixture->dir, "elsewhere", NULL);
  g_autofree char *good = g_build_filename (allowed, "containerd-shim-runc-v2", NULL);
  g_autofree char *evil = g_build_filename (elsewhere, "containerd-shim-runc-v2", NULL);
  g_autofree char *bundle = make_bundle (fixture, "ns", "t", TRUE);
  const char *dirs[] = { "/nonexistent", allowed, NULL };
  const struct { const char *contents; gboolean ok; } cases[] = {
    { good, TRUE },
    { evil, FALSE },                         /* not in RuntimePath */
    { "containerd-shim-runc-v2", FALSE },    /* not absolute */
    { "/nonexistent/containerd-shim-x-v1", FALSE },
  };

  g_assert_cmpint (g_mkdir (allowed, 0755), ==, 0);
  g_assert_cmpint (g_mkdir (elsewhere, 0755), ==, 0);
  g_assert_true (g_file_set_contents (good, "#!/bin/sh\n", -1, NULL));
  g_assert_true (g_file_set_contents (evil, "#!/bin/sh\n", -1, NULL));
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree char *contents = g_strconcat (cases[i].contents, "\n", NULL);
      g_autofree char *binary = NULL;

      put_file (bundle, "shim-binary-path", contents);
      binary = shimwatch_bundle_shim_binary (bundle, dirs, &error);
      if (cases[i].ok)
        {
          g_assert_no_error (error);
          g_assert_cmpstr (binary, ==, cases[i].contents);
        }
      else
        {
          g_assert_null (binary);
          g_assert_error (error, SHIMWATCH_ERROR, error->code);
        }
    }
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *file = g_build_filename (bundle, "shim-binary-path", NULL);

    g_unlink (file);
    g_assert_null (shimwatch_bundle_shim_binary (bundle, dirs, &error));
    g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT);
  }
  {
    g_autoptr(GError) error = NULL;
    g_autofree char *file = g_build_filename (bundle, "shim-binary-path", NULL);

    /* a FIFO in its place is refused at once: the main loop does not wait for a writer */
    g_assert_cmpint (mkfifo (file, 0600), ==, 0);
    g_assert_null (shimwatch_bundle_shim_binary (bundle, dirs, &error));
    g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL);
    g_unlink (file);
  }
}

static void
test_socket_answers (Fixture       *fixture,
                     gconstpointer  data)
{
  g_autofree char *path = g_build_filename (fixture->dir, "s", NULL);
  struct sockaddr_un addr = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  g_assert_false (shimwatch_containerd_socket_answers (path));   /* no file */
  g_assert_cmpint (fd, >=, 0);
  g_strlcpy (addr.sun_path, path, sizeof addr.sun_path);
  g_assert_cmpint (bind (fd, (struct sockaddr *) &addr, sizeof addr), ==, 0);
  g_assert_false (shimwatch_containerd_socket_answers (path));   /* bound, not listening */
  g_assert_cmpint (listen (fd, 4), ==, 0);
  g_assert_true (shimwatch_containerd_socket_answers (path));
  close (fd);
  /* what a SIGKILLed shim leaves: the file, and nothing behind it */
  g_assert_true (g_file_test (path, G_FILE_TEST_EXISTS));
  g_assert_false (shimwatch_containerd_socket_answers (path));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/containerd/duration", test_duration);
  g_test_add_func ("/containerd/config/cleanup-timeout", test_cleanup_timeout);
  g_test_add_func ("/containerd/config/cleanup-timeout-file", test_cleanup_timeout_file);
  g_test_add ("/containerd/watcher/lifecycle", Fixture, NULL, fixture_set_up,
              test_watcher_lifecycle, fixture_tear_down);
  g_test_add ("/containerd/watcher/namespaces", Fixture, NULL, fixture_set_up,
              test_watcher_filter, fixture_tear_down);
  g_test_add ("/containerd/watcher/late-state-dir", Fixture, NULL, fixture_set_up,
              test_watcher_late_state_dir, fixture_tear_down);
  g_test_add ("/containerd/bundle/shim-binary", Fixture, NULL, fixture_set_up,
              test_shim_binary, fixture_tear_down);
  g_test_add ("/containerd/socket-answers", Fixture, NULL, fixture_set_up,
              test_socket_answers, fixture_tear_down);
  return g_test_run ();
}
