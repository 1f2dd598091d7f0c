/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchCgroup"

#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/magic.h>
#include <glib/gstdio.h>

#include "shimwatch-cgroup.h"
#include "shimwatch-error.h"

#define CGROUP_ROOT        "/sys/fs/cgroup"
#define KILL_ROUNDS        8

struct _ShimwatchCgroupHost
{
  ShimwatchCgroupLayout layout;
  ShimwatchCgroupDriver driver;
  GStrv                 mounts;          /* every hierarchy's mount point */
  int                  *mount_fds;       /* O_PATH of each, or -1 */
  char                 *unified_mount;   /* cgroup2's, or NULL (legacy) */
  int                   unified;         /* its index in mounts, or -1 */
  char                 *own_cgroup;      /* under systemd only */
  /* cgroup2 has no cgroup.kill (Linux before 5.14): seen once, never tried again. The
   * host's one mutable member, written by shimwatch_cgroup_kill_subtree() (which takes the
   * host non-const for it) from whichever thread kills: atomic */
  gint                  no_kill_file;
};

static void
host_clear (ShimwatchCgroupHost *host)
{
  for (guint i = 0; host->mounts != NULL && host->mounts[i] != NULL; i++)
    if (host->mount_fds[i] >= 0)
      close (host->mount_fds[i]);
  g_free (host->mount_fds);
  g_strfreev (host->mounts);
  g_free (host->unified_mount);
  g_free (host->own_cgroup);
}

ShimwatchCgroupHost *
shimwatch_cgroup_host_new (ShimwatchCgroupLayout  layout,
                           const char * const    *mounts,
                           const char            *unified_mount,
                           const char            *own_cgroup,
                           ShimwatchCgroupDriver  driver)
{
  ShimwatchCgroupHost *host = g_atomic_rc_box_new0 (ShimwatchCgroupHost);

  host->layout = layout;
  host->driver = driver;
  host->mounts = mounts != NULL ? g_strdupv ((GStrv) mounts) : g_new0 (char *, 1);
  /* a cgroup is looked for in every hierarchy at each death: from the hierarchy's own
   * directory, without walking /sys/fs/cgroup/<hierarchy> each time */
  host->mount_fds = g_new (int, g_strv_length (host->mounts) + 1);
  for (guint i = 0; host->mounts[i] != NULL; i++)
    host->mount_fds[i] = open (host->mounts[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
  host->unified_mount = g_strdup (unified_mount);
  host->unified = -1;
  for (guint i = 0; unified_mount != NULL && host->mounts[i] != NULL; i++)
    if (g_str_equal (host->mounts[i], unified_mount))
      host->unified = (int) i;
  host->own_cgroup = g_strdup (own_cgroup);
  return host;
}

ShimwatchCgroupHost *
shimwatch_cgroup_host_ref (ShimwatchCgroupHost *host)
{
  return g_atomic_rc_box_acquire (host);
}

void
shimwatch_cgroup_host_unref (ShimwatchCgroupHost *host)
{
  if (host != NULL)
    g_atomic_rc_box_release_full (host, (GDestroyNotify) host_clear);
}

ShimwatchCgroupLayout
shimwatch_cgroup_host_get_layout (const ShimwatchCgroupHost *host)
{
  return host->layout;
}

ShimwatchCgroupDriver
shimwatch_cgroup_host_get_driver (const ShimwatchCgroupHost *host)
{
  return host->driver;
}

const char *
shimwatch_cgroup_host_get_own (const ShimwatchCgroupHost *host)
{
  return host->own_cgroup;
}

static const char *
layout_name (ShimwatchCgroupLayout layout)
{
  switch (layout)
    {
    case SHIMWATCH_CGROUP_LAYOUT_LEGACY:
      return "cgroup v1";
    case SHIMWATCH_CGROUP_LAYOUT_HYBRID:
      return "hybrid (cgroup v1 with cgroup2)";
    case SHIMWATCH_CGROUP_LAYOUT_UNIFIED:
    default:
      return "cgroup2";
    }
}

char *
shimwatch_cgroup_host_describe (const ShimwatchCgroupHost *host)
{
  return g_strdup_printf ("%s, %u hierarchies, %s%s%s", layout_name (host->layout),
                          g_strv_length (host->mounts),
                          host->driver == SHIMWATCH_CGROUP_DRIVER_SYSTEMD
                            ? "systemd driver (a transient scope per task)"
                            : "cgroupfs driver (tasks below /" SHIMWATCH_CGROUP_PARENT ")",
                          host->own_cgroup != NULL ? ", service in " : "",
                          host->own_cgroup != NULL ? host->own_cgroup : "");
}

static gboolean
is_cgroup2 (const char *path)
{
  struct statfs fs;

  return statfs (path, &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

/* the mount points of every cgroup hierarchy below /sys/fs/cgroup, from mountinfo */
static GStrv
detect_mounts (void)
{
  g_autofree char *mountinfo = NULL;
  g_auto(GStrv) lines = NULL;
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();
  g_autoptr(GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);

  if (!g_file_get_contents ("/proc/self/mountinfo", &mountinfo, NULL, NULL))
    return g_strv_builder_end (builder);
  lines = g_strsplit (mountinfo, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = g_strsplit (lines[i], " ", -1);
      const char *fstype = NULL;
      guint n = g_strv_length (fields);

      if (n < 7)
        continue;
      /* optional fields end with "-", then the file system type */
      for (guint j = 6; j + 1 < n; j++)
        if (g_str_equal (fields[j], "-"))
          {
            fstype = fields[j + 1];
            break;
          }
      if (fstype == NULL || (!g_str_equal (fstype, "cgroup") && !g_str_equal (fstype, "cgroup2")))
        continue;
      if (!g_str_equal (fields[4], CGROUP_ROOT) && !g_str_has_prefix (fields[4], CGROUP_ROOT "/"))
        continue;
      if (g_hash_table_add (seen, g_strdup (fields[4])))
        g_strv_builder_add (builder, fields[4]);
    }
  return g_strv_builder_end (builder);
}

/* the cgroup systemd tracks us in: cgroup2's "0::" line where cgroup2 is mounted, else
 * name=systemd's (the kernel shows a "0::" line even where no cgroup2 is mounted) */
static char *
detect_own_cgroup (gboolean unified)
{
  g_autofree char *contents = NULL;
  g_auto(GStrv) lines = NULL;
  char *named = NULL;

  if (!g_file_get_contents ("/proc/self/cgroup", &contents, NULL, NULL))
    return NULL;
  lines = g_strsplit (contents, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      if (unified && g_str_has_prefix (lines[i], "0::"))
        {
          g_free (named);
          return g_strdup (lines[i] + 3);
        }
      if (named == NULL && strstr (lines[i], ":name=systemd:") != NULL)
        named = g_strdup (strstr (lines[i], ":name=systemd:") + strlen (":name=systemd:"));
    }
  return named;
}

ShimwatchCgroupHost *
shimwatch_cgroup_host_detect (void)
{
  g_auto(GStrv) mounts = detect_mounts ();
  g_autofree char *own = NULL;
  g_autofree char *unified_mount = NULL;
  ShimwatchCgroupLayout layout;
  gboolean systemd;

  if (is_cgroup2 (CGROUP_ROOT))
    {
      layout = SHIMWATCH_CGROUP_LAYOUT_UNIFIED;
      unified_mount = g_strdup (CGROUP_ROOT);
    }
  else if (is_cgroup2 (CGROUP_ROOT "/unified"))
    {
      layout = SHIMWATCH_CGROUP_LAYOUT_HYBRID;
      unified_mount = g_strdup (CGROUP_ROOT "/unified");
    }
  else
    layout = SHIMWATCH_CGROUP_LAYOUT_LEGACY;

  /* systemd runs, and we run in one of its units: give each task a scope of its own */
  systemd = g_file_test ("/run/systemd/system", G_FILE_TEST_IS_DIR);
  if (systemd)
    own = detect_own_cgroup (unified_mount != NULL);
  return shimwatch_cgroup_host_new (layout, (const char * const *) mounts, unified_mount,
                                    own, systemd && own != NULL
                                               ? SHIMWATCH_CGROUP_DRIVER_SYSTEMD
                                               : SHIMWATCH_CGROUP_DRIVER_CGROUPFS);
}

/* -- placement --------------------------------------------------------------------------- */

/* systemd's unit name escaping of one path element (systemd-escape): "-" and anything
 * unusual become \xNN, so "<ns>-<id>" names exactly one (ns, id) pair. Identifiers are
 * [A-Za-z0-9._-] and never start with ".", so only "-" needs it in practice. */
static void
append_unit_escaped (GString    *out,
                     const char *element)
{
  for (const char *p = element; *p != '\0'; p++)
    {
      if (g_ascii_isalnum (*p) || *p == '_' || (*p == '.' && p != element))
        g_string_append_c (out, *p);
      else
        g_string_append_printf (out, "\\x%02x", (guchar) *p);
    }
}

/* the slice the service's own unit is in, e.g. /system.slice/shimwatch.service →
 * system.slice; system.slice where none is named */
static char *
slice_of (const char *own_cgroup)
{
  g_auto(GStrv) parts = g_strsplit (own_cgroup != NULL ? own_cgroup : "", "/", -1);
  const char *slice = "system.slice";

  for (guint i = 0; parts[i] != NULL; i++)
    if (g_str_has_suffix (parts[i], ".slice"))
      slice = parts[i];
  return g_strdup (slice);
}

char *
shimwatch_cgroup_task_path (ShimwatchCgroupLayout  layout,
                            const char            *own_cgroup,
                            ShimwatchCgroupDriver  driver,
                            const char            *namespace_,
                            const char            *id)
{
  g_return_val_if_fail (namespace_ != NULL && id != NULL, NULL);

  if (driver == SHIMWATCH_CGROUP_DRIVER_SYSTEMD)
    {
      /* runc's slice:prefix:name → unit <prefix>-<name>.scope in <slice>, Delegate=yes;
       * the same on every layout, since systemd realizes the scope in every hierarchy */
      g_autoptr(GString) path = g_string_new (NULL);
      g_autofree char *slice = slice_of (own_cgroup);

      g_string_append_printf (path, "%s:%s:", slice, SHIMWATCH_CGROUP_SCOPE_PREFIX);
      append_unit_escaped (path, namespace_);
      g_string_append_c (path, '-');
      append_unit_escaped (path, id);
      return g_string_free (g_steal_pointer (&path), FALSE);
    }

  /* cgroupfs: absolute, so runc never places it relative to its own cgroup's parent (on
   * cgroup2, next to the service's unit and outside of anything delegated to it) */
  return g_strdup_printf ("/%s/%s/%s", SHIMWATCH_CGROUP_PARENT, namespace_, id);
}

/* "/a//b/./c/" → "/a/b/c"; NULL for ".." or a relative path */
static char *
normalize (const char *path)
{
  g_auto(GStrv) parts = NULL;
  g_autoptr(GString) out = g_string_new (NULL);

  if (path == NULL || path[0] != '/')
    return NULL;
  parts = g_strsplit (path, "/", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      if (parts[i][0] == '\0' || g_str_equal (parts[i], "."))
        continue;
      if (g_str_equal (parts[i], ".."))
        return NULL;
      g_string_append_c (out, '/');
      g_string_append (out, parts[i]);
    }
  if (out->len == 0)
    g_string_append_c (out, '/');
  return g_string_free (g_steal_pointer (&out), FALSE);
}

/* what normalize() leaves as it is, "/" aside: checked on every cgroup operation of a
 * death, so without building anything */
gboolean
shimwatch_cgroup_path_is_valid (const char *path)
{
  const char *p;

  if (path == NULL || path[0] != '/' || path[1] == '\0')
    return FALSE;
  for (p = path; *p != '\0'; )
    {
      const char *element = ++p;         /* after a '/' */
      gsize length;

      while (*p != '\0' && *p != '/')
        p++;
      length = (gsize) (p - element);
      /* "//", a trailing "/", "." and ".." */
      if (length == 0 || (element[0] == '.' && (length == 1 || (length == 2 && element[1] == '.'))))
        return FALSE;
    }
  return (gsize) (p - path) < 4096 && g_utf8_validate (path, -1, NULL);
}

gboolean
shimwatch_cgroup_paths_overlap (const char *a,
                                const char *b)
{
  gsize la = strlen (a);
  gsize lb = strlen (b);

  if (la > lb)
    return shimwatch_cgroup_paths_overlap (b, a);
  /* a is the shorter: equal, or an ancestor of b */
  return strncmp (a, b, la) == 0 && (b[la] == '\0' || b[la] == '/' || g_str_equal (a, "/"));
}

/* systemd's slice expansion: a-b.slice → /a.slice/a-b.slice; -.slice → "" */
static char *
expand_slice (const char *slice)
{
  g_autoptr(GString) out = g_string_new (NULL);
  g_autofree char *stem = NULL;
  g_auto(GStrv) parts = NULL;
  g_autoptr(GString) prefix = g_string_new (NULL);

  if (g_str_equal (slice, "-.slice"))
    return g_strdup ("");
  stem = g_strndup (slice, strlen (slice) - strlen (".slice"));
  if (stem[0] == '\0' || g_str_has_prefix (stem, "-") || g_str_has_suffix (stem, "-") ||
      strstr (stem, "--") != NULL || strchr (stem, '/') != NULL)
    return NULL;
  parts = g_strsplit (stem, "-", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    {
      if (i > 0)
        g_string_append_c (prefix, '-');
      g_string_append (prefix, parts[i]);
      g_string_append_printf (out, "/%s.slice", prefix->str);
    }
  return g_string_free (g_steal_pointer (&out), FALSE);
}

static gboolean
unit_name_is_valid (const char *name)
{
  if (name[0] == '\0' || strlen (name) > 255)
    return FALSE;
  for (const char *p = name; *p != '\0'; p++)
    if (!g_ascii_isalnum (*p) && strchr (":-_.\\@", *p) == NULL)
      return FALSE;
  return TRUE;
}

char *
shimwatch_cgroup_resolve (const ShimwatchCgroupHost  *host,
                          const char                 *runc_path,
                          GError                    **error)
{
  g_autofree char *path = NULL;

  if (runc_path == NULL || !g_utf8_validate (runc_path, -1, NULL) || strlen (runc_path) >= 4096)
    {
      g_set_error_literal (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                           "linux.cgroupsPath is not a valid path");
      return NULL;
    }

  if (host->driver == SHIMWATCH_CGROUP_DRIVER_SYSTEMD)
    {
      g_auto(GStrv) parts = g_strsplit (runc_path, ":", -1);
      g_autofree char *slice_path = NULL;
      g_autofree char *unit = NULL;

      if (g_strv_length (parts) != 3 || parts[2][0] == '\0' ||
          (parts[0][0] != '\0' && !g_str_has_suffix (parts[0], ".slice")) ||
          g_str_has_suffix (parts[2], ".slice"))
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "linux.cgroupsPath \"%s\" is not slice:prefix:name, the form runc's "
                       "systemd cgroup driver needs (the name of a scope, not a slice)",
                       runc_path);
          return NULL;
        }
      slice_path = expand_slice (parts[0][0] != '\0' ? parts[0] : "system.slice");
      unit = parts[1][0] != '\0' ? g_strdup_printf ("%s-%s.scope", parts[1], parts[2])
                                 : g_strdup_printf ("%s.scope", parts[2]);
      if (slice_path == NULL || !unit_name_is_valid (unit))
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "linux.cgroupsPath \"%s\" does not name a valid slice and scope",
                       runc_path);
          return NULL;
        }
      path = g_strdup_printf ("%s/%s", slice_path, unit);
    }
  else
    {
      if (runc_path[0] != '/')
        {
          /* runc would put it below the parent of its own cgroup: the service's neighbours */
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "linux.cgroupsPath \"%s\" is relative; give an absolute path, or none "
                       "and the service chooses one", runc_path);
          return NULL;
        }
      path = normalize (runc_path);
      if (path == NULL)
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "linux.cgroupsPath \"%s\" must not contain \"..\"", runc_path);
          return NULL;
        }
    }

  /* what a cleanup kills and removes must never be the machine's or the service's own */
  if (g_str_equal (path, "/") ||
      (host->own_cgroup != NULL && shimwatch_cgroup_paths_overlap (path, host->own_cgroup) &&
       strlen (path) <= strlen (host->own_cgroup)))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "linux.cgroupsPath \"%s\" is the root cgroup or contains the service's own",
                   runc_path);
      return NULL;
    }
  return g_steal_pointer (&path);
}

/* -- on disk ----------------------------------------------------------------------------- */

GPtrArray *
shimwatch_cgroup_dirs (const ShimwatchCgroupHost *host,
                       const char                *path)
{
  GPtrArray *dirs = g_ptr_array_new_with_free_func (g_free);

  for (guint i = 0; host->mounts != NULL && host->mounts[i] != NULL; i++)
    g_ptr_array_add (dirs, g_build_filename (host->mounts[i], path, NULL));
  return dirs;
}

/* a child cgroup: a directory, never a link (cgroupfs tells the type in the entry) */
static gboolean
is_child_cgroup (const char          *dir,
                 const struct dirent *entry)
{
  g_autofree char *child = NULL;
  struct stat st;

  if (g_str_equal (entry->d_name, ".") || g_str_equal (entry->d_name, ".."))
    return FALSE;
  if (entry->d_type != DT_UNKNOWN)
    return entry->d_type == DT_DIR;
  child = g_build_filename (dir, entry->d_name, NULL);
  return lstat (child, &st) == 0 && S_ISDIR (st.st_mode);
}

/* every pid in dir/cgroup.procs and below */
static void
collect_pids (const char *dir,
              GHashTable *pids,
              guint       depth)
{
  g_autofree char *procs = g_build_filename (dir, "cgroup.procs", NULL);
  g_autofree char *contents = NULL;
  g_autoptr(GError) error = NULL;
  DIR *children;
  struct dirent *entry;

  if (g_file_get_contents (procs, &contents, NULL, &error))
    {
      g_auto(GStrv) lines = g_strsplit (contents, "\n", -1);

      for (guint i = 0; lines[i] != NULL; i++)
        {
          guint64 pid;

          if (g_ascii_string_to_unsigned (lines[i], 10, 1, G_MAXINT, &pid, NULL))
            g_hash_table_add (pids, GUINT_TO_POINTER ((guint) pid));
        }
    }
  /* not a cgroup of this hierarchy (a task's cgroup is not in every one): none below */
  else if (g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
    return;
  if (depth > 32 || (children = opendir (dir)) == NULL)
    return;
  while ((entry = readdir (children)) != NULL)
    {
      g_autofree char *child = NULL;

      if (!is_child_cgroup (dir, entry))
        continue;
      child = g_build_filename (dir, entry->d_name, NULL);
      collect_pids (child, pids, depth + 1);
    }
  closedir (children);
}

/* a small kernfs file into buf (NUL-terminated): one open and one read, none of
 * g_file_get_contents()' stdio for a file whose size says nothing */
static gboolean
read_small_file (const char *path,
                 char       *buf,
                 gsize       size)
{
  int fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  gssize n;

  if (fd < 0)
    return FALSE;
  do
    n = read (fd, buf, size - 1);
  while (n < 0 && errno == EINTR);
  close (fd);
  if (n < 0)
    return FALSE;
  buf[n] = '\0';
  return TRUE;
}

int
shimwatch_cgroup_open_events (const ShimwatchCgroupHost *host,
                              const char                *path)
{
  g_autofree char *events = NULL;

  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), -1);

  if (host->unified_mount == NULL)
    return -1;
  events = g_build_filename (host->unified_mount, path, "cgroup.events", NULL);
  return open (events, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
}

guint
shimwatch_cgroup_kill (ShimwatchCgroupHost *host,
                       const char          *path)
{
  return shimwatch_cgroup_kill_at (host, path, -1);
}

gboolean
shimwatch_cgroup_kill_subtree (ShimwatchCgroupHost *host,
                               const char          *path)
{
  g_autofree char *kill_file = NULL;
  gboolean ok;
  int fd;

  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), FALSE);

  if (host->unified_mount == NULL || g_atomic_int_get (&host->no_kill_file))
    return FALSE;
  /* cgroup2 since Linux 5.14: the kernel kills the whole subtree, forks included */
  kill_file = g_build_filename (host->unified_mount, path, "cgroup.kill", NULL);
  fd = open (kill_file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    {
      g_autofree char *dir = NULL;
      struct stat st;

      /* The cgroup is there and has no cgroup.kill: an older kernel, which will not grow
       * one. Where cgroup2 is mounted beside v1 hierarchies (a hybrid host, usually an
       * older kernel) the cleanup asks at each death, twice or three times: only once
       * for the life of the host, not one failing open(2) per ask. (A cgroup that is
       * gone says nothing of the kernel.) */
      if (errno == ENOENT &&
          lstat ((dir = g_build_filename (host->unified_mount, path, NULL)), &st) == 0 &&
          S_ISDIR (st.st_mode))
        g_atomic_int_set (&host->no_kill_file, TRUE);
      return FALSE;
    }
  ok = write (fd, "1", 1) == 1;
  close (fd);
  return ok;
}

guint
shimwatch_cgroup_kill_at (ShimwatchCgroupHost *host,
                          const char          *path,
                          int                  events_fd)
{
  g_autoptr(GHashTable) signalled = NULL;
  g_autoptr(GPtrArray) dirs = NULL;

  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), 0);

  if (shimwatch_cgroup_kill_subtree (host, path))
    return shimwatch_cgroup_is_populated_at (host, path, events_fd) ? 1 : 0;
  signalled = g_hash_table_new (NULL, NULL);

  /* cgroup v1, or an older cgroup2: what cgroup.procs lists, until nothing new shows up
   * (a process may fork between the read and the kill) */
  dirs = shimwatch_cgroup_dirs (host, path);
  for (guint round = 0; round < KILL_ROUNDS; round++)
    {
      g_autoptr(GHashTable) pids = g_hash_table_new (NULL, NULL);
      GHashTableIter iter;
      gpointer pid;
      guint fresh = 0;

      for (guint i = 0; i < dirs->len; i++)
        collect_pids (g_ptr_array_index (dirs, i), pids, 0);
      g_hash_table_iter_init (&iter, pids);
      while (g_hash_table_iter_next (&iter, &pid, NULL))
        {
          if ((pid_t) GPOINTER_TO_UINT (pid) == getpid ())
            continue;
          if (kill ((pid_t) GPOINTER_TO_UINT (pid), SIGKILL) == 0 &&
              g_hash_table_add (signalled, pid))
            fresh++;
        }
      if (fresh == 0)
        break;
    }
  return g_hash_table_size (signalled);
}

gboolean
shimwatch_cgroup_exists_in (const ShimwatchCgroupHost *host,
                            const char                *path,
                            int                        hierarchy)
{
  g_autofree char *dir = NULL;
  struct stat st;
  int found;

  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), FALSE);
  g_return_val_if_fail (hierarchy >= 0 && (guint) hierarchy < g_strv_length (host->mounts), FALSE);

  if (host->mount_fds[hierarchy] >= 0)
    found = fstatat (host->mount_fds[hierarchy], path + 1, &st, AT_SYMLINK_NOFOLLOW);
  else
    found = lstat ((dir = g_build_filename (host->mounts[hierarchy], path, NULL)), &st);
  /* anything but "not there" (a permission problem, say) counts as there */
  return found == 0 || errno != ENOENT;
}

int
shimwatch_cgroup_host_get_unified (const ShimwatchCgroupHost *host)
{
  return host->unified;
}

int
shimwatch_cgroup_find (const ShimwatchCgroupHost *host,
                       const char                *path)
{
  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), -1);

  for (guint i = 0; host->mounts[i] != NULL; i++)
    if (shimwatch_cgroup_exists_in (host, path, (int) i))
      return (int) i;
  return -1;
}

gboolean
shimwatch_cgroup_exists (const ShimwatchCgroupHost *host,
                         const char                *path)
{
  return shimwatch_cgroup_find (host, path) >= 0;
}

gboolean
shimwatch_cgroup_is_populated (const ShimwatchCgroupHost *host,
                               const char                *path)
{
  return shimwatch_cgroup_is_populated_at (host, path, -1);
}

gboolean
shimwatch_cgroup_is_populated_at (const ShimwatchCgroupHost *host,
                                  const char                *path,
                                  int                        events_fd)
{
  g_autoptr(GHashTable) pids = g_hash_table_new (NULL, NULL);
  g_autoptr(GPtrArray) dirs = NULL;

  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), FALSE);

  if (events_fd >= 0)
    {
      char contents[256];
      gssize n;

      /* a kernfs file reads afresh from offset 0; a cgroup removed since reads ENODEV */
      do
        n = pread (events_fd, contents, sizeof contents - 1, 0);
      while (n < 0 && errno == EINTR);
      if (n >= 0)
        {
          contents[n] = '\0';
          return strstr (contents, "populated 1") != NULL;
        }
    }
  if (host->unified_mount != NULL)
    {
      g_autofree char *events = g_build_filename (host->unified_mount, path, "cgroup.events",
                                                  NULL);
      char contents[256];

      /* recursive, and kept by the kernel: "populated 0" once the last process is gone */
      if (read_small_file (events, contents, sizeof contents))
        return strstr (contents, "populated 1") != NULL;
    }
  dirs = shimwatch_cgroup_dirs (host, path);
  for (guint i = 0; i < dirs->len && g_hash_table_size (pids) == 0; i++)
    collect_pids (g_ptr_array_index (dirs, i), pids, 0);
  return g_hash_table_size (pids) > 0;
}

static gboolean
remove_dir (const char  *dir,
            guint        depth,
            GError     **error)
{
  DIR *children = depth < 32 ? opendir (dir) : NULL;
  struct dirent *entry;

  /* the child cgroups only: the entry tells a directory from the many control files
   * without a stat of each */
  while (children != NULL && (entry = readdir (children)) != NULL)
    {
      g_autofree char *child = NULL;

      if (!is_child_cgroup (dir, entry))
        continue;
      child = g_build_filename (dir, entry->d_name, NULL);
      if (!remove_dir (child, depth + 1, error))
        {
          closedir (children);
          return FALSE;
        }
    }
  if (children != NULL)
    closedir (children);
  if (g_rmdir (dir) != 0 && errno != ENOENT)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot remove cgroup %s: %s", dir, g_strerror (saved_errno));
      return FALSE;
    }
  return TRUE;
}

gboolean
shimwatch_cgroup_remove (const ShimwatchCgroupHost  *host,
                         const char                 *path,
                         GError                    **error)
{
  g_autoptr(GPtrArray) dirs = NULL;
  gboolean ok = TRUE;

  g_return_val_if_fail (shimwatch_cgroup_path_is_valid (path), FALSE);

  dirs = shimwatch_cgroup_dirs (host, path);
  for (guint i = 0; i < dirs->len; i++)
    {
      g_autoptr(GError) local_error = NULL;

      if (!remove_dir (g_ptr_array_index (dirs, i), 0, &local_error))
        {
          if (ok)
            g_propagate_error (error, g_steal_pointer (&local_error));
          ok = FALSE;
        }
    }
  return ok;
}

void
shimwatch_cgroup_remove_empty_parents (const ShimwatchCgroupHost *host,
                                       const char                *path,
                                       const char                *stop)
{
  g_autofree char *current = g_strdup (path);

  while (shimwatch_cgroup_path_is_valid (current) && !g_str_equal (current, stop))
    {
      g_autoptr(GPtrArray) dirs = shimwatch_cgroup_dirs (host, current);
      gboolean busy = FALSE;
      char *parent;

      for (guint i = 0; i < dirs->len; i++)
        if (g_rmdir (g_ptr_array_index (dirs, i)) != 0 && errno != ENOENT)
          busy = TRUE;
      if (busy)
        return;
      parent = g_path_get_dirname (current);
      g_free (current);
      current = parent;
    }
}
