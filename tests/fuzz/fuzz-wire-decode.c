/* SPDX-License-Identifier: Apache-2.0
 *
 * Every protobuf decode shimwatch runs on bytes from a shim: the ttrpc Request and
 * Response envelopes, each Task API response, Empty, and the events Forward request with
 * its Envelope and Any. All of them on each input: a decode fails with an error or gives
 * a result that is freed, never a crash, a leak or undefined behaviour.
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

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(GBytes) payload = g_bytes_new (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchTtrpcRequest) request = NULL;
  g_autoptr(ShimwatchEvent) event = NULL;
  g_autoptr(GArray) pids = NULL;
  g_autoptr(GBytes) response_payload = NULL;
  g_autofree char *message = NULL;
  ShimwatchTaskState state;
  ShimwatchExit exit_info;
  guint32 a, b;
  int code;

  request = shimwatch_wire_decode_request (data, size, &error);
  g_assert ((request == NULL) == (error != NULL));
  g_clear_error (&error);
  if (!shimwatch_wire_decode_response (data, size, &code, &message, &response_payload, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);

  if (!shimwatch_wire_decode_connect_response (payload, &a, &b, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);
  if (!shimwatch_wire_decode_pid_response (payload, &a, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);
  if (!shimwatch_wire_decode_state_response (payload, &state, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);
  if (!shimwatch_wire_decode_wait_response (payload, &exit_info, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);
  if (!shimwatch_wire_decode_delete_response (payload, &exit_info, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);
  pids = shimwatch_wire_decode_pids_response (payload, &error);
  g_assert ((pids == NULL) == (error != NULL));
  g_clear_error (&error);
  if (!shimwatch_wire_decode_empty (payload, &error))
    g_assert_nonnull (error);
  g_clear_error (&error);

  event = shimwatch_wire_decode_forward_request (payload, &error);
  g_assert ((event == NULL) == (error != NULL));
  if (event != NULL && event->kind >= SHIMWATCH_EVENT_TASK_CREATE &&
      event->kind <= SHIMWATCH_EVENT_TASK_DELETE)
    {
      /* a task event we accepted encodes again (the test shim's way) to the same facts */
      g_autoptr(GBytes) again = shimwatch_wire_encode_forward_request (event);
      g_autoptr(ShimwatchEvent) copy = shimwatch_wire_decode_forward_request (again, NULL);

      if (copy != NULL)
        {
          g_assert_cmpint (copy->kind, ==, event->kind);
          g_assert_cmpstr (copy->namespace_ ?: "", ==, event->namespace_ ?: "");
          g_assert_cmpstr (copy->topic ?: "", ==, event->topic ?: "");
          g_assert_cmpstr (copy->container_id ?: "", ==, event->container_id ?: "");
          g_assert_cmpuint (copy->pid, ==, event->pid);
        }
    }
  return 0;
}
