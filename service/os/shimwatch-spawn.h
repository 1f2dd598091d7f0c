/* SPDX-License-Identifier: Apache-2.0
 *
 * Running a short command (a shim's "start" and "delete") without fork(2) on the main
 * thread.
 *
 * GSubprocess forks when it must change the child's working directory, and a fork of the
 * service copies its page tables and makes every page of the main thread copy-on-write:
 * with hundreds of shims dying at once the service spent more time in page faults after
 * those forks than in its own work, and with a thousand shims supervised every CreateTask
 * forked a process holding thousands of descriptors. posix_spawn(3) starts the child in the parent's
 * memory (CLONE_VM | CLONE_VFORK) until it execs; glibc does the chdir, the redirections
 * and the closing of every other descriptor in the child. Even so, the clone copies the
 * parent's descriptor table: with a thousand shims supervised that is four thousand
 * descriptors per command, so the service hands its commands to a spawner process it
 * forked at start-up (shimwatch-spawner.h), which makes the child's pipes, reads them,
 * reaps the child and sends back the wait status with the output: a run costs this
 * process one message each way on one socket, and no descriptor. Without a spawner the
 * service spawns the command itself, reads its output from non-blocking pipes, and
 * watches the exit through a pidfd in the main context (where pidfd_open(2) is missing or
 * refused: a thread blocked in waitid(2)).
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

typedef struct {
  int      wait_status;    /* as waitpid(2) reports it (a SIGKILL if timed_out) */
  gboolean timed_out;      /* killed (SIGKILL) at the deadline */
  GBytes  *stdout_bytes;   /* at most SHIMWATCH_SPAWN_OUTPUT_MAX each */
  GBytes  *stderr_bytes;
} ShimwatchSpawnResult;

#define SHIMWATCH_SPAWN_OUTPUT_MAX (1u << 20)

void shimwatch_spawn_result_free (ShimwatchSpawnResult *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchSpawnResult, shimwatch_spawn_result_free)

/* The end of a run: @result, or @error (each the callback's to free). */
typedef void (*ShimwatchSpawnDoneFunc) (ShimwatchSpawnResult *result,
                                        GError               *error,
                                        gpointer              user_data);

/* @argv[0] is an absolute path; @envp the whole environment; @cwd the child's working
 * directory; @stdin_fd (borrowed, may be -1 for /dev/null) its stdin. @done is called
 * once, on the thread-default main context of the caller (never inside this call), once
 * the process exited and its pipes are read. Through the spawner a run makes no GTask. */
void shimwatch_spawn_run (const char * const    *argv,
                          const char * const    *envp,
                          const char            *cwd,
                          int                    stdin_fd,
                          guint                  timeout_ms,
                          ShimwatchSpawnDoneFunc done,
                          gpointer               user_data);

/* shimwatch_spawn_run() as a GAsyncResult: completes on the thread-default main context
 * once the process exited and its pipes are read. */
void                  shimwatch_spawn_async (const char * const *argv,
                                             const char * const *envp,
                                             const char         *cwd,
                                             int                 stdin_fd,
                                             guint               timeout_ms,
                                             GAsyncReadyCallback callback,
                                             gpointer            user_data);
ShimwatchSpawnResult *shimwatch_spawn_finish (GAsyncResult *result,
                                              GError      **error);

/* Starts the spawner (shimwatch-spawner.h) that runs every command from then on. Call it
 * early, while the process holds few descriptors: shimwatchd does before it opens anything
 * or starts a thread; its replies are read on the thread-default main context of the
 * caller, which must be running for any run to complete. Without a spawner (not started,
 * or lost: it died, or stopped answering, and was killed), commands are spawned by this
 * process as before; a lost spawner is logged, and the runs it had are completed with an
 * error at once (what they started runs on, re-parented). */
gboolean shimwatch_spawn_start_spawner   (GError **error);
/* the spawner's pid; 0 without one */
GPid     shimwatch_spawn_get_spawner_pid (void);
/* lets the spawner go (EOF on its socket) and reaps it: its wait status, or -1 if there was
 * none, or it was lost. The runs it had are completed with an error. */
int      shimwatch_spawn_stop_spawner    (void);

#ifdef SHIMWATCH_TEST_HOOKS
/* tests (-Dtest_hooks): make pidfd_open(2) fail with @errno_value (0: call it again), as
 * it does under valgrind 3.19 (ENOSYS) or a seccomp filter (EPERM) */
void shimwatch_spawn_set_pidfd_open_errno_for_tests (int errno_value);
#endif

G_END_DECLS
