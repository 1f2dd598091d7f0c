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
 * an epoll set, a signalfd, /dev/null and the read ends of the output pipes of the
 * commands it runs, nothing else.
 *
 * It does all of a run but the asking: it makes the child's stdout and stderr pipes,
 * reads them as the child writes, reaps the child, and tells the service the end, with
 * the output, in one record. The service's side of a run is one send and one receive on
 * the one socket, no descriptor of its own: with a `shim delete` per dead shim, the
 * socketpair, pipes, fcntl(2)s, descriptor passing and poller watches a run used to cost
 * the main thread were a third of its system calls per death.
 *
 * Protocol (SOCK_SEQPACKET; one message is one record, never split nor merged):
 *
 *  - service → spawner: RUN, a ShimwatchSpawnerRequest with the run's id (the service's
 *    choice, never reused), then the working directory, argv[0..argc-1] and
 *    envp[0..envc-1], each NUL-terminated; with SHIMWATCH_SPAWNER_WITH_STDIN, the child's
 *    stdin as the one descriptor of the message (SCM_RIGHTS), else the child reads
 *    /dev/null.
 *  - service → spawner: KILL, a bare ShimwatchSpawnerRequest with the id of a run: SIGKILL
 *    to its child unless it is reaped already. The spawner is the child's parent, so the
 *    pid it signals is still the child's until the spawner itself reaps it: no pid-reuse
 *    race. A KILL for a run that has ended is ignored.
 *  - spawner → service: DONE, a ShimwatchSpawnerReply with the run's id, the errno of the
 *    spawn (nothing ran) or the wait status, followed by the child's stdout and then its
 *    stderr (lengths[0] and lengths[1] bytes, each at most SHIMWATCH_SPAWN_OUTPUT_MAX: what
 *    is beyond is read and dropped). Output that does not fit in one record of
 *    SHIMWATCH_SPAWNER_REPLY_MAX bytes comes before it in OUTPUT records of the same
 *    layout, in order. DONE is the run's last record.
 *
 * Replies of different runs come in the order the runs end. What the spawner cannot send
 * at once (the service is busy) it queues, in order, and sends when its socket takes it.
 * The child's output is read as it comes, so a child is never blocked on a full pipe; once
 * the child is reaped what is in its pipes is read, and what a child it left behind may
 * still write is not waited for.
 *
 * The spawner exits at EOF on its socket, and gets SIGKILL when the service dies
 * (PR_SET_PDEATHSIG). What it leaves running then (a `shim delete` not finished) is
 * re-parented as it would have been had the service started it.
 */
#pragma once

#include <glib.h>
#include <sys/types.h>

G_BEGIN_DECLS

#define SHIMWATCH_SPAWNER_MAGIC       0x32535753u   /* "SWS2" */
/* a request larger than this (a huge environment) is spawned by the service itself */
#define SHIMWATCH_SPAWNER_REQUEST_MAX (96 * 1024)
/* the largest reply record, its header included */
#define SHIMWATCH_SPAWNER_REPLY_MAX   (64 * 1024)
/* what /proc/<pid>/comm says of the spawner */
#define SHIMWATCH_SPAWNER_COMM        "shimwatch-spawn"

typedef enum {
  SHIMWATCH_SPAWNER_WITH_STDIN = 1 << 0,   /* RUN: the child's stdin comes with it */
} ShimwatchSpawnerFlags;

typedef enum {
  SHIMWATCH_SPAWNER_RUN = 1,   /* service → spawner */
  SHIMWATCH_SPAWNER_KILL,      /* service → spawner */
  SHIMWATCH_SPAWNER_OUTPUT,    /* spawner → service */
  SHIMWATCH_SPAWNER_DONE,      /* spawner → service */
} ShimwatchSpawnerKind;

typedef struct {
  guint32 magic;
  guint32 kind;    /* RUN or KILL */
  guint64 id;
  guint32 flags;   /* ShimwatchSpawnerFlags */
  guint32 argc;
  guint32 envc;
  guint32 reserved;
} ShimwatchSpawnerRequest;

typedef struct {
  guint32 kind;        /* OUTPUT or DONE */
  gint32  error;       /* DONE: the errno of the spawn (nothing ran), or 0 */
  guint64 id;
  gint32  status;      /* DONE without an error: the wait status */
  guint32 lengths[2];  /* the stdout and stderr bytes that follow, in that order */
  guint32 reserved;
} ShimwatchSpawnerReply;

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
