/* SPDX-License-Identifier: Apache-2.0
 *
 * Task records as a round trip: a record file the service would accept decodes, encodes
 * and decodes again to the same record, and encoding that gives the same bytes. A file it
 * would not accept is an error, never a crash or a leak.
 */
#include "config.h"

#include "shimwatch-wire.h"
#include "fuzz-common.h"

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_quiet_logs ();
  return 0;
}

static void
assert_same_record (const ShimwatchRecord *a,
                    const ShimwatchRecord *b)
{
  g_assert_cmpstr (a->namespace_, ==, b->namespace_);
  g_assert_cmpstr (a->id, ==, b->id);
  g_assert_cmpstr (a->runtime, ==, b->runtime);
  g_assert_cmpstr (a->shim_binary, ==, b->shim_binary);
  g_assert_cmpstr (a->task_dir, ==, b->task_dir);
  g_assert_cmpstr (a->address, ==, b->address);
  g_assert_cmpuint (a->shim_pid, ==, b->shim_pid);
  g_assert_cmpuint (a->task_pid, ==, b->task_pid);
  g_assert_cmpuint (a->task_start_time, ==, b->task_start_time);
  g_assert_cmpint (a->created_at, ==, b->created_at);
  g_assert_cmpstr (a->status, ==, b->status);
  g_assert_cmpint (a->exit_known, ==, b->exit_known);
  g_assert_cmpuint (a->exit.pid, ==, b->exit.pid);
  g_assert_cmpuint (a->exit.exit_status, ==, b->exit.exit_status);
  g_assert_cmpint (a->exit.exited_at, ==, b->exit.exited_at);
  g_assert_cmpint (a->exit_emitted, ==, b->exit_emitted);
  g_assert_cmpint (a->disconnected, ==, b->disconnected);
  g_assert_cmpint (a->deleted, ==, b->deleted);
  g_assert_cmpint (a->delete_emitted, ==, b->delete_emitted);
  g_assert_cmpstr (a->pending_signal, ==, b->pending_signal);
  g_assert_cmpint (a->pending_sent, ==, b->pending_sent);
  g_assert_cmpuint (a->marks_seq, ==, b->marks_seq);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchRecord) record = shimwatch_wire_decode_record ((const char *) data, size,
                                                                    &error);
  g_autoptr(ShimwatchRecord) again = NULL;
  g_autoptr(GBytes) encoded = NULL;
  g_autoptr(GBytes) reencoded = NULL;

  g_assert ((record == NULL) == (error != NULL));
  if (record == NULL)
    return 0;
  encoded = shimwatch_wire_encode_record (record);
  again = shimwatch_wire_decode_record (g_bytes_get_data (encoded, NULL),
                                        g_bytes_get_size (encoded), &error);
  g_assert_no_error (error);
  assert_same_record (record, again);
  reencoded = shimwatch_wire_encode_record (again);
  g_assert_true (g_bytes_equal (encoded, reencoded));
  return 0;
}
