/* SPDX-License-Identifier: Apache-2.0
 *
 * Crash points for tests: with -Dtest_hooks=true, SHIMWATCH_TEST_CRASH_AT=<step> makes
 * the service abort() when it reaches that named step of a cleanup (SIGKILL itself with
 * SHIMWATCH_TEST_CRASH_SIGNAL=KILL), so tests can prove that a restart finishes the job
 * with exactly-once events. Release builds (-Dtest_hooks=false) compile this to nothing.
 */
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <glib.h>

/* whether SHIMWATCH_TEST_CRASH_AT names @step (always FALSE without test hooks) */
static inline gboolean
shimwatch_crash_point_armed (const char *step)
{
#ifdef SHIMWATCH_TEST_HOOKS
  return g_strcmp0 (g_getenv ("SHIMWATCH_TEST_CRASH_AT"), step) == 0;
#else
  (void) step;
  return FALSE;
#endif
}

/* whether SHIMWATCH_TEST_CRASH_AT names any step (always FALSE without test hooks) */
static inline gboolean
shimwatch_crash_point_any_armed (void)
{
#ifdef SHIMWATCH_TEST_HOOKS
  return g_getenv ("SHIMWATCH_TEST_CRASH_AT") != NULL;
#else
  return FALSE;
#endif
}

static inline void
shimwatch_crash_point (const char *step)
{
#ifdef SHIMWATCH_TEST_HOOKS
  const char *at = g_getenv ("SHIMWATCH_TEST_CRASH_AT");

  if (at != NULL && g_str_equal (at, step))
    {
      gboolean kill_self = g_strcmp0 (g_getenv ("SHIMWATCH_TEST_CRASH_SIGNAL"), "KILL") == 0;

      g_printerr ("shimwatchd: crash point %s reached, %s (test hook)\n", step,
                  kill_self ? "SIGKILL" : "aborting");
      if (kill_self)
        kill (getpid (), SIGKILL);
      abort ();
    }
#else
  (void) step;
#endif
}
