/* SPDX-License-Identifier: Apache-2.0
 *
 * CreateTask's stdin, stdout and stderr options, checked before anything starts, as
 * containerd-shim-runc-v2 will read them (its process/io.go). The scheme of stdout
 * decides for all three:
 *
 *   /abs/path           a FIFO (or a regular file, appended to) the shim copies to
 *   file:///abs/path    a file the shim appends stdout and stderr to (it creates it, and
 *                       its directory, as root)
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

G_END_DECLS
