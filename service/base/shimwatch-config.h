/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchConfig: the service's settings, from built-in defaults, the GKeyFile
 * /etc/shimwatch/shimwatch.conf, systemd's RUNTIME_DIRECTORY / STATE_DIRECTORY and the
 * command line, in increasing order of precedence.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define SHIMWATCH_CONFIG_GROUP "Service"
/* companion mode: containerd's own shims */
#define SHIMWATCH_CONFIG_CONTAINERD_GROUP "Containerd"

typedef struct {
  char  *runtime_dir;          /* task dirs, events socket, runc root */
  char  *state_dir;
  GStrv  runtime_path;         /* where containerd-shim-* binaries may come from */
  guint  cleanup_timeout_ms;
  guint  cleanup_concurrency;
  guint  health_interval_ms;   /* 0: no health checks */
  guint64 task_log_max_size;   /* bytes per task log file */
  guint  task_log_max_files;   /* the current file and the rotated ones */
  guint  task_log_retention_s; /* a task log is kept this long after TaskDelete */
  char  *metrics_dir;          /* node_exporter's textfile directory; NULL: no textfile */
  /* [Containerd]: companion mode */
  gboolean containerd_enable;
  char  *containerd_state_dir;  /* containerd's --state (its task bundles are below it) */
  char  *containerd_address;    /* containerd's gRPC socket */
  GStrv  containerd_namespaces; /* NULL: every namespace */
  guint  containerd_grace_ms;   /* added to containerd's own cleanup timeout */
  char  *containerd_config;     /* containerd's config.toml, for that timeout */
} ShimwatchConfig;

ShimwatchConfig *shimwatch_config_new       (void);
/* CleanupConcurrency=auto: twice the CPUs the service may run on, 2 to 256 */
guint            shimwatch_config_default_cleanup_concurrency (void);
ShimwatchConfig *shimwatch_config_copy      (const ShimwatchConfig *config);
/* the settings in force, by their section and key in shimwatch.conf(5) (a{sv}, floating) */
GVariant        *shimwatch_config_to_variant (const ShimwatchConfig *config);
void             shimwatch_config_free      (ShimwatchConfig  *config);
gboolean         shimwatch_config_load_file (ShimwatchConfig  *config,
                                             const char       *path,
                                             gboolean          must_exist,
                                             GError          **error);
/* RUNTIME_DIRECTORY / STATE_DIRECTORY: FALSE if one is set but not absolute */
gboolean         shimwatch_config_apply_environment (ShimwatchConfig  *config,
                                                     GError          **error);
/* what only the file system can tell: FALSE if a RuntimePath directory (or one above it,
 * without the sticky bit) is writable by every user */
gboolean         shimwatch_config_check     (const ShimwatchConfig  *config,
                                             GError                **error);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchConfig, shimwatch_config_free)

G_END_DECLS
