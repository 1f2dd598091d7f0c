/* SPDX-License-Identifier: Apache-2.0
 *
 * The OCI config.json rewrite CreateTask runs on a caller's bundle: an error, or a config
 * that is JSON again with an absolute root.path. Never a crash, a hang or a leak, whatever
 * the nesting or the encoding.
 */
#include "config.h"

#include <json-glib/json-glib.h>

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
  g_autoptr(GError) error = NULL;
  g_autofree char *cgroups_path = NULL;
  g_autoptr(GBytes) rewritten = shimwatch_wire_rewrite_oci_config ((const char *) data, size,
                                                                  "/run/bundles/b1",
                                                                  "/shimwatch/default/b1",
                                                                  &cgroups_path, &error);
  g_autoptr(JsonParser) parser = NULL;
  JsonObject *root;
  JsonObject *linux_;
  gsize length;
  const char *text;

  g_assert ((rewritten == NULL) == (error != NULL));
  if (rewritten == NULL)
    return 0;
  text = g_bytes_get_data (rewritten, &length);
  parser = json_parser_new ();
  g_assert_true (json_parser_load_from_data (parser, text, (gssize) length, NULL));
  g_assert_true (JSON_NODE_HOLDS_OBJECT (json_parser_get_root (parser)));
  root = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)),
                                        "root");
  if (root != NULL && json_object_has_member (root, "path"))
    g_assert_true (g_path_is_absolute (json_object_get_string_member (root, "path")));
  /* every task in a cgroup: the bundle's own, or the default, and the one reported */
  linux_ = json_object_get_object_member (json_node_get_object (json_parser_get_root (parser)),
                                          "linux");
  g_assert_nonnull (linux_);
  g_assert_nonnull (cgroups_path);
  g_assert_cmpstr (json_object_get_string_member (linux_, "cgroupsPath"), ==, cgroups_path);
  return 0;
}
