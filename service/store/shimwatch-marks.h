/* SPDX-License-Identifier: Apache-2.0
 *
 * Signal marks: <records>/<namespace>/<id>.marks, one small binary file per task beside
 * its JSON record, open for as long as the service knows the task. It holds one slot
 * per lifecycle signal (in the order of the {signal → record flag} table of
 * shimwatch-shim-state.c), each saying whether the signal is pending (about to go out)
 * or sent, and what of the record changed with it (status, exit, exit reason), so that
 * marking a signal costs one pwrite() of its slot instead of a rewrite of the
 * task's record. The JSON record is written when the task's description changes; it
 * names the last mark it already includes ("marks_seq"), and a restart lays every later
 * mark over it (shimwatch_marks_apply()).
 *
 * Layout (little-endian, 304 bytes):
 *   0   "SWMARKS1"            magic
 *   8   u32 version (1)
 *   12  u32 slot size (96)
 *   16  3 slots of 96 bytes:
 *       0  u8  state: 0 empty, 1 pending (not sent), 2 sent
 *       1  u8  flags: 1 deleted, 2 exit known
 *       2  u16 0
 *       4  u32 FNV-1a of bytes 1–3 and 8–95 of the slot
 *       8  u64 seq: the order of marks and records, > 0
 *       16 u32 exit pid, 20 u32 exit status, 24 i64 exited at (µs)
 *       32 char[16] status, 48 char[48] exit reason: UTF-8, NUL-padded, "" = the record's
 * A slot is written with one pwrite() (the file is in one page: a SIGKILL cannot cut it
 * short), its state byte later set alone (it is outside the checksum). A slot that is not empty and does not check is broken:
 * it is ignored with a warning (the record alone decides for that signal).
 */
#pragma once

#include <glib.h>

#include "shimwatch-commit-queue.h"
#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_MARKS_N_SLOTS   3
#define SHIMWATCH_MARKS_SIZE      (16 + SHIMWATCH_MARKS_N_SLOTS * 96)

typedef enum {
  SHIMWATCH_MARK_EMPTY   = 0,
  SHIMWATCH_MARK_PENDING = 1,
  SHIMWATCH_MARK_SENT    = 2,
} ShimwatchMarkState;

typedef struct {
  ShimwatchMarkState state;
  guint64            seq;
  gboolean           deleted;
  gboolean           exit_known;
  ShimwatchExit      exit;
  char               status[16];       /* "" : as the record says */
  char               exit_reason[48];
} ShimwatchMark;

char     *shimwatch_marks_path   (const char          *records_dir,
                                  const char          *namespace_,
                                  const char          *id);

/* the slots of a marks file's content; FALSE (@error) when it is not one. A slot that is
 * broken reads as empty and is named in @broken (may be NULL) */
gboolean  shimwatch_marks_decode (const guint8        *data,
                                  gsize                size,
                                  ShimwatchMark        marks[SHIMWATCH_MARKS_N_SLOTS],
                                  GString             *broken,
                                  GError             **error);
/* the content of a marks file with these slots */
void      shimwatch_marks_encode (const ShimwatchMark  marks[SHIMWATCH_MARKS_N_SLOTS],
                                  guint8               data[SHIMWATCH_MARKS_SIZE]);

/* what of @record changes with a signal, as a mark of @state; FALSE when a string does
 * not fit (the mark then says "" for it, and the record itself must be written) */
gboolean  shimwatch_mark_from_record (ShimwatchMark         *mark,
                                      const ShimwatchRecord *record,
                                      ShimwatchMarkState     state,
                                      guint64                seq);
/* lays the marks newer than @record (seq > marks_seq) over it: a sent mark sets its
 * signal's flag, a pending one names its signal in pending_signal (not sent), and the
 * newest gives status and exit */
void      shimwatch_marks_apply  (ShimwatchRecord      *record,
                                  const ShimwatchMark   marks[SHIMWATCH_MARKS_N_SLOTS]);

/* A task's marks file, kept open (not mapped: see shimwatch-marks.c). Main thread, but
 * for the reference count, set_state() and sync(). */
typedef struct _ShimwatchMarksFile ShimwatchMarksFile;

/* opens the file (its valid marks kept) or creates it; a new or reset file is handed to
 * @queue (NULL: synced now) */
ShimwatchMarksFile *shimwatch_marks_file_open  (const char           *path,
                                                ShimwatchCommitQueue *queue,
                                                GError              **error);
ShimwatchMarksFile *shimwatch_marks_file_ref   (ShimwatchMarksFile   *file);
void                shimwatch_marks_file_unref (ShimwatchMarksFile   *file);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchMarksFile, shimwatch_marks_file_unref)
/* a seq greater than every mark of the file so far, and at least the time (µs) */
guint64             shimwatch_marks_file_next_seq  (ShimwatchMarksFile *file);
/* the greatest seq handed out or found */
guint64             shimwatch_marks_file_last_seq  (ShimwatchMarksFile *file);
/* writes @mark into @slot: all of it or, after a SIGKILL, nothing */
gboolean            shimwatch_marks_file_write     (ShimwatchMarksFile   *file,
                                                    guint                 slot,
                                                    const ShimwatchMark  *mark,
                                                    GError              **error);
/* the state byte of @slot alone (a pending mark turned sent): any thread */
gboolean            shimwatch_marks_file_set_state (ShimwatchMarksFile   *file,
                                                    guint                 slot,
                                                    ShimwatchMarkState    state,
                                                    GError              **error);
/* fdatasync: any thread */
gboolean            shimwatch_marks_file_sync      (ShimwatchMarksFile  *file,
                                                    GError             **error);
const char         *shimwatch_marks_file_get_path  (ShimwatchMarksFile  *file);

G_END_DECLS
