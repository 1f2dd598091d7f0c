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

gboolean
shimwatch_records_write (const char             *records_dir,
                         const ShimwatchRecord  *record,
                         GError                **error)
{
  g_autofree char *dir = g_build_filename (records_dir, record->namespace_, NULL);

  /* and the rename itself survives a crash of the machine */
  return shimwatch_records_write_now (records_dir, record, error) && fsync_dir (dir, error);
}

void
shimwatch_records_sync (const char *records_dir,
                        const char *namespace_)
{
  g_autofree char *dir = g_build_filename (records_dir, namespace_, NULL);
  g_autoptr(GError) error = NULL;

  if (!fsync_dir (dir, &error))
    g_warning ("%s", error->message);
}

gboolean
shimwatch_records_write_now (const char             *records_dir,
                             const ShimwatchRecord  *record,
                             GError                **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, record->namespace_, record->id);
  g_autofree char *dir = g_path_get_dirname (path);
  g_autoptr(GBytes) bytes = shimwatch_wire_encode_record (record);

  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot create %s: %s",
                   dir, g_strerror (saved_errno));
      return FALSE;
    }
  /* CONSISTENT|DURABLE: temp file, fsync, rename over the old one */
  return g_file_set_contents_full (path, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes),
                                   G_FILE_SET_CONTENTS_CONSISTENT | G_FILE_SET_CONTENTS_DURABLE,
                                   0600, error);
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
