/* SPDX-License-Identifier: Apache-2.0
 *
 * The service's log writer: what g_log_writer_default() does, at a lower cost per line.
 *
 * A lifecycle event logs a line, so a mass death logs hundreds of lines a second. GLib's
 * writer formats the line's time with strftime(3), and glibc's strftime() calls tzset(),
 * which stat()s /etc/localtime on every line when TZ is unset (as it is for a system
 * service). Setting TZ in the service would change the environment every shim it spawns
 * inherits; instead this writer takes the local time with localtime_r(3), which keeps the
 * zone it has, and calls tzset() at most once a minute (a changed /etc/localtime shows
 * within a minute).
 *
 * Otherwise the lines are GLib's: to the journal with every field when JOURNAL_STREAM says
 * stderr is the journal (g_log_writer_is_journald()); else "Domain-Message: HH:MM:SS.mmm:
 * text" on stderr (INFO and DEBUG on stdout), one write(2) per line; G_MESSAGES_DEBUG and
 * --verbose decide which info and debug lines are kept (g_log_writer_default_would_drop()),
 * G_MESSAGES_PREFIXED which lines carry "(prgname:pid): ". Levels made fatal (errors,
 * G_DEBUG=fatal-warnings), lines to a terminal (colour) and lines that GLib would escape
 * or convert go through g_log_writer_default() itself.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* reads stdout's and stderr's kind, JOURNAL_STREAM, G_MESSAGES_PREFIXED and the fatal
 * levels (G_DEBUG), and installs the writer; call once, before any thread starts */
void             shimwatch_log_writer_install (void);

GLogWriterOutput shimwatch_log_writer         (GLogLevelFlags   level,
                                               const GLogField *fields,
                                               gsize            n_fields,
                                               gpointer         user_data);

/* the text of a line as the writer writes it to a stream (without the newline), at
 * @real_time (µs since the epoch, local time of the zone the process has); FALSE when
 * g_log_writer_default() is the one to write such a line (see above) */
gboolean         shimwatch_log_writer_format  (GLogLevelFlags   level,
                                               const GLogField *fields,
                                               gsize            n_fields,
                                               gint64           real_time,
                                               GString         *line);

G_END_DECLS
