/* SPDX-License-Identifier: Apache-2.0
 *
 * The test shim's user database: none. The test shim is linked fully statically
 * (tests/meson.build says why). GLib's user-database lookups, which it never makes
 * (g_get_user_name(), g_get_home_dir() and friends share an object file with what it
 * uses), would bring glibc's NSS into the binary, and with it the linker's warning that a
 * static NSS needs glibc's shared libraries at run time. Defined here, these three are
 * taken before the C library's: every user is unknown.
 */
#include "config.h"

#include <errno.h>
#include <pwd.h>
#include <stddef.h>

struct passwd *
getpwuid (uid_t uid)
{
  errno = ENOENT;
  return NULL;
}

int
getpwnam_r (const char     *name,
            struct passwd  *pwd,
            char           *buf,
            size_t          buflen,
            struct passwd **result)
{
  *result = NULL;
  return 0;
}

int
getpwuid_r (uid_t           uid,
            struct passwd  *pwd,
            char           *buf,
            size_t          buflen,
            struct passwd **result)
{
  *result = NULL;
  return 0;
}
