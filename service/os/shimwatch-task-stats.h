/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskCgroup: where a task's cgroup is, and what it says: memory, CPU and pids
 * for Shim.GetStats, the kernel's OOM kills for ExitReason. cgroup v2 (one directory) and
 * v1 (one directory per controller; also the hybrid layout with cgroup2 at "unified") are
 * read alike. Only the cgroup file system is read; nothing is written.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define SHIMWATCH_CGROUP_ROOT "/sys/fs/cgroup"

typedef struct {
  guint64 memory_current;    /* bytes */
  guint64 memory_max;        /* bytes, 0 = no limit */
  guint64 cpu_usage_usec;
  guint32 pids_current;
} ShimwatchTaskStats;

typedef struct _ShimwatchTaskCgroup ShimwatchTaskCgroup;

/* the cgroup named by a path below each hierarchy's root ("/shimwatch/<ns>/<id>") */
ShimwatchTaskCgroup *shimwatch_task_cgroup_new_for_path (const char           *cgroup_root,
                                                         const char           *path);
/* the cgroup a process is in, from the text of /proc/<pid>/cgroup */
ShimwatchTaskCgroup *shimwatch_task_cgroup_new_from_proc (const char          *cgroup_root,
                                                          const char          *proc_cgroup,
                                                          GError             **error);
/* ... of a running process */
ShimwatchTaskCgroup *shimwatch_task_cgroup_new_for_pid  (guint32               pid,
                                                         GError              **error);
void                 shimwatch_task_cgroup_free         (ShimwatchTaskCgroup  *cgroup);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchTaskCgroup, shimwatch_task_cgroup_free)

/* the path of the memory cgroup (v2: the only one) below its hierarchy's root */
const char *shimwatch_task_cgroup_get_path   (ShimwatchTaskCgroup *cgroup);
/* FALSE (G_IO_ERROR_NOT_FOUND) if the cgroup is gone; a single unreadable value is 0 */
gboolean    shimwatch_task_cgroup_read_stats (ShimwatchTaskCgroup *cgroup,
                                              ShimwatchTaskStats  *stats,
                                              GError             **error);
/* processes the kernel's OOM killer killed in the cgroup (v1 memory.oom_control,
 * v2 memory.events "oom_kill"); 0 when unknown */
guint64     shimwatch_task_cgroup_oom_kills  (ShimwatchTaskCgroup *cgroup);

/* Shim.GetStats' reply, a floating a{sv}: memory_current, memory_max, cpu_usage_usec (t)
 * and pids_current (u) */
GVariant   *shimwatch_task_stats_to_variant  (const ShimwatchTaskStats *stats);

G_END_DECLS
