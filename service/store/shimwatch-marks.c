/* SPDX-License-Identifier: Apache-2.0
 *
 * Signal marks: the per-task file of lifecycle-signal marks (see shimwatch-marks.h)
 */
#define G_LOG_DOMAIN "ShimwatchRecords"

#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <glib/gstdio.h>

#include "shimwatch-marks.h"
#include "shimwatch-lifecycle-signal.h"

#define MAGIC        "SWMARKS1"
#define VERSION      1
#define HEADER_SIZE  16
#define SLOT_SIZE    96

G_STATIC_ASSERT (SHIMWATCH_MARKS_N_SLOTS == SHIMWATCH_LIFECYCLE_N_SIGNALS);
G_STATIC_ASSERT (SHIMWATCH_MARKS_SIZE == HEADER_SIZE + SHIMWATCH_MARKS_N_SLOTS * SLOT_SIZE);

/* slot offsets */
#define S_STATE      0
#define S_FLAGS      1
#define S_RESERVED   2
#define S_CHECKSUM   4
#define S_SEQ        8
#define S_EXIT_PID   16
#define S_EXIT_STATUS 20
#define S_EXITED_AT  24
#define S_STATUS     32
#define S_REASON     48

#define FLAG_DELETED     1
#define FLAG_EXIT_KNOWN  2

char *
shimwatch_marks_path (const char *records_dir,
                      const char *namespace_,
                      const char *id)
{
  g_autofree char *name = g_strconcat (id, ".marks", NULL);

  return g_build_filename (records_dir, namespace_, name, NULL);
}

static guint32
slot_checksum (const guint8 *slot)
{
  guint32 hash = 2166136261u;   /* FNV-1a */

  for (guint i = 1; i < SLOT_SIZE; i++)
    {
      if (i >= S_CHECKSUM && i < S_SEQ)
        continue;
      hash = (hash ^ slot[i]) * 16777619u;
    }
  return hash;
}

static guint32
get_u32 (const guint8 *p)
{
  guint32 v;

  memcpy (&v, p, sizeof v);
  return GUINT32_FROM_LE (v);
}

static guint64
get_u64 (const guint8 *p)
{
  guint64 v;

  memcpy (&v, p, sizeof v);
  return GUINT64_FROM_LE (v);
}

static void
put_u32 (guint8  *p,
         guint32  v)
{
  v = GUINT32_TO_LE (v);
  memcpy (p, &v, sizeof v);
}

static void
put_u64 (guint8  *p,
         guint64  v)
{
  v = GUINT64_TO_LE (v);
  memcpy (p, &v, sizeof v);
}

/* a NUL-terminated UTF-8 string padded with NULs to @size */
static gboolean
get_string (const guint8 *p,
            gsize         size,
            char         *out)
{
  const char *end = memchr (p, '\0', size);

  if (end == NULL || !g_utf8_validate ((const char *) p, end - (const char *) p, NULL))
    return FALSE;
  for (const guint8 *q = (const guint8 *) end; q < p + size; q++)
    if (*q != '\0')
      return FALSE;
  memcpy (out, p, size);
  return TRUE;
}

static gboolean
decode_slot_checked (const guint8  *slot,
                     ShimwatchMark *mark,
                     const char   **problem);

/* a slot that does not check reads as empty */
static gboolean
decode_slot (const guint8  *slot,
             ShimwatchMark *mark,
             const char   **problem)
{
  if (decode_slot_checked (slot, mark, problem))
    return TRUE;
  memset (mark, 0, sizeof *mark);
  return FALSE;
}

static gboolean
decode_slot_checked (const guint8  *slot,
                     ShimwatchMark *mark,
                     const char   **problem)
{
  gint64 exited_at;

  memset (mark, 0, sizeof *mark);
  /* empty, or a write cut short before its state byte was set */
  if (slot[S_STATE] == SHIMWATCH_MARK_EMPTY)
    return TRUE;
  if (slot[S_STATE] != SHIMWATCH_MARK_PENDING && slot[S_STATE] != SHIMWATCH_MARK_SENT)
    return (*problem = "unknown state", FALSE);
  if (get_u32 (slot + S_CHECKSUM) != slot_checksum (slot))
    return (*problem = "checksum mismatch", FALSE);
  if ((slot[S_FLAGS] & ~(FLAG_DELETED | FLAG_EXIT_KNOWN)) != 0 ||
      slot[S_RESERVED] != 0 || slot[S_RESERVED + 1] != 0)
    return (*problem = "unknown flags", FALSE);
  exited_at = (gint64) get_u64 (slot + S_EXITED_AT);
  if (get_u64 (slot + S_SEQ) == 0 || exited_at < 0)
    return (*problem = "bad number", FALSE);
  if (!get_string (slot + S_STATUS, sizeof mark->status, mark->status) ||
      !get_string (slot + S_REASON, sizeof mark->exit_reason, mark->exit_reason))
    return (*problem = "bad string", FALSE);
  mark->state = slot[S_STATE];
  mark->seq = get_u64 (slot + S_SEQ);
  mark->deleted = (slot[S_FLAGS] & FLAG_DELETED) != 0;
  mark->exit_known = (slot[S_FLAGS] & FLAG_EXIT_KNOWN) != 0;
  mark->exit.pid = get_u32 (slot + S_EXIT_PID);
  mark->exit.exit_status = get_u32 (slot + S_EXIT_STATUS);
  mark->exit.exited_at = exited_at;
  return TRUE;
}

static void
encode_slot (const ShimwatchMark *mark,
             guint8               slot[SLOT_SIZE])
{
  memset (slot, 0, SLOT_SIZE);
  if (mark->state == SHIMWATCH_MARK_EMPTY)
    return;
  slot[S_STATE] = (guint8) mark->state;
  slot[S_FLAGS] = (mark->deleted ? FLAG_DELETED : 0) | (mark->exit_known ? FLAG_EXIT_KNOWN : 0);
  put_u64 (slot + S_SEQ, mark->seq);
  put_u32 (slot + S_EXIT_PID, mark->exit.pid);
  put_u32 (slot + S_EXIT_STATUS, mark->exit.exit_status);
  put_u64 (slot + S_EXITED_AT, (guint64) MAX (mark->exit.exited_at, 0));
  memcpy (slot + S_STATUS, mark->status, strnlen (mark->status, sizeof mark->status - 1));
  memcpy (slot + S_REASON, mark->exit_reason,
          strnlen (mark->exit_reason, sizeof mark->exit_reason - 1));
  put_u32 (slot + S_CHECKSUM, slot_checksum (slot));
}

static gboolean
is_zero (const guint8 *data,
         gsize         size)
{
  for (gsize i = 0; i < size; i++)
    if (data[i] != 0)
      return FALSE;
  return TRUE;
}

gboolean
shimwatch_marks_decode (const guint8   *data,
                        gsize           size,
                        ShimwatchMark   marks[SHIMWATCH_MARKS_N_SLOTS],
                        GString        *broken,
                        GError        **error)
{
  memset (marks, 0, sizeof (ShimwatchMark) * SHIMWATCH_MARKS_N_SLOTS);
  /* created, not yet written: no marks */
  if (size == 0 || (size == SHIMWATCH_MARKS_SIZE && is_zero (data, HEADER_SIZE)))
    return TRUE;
  if (size != SHIMWATCH_MARKS_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "marks file of %" G_GSIZE_FORMAT " bytes, not %d", size,
                   SHIMWATCH_MARKS_SIZE);
      return FALSE;
    }
  if (memcmp (data, MAGIC, 8) != 0 || get_u32 (data + 8) != VERSION ||
      get_u32 (data + 12) != SLOT_SIZE)
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                           "not a marks file of version 1");
      return FALSE;
    }
  for (guint i = 0; i < SHIMWATCH_MARKS_N_SLOTS; i++)
    {
      const char *problem = NULL;

      if (!decode_slot (data + HEADER_SIZE + i * SLOT_SIZE, &marks[i], &problem) &&
          broken != NULL)
        g_string_append_printf (broken, "%s%s: %s", broken->len > 0 ? ", " : "",
                                shimwatch_lifecycle_signal_member (
                                  shimwatch_lifecycle_signal_from_slot (i)), problem);
    }
  return TRUE;
}

void
shimwatch_marks_encode (const ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS],
                        guint8              data[SHIMWATCH_MARKS_SIZE])
{
  memset (data, 0, SHIMWATCH_MARKS_SIZE);
  memcpy (data, MAGIC, 8);
  put_u32 (data + 8, VERSION);
  put_u32 (data + 12, SLOT_SIZE);
  for (guint i = 0; i < SHIMWATCH_MARKS_N_SLOTS; i++)
    encode_slot (&marks[i], data + HEADER_SIZE + i * SLOT_SIZE);
}

static gboolean
copy_string (char       *out,
             gsize       size,
             const char *value)
{
  gsize len = value != NULL ? strlen (value) : 0;

  memset (out, 0, size);
  if (len >= size)
    return FALSE;
  if (len > 0)
    memcpy (out, value, len);
  return TRUE;
}

gboolean
shimwatch_mark_from_record (ShimwatchMark         *mark,
                            const ShimwatchRecord *record,
                            ShimwatchMarkState     state,
                            guint64                seq)
{
  gboolean fits;

  memset (mark, 0, sizeof *mark);
  mark->state = state;
  mark->seq = seq;
  mark->deleted = record->deleted;
  mark->exit_known = record->exit_known;
  mark->exit = record->exit;
  mark->exit.exited_at = MAX (mark->exit.exited_at, 0);
  fits = copy_string (mark->status, sizeof mark->status, record->status);
  fits = copy_string (mark->exit_reason, sizeof mark->exit_reason, record->exit_reason) && fits;
  return fits;
}

void
shimwatch_marks_apply (ShimwatchRecord     *record,
                       const ShimwatchMark  marks[SHIMWATCH_MARKS_N_SLOTS])
{
  const ShimwatchMark *newest = NULL;

  for (guint i = 0; i < SHIMWATCH_MARKS_N_SLOTS; i++)
    {
      const ShimwatchMark *mark = &marks[i];
      ShimwatchLifecycleSignal signal = shimwatch_lifecycle_signal_from_slot (i);
      gboolean *flag = shimwatch_lifecycle_signal_record_flag (signal, record);

      /* empty, or already in the record */
      if (mark->state == SHIMWATCH_MARK_EMPTY || mark->seq <= record->marks_seq)
        continue;
      if (mark->state == SHIMWATCH_MARK_SENT)
        *flag = TRUE;
      else
        {
          *flag = FALSE;
          g_free (record->pending_signal);
          record->pending_signal = g_strdup (shimwatch_lifecycle_signal_member (signal));
          record->pending_sent = FALSE;
        }
      if (newest == NULL || mark->seq > newest->seq)
        newest = mark;
    }
  if (newest == NULL)
    return;
  /* no signal left pending: the newest is the one the record went with */
  if (newest->state == SHIMWATCH_MARK_SENT &&
      (record->pending_signal == NULL || record->pending_sent))
    {
      g_free (record->pending_signal);
      record->pending_signal =
        g_strdup (shimwatch_lifecycle_signal_member (
          shimwatch_lifecycle_signal_from_slot ((guint) (newest - marks))));
      record->pending_sent = TRUE;
    }
  if (newest->status[0] != '\0')
    {
      g_free (record->status);
      record->status = g_strdup (newest->status);
    }
  if (newest->exit_reason[0] != '\0')
    {
      g_free (record->exit_reason);
      record->exit_reason = g_strdup (newest->exit_reason);
    }
  record->deleted = newest->deleted;
  record->exit_known = newest->exit_known;
  record->exit = newest->exit;
}

/* -- the file ----------------------------------------------------------------------------- */

/* Written with pwrite(), not through a mapping. A mapping cost more than its stores saved:
 * its first store was a page fault, and its munmap at the task's end a TLB shootdown on
 * every CPU the service's threads ran on (on the bench's VM 38 of 671 samples of the main
 * thread in the mass deaths, more than any other system call of a death). A pwrite of a
 * slot copies it into the page cache at once, where a SIGKILL right after leaves it for
 * the next start as it left a store; the kernel looks for a fatal signal only between
 * pages, and the whole file is in one, so a slot is never written in part. */
struct _ShimwatchMarksFile
{
  gatomicrefcount ref_count;
  char           *path;
  int             fd;
  guint64         last_seq;
};

ShimwatchMarksFile *
shimwatch_marks_file_open (const char           *path,
                           ShimwatchCommitQueue *queue,
                           GError              **error)
{
  g_autofree char *dir = g_path_get_dirname (path);
  ShimwatchMark marks[SHIMWATCH_MARKS_N_SLOTS];
  guint8 content[SHIMWATCH_MARKS_SIZE];
  g_autoptr(GError) local_error = NULL;
  ShimwatchMarksFile *file;
  gboolean fresh = TRUE;
  struct stat st;
  guint64 last_seq = 0;
  int saved_errno;
  int fd;

  if (g_mkdir_with_parents (dir, 0700) != 0)
    goto fail;
  fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    goto fail;
  if (fstat (fd, &st) != 0)
    goto fail_fd;
  if (!S_ISREG (st.st_mode))
    {
      close (fd);
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%s is not a regular file", path);
      return NULL;
    }
  if (st.st_size == SHIMWATCH_MARKS_SIZE &&
      pread (fd, content, sizeof content, 0) == (gssize) sizeof content &&
      !is_zero (content, HEADER_SIZE))
    {
      g_autoptr(GString) broken = g_string_new (NULL);

      fresh = !shimwatch_marks_decode (content, sizeof content, marks, broken, &local_error);
      if (broken->len > 0)
        g_warning ("marks of %s ignored (%s)", path, broken->str);
    }
  else if (st.st_size != 0)
    g_set_error (&local_error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%" G_GINT64_FORMAT " bytes",
                 (gint64) st.st_size);
  if (local_error != NULL)
    g_warning ("marks file %s is broken (%s): started again", path, local_error->message);
  if (fresh)
    {
      memset (marks, 0, sizeof marks);
      shimwatch_marks_encode (marks, content);
      if (ftruncate (fd, 0) != 0 || pwrite (fd, content, sizeof content, 0) != sizeof content)
        goto fail_fd;
    }
  for (guint i = 0; i < SHIMWATCH_MARKS_N_SLOTS; i++)
    last_seq = MAX (last_seq, marks[i].seq);
  file = g_new0 (ShimwatchMarksFile, 1);
  g_atomic_ref_count_init (&file->ref_count);
  file->path = g_strdup (path);
  file->fd = fd;
  file->last_seq = last_seq;
  if (fresh && queue != NULL)
    {
      /* the queue syncs (and closes) a copy of the descriptor with the turn's batch; the
       * service keeps its own. On a tmpfs there is nothing to sync */
      int copy = shimwatch_commit_queue_is_volatile (queue) ? -1
                 : fcntl (fd, F_DUPFD_CLOEXEC, 0);

      if (copy < 0 && !shimwatch_commit_queue_is_volatile (queue) && fdatasync (fd) != 0)
        g_warning ("fdatasync %s: %s", path, g_strerror (errno));
      shimwatch_commit_ticket_unref (shimwatch_commit_queue_add (queue, copy, dir, NULL, NULL));
    }
  else if (fresh && fdatasync (fd) != 0)
    g_warning ("fdatasync %s: %s", path, g_strerror (errno));
  return file;

fail_fd:
  saved_errno = errno;
  close (fd);
  errno = saved_errno;
fail:
  saved_errno = errno;
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "cannot open %s: %s",
               path, g_strerror (saved_errno));
  return NULL;
}

ShimwatchMarksFile *
shimwatch_marks_file_ref (ShimwatchMarksFile *file)
{
  g_atomic_ref_count_inc (&file->ref_count);
  return file;
}

void
shimwatch_marks_file_unref (ShimwatchMarksFile *file)
{
  if (file == NULL || !g_atomic_ref_count_dec (&file->ref_count))
    return;
  close (file->fd);
  g_free (file->path);
  g_free (file);
}

guint64
shimwatch_marks_file_next_seq (ShimwatchMarksFile *file)
{
  /* the time too: a file started again still orders after the record's marks_seq */
  file->last_seq = MAX (file->last_seq + 1, (guint64) g_get_real_time ());
  return file->last_seq;
}

guint64
shimwatch_marks_file_last_seq (ShimwatchMarksFile *file)
{
  return file->last_seq;
}

static gboolean
write_at (ShimwatchMarksFile *file,
          const guint8       *bytes,
          gsize               size,
          goffset             offset,
          GError            **error)
{
  gssize written = pwrite (file->fd, bytes, size, offset);

  if (written == (gssize) size)
    return TRUE;
  /* a short write of a few bytes inside the file's one page: only an error */
  g_set_error (error, G_IO_ERROR, g_io_error_from_errno (written < 0 ? errno : EIO),
               "cannot write %s: %s", file->path,
               g_strerror (written < 0 ? errno : EIO));
  return FALSE;
}

gboolean
shimwatch_marks_file_write (ShimwatchMarksFile  *file,
                            guint                slot,
                            const ShimwatchMark *mark,
                            GError             **error)
{
  guint8 bytes[SLOT_SIZE];

  g_return_val_if_fail (slot < SHIMWATCH_MARKS_N_SLOTS, FALSE);

  encode_slot (mark, bytes);
  /* one copy into the page cache: a SIGKILL leaves the slot as it was, or all of it */
  return write_at (file, bytes, sizeof bytes, HEADER_SIZE + slot * SLOT_SIZE, error);
}

gboolean
shimwatch_marks_file_set_state (ShimwatchMarksFile *file,
                                guint               slot,
                                ShimwatchMarkState  state,
                                GError            **error)
{
  guint8 byte = state;

  g_return_val_if_fail (slot < SHIMWATCH_MARKS_N_SLOTS, FALSE);

  /* the state byte is outside the checksum: the rest of the slot stays as it is */
  return write_at (file, &byte, 1, HEADER_SIZE + slot * SLOT_SIZE + S_STATE, error);
}

gboolean
shimwatch_marks_file_sync (ShimwatchMarksFile  *file,
                           GError             **error)
{
  if (fdatasync (file->fd) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved_errno), "fdatasync %s: %s",
                   file->path, g_strerror (saved_errno));
      return FALSE;
    }
  return TRUE;
}

const char *
shimwatch_marks_file_get_path (ShimwatchMarksFile *file)
{
  return file->path;
}
