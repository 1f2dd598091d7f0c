/* SPDX-License-Identifier: Apache-2.0
 *
 * CreateTask's stdin, stdout and stderr options, checked before anything starts, as
 * containerd-shim-runc-v2 will read them (its process/io.go). The scheme of stdout
 * decides for all three:
 *
 *   /abs/path           a FIFO (or a regular file, appended to) the shim copies to
 *   file:///abs/path    a file stdout and stderr are appended to (created as root; its
 *                       directory must exist): see shimwatch_stdio_prepare()
 *   binary:///abs/prog?k=v  a logging program the shim runs as root, with the task's
 *                       output on its fds 3 and 4; only one from the runtime directories
 *
 * Anything else (a relative path, fifo://, other schemes) is refused: the shim would take
 * "fifo://..." for a file name and knows no other scheme. stdin is a plain path or none.
 * With plain paths and no terminal the shim opens stdout and stderr whenever any of the
 * three is given, so both are needed then; a terminal's output cannot go to file://.
 * With file:// and binary://, stderr is stdout's URI or none: the shim writes both
 * streams there whatever stderr says; given none, stderr is set to stdout's URI, since
 * the shim dereferences a stderr pipe it never opened when stderr is empty and panics.
 */
#pragma once

#include <glib.h>

#include "shimwatch-caller.h"

G_BEGIN_DECLS

/* @stdio: stdin, stdout, stderr (NULL: not given); may set stdio[2]. The syntax only:
 * no file is looked at. Errors: SHIMWATCH_ERROR_INVALID_ARGUMENT. */
gboolean shimwatch_stdio_parse        (char                **stdio,
                                       gboolean              terminal,
                                       GError              **error);

/* What the shim will open or run, as @caller could: a binary:// program
 * is an executable in @runtime_dirs; a plain path exists (a FIFO or a regular file) and
 * the caller could open it (stdin for reading, stdout and stderr for writing); a
 * file:// file's directory exists and the caller could write the file there. Errors:
 * SHIMWATCH_ERROR_INVALID_ARGUMENT, or NOT_AUTHORIZED for what the caller could not do. */
gboolean shimwatch_stdio_check        (char * const          *stdio,
                                       const char * const    *runtime_dirs,
                                       const ShimwatchCaller *caller,
                                       GError               **error);

/* in the task directory: stderr's name for a file stdout goes to as well */
#define SHIMWATCH_STDIO_STDERR_LINK "stderr-file"

/* Just before the shim is asked to create the task, as root: turns what
 * containerd-shim-runc-v2 would mishandle into what it does not. A file:// URI becomes the
 * file itself (created as the shim would create it), and stdout and stderr going to the
 * same regular file get two names for it (stderr a symlink in @task_dir): with one name
 * the shim closes the file when stdout ends and loses stderr's later output. */
gboolean shimwatch_stdio_prepare      (char                 **stdio,
                                       const char            *task_dir,
                                       GError               **error);

G_END_DECLS
