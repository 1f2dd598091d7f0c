/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchLogStore: where task logs live (<state dir>/logs/<namespace>/<id>/) and how
 * long. A live task's log stays; once its task is deleted it is kept for the retention
 * period and then removed. The retained log of an earlier task with the same namespace
 * and id is moved aside to <id>~<time of its TaskDelete> when a new task takes the name.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-task-log.h"

G_BEGIN_DECLS

#define SHIMWATCH_TYPE_LOG_STORE (shimwatch_log_store_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchLogStore, shimwatch_log_store, SHIMWATCH, LOG_STORE, GObject)

ShimwatchLogStore *shimwatch_log_store_new    (const char                    *logs_dir,
                                               const ShimwatchTaskLogLimits  *limits,
                                               guint                          retention_s,
                                               GError                       **error);
/* a new task's log, capturing `streams` through FIFOs in task_dir */
ShimwatchTaskLog  *shimwatch_log_store_open   (ShimwatchLogStore             *self,
                                               const char                    *namespace_,
                                               const char                    *id,
                                               const char                    *task_dir,
                                               ShimwatchTaskLogStreams        streams,
                                               GError                       **error);
/* a task known from its record: its log again, or NULL if the service does not capture
 * its output (problems are logged: supervision goes on without the log) */
ShimwatchTaskLog  *shimwatch_log_store_reopen (ShimwatchLogStore             *self,
                                               const char                    *namespace_,
                                               const char                    *id,
                                               const char                    *task_dir);
/* from now on (the recorded tasks are loaded) logs nobody owns age and expire */
void               shimwatch_log_store_start_expiry (ShimwatchLogStore       *self);
/* one pass: remove expired logs, start the retention of logs no task owns */
void               shimwatch_log_store_expire (ShimwatchLogStore             *self);

G_END_DECLS
