/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchLogStore"

#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <glib/gstdio.h>

#include "shimwatch-log-store.h"
#include "shimwatch-logging.h"
#include "shimwatch-names.h"

struct _ShimwatchLogStore
{
  GObject                parent_instance;

  char                  *dir;
  ShimwatchTaskLogLimits limits;
  guint                  retention_s;
  GHashTable            *live;       /* log dir → ShimwatchTaskLog (not owned) */
  guint                  timer;
  guint                  idle;
};

G_DEFINE_TYPE (ShimwatchLogStore, shimwatch_log_store, G_TYPE_OBJECT)

static char *
task_log_dir (ShimwatchLogStore *self,
              const char        *namespace_,
              const char        *id)
{
  return g_build_filename (self->dir, namespace_, id, NULL);
}

/* a mark for a log no task owns: its retention counts from now */
static gint64
write_mark (const char *dir)
{
  g_autoptr(GError) error = NULL;

  if (!shimwatch_task_log_write_mark (dir, &error))
    g_warning ("%s", error->message);
  return g_get_real_time ();
}

static void
remove_log (const char *dir,
            const char *why)
{
  g_autoptr(GError) error = NULL;

  if (!shimwatch_task_log_remove_dir (dir, &error))
    g_warning ("%s", error->message);
  else
    g_message ("removed the task log %s (%s)", dir, why);
}

void
shimwatch_log_store_expire (ShimwatchLogStore *self)
{
  g_autoptr(GDir) namespaces = g_dir_open (self->dir, 0, NULL);
  const char *ns;

  g_return_if_fail (SHIMWATCH_IS_LOG_STORE (self));

  while (namespaces != NULL && (ns = g_dir_read_name (namespaces)) != NULL)
    {
      g_autofree char *ns_dir = g_build_filename (self->dir, ns, NULL);
      g_autoptr(GDir) logs = g_dir_open (ns_dir, 0, NULL);
      const char *name;

      while (logs != NULL && (name = g_dir_read_name (logs)) != NULL)
        {
          g_autofree char *dir = g_build_filename (ns_dir, name, NULL);
          gint64 deleted_at;

          if (g_hash_table_contains (self->live, dir) ||
              !g_file_test (dir, G_FILE_TEST_IS_DIR))
            continue;
          if (!shimwatch_task_log_read_mark (dir, &deleted_at))
            {
              /* no task owns it (its end happened while the service was down) */
              deleted_at = write_mark (dir);
              g_message ("the task log %s belongs to no supervised task: removed in %u s",
                         dir, self->retention_s);
            }
          if (g_get_real_time () - deleted_at >= (gint64) self->retention_s * G_USEC_PER_SEC)
            remove_log (dir, "its task was deleted and the retention period passed");
        }
      (void) g_rmdir (ns_dir);        /* fails while it holds anything */
    }
}

static gboolean
expire_timer_cb (gpointer user_data)
{
  shimwatch_log_store_expire (user_data);
  return G_SOURCE_CONTINUE;
}

static gboolean
expire_idle_cb (gpointer user_data)
{
  ShimwatchLogStore *self = user_data;

  self->idle = 0;
  shimwatch_log_store_expire (self);
  return G_SOURCE_REMOVE;
}

void
shimwatch_log_store_start_expiry (ShimwatchLogStore *self)
{
  g_return_if_fail (SHIMWATCH_IS_LOG_STORE (self));

  if (self->timer != 0)
    return;
  /* a log goes at most a quarter of the retention (and 5 minutes) late */
  self->timer = g_timeout_add_seconds (CLAMP (self->retention_s / 4, 1, 300), expire_timer_cb,
                                       self);
  shimwatch_log_store_expire (self);
}

static void
task_log_gone (gpointer  user_data,
               GObject  *where_the_object_was)
{
  ShimwatchLogStore *self = user_data;
  GHashTableIter iter;
  gpointer value;

  g_hash_table_iter_init (&iter, self->live);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    if (value == (gpointer) where_the_object_was)
      g_hash_table_iter_remove (&iter);
}

static void
task_log_finished_cb (ShimwatchTaskLog  *log,
                      ShimwatchLogStore *self)
{
  g_hash_table_remove (self->live, shimwatch_task_log_get_dir (log));
  g_object_weak_unref (G_OBJECT (log), task_log_gone, self);
  g_signal_handlers_disconnect_by_data (log, self);
  /* no retention: the log goes as soon as its task */
  if (self->retention_s == 0 && self->timer != 0 && self->idle == 0)
    self->idle = g_idle_add (expire_idle_cb, self);
}

static ShimwatchTaskLog *
track (ShimwatchLogStore *self,
       ShimwatchTaskLog  *log)
{
  g_hash_table_insert (self->live, g_strdup (shimwatch_task_log_get_dir (log)), log);
  g_object_weak_ref (G_OBJECT (log), task_log_gone, self);
  g_signal_connect (log, "finished", G_CALLBACK (task_log_finished_cb), self);
  return log;
}

ShimwatchTaskLog *
shimwatch_log_store_open (ShimwatchLogStore        *self,
                          const char               *namespace_,
                          const char               *id,
                          const char               *task_dir,
                          ShimwatchTaskLogStreams   streams,
                          GError                  **error)
{
  g_autofree char *dir = task_log_dir (self, namespace_, id);
  ShimwatchTaskLog *log;

  g_return_val_if_fail (SHIMWATCH_IS_LOG_STORE (self), NULL);

  if (g_hash_table_contains (self->live, dir))
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_EXISTS, "the task log %s is in use", dir);
      return NULL;
    }
  if (g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      /* an earlier task of that name: its log is kept for its own retention period */
      gint64 deleted_at;
      g_autofree char *aside = NULL;

      if (!shimwatch_task_log_read_mark (dir, &deleted_at))
        deleted_at = write_mark (dir);
      aside = g_strdup_printf ("%s~%" G_GINT64_FORMAT, dir, deleted_at);
      if (rename (dir, aside) != 0)
        {
          g_warning ("cannot keep the log of the earlier task %s/%s as %s: %s; removing it",
                     namespace_, id, aside, g_strerror (errno));
          remove_log (dir, "a new task took its name");
        }
    }
  log = shimwatch_task_log_new (namespace_, id, task_dir, dir, streams, &self->limits, error);
  return log != NULL ? track (self, log) : NULL;
}

ShimwatchTaskLog *
shimwatch_log_store_reopen (ShimwatchLogStore *self,
                            const char        *namespace_,
                            const char        *id,
                            const char        *task_dir)
{
  g_autofree char *dir = task_log_dir (self, namespace_, id);
  g_autoptr(GError) error = NULL;
  ShimwatchTaskLog *log;

  g_return_val_if_fail (SHIMWATCH_IS_LOG_STORE (self), NULL);

  if (g_hash_table_contains (self->live, dir))
    return NULL;
  log = shimwatch_task_log_reopen (namespace_, id, task_dir, dir, &self->limits, &error);
  if (log == NULL && error != NULL)
    shimwatch_log_task (G_LOG_LEVEL_WARNING,
                        (&(ShimwatchLogTask) { .namespace_ = namespace_, .id = id }),
                        "its output is not kept: %s", error->message);
  return log != NULL ? track (self, log) : NULL;
}

ShimwatchLogStore *
shimwatch_log_store_new (const char                    *logs_dir,
                         const ShimwatchTaskLogLimits  *limits,
                         guint                          retention_s,
                         GError                       **error)
{
  ShimwatchLogStore *self;

  if (g_mkdir_with_parents (logs_dir, 0700) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create %s: %s", logs_dir, g_strerror (saved_errno));
      return NULL;
    }
  self = g_object_new (SHIMWATCH_TYPE_LOG_STORE, NULL);
  self->dir = g_strdup (logs_dir);
  self->limits = *limits;
  self->retention_s = retention_s;
  return self;
}

static void
shimwatch_log_store_dispose (GObject *object)
{
  ShimwatchLogStore *self = SHIMWATCH_LOG_STORE (object);
  GHashTableIter iter;
  gpointer value;

  g_clear_handle_id (&self->timer, g_source_remove);
  g_clear_handle_id (&self->idle, g_source_remove);
  g_hash_table_iter_init (&iter, self->live);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    {
      g_object_weak_unref (value, task_log_gone, self);
      g_signal_handlers_disconnect_by_data (value, self);
      g_hash_table_iter_remove (&iter);
    }
  G_OBJECT_CLASS (shimwatch_log_store_parent_class)->dispose (object);
}

static void
shimwatch_log_store_finalize (GObject *object)
{
  ShimwatchLogStore *self = SHIMWATCH_LOG_STORE (object);

  g_hash_table_unref (self->live);
  g_free (self->dir);
  G_OBJECT_CLASS (shimwatch_log_store_parent_class)->finalize (object);
}

static void
shimwatch_log_store_class_init (ShimwatchLogStoreClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = shimwatch_log_store_dispose;
  object_class->finalize = shimwatch_log_store_finalize;
}

static void
shimwatch_log_store_init (ShimwatchLogStore *self)
{
  self->live = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
}
