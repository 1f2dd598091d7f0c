/* SPDX-License-Identifier: Apache-2.0
 *
 * The configuration file (/etc/shimwatch/shimwatch.conf) as the service loads it: an
 * error, or settings that hold what the service relies on (absolute directories, a
 * non-empty runtime path). Never a crash or a leak. Each input is written to a file in a
 * private directory, removed at exit.
 */
#include "config.h"

#include <stdlib.h>
#include <glib/gstdio.h>

#include "shimwatch-config.h"
#include "fuzz-common.h"

static char *dir;
static char *path;

static void
remove_dir (void)
{
  g_unlink (path);
  g_rmdir (dir);
}

int
LLVMFuzzerInitialize (int    *argc,
                      char ***argv)
{
  fuzz_quiet_logs ();
  dir = g_dir_make_tmp ("swfuzzconf-XXXXXX", NULL);
  g_assert_nonnull (dir);
  path = g_build_filename (dir, "shimwatch.conf", NULL);
  atexit (remove_dir);
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data,
                        size_t         size)
{
  g_autoptr(ShimwatchConfig) config = shimwatch_config_new ();
  g_autoptr(ShimwatchConfig) copy = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (path, (const char *) data, (gssize) size, NULL));
  if (!shimwatch_config_load_file (config, path, TRUE, &error))
    {
      g_assert_nonnull (error);
      return 0;
    }
  g_assert_no_error (error);
  g_assert_true (g_path_is_absolute (config->runtime_dir));
  g_assert_true (g_path_is_absolute (config->state_dir));
  g_assert_nonnull (config->runtime_path);
  copy = shimwatch_config_copy (config);
  g_assert_cmpstr (copy->runtime_dir, ==, config->runtime_dir);
  return 0;
}
