/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchBundle: a caller's OCI bundle, opened the way CreateTask needs it. The bundle
 * directory is resolved once (a symbolic link to it is followed here and nowhere else;
 * errors name both paths), config.json is read from the directory's fd without following
 * a link or blocking, its JSON checked before parsing, and its rootfs resolved. Because
 * org.shimwatch.manage runs the bundle as root, a caller other than root must be able to
 * read it themselves (shimwatch-caller.h): search permission on every directory above the
 * bundle and its rootfs, read and search permission on both, read permission on
 * config.json.
 *
 * A bundle of containerd's (companion mode) is never opened: only the shim binary it
 * names is checked, before a takeover runs it (shimwatch_bundle_shim_binary()).
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-caller.h"

G_BEGIN_DECLS

typedef struct {
  char   *path;         /* as the caller named it */
  char   *real_path;    /* what it resolved to: the task's config names this one */
  char   *rootfs;       /* the resolved root filesystem */
  GBytes *config;       /* config.json with an absolute root.path and a linux.cgroupsPath
                         * (shimwatch-wire.h) */
  char   *cgroups_path; /* that linux.cgroupsPath: the bundle's, or the default given */
} ShimwatchBundle;

/* config.json may be at most this large */
#define SHIMWATCH_BUNDLE_CONFIG_MAX (4u << 20)

/* Errors are SHIMWATCH_ERROR: INVALID_ARGUMENT for a bundle that is missing or wrong,
 * NOT_AUTHORIZED when @caller (NULL: the service itself) could not read it. They never
 * quote a file. @default_cgroups_path goes into config.json when it names no cgroup. */
ShimwatchBundle *shimwatch_bundle_open (const char             *path,
                                        const ShimwatchCaller  *caller,
                                        const char             *default_cgroups_path,
                                        GError                **error);
void             shimwatch_bundle_free (ShimwatchBundle *bundle);
/* "PATH", or "PATH (resolved to REAL)": how errors name the bundle */
char            *shimwatch_bundle_describe (const ShimwatchBundle *bundle);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchBundle, shimwatch_bundle_free)

/* The shim binary that a bundle of containerd's names in its shim-binary-path, if it is a
 * regular file directly inside one of @runtime_dirs (both sides resolved; RuntimePath):
 * the binary a takeover of containerd's cleanup may run `delete` with. Otherwise NULL
 * and why: G_FILE_ERROR when the file cannot be read (or is no regular file, or larger
 * than PATH_MAX; never waiting for a FIFO), SHIMWATCH_ERROR NOT_FOUND for no
 * such binary, INVALID_ARGUMENT for a path that is not absolute or lies elsewhere. */
char            *shimwatch_bundle_shim_binary (const char          *bundle,
                                               const char * const  *runtime_dirs,
                                               GError             **error);

G_END_DECLS
