/* SPDX-License-Identifier: Apache-2.0
 *
 * Task cgroups: where each task's cgroup lives, and the few things the service does with
 * it (find and kill what still runs in it, remove it once it is empty).
 *
 * Every task gets a cgroup of its own, as containerd gives one (`/<namespace>/<id>`), so
 * that a Kill(all) or a cleanup of one task never reaches another:
 *
 *  - without systemd (cgroupfs driver): `/shimwatch/<namespace>/<id>` in every hierarchy;
 *  - under systemd (systemd driver, runc --systemd-cgroup): a transient scope per task,
 *    runc's `<slice>:shimwatch:<namespace>-<id>` (unit `shimwatch-<ns>-<id>.scope` in the
 *    slice of the service, e.g. `/system.slice/shimwatch-default-web1.scope`), made by
 *    runc through org.freedesktop.systemd1 StartTransientUnit with Delegate=yes.
 *
 * Why scopes and not a subtree of the service's own delegated cgroup: on cgroup2 a task
 * below the unit's cgroup needs its controllers enabled in the unit's
 * cgroup.subtree_control, and from then on no process may be attached to the unit's
 * cgroup itself (the no-internal-process rule). The daemon could move itself into a leaf,
 * but systemd 252 (Debian 12; DelegateSubgroup= came with 254) attaches every new main
 * process to the unit's cgroup: a restart with a live task would fail with EBUSY. A scope
 * per task keeps the unit's cgroup a leaf, survives restarts of the service, and shows each
 * task to the admin as a unit of its own.
 *
 * The on-disk path (what /proc/<pid>/cgroup shows, CgroupPath on D-Bus) is the same in
 * every hierarchy: cgroup v1 controllers, the named systemd hierarchy and cgroup2.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  SHIMWATCH_CGROUP_LAYOUT_LEGACY,    /* cgroup v1 only */
  SHIMWATCH_CGROUP_LAYOUT_HYBRID,    /* v1 controllers, cgroup2 at <root>/unified */
  SHIMWATCH_CGROUP_LAYOUT_UNIFIED,   /* cgroup2 only */
} ShimwatchCgroupLayout;

typedef enum {
  SHIMWATCH_CGROUP_DRIVER_CGROUPFS,  /* runc writes /sys/fs/cgroup itself */
  SHIMWATCH_CGROUP_DRIVER_SYSTEMD,   /* runc --systemd-cgroup: a transient scope per task */
} ShimwatchCgroupDriver;

#define SHIMWATCH_CGROUP_PARENT       "shimwatch"
#define SHIMWATCH_CGROUP_SCOPE_PREFIX "shimwatch"

/* The machine's cgroup set-up, detected once at start-up; immutable and shared with
 * cleanup threads (reference counted). */
typedef struct _ShimwatchCgroupHost ShimwatchCgroupHost;

ShimwatchCgroupHost  *shimwatch_cgroup_host_new       (ShimwatchCgroupLayout       layout,
                                                       const char * const         *mounts,
                                                       const char                 *unified_mount,
                                                       const char                 *own_cgroup,
                                                       ShimwatchCgroupDriver       driver);
ShimwatchCgroupHost  *shimwatch_cgroup_host_detect    (void);
ShimwatchCgroupHost  *shimwatch_cgroup_host_ref       (ShimwatchCgroupHost        *host);
void                  shimwatch_cgroup_host_unref     (ShimwatchCgroupHost        *host);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchCgroupHost, shimwatch_cgroup_host_unref)

ShimwatchCgroupLayout shimwatch_cgroup_host_get_layout (const ShimwatchCgroupHost *host);
ShimwatchCgroupDriver shimwatch_cgroup_host_get_driver (const ShimwatchCgroupHost *host);
/* the service's own cgroup under systemd, NULL without systemd */
const char           *shimwatch_cgroup_host_get_own    (const ShimwatchCgroupHost *host);
char                 *shimwatch_cgroup_host_describe   (const ShimwatchCgroupHost *host);

/* The placement rule, a pure function. own_cgroup: the service's cgroup when it runs
 * under systemd (from /proc/self/cgroup), else NULL. Returns runc's linux.cgroupsPath. */
char *shimwatch_cgroup_task_path (ShimwatchCgroupLayout  layout,
                                  const char            *own_cgroup,
                                  ShimwatchCgroupDriver  driver,
                                  const char            *namespace_,
                                  const char            *id);

/* runc's linux.cgroupsPath (from a bundle, or ours) → the cgroup's path below every
 * hierarchy's root, normalized ("/a/b"). Refuses what runc would place relative to its
 * own cgroup, the root cgroup, the service's own cgroup and its ancestors, and a form
 * that does not fit the driver. */
char *shimwatch_cgroup_resolve (const ShimwatchCgroupHost  *host,
                                const char                 *runc_path,
                                GError                    **error);

/* for a path from a record or a task directory: absolute, normalized, not "/" */
gboolean shimwatch_cgroup_path_is_valid (const char *path);

/* the two paths are the same cgroup, or one contains the other */
gboolean shimwatch_cgroup_paths_overlap (const char *a,
                                         const char *b);

/* <mount>/<path> in every hierarchy (existing or not) */
GPtrArray *shimwatch_cgroup_dirs (const ShimwatchCgroupHost *host,
                                  const char                *path);

/* SIGKILL everything in the cgroup and below: cgroup.kill where cgroup2 has it (one write,
 * race-free against forks), else every pid in cgroup.procs, repeated until no new one
 * shows up. Returns how many processes were signalled (cgroup.kill: 1 if populated). */
guint    shimwatch_cgroup_kill         (ShimwatchCgroupHost       *host,
                                        const char                *path);
/* The same, with cgroup.events already open (events_fd from shimwatch_cgroup_open_events,
 * or -1): what a cleanup checks several times reads it again without a path lookup. */
guint    shimwatch_cgroup_kill_at      (ShimwatchCgroupHost       *host,
                                        const char                *path,
                                        int                        events_fd);
/* cgroup.kill alone (cgroup2 since Linux 5.14): SIGKILL to the whole subtree in one
 * write, without reading back whether anything was there. FALSE where there is no such
 * file (cgroup v1, an older kernel) or it could not be written: kill_at() then. The
 * host is written to: a kernel found without cgroup.kill is remembered in it (atomically:
 * the host is shared between threads), and not asked again. */
gboolean shimwatch_cgroup_kill_subtree (ShimwatchCgroupHost       *host,
                                        const char                *path);
gboolean shimwatch_cgroup_is_populated_at (const ShimwatchCgroupHost *host,
                                           const char                *path,
                                           int                        events_fd);
/* cgroup2's cgroup.events of the cgroup, opened for reading (O_CLOEXEC); -1 without
 * cgroup2 or where it is missing. The caller closes it. */
int      shimwatch_cgroup_open_events  (const ShimwatchCgroupHost *host,
                                        const char                *path);
/* is the cgroup there in any hierarchy? (a stat of each, nothing read) */
gboolean shimwatch_cgroup_exists       (const ShimwatchCgroupHost *host,
                                        const char                *path);
/* the first hierarchy that holds the cgroup (a stat of each up to it), or -1: none */
int      shimwatch_cgroup_find         (const ShimwatchCgroupHost *host,
                                        const char                *path);
/* the index of cgroup2's hierarchy among them, or -1 (cgroup v1 alone) */
int      shimwatch_cgroup_host_get_unified (const ShimwatchCgroupHost *host);
/* is the cgroup still in @hierarchy, one shimwatch_cgroup_find() gave? (one stat) */
gboolean shimwatch_cgroup_exists_in    (const ShimwatchCgroupHost *host,
                                        const char                *path,
                                        int                        hierarchy);
/* does any process still run in the cgroup or below? */
gboolean shimwatch_cgroup_is_populated (const ShimwatchCgroupHost *host,
                                        const char                *path);
/* rmdir in every hierarchy, children first; gone already is fine */
gboolean shimwatch_cgroup_remove       (const ShimwatchCgroupHost *host,
                                        const char                *path,
                                        GError                   **error);
/* rmdir path and then its parents up to (not including) stop, while they are empty */
void     shimwatch_cgroup_remove_empty_parents (const ShimwatchCgroupHost *host,
                                                const char                *path,
                                                const char                *stop);

G_END_DECLS
