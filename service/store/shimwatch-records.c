/* SPDX-License-Identifier: Apache-2.0 */
#define G_LOG_DOMAIN "ShimwatchRecords"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <glib/gstdio.h>

#include "shimwatch-commit-queue.h"
#include "shimwatch-file.h"
#include "shimwatch-marks.h"
#include "shimwatch-records.h"
#include "shimwatch-lifecycle-signal.h"

/* a record is about 1 KiB; anything much larger was not written by us */
#define RECORD_MAX (64u << 10)

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

static gboolean
write_atomically (const char  *path,
                  GBytes      *bytes,
                  GError     **error)
{
  g_autofree char *dir = g_path_get_dirname (path);

  /* CONSISTENT|DURABLE: temp file, fsync, rename over the old one; then the directory's
   * fsync, so that the rename itself survives a crash of the machine */
  return ensure_dir (dir, error) &&
         g_file_set_contents_full (path, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes),
                                   G_FILE_SET_CONTENTS_CONSISTENT | G_FILE_SET_CONTENTS_DURABLE,
                                   0600, error) &&
         fsync_dir (dir, error);
}

/* Group commit (@queue not NULL): a temp file written and renamed over the old record
 * right away, so a restarted service reads it even after a SIGKILL, and its fdatasync
 * and the directory's fsync left to the commit thread, shared with every other record
 * written in the same turn of the main loop. Returns the open file (for a mapping) and
 * the ticket that turns durable with the batch. */
static int
write_queued (const char             *path,
              GBytes                 *bytes,
              ShimwatchCommitQueue   *queue,
              ShimwatchCommitTicket **ticket,
              GError                **error)
{
  g_autofree char *dir = g_path_get_dirname (path);
  g_autofree char *temp = g_strconcat (path, ".XXXXXX", NULL);
  const guint8 *data;
  gsize size;
  gsize done = 0;
  int saved_errno;
  int fd;

  if (!ensure_dir (dir, error))
    return -1;
  /* <id>.json.XXXXXX: what the loader removes if the service dies before the rename */
  fd = g_mkstemp_full (temp, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    {
      saved_errno = errno;
      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                   "cannot create a temp file for %s: %s", path, g_strerror (saved_errno));
      return -1;
    }
  data = g_bytes_get_data (bytes, &size);
  while (done < size)
    {
      gssize n = write (fd, data + done, size - done);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        goto fail;
      done += (gsize) n;
    }
  if (rename (temp, path) != 0)
    goto fail;
  /* a copy of the descriptor for the commit thread's fdatasync; on a tmpfs nothing is
   * synced, and a dup(2) and a close(2) per record would buy nothing */
  *ticket = shimwatch_commit_queue_add (queue,
                                        shimwatch_commit_queue_is_volatile (queue) ? -1 : dup (fd),
                                        dir, NULL, NULL);
  return fd;

fail:
  saved_errno = errno;
  close (fd);
  g_unlink (temp);
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot write %s: %s",
               path, g_strerror (saved_errno));
  return -1;
}

gboolean
shimwatch_records_write_encoded (const char            *path,
                                 GBytes                *bytes,
                                 ShimwatchCommitQueue  *queue,
                                 GError               **error)
{
  g_autoptr(ShimwatchCommitTicket) ticket = NULL;
  int fd;

  if (queue == NULL)
    return write_atomically (path, bytes, error);
  fd = write_queued (path, bytes, queue, &ticket, error);
  if (fd < 0)
    return FALSE;
  close (fd);
  return TRUE;
}

gboolean
shimwatch_records_write (const char             *records_dir,
                         const ShimwatchRecord  *record,
                         GError                **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, record->namespace_, record->id);
  g_autoptr(GBytes) bytes = shimwatch_wire_encode_record (record);

  return write_atomically (path, bytes, error);
}

struct _ShimwatchRecordCommit
{
  ShimwatchMarksFile    *marks;
  guint                  slot;
  ShimwatchCommitTicket *ticket;   /* NULL: durable when prepared */
};

static void
marks_sync_job (gpointer data)
{
  g_autoptr(GError) error = NULL;

  if (!shimwatch_marks_file_sync (data, &error))
    g_warning ("a pending mark may not survive a crash of the machine: %s", error->message);
}

ShimwatchRecordCommit *
shimwatch_records_prepare_mark (ShimwatchMarksFile   *marks,
                                guint                 slot,
                                const ShimwatchMark  *mark,
                                ShimwatchCommitQueue *queue)
{
  g_autoptr(GError) write_error = NULL;
  ShimwatchRecordCommit *commit;

  g_return_val_if_fail (mark->state == SHIMWATCH_MARK_PENDING, NULL);

  /* one pwrite into the page cache: no encoding of the record, no file written */
  if (!shimwatch_marks_file_write (marks, slot, mark, &write_error))
    {
      g_warning ("a signal goes out unmarked (a restart sends it again): %s",
                 write_error->message);
      return NULL;
    }
  commit = g_new0 (ShimwatchRecordCommit, 1);
  commit->marks = shimwatch_marks_file_ref (marks);
  commit->slot = slot;
  if (queue == NULL)
    {
      g_autoptr(GError) error = NULL;

      if (!shimwatch_marks_file_sync (marks, &error))
        g_warning ("a pending mark may not survive a crash of the machine: %s", error->message);
    }
  else if (!shimwatch_commit_queue_is_volatile (queue))
    {
      /* the fdatasync runs with the turn's batch, before its tickets settle */
      shimwatch_commit_queue_add_job (queue, marks_sync_job, shimwatch_marks_file_ref (marks),
                                      (GDestroyNotify) shimwatch_marks_file_unref);
      commit->ticket = shimwatch_commit_queue_add (queue, -1, NULL, NULL, NULL);
    }
  return commit;
}

/* one pwrite of the state byte into the page cache: a SIGKILL right after it still leaves
 * the mark there for the next start to read */
void
shimwatch_records_commit (ShimwatchRecordCommit *commit)
{
  g_autoptr(GError) error = NULL;

  /* only an I/O error of the file system: the mark stays pending, a restart sends the
   * signal again */
  if (!shimwatch_marks_file_set_state (commit->marks, commit->slot, SHIMWATCH_MARK_SENT, &error))
    g_warning ("a sent signal is not marked sent: %s", error->message);
}

gboolean
shimwatch_records_commit_wait (ShimwatchRecordCommit  *commit,
                               gint64                  deadline,
                               GError                **error)
{
  return commit->ticket == NULL || shimwatch_commit_ticket_wait (commit->ticket, deadline, error);
}

static void
commit_sync_job (gpointer data)
{
  ShimwatchRecordCommit *commit = data;
  g_autoptr(GError) error = NULL;

  if (!shimwatch_records_commit_sync (commit, &error))
    g_warning ("the sent mark may not survive a crash of the machine: %s", error->message);
}

void
shimwatch_records_commit_sync_later (ShimwatchRecordCommit *commit,
                                     ShimwatchCommitQueue  *queue)
{
  /* in memory only: the mark is all there is to keep, and it is kept */
  if (shimwatch_commit_queue_is_volatile (queue))
    {
      shimwatch_record_commit_free (commit);
      return;
    }
  shimwatch_commit_queue_add_job (queue, commit_sync_job, commit,
                                  (GDestroyNotify) shimwatch_record_commit_free);
}

gboolean
shimwatch_records_commit_sync (ShimwatchRecordCommit  *commit,
                               GError                **error)
{
  return shimwatch_marks_file_sync (commit->marks, error);
}

void
shimwatch_record_commit_free (ShimwatchRecordCommit *commit)
{
  if (commit == NULL)
    return;
  g_clear_pointer (&commit->marks, shimwatch_marks_file_unref);
  g_clear_pointer (&commit->ticket, shimwatch_commit_ticket_unref);
  g_free (commit);
}

/* a record that is not there is removed already */
static gboolean
unlink_record (const char  *path,
               GError     **error)
{
  int saved_errno;

  if (g_unlink (path) == 0 || errno == ENOENT)
    return TRUE;
  saved_errno = errno;
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot remove %s: %s",
               path, g_strerror (saved_errno));
  return FALSE;
}

gboolean
shimwatch_records_remove_queued (const char            *records_dir,
                                 const char            *namespace_,
                                 const char            *id,
                                 gboolean               may_be_last,
                                 ShimwatchCommitQueue  *queue,
                                 GError               **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, namespace_, id);
  g_autofree char *marks = shimwatch_marks_path (records_dir, namespace_, id);
  g_autofree char *dir = g_path_get_dirname (path);

  /* the marks first: marks without their record are removed at the next start */
  if (!unlink_record (marks, error) || !unlink_record (path, error))
    return FALSE;
  /* the namespace goes with its last record: then the top directory changed */
  shimwatch_commit_ticket_unref (shimwatch_commit_queue_add (queue, -1,
                                                             may_be_last && g_rmdir (dir) == 0
                                                               ? records_dir : dir,
                                                             NULL, NULL));
  return TRUE;
}

gboolean
shimwatch_records_remove (const char  *records_dir,
                          const char  *namespace_,
                          const char  *id,
                          GError     **error)
{
  g_autofree char *path = shimwatch_records_path (records_dir, namespace_, id);
  g_autofree char *marks = shimwatch_marks_path (records_dir, namespace_, id);
  g_autofree char *dir = g_path_get_dirname (path);

  if (!unlink_record (marks, error) || !unlink_record (path, error))
    return FALSE;
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

void
shimwatch_records_set_aside (const char *records_dir,
                             const char *namespace_,
                             const char *id,
                             const char *reason)
{
  g_autofree char *path = shimwatch_records_path (records_dir, namespace_, id);

  move_aside (path, reason);
}

/* the signal marks newer than @record, laid over it. Marks that cannot be read are
 * moved aside: the record alone counts (a signal it does not say was sent is sent again) */
static void
load_marks (int              dir_fd,
            const char      *ns_dir,
            const char      *id,
            ShimwatchRecord *record)
{
  g_autofree char *name = g_strconcat (id, ".marks", NULL);
  g_autofree char *path = g_build_filename (ns_dir, name, NULL);
  g_autoptr(GString) broken = g_string_new (NULL);
  g_autoptr(GError) error = NULL;
  g_autofree char *contents = NULL;
  ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS];
  gsize length;

  contents = shimwatch_read_regular_file_at (dir_fd, name, SHIMWATCH_MARKS_SIZE,
                                             SHIMWATCH_FILE_NONE, &length, NULL, &error);
  if (contents == NULL && g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
    return;
  if (contents == NULL ||
      !shimwatch_marks_decode ((const guint8 *) contents, length, marks, broken, &error))
    {
      g_autofree char *aside = g_strdup_printf ("%s.broken-%" G_GINT64_FORMAT, path,
                                                g_get_real_time () / G_USEC_PER_SEC);

      if (g_rename (path, aside) == 0)
        g_warning ("signal marks %s are broken (%s); moved aside to %s, the task record alone "
                   "counts", path, error->message, aside);
      else
        g_warning ("signal marks %s are broken (%s) and cannot be moved aside: %s", path,
                   error->message, g_strerror (errno));
      return;
    }
  if (broken->len > 0)
    g_warning ("signal marks %s: broken slots ignored (%s), the task record counts for them",
               path, broken->str);
  shimwatch_marks_apply (record, marks);
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
      g_autoptr(GDir) dir = NULL;
      const char *name;
      int dir_fd;

      /* a namespace is a directory of ours, never a link to somewhere else */
      dir_fd = open (ns_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (dir_fd < 0)
        {
          g_warning ("%s is not a directory of task records: %s", ns_dir, g_strerror (errno));
          continue;
        }
      dir = g_dir_open (ns_dir, 0, NULL);

      while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
        {
          g_autofree char *path = g_build_filename (ns_dir, name, NULL);
          g_autofree char *contents = NULL;
          g_autofree char *id = NULL;
          g_autoptr(GError) error = NULL;
          ShimwatchRecord *record;
          gsize length;

          if (g_str_has_suffix (name, ".marks"))
            {
              /* marks whose record is gone (the service died between the two unlinks) */
              g_autofree char *json = g_strndup (name, strlen (name) - strlen (".marks"));
              g_autofree char *json_name = g_strconcat (json, ".json", NULL);

              if (faccessat (dir_fd, json_name, F_OK, AT_SYMLINK_NOFOLLOW) != 0 &&
                  errno == ENOENT && g_unlink (path) == 0)
                g_debug ("removed %s, the marks of a record that is gone", path);
              continue;
            }
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
          /* one open, no link followed, no blocking on a FIFO, a cap on the size */
          contents = shimwatch_read_regular_file_at (dir_fd, name, RECORD_MAX,
                                                     SHIMWATCH_FILE_NONE, &length, NULL, &error);
          if (contents == NULL)
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
          /* (a record from before the marks file) its signal never went out: the flag it set ahead of time
           * does not hold */
          shimwatch_lifecycle_signal_undo_unsent (record);
          load_marks (dir_fd, ns_dir, id, record);
          g_ptr_array_add (records, record);
        }
      close (dir_fd);
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
