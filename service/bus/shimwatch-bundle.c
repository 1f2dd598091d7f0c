/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shimwatch-bundle.h"
#include "shimwatch-caller.h"
#include "shimwatch-error.h"
#include "shimwatch-file.h"
#include "shimwatch-wire.h"

static gboolean
refuse (const ShimwatchCaller  *caller,
        const char             *what,
        GError                **error)
{
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
               "uid %u cannot read %s; a bundle runs as root, so its caller must be able "
               "to read it themselves", shimwatch_caller_get_uid (caller), what);
  return FALSE;
}

/* every directory above @path (resolved) must let the caller through */
static gboolean
check_ancestors (const ShimwatchCaller  *caller,
                 const char             *path,
                 GError                **error)
{
  g_autofree char *blocked = NULL;

  if (shimwatch_caller_can_reach (caller, path, &blocked))
    return TRUE;
  return refuse (caller, blocked, error);
}

/* the path an O_PATH fd refers to: what the kernel resolved, once */
static char *
fd_path (int fd)
{
  g_autofree char *link = g_strdup_printf ("/proc/self/fd/%d", fd);

  return g_file_read_link (link, NULL);
}

static char *
describe (const char *path,
          const char *real_path)
{
  if (real_path == NULL || strcmp (path, real_path) == 0)
    return g_strdup (path);
  return g_strdup_printf ("%s (resolved to %s)", path, real_path);
}

static gboolean
resolve_rootfs (ShimwatchBundle  *bundle,
                const ShimwatchCaller *caller,
                int               dir_fd,
                const char       *name,
                const char       *root_path,
                GError          **error)
{
  g_autofree char *expected = NULL;
  struct stat st;
  int saved_errno;
  int fd;

  /* relative to the bundle as resolved above, so that runc sees the same directory */
  fd = openat (dir_fd, root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    {
      saved_errno = errno;
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "bundle %s: its root.path \"%s\" %s", name, root_path,
                   saved_errno == ENOENT ? "does not exist" :
                   saved_errno == ENOTDIR ? "is not a directory" : g_strerror (saved_errno));
      return FALSE;
    }
  bundle->rootfs = fd_path (fd);
  if (bundle->rootfs == NULL || fstat (fd, &st) != 0)
    {
      saved_errno = errno;
      close (fd);
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "bundle %s: cannot resolve its root.path \"%s\": %s", name, root_path,
                   g_strerror (saved_errno));
      return FALSE;
    }
  close (fd);
  if (!check_ancestors (caller, bundle->rootfs, error))
    return FALSE;
  if (!shimwatch_caller_may (caller, &st, R_OK | X_OK))
    return refuse (caller, bundle->rootfs, error);

  /* runc refuses a rootfs reached through a symbolic link, with words that do not name
   * the bundle: say it here */
  expected = g_path_is_absolute (root_path)
               ? g_canonicalize_filename (root_path, NULL)
               : g_canonicalize_filename (root_path, bundle->real_path);
  if (strcmp (expected, bundle->rootfs) != 0)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "bundle %s: its rootfs %s is reached through a symbolic link (it is %s); "
                   "runc needs the real path in root.path", name, expected, bundle->rootfs);
      return FALSE;
    }
  return TRUE;
}

ShimwatchBundle *
shimwatch_bundle_open (const char             *path,
                       const ShimwatchCaller  *caller,
                       const char             *default_cgroups_path,
                       GError                **error)
{
  g_autoptr(ShimwatchBundle) bundle = g_new0 (ShimwatchBundle, 1);
  g_autoptr(GError) local_error = NULL;
  g_autofree char *contents = NULL;
  g_autofree char *root_path = NULL;
  g_autofree char *name = NULL;
  g_autofree char *config_name = NULL;
  g_autoptr(ShimwatchCaller) service = NULL;
  struct stat st;
  gsize length = 0;
  int saved_errno;
  int dir_fd;
  gboolean ok;

  if (path == NULL || !g_path_is_absolute (path) || !g_utf8_validate (path, -1, NULL))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "bundle \"%s\" is not an absolute path",
                   path != NULL && g_utf8_validate (path, -1, NULL) ? path : "?");
      return NULL;
    }
  bundle->path = g_strdup (path);
  if (caller == NULL)
    caller = service = shimwatch_caller_new (0, NULL);

  dir_fd = open (path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0)
    {
      saved_errno = errno;
      if (saved_errno == ENOENT)
        g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                     "bundle directory %s does not exist", path);
      else if (saved_errno == ENOTDIR)
        g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                     "bundle %s is not a directory", path);
      else
        g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                     "cannot open bundle directory %s: %s", path, g_strerror (saved_errno));
      return NULL;
    }
  bundle->real_path = fd_path (dir_fd);
  if (bundle->real_path == NULL || fstat (dir_fd, &st) != 0)
    {
      saved_errno = errno;
      close (dir_fd);
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "cannot resolve bundle directory %s: %s", path, g_strerror (saved_errno));
      return NULL;
    }
  name = describe (path, bundle->real_path);
  config_name = g_build_filename (bundle->real_path, "config.json", NULL);

  ok = check_ancestors (caller, bundle->real_path, error);
  if (ok && !shimwatch_caller_may (caller, &st, R_OK | X_OK))
    ok = refuse (caller, name, error);
  if (ok)
    {
      contents = shimwatch_read_regular_file_at (dir_fd, "config.json",
                                                 SHIMWATCH_BUNDLE_CONFIG_MAX, SHIMWATCH_FILE_NONE,
                                                 &length, &st, &local_error);
      if (contents == NULL)
        {
          if (g_error_matches (local_error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
            g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                         "bundle %s has no config.json", name);
          else
            g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                         "bundle %s: %s", name, local_error->message);
          ok = FALSE;
        }
      else if (!shimwatch_caller_may (caller, &st, R_OK))
        ok = refuse (caller, config_name, error);
    }
  if (ok)
    {
      root_path = shimwatch_wire_oci_config_root_path (contents, length, &local_error);
      if (root_path == NULL)
        {
          g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                       "bundle %s: %s", name, local_error->message);
          ok = FALSE;
        }
    }
  if (ok)
    ok = resolve_rootfs (bundle, caller, dir_fd, name, root_path, error);
  close (dir_fd);
  if (!ok)
    return NULL;

  bundle->config = shimwatch_wire_rewrite_oci_config (contents, length, bundle->real_path,
                                                      default_cgroups_path, &bundle->cgroups_path,
                                                      &local_error);
  if (bundle->config == NULL)
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "bundle %s: %s", name, local_error->message);
      return NULL;
    }
  return g_steal_pointer (&bundle);
}

char *
shimwatch_bundle_describe (const ShimwatchBundle *bundle)
{
  return describe (bundle->path, bundle->real_path);
}

void
shimwatch_bundle_free (ShimwatchBundle *bundle)
{
  if (bundle == NULL)
    return;
  g_free (bundle->path);
  g_free (bundle->real_path);
  g_free (bundle->rootfs);
  g_free (bundle->cgroups_path);
  g_clear_pointer (&bundle->config, g_bytes_unref);
  g_free (bundle);
}

char *
shimwatch_bundle_shim_binary (const char          *bundle,
                              const char * const  *runtime_dirs,
                              GError             **error)
{
  g_autofree char *file = g_build_filename (bundle, "shim-binary-path", NULL);
  g_autofree char *contents = NULL;
  g_autofree char *real = NULL;
  g_autofree char *dir = NULL;
  struct stat st;

  /* containerd's file, in its state directory: still read without blocking the main loop
   * on whatever might stand there instead (a FIFO), and with a cap */
  contents = shimwatch_read_regular_file_at (AT_FDCWD, file, PATH_MAX, SHIMWATCH_FILE_NONE,
                                             NULL, NULL, error);
  if (contents == NULL)
    return NULL;
  g_strstrip (contents);
  if (!g_path_is_absolute (contents))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
                   "%s does not name an absolute path", file);
      return NULL;
    }
  real = realpath (contents, NULL);
  if (real == NULL || stat (real, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_FOUND,
                   "%s: no such shim binary", contents);
      return NULL;
    }
  dir = g_path_get_dirname (real);
  for (guint i = 0; runtime_dirs != NULL && runtime_dirs[i] != NULL; i++)
    {
      g_autofree char *allowed = realpath (runtime_dirs[i], NULL);
      g_autofree char *as_named = g_path_get_dirname (contents);

      /* the binary as named, or the file it resolves to, lies directly in the directory */
      if (allowed != NULL && (g_str_equal (allowed, dir) || g_str_equal (runtime_dirs[i], as_named)))
        return g_steal_pointer (&contents);
    }
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT,
               "%s is not in an allowed runtime directory (RuntimePath)", contents);
  return NULL;
}
