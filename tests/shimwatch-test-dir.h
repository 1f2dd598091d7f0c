/* SPDX-License-Identifier: Apache-2.0
 *
 * A test's own directory that a failing test does not leave behind. A failed g_assert
 * aborts the test process, a fatal log message (g_error, a warning, a critical) ends it with
 * G_BREAKPOINT's SIGTRAP, and a meson timeout sends SIGTERM: GLib runs no fixture teardown
 * then, and a directory made with g_dir_make_tmp() stays in /tmp or /dev/shm for good. A
 * directory made here is registered with this process: the test's teardown removes it with
 * shimwatch_test_dir_remove(); should the test end first, by SIGABRT, SIGTRAP, SIGTERM,
 * SIGINT or a crash's SIGSEGV, SIGBUS, SIGFPE or SIGILL, a handler removes it, with all it
 * holds (never across a mount below it), on the process's way out, and the signal then
 * ends the process as it would have. Only SIGKILL gets past it.
 *
 * The same goes for a test's child processes (a `sleep` standing in for a task): one
 * registered with shimwatch_test_child_add() is killed, by its PID, on the same way out,
 * and shimwatch_test_child_wait() or _kill() ends it when the test goes well.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* As g_dir_make_tmp (@tmpl, @error), in @parent instead of g_get_tmp_dir() when not NULL
 * ("/dev/shm" for a tmpfs) */
char       *shimwatch_test_dir_new    (const char  *parent,
                                       const char  *tmpl,
                                       GError     **error);
/* Removes @dir with all it holds (what is left of it: a test may have emptied and removed
 * it to prove a point), and forgets it */
void        shimwatch_test_dir_remove (const char  *dir);
/* How many directories are registered (made and not removed) */
guint       shimwatch_test_dir_get_n  (void);

/* Registers @pid, a child of this process not yet reaped (G_SPAWN_DO_NOT_REAP_CHILD), to
 * be killed with SIGKILL should the test end by one of the signals above */
void        shimwatch_test_child_add  (GPid         pid);
/* Waits for @pid (registered) to end, forgets it, then reaps it: its PID is never killed
 * once it may be another process's. Returns its wait status. */
int         shimwatch_test_child_wait (GPid         pid);
/* Kills @pid (registered) with SIGKILL and shimwatch_test_child_wait()s for it */
int         shimwatch_test_child_kill (GPid         pid);

G_END_DECLS
