/* SPDX-License-Identifier: Apache-2.0
 *
 * The spawner process (see shimwatch-spawner.h). Its side runs in plain C: after a fork of
 * a process with threads only async-signal-safe calls and malloc(3) are safe, and GLib's
 * locks (logging, the type system) may be held by a thread that is not there any more.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gio/gio.h>

#include "shimwatch-spawn.h"
#include "shimwatch-spawner.h"

/* epoll tokens (data.u64): the socket, the signalfd; else the address of a Child with the
 * index of its pipe (0: stdout, 1: stderr) in the lowest bit */
#define TOKEN_SOCKET 0
#define TOKEN_SIGNAL 1

/* a read of a child's output: a pipe's default size, so one read takes all it holds */
#define READ_SIZE (64 * 1024)

/* the requests taken by one recvmmsg(2) */
#define REQUEST_BATCH 4

typedef struct {
  guint64 id;
  pid_t   pid;
  int     fds[2];       /* the read ends of its stdout and stderr; -1 once closed */
  char   *output[2];    /* what they gave, up to SHIMWATCH_SPAWN_OUTPUT_MAX each */
  size_t  lengths[2];
  size_t  sizes[2];
} Child;

/* a record the service's socket did not take yet */
typedef struct Pending {
  struct Pending *next;
  size_t          length;
  char            data[];
} Pending;

typedef struct {
  int       sock;
  int       epoll;
  int       signal_fd;
  int       dev_null;     /* the stdin of a run given none */
  size_t    reply_max;    /* the largest record the socket takes */
  Child   **children;
  size_t    n_children;
  size_t    size_children;
  Pending  *queue;        /* in order; NULL: the socket takes records as they come */
  Pending **queue_tail;
  char     *buffer;       /* REQUEST_BATCH requests of SHIMWATCH_SPAWNER_REQUEST_MAX */
  char     *scratch;      /* READ_SIZE */
  char     *stack;        /* the children's, between their clone and their execve: see spawn() */
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

/* out of memory in a process this small: it ends, and the service, which sees its socket
 * close, runs its commands itself from then on */
static void G_GNUC_NORETURN
out_of_memory (void)
{
  _exit (70);
}

static void
watch_socket (Spawner *spawner,
              uint32_t events)
{
  struct epoll_event event = { .events = events, .data.u64 = TOKEN_SOCKET };

  if (epoll_ctl (spawner->epoll, EPOLL_CTL_MOD, spawner->sock, &event) != 0)
    _exit (71);
}

/* a record the socket refuses for good: a service gone (EPIPE) ends us at once, as its
 * EOF would; any other error (out of buffers) too, since a run never told its end would
 * hang: the service sees the socket close, and ends our runs with an error */
static void G_GNUC_NORETURN
send_failed (void)
{
  _exit (errno == EPIPE || errno == ECONNRESET ? 0 : 73);
}

/* One record to the service: at once if its socket takes it, else queued behind the
 * others, in order. */
static void
send_record (Spawner                     *spawner,
             const ShimwatchSpawnerReply *header,
             const char                  *out,
             const char                  *err)
{
  struct iovec iov[3] = {
    { (void *) header, sizeof *header },
    { (void *) out, header->lengths[0] },
    { (void *) err, header->lengths[1] },
  };
  struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 3 };
  size_t length = sizeof *header + header->lengths[0] + header->lengths[1];
  Pending *pending;

  if (spawner->queue == NULL)
    {
      ssize_t n;

      do
        n = sendmsg (spawner->sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      while (n < 0 && errno == EINTR);
      if (n >= 0)
        return;
      if (errno != EAGAIN)
        send_failed ();
    }
  pending = malloc (sizeof (Pending) + length);
  if (pending == NULL)
    out_of_memory ();
  pending->next = NULL;
  pending->length = length;
  memcpy (pending->data, header, sizeof *header);
  /* (no output is NULL, which memcpy must not be given even for nothing) */
  if (header->lengths[0] > 0)
    memcpy (pending->data + sizeof *header, out, header->lengths[0]);
  if (header->lengths[1] > 0)
    memcpy (pending->data + sizeof *header + header->lengths[0], err, header->lengths[1]);
  if (spawner->queue == NULL)
    {
      spawner->queue = pending;
      /* told when the socket takes more */
      watch_socket (spawner, EPOLLIN | EPOLLOUT);
    }
  else
    *spawner->queue_tail = pending;
  spawner->queue_tail = &pending->next;
}

/* the queue, as far as the socket takes it */
static void
flush_queue (Spawner *spawner)
{
  while (spawner->queue != NULL)
    {
      Pending *pending = spawner->queue;
      ssize_t n;

      do
        n = send (spawner->sock, pending->data, pending->length, MSG_NOSIGNAL | MSG_DONTWAIT);
      while (n < 0 && errno == EINTR);
      if (n < 0 && errno == EAGAIN)
        return;
      if (n < 0)
        send_failed ();
      spawner->queue = pending->next;
      free (pending);
    }
  watch_socket (spawner, EPOLLIN);
}

/* output @i of @child from @at on; NULL while there is none */
static const char *
output_at (Child *child,
           int    i,
           size_t at)
{
  return child->output[i] != NULL ? child->output[i] + at : NULL;
}

/* The end of a run: its output in as few records as the socket's size allows (one, for
 * all that a shim prints), the last one DONE with @error or @status. */
static void
send_end (Spawner *spawner,
          Child   *child,
          int      error,
          int      status)
{
  size_t room = spawner->reply_max - sizeof (ShimwatchSpawnerReply);
  size_t at[2] = { 0, 0 };

  for (;;)
    {
      ShimwatchSpawnerReply header = { .id = child->id };
      size_t left[2] = { child->lengths[0] - at[0], child->lengths[1] - at[1] };

      if (left[0] + left[1] <= room)
        {
          header.kind = SHIMWATCH_SPAWNER_DONE;
          header.error = error;
          header.status = status;
          header.lengths[0] = (guint32) left[0];
          header.lengths[1] = (guint32) left[1];
          send_record (spawner, &header, output_at (child, 0, at[0]), output_at (child, 1, at[1]));
          return;
        }
      header.kind = SHIMWATCH_SPAWNER_OUTPUT;
      header.lengths[0] = (guint32) MIN (left[0], room);
      header.lengths[1] = (guint32) MIN (left[1], room - header.lengths[0]);
      send_record (spawner, &header, output_at (child, 0, at[0]), output_at (child, 1, at[1]));
      at[0] += header.lengths[0];
      at[1] += header.lengths[1];
    }
}

static void
free_child (Child *child)
{
  for (int i = 0; i < 2; i++)
    {
      if (child->fds[i] >= 0)
        close (child->fds[i]);
      free (child->output[i]);
    }
  free (child);
}

/* @length bytes of the child's output @i, kept up to SHIMWATCH_SPAWN_OUTPUT_MAX: more
 * than a shim has any reason to print is read, and dropped */
static void
keep (Child      *child,
      int         i,
      const char *bytes,
      size_t      length)
{
  length = MIN (length, SHIMWATCH_SPAWN_OUTPUT_MAX - child->lengths[i]);
  if (length == 0)
    return;
  if (child->lengths[i] + length > child->sizes[i])
    {
      size_t size = MAX (child->sizes[i] * 2, 4096);
      char *output;

      while (size < child->lengths[i] + length)
        size *= 2;
      size = MIN (size, SHIMWATCH_SPAWN_OUTPUT_MAX);
      output = realloc (child->output[i], size);
      if (output == NULL)
        out_of_memory ();
      child->output[i] = output;
      child->sizes[i] = size;
    }
  memcpy (child->output[i] + child->lengths[i], bytes, length);
  child->lengths[i] += length;
}

/* What output @i of @child holds, once epoll(7) or poll(2) said it is readable. The pipe
 * blocks (its flags are the child's end's too, and a child may not be handed a
 * non-blocking stdout): one read never blocks then, a second one could, unless @hung_up:
 * every writer is gone (a hang-up), and it is read to the end. At the end of the file (or
 * an error) the pipe is closed, which takes it out of the epoll set. TRUE if the read
 * filled the buffer: the pipe may hold more. A read shorter than asked emptied it (a pipe
 * hands over all it holds, up to the size asked), and after a hang-up nothing more comes:
 * no read to find the end of the file, one per pipe of each run, and none at all on a
 * hang-up without data (@readable FALSE). */
static gboolean
read_output (Spawner *spawner,
             Child   *child,
             int      i,
             gboolean readable,
             gboolean hung_up)
{
  while (readable || !hung_up)
    {
      ssize_t n = read (child->fds[i], spawner->scratch, READ_SIZE);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      keep (child, i, spawner->scratch, (size_t) n);
      if (n < READ_SIZE && hung_up)
        break;
      if (!hung_up)
        return n == READ_SIZE;
    }
  close (child->fds[i]);
  child->fds[i] = -1;
  return FALSE;
}

/* What is left in the pipes of a child that has ended, as long as poll(2) finds something
 * (data, or the end of the file): what a child it left behind may still write is not
 * waited for. Usually nothing is left to do: their hang-up came with the child's end. */
static void
drain (Spawner *spawner,
       Child   *child)
{
  gboolean more = TRUE;

  while (more)
    {
      struct pollfd fds[2];
      int which[2];
      nfds_t n = 0;

      for (int p = 0; p < 2; p++)
        if (child->fds[p] >= 0)
          {
            fds[n] = (struct pollfd) { .fd = child->fds[p], .events = POLLIN };
            which[n++] = p;
          }
      if (n == 0 || poll (fds, n, 0) <= 0)
        return;
      more = FALSE;
      for (nfds_t k = 0; k < n; k++)
        if (fds[k].revents != 0)
          more |= read_output (spawner, child, which[k], (fds[k].revents & POLLIN) != 0,
                               (fds[k].revents & (POLLHUP | POLLERR | POLLNVAL)) != 0);
    }
}

static Child *
find_child (Spawner *spawner,
            gboolean by_pid,
            guint64  key,
            size_t  *index)
{
  for (size_t i = 0; i < spawner->n_children; i++)
    if (by_pid ? (guint64) spawner->children[i]->pid == key : spawner->children[i]->id == key)
      {
        *index = i;
        return spawner->children[i];
      }
  return NULL;
}

/* Every child that exited: what is left in its pipes read (what a child it left behind
 * may still write is not waited for), its end sent, its pipes closed. */
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
      Child *child = find_child (spawner, TRUE, (guint64) pid, &i);

      if (child == NULL)
        continue;
      drain (spawner, child);
      send_end (spawner, child, 0, status);
      free_child (child);
      spawner->children[i] = spawner->children[--spawner->n_children];
    }
}

/* the strings of a request: cwd, argv, envp; NULL if they do not add up */
static char **
parse_strings (char  *data,
               size_t length,
               size_t n_strings)
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
 * child has called execve (or exited), so no two children use it at once.
 *
 * The child's stdout and stderr are pipes made here, their read ends in the epoll set
 * (before the clone: a child that runs is always read). Returns 0, or the errno of the
 * pipes, of the clone, or of the child's set-up or execve. */
static int
spawn (Spawner                       *spawner,
       const ShimwatchSpawnerRequest *request,
       char                         **strings,
       int                            stdin_fd,
       Child                         *child)
{
  ChildArgs args = { .cwd = strings[0], .fds = { stdin_fd, -1, -1 }, .argv = strings + 1 };
  int flags = CLONE_VM | CLONE_VFORK | SIGCHLD;
  int error = 0;

  /* argv and envp are each NULL-terminated in one array: move envp up by one */
  memmove (strings + 2 + request->argc, strings + 1 + request->argc,
           request->envc * sizeof (char *));
  strings[1 + request->argc] = NULL;
  args.envp = strings + 2 + request->argc;
  args.envp[request->envc] = NULL;

  for (int i = 0; i < 2; i++)
    {
      struct epoll_event event = { .events = EPOLLIN };
      int ends[2];

      event.data.u64 = (uintptr_t) child | (uintptr_t) i;
      if (pipe2 (ends, O_CLOEXEC) != 0)
        {
          error = errno;
          goto out;
        }
      child->fds[i] = ends[0];
      args.fds[1 + i] = ends[1];
      if (epoll_ctl (spawner->epoll, EPOLL_CTL_ADD, ends[0], &event) != 0)
        {
          error = errno;
          goto out;
        }
    }

  child->pid = clone (child_main, spawner->stack + CHILD_STACK_SIZE, flags, &args);
  if (child->pid < 0)
    error = errno;
  else if (args.error != 0)
    {
      /* it exited at once: reaped here, never tracked */
      while (waitpid (child->pid, NULL, 0) < 0 && errno == EINTR)
        ;
      error = args.error;
    }

out:
  /* the child has its own: the write ends go now */
  for (int i = 1; i < 3; i++)
    if (args.fds[i] >= 0)
      close (args.fds[i]);
  return error;
}

static void
add_child (Spawner *spawner,
           Child   *child)
{
  if (spawner->n_children == spawner->size_children)
    {
      size_t size = spawner->size_children * 2 + 16;
      Child **children = realloc (spawner->children, size * sizeof (Child *));

      if (children == NULL)
        out_of_memory ();
      spawner->children = children;
      spawner->size_children = size;
    }
  spawner->children[spawner->n_children++] = child;
}

/* a RUN: its child started, or its DONE with the errno of why not */
static void
run (Spawner                       *spawner,
     const ShimwatchSpawnerRequest *request,
     char                          *bytes,
     size_t                         length,
     int                            stdin_fd)
{
  Child *child = calloc (1, sizeof (Child));
  char **strings = NULL;
  int error = EINVAL;

  if (child == NULL)
    out_of_memory ();
  child->id = request->id;
  child->fds[0] = child->fds[1] = -1;
  if (request->argc >= 1 && request->argc < SHIMWATCH_SPAWNER_REQUEST_MAX &&
      request->envc < SHIMWATCH_SPAWNER_REQUEST_MAX)
    strings = parse_strings (bytes + sizeof *request, length - sizeof *request,
                             1 + (size_t) request->argc + request->envc);
  if (strings != NULL && strings[1][0] == '/')
    error = spawn (spawner, request, strings, stdin_fd >= 0 ? stdin_fd : spawner->dev_null,
                   child);
  free (strings);
  if (error != 0)
    {
      send_end (spawner, child, error, 0);
      free_child (child);
      return;
    }
  add_child (spawner, child);
}

/* one request, as it came off the socket: @n bytes at @bytes, with @msg's descriptors */
static void
handle_request (Spawner             *spawner,
                char                *bytes,
                size_t               n,
                const struct msghdr *msg)
{
  ShimwatchSpawnerRequest request;
  int fd = -1;
  int n_fds = 0;

  for (struct cmsghdr *cmsg = CMSG_FIRSTHDR (msg); cmsg != NULL;
       cmsg = CMSG_NXTHDR ((struct msghdr *) msg, cmsg))
    if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS)
      {
        size_t count = (cmsg->cmsg_len - CMSG_LEN (0)) / sizeof (int);
        int *received = (int *) (void *) CMSG_DATA (cmsg);

        for (size_t i = 0; i < count; i++)
          {
            if (fd < 0)
              fd = received[i];
            else
              close (received[i]);
            n_fds++;
          }
      }

  if (n < sizeof request || (msg->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0)
    _exit (72);   /* not the protocol: the service sees the socket close, goes on without us */
  memcpy (&request, bytes, sizeof request);
  if (request.magic != SHIMWATCH_SPAWNER_MAGIC)
    _exit (72);
  if (request.kind == SHIMWATCH_SPAWNER_KILL && n == sizeof request && n_fds == 0)
    {
      size_t i;
      Child *child = find_child (spawner, FALSE, request.id, &i);

      /* not reaped yet (reap() forgets the child): the pid is still this child's */
      if (child != NULL)
        kill (child->pid, SIGKILL);
      return;
    }
  if (request.kind != SHIMWATCH_SPAWNER_RUN ||
      n_fds != ((request.flags & SHIMWATCH_SPAWNER_WITH_STDIN) != 0 ? 1 : 0))
    _exit (72);
  run (spawner, &request, bytes, n, fd);
  /* the child has its stdin */
  if (fd >= 0)
    close (fd);
}

/* Every request the socket holds, REQUEST_BATCH at a time with recvmmsg(2): a batch
 * shorter than asked for found the socket empty, so there is no receive that only fails
 * with EAGAIN, one per wake-up, at each run (epoll is level-triggered: a request sent
 * since wakes us again). */
static void
handle_requests (Spawner *spawner)
{
  struct mmsghdr messages[REQUEST_BATCH];
  struct iovec iovs[REQUEST_BATCH];
  union {
    struct cmsghdr header;
    char           space[CMSG_SPACE (sizeof (int))];
  } controls[REQUEST_BATCH];
  int n;

  do
    {
      memset (messages, 0, sizeof messages);
      for (int i = 0; i < REQUEST_BATCH; i++)
        {
          iovs[i] = (struct iovec) { spawner->buffer + (size_t) i * SHIMWATCH_SPAWNER_REQUEST_MAX,
                                     SHIMWATCH_SPAWNER_REQUEST_MAX };
          messages[i].msg_hdr = (struct msghdr) { .msg_iov = &iovs[i], .msg_iovlen = 1,
                                                  .msg_control = controls[i].space,
                                                  .msg_controllen = sizeof controls[i].space };
        }
      do
        n = recvmmsg (spawner->sock, messages, REQUEST_BATCH,
                      MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
      while (n < 0 && errno == EINTR);
      if (n < 0 && errno == EAGAIN)
        return;
      if (n <= 0)
        _exit (0);   /* EOF: the service has gone or let us go */
      for (int i = 0; i < n; i++)
        {
          /* a request is never empty: one of length 0 is the end of the file */
          if (messages[i].msg_len == 0)
            _exit (0);
          handle_request (spawner, iovs[i].iov_base, messages[i].msg_len,
                          &messages[i].msg_hdr);
        }
    }
  while (n == REQUEST_BATCH);
}

static void G_GNUC_NORETURN
spawner_main (int   sock,
              pid_t parent)
{
  Spawner spawner = { .sock = sock };
  struct epoll_event event = { .events = EPOLLIN };
  struct sigaction action = { .sa_handler = SIG_DFL };
  sigset_t signals;
  int size = 4 * SHIMWATCH_SPAWNER_REPLY_MAX;
  socklen_t size_length = sizeof size;

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

  /* The service's OOM protection (OOMScoreAdjust= in its unit) is the service's own: what
   * the spawner starts, and through it the shims and every container whose bundle sets no
   * oomScoreAdj, starts from the kernel's default, as under a plain runc (the shim then
   * takes its parent's score + 1, as under containerd). Raising a score needs no
   * privilege. */
  {
    int fd = open ("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);

    if (fd >= 0)
      {
        if (write (fd, "0", 1) != 1)
          { /* a kernel without it: nothing to undo */ }
        close (fd);
      }
  }

  /* A record is at most what the socket's send buffer holds: as much as the system lets
   * us ask for (net.core.wmem_max), and no more than the service reads at once. */
  setsockopt (sock, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  if (getsockopt (sock, SOL_SOCKET, SO_SNDBUF, &size, &size_length) != 0 || size < 4096)
    _exit (71);
  spawner.reply_max = MIN ((size_t) size - 256, SHIMWATCH_SPAWNER_REPLY_MAX);

  /* (the pages that no request reaches are never touched, and take no memory) */
  spawner.buffer = malloc (REQUEST_BATCH * (size_t) SHIMWATCH_SPAWNER_REQUEST_MAX);
  spawner.scratch = malloc (READ_SIZE);
  spawner.dev_null = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  spawner.signal_fd = signalfd (-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  spawner.epoll = epoll_create1 (EPOLL_CLOEXEC);
  /* the children's stack, with a guard page below it */
  spawner.stack = mmap (NULL, CHILD_STACK_SIZE + getpagesize (), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (spawner.buffer == NULL || spawner.scratch == NULL || spawner.dev_null < 0 ||
      spawner.signal_fd < 0 || spawner.epoll < 0 || spawner.stack == MAP_FAILED ||
      mprotect (spawner.stack, getpagesize (), PROT_NONE) != 0)
    _exit (71);
  spawner.stack += getpagesize ();
  event.data.u64 = TOKEN_SOCKET;
  if (epoll_ctl (spawner.epoll, EPOLL_CTL_ADD, sock, &event) != 0)
    _exit (71);
  event.data.u64 = TOKEN_SIGNAL;
  if (epoll_ctl (spawner.epoll, EPOLL_CTL_ADD, spawner.signal_fd, &event) != 0)
    _exit (71);

  for (;;)
    {
      struct epoll_event events[64];
      gboolean requests = FALSE;
      gboolean writable = FALSE;
      gboolean ended = FALSE;
      int n = epoll_wait (spawner.epoll, events, G_N_ELEMENTS (events), -1);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        _exit (71);
      /* Output first, then the queue and the requests, the reaping last: only the reaping
       * forgets a child, so the pipes of this batch all belong to children still here. */
      for (int i = 0; i < n; i++)
        {
          if (events[i].data.u64 == TOKEN_SOCKET)
            {
              requests |= (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0;
              writable |= (events[i].events & EPOLLOUT) != 0;
            }
          else if (events[i].data.u64 == TOKEN_SIGNAL)
            ended = TRUE;
          else
            {
              Child *child = (Child *) (uintptr_t) (events[i].data.u64 & ~(guint64) 1);
              int p = (int) (events[i].data.u64 & 1);

              if (child->fds[p] >= 0)
                read_output (&spawner, child, p, (events[i].events & EPOLLIN) != 0,
                             (events[i].events & (EPOLLHUP | EPOLLERR)) != 0);
            }
        }
      if (writable)
        flush_queue (&spawner);
      if (requests)
        handle_requests (&spawner);
      if (ended)
        reap (&spawner);
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
