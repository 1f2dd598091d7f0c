/* SPDX-License-Identifier: Apache-2.0
 *
 * What a shim's `start` prints on stdout, as the launcher parses it: a BootstrapResult
 * protobuf, a JSON object, or a plain address. Either an error or a bootstrap with an
 * address; never a crash or a leak.
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
  g_autoptr(GBytes) output = g_bytes_new (data, size);
  g_autoptr(GError) error = NULL;
  g_autoptr(ShimwatchBootstrap) bootstrap = shimwatch_wire_parse_start_output (output, &error);

  g_assert ((bootstrap == NULL) == (error != NULL));
  if (bootstrap != NULL)
    g_assert_nonnull (bootstrap->address);
  return 0;
}
