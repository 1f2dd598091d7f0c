/* SPDX-License-Identifier: Apache-2.0
 *
 * The annotated example configuration (data/shimwatch.conf) through the service's real
 * loader: as shipped (every key commented out) it changes nothing; with every key
 * uncommented it is accepted and each value is the built-in default it documents.
 */
#include "config.h"

#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-config.h"

static const char *example_path;

/* no namespace list and an empty one both mean every namespace */
static const char * const *
or_empty (GStrv strv)
{
  static const char * const empty[] = { NULL };

  return strv != NULL ? (const char * const *) strv : empty;
}

static void
assert_same_config (const ShimwatchConfig *a,
                    const ShimwatchConfig *b)
{
  g_assert_cmpstr (a->runtime_dir, ==, b->runtime_dir);
  g_assert_cmpstr (a->state_dir, ==, b->state_dir);
  g_assert_true (g_strv_equal ((const char * const *) a->runtime_path,
                               (const char * const *) b->runtime_path));
  g_assert_cmpuint (a->cleanup_timeout_ms, ==, b->cleanup_timeout_ms);
  g_assert_cmpuint (a->cleanup_concurrency, ==, b->cleanup_concurrency);
  g_assert_cmpuint (a->health_interval_ms, ==, b->health_interval_ms);
  g_assert_cmpint (a->containerd_enable, ==, b->containerd_enable);
  g_assert_cmpstr (a->containerd_state_dir, ==, b->containerd_state_dir);
  g_assert_cmpstr (a->containerd_address, ==, b->containerd_address);
  g_assert_true (g_strv_equal (or_empty (a->containerd_namespaces),
                               or_empty (b->containerd_namespaces)));
  g_assert_cmpuint (a->containerd_grace_ms, ==, b->containerd_grace_ms);
  g_assert_cmpstr (a->containerd_config, ==, b->containerd_config);
  g_assert_cmpuint (a->task_log_max_size, ==, b->task_log_max_size);
  g_assert_cmpuint (a->task_log_max_files, ==, b->task_log_max_files);
  g_assert_cmpuint (a->task_log_retention_s, ==, b->task_log_retention_s);
  g_assert_cmpstr (a->metrics_dir, ==, b->metrics_dir);
}

/* "#Key=value" → "Key=value"; prose comments ("# text") stay comments */
static char *
uncomment_keys (const char *text,
                guint      *n_keys)
{
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);
  g_autoptr(GRegex) key = g_regex_new ("^#([A-Za-z]+=)", 0, 0, NULL);
  GString *out = g_string_new (NULL);

  *n_keys = 0;
  for (guint i = 0; lines[i] != NULL; i++)
    {
      if (g_regex_match (key, lines[i], 0, NULL))
        {
          g_string_append (out, lines[i] + 1);
          (*n_keys)++;
        }
      else
        g_string_append (out, lines[i]);
      g_string_append_c (out, '\n');
    }
  return g_string_free (out, FALSE);
}

static void
test_example_as_shipped (void)
{
  g_autoptr(ShimwatchConfig) defaults = shimwatch_config_new ();
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;

  g_assert_true (shimwatch_config_load_file (config, example_path, TRUE, &error));
  g_assert_no_error (error);
  assert_same_config (config, defaults);
}

static void
test_example_uncommented (void)
{
  g_autoptr(ShimwatchConfig) defaults = shimwatch_config_new ();
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(GError) error = NULL;
  g_autofree char *text = NULL;
  g_autofree char *uncommented = NULL;
  g_autofree char *path = NULL;
  g_autofree char *changed = NULL;
  g_autoptr(GKeyFile) file = g_key_file_new ();
  guint n_keys = 0;
  int fd;

  g_assert_true (g_file_get_contents (example_path, &text, NULL, &error));
  uncommented = uncomment_keys (text, &n_keys);
  g_assert_cmpuint (n_keys, >=, 6);

  fd = g_file_open_tmp ("shimwatch-conf-XXXXXX", &path, &error);
  g_assert_no_error (error);
  close (fd);
  g_assert_true (g_file_set_contents (path, uncommented, -1, &error));
  g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
  g_assert_no_error (error);
  assert_same_config (config, defaults);

  /* the keys are real: the loader reads them (a changed value is seen) */
  g_assert_true (g_key_file_load_from_data (file, uncommented, -1, G_KEY_FILE_KEEP_COMMENTS,
                                            &error));
  g_assert_true (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "CleanupTimeout", NULL));
  g_key_file_set_integer (file, SHIMWATCH_CONFIG_GROUP, "CleanupTimeout", 42);
  g_key_file_set_integer (file, SHIMWATCH_CONFIG_GROUP, "HealthInterval", 0);
  g_key_file_set_string (file, SHIMWATCH_CONFIG_GROUP, "RuntimeDirectory", "/run/elsewhere");
  changed = g_key_file_to_data (file, NULL, NULL);
  g_assert_true (g_file_set_contents (path, changed, -1, &error));
  g_clear_pointer (&config, shimwatch_config_free);
  config = shimwatch_config_new ();
  g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (config->cleanup_timeout_ms, ==, 42000);
  g_assert_cmpuint (config->health_interval_ms, ==, 0);
  g_assert_cmpstr (config->runtime_dir, ==, "/run/elsewhere");
  g_unlink (path);
}

/* an empty file for a test to write its configuration into */
static char *
make_config_file (void)
{
  g_autoptr(GError) error = NULL;
  char *path = NULL;
  int fd;

  fd = g_file_open_tmp ("shimwatch-conf-XXXXXX", &path, &error);
  g_assert_no_error (error);
  close (fd);
  return path;
}

/* @text in @path is refused with an error that reads "<path>: @message" (@whole) or starts
 * so and says more, and nothing of it is applied */
static void
assert_refused (const char *path,
                const char *text,
                const char *message,
                gboolean    whole)
{
  g_autoptr(ShimwatchConfig) defaults = shimwatch_config_new ();
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autofree char *expected = g_strdup_printf ("%s: %s", path, message);
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (path, text, -1, &error));
  g_assert_false (shimwatch_config_load_file (config, path, TRUE, &error));
  g_assert_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE);
  if (whole)
    g_assert_cmpstr (error->message, ==, expected);
  else
    {
      g_assert_true (g_str_has_prefix (error->message, expected));
      g_assert_cmpuint (strlen (error->message), >, strlen (expected));
    }
  assert_same_config (config, defaults);
}

/* a number out of its range is refused with an error that names the file, the key and the
 * range, and the configuration is left as it was; each bound itself is accepted */
static void
test_out_of_range (void)
{
  static const struct {
    const char *text;
    const char *message;     /* after "<file>: " */
  } cases[] = {
    { "[Service]\nCleanupTimeout=0\n", "CleanupTimeout must be 1 to 600 seconds" },
    { "[Service]\nCleanupTimeout=601\n", "CleanupTimeout must be 1 to 600 seconds" },
    { "[Service]\nHealthInterval=-1\n", "HealthInterval must be 0 to 3600 seconds (0: off)" },
    { "[Service]\nHealthInterval=3601\n", "HealthInterval must be 0 to 3600 seconds (0: off)" },
    { "[Service]\nTaskLogMaxSize=65535\n",
      "TaskLogMaxSize must be 65536 to 1073741824 bytes" },
    { "[Service]\nTaskLogMaxSize=1073741825\n",
      "TaskLogMaxSize must be 65536 to 1073741824 bytes" },
    { "[Service]\nTaskLogMaxFiles=1\n", "TaskLogMaxFiles must be 2 to 64" },
    { "[Service]\nTaskLogMaxFiles=65\n", "TaskLogMaxFiles must be 2 to 64" },
    { "[Service]\nTaskLogRetention=-1\n",
      "TaskLogRetention must be 0 to 31622400 seconds (366 days)" },
    { "[Service]\nTaskLogRetention=31622401\n",
      "TaskLogRetention must be 0 to 31622400 seconds (366 days)" },
    { "[Containerd]\nGrace=-1\n", "[Containerd] Grace must be 0 to 600 seconds" },
    { "[Containerd]\nGrace=601\n", "[Containerd] Grace must be 0 to 600 seconds" },
  };
  g_autofree char *path = make_config_file ();
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    assert_refused (path, cases[i].text, cases[i].message, TRUE);

  /* the bounds are in the range */
  {
    g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();

    g_assert_true (g_file_set_contents (path, "[Service]\nCleanupTimeout=600\n"
                                        "HealthInterval=3600\nTaskLogMaxSize=1073741824\n"
                                        "TaskLogMaxFiles=64\nTaskLogRetention=31622400\n"
                                        "[Containerd]\nGrace=600\n", -1, &error));
    g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (config->cleanup_timeout_ms, ==, 600000);
    g_assert_cmpuint (config->health_interval_ms, ==, 3600000);
    g_assert_cmpuint (config->task_log_max_size, ==, G_GUINT64_CONSTANT (1) << 30);
    g_assert_cmpuint (config->task_log_max_files, ==, 64);
    g_assert_cmpuint (config->task_log_retention_s, ==, 31622400);
    g_assert_cmpuint (config->containerd_grace_ms, ==, 600000);
  }
  g_unlink (path);
}

/* a value that is not of its key's type: the error names the file, the group (but the main
 * one) and the key, and nothing of the file is applied */
static void
test_wrong_type (void)
{
  static const struct {
    const char *text;
    const char *prefix;      /* after "<file>: ", before GLib's own words */
  } cases[] = {
    { "[Service]\nCleanupTimeout=soon\n", "CleanupTimeout: " },
    { "[Service]\nHealthInterval=\n", "HealthInterval: " },
    { "[Service]\nRuntimeDirectory=/run/x\nTaskLogMaxSize=1MiB\n", "TaskLogMaxSize: " },
    { "[Containerd]\nEnable=maybe\n", "[Containerd] Enable: " },
    { "[Containerd]\nStateDirectory=/run/y\nGrace=5s\n", "[Containerd] Grace: " },
  };
  g_autofree char *path = make_config_file ();

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    assert_refused (path, cases[i].text, cases[i].prefix, FALSE);
  g_unlink (path);
}

/* a boolean is written as users of key files and systemd units expect: true/false,
 * yes/no, on/off or 1/0, in any case (shimwatch.conf(5) says so); anything else is refused
 * with the words that are accepted */
static void
test_booleans (void)
{
  static const struct {
    const char *value;
    gboolean    enable;
  } accepted[] = {
    { "true", TRUE }, { "True", TRUE }, { "yes", TRUE }, { "YES", TRUE }, { "on", TRUE },
    { "1", TRUE }, { "false", FALSE }, { "FALSE", FALSE }, { "no", FALSE }, { "No", FALSE },
    { "off", FALSE }, { "0", FALSE }, { " yes ", TRUE },
  };
  static const char * const refused[] = { "maybe", "y", "2", "", "yes please", "enabled" };
  g_autofree char *path = make_config_file ();

  for (guint i = 0; i < G_N_ELEMENTS (accepted); i++)
    {
      g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
      g_autofree char *text = g_strdup_printf ("[Containerd]\nEnable=%s\n", accepted[i].value);
      g_autoptr(GError) error = NULL;

      /* start from the opposite value: the file must set it */
      config->containerd_enable = !accepted[i].enable;
      g_assert_true (g_file_set_contents (path, text, -1, &error));
      g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
      g_assert_no_error (error);
      g_assert_cmpint (config->containerd_enable, ==, accepted[i].enable);
    }
  for (guint i = 0; i < G_N_ELEMENTS (refused); i++)
    {
      g_autofree char *text = g_strdup_printf ("[Containerd]\nEnable=%s\n", refused[i]);
      g_autofree char *message = g_strdup_printf ("[Containerd] Enable: \"%s\" is not a "
                                                  "boolean (true/false, yes/no, on/off or 1/0)",
                                                  refused[i]);

      assert_refused (path, text, message, TRUE);
    }
  g_unlink (path);
}

/* MetricsDirectory: node_exporter's directory by default, empty for no textfile, and
 * a relative path is refused */
static void
test_metrics_directory (void)
{
  g_autofree char *path = make_config_file ();
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();

  g_assert_cmpstr (config->metrics_dir, ==, "/var/lib/prometheus/node-exporter");
  g_assert_true (g_file_set_contents (path, "[Service]\nMetricsDirectory=/srv/metrics\n", -1,
                                      &error));
  g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (config->metrics_dir, ==, "/srv/metrics");
  g_assert_true (g_file_set_contents (path, "[Service]\nMetricsDirectory=\n", -1, &error));
  g_assert_true (shimwatch_config_load_file (config, path, TRUE, &error));
  g_assert_no_error (error);
  g_assert_null (config->metrics_dir);
  assert_refused (path, "[Service]\nMetricsDirectory=metrics\n",
                  "MetricsDirectory must be an absolute path, not \"metrics\"", TRUE);
  g_unlink (path);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);
  example_path = g_getenv ("SHIMWATCH_EXAMPLE_CONFIG");
  g_assert_nonnull (example_path);
  g_test_add_func ("/config/example/as-shipped", test_example_as_shipped);
  g_test_add_func ("/config/example/uncommented", test_example_uncommented);
  g_test_add_func ("/config/out-of-range", test_out_of_range);
  g_test_add_func ("/config/wrong-type", test_wrong_type);
  g_test_add_func ("/config/booleans", test_booleans);
  g_test_add_func ("/config/metrics-directory", test_metrics_directory);
  return g_test_run ();
}
