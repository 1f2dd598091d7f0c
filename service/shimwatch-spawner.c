/* SPDX-License-Identifier: Apache-2.0
 *
 * The spawner process (see shimwatch-spawner.h). Its side runs in plain C: after a fork of
 * a process with threads only async-signal-safe calls and malloc(3) are safe, and GLib's
 * locks (logging, the type system) may be held by a thread that is not there any more.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gio/gio.h>

#include "shimwatch-spawner.h"

/* epoll tokens besides the children's reply sockets */
#define TOKEN_SOCKET ((void *) &spawner_token_socket)
#define TOKEN_SIGNAL ((void *) &spawner_token_signal)
static const char spawner_token_socket;
static const char spawner_token_signal;

typedef struct {
  pid_t pid;
  int   reply;     /* -1: the service closed it; the child is still reaped */
} Child;

typedef struct {
  int     sock;
  int     epoll;
  int     signal_fd;
  Child **children;
  size_t  n_children;
  size_t  size_children;
  char   *buffer;   /* SHIMWATCH_SPAWNER_REQUEST_MAX */
  char   *stack;    /* the children's, between their clone and their execve: see spawn() */
} Spawner;

/* what a child needs between its clone and its execve, and the errno it tells back */
typedef struct {
  const char  *cwd;
  int          fds[3];    /* its stdin, stdout and stderr */
  char       **argv;
  char       **envp;
  volatile int error;
} ChildArgs;

/* below the guard page: a child runs a few plain system calls on it, never GLib */
#define CHILD_STACK_SIZE (64 * 1024)

static void
close_fds (int   *fds,
           size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0)
      close (fds[i]);
}

static void
send_message (int     reply,
              guint32 kind,
              gint32  value,
              gint32  error,
              int     fd)
{
  ShimwatchSpawnerMessage message = { kind, value, error };
  struct iovec iov = { &message, sizeof message };
  union {
    struct cmsghdr header;
    char           space[CMSG_SPACE (sizeof (int))];
  } control;
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

  if (fd >= 0)
    {
      struct cmsghdr *cmsg;

      memset (&control, 0, sizeof control);
      msg.msg_control = control.space;
      msg.msg_controllen = sizeof control.space;
      cmsg = &control.header;
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN (sizeof (int));
      memcpy (CMSG_DATA (cmsg), &fd, sizeof fd);
    }
  /* a fresh socket with at most two small records in it: this never blocks; a service
   * that closed its end gets nothing */
  while (sendmsg (reply, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR)
    ;
}

static Child *
find_child (Spawner *spawner,
            pid_t    pid,
            size_t  *index)
{
  for (size_t i = 0; i < spawner->n_children; i++)
    if (spawner->children[i]->pid == pid)
      {
        *index = i;
        return spawner->children[i];
      }
  return NULL;
}

static gboolean
find_child_by_ptr (Spawner *spawner,
                   Child   *child)
{
  for (size_t i = 0; i < spawner->n_children; i++)
    if (spawner->children[i] == child)
      return TRUE;
  return FALSE;
}

static void
drop_reply (Spawner *spawner,
            Child   *child)
{
  if (child->reply < 0)
    return;
  epoll_ctl (spawner->epoll, EPOLL_CTL_DEL, child->reply, NULL);
  close (child->reply);
  child->reply = -1;
}

/* every child that exited: its status to the service, its reply socket closed */
static void
reap (Spawner *spawner)
{
  struct signalfd_siginfo info;
  int status;
  pid_t pid;

  /* SIGCHLD does not queue: one read takes it, for however many children ended; one
   * that ends from now on raises it again */
  while (read (spawner->signal_fd, &info, sizeof info) < 0 && errno == EINTR)
    ;
  /* every child this spawner has is one it tracks: none left, no wait4 to learn so */
  while (spawner->n_children > 0 && (pid = waitpid (-1, &status, WNOHANG)) > 0)
    {
      size_t i;
      Child *child = find_child (spawner, pid, &i);

      if (child == NULL)
        continue;
      if (child->reply >= 0)
        send_message (child->reply, SHIMWATCH_SPAWNER_EXITED, status, 0, -1);
      drop_reply (spawner, child);
      free (child);
      spawner->children[i] = spawner->children[--spawner->n_children];
    }
}

/* a KILL from the service, or its end of a reply socket closed */
static void
reply_readable (Spawner *spawner,
                Child   *child)
{
  ShimwatchSpawnerMessage message;
  ssize_t n;

  do
    n = recv (child->reply, &message, sizeof message, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN)
    return;
  if (n == (ssize_t) sizeof message && message.kind == SHIMWATCH_SPAWNER_KILL)
    {
      /* not reaped yet (reap() frees the child): the pid is still this child's */
      kill (child->pid, SIGKILL);
      return;
    }
  /* EOF or nonsense: the service does not want to hear about this child any more; it is
   * still reaped */
  drop_reply (spawner, child);
}

/* the strings of a request: cwd, argv, envp; NULL if they do not add up */
static char **
parse_strings (char   *data,
               size_t  length,
               size_t  n_strings)
{
  char **strings;
  size_t at = 0;

  if (length == 0 || data[length - 1] != '\0')
    return NULL;
  strings = calloc (n_strings + 2, sizeof (char *));
  if (strings == NULL)
    return NULL;
  for (size_t i = 0; i < n_strings; i++)
    {
      if (at >= length)
        {
          free (strings);
          return NULL;
        }
      strings[i] = data + at;
      at += strlen (data + at) + 1;
    }
  if (at != length)
    {
      free (strings);
      return NULL;
    }
  return strings;
}

/* posix_spawn(3) of @argv in @cwd, with @in_fd, @out_fd and @err_fd as its stdin, stdout and
 * stderr, every other descriptor closed and every signal at its default, unblocked.
 * Returns 0 or posix_spawn's errno. The service's own fallback starts commands with
 * this; the spawner gives its children the same with spawn() below, more cheaply. */
int
shimwatch_spawner_posix_spawn (pid_t              *pid,
                               const char         *cwd,
                               int                 in_fd,
                               int                 out_fd,
                               int                 err_fd,
                               const char * const *argv,
                               const char * const *envp)
{
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  sigset_t signals;
  int saved_errno;

  posix_spawn_file_actions_init (&actions);
  posix_spawn_file_actions_adddup2 (&actions, in_fd, 0);
  posix_spawn_file_actions_adddup2 (&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2 (&actions, err_fd, 2);
  posix_spawn_file_actions_addchdir_np (&actions, cwd);
  posix_spawn_file_actions_addclosefrom_np (&actions, 3);
  posix_spawnattr_init (&attr);
  /* nothing of the caller's signal handling (the spawner's SIGCHLD, blocked for its
   * signalfd) is inherited */
  sigemptyset (&signals);
  posix_spawnattr_setsigmask (&attr, &signals);
  sigfillset (&signals);
  posix_spawnattr_setsigdefault (&attr, &signals);
  posix_spawnattr_setflags (&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  saved_errno = posix_spawn (pid, argv[0], &actions, &attr, (char * const *) argv,
                             (char * const *) envp);
  posix_spawn_file_actions_destroy (&actions);
  posix_spawnattr_destroy (&attr);
  return saved_errno;
}

/* The child, from its clone to its execve, in the spawner's memory (CLONE_VM) on the
 * spawner's child stack, while the spawner waits (CLONE_VFORK): only system calls, no
 * libc state touched, nothing that a signal handler could see half done (the spawner has
 * none). What it does is what posix_spawn(3) did with shimwatch_spawner_posix_spawn()'s
 * attributes: the three descriptors, the working directory, every other descriptor
 * closed, every signal at its default and unblocked. */
/* not instrumented (a sanitizer build): it runs on a stack of its own, and never returns */
__attribute__ ((no_sanitize_address))
static int
child_main (void *data)
{
  ChildArgs *args = data;
  /* the kernel's struct sigaction: SIG_DFL, no flags, no restorer, an empty mask */
  const struct {
    unsigned long handler, flags, restorer, mask;
  } default_action = { (unsigned long) SIG_DFL, 0, 0, 0 };
  const unsigned long no_signals = 0;

  /* received with MSG_CMSG_CLOEXEC: each dup3 makes one of 0, 1 and 2 without
   * FD_CLOEXEC (one received as that very number only loses the flag, as posix_spawn's
   * dup2 action does it) */
  for (int i = 0; i < 3; i++)
    if (args->fds[i] == i ? syscall (SYS_fcntl, i, F_SETFD, 0) != 0
                          : syscall (SYS_dup3, args->fds[i], i, 0) < 0)
      goto fail;
  if (syscall (SYS_chdir, args->cwd) != 0)
    goto fail;
  /* every other descriptor of the spawner is close-on-exec anyway (Linux before 5.9 has
   * no close_range: then exec closes them) */
  if (syscall (SYS_close_range, 3, ~0U, 0) != 0 && errno != ENOSYS)
    goto fail;
  /* the spawner's signal state: all at their default but SIGPIPE (ignored), SIGCHLD
   * blocked (for its signalfd); the child's: all at their default, none blocked */
  if (syscall (SYS_rt_sigaction, SIGPIPE, &default_action, NULL, sizeof no_signals) != 0 ||
      syscall (SYS_rt_sigprocmask, SIG_SETMASK, &no_signals, NULL, sizeof no_signals) != 0)
    goto fail;
  syscall (SYS_execve, args->argv[0], args->argv, args->envp);
fail:
  args->error = errno;
  syscall (SYS_exit_group, 127);
  return 127;
}

/* posix_spawn(3) in the spawner, without what it costs at every spawn there: its file
 * actions check each descriptor against RLIMIT_NOFILE (7 prlimit64), it maps and unmaps
 * a stack for the child, and blocks every signal around the clone and unblocks them
 * (2 rt_sigprocmask) lest a handler run in the child. The spawner has no handler, and
 * one stack, mapped once, serves every child: CLONE_VFORK holds the spawner until the
 * child has called execve (or exited), so no two children use it at once. Returns 0 or
 * the errno of the clone, or of the child's set-up or execve; @pidfd: the child's pidfd
 * if the request asks for it (-1 if pidfd_open fails). */
static int
spawn (Spawner                       *spawner,
       const ShimwatchSpawnerRequest *request,
       char                         **strings,
       const int                     *fds,
       pid_t                         *pid,
       int                           *pidfd)
{
  ChildArgs args = { .cwd = strings[0], .fds = { fds[1], fds[2], fds[3] },
                     .argv = strings + 1 };
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
  gboolean want_pidfd = (request->flags & SHIMWATCH_SPAWNER_WANT_PIDFD) != 0;

  /* argv and envp are each NULL-terminated in one array: move envp up by one */
  memmove (strings + 2 + request->argc, strings + 1 + request->argc,
           request->envc * sizeof (char *));
  strings[1 + request->argc] = NULL;
  args.envp = strings + 2 + request->argc;
  args.envp[request->envc] = NULL;

  *pidfd = -1;
  *pid = clone (child_main, spawner->stack + CHILD_STACK_SIZE, flags, &args);
  if (*pid < 0)
    return errno;
  if (args.error != 0)
    {
      /* it exited at once: reaped here, never tracked */
      while (waitpid (*pid, NULL, 0) < 0 && errno == EINTR)
        ;
      return args.error;
    }
  /* not reaped yet: the pid is the child's, so is the pidfd. (Not CLONE_PIDFD, which
   * would save this call: valgrind 3.19 runs a clone with it as a fork that deadlocks.) */
  if (want_pidfd)
    *pidfd = (int) syscall (SYS_pidfd_open, *pid, 0);
  return 0;
}

static void
add_child (Spawner *spawner,
           pid_t    pid,
           int      reply)
{
  struct epoll_event event = { .events = EPOLLIN };
  Child *child = malloc (sizeof (Child));

  if (child == NULL ||
      (spawner->n_children == spawner->size_children &&
       (spawner->children = realloc (spawner->children,
                                     (spawner->size_children = spawner->size_children * 2 + 16) *
                                     sizeof (Child *))) == NULL))
    {
      /* out of memory in a process this small: end, the service falls back */
      _exit (70);
    }
  child->pid = pid;
  child->reply = reply;
  event.data.ptr = child;
  if (epoll_ctl (spawner->epoll, EPOLL_CTL_ADD, reply, &event) != 0)
    {
      close (reply);
      child->reply = -1;
    }
  spawner->children[spawner->n_children++] = child;
}

/* one request off the socket; FALSE when there is none (EAGAIN) */
static gboolean
handle_request (Spawner *spawner)
{
  ShimwatchSpawnerRequest request;
  union {
    struct cmsghdr header;
    char           space[CMSG_SPACE (4 * sizeof (int))];
  } control;
  struct iovec iov = { spawner->buffer, SHIMWATCH_SPAWNER_REQUEST_MAX };
  struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = control.space, .msg_controllen = sizeof control.space };
  int fds[4] = { -1, -1, -1, -1 };
  size_t n_fds = 0;
  char **strings = NULL;
  pid_t pid = 0;
  int pidfd = -1;
  int error;
  ssize_t n;

  do
    n = recvmsg (spawner->sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN)
    return FALSE;
  if (n <= 0)
    _exit (0);   /* EOF: the service has gone or let us go */

  for (struct cmsghdr *cmsg = CMSG_FIRSTHDR (&msg); cmsg != NULL; cmsg = CMSG_NXTHDR (&msg, cmsg))
    if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS)
      {
        size_t count = (cmsg->cmsg_len - CMSG_LEN (0)) / sizeof (int);
        int *received = (int *) (void *) CMSG_DATA (cmsg);

        for (size_t i = 0; i < count; i++)
          {
            if (n_fds < G_N_ELEMENTS (fds))
              fds[n_fds++] = received[i];
            else
              close (received[i]);
          }
      }

  if (n_fds == G_N_ELEMENTS (fds) && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 &&
      (size_t) n >= sizeof request)
    {
      memcpy (&request, spawner->buffer, sizeof request);
      if (request.magic == SHIMWATCH_SPAWNER_MAGIC && request.argc >= 1 &&
          request.argc < SHIMWATCH_SPAWNER_REQUEST_MAX && request.envc < SHIMWATCH_SPAWNER_REQUEST_MAX)
        strings = parse_strings (spawner->buffer + sizeof request, (size_t) n - sizeof request,
                                 1 + (size_t) request.argc + request.envc);
    }
  if (strings == NULL || strings[1][0] != '/')
    {
      /* not from our service: nothing runs; its reply socket (if any) says why */
      if (fds[0] >= 0)
        send_message (fds[0], SHIMWATCH_SPAWNER_STARTED, 0, EINVAL, -1);
      free (strings);
      close_fds (fds, G_N_ELEMENTS (fds));
      return TRUE;
    }

  error = spawn (spawner, &request, strings, fds, &pid, &pidfd);
  free (strings);
  /* the child has its stdin, stdout and stderr: ours go now */
  close_fds (fds + 1, 3);
  if (error != 0)
    {
      send_message (fds[0], SHIMWATCH_SPAWNER_STARTED, 0, error, -1);
      close (fds[0]);
      return TRUE;
    }
  send_message (fds[0], SHIMWATCH_SPAWNER_STARTED, pid, 0, pidfd);
  if (pidfd >= 0)
    close (pidfd);
  add_child (spawner, pid, fds[0]);
  return TRUE;
}

static void G_GNUC_NORETURN
spawner_main (int   sock,
              pid_t parent)
{
  Spawner spawner = { .sock = sock };
  struct epoll_event event = { .events = EPOLLIN };
  struct sigaction action = { .sa_handler = SIG_DFL };
  sigset_t signals;

  /* dies with the service; if it is gone already, at once */
  if (prctl (PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid () != parent)
    _exit (0);
  prctl (PR_SET_NAME, SHIMWATCH_SPAWNER_COMM);

  /* nothing of the service's signal handlers (GLib's, for SIGTERM and SIGINT) */
  for (int sig = 1; sig < NSIG; sig++)
    if (sig != SIGKILL && sig != SIGSTOP)
      sigaction (sig, &action, NULL);
  signal (SIGPIPE, SIG_IGN);
  sigemptyset (&signals);
  sigaddset (&signals, SIGCHLD);
  sigprocmask (SIG_SETMASK, &signals, NULL);

  /* holds no directory, not even the one it was started in */
  if (chdir ("/") != 0)
    _exit (71);

  spawner.buffer = malloc (SHIMWATCH_SPAWNER_REQUEST_MAX);
  spawner.signal_fd = signalfd (-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  spawner.epoll = epoll_create1 (EPOLL_CLOEXEC);
  /* the children's stack, with a guard page below it */
  spawner.stack = mmap (NULL, CHILD_STACK_SIZE + getpagesize (), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (spawner.buffer == NULL || spawner.signal_fd < 0 || spawner.epoll < 0 ||
      spawner.stack == MAP_FAILED ||
      mprotect (spawner.stack, getpagesize (), PROT_NONE) != 0)
    _exit (71);
  spawner.stack += getpagesize ();
  event.data.ptr = TOKEN_SOCKET;
  if (epoll_ctl (spawner.epoll, EPOLL_CTL_ADD, sock, &event) != 0)
    _exit (71);
  event.data.ptr = TOKEN_SIGNAL;
  if (epoll_ctl (spawner.epoll, EPOLL_CTL_ADD, spawner.signal_fd, &event) != 0)
    _exit (71);

  for (;;)
    {
      struct epoll_event events[32];
      int n = epoll_wait (spawner.epoll, events, G_N_ELEMENTS (events), -1);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        _exit (71);
      /* reaping first: a reply socket of this batch may belong to a child reaped in it */
      for (int i = 0; i < n; i++)
        if (events[i].data.ptr == TOKEN_SIGNAL)
          reap (&spawner);
      for (int i = 0; i < n; i++)
        {
          if (events[i].data.ptr == TOKEN_SOCKET)
            {
              while (handle_request (&spawner))
                ;
            }
          else if (events[i].data.ptr != TOKEN_SIGNAL)
            {
              Child *child = events[i].data.ptr;

              /* still there (not reaped above) and still listened to */
              if (find_child_by_ptr (&spawner, child) && child->reply >= 0)
                reply_readable (&spawner, child);
            }
        }
    }
}

int
shimwatch_spawner_fork (GPid    *pid,
                        GError **error)
{
  pid_t parent = getpid ();
  pid_t child;
  int fds[2];
  int saved_errno;

  if (socketpair (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    {
      saved_errno = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot make the spawner's socket: %s", g_strerror (saved_errno));
      return -1;
    }
  child = fork ();
  if (child < 0)
    {
      saved_errno = errno;
      close (fds[0]);
      close (fds[1]);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot fork the spawner: %s", g_strerror (saved_errno));
      return -1;
    }
  if (child == 0)
    {
      int sock = fds[1];

      /* its socket at 3 or above (0, 1 and 2 stay what they were, the journal); every
       * other descriptor of the service closed */
      if (fds[0] < 3 || fds[1] < 3)
        {
          int null_fd = open ("/dev/null", O_RDWR | O_CLOEXEC);

          if (sock < 3)
            sock = fcntl (fds[1], F_DUPFD_CLOEXEC, 3);
          for (int i = 0; i < 2 && null_fd >= 0; i++)
            if (fds[i] < 3)
              dup2 (null_fd, fds[i]);
        }
      if (sock < 0)
        _exit (71);
      if (sock > 3 && close_range (3, (unsigned int) sock - 1, 0) != 0)
        for (int fd = 3; fd < sock; fd++)
          close (fd);
      closefrom (sock + 1);
      spawner_main (sock, parent);
    }
  close (fds[1]);
  *pid = child;
  return fds[0];
}
