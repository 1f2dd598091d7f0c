/* SPDX-License-Identifier: Apache-2.0
 *
 * Signal marks files as a round trip: a file the service would accept decodes, encodes
 * and decodes again to the same marks, and encoding that gives the same bytes; laid over
 * a record, each mark newer than it sets its signal's flag exactly when it says sent. A
 * file it would not accept is an error, never a crash or a leak.
 */
#include "config.h"

#include <string.h>

#include "shimwatch-marks.h"
#include "shimwatch-lifecycle-signal.h"
#include "fuzz-common.h"

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_quiet_logs ();
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) broken = g_string_new (NULL);
  g_autoptr(GString) broken_again = g_string_new (NULL);
  g_autoptr(ShimwatchRecord) record = g_new0 (ShimwatchRecord, 1);
  ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS];
  ShimwatchMark again[SHIMWATCH_MARKS_N_SLOTS];
  guint8 encoded[SHIMWATCH_MARKS_SIZE];
  guint8 reencoded[SHIMWATCH_MARKS_SIZE];
  gboolean ok;

  ok = shimwatch_marks_decode (data, size, marks, broken, &error);
  g_assert (ok == (error == NULL));
  if (!ok)
    return 0;
  shimwatch_marks_encode (marks, encoded);
  g_assert_true (shimwatch_marks_decode (encoded, sizeof encoded, again, broken_again, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (broken_again->len, ==, 0);
  g_assert_cmpmem (marks, sizeof marks, again, sizeof again);
  shimwatch_marks_encode (again, reencoded);
  g_assert_cmpmem (encoded, sizeof encoded, reencoded, sizeof reencoded);

  record->status = g_strdup ("running");
  record->marks_seq = size > 0 ? data[0] : 0;
  shimwatch_marks_apply (record, marks);
  for (guint i = 0; i < SHIMWATCH_MARKS_N_SLOTS; i++)
    {
      gboolean *flag = shimwatch_lifecycle_signal_record_flag (
        shimwatch_lifecycle_signal_from_slot (i), record);

      if (marks[i].state != SHIMWATCH_MARK_EMPTY && marks[i].seq > record->marks_seq)
        g_assert_cmpint (*flag, ==, marks[i].state == SHIMWATCH_MARK_SENT);
      else
        g_assert_false (*flag);
    }
  g_assert_nonnull (record->status);
  return 0;
}
