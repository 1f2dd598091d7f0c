/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchContainerd"

#include "config.h"

#include "shimwatch-containerd-watcher.h"

#include <errno.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shimwatch-task-object.h"
#include "shimwatch-wire.h"

/* how often a state directory that is not there yet is looked for */
#define STATE_DIR_POLL_S 2

typedef enum {
  WATCH_STATE,      /* <state>: waits for io.containerd.runtime.v2.task */
  WATCH_ROOT,       /* <state>/io.containerd.runtime.v2.task: namespaces */
  WATCH_NAMESPACE,  /* …/<namespace>: bundles */
  WATCH_BUNDLE,     /* …/<namespace>/<id>: until address and init.pid are there */
} WatchKind;

typedef struct {
  WatchKind kind;
  int       wd;
  char     *namespace_;
  char     *id;
} Watch;

typedef struct {
  char    *namespace_;
  char    *id;
  int      wd;       /* of its WATCH_BUNDLE, -1 once ready */
  gboolean ready;
} Bundle;

struct _ShimwatchContainerdWatcher
{
  GObject     parent_instance;

  char       *state_dir;
  char       *root;
  GStrv       namespaces;
  int         fd;
  guint       fd_source;
  guint       poll_source;
  GHashTable *watches;   /* wd → Watch */
  GHashTable *bundles;   /* "ns/id" → Bundle */
};

enum {
  SIGNAL_BUNDLE_READY,
  SIGNAL_BUNDLE_REMOVED,
  N_SIGNALS
};
static guint signals[N_SIGNALS];

G_DEFINE_TYPE (ShimwatchContainerdWatcher, shimwatch_containerd_watcher, G_TYPE_OBJECT)

static void
watch_free (Watch *watch)
{
  g_free (watch->namespace_);
  g_free (watch->id);
  g_free (watch);
}

static void
bundle_free (Bundle *bundle)
{
  g_free (bundle->namespace_);
  g_free (bundle->id);
  g_free (bundle);
}

gboolean
shimwatch_containerd_watcher_wants (ShimwatchContainerdWatcher *self,
                                    const char                 *namespace_)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_WATCHER (self), FALSE);

  return self->namespaces == NULL || g_strv_contains ((const char * const *) self->namespaces,
                                                      namespace_);
}

char *
shimwatch_containerd_watcher_bundle_path (ShimwatchContainerdWatcher *self,
                                          const char                 *namespace_,
                                          const char                 *id)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_WATCHER (self), NULL);

  return g_build_filename (self->root, namespace_, id, NULL);
}

gboolean
shimwatch_containerd_watcher_has_bundle (ShimwatchContainerdWatcher *self,
                                         const char                 *namespace_,
                                         const char                 *id)
{
  g_autofree char *path = shimwatch_containerd_watcher_bundle_path (self, namespace_, id);
  struct stat st;

  return lstat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

static int
add_watch (ShimwatchContainerdWatcher *self,
           const char                 *path,
           guint32                     mask,
           WatchKind                   kind,
           const char                 *namespace_,
           const char                 *id)
{
  int wd = inotify_add_watch (self->fd, path, mask | IN_ONLYDIR | IN_DONT_FOLLOW);
  Watch *watch;

  if (wd < 0)
    {
      if (errno != ENOENT && errno != ENOTDIR)
        g_warning ("containerd: cannot watch %s: %s", path, g_strerror (errno));
      return -1;
    }
  /* the kernel hands out the same wd for a directory watched twice */
  if (g_hash_table_contains (self->watches, GINT_TO_POINTER (wd)))
    return wd;
  watch = g_new0 (Watch, 1);
  watch->kind = kind;
  watch->wd = wd;
  watch->namespace_ = g_strdup (namespace_);
  watch->id = g_strdup (id);
  g_hash_table_insert (self->watches, GINT_TO_POINTER (wd), watch);
  return wd;
}

static void
drop_watch (ShimwatchContainerdWatcher *self,
            int                         wd)
{
  if (wd < 0 || !g_hash_table_remove (self->watches, GINT_TO_POINTER (wd)))
    return;
  /* EINVAL when the kernel already dropped it (directory gone) */
  inotify_rm_watch (self->fd, wd);
}

static gboolean
regular_file_at (const char *dir,
                 const char *name)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  struct stat st;

  return lstat (path, &st) == 0 && S_ISREG (st.st_mode) && st.st_size > 0;
}

/* ready: the shim wrote its address and runc created the task (init.pid) */
static void
check_bundle (ShimwatchContainerdWatcher *self,
              Bundle                     *bundle)
{
  g_autofree char *path = NULL;

  if (bundle->ready)
    return;
  path = shimwatch_containerd_watcher_bundle_path (self, bundle->namespace_, bundle->id);
  if (!regular_file_at (path, "address") || !regular_file_at (path, "init.pid"))
    return;
  bundle->ready = TRUE;
  drop_watch (self, bundle->wd);
  bundle->wd = -1;
  g_signal_emit (self, signals[SIGNAL_BUNDLE_READY], 0, bundle->namespace_, bundle->id, path);
}

static void
bundle_appeared (ShimwatchContainerdWatcher *self,
                 const char                 *namespace_,
                 const char                 *id)
{
  g_autofree char *key = NULL;
  g_autofree char *path = NULL;
  Bundle *bundle;

  /* containerd renames a bundle to .<id> before it removes it */
  if (id[0] == '.' || !shimwatch_identifier_validate ("id", id, NULL))
    return;
  key = shimwatch_task_key (namespace_, id);
  bundle = g_hash_table_lookup (self->bundles, key);
  if (bundle == NULL)
    {
      bundle = g_new0 (Bundle, 1);
      bundle->namespace_ = g_strdup (namespace_);
      bundle->id = g_strdup (id);
      bundle->wd = -1;
      g_hash_table_insert (self->bundles, g_steal_pointer (&key), bundle);
    }
  if (bundle->ready)
    return;
  path = shimwatch_containerd_watcher_bundle_path (self, namespace_, id);
  if (bundle->wd < 0)
    bundle->wd = add_watch (self, path, IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE,
                            WATCH_BUNDLE, namespace_, id);
  /* after the watch: what was written before it is seen here, what comes after by it */
  check_bundle (self, bundle);
}

static void
bundle_gone (ShimwatchContainerdWatcher *self,
             const char                 *namespace_,
             const char                 *id)
{
  g_autofree char *key = shimwatch_task_key (namespace_, id);
  Bundle *bundle = g_hash_table_lookup (self->bundles, key);
  gboolean was_ready;

  if (bundle == NULL)
    return;
  /* a name that comes back at once (a new task with the same id) is a new bundle */
  if (shimwatch_containerd_watcher_has_bundle (self, namespace_, id) && !bundle->ready)
    return;
  was_ready = bundle->ready;
  drop_watch (self, bundle->wd);
  g_hash_table_remove (self->bundles, key);
  if (was_ready)
    g_signal_emit (self, signals[SIGNAL_BUNDLE_REMOVED], 0, namespace_, id);
}

static void
scan_namespace (ShimwatchContainerdWatcher *self,
                const char                 *namespace_)
{
  g_autofree char *path = g_build_filename (self->root, namespace_, NULL);
  g_autoptr(GDir) dir = NULL;
  const char *name;

  if (!shimwatch_identifier_validate ("namespace", namespace_, NULL) ||
      !shimwatch_containerd_watcher_wants (self, namespace_))
    return;
  if (add_watch (self, path, IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM,
                 WATCH_NAMESPACE, namespace_, NULL) < 0)
    return;
  dir = g_dir_open (path, 0, NULL);
  if (dir == NULL)
    return;
  while ((name = g_dir_read_name (dir)) != NULL)
    bundle_appeared (self, namespace_, name);
}

static void
scan_root (ShimwatchContainerdWatcher *self)
{
  g_autoptr(GDir) dir = NULL;
  const char *name;

  if (add_watch (self, self->root, IN_CREATE | IN_MOVED_TO, WATCH_ROOT, NULL, NULL) < 0)
    return;
  dir = g_dir_open (self->root, 0, NULL);
  if (dir == NULL)
    return;
  while ((name = g_dir_read_name (dir)) != NULL)
    scan_namespace (self, name);
}

/* the queue overflowed: what is on disk now is the truth */
static void
rescan (ShimwatchContainerdWatcher *self)
{
  g_autoptr(GPtrArray) gone = g_ptr_array_new_with_free_func (g_free);
  GHashTableIter iter;
  Bundle *bundle;

  g_message ("containerd: inotify queue overflow, scanning %s again", self->root);
  g_hash_table_iter_init (&iter, self->bundles);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &bundle))
    if (!shimwatch_containerd_watcher_has_bundle (self, bundle->namespace_, bundle->id))
      {
        g_ptr_array_add (gone, g_strdup (bundle->namespace_));
        g_ptr_array_add (gone, g_strdup (bundle->id));
      }
  for (guint i = 0; i + 1 < gone->len; i += 2)
    bundle_gone (self, g_ptr_array_index (gone, i), g_ptr_array_index (gone, i + 1));
  scan_root (self);
  g_hash_table_iter_init (&iter, self->bundles);
  while (g_hash_table_iter_next (&iter, NULL, (gpointer *) &bundle))
    if (!bundle->ready)
      check_bundle (self, bundle);
}

static void
handle_event (ShimwatchContainerdWatcher *self,
              const struct inotify_event *event)
{
  Watch *watch;
  const char *name = event->len > 0 ? event->name : NULL;

  if (event->mask & IN_Q_OVERFLOW)
    {
      rescan (self);
      return;
    }
  watch = g_hash_table_lookup (self->watches, GINT_TO_POINTER (event->wd));
  if (watch == NULL)
    return;
  if (event->mask & IN_IGNORED)
    {
      /* the directory went away; a bundle's is reported by its namespace's watch */
      g_hash_table_remove (self->watches, GINT_TO_POINTER (event->wd));
      return;
    }

  switch (watch->kind)
    {
    case WATCH_STATE:
      if (name != NULL && g_str_equal (name, SHIMWATCH_CONTAINERD_TASK_DIR))
        scan_root (self);
      break;
    case WATCH_ROOT:
      if (name != NULL && (event->mask & IN_ISDIR))
        scan_namespace (self, name);
      break;
    case WATCH_NAMESPACE:
      if (name == NULL)
        break;
      if (event->mask & (IN_CREATE | IN_MOVED_TO))
        {
          if (event->mask & IN_ISDIR)
            bundle_appeared (self, watch->namespace_, name);
        }
      else if (event->mask & (IN_DELETE | IN_MOVED_FROM))
        bundle_gone (self, watch->namespace_, name);
      break;
    case WATCH_BUNDLE:
      {
        g_autofree char *key = shimwatch_task_key (watch->namespace_, watch->id);
        Bundle *bundle = g_hash_table_lookup (self->bundles, key);

        if (bundle != NULL && name != NULL &&
            (g_str_equal (name, "address") || g_str_equal (name, "init.pid")))
          check_bundle (self, bundle);
      }
      break;
    }
}

static gboolean
inotify_cb (int          fd,
            GIOCondition condition,
            gpointer     user_data)
{
  ShimwatchContainerdWatcher *self = user_data;
  char buffer[16384] __attribute__ ((aligned (__alignof__ (struct inotify_event))));

  for (;;)
    {
      ssize_t n = read (fd, buffer, sizeof buffer);

      if (n <= 0)
        {
          if (n < 0 && errno == EINTR)
            continue;
          break;
        }
      for (char *p = buffer; p < buffer + n; )
        {
          const struct inotify_event *event = (const struct inotify_event *) p;

          handle_event (self, event);
          p += sizeof (struct inotify_event) + event->len;
        }
    }
  return G_SOURCE_CONTINUE;
}

static gboolean
watch_state_dir (ShimwatchContainerdWatcher *self)
{
  if (add_watch (self, self->state_dir, IN_CREATE | IN_MOVED_TO, WATCH_STATE, NULL, NULL) < 0)
    return FALSE;
  scan_root (self);
  return TRUE;
}

static gboolean
poll_state_dir_cb (gpointer user_data)
{
  ShimwatchContainerdWatcher *self = user_data;

  if (!watch_state_dir (self))
    return G_SOURCE_CONTINUE;
  g_message ("containerd: state directory %s appeared", self->state_dir);
  self->poll_source = 0;
  return G_SOURCE_REMOVE;
}

gboolean
shimwatch_containerd_watcher_start (ShimwatchContainerdWatcher *self,
                                    GError                    **error)
{
  g_return_val_if_fail (SHIMWATCH_IS_CONTAINERD_WATCHER (self), FALSE);
  g_return_val_if_fail (self->fd < 0, FALSE);

  self->fd = inotify_init1 (IN_NONBLOCK | IN_CLOEXEC);
  if (self->fd < 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "inotify: %s",
                   g_strerror (saved_errno));
      return FALSE;
    }
  self->fd_source = g_unix_fd_add (self->fd, G_IO_IN, inotify_cb, self);
  if (!watch_state_dir (self))
    {
      g_message ("containerd: state directory %s does not exist (yet)", self->state_dir);
      self->poll_source = g_timeout_add_seconds (STATE_DIR_POLL_S, poll_state_dir_cb, self);
    }
  return TRUE;
}

void
shimwatch_containerd_watcher_stop (ShimwatchContainerdWatcher *self)
{
  g_return_if_fail (SHIMWATCH_IS_CONTAINERD_WATCHER (self));

  g_clear_handle_id (&self->fd_source, g_source_remove);
  g_clear_handle_id (&self->poll_source, g_source_remove);
  g_hash_table_remove_all (self->watches);
  g_hash_table_remove_all (self->bundles);
  if (self->fd >= 0)
    {
      close (self->fd);
      self->fd = -1;
    }
}

ShimwatchContainerdWatcher *
shimwatch_containerd_watcher_new (const char         *state_dir,
                                  const char * const *namespaces)
{
  ShimwatchContainerdWatcher *self;

  g_return_val_if_fail (state_dir != NULL, NULL);

  self = g_object_new (SHIMWATCH_TYPE_CONTAINERD_WATCHER, NULL);
  self->state_dir = g_strdup (state_dir);
  self->root = g_build_filename (state_dir, SHIMWATCH_CONTAINERD_TASK_DIR, NULL);
  self->namespaces = namespaces != NULL && namespaces[0] != NULL ?
                     g_strdupv ((GStrv) namespaces) : NULL;
  return self;
}

static void
shimwatch_containerd_watcher_finalize (GObject *object)
{
  ShimwatchContainerdWatcher *self = SHIMWATCH_CONTAINERD_WATCHER (object);

  shimwatch_containerd_watcher_stop (self);
  g_hash_table_unref (self->watches);
  g_hash_table_unref (self->bundles);
  g_free (self->state_dir);
  g_free (self->root);
  g_strfreev (self->namespaces);

  G_OBJECT_CLASS (shimwatch_containerd_watcher_parent_class)->finalize (object);
}

static void
shimwatch_containerd_watcher_class_init (ShimwatchContainerdWatcherClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = shimwatch_containerd_watcher_finalize;

  /* (namespace, id, bundle path): the task exists and its shim wrote its address */
  signals[SIGNAL_BUNDLE_READY] =
    g_signal_new ("bundle-ready", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 3, G_TYPE_STRING, G_TYPE_STRING, G_TYPE_STRING);
  /* (namespace, id): a ready bundle was renamed away or removed */
  signals[SIGNAL_BUNDLE_REMOVED] =
    g_signal_new ("bundle-removed", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0, NULL, NULL,
                  NULL, G_TYPE_NONE, 2, G_TYPE_STRING, G_TYPE_STRING);
}

static void
shimwatch_containerd_watcher_init (ShimwatchContainerdWatcher *self)
{
  self->fd = -1;
  self->watches = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) watch_free);
  self->bundles = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                         (GDestroyNotify) bundle_free);
}
