/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shimwatch-caller.h"
#include "shimwatch-error.h"
#include "shimwatch-stdio.h"

static const char *names[] = { "stdin", "stdout", "stderr" };

typedef enum {
  KIND_NONE,
  KIND_PATH,
  KIND_FILE,
  KIND_BINARY,
} Kind;

static gboolean
has_value (const char *value)
{
  return value != NULL && *value != '\0';
}

/* what Go's url.Parse takes for a scheme: a letter, then letters, digits, + - . and a ':' */
static char *
scheme_of (const char *value)
{
  gsize n = 0;

  if (!g_ascii_isalpha (value[0]))
    return NULL;
  while (g_ascii_isalnum (value[n]) || value[n] == '+' || value[n] == '-' || value[n] == '.')
    n++;
  return value[n] == ':' ? g_ascii_strdown (value, (gssize) n) : NULL;
}

static gboolean
invalid (GError     **error,
         const char  *format,
         ...) G_GNUC_PRINTF (2, 3);

static gboolean
invalid (GError     **error,
         const char  *format,
         ...)
{
  g_autofree char *message = NULL;
  va_list args;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  g_set_error_literal (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_INVALID_ARGUMENT, message);
  return FALSE;
}

/* the path of a file:// or binary:// URI as the shim will use it (url.URL.Path) */
static const char *
uri_path (const char *value,
          const char *scheme)
{
  return value + strlen (scheme) + strlen ("://");
}

static Kind
kind_of (const char *value)
{
  if (!has_value (value))
    return KIND_NONE;
  if (g_str_has_prefix (value, "file://"))
    return KIND_FILE;
  if (g_str_has_prefix (value, "binary://"))
    return KIND_BINARY;
  return KIND_PATH;
}

static gboolean
check_syntax (const char  *name,
              const char  *value,
              gboolean     uri_allowed,
              GError     **error)
{
  g_autofree char *scheme = NULL;

  if (!g_utf8_validate (value, -1, NULL))
    return invalid (error, "option \"%s\" is not valid UTF-8", name);
  for (const char *p = value; *p != '\0'; p++)
    if ((guchar) *p < 0x20 || *p == 0x7f)
      return invalid (error, "option \"%s\" contains a control character", name);
  if (value[0] == '/')
    return TRUE;

  scheme = scheme_of (value);
  if (scheme == NULL)
    return invalid (error, "option \"%s\" must be an absolute path, not \"%s\"", name, value);
  if (!uri_allowed)
    return invalid (error, "option \"%s\" must be an absolute path (a FIFO), not a URI", name);
  if (g_str_equal (scheme, "fifo"))
    return invalid (error, "option \"%s\": give a FIFO as a plain absolute path; the runc "
                    "shim would take \"%s\" itself for a file name", name, value);
  if (!g_str_equal (scheme, "file") && !g_str_equal (scheme, "binary"))
    return invalid (error, "option \"%s\": scheme \"%s\" is not supported (an absolute path, "
                    "file:///path or binary:///program)", name, scheme);
  if (!g_str_has_prefix (value, g_str_equal (scheme, "file") ? "file:///" : "binary:///"))
    return invalid (error, "option \"%s\" must be %s:///absolute-path (three slashes: a host "
                    "part is not allowed)", name, scheme);
  /* the shim decodes %-escapes and cuts the path at ? and #: keep what is written */
  if (strchr (uri_path (value, scheme), '%') != NULL ||
      strchr (uri_path (value, scheme), '#') != NULL ||
      (g_str_equal (scheme, "file") && strchr (uri_path (value, scheme), '?') != NULL))
    return invalid (error, "option \"%s\": %% escapes, '#'%s are not allowed in \"%s\"", name,
                    g_str_equal (scheme, "file") ? " and '?'" : "", value);
  return TRUE;
}

gboolean
shimwatch_stdio_parse (char     **stdio,
                       gboolean   terminal,
                       GError   **error)
{
  Kind kind;

  for (guint i = 0; i < 3; i++)
    if (has_value (stdio[i]) && !check_syntax (names[i], stdio[i], i > 0, error))
      return FALSE;

  kind = kind_of (stdio[1]);
  if (kind_of (stdio[2]) != KIND_NONE && kind_of (stdio[2]) != KIND_PATH &&
      (kind == KIND_PATH || kind == KIND_NONE))
    return invalid (error, "option \"stderr\" may be a URI only when \"stdout\" is the same "
                    "URI: the shim reads the scheme from stdout alone");
  if (kind == KIND_FILE || kind == KIND_BINARY)
    {
      if (has_value (stdio[2]) && !g_str_equal (stdio[2], stdio[1]))
        return invalid (error, "with stdout \"%s\" the runc shim sends stderr to the same %s; "
                        "give stderr the same URI or leave it out", stdio[1],
                        kind == KIND_FILE ? "file" : "program");
      if (kind == KIND_BINARY && has_value (stdio[0]))
        return invalid (error, "a binary:// logger takes the task's output only; the runc "
                        "shim would ignore stdin");
      if (kind == KIND_FILE && terminal)
        return invalid (error, "a terminal's output goes to a FIFO or a binary:// logger; "
                        "the runc shim cannot send it to a file:// URI");
      /* the shim opens the stderr pipe only if stderr is given, and copies it always */
      g_free (stdio[2]);
      stdio[2] = g_strdup (stdio[1]);
    }
  else if (!terminal && (has_value (stdio[0]) || has_value (stdio[1]) || has_value (stdio[2])) &&
           (!has_value (stdio[1]) || !has_value (stdio[2])))
    return invalid (error, "options \"stdout\" and \"stderr\" go together: the runc shim "
                    "opens both once any stdio option is given (the same path for both is "
                    "fine)");
  return TRUE;
}

static gboolean
refuse (GError                **error,
        const ShimwatchCaller  *caller,
        const char             *name,
        const char             *what,
        const char             *path)
{
  g_set_error (error, SHIMWATCH_ERROR, SHIMWATCH_ERROR_NOT_AUTHORIZED,
               "option \"%s\": uid %u could not %s %s itself; the shim does it as root",
               name, shimwatch_caller_get_uid (caller), what, path);
  return FALSE;
}

static gboolean
check_path (const ShimwatchCaller  *caller,
            const char             *name,
            const char             *path,
            int                     want,
            GError                **error)
{
  g_autofree char *blocked = NULL;
  struct stat st;

  if (!shimwatch_caller_can_reach (caller, path, &blocked))
    return refuse (error, caller, name, "reach", blocked);
  if (stat (path, &st) != 0)
    return invalid (error, "option \"%s\": %s: %s", name, path, g_strerror (errno));
  if (!S_ISFIFO (st.st_mode) && (!S_ISREG (st.st_mode) || want == R_OK))
    return invalid (error, "option \"%s\": %s is not a FIFO%s", name, path,
                    want == R_OK ? "" : " or a regular file");
  if (!shimwatch_caller_may (caller, &st, want))
    return refuse (error, caller, name, want == R_OK ? "read" : "write", path);
  return TRUE;
}

static gboolean
check_file (const ShimwatchCaller  *caller,
            const char             *path,
            GError                **error)
{
  g_autofree char *dir = g_path_get_dirname (path);
  g_autofree char *blocked = NULL;
  struct stat st;

  if (!shimwatch_caller_can_reach (caller, path, &blocked))
    return refuse (error, caller, "stdout", "reach", blocked);
  if (stat (dir, &st) != 0 || !S_ISDIR (st.st_mode))
    return invalid (error, "option \"stdout\": directory %s does not exist", dir);
  if (stat (path, &st) == 0)
    {
      if (!S_ISREG (st.st_mode))
        return invalid (error, "option \"stdout\": %s is not a regular file", path);
      if (!shimwatch_caller_may (caller, &st, W_OK))
        return refuse (error, caller, "stdout", "write", path);
      return TRUE;
    }
  if (stat (dir, &st) != 0 || !shimwatch_caller_may (caller, &st, W_OK | X_OK))
    return refuse (error, caller, "stdout", "create files in", dir);
  return TRUE;
}

static gboolean
check_binary (const char          *value,
              const char * const  *runtime_dirs,
              GError             **error)
{
  g_autofree char *program = g_strndup (uri_path (value, "binary"),
                                        strcspn (uri_path (value, "binary"), "?"));
  g_autofree char *dir = g_path_get_dirname (program);
  g_autofree char *dirs = g_strjoinv (":", (char **) runtime_dirs);

  /* it runs as root: only what the admin put where shims come from */
  if (!g_strv_contains (runtime_dirs, dir))
    return invalid (error, "option \"stdout\": logging program %s is not in the runtime "
                    "directories (%s)", program, dirs);
  if (!g_file_test (program, G_FILE_TEST_IS_REGULAR) ||
      !g_file_test (program, G_FILE_TEST_IS_EXECUTABLE))
    return invalid (error, "option \"stdout\": logging program %s is not an executable file",
                    program);
  return TRUE;
}

gboolean
shimwatch_stdio_check (char * const           *stdio,
                       const char * const     *runtime_dirs,
                       const ShimwatchCaller  *caller,
                       GError                **error)
{
  switch (kind_of (stdio[1]))
    {
    case KIND_BINARY:
      return check_binary (stdio[1], runtime_dirs, error);
    case KIND_FILE:
      if (!check_file (caller, uri_path (stdio[1], "file"), error))
        return FALSE;
      break;
    case KIND_PATH:
      if (!check_path (caller, "stdout", stdio[1], W_OK, error) ||
          (has_value (stdio[2]) && !check_path (caller, "stderr", stdio[2], W_OK, error)))
        return FALSE;
      break;
    case KIND_NONE:
    default:
      if (has_value (stdio[2]) && !check_path (caller, "stderr", stdio[2], W_OK, error))
        return FALSE;
      break;
    }
  return !has_value (stdio[0]) || check_path (caller, "stdin", stdio[0], R_OK, error);
}

/* containerd-shim-runc-v2 (1.6, Debian 12's) copies stdout and stderr into one file through
 * one descriptor when their names are equal, and closes it as soon as stdout ends: what
 * the task writes to stderr after that is lost ("error copying stderr" in its log). So
 * the shim gets two names for the file, and opens it twice. */
gboolean
shimwatch_stdio_prepare (char       **stdio,
                         const char  *task_dir,
                         GError     **error)
{
  g_autofree char *link = NULL;
  struct stat st;

  if (kind_of (stdio[1]) == KIND_FILE)
    {
      g_autofree char *path = g_strdup (uri_path (stdio[1], "file"));
      int fd;

      /* what the shim does for file://, then the file is a plain path to it */
      fd = open (path, O_WRONLY | O_CREAT | O_APPEND | O_NOCTTY | O_CLOEXEC, 0644);
      if (fd < 0)
        return invalid (error, "option \"stdout\": %s: %s", path, g_strerror (errno));
      close (fd);
      g_free (stdio[1]);
      stdio[1] = g_steal_pointer (&path);
      g_free (stdio[2]);
      stdio[2] = g_strdup (stdio[1]);
    }
  if (kind_of (stdio[1]) != KIND_PATH || !has_value (stdio[2]) ||
      !g_str_equal (stdio[1], stdio[2]) || stat (stdio[1], &st) != 0 || !S_ISREG (st.st_mode))
    return TRUE;   /* a FIFO is opened once per stream anyway */

  link = g_build_filename (task_dir, SHIMWATCH_STDIO_STDERR_LINK, NULL);
  if (symlink (stdio[1], link) != 0)
    {
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (errno),
                   "cannot link %s to the task's output file: %s", link, g_strerror (errno));
      return FALSE;
    }
  g_free (stdio[2]);
  stdio[2] = g_steal_pointer (&link);
  return TRUE;
}
