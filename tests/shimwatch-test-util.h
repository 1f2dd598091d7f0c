/* SPDX-License-Identifier: Apache-2.0
 *
 * Helpers shared by the C tests that run real shims: gates (root, packages), a busybox
 * OCI bundle, waiting on async results, process and file checks.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* NULL when real shims can run here (runc itself is asked, once per process); otherwise
 * the reason to skip */
char       *shimwatch_test_real_shim_skip_reason (void);

/* <dir>/rootfs with a static busybox, <dir>/<name>/config.json running argv */
char       *shimwatch_test_make_bundle           (const char          *dir,
                                                  const char          *name,
                                                  const char * const  *argv,
                                                  const char          *cgroups_path,
                                                  GError             **error);

/* spin the default main context until *result is set (a GAsyncReadyCallback that stores
 * a ref is shimwatch_test_store_result), failing the test after timeout_ms */
void        shimwatch_test_store_result          (GObject             *source,
                                                  GAsyncResult        *result,
                                                  gpointer             user_data);
void        shimwatch_test_wait_result           (GAsyncResult       **result,
                                                  guint                timeout_ms);
gboolean    shimwatch_test_wait_until            (gboolean           (*predicate) (gpointer),
                                                  gpointer             data,
                                                  guint                timeout_ms);

/* TRUE when pid is gone or a zombie (its resources are released) */
gboolean    shimwatch_test_process_is_dead       (guint32              pid);
void        shimwatch_test_remove_tree           (const char          *path);
void        shimwatch_test_remove_cgroup         (const char          *cgroups_path);
char       *shimwatch_test_shim_socket_path      (const char          *address,
                                                  const char          *namespace_,
                                                  const char          *id);

/* tests/cleanup-guard.py watching dir: it removes what the test started there (containers
 * by runc's list of the roots under dir, processes living in dir, their shim sockets, dir
 * itself, the given cgroup) once shimwatch_test_guard_finish() is called or the test
 * process dies, a failed assertion's abort included. The guard's path comes from
 * $SHIMWATCH_CLEANUP_GUARD (set by meson). */
typedef struct _ShimwatchTestGuard ShimwatchTestGuard;

ShimwatchTestGuard *shimwatch_test_guard_new    (const char          *dir,
                                                 const char          *cgroups_path);
void                shimwatch_test_guard_finish (ShimwatchTestGuard  *guard);

G_END_DECLS
