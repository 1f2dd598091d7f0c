/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchRecords"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include "shimwatch-records.h"

char *
shimwatch_records_path (const char *records_dir,
                        const char *namespace_,
                        const char *id)
{
  g_autofree char *name = g_strconcat (id, ".json", NULL);

  return g_build_filename (records_dir, namespace_, name, NULL);
}

static gboolean
fsync_dir (const char  *dir,
           GError     **error)
{
  int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int saved_errno;

  if (fd < 0 || fsync (fd) != 0)
    {
      saved_errno = errno;
      if (fd >= 0)
        close (fd);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "fsync %s: %s", dir,
                   g_strerror (saved_errno));
      return FALSE;
    }
  close (fd);
  return TRUE;
}

struct _ShimwatchRecordCommit
{
  char     *temp_path;      /* NULL: a removal */
  char     *path;
  char     *dir;            /* a removal's namespace directory */
  gboolean  committed;
};

static gboolean
ensure_dir (const char  *dir,
            GError     **error)
{
  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot create %s: %s",
                   dir, g_strerror (saved_errno));
      return FALSE;
    }
  return TRUE;
}

gboolean
shimwatch_records_write (const char             *records_dir,
                         const ShimwatchRecord  *record,
                         GError                **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, record->namespace_, record->id);
  g_autofree char *dir = g_path_get_dirname (path);
  g_autoptr(GBytes) bytes = shimwatch_wire_encode_record (record);

  /* CONSISTENT|DURABLE: temp file, fsync, rename over the old one; then the directory's
   * fsync, so that the rename itself survives a crash of the machine */
  return ensure_dir (dir, error) &&
         g_file_set_contents_full (path, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes),
                                   G_FILE_SET_CONTENTS_CONSISTENT | G_FILE_SET_CONTENTS_DURABLE,
                                   0600, error) &&
         fsync_dir (dir, error);
}

void
shimwatch_records_sync (const char *records_dir,
                        const char *namespace_)
{
  g_autofree char *dir = g_build_filename (records_dir, namespace_, NULL);
  g_autoptr(GError) error = NULL;

  if (!fsync_dir (g_file_test (dir, G_FILE_TEST_IS_DIR) ? dir : records_dir, &error))
    g_warning ("%s", error->message);
}

static gboolean
write_all (int           fd,
           const guint8 *data,
           gsize         size)
{
  while (size > 0)
    {
      gssize n = write (fd, data, size);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return FALSE;
      data += n;
      size -= (gsize) n;
    }
  return TRUE;
}

ShimwatchRecordCommit *
shimwatch_records_prepare (const char             *records_dir,
                           const ShimwatchRecord  *record,
                           GError                **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, record->namespace_, record->id);
  g_autofree char *dir = g_path_get_dirname (path);
  /* the name pattern shimwatch_records_load() recognizes as an interrupted write */
  g_autofree char *temp_path = g_strconcat (path, ".XXXXXX", NULL);
  g_autoptr(GBytes) bytes = shimwatch_wire_encode_record (record);
  ShimwatchRecordCommit *commit;
  gsize size;
  const guint8 *data = g_bytes_get_data (bytes, &size);
  int fd;

  if (!ensure_dir (dir, error))
    return NULL;
  fd = g_mkstemp_full (temp_path, O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create a temp file beside %s: %s", path, g_strerror (saved_errno));
      return NULL;
    }
  if (!write_all (fd, data, size) || fsync (fd) != 0)
    {
      int saved_errno = errno;

      close (fd);
      g_unlink (temp_path);
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot write %s: %s",
                   temp_path, g_strerror (saved_errno));
      return NULL;
    }
  close (fd);
  commit = g_new0 (ShimwatchRecordCommit, 1);
  commit->temp_path = g_steal_pointer (&temp_path);
  commit->path = g_steal_pointer (&path);
  return commit;
}

ShimwatchRecordCommit *
shimwatch_records_prepare_removal (const char *records_dir,
                                   const char *namespace_,
                                   const char *id)
{
  ShimwatchRecordCommit *commit = g_new0 (ShimwatchRecordCommit, 1);

  commit->path = shimwatch_records_path (records_dir, namespace_, id);
  commit->dir = g_path_get_dirname (commit->path);
  return commit;
}

/* syscalls on the commit's own paths only, nothing to allocate: safe and short in
 * GDBus's worker thread, right before it writes the signal */
gboolean
shimwatch_records_commit (ShimwatchRecordCommit  *commit,
                          GError                **error)
{
  int saved_errno;

  if (commit->committed)
    return TRUE;
  if (commit->temp_path == NULL)
    {
      if (unlink (commit->path) != 0 && errno != ENOENT)
        {
          saved_errno = errno;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                       "cannot remove %s: %s", commit->path, g_strerror (saved_errno));
          return FALSE;
        }
      rmdir (commit->dir);      /* the namespace goes with its last record */
    }
  else if (rename (commit->temp_path, commit->path) != 0)
    {
      saved_errno = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot rename %s to %s: %s", commit->temp_path, commit->path,
                   g_strerror (saved_errno));
      return FALSE;
    }
  commit->committed = TRUE;
  return TRUE;
}

void
shimwatch_record_commit_free (ShimwatchRecordCommit *commit)
{
  if (commit == NULL)
    return;
  if (!commit->committed && commit->temp_path != NULL)
    g_unlink (commit->temp_path);
  g_free (commit->temp_path);
  g_free (commit->path);
  g_free (commit->dir);
  g_free (commit);
}

gboolean
shimwatch_records_remove (const char  *records_dir,
                          const char  *namespace_,
                          const char  *id,
                          GError     **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, namespace_, id);
  g_autofree char *dir = g_path_get_dirname (path);

  if (g_unlink (path) != 0 && errno != ENOENT)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot remove %s: %s",
                   path, g_strerror (saved_errno));
      return FALSE;
    }
  g_rmdir (dir);      /* the namespace goes with its last record */
  return fsync_dir (records_dir, NULL) || TRUE;
}

static void
move_aside (const char *path,
            const char *reason)
{
  g_autofree char *aside = g_strdup_printf ("%s.broken-%" G_GINT64_FORMAT, path,
                                            g_get_real_time () / G_USEC_PER_SEC);

  if (g_rename (path, aside) == 0)
    g_warning ("task record %s is broken (%s); moved aside to %s", path, reason, aside);
  else
    g_warning ("task record %s is broken (%s) and cannot be moved aside: %s", path, reason,
               g_strerror (errno));
}

GPtrArray *
shimwatch_records_load (const char *records_dir,
                        GPtrArray  *broken_keys)
{
  GPtrArray *records = g_ptr_array_new_with_free_func ((GDestroyNotify) shimwatch_record_free);
  g_autoptr(GDir) top = g_dir_open (records_dir, 0, NULL);
  const char *ns;

  while (top != NULL && (ns = g_dir_read_name (top)) != NULL)
    {
      g_autofree char *ns_dir = g_build_filename (records_dir, ns, NULL);
      g_autoptr(GDir) dir = g_dir_open (ns_dir, 0, NULL);
      const char *name;

      while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
        {
          g_autofree char *path = g_build_filename (ns_dir, name, NULL);
          g_autofree char *contents = NULL;
          g_autofree char *id = NULL;
          g_autoptr(GError) error = NULL;
          ShimwatchRecord *record;
          gsize length;

          if (!g_str_has_suffix (name, ".json"))
            {
              /* the temp file of a write the service was killed in: the record it would
               * have replaced is still there, whole */
              const char *temp = strstr (name, ".json.");

              if (temp != NULL && strlen (temp) == strlen (".json.XXXXXX") &&
                  !g_str_has_prefix (temp, ".json.broken-") && g_unlink (path) == 0)
                g_debug ("removed %s, left by an interrupted write", path);
              continue;
            }
          id = g_strndup (name, strlen (name) - strlen (".json"));
          if (!g_file_get_contents (path, &contents, &length, &error))
            {
              move_aside (path, error->message);
              if (broken_keys != NULL)
                g_ptr_array_add (broken_keys, g_strconcat (ns, "/", id, NULL));
              continue;
            }
          record = shimwatch_wire_decode_record (contents, length, &error);
          if (record != NULL &&
              (!g_str_equal (record->namespace_, ns) || !g_str_equal (record->id, id)))
            {
              g_clear_pointer (&record, shimwatch_record_free);
              g_set_error (&error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                           "it names another task than its file name");
            }
          if (record == NULL)
            {
              move_aside (path, error->message);
              if (broken_keys != NULL && shimwatch_identifier_validate ("namespace", ns, NULL) &&
                  shimwatch_identifier_validate ("id", id, NULL))
                g_ptr_array_add (broken_keys, g_strconcat (ns, "/", id, NULL));
              continue;
            }
          g_ptr_array_add (records, record);
        }
    }
  return records;
}

guint64
shimwatch_process_start_time (guint32 pid)
{
  g_autofree char *path = g_strdup_printf ("/proc/%u/stat", pid);
  g_autofree char *stat = NULL;
  g_auto(GStrv) fields = NULL;
  const char *after;

  if (pid == 0 || !g_file_get_contents (path, &stat, NULL, NULL))
    return 0;
  /* "pid (comm) state ppid ...": comm may hold anything, fields follow the last ')' */
  after = strrchr (stat, ')');
  if (after == NULL)
    return 0;
  fields = g_strsplit (after + 2, " ", 0);
  /* field 3 (state) is fields[0], so field 22 (starttime) is fields[19] */
  if (g_strv_length (fields) < 20 || fields[0][0] == 'Z' || fields[0][0] == 'X')
    return 0;
  return g_ascii_strtoull (fields[19], NULL, 10);
}
