/* SPDX-License-Identifier: Apache-2.0
 *
 * Reading a file that someone else controls (a caller's bundle, a task record, the
 * configuration) without trusting it: opened once, relative to a directory fd, never
 * blocking (a FIFO or a device put in its place is refused, not read), its type and size
 * checked on the open fd, and read with a cap.
 */
#pragma once

#include <glib.h>
#include <sys/stat.h>

G_BEGIN_DECLS

typedef enum {
  SHIMWATCH_FILE_NONE        = 0,
  SHIMWATCH_FILE_FOLLOW_LINK = 1 << 0,   /* the last component may be a symbolic link */
} ShimwatchFileFlags;

/* The contents of the regular file @name (relative to @dir_fd, or AT_FDCWD; an absolute
 * @name ignores @dir_fd), at most @max_size bytes, NUL-terminated after @length. Errors
 * are G_FILE_ERROR: NOENT when it does not exist, INVAL when it is not a regular file
 * (a symbolic link without SHIMWATCH_FILE_FOLLOW_LINK, a FIFO, a device, a directory) or
 * larger than @max_size, else from errno. If @st is not NULL it gets the open fd's
 * fstat(). Messages name the file as @name; they never quote its contents. */
char *shimwatch_read_regular_file_at (int                 dir_fd,
                                      const char         *name,
                                      gsize               max_size,
                                      ShimwatchFileFlags  flags,
                                      gsize              *length,
                                      struct stat        *st,
                                      GError            **error);

G_END_DECLS
