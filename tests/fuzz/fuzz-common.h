/* SPDX-License-Identifier: Apache-2.0
 *
 * What every libFuzzer harness of tests/fuzz shares: logs quiet (a fuzzer feeds millions of
 * bad inputs; each would log), but a critical or an error still aborts, as G_DEBUG=
 * fatal-criticals does in the tests: a g_return_if_fail hit by input is a bug.
 *
 * Each harness is built twice: with -fsanitize=fuzzer in the clang fuzzing build (meson
 * -Dfuzzing=true), and with replay-main.c everywhere else, where it runs the seed corpus
 * as a regression test.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <glib.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerInitialize   (int *argc, char ***argv);

static GLogWriterOutput
fuzz_log_writer (GLogLevelFlags   log_level,
                 const GLogField *fields,
                 gsize            n_fields,
                 gpointer         user_data)
{
  if (log_level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_ERROR))
    {
      g_log_writer_standard_streams (log_level, fields, n_fields, user_data);
      g_abort ();
    }
  return G_LOG_WRITER_HANDLED;
}

static inline void
fuzz_quiet_logs (void)
{
  g_log_set_writer_func (fuzz_log_writer, NULL, NULL);
}
