/* SPDX-License-Identifier: Apache-2.0
 *
 * A harness's main() outside the fuzzing build: runs LLVMFuzzerTestOneInput on every file
 * of the directories (or files) given, so the seed corpus is a regression test of every
 * build, sanitizers or not. TAP: one case per input.
 */
#include <stdio.h>
#include <glib.h>

#include "fuzz-common.h"

static int
compare_paths (gconstpointer a,
               gconstpointer b)
{
  return g_strcmp0 (*(const char * const *) a, *(const char * const *) b);
}

static void
collect (const char *path,
         GPtrArray  *files)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  const char *name;

  if (dir == NULL)
    {
      g_ptr_array_add (files, g_strdup (path));
      return;
    }
  while ((name = g_dir_read_name (dir)) != NULL)
    g_ptr_array_add (names, g_build_filename (path, name, NULL));
  g_ptr_array_sort (names, compare_paths);
  for (guint i = 0; i < names->len; i++)
    g_ptr_array_add (files, g_strdup (g_ptr_array_index (names, i)));
}

int
main (int    argc,
      char **argv)
{
  g_autoptr(GPtrArray) files = g_ptr_array_new_with_free_func (g_free);

  LLVMFuzzerInitialize (&argc, &argv);
  for (int i = 1; i < argc; i++)
    collect (argv[i], files);
  printf ("1..%u\n", files->len);
  for (guint i = 0; i < files->len; i++)
    {
      const char *path = g_ptr_array_index (files, i);
      g_autofree char *contents = NULL;
      gsize length = 0;
      g_autoptr(GError) error = NULL;

      if (!g_file_get_contents (path, &contents, &length, &error))
        {
          printf ("not ok %u - %s: %s\n", i + 1, path, error->message);
          continue;
        }
      LLVMFuzzerTestOneInput ((const uint8_t *) contents, length);
      printf ("ok %u - %s\n", i + 1, path);
      fflush (stdout);
    }
  return 0;
}
