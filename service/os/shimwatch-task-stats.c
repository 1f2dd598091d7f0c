/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchTaskStats"

#include "config.h"

#include <string.h>
#include <gio/gio.h>

#include "shimwatch-task-stats.h"

/* v1 memory.limit_in_bytes without a limit is PAGE_COUNTER_MAX pages: anything this
 * large is "no limit" */
#define V1_NO_LIMIT (G_GUINT64_CONSTANT (1) << 62)

struct _ShimwatchTaskCgroup
{
  gboolean  v2;          /* one unified directory holds every controller */
  char     *path;        /* below the hierarchy root (of the memory controller on v1) */
  char     *unified;     /* v2 directory (on a hybrid v1 host: the controller-less one) */
  char     *memory;      /* v1 controller directories, NULL when not mounted */
  char     *cpuacct;
  char     *pids;
};

static gboolean
is_v2 (const char *cgroup_root)
{
  g_autofree char *controllers = g_build_filename (cgroup_root, "cgroup.controllers", NULL);

  return g_file_test (controllers, G_FILE_TEST_EXISTS);
}

/* v1: the hierarchy of a controller is mounted at <root>/<its mount's controller list>,
 * with a link per controller ("cpuacct" -> "cpu,cpuacct") */
static char *
v1_dir (const char *cgroup_root,
        const char *mount_name,
        const char *path)
{
  g_autofree char *hierarchy = g_build_filename (cgroup_root, mount_name, NULL);

  if (!g_file_test (hierarchy, G_FILE_TEST_IS_DIR))
    return NULL;
  return g_build_filename (hierarchy, path, NULL);
}

/* Which hierarchies the host mounts is the same for every task: looked up once a second at
 * most, not five times per task (a restart finds a thousand tasks at once), and still seen
 * to change when an admin mounts a hierarchy later. Only the host's own root is kept. */
#define LAYOUT_MAX_AGE G_USEC_PER_SEC

typedef struct {
  gint64   checked_at;   /* 0: never */
  gboolean v2;
  gboolean unified, memory, cpuacct, pids;
} Layout;

static Layout
host_layout (const char *cgroup_root)
{
  G_LOCK_DEFINE_STATIC (host);
  static Layout host;
  Layout layout = { 0 };
  gint64 now = g_get_monotonic_time ();
  gboolean own_root = g_str_equal (cgroup_root, SHIMWATCH_CGROUP_ROOT);

  G_LOCK (host);
  if (own_root && host.checked_at != 0 && now - host.checked_at < LAYOUT_MAX_AGE)
    {
      layout = host;
      G_UNLOCK (host);
      return layout;
    }
  G_UNLOCK (host);

  layout.checked_at = now;
  layout.v2 = is_v2 (cgroup_root);
  if (!layout.v2)
    {
      g_autofree char *unified = v1_dir (cgroup_root, "unified", "");
      g_autofree char *memory = v1_dir (cgroup_root, "memory", "");
      g_autofree char *cpuacct = v1_dir (cgroup_root, "cpuacct", "");
      g_autofree char *pids = v1_dir (cgroup_root, "pids", "");

      layout.unified = unified != NULL;
      layout.memory = memory != NULL;
      layout.cpuacct = cpuacct != NULL;
      layout.pids = pids != NULL;
    }
  if (own_root)
    {
      G_LOCK (host);
      host = layout;
      G_UNLOCK (host);
    }
  return layout;
}

static char *
dir_if (gboolean    mounted,
        const char *cgroup_root,
        const char *mount_name,
        const char *path)
{
  return mounted ? g_build_filename (cgroup_root, mount_name, path, NULL) : NULL;
}

ShimwatchTaskCgroup *
shimwatch_task_cgroup_new_for_path (const char *cgroup_root,
                                    const char *path)
{
  ShimwatchTaskCgroup *cgroup = g_new0 (ShimwatchTaskCgroup, 1);
  Layout layout = host_layout (cgroup_root);

  cgroup->path = g_strdup (path);
  cgroup->v2 = layout.v2;
  if (cgroup->v2)
    {
      cgroup->unified = g_build_filename (cgroup_root, path, NULL);
      return cgroup;
    }
  cgroup->unified = dir_if (layout.unified, cgroup_root, "unified", path);
  cgroup->memory = dir_if (layout.memory, cgroup_root, "memory", path);
  cgroup->cpuacct = dir_if (layout.cpuacct, cgroup_root, "cpuacct", path);
  cgroup->pids = dir_if (layout.pids, cgroup_root, "pids", path);
  return cgroup;
}

ShimwatchTaskCgroup *
shimwatch_task_cgroup_new_from_proc (const char  *cgroup_root,
                                     const char  *proc_cgroup,
                                     GError     **error)
{
  g_autoptr(ShimwatchTaskCgroup) cgroup = g_new0 (ShimwatchTaskCgroup, 1);
  g_auto(GStrv) lines = g_strsplit (proc_cgroup, "\n", -1);

  cgroup->v2 = is_v2 (cgroup_root);
  /* "hierarchy-ID:controller-list:path"; the v2 line is "0::path" */
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = g_strsplit (lines[i], ":", 3);
      g_auto(GStrv) controllers = NULL;

      if (g_strv_length (fields) != 3 || fields[2][0] != '/')
        continue;
      if (fields[1][0] == '\0')
        {
          g_free (cgroup->unified);
          cgroup->unified = cgroup->v2 ? g_build_filename (cgroup_root, fields[2], NULL)
                                       : v1_dir (cgroup_root, "unified", fields[2]);
          if (cgroup->v2)
            {
              g_free (cgroup->path);
              cgroup->path = g_strdup (fields[2]);
            }
          continue;
        }
      if (cgroup->v2)
        continue;
      controllers = g_strsplit (fields[1], ",", -1);
      for (guint j = 0; controllers[j] != NULL; j++)
        {
          char **slot = g_str_equal (controllers[j], "memory") ? &cgroup->memory
                        : g_str_equal (controllers[j], "cpuacct") ? &cgroup->cpuacct
                        : g_str_equal (controllers[j], "pids") ? &cgroup->pids
                        : NULL;

          if (slot == NULL)
            continue;
          g_free (*slot);
          *slot = v1_dir (cgroup_root, fields[1], fields[2]);
          if (*slot == NULL)
            *slot = v1_dir (cgroup_root, controllers[j], fields[2]);
          if (slot == &cgroup->memory)
            {
              g_free (cgroup->path);
              cgroup->path = g_strdup (fields[2]);
            }
        }
    }
  if (cgroup->path == NULL || (cgroup->v2 && cgroup->unified == NULL))
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                           cgroup->v2 ? "the process is in no cgroup v2 group"
                                      : "the process is in no memory cgroup");
      return NULL;
    }
  return g_steal_pointer (&cgroup);
}

ShimwatchTaskCgroup *
shimwatch_task_cgroup_new_for_pid (guint32   pid,
                                   GError  **error)
{
  g_autofree char *file = g_strdup_printf ("/proc/%u/cgroup", pid);
  g_autofree char *text = NULL;

  if (pid == 0)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "no process");
      return NULL;
    }
  if (!g_file_get_contents (file, &text, NULL, error))
    return NULL;
  return shimwatch_task_cgroup_new_from_proc (SHIMWATCH_CGROUP_ROOT, text, error);
}

void
shimwatch_task_cgroup_free (ShimwatchTaskCgroup *cgroup)
{
  if (cgroup == NULL)
    return;
  g_free (cgroup->path);
  g_free (cgroup->unified);
  g_free (cgroup->memory);
  g_free (cgroup->cpuacct);
  g_free (cgroup->pids);
  g_free (cgroup);
}

const char *
shimwatch_task_cgroup_get_path (ShimwatchTaskCgroup *cgroup)
{
  return cgroup->path;
}

/* the contents of dir/name, or NULL */
static char *
read_file (const char *dir,
           const char *name)
{
  g_autofree char *file = NULL;
  char *text = NULL;

  if (dir == NULL)
    return NULL;
  file = g_build_filename (dir, name, NULL);
  if (!g_file_get_contents (file, &text, NULL, NULL))
    return NULL;
  return text;
}

/* a file holding one number ("max" = 0); FALSE if there is none */
static gboolean
read_number (const char *dir,
             const char *name,
             guint64    *value)
{
  g_autofree char *text = read_file (dir, name);

  if (text == NULL)
    return FALSE;
  g_strstrip (text);
  if (g_str_equal (text, "max"))
    {
      *value = 0;
      return TRUE;
    }
  return g_ascii_string_to_unsigned (text, 10, 0, G_MAXUINT64, value, NULL);
}

/* "key value" lines (cpu.stat, memory.events, memory.oom_control) */
static gboolean
read_keyed (const char *dir,
            const char *name,
            const char *key,
            guint64    *value)
{
  g_autofree char *text = read_file (dir, name);
  g_auto(GStrv) lines = NULL;

  if (text == NULL)
    return FALSE;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const char *rest;

      if (!g_str_has_prefix (lines[i], key) || lines[i][strlen (key)] != ' ')
        continue;
      rest = lines[i] + strlen (key) + 1;
      return g_ascii_string_to_unsigned (rest, 10, 0, G_MAXUINT64, value, NULL);
    }
  return FALSE;
}

gboolean
shimwatch_task_cgroup_read_stats (ShimwatchTaskCgroup  *cgroup,
                                  ShimwatchTaskStats   *stats,
                                  GError              **error)
{
  const char *memory = cgroup->v2 ? cgroup->unified : cgroup->memory;
  guint64 value = 0;

  memset (stats, 0, sizeof *stats);
  if (memory == NULL || !g_file_test (memory, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "cgroup %s does not exist",
                   cgroup->path);
      return FALSE;
    }
  if (cgroup->v2)
    {
      read_number (memory, "memory.current", &stats->memory_current);
      read_number (memory, "memory.max", &stats->memory_max);
      if (read_keyed (memory, "cpu.stat", "usage_usec", &value))
        stats->cpu_usage_usec = value;
      if (read_number (memory, "pids.current", &value))
        stats->pids_current = (guint32) MIN (value, G_MAXUINT32);
      return TRUE;
    }
  read_number (memory, "memory.usage_in_bytes", &stats->memory_current);
  if (read_number (memory, "memory.limit_in_bytes", &value) && value < V1_NO_LIMIT)
    stats->memory_max = value;
  if (read_number (cgroup->cpuacct, "cpuacct.usage", &value))
    stats->cpu_usage_usec = value / 1000;
  else if (read_keyed (cgroup->unified, "cpu.stat", "usage_usec", &value))
    stats->cpu_usage_usec = value;
  if (read_number (cgroup->pids, "pids.current", &value))
    stats->pids_current = (guint32) MIN (value, G_MAXUINT32);
  return TRUE;
}

guint64
shimwatch_task_cgroup_oom_kills (ShimwatchTaskCgroup *cgroup)
{
  guint64 kills = 0;

  if (cgroup->v2)
    read_keyed (cgroup->unified, "memory.events", "oom_kill", &kills);
  else
    read_keyed (cgroup->memory, "memory.oom_control", "oom_kill", &kills);
  return kills;
}

GVariant *
shimwatch_task_stats_to_variant (const ShimwatchTaskStats *stats)
{
  GVariantBuilder builder;

  g_variant_builder_init (&builder, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&builder, "{sv}", "memory_current",
                         g_variant_new_uint64 (stats->memory_current));
  g_variant_builder_add (&builder, "{sv}", "memory_max", g_variant_new_uint64 (stats->memory_max));
  g_variant_builder_add (&builder, "{sv}", "cpu_usage_usec",
                         g_variant_new_uint64 (stats->cpu_usage_usec));
  g_variant_builder_add (&builder, "{sv}", "pids_current",
                         g_variant_new_uint32 (stats->pids_current));
  return g_variant_builder_end (&builder);
}
