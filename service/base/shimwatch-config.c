/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchConfig"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <gio/gio.h>

#include "shimwatch-config.h"
#include "shimwatch-file.h"

/* the file is an admin's few lines; anything this large is not a configuration */
#define CONFIG_FILE_MAX (1u << 20)

static const char * const known_keys[] = {
  "RuntimeDirectory", "StateDirectory", "RuntimePath", "CleanupTimeout",
  "CleanupConcurrency", "HealthInterval", "TaskLogMaxSize", "TaskLogMaxFiles",
  "TaskLogRetention", "MetricsDirectory", NULL
};
static const char * const known_containerd_keys[] = {
  "Enable", "StateDirectory", "Address", "Namespaces", "Grace", "Config", NULL
};

static void
replace_string (char       **field,
                const char  *value)
{
  g_free (*field);
  *field = g_strdup (value);
}

static char **
get_string_list (GKeyFile    *file,
                 const char  *group,
                 const char  *key,
                 GError     **error)
{
  return g_key_file_get_string_list (file, group, key, NULL, error);
}

/* `shim delete` forks runc and waits for it, and both Go programs wait in their start-up:
 * a slot is busy only part of its time. With 200 runc shims killed at once on 2 CPUs, two
 * slots per CPU left a fifth of the CPU time idle, and the last TaskDelete came at 0.8–1.0 ×
 * containerd's (which runs every delete at once); four per CPU gave 0.6–0.75 ×, eight per
 * CPU 0.9–1.3 ×, the deletes then getting in each other's way */
guint
shimwatch_config_default_cleanup_concurrency (void)
{
  return CLAMP (4 * g_get_num_processors (), 4, 256);
}

ShimwatchConfig *
shimwatch_config_new (void)
{
  ShimwatchConfig *config = g_new0 (ShimwatchConfig, 1);
  const char *path[] = { "/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin", NULL };

  config->runtime_dir = g_strdup ("/run/shimwatch");
  config->state_dir = g_strdup ("/var/lib/shimwatch");
  config->runtime_path = g_strdupv ((GStrv) path);
  config->cleanup_timeout_ms = 5000;      /* containerd's io.containerd.timeout.shim.cleanup */
  config->cleanup_concurrency = shimwatch_config_default_cleanup_concurrency ();
  config->health_interval_ms = 10000;
  config->task_log_max_size = 1024 * 1024;
  config->task_log_max_files = 5;
  config->task_log_retention_s = 24 * 3600;
  config->metrics_dir = g_strdup ("/var/lib/prometheus/node-exporter");
  config->containerd_enable = FALSE;
  config->containerd_state_dir = g_strdup ("/run/containerd");
  config->containerd_address = g_strdup ("/run/containerd/containerd.sock");
  config->containerd_namespaces = NULL;
  config->containerd_grace_ms = 5000;
  config->containerd_config = g_strdup ("/etc/containerd/config.toml");
  return config;
}

static GVariant *
strv_variant (GStrv strv)
{
  return g_variant_new_strv ((const char * const *) strv, strv != NULL ? -1 : 0);
}

GVariant *
shimwatch_config_to_variant (const ShimwatchConfig *config)
{
  GVariantBuilder builder;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "Service.RuntimeDirectory",
                         g_variant_new_string (config->runtime_dir));
  g_variant_builder_add (&builder, "{sv}", "Service.StateDirectory",
                         g_variant_new_string (config->state_dir));
  g_variant_builder_add (&builder, "{sv}", "Service.RuntimePath",
                         strv_variant (config->runtime_path));
  g_variant_builder_add (&builder, "{sv}", "Service.CleanupTimeout",
                         g_variant_new_uint32 (config->cleanup_timeout_ms / 1000));
  g_variant_builder_add (&builder, "{sv}", "Service.CleanupConcurrency",
                         g_variant_new_uint32 (config->cleanup_concurrency));
  g_variant_builder_add (&builder, "{sv}", "Service.HealthInterval",
                         g_variant_new_uint32 (config->health_interval_ms / 1000));
  g_variant_builder_add (&builder, "{sv}", "Service.TaskLogMaxSize",
                         g_variant_new_uint64 (config->task_log_max_size));
  g_variant_builder_add (&builder, "{sv}", "Service.TaskLogMaxFiles",
                         g_variant_new_uint32 (config->task_log_max_files));
  g_variant_builder_add (&builder, "{sv}", "Service.TaskLogRetention",
                         g_variant_new_uint32 (config->task_log_retention_s));
  g_variant_builder_add (&builder, "{sv}", "Service.MetricsDirectory",
                         g_variant_new_string (config->metrics_dir != NULL
                                               ? config->metrics_dir : ""));
  g_variant_builder_add (&builder, "{sv}", "Containerd.Enable",
                         g_variant_new_boolean (config->containerd_enable));
  if (config->containerd_enable)
    {
      g_variant_builder_add (&builder, "{sv}", "Containerd.StateDirectory",
                             g_variant_new_string (config->containerd_state_dir));
      g_variant_builder_add (&builder, "{sv}", "Containerd.Address",
                             g_variant_new_string (config->containerd_address));
      g_variant_builder_add (&builder, "{sv}", "Containerd.Namespaces",
                             strv_variant (config->containerd_namespaces));
      g_variant_builder_add (&builder, "{sv}", "Containerd.Grace",
                             g_variant_new_uint32 (config->containerd_grace_ms / 1000));
      g_variant_builder_add (&builder, "{sv}", "Containerd.Config",
                             g_variant_new_string (config->containerd_config != NULL
                                                   ? config->containerd_config : ""));
    }
  return g_variant_builder_end (&builder);
}

ShimwatchConfig *
shimwatch_config_copy (const ShimwatchConfig *config)
{
  ShimwatchConfig *copy = g_memdup2 (config, sizeof *config);

  copy->runtime_dir = g_strdup (config->runtime_dir);
  copy->state_dir = g_strdup (config->state_dir);
  copy->metrics_dir = g_strdup (config->metrics_dir);
  copy->runtime_path = g_strdupv (config->runtime_path);
  copy->containerd_state_dir = g_strdup (config->containerd_state_dir);
  copy->containerd_address = g_strdup (config->containerd_address);
  copy->containerd_namespaces = g_strdupv (config->containerd_namespaces);
  copy->containerd_config = g_strdup (config->containerd_config);
  return copy;
}

void
shimwatch_config_free (ShimwatchConfig *config)
{
  if (config == NULL)
    return;
  g_free (config->runtime_dir);
  g_free (config->state_dir);
  g_free (config->metrics_dir);
  g_strfreev (config->runtime_path);
  g_free (config->containerd_state_dir);
  g_free (config->containerd_address);
  g_strfreev (config->containerd_namespaces);
  g_free (config->containerd_config);
  g_free (config);
}

/* a boolean as users of key files and systemd units write it: true/false, yes/no, on/off
 * or 1/0, in any case; g_key_file_get_boolean() takes only true/false and 1/0 */
static gboolean
get_boolean (GKeyFile    *file,
             const char  *group,
             const char  *key,
             GError     **error)
{
  static const char * const yes[] = { "true", "yes", "on", "1" };
  static const char * const no[] = { "false", "no", "off", "0" };
  g_autofree char *value = g_key_file_get_value (file, group, key, error);

  if (value == NULL)
    return FALSE;
  g_strstrip (value);
  for (guint i = 0; i < G_N_ELEMENTS (yes); i++)
    {
      if (g_ascii_strcasecmp (value, yes[i]) == 0)
        return TRUE;
      if (g_ascii_strcasecmp (value, no[i]) == 0)
        return FALSE;
    }
  g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
               "\"%s\" is not a boolean (true/false, yes/no, on/off or 1/0)", value);
  return FALSE;
}

static gboolean
absolute_dir (const char  *key,
              const char  *value,
              GError     **error)
{
  if (value != NULL && g_path_is_absolute (value))
    return TRUE;
  g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
               "%s must be an absolute path, not \"%s\"", key, value != NULL ? value : "");
  return FALSE;
}

/* how an error names a key's group: the main group's keys go by their name alone */
static char *
key_section (const char *group)
{
  return g_str_equal (group, SHIMWATCH_CONFIG_GROUP) ? g_strdup ("")
                                                     : g_strdup_printf ("[%s] ", group);
}

/* @key of @group into @var, with @getter, when the file sets it (@var is left alone when
 * not); a value that is not of the key's type makes the caller return FALSE, with an
 * error that names the file and the key. Needs @file, @path and @error in scope. */
#define READ_KEY(getter, group, key, var)                                                  \
  G_STMT_START {                                                                           \
    if (g_key_file_has_key (file, group, key, NULL))                                       \
      {                                                                                    \
        GError *read_error = NULL;                                                         \
                                                                                           \
        var = getter (file, group, key, &read_error);                                      \
        if (read_error != NULL)                                                            \
          {                                                                                \
            g_autofree char *section = key_section (group);                                \
                                                                                           \
            g_propagate_prefixed_error (error, read_error, "%s: %s%s: ", path, section,    \
                                        key);                                              \
            return FALSE;                                                                  \
          }                                                                                \
      }                                                                                    \
  } G_STMT_END

/* @value of @key, when the file sets it, lies in @min..@max; else an error that names the
 * file, the key and its range (@unit after the numbers: " seconds", or "") */
static gboolean
check_range (GKeyFile    *file,
             const char  *path,
             const char  *group,
             const char  *key,
             gint64       value,
             gint64       min,
             gint64       max,
             const char  *unit,
             GError     **error)
{
  g_autofree char *section = NULL;

  if (!g_key_file_has_key (file, group, key, NULL) || (value >= min && value <= max))
    return TRUE;
  section = key_section (group);
  g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
               "%s: %s%s must be %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT "%s", path, section,
               key, min, max, unit);
  return FALSE;
}

/* the closest known key, for a typo: at most a third of its letters wrong */
static const char *
closest_key (const char         *key,
             const char * const *keys)
{
  const char *best = NULL;
  guint best_distance = G_MAXUINT;

  for (guint i = 0; keys[i] != NULL; i++)
    {
      const char *known = keys[i];
      gsize n = strlen (key);
      gsize m = strlen (known);
      g_autofree guint *row = g_new (guint, m + 1);
      guint distance;

      /* Levenshtein, case-insensitive, one row */
      for (gsize j = 0; j <= m; j++)
        row[j] = (guint) j;
      for (gsize i2 = 1; i2 <= n; i2++)
        {
          guint diagonal = row[0];

          row[0] = (guint) i2;
          for (gsize j = 1; j <= m; j++)
            {
              guint above = row[j];
              guint cost = g_ascii_tolower (key[i2 - 1]) == g_ascii_tolower (known[j - 1]) ? 0 : 1;

              row[j] = MIN (MIN (row[j] + 1, row[j - 1] + 1), diagonal + cost);
              diagonal = above;
            }
        }
      distance = row[m];
      if (distance < best_distance)
        {
          best_distance = distance;
          best = known;
        }
    }
  return best_distance * 3 <= strlen (key) ? best : NULL;
}

/* a typo must not pass silently: it leaves a default in place the admin meant to change.
 * A warning, not a refusal, so a file written for a later version still starts. */
static void
warn_unknown (GKeyFile   *file,
              const char *path)
{
  g_auto(GStrv) groups = g_key_file_get_groups (file, NULL);

  for (guint i = 0; groups[i] != NULL; i++)
    {
      g_auto(GStrv) keys = NULL;
      const char * const *known;
      g_autofree char *list = NULL;

      if (g_str_equal (groups[i], SHIMWATCH_CONFIG_GROUP))
        known = known_keys;
      else if (g_str_equal (groups[i], SHIMWATCH_CONFIG_CONTAINERD_GROUP))
        known = known_containerd_keys;
      else
        {
          g_warning ("%s: unknown group [%s] is ignored (settings go in [%s] and [%s])", path,
                     groups[i], SHIMWATCH_CONFIG_GROUP, SHIMWATCH_CONFIG_CONTAINERD_GROUP);
          continue;
        }
      list = g_strjoinv (", ", (GStrv) known);
      keys = g_key_file_get_keys (file, groups[i], NULL, NULL);
      for (guint j = 0; keys != NULL && keys[j] != NULL; j++)
        {
          const char *suggestion;

          if (g_strv_contains (known, keys[j]))
            continue;
          suggestion = closest_key (keys[j], known);
          if (suggestion != NULL)
            g_warning ("%s: unknown key %s in [%s] is ignored; did you mean %s?", path, keys[j],
                       groups[i], suggestion);
          else
            g_warning ("%s: unknown key %s in [%s] is ignored (known: %s)", path, keys[j],
                       groups[i], list);
        }
    }
}

/* [Containerd]: companion mode; checked whole before anything is applied */
static gboolean
load_containerd_group (ShimwatchConfig  *config,
                       GKeyFile         *file,
                       const char       *path,
                       GError          **error)
{
  const char *group = SHIMWATCH_CONFIG_CONTAINERD_GROUP;
  g_autofree char *state_dir = NULL;
  g_autofree char *address = NULL;
  g_autofree char *containerd_config = NULL;
  g_auto(GStrv) namespaces = NULL;
  gboolean enable = config->containerd_enable;
  gint64 grace = -1;

  if (!g_key_file_has_group (file, group))
    return TRUE;
  READ_KEY (get_boolean, group, "Enable", enable);
  READ_KEY (g_key_file_get_string, group, "StateDirectory", state_dir);
  READ_KEY (g_key_file_get_string, group, "Address", address);
  READ_KEY (get_string_list, group, "Namespaces", namespaces);
  READ_KEY (g_key_file_get_int64, group, "Grace", grace);
  READ_KEY (g_key_file_get_string, group, "Config", containerd_config);

  if ((state_dir != NULL && !absolute_dir ("[Containerd] StateDirectory", state_dir, error)) ||
      (address != NULL && !absolute_dir ("[Containerd] Address", address, error)) ||
      (containerd_config != NULL && !absolute_dir ("[Containerd] Config", containerd_config, error)))
    {
      g_prefix_error (error, "%s: ", path);
      return FALSE;
    }
  for (guint i = 0; namespaces != NULL && namespaces[i] != NULL; i++)
    if (namespaces[i][0] == '\0')
      {
        g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                     "%s: [Containerd] Namespaces has an empty entry (entry %u)", path, i + 1);
        return FALSE;
      }
  if (!check_range (file, path, group, "Grace", grace, 0, 600, " seconds", error))
    return FALSE;

  config->containerd_enable = enable;
  if (state_dir != NULL)
    replace_string (&config->containerd_state_dir, state_dir);
  if (address != NULL)
    replace_string (&config->containerd_address, address);
  if (containerd_config != NULL)
    replace_string (&config->containerd_config, containerd_config);
  if (namespaces != NULL)
    {
      g_strfreev (config->containerd_namespaces);
      /* an empty list is every namespace, as an absent one */
      config->containerd_namespaces = namespaces[0] != NULL ? g_steal_pointer (&namespaces) : NULL;
    }
  if (grace >= 0)
    config->containerd_grace_ms = (guint) grace * 1000;
  return TRUE;
}

gboolean
shimwatch_config_load_file (ShimwatchConfig  *config,
                            const char       *path,
                            gboolean          must_exist,
                            GError          **error)
{
  const char *group = SHIMWATCH_CONFIG_GROUP;
  g_autoptr(GKeyFile) file = g_key_file_new ();
  g_autoptr(GError) local_error = NULL;
  g_autofree char *contents = NULL;
  g_autofree char *runtime_dir = NULL;
  g_autofree char *state_dir = NULL;
  g_autofree char *metrics_dir = NULL;
  g_auto(GStrv) runtime_path = NULL;
  gint64 timeout = 0;
  gint64 concurrency = 0;
  g_autofree char *concurrency_text = NULL;
  gint64 health = -1;
  gsize length = 0;
  gint64 log_size = 0;
  gint64 log_files = 0;
  gint64 log_retention = 0;

  /* never blocks: a FIFO (or a device) in its place is refused, not read */
  contents = shimwatch_read_regular_file_at (AT_FDCWD, path, CONFIG_FILE_MAX,
                                             SHIMWATCH_FILE_FOLLOW_LINK, &length, NULL,
                                             &local_error);
  if (contents == NULL)
    {
      if (!must_exist && g_error_matches (local_error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        return TRUE;
      g_propagate_error (error, g_steal_pointer (&local_error));
      return FALSE;
    }
  if (!g_key_file_load_from_data (file, contents, length, G_KEY_FILE_NONE, &local_error))
    {
      g_propagate_prefixed_error (error, g_steal_pointer (&local_error), "%s: ", path);
      return FALSE;
    }
  warn_unknown (file, path);

  READ_KEY (g_key_file_get_string, group, "RuntimeDirectory", runtime_dir);
  READ_KEY (g_key_file_get_string, group, "StateDirectory", state_dir);
  READ_KEY (get_string_list, group, "RuntimePath", runtime_path);
  READ_KEY (g_key_file_get_int64, group, "CleanupTimeout", timeout);
  READ_KEY (g_key_file_get_value, group, "CleanupConcurrency", concurrency_text);
  READ_KEY (g_key_file_get_int64, group, "HealthInterval", health);
  READ_KEY (g_key_file_get_int64, group, "TaskLogMaxSize", log_size);
  READ_KEY (g_key_file_get_int64, group, "TaskLogMaxFiles", log_files);
  READ_KEY (g_key_file_get_int64, group, "TaskLogRetention", log_retention);
  READ_KEY (g_key_file_get_string, group, "MetricsDirectory", metrics_dir);

  if ((runtime_dir != NULL && !absolute_dir ("RuntimeDirectory", runtime_dir, error)) ||
      (state_dir != NULL && !absolute_dir ("StateDirectory", state_dir, error)) ||
      /* empty: no textfile */
      (metrics_dir != NULL && metrics_dir[0] != '\0' &&
       !absolute_dir ("MetricsDirectory", metrics_dir, error)))
    {
      g_prefix_error (error, "%s: ", path);
      return FALSE;
    }
  if (runtime_path != NULL && runtime_path[0] == NULL)
    {
      g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                   "%s: RuntimePath is empty: no shim could ever be started", path);
      return FALSE;
    }
  for (guint i = 0; runtime_path != NULL && runtime_path[i] != NULL; i++)
    {
      char *canonical;

      if (runtime_path[i][0] == '\0')
        {
          g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                       "%s: RuntimePath has an empty entry (entry %u): remove the extra ';'",
                       path, i + 1);
          return FALSE;
        }
      if (!absolute_dir ("RuntimePath", runtime_path[i], error))
        {
          g_prefix_error (error, "%s: ", path);
          return FALSE;
        }
      /* compared as strings later (a recorded shim's directory): one spelling */
      canonical = g_canonicalize_filename (runtime_path[i], NULL);
      g_free (runtime_path[i]);
      runtime_path[i] = canonical;
    }
  if (!check_range (file, path, SHIMWATCH_CONFIG_GROUP, "CleanupTimeout", timeout, 1, 600,
                    " seconds", error))
    return FALSE;
  /* "auto": the default, from the number of CPUs */
  if (concurrency_text != NULL)
    {
      g_strstrip (concurrency_text);
      if (g_str_equal (concurrency_text, "auto"))
        concurrency = shimwatch_config_default_cleanup_concurrency ();
      else if (!g_ascii_string_to_signed (concurrency_text, 10, 1, 256, &concurrency, NULL))
        {
          g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                       "%s: CleanupConcurrency must be 1 to 256, or auto", path);
          return FALSE;
        }
    }

  if (!check_range (file, path, SHIMWATCH_CONFIG_GROUP, "HealthInterval", health, 0, 3600,
                    " seconds (0: off)", error) ||
      !check_range (file, path, SHIMWATCH_CONFIG_GROUP, "TaskLogMaxSize", log_size, 65536,
                    G_GINT64_CONSTANT (1) << 30, " bytes", error) ||
      !check_range (file, path, SHIMWATCH_CONFIG_GROUP, "TaskLogMaxFiles", log_files, 2, 64, "",
                    error) ||
      !check_range (file, path, SHIMWATCH_CONFIG_GROUP, "TaskLogRetention", log_retention, 0,
                    366 * 24 * 3600, " seconds (366 days)", error))
    return FALSE;
  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "TaskLogMaxSize", NULL))
    config->task_log_max_size = (guint64) log_size;
  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "TaskLogMaxFiles", NULL))
    config->task_log_max_files = (guint) log_files;
  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "TaskLogRetention", NULL))
    config->task_log_retention_s = (guint) log_retention;

  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "HealthInterval", NULL))
    config->health_interval_ms = (guint) health * 1000;
  if (runtime_dir != NULL)
    replace_string (&config->runtime_dir, runtime_dir);
  if (state_dir != NULL)
    replace_string (&config->state_dir, state_dir);
  if (metrics_dir != NULL)
    replace_string (&config->metrics_dir, metrics_dir[0] != '\0' ? metrics_dir : NULL);
  if (runtime_path != NULL)
    {
      g_strfreev (config->runtime_path);
      config->runtime_path = g_steal_pointer (&runtime_path);
    }
  if (timeout > 0)
    config->cleanup_timeout_ms = (guint) timeout * 1000;
  if (concurrency > 0)
    config->cleanup_concurrency = (guint) concurrency;
  return load_containerd_group (config, file, path, error);
}

static gboolean
environment_dir (const char  *variable,
                 char       **dir,
                 GError     **error)
{
  const char *value = g_getenv (variable);
  g_auto(GStrv) dirs = NULL;

  *dir = NULL;
  if (value == NULL)
    return TRUE;
  /* systemd may pass several colon-separated directories; the first is ours */
  dirs = g_strsplit (value, ":", 2);
  if (!g_path_is_absolute (dirs[0]))
    {
      /* where the tasks' state would go is not a guess to make */
      g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                   "%s must be an absolute path, not \"%s\"", variable, value);
      return FALSE;
    }
  *dir = g_strdup (dirs[0]);
  return TRUE;
}

gboolean
shimwatch_config_apply_environment (ShimwatchConfig  *config,
                                    GError          **error)
{
  g_autofree char *runtime_dir = NULL;
  g_autofree char *state_dir = NULL;

  if (!environment_dir ("RUNTIME_DIRECTORY", &runtime_dir, error) ||
      !environment_dir ("STATE_DIRECTORY", &state_dir, error))
    return FALSE;
  if (runtime_dir != NULL)
    replace_string (&config->runtime_dir, runtime_dir);
  if (state_dir != NULL)
    replace_string (&config->state_dir, state_dir);
  return TRUE;
}

/* what may be written by someone else than root: refuse it, they would choose what runs */
static gboolean
writable_by_others (const char  *dir,
                    GError     **error)
{
  g_autofree char *real = realpath (dir, NULL);
  g_autofree char *path = NULL;
  struct stat st;

  if (real == NULL)
    return FALSE;      /* not there: nothing can be found in it either */
  path = g_strdup (real);
  while (TRUE)
    {
      char *parent;

      /* the directory itself in any case; above it, unless the sticky bit keeps others
       * from renaming what is not theirs (as /tmp's) */
      if (stat (path, &st) == 0 && (st.st_mode & S_IWOTH) &&
          (strcmp (path, real) == 0 || !(st.st_mode & S_ISVTX)))
        {
          g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                       "RuntimePath entry %s is unsafe: %s is writable by every user, who "
                       "could put a containerd-shim-* there for the service to run as root",
                       dir, path);
          return TRUE;
        }
      if (strcmp (path, "/") == 0)
        return FALSE;
      parent = g_path_get_dirname (path);
      g_free (path);
      path = parent;
    }
}

gboolean
shimwatch_config_check (const ShimwatchConfig  *config,
                        GError                **error)
{
  for (guint i = 0; config->runtime_path != NULL && config->runtime_path[i] != NULL; i++)
    if (writable_by_others (config->runtime_path[i], error))
      return FALSE;
  return TRUE;
}
