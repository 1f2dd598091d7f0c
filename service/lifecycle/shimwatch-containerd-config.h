/* SPDX-License-Identifier: Apache-2.0
 *
 * What shimwatch reads of containerd's own configuration (config.toml): the cleanup
 * timeout containerd gives a dead shim's `shim delete`,
 *   [timeouts]
 *     "io.containerd.timeout.shim.cleanup" = "5s"
 * a Go duration. Nothing else of the file is interpreted, and nothing is written.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* containerd's default (runtime/v2/shim.go) */
#define SHIMWATCH_CONTAINERD_CLEANUP_TIMEOUT_MS 5000

/* a Go time.ParseDuration string ("1ms", "5s", "1m30s", "0.5s") to microseconds */
gboolean shimwatch_go_duration_parse (const char  *text,
                                      guint64     *usec,
                                      GError     **error);

/* the cleanup timeout from the TOML text of containerd's configuration; FALSE (and
 * *timeout_ms untouched) when the file does not set it */
gboolean shimwatch_containerd_config_parse_cleanup_timeout (const char  *toml,
                                                            guint       *timeout_ms,
                                                            GError     **error);

/* from the file at path; the default when it does not exist or does not set it (logged
 * when it cannot be read or parsed) */
guint    shimwatch_containerd_config_cleanup_timeout_ms    (const char  *path);

G_END_DECLS
