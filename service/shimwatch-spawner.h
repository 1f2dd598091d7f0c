/* SPDX-License-Identifier: Apache-2.0
 *
 * The spawner: a small process of the service that starts the service's commands (a shim's
 * `start` and `delete`) and reaps them.
 *
 * Every clone(2) copies the descriptor table of the process that calls it, and the child
 * then closes every descriptor but its three: with a thousand shims the service holds
 * about four thousand, and each `shim start` or `shim delete` spawned from the service
 * itself paid for them twice, in the service's own CPU. The spawner is forked once, at
 * start-up, before the service opens anything or starts a thread; it holds its socket,
 * an epoll set, a signalfd and one socket per command it runs, nothing else.
 *
 * Protocol (SOCK_SEQPACKET; one message is one record, never split nor merged):
 *
 *  - service → spawner, on the spawner's socket: a ShimwatchSpawnerRequest, then the
 *    working directory, argv[0..argc-1] and envp[0..envc-1], each NUL-terminated; with
 *    SCM_RIGHTS, in this order: the request's own reply socket (one end of a fresh
 *    socketpair), the child's stdin, stdout and stderr. The spawner closes the last three
 *    once the child has its own (its clone has returned).
 *  - spawner → service, on the reply socket: STARTED with the pid (with its pidfd when
 *    asked for and pidfd_open(2) works), or with the errno of the spawn; later EXITED
 *    with the wait status once the spawner has reaped the child. After its last message
 *    (EXITED, or a STARTED with an errno) it closes the reply socket: the service is
 *    woken by that close alone, and reads everything then (one wake-up per run, not one
 *    per message).
 *  - service → spawner, on the reply socket: KILL, SIGKILL to the child unless it is
 *    reaped already. The spawner is the child's parent, so the pid it signals is still the
 *    child's until the spawner itself reaps it: no pid-reuse race.
 *
 * The spawner exits at EOF on its socket, and gets SIGKILL when the service dies
 * (PR_SET_PDEATHSIG). What it leaves running then (a `shim delete` not finished) is
 * re-parented as it would have been had the service started it.
 */
#pragma once

#include <glib.h>
#include <sys/types.h>

G_BEGIN_DECLS

#define SHIMWATCH_SPAWNER_MAGIC       0x31535753u   /* "SWS1" */
/* a request larger than this (a huge environment) is spawned by the service itself */
#define SHIMWATCH_SPAWNER_REQUEST_MAX (96 * 1024)
/* what /proc/<pid>/comm says of the spawner */
#define SHIMWATCH_SPAWNER_COMM        "shimwatch-spawn"

typedef enum {
  SHIMWATCH_SPAWNER_WANT_PIDFD = 1 << 0,   /* send the child's pidfd with STARTED */
} ShimwatchSpawnerFlags;

typedef struct {
  guint32 magic;
  guint32 flags;   /* ShimwatchSpawnerFlags */
  guint32 argc;
  guint32 envc;
} ShimwatchSpawnerRequest;

typedef enum {
  SHIMWATCH_SPAWNER_STARTED = 1,   /* value: the pid; error: the spawn's errno (no pid) */
  SHIMWATCH_SPAWNER_EXITED,        /* value: the wait status */
  SHIMWATCH_SPAWNER_KILL,          /* from the service: SIGKILL the child */
} ShimwatchSpawnerMessageKind;

typedef struct {
  guint32 kind;    /* ShimwatchSpawnerMessageKind */
  gint32  value;
  gint32  error;
} ShimwatchSpawnerMessage;

/* Forks the spawner. Returns the service's end of its socket (close-on-exec) and sets
 * @pid, or -1 with @error set. Only async-signal-safe calls and malloc(3) run in the
 * child, so this is safe from a process with threads too. */
int shimwatch_spawner_fork (GPid    *pid,
                            GError **error);

/* posix_spawn(3) giving the child what the spawner gives its own (chdir, the three
 * descriptors, closefrom 3, default signals, empty mask): 0 or its errno. Plain C
 * without GLib; the service's own fallback, without a spawner, uses it. */
int shimwatch_spawner_posix_spawn (pid_t              *pid,
                                   const char         *cwd,
                                   int                 in_fd,
                                   int                 out_fd,
                                   int                 err_fd,
                                   const char * const *argv,
                                   const char * const *envp);

G_END_DECLS
