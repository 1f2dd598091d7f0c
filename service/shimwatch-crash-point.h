/* SPDX-License-Identifier: Apache-2.0
 *
 * Crash points for tests: with -Dtest_hooks=true, SHIMWATCH_TEST_CRASH_AT=<step> makes
 * the service abort() when it reaches that named step of a cleanup, so tests can prove
 * that a restart finishes the job with exactly-once events. Release builds
 * (-Dtest_hooks=false) compile this to nothing.
 */
#pragma once

#include <stdlib.h>
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

static inline void
shimwatch_crash_point (const char *step)
{
#ifdef SHIMWATCH_TEST_HOOKS
  const char *at = g_getenv ("SHIMWATCH_TEST_CRASH_AT");

  if (at != NULL && g_str_equal (at, step))
    {
      g_printerr ("shimwatchd: crash point %s reached, aborting (test hook)\n", step);
      abort ();
    }
#else
  (void) step;
#endif
}
