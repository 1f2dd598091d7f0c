/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchContainerd"

#include "config.h"

#include "shimwatch-containerd-config.h"

#include <errno.h>
#include <gio/gio.h>
#include <string.h>

#include "shimwatch-error.h"

#define CLEANUP_KEY "io.containerd.timeout.shim.cleanup"

gboolean
shimwatch_go_duration_parse (const char  *text,
                             guint64     *usec,
                             GError     **error)
{
  static const struct { const char *unit; double usec; } units[] = {
    /* longest first: "ms" before "m" */
    { "ns", 1e-3 }, { "us", 1 }, { "\xc2\xb5s", 1 }, { "\xce\xbcs", 1 }, { "ms", 1e3 },
    { "s", 1e6 }, { "m", 60e6 }, { "h", 3600e6 },
  };
  const char *p = text;
  double total = 0;

  if (text == NULL || *text == '\0')
    goto invalid;
  if (g_str_equal (text, "0"))
    {
      *usec = 0;
      return TRUE;
    }
  while (*p != '\0')
    {
      char *end;
      double value;
      gboolean matched = FALSE;

      if (!g_ascii_isdigit (*p) && *p != '.')
        goto invalid;
      errno = 0;
      value = g_ascii_strtod (p, &end);
      if (end == p || errno != 0 || value < 0)
        goto invalid;
      p = end;
      for (guint i = 0; i < G_N_ELEMENTS (units) && !matched; i++)
        if (strncmp (p, units[i].unit, strlen (units[i].unit)) == 0 &&
            /* "m" must not eat the "m" of "ms" */
            !(g_str_equal (units[i].unit, "m") && p[1] == 's'))
          {
            total += value * units[i].usec;
            p += strlen (units[i].unit);
            matched = TRUE;
          }
      if (!matched)
        goto invalid;
    }
  if (total > (double) G_MAXUINT64 / 2)
    goto invalid;
  *usec = (guint64) total;
  return TRUE;

invalid:
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
               "\"%s\" is not a duration (such as \"5s\" or \"1500ms\")", text != NULL ? text : "");
  return FALSE;
}

/* a TOML basic or literal string at p: its contents, or NULL */
static char *
toml_string (const char *p)
{
  char quote = *p;
  const char *end;

  if (quote != '"' && quote != '\'')
    return NULL;
  end = strchr (p + 1, quote);
  if (end == NULL)
    return NULL;
  return g_strndup (p + 1, end - p - 1);
}

gboolean
shimwatch_containerd_config_parse_cleanup_timeout (const char  *toml,
                                                   guint       *timeout_ms,
                                                   GError     **error)
{
  g_auto(GStrv) lines = g_strsplit (toml, "\n", -1);
  gboolean in_timeouts = FALSE;

  for (guint i = 0; lines[i] != NULL; i++)
    {
      char *line = g_strstrip (lines[i]);
      g_autofree char *key = NULL;
      g_autofree char *value = NULL;
      const char *after;
      guint64 usec;

      if (*line == '#' || *line == '\0')
        continue;
      if (*line == '[')
        {
          g_autofree char *header = g_strdup (line);
          char *close = strchr (header, ']');

          if (close != NULL)
            *close = '\0';
          in_timeouts = g_str_equal (g_strstrip (header + 1), "timeouts");
          continue;
        }
      if (!in_timeouts)
        continue;
      key = toml_string (line);
      if (key == NULL || !g_str_equal (key, CLEANUP_KEY))
        continue;
      after = strchr (line + 1, line[0]) + 1;
      while (*after == ' ' || *after == '\t')
        after++;
      if (*after != '=')
        continue;
      after++;
      while (*after == ' ' || *after == '\t')
        after++;
      value = toml_string (after);
      if (value == NULL || !shimwatch_go_duration_parse (value, &usec, error))
        {
          if (value == NULL)
            g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                         "[timeouts] \"%s\" is not a string", CLEANUP_KEY);
          return FALSE;
        }
      /* a sub-millisecond timeout (containerd's "1ms" tests use 1 ms) is 1 ms here */
      *timeout_ms = (guint) MIN (MAX ((usec + 999) / 1000, usec > 0 ? 1 : 0), G_MAXUINT);
      return TRUE;
    }
  return FALSE;
}

guint
shimwatch_containerd_config_cleanup_timeout_ms (const char *path)
{
  g_autoptr(GError) error = NULL;
  g_autofree char *contents = NULL;
  guint timeout_ms = SHIMWATCH_CONTAINERD_CLEANUP_TIMEOUT_MS;

  if (path == NULL)
    return timeout_ms;
  if (!g_file_get_contents (path, &contents, NULL, &error))
    {
      if (!g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
        g_warning ("containerd: cannot read %s: %s; assuming its cleanup timeout is %u ms", path,
                   error->message, timeout_ms);
      return timeout_ms;
    }
  if (!shimwatch_containerd_config_parse_cleanup_timeout (contents, &timeout_ms, &error) &&
      error != NULL)
    g_warning ("containerd: %s: %s; assuming its cleanup timeout is %u ms", path, error->message,
               SHIMWATCH_CONTAINERD_CLEANUP_TIMEOUT_MS);
  return timeout_ms;
}
