/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <gio/gio.h>

#include "shimwatch-config.h"

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

ShimwatchConfig *
shimwatch_config_new (void)
{
  ShimwatchConfig *config = g_new0 (ShimwatchConfig, 1);
  const char *path[] = { "/usr/local/bin", "/usr/bin", "/usr/local/sbin", "/usr/sbin", NULL };

  config->runtime_dir = g_strdup ("/run/shimwatch");
  config->state_dir = g_strdup ("/var/lib/shimwatch");
  config->runtime_path = g_strdupv ((GStrv) path);
  config->cleanup_timeout_ms = 5000;      /* containerd's io.containerd.timeout.shim.cleanup */
  config->cleanup_concurrency = 8;
  config->health_interval_ms = 10000;
  return config;
}

ShimwatchConfig *
shimwatch_config_copy (const ShimwatchConfig *config)
{
  ShimwatchConfig *copy = g_memdup2 (config, sizeof *config);

  copy->runtime_dir = g_strdup (config->runtime_dir);
  copy->state_dir = g_strdup (config->state_dir);
  copy->runtime_path = g_strdupv (config->runtime_path);
  return copy;
}

void
shimwatch_config_free (ShimwatchConfig *config)
{
  if (config == NULL)
    return;
  g_free (config->runtime_dir);
  g_free (config->state_dir);
  g_strfreev (config->runtime_path);
  g_free (config);
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

gboolean
shimwatch_config_load_file (ShimwatchConfig  *config,
                            const char       *path,
                            gboolean          must_exist,
                            GError          **error)
{
  g_autoptr(GKeyFile) file = g_key_file_new ();
  g_autoptr(GError) local_error = NULL;
  g_autofree char *runtime_dir = NULL;
  g_autofree char *state_dir = NULL;
  g_auto(GStrv) runtime_path = NULL;
  gint64 timeout = 0;
  gint64 concurrency = 0;
  gint64 health = -1;

  if (!g_key_file_load_from_file (file, path, G_KEY_FILE_NONE, &local_error))
    {
      if (!must_exist && g_error_matches (local_error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        return TRUE;
      g_propagate_prefixed_error (error, g_steal_pointer (&local_error), "%s: ", path);
      return FALSE;
    }

#define READ(getter, var, key)                                                              \
  G_STMT_START {                                                                            \
    var = getter (file, SHIMWATCH_CONFIG_GROUP, key, &local_error);                         \
    if (local_error != NULL && !g_error_matches (local_error, G_KEY_FILE_ERROR,             \
                                                 G_KEY_FILE_ERROR_KEY_NOT_FOUND) &&         \
        !g_error_matches (local_error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_GROUP_NOT_FOUND)) \
      {                                                                                     \
        g_propagate_prefixed_error (error, g_steal_pointer (&local_error), "%s: %s: ",      \
                                    path, key);                                             \
        return FALSE;                                                                       \
      }                                                                                     \
    g_clear_error (&local_error);                                                           \
  } G_STMT_END

  READ (g_key_file_get_string, runtime_dir, "RuntimeDirectory");
  READ (g_key_file_get_string, state_dir, "StateDirectory");
  READ (get_string_list, runtime_path, "RuntimePath");
  READ (g_key_file_get_int64, timeout, "CleanupTimeout");
  READ (g_key_file_get_int64, concurrency, "CleanupConcurrency");
  READ (g_key_file_get_int64, health, "HealthInterval");
#undef READ

  if ((runtime_dir != NULL && !absolute_dir ("RuntimeDirectory", runtime_dir, error)) ||
      (state_dir != NULL && !absolute_dir ("StateDirectory", state_dir, error)))
    {
      g_prefix_error (error, "%s: ", path);
      return FALSE;
    }
  for (guint i = 0; runtime_path != NULL && runtime_path[i] != NULL; i++)
    if (!absolute_dir ("RuntimePath", runtime_path[i], error))
      {
        g_prefix_error (error, "%s: ", path);
        return FALSE;
      }
  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "CleanupTimeout", NULL) &&
      (timeout < 1 || timeout > 600))
    {
      g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                   "%s: CleanupTimeout must be 1 to 600 seconds", path);
      return FALSE;
    }
  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "CleanupConcurrency", NULL) &&
      (concurrency < 1 || concurrency > 256))
    {
      g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                   "%s: CleanupConcurrency must be 1 to 256", path);
      return FALSE;
    }

  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "HealthInterval", NULL) &&
      (health < 0 || health > 3600))
    {
      g_set_error (error, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE,
                   "%s: HealthInterval must be 0 (off) to 3600 seconds", path);
      return FALSE;
    }

  if (g_key_file_has_key (file, SHIMWATCH_CONFIG_GROUP, "HealthInterval", NULL))
    config->health_interval_ms = (guint) health * 1000;
  if (runtime_dir != NULL)
    replace_string (&config->runtime_dir, runtime_dir);
  if (state_dir != NULL)
    replace_string (&config->state_dir, state_dir);
  if (runtime_path != NULL)
    {
      g_strfreev (config->runtime_path);
      config->runtime_path = g_steal_pointer (&runtime_path);
    }
  if (timeout > 0)
    config->cleanup_timeout_ms = (guint) timeout * 1000;
  if (concurrency > 0)
    config->cleanup_concurrency = (guint) concurrency;
  return TRUE;
}

void
shimwatch_config_apply_environment (ShimwatchConfig *config)
{
  const char *runtime_dir = g_getenv ("RUNTIME_DIRECTORY");
  const char *state_dir = g_getenv ("STATE_DIRECTORY");

  /* systemd may pass several colon-separated directories; the first is ours */
  if (runtime_dir != NULL && g_path_is_absolute (runtime_dir))
    {
      g_auto(GStrv) dirs = g_strsplit (runtime_dir, ":", 2);

      replace_string (&config->runtime_dir, dirs[0]);
    }
  if (state_dir != NULL && g_path_is_absolute (state_dir))
    {
      g_auto(GStrv) dirs = g_strsplit (state_dir, ":", 2);

      replace_string (&config->state_dir, dirs[0]);
    }
}
