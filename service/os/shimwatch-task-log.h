/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTaskLog: a task's output. The service makes the task's stdout/stderr FIFOs in
 * its task directory, hands them to the shim, and drains them on the main loop whether
 * or not anybody reads (non-blocking reads, a bounded amount per wake-up), so output
 * never blocks the task for long (a follower that reads may hold it, below). Each line goes, with its time and stream, into a size-capped,
 * rotated file under the state directory:
 *
 *   <RFC 3339 time, UTC, microseconds> <stdout|stderr> <text>\n
 *
 * which is also what OpenLog readers get. Lines longer than SHIMWATCH_TASK_LOG_MAX_LINE
 * bytes are split. ReadLog and OpenLog read the files in a worker thread from a snapshot
 * taken on the main loop; a following reader then reads the files themselves from where
 * its backlog ended, as `tail -f` does, through a pipe of its own. While it is more than
 * half the log behind and reads, the draining of the FIFOs waits for it; one that reads
 * nothing for 200 ms is not waited for, and once it is further behind than the log keeps
 * (the rotation dropped the file it was reading) it gets one last line,
 * "<time> SHIMWATCH_TASK_LOG_FELL_BEHIND", and EOF.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

#define SHIMWATCH_TASK_LOG_MAX_LINE       16384
/* the stream and text of the last line a reader that fell behind gets */
#define SHIMWATCH_TASK_LOG_FELL_BEHIND    "shimwatch fell-behind"
/* OpenLog readers of one task at once (following or still being written): Busy beyond */
#define SHIMWATCH_TASK_LOG_MAX_READERS    16
/* ReadLog answers at most this much text (the newest lines); OpenLog has no such limit */
#define SHIMWATCH_TASK_LOG_READ_MAX       (8 * 1024 * 1024)
#define SHIMWATCH_TASK_LOG_FILE           "output.log"
/* the log of a deleted task: its modification time is the time of the TaskDelete */
#define SHIMWATCH_TASK_LOG_DELETED_MARK   "deleted"
/* made empty with a new task's log, so that its end only sets its time and renames it */
#define SHIMWATCH_TASK_LOG_DELETED_SPARE  ".deleted.tmp"

typedef enum {
  SHIMWATCH_TASK_LOG_STDOUT = 1 << 0,
  SHIMWATCH_TASK_LOG_STDERR = 1 << 1,
} ShimwatchTaskLogStreams;

typedef struct {
  guint64 max_file_size;     /* bytes per file */
  guint   max_files;         /* the current file and the rotated ones */
  /* called with the size of the oldest file when a rotation removes it; or NULL */
  void  (*dropped) (guint64  bytes,
                    gpointer user_data);
  gpointer dropped_data;
} ShimwatchTaskLogLimits;

#define SHIMWATCH_TYPE_TASK_LOG (shimwatch_task_log_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchTaskLog, shimwatch_task_log, SHIMWATCH, TASK_LOG, GObject)

/* makes the FIFOs of `streams` in task_dir and starts draining them into log_dir */
ShimwatchTaskLog *shimwatch_task_log_new         (const char                    *namespace_,
                                                  const char                    *id,
                                                  const char                    *task_dir,
                                                  const char                    *log_dir,
                                                  ShimwatchTaskLogStreams        streams,
                                                  const ShimwatchTaskLogLimits  *limits,
                                                  GError                       **error);
/* after a restart of the service: drain again the FIFOs found in task_dir; NULL (and no
 * error) when the task has none, i.e. its creator gave its own stdout/stderr */
ShimwatchTaskLog *shimwatch_task_log_reopen      (const char                    *namespace_,
                                                  const char                    *id,
                                                  const char                    *task_dir,
                                                  const char                    *log_dir,
                                                  const ShimwatchTaskLogLimits  *limits,
                                                  GError                       **error);
/* the FIFO to hand to the shim for a stream, NULL if the service does not capture it */
const char       *shimwatch_task_log_get_fifo    (ShimwatchTaskLog              *self,
                                                  ShimwatchTaskLogStreams        stream);
const char       *shimwatch_task_log_get_dir     (ShimwatchTaskLog              *self);

/* the options of ReadLog (tail, since) and OpenLog (tail, follow; since as an
 * extension); InvalidArgument for an unknown key or a wrong type */
gboolean          shimwatch_task_log_parse_options (GVariant                    *options,
                                                    gboolean                     open_log,
                                                    guint                       *tail,
                                                    gint64                      *since,
                                                    gboolean                    *follow,
                                                    GError                     **error);

/* ReadLog: a(tss) of the last `tail` lines (0: all) at or after `since` (0: all) */
void              shimwatch_task_log_read_async  (ShimwatchTaskLog              *self,
                                                  guint                          tail,
                                                  gint64                         since,
                                                  GAsyncReadyCallback            callback,
                                                  gpointer                       user_data);
GVariant         *shimwatch_task_log_read_finish (ShimwatchTaskLog              *self,
                                                  GAsyncResult                  *result,
                                                  GError                       **error);

/* OpenLog: the read end of a pipe that delivers the backlog, then (follow) new lines
 * until the task is deleted, then EOF. The caller owns the returned fd. Busy when the
 * task has SHIMWATCH_TASK_LOG_MAX_READERS readers already. */
int               shimwatch_task_log_open_reader (ShimwatchTaskLog              *self,
                                                  guint                          tail,
                                                  gint64                         since,
                                                  gboolean                       follow,
                                                  GError                       **error);
/* readers still connected (following, or with their backlog not written yet) */
guint             shimwatch_task_log_get_n_readers (ShimwatchTaskLog            *self);

/* the task was deleted: drain what is left, stop, mark the log deleted (retention starts
 * now), and end every reader once it has what was written. Emits "finished". */
void              shimwatch_task_log_finish      (ShimwatchTaskLog              *self);
/* every process that wrote to the task's FIFOs was gone at @when (g_get_monotonic_time()):
 * the finish need not read what the poller has already seen is not there */
void              shimwatch_task_log_set_writers_gone (ShimwatchTaskLog         *self,
                                                       gint64                    when);
/* the service stops: stop draining (the shim keeps the FIFOs), end the readers */
void              shimwatch_task_log_detach      (ShimwatchTaskLog              *self);
/* a failed CreateTask: as detach, and the log directory goes */
void              shimwatch_task_log_discard     (ShimwatchTaskLog              *self);

/* pure helpers, unit-tested */
void              shimwatch_task_log_format_time (gint64                         usec,
                                                  char                           out[28]);
gboolean          shimwatch_task_log_parse_line  (const char                    *line,
                                                  gsize                          len,
                                                  gint64                        *time,
                                                  const char                   **stream,
                                                  const char                   **text,
                                                  gsize                         *text_len);
/* the deleted mark of the log in @dir: made now (a log no task owns), or its time (µs
 * since the epoch; FALSE: the log has none) */
gboolean          shimwatch_task_log_write_mark  (const char                    *dir,
                                                  GError                       **error);
gboolean          shimwatch_task_log_read_mark   (const char                    *dir,
                                                  gint64                        *when);
/* remove a log directory and what is in it (no subdirectories are made) */
gboolean          shimwatch_task_log_remove_dir  (const char                    *dir,
                                                  GError                       **error);

G_END_DECLS
