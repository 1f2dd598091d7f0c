/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-test-dir.h"

/* directories a test process has at once (a fixture's, and a few of a test's own) */
#define MAX_DIRS  32
/* how deep a test's tree goes, at most (deeper is left: a handler's stack is not big) */
#define MAX_DEPTH 24

/* What the signal handler reads: fixed slots, no allocation. A slot is filled, then marked
 * used; marked unused, then reused. Only the process that made a directory removes it (a
 * child forked without exec has a copy of the slots, and its own pid). */
static struct {
  volatile sig_atomic_t used;
  pid_t                 owner;
  char                  path[PATH_MAX];
} dirs[MAX_DIRS];

/* child processes a test process has at once */
#define MAX_CHILDREN 16

/* as dirs: what the handler reads, filled then marked used */
static struct {
  volatile sig_atomic_t used;
  pid_t                 owner;
  pid_t                 pid;
} children[MAX_CHILDREN];

/* SIGABRT: a failed g_assert(); SIGTRAP: G_BREAKPOINT(), which is how GLib ends a test at
 * a fatal log message (g_error(), a warning or critical); SIGTERM: meson's timeout */
static const int signals[] = {
  SIGABRT, SIGTRAP, SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGFPE, SIGILL
};
static struct sigaction previous[G_N_ELEMENTS (signals)];

/* getdents64(2)'s record (glibc declares none without _LARGEFILE64_SOURCE games) */
struct dirent64_record {
  guint64        ino;
  gint64         off;
  unsigned short reclen;
  unsigned char  type;
  char           name[];
};

/* Removes @name in @parent, a directory with all it holds, and never across a mount
 * (st_dev other than @dev). Only system calls, no allocation: it runs in a signal handler
 * too. TRUE once @name is gone. */
static gboolean
remove_at (int         parent,
           const char *name,
           dev_t       dev,
           guint       depth)
{
  char buffer[2048] __attribute__ ((aligned (8)));
  struct stat st;
  gboolean removed_some;
  int fd;

  if (unlinkat (parent, name, 0) == 0 || errno == ENOENT)
    return TRUE;
  if (errno != EISDIR || depth == 0)
    return FALSE;
  fd = openat (parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return FALSE;
  if (fstat (fd, &st) != 0 || st.st_dev != dev)
    {
      close (fd);
      return FALSE;
    }
  /* from the start again after a pass that removed something: a directory's offsets need
   * not survive the removal of its entries */
  do
    {
      removed_some = FALSE;
      if (lseek (fd, 0, SEEK_SET) != 0)
        break;
      for (;;)
        {
          long n = syscall (SYS_getdents64, fd, buffer, sizeof buffer);

          if (n <= 0)
            break;
          for (long offset = 0; offset < n;)
            {
              struct dirent64_record *entry = (struct dirent64_record *) (buffer + offset);

              offset += entry->reclen;
              if (strcmp (entry->name, ".") == 0 || strcmp (entry->name, "..") == 0)
                continue;
              if (remove_at (fd, entry->name, dev, depth - 1))
                removed_some = TRUE;
            }
        }
    }
  while (removed_some);
  close (fd);
  return unlinkat (parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT;
}

static void
remove_tree (const char *path)
{
  struct stat st;

  if (fstatat (AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0)
    remove_at (AT_FDCWD, path, st.st_dev, MAX_DEPTH);
}

static void
on_fatal_signal (int        signum,
                 siginfo_t *info,
                 void      *context)
{
  int saved_errno = errno;
  pid_t self = getpid ();

  /* first: a process may hold a directory open, or write in it */
  for (guint i = 0; i < MAX_CHILDREN; i++)
    if (children[i].used && children[i].owner == self)
      {
        kill (children[i].pid, SIGKILL);
        children[i].used = 0;
      }
  for (guint i = 0; i < MAX_DIRS; i++)
    if (dirs[i].used && dirs[i].owner == self)
      {
        remove_tree (dirs[i].path);
        dirs[i].used = 0;
      }
  /* then the signal does what it would have done */
  for (guint i = 0; i < G_N_ELEMENTS (signals); i++)
    if (signals[i] == signum)
      sigaction (signum, &previous[i], NULL);
  errno = saved_errno;
  /* a fault of the kernel's comes again as the instruction is run again; one sent (abort(),
   * kill) or a trap (G_BREAKPOINT()'s int3, which would go on after it) is sent again */
  if (info->si_code <= 0 || (signum != SIGSEGV && signum != SIGBUS && signum != SIGFPE &&
                             signum != SIGILL))
    raise (signum);
}

static void
install_handler (void)
{
  static gsize installed = 0;

  if (g_once_init_enter (&installed))
    {
      struct sigaction action = { 0 };

      action.sa_sigaction = on_fatal_signal;
      action.sa_flags = SA_SIGINFO;
      sigemptyset (&action.sa_mask);
      for (guint i = 0; i < G_N_ELEMENTS (signals); i++)
        sigaddset (&action.sa_mask, signals[i]);
      for (guint i = 0; i < G_N_ELEMENTS (signals); i++)
        g_assert_no_errno (sigaction (signals[i], &action, &previous[i]));
      g_once_init_leave (&installed, 1);
    }
}

char *
shimwatch_test_dir_new (const char *parent,
                        const char *tmpl,
                        GError    **error)
{
  g_autofree char *dir = NULL;
  guint slot;

  install_handler ();
  for (slot = 0; slot < MAX_DIRS && dirs[slot].used; slot++)
    ;
  if (slot == MAX_DIRS)
    g_error ("more than %u test directories at once: remove some", MAX_DIRS);

  if (parent == NULL)
    dir = g_dir_make_tmp (tmpl, error);
  else
    {
      dir = g_build_filename (parent, tmpl, NULL);
      if (g_mkdtemp (dir) == NULL)
        {
          int saved_errno = errno;

          g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved_errno),
                       "cannot make %s: %s", dir, g_strerror (saved_errno));
          return NULL;
        }
    }
  if (dir == NULL)
    return NULL;
  g_assert_cmpuint (strlen (dir), <, PATH_MAX);
  strcpy (dirs[slot].path, dir);
  dirs[slot].owner = getpid ();
  /* the handler sees a slot marked used only once it is filled */
  __atomic_signal_fence (__ATOMIC_SEQ_CST);
  dirs[slot].used = 1;
  return g_steal_pointer (&dir);
}

void
shimwatch_test_dir_remove (const char *dir)
{
  g_return_if_fail (dir != NULL && g_path_is_absolute (dir));

  remove_tree (dir);
  g_assert_false (g_file_test (dir, G_FILE_TEST_EXISTS));
  for (guint i = 0; i < MAX_DIRS; i++)
    if (dirs[i].used && dirs[i].owner == getpid () && strcmp (dirs[i].path, dir) == 0)
      dirs[i].used = 0;
}

guint
shimwatch_test_dir_get_n (void)
{
  guint n = 0;

  for (guint i = 0; i < MAX_DIRS; i++)
    if (dirs[i].used && dirs[i].owner == getpid ())
      n++;
  return n;
}

void
shimwatch_test_child_add (GPid pid)
{
  guint slot;

  g_return_if_fail (pid > 0);

  install_handler ();
  for (slot = 0; slot < MAX_CHILDREN && children[slot].used; slot++)
    ;
  if (slot == MAX_CHILDREN)
    g_error ("more than %u test child processes at once: end some", MAX_CHILDREN);
  children[slot].pid = pid;
  children[slot].owner = getpid ();
  /* the handler sees a slot marked used only once it is filled */
  __atomic_signal_fence (__ATOMIC_SEQ_CST);
  children[slot].used = 1;
}

int
shimwatch_test_child_wait (GPid pid)
{
  siginfo_t info = { 0 };
  int status;

  /* ended, but not reaped: until it is, its PID is no other process's */
  while (waitid (P_PID, (id_t) pid, &info, WEXITED | WNOWAIT) != 0)
    g_assert_cmpint (errno, ==, EINTR);
  for (guint i = 0; i < MAX_CHILDREN; i++)
    if (children[i].used && children[i].owner == getpid () && children[i].pid == pid)
      children[i].used = 0;
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  return status;
}

int
shimwatch_test_child_kill (GPid pid)
{
  g_assert_no_errno (kill (pid, SIGKILL));
  return shimwatch_test_child_wait (pid);
}
