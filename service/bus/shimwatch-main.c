/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchd: supervises containerd runtime-v2 shims and cleans up after any that dies.
 */
#define G_LOG_DOMAIN "ShimwatchDaemon"

#include "config.h"

#include <locale.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib/gi18n.h>
#include <glib-unix.h>

#include "shimwatch-instance-lock.h"
#include "shimwatch-manager.h"
#include "shimwatch-names.h"
#include "shimwatch-spawn.h"

/* exit status when another shimwatchd already serves the runtime directory */
#define EXIT_ALREADY_RUNNING 3

typedef struct {
  GMainLoop        *loop;
  ShimwatchManager *manager;
  GDBusConnection  *connection;
  gboolean          name_acquired;
  gboolean          session;
  gboolean          stopping;
  int               exit_status;
  gint64            stop_deadline;
} Daemon;

static gboolean
wait_for_cleanups_cb (gpointer user_data)
{
  Daemon *daemon = user_data;
  guint pending = shimwatch_manager_get_n_cleanups (daemon->manager);
  gboolean writing = !shimwatch_manager_records_settled (daemon->manager);

  /* cleanups run to completion even now, bounded by their own timeouts; the records of
   * what they signalled are written and synced */
  if ((pending > 0 || writing) && g_get_monotonic_time () < daemon->stop_deadline)
    return G_SOURCE_CONTINUE;
  if (pending > 0)
    g_warning ("stopping with %u cleanups unfinished", pending);
  if (writing)
    g_warning ("stopping with task records not yet settled");
  g_main_loop_quit (daemon->loop);
  return G_SOURCE_REMOVE;
}

static void
stop (Daemon *daemon,
      int     exit_status)
{
  const ShimwatchConfig *config;

  if (daemon->stopping)
    return;
  daemon->stopping = TRUE;
  daemon->exit_status = exit_status;
  if (daemon->manager == NULL)
    {
      g_main_loop_quit (daemon->loop);
      return;
    }
  config = shimwatch_manager_get_config (daemon->manager);
  g_message ("stopping; supervised shims and their tasks keep running");
  shimwatch_manager_shutdown (daemon->manager);
  daemon->stop_deadline = g_get_monotonic_time () +
                          (gint64) (config->cleanup_timeout_ms + 5000) * 1000;
  g_timeout_add (50, wait_for_cleanups_cb, daemon);
  wait_for_cleanups_cb (daemon);
}

static gboolean
signal_cb (gpointer user_data)
{
  stop (user_data, EXIT_SUCCESS);
  return G_SOURCE_CONTINUE;
}

static void
export_manager (Daemon          *daemon,
                GDBusConnection *connection)
{
  g_autoptr(GError) error = NULL;

  /* polkit lives on the system bus; --address is a system-like bus in tests */
  if (!shimwatch_manager_export (daemon->manager, connection, !daemon->session, &error))
    {
      g_critical ("cannot export %s: %s", SHIMWATCH_DBUS_PATH, error->message);
      stop (daemon, EXIT_FAILURE);
    }
}

static void
name_acquired_cb (GDBusConnection *connection,
                  const char      *name,
                  gpointer         user_data)
{
  Daemon *daemon = user_data;

  if (daemon->name_acquired)
    return;
  daemon->name_acquired = TRUE;
  g_message ("shimwatchd %s ready on the bus as %s", PACKAGE_VERSION, name);
  /* the recorded tasks' objects are already exported; only now are their shims reached
   * (in parallel), so that the signals of those that died while we were down go out
   * under the well-known name */
  shimwatch_manager_reach_shims (daemon->manager);
}

static void
name_lost_cb (GDBusConnection *connection,
              const char      *name,
              gpointer         user_data)
{
  Daemon *daemon = user_data;

  if (connection == NULL)
    g_warning ("cannot connect to the message bus");
  else if (!daemon->name_acquired)
    g_warning ("cannot own %s: another instance runs, or the bus policy "
               "(org.shimwatch.Shimwatch1.conf) does not allow this user", name);
  else
    g_warning ("lost the bus name %s", name);
  stop (daemon, EXIT_FAILURE);
}

/* GLib before 2.76 takes small blocks (json-glib's nodes among them) from its slice
 * allocator, which keeps what it once took: one 4 MiB config.json parsed left the service
 * some 90 MB larger for good. With G_SLICE=always-malloc they are malloc()'s, which a
 * malloc_trim() after a big create hands back. GLib reads it before main() (its own
 * constructors allocate): so it is set by exec'ing once more, as the same process. Not
 * under valgrind, whose child would run without it (it replaces malloc anyway). */
static void
use_malloc_for_slices (char **argv)
{
  const char *preload = g_getenv ("LD_PRELOAD");

  if (g_getenv ("G_SLICE") != NULL)
    {
      /* GLib has read it: nothing of it reaches the shims the service starts */
      g_unsetenv ("G_SLICE");
      return;
    }
  if (glib_check_version (2, 76, 0) == NULL ||
      (preload != NULL && strstr (preload, "vgpreload") != NULL))
    return;
  g_setenv ("G_SLICE", "always-malloc", TRUE);
  execv ("/proc/self/exe", argv);
  /* it goes on as it is: only the memory of big bundles is not handed back */
  g_unsetenv ("G_SLICE");
}

int
main (int    argc,
      char **argv)
{
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autofree char *config_file = NULL;
  g_autofree char *address = NULL;
  g_autofree char *runtime_dir = NULL;
  g_autofree char *state_dir = NULL;
  g_autofree char *containerd_state = NULL;
  g_autofree char *containerd_address = NULL;
  gboolean session = FALSE;
  gboolean verbose = FALSE;
  gboolean version = FALSE;
  Daemon daemon = { 0 };
  guint owner_id;
  int lock_fd;
  const GOptionEntry entries[] = {
    { "session", 0, 0, G_OPTION_ARG_NONE, &session,
      N_("Use the session bus instead of the system bus (development)"), NULL },
    { "address", 0, 0, G_OPTION_ARG_STRING, &address,
      N_("Use the message bus at ADDRESS (tests)"), N_("ADDRESS") },
    { "config", 'c', 0, G_OPTION_ARG_FILENAME, &config_file,
      N_("Read settings from FILE"), N_("FILE") },
    { "runtime-dir", 0, 0, G_OPTION_ARG_FILENAME, &runtime_dir,
      N_("Keep task directories and sockets in DIR (default: $RUNTIME_DIRECTORY or /run/shimwatch)"),
      N_("DIR") },
    { "state-dir", 0, 0, G_OPTION_ARG_FILENAME, &state_dir,
      N_("Keep state in DIR (default: $STATE_DIRECTORY or /var/lib/shimwatch)"), N_("DIR") },
    { "containerd-state", 0, 0, G_OPTION_ARG_FILENAME, &containerd_state,
      N_("Watch the shims of the containerd whose state directory is DIR (companion mode; "
         "default from [Containerd] in the configuration: /run/containerd)"), N_("DIR") },
    { "containerd-address", 0, 0, G_OPTION_ARG_FILENAME, &containerd_address,
      N_("containerd's socket, to tell whether it runs (companion mode; default "
         "/run/containerd/containerd.sock)"), N_("SOCKET") },
    { "verbose", 'v', 0, G_OPTION_ARG_NONE, &verbose, N_("Log debug messages"), NULL },
    { "version", 0, 0, G_OPTION_ARG_NONE, &version, N_("Print the version and exit"), NULL },
    { NULL }
  };

  use_malloc_for_slices (argv);
  setlocale (LC_ALL, "");
  bindtextdomain (GETTEXT_PACKAGE, LOCALEDIR);
  bind_textdomain_codeset (GETTEXT_PACKAGE, "UTF-8");
  textdomain (GETTEXT_PACKAGE);
  g_setenv ("GIO_USE_VFS", "local", TRUE);

  context = g_option_context_new (NULL);
  g_option_context_set_translation_domain (context, GETTEXT_PACKAGE);
  g_option_context_set_summary (context,
    _("Supervise containerd runtime-v2 shims over ttrpc and clean up after any shim that "
      "dies: shim delete, task directory, socket and runc state, with TaskExit and "
      "TaskDelete on the bus exactly once."));
  g_option_context_add_main_entries (context, entries, GETTEXT_PACKAGE);
  {
    g_autofree char *description =
      g_strdup_printf (_("Settings are read from %s if it exists. The service owns %s on the "
                         "system bus; only root may run it."),
                       SHIMWATCH_SYSCONFDIR "/shimwatch/shimwatch.conf", SHIMWATCH_DBUS_NAME);

    g_option_context_set_description (context, description);
  }
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s: %s\n", g_get_prgname (), error->message);
      g_printerr (_("Run “%s --help” to see the options.\n"), g_get_prgname ());
      return 2;
    }
  if (version)
    {
      g_print ("shimwatchd %s\n", PACKAGE_VERSION);
      return EXIT_SUCCESS;
    }
  if (argc > 1)
    {
      g_printerr (_("%s: unexpected argument “%s”\n"), g_get_prgname (), argv[1]);
      return 2;
    }
  if (verbose)
    g_log_set_debug_enabled (TRUE);

  /* The earliest point that is sure to be a run of the service: no thread yet (GDBus, the
   * GTask pool and GLib's worker start later) and nothing open but 0, 1 and 2, so the
   * spawner forked here holds nothing of the service. Every `shim start` and `shim delete`
   * is spawned by it, not by a process holding thousands of descriptors. */
  if (!shimwatch_spawn_start_spawner (&error))
    {
      g_log_structured (G_LOG_DOMAIN, G_LOG_LEVEL_WARNING,
                        "MESSAGE", "cannot start the process spawner (%s): the service starts "
                        "shim start and shim delete itself", error->message);
      g_clear_error (&error);
    }

  /* precedence: defaults < config file < systemd's environment < command line */
  if (!shimwatch_config_load_file (config,
                                   config_file != NULL ? config_file
                                                       : SHIMWATCH_SYSCONFDIR "/shimwatch/shimwatch.conf",
                                   config_file != NULL, &error))
    {
      g_printerr ("%s: %s\n", g_get_prgname (), error->message);
      return EXIT_FAILURE;
    }
  if (!shimwatch_config_apply_environment (config, &error))
    {
      g_printerr ("%s: %s\n", g_get_prgname (), error->message);
      return EXIT_FAILURE;
    }
  if (runtime_dir != NULL)
    {
      g_free (config->runtime_dir);
      config->runtime_dir = g_canonicalize_filename (runtime_dir, NULL);
    }
  if (state_dir != NULL)
    {
      g_free (config->state_dir);
      config->state_dir = g_canonicalize_filename (state_dir, NULL);
    }

  /* either option turns companion mode on */
  if (containerd_state != NULL)
    {
      g_free (config->containerd_state_dir);
      config->containerd_state_dir = g_canonicalize_filename (containerd_state, NULL);
      config->containerd_enable = TRUE;
    }
  if (containerd_address != NULL)
    {
      g_free (config->containerd_address);
      config->containerd_address = g_canonicalize_filename (containerd_address, NULL);
      config->containerd_enable = TRUE;
    }

  if (!shimwatch_config_check (config, &error))
    {
      g_printerr ("%s: %s\n", g_get_prgname (), error->message);
      return EXIT_FAILURE;
    }

  signal (SIGPIPE, SIG_IGN);
  umask (022);
  if (geteuid () != 0)
    g_warning ("running as uid %u: real shims and runc need root", (guint) geteuid ());

  /* before anything in the runtime directory is touched: a second instance must not
   * replace the live events socket of the first */
  lock_fd = shimwatch_instance_lock_acquire (config->runtime_dir, &error);
  if (lock_fd < 0)
    {
      g_printerr ("%s: %s\n", g_get_prgname (), error->message);
      return g_error_matches (error, G_IO_ERROR, G_IO_ERROR_BUSY) ? EXIT_ALREADY_RUNNING
                                                                  : EXIT_FAILURE;
    }

  daemon.session = session;
  daemon.manager = shimwatch_manager_new (config, &error);
  if (daemon.manager == NULL)
    {
      g_printerr ("%s: %s\n", g_get_prgname (), error->message);
      return EXIT_FAILURE;
    }
  daemon.loop = g_main_loop_new (NULL, FALSE);
  g_unix_signal_add (SIGTERM, signal_cb, &daemon);
  g_unix_signal_add (SIGINT, signal_cb, &daemon);

  if (address != NULL)
    daemon.connection = g_dbus_connection_new_for_address_sync (
      address,
      G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
      G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
      NULL, NULL, &error);
  else
    daemon.connection = g_bus_get_sync (session ? G_BUS_TYPE_SESSION : G_BUS_TYPE_SYSTEM,
                                        NULL, &error);
  if (daemon.connection == NULL)
    {
      g_printerr (_("%s: cannot connect to %s: %s\n"), g_get_prgname (),
                  address != NULL ? address : session ? "the session bus" : "the system bus",
                  error->message);
      return EXIT_FAILURE;
    }
  /* a lost connection ends the service through name_lost_cb, with a clean stop */
  g_dbus_connection_set_exit_on_close (daemon.connection, FALSE);

  /* Serving order. A client's first call (the one that activates us through
   * SystemdService=, say) is delivered as soon as we own the name, so by then every
   * recorded task must have its object: read the records and export their objects
   * first, which needs no shim and takes milliseconds even for a thousand tasks; take
   * the name next; reach the shims, in parallel, last (name_acquired_cb). A call on a
   * task whose shim is not reached yet waits until it is. */
  export_manager (&daemon, daemon.connection);
  if (!daemon.stopping)
    shimwatch_manager_load (daemon.manager);
  owner_id = g_bus_own_name_on_connection (daemon.connection, SHIMWATCH_DBUS_NAME,
                                           G_BUS_NAME_OWNER_FLAGS_NONE, name_acquired_cb,
                                           name_lost_cb, &daemon, NULL);

  g_main_loop_run (daemon.loop);

  /* what the last deaths added to the history, and the counters, are written now: the
   * manager's finalize would write them too, but only if nothing else (an exported
   * skeleton the bus connection still holds) keeps it alive at exit */
  if (daemon.manager != NULL)
    shimwatch_manager_sync_history (daemon.manager);
  g_bus_unown_name (owner_id);
  if (daemon.connection != NULL)
    g_dbus_connection_flush_sync (daemon.connection, NULL, NULL);
  g_clear_object (&daemon.connection);
  g_clear_object (&daemon.manager);
  g_main_loop_unref (daemon.loop);
  shimwatch_spawn_stop_spawner ();
  close (lock_fd);
  return daemon.exit_status;
}
