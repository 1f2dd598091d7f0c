/* SPDX-License-Identifier: Apache-2.0
 *
 * How shimwatchctl prints: tables that fit the terminal, colour only on a terminal,
 * human times and sizes, and JSON.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <glib/gi18n.h>

#include "shimwatchctl.h"

#define SGR_RESET "\033[0m"

void
ctl_output_init (Ctl *ctl)
{
  const char *term = g_getenv ("TERM");
  const char *columns = g_getenv ("COLUMNS");
  struct winsize size = { 0 };

  ctl->color = isatty (STDOUT_FILENO) && g_getenv ("NO_COLOR") == NULL &&
               term != NULL && !g_str_equal (term, "dumb");
  ctl->width = 0;
  if (columns != NULL && g_ascii_strtoull (columns, NULL, 10) > 0)
    ctl->width = (guint) MIN (g_ascii_strtoull (columns, NULL, 10), 10000);
  else if (isatty (STDOUT_FILENO) && ioctl (STDOUT_FILENO, TIOCGWINSZ, &size) == 0 &&
           size.ws_col > 0)
    ctl->width = size.ws_col;
}

const char *
ctl_color (Ctl        *ctl,
           const char *sgr)
{
  if (!ctl->color)
    return "";
  return sgr != NULL ? sgr : SGR_RESET;
}

const char *
ctl_status_color (Ctl        *ctl,
                  const char *status)
{
  if (!ctl->color || status == NULL)
    return NULL;
  if (g_str_equal (status, "running"))
    return "\033[32m";                       /* green */
  if (g_str_equal (status, "paused") || g_str_equal (status, "created") ||
      g_str_equal (status, "cleaning"))
    return "\033[33m";                       /* yellow */
  if (g_str_equal (status, "disconnected"))
    return "\033[1;31m";                     /* bold red */
  return NULL;
}

/* control characters made visible, as systemctl and journalctl show them: \n \r \t \e
 * \a \b \f \v by name, other C0 and DEL as \xNN, C1 controls and the bidirectional
 * overrides (which reorder what follows them on screen) as \uNNNN, bytes that are not
 * UTF-8 as \xNN. @output: task output, where a tab stays a tab and a backslash stays one
 * (it is not a string the service gives, and shown for reading, not for copying back). */
static void
append_escaped (GString    *out,
                const char *text,
                gssize      length,
                gboolean    output)
{
  const char *p = text;
  const char *end = length < 0 ? text + strlen (text) : text + length;

  while (p < end)
    {
      gunichar c = g_utf8_get_char_validated (p, end - p);
      const char *named = NULL;
      guchar byte = (guchar) p[0];

      if (c >= 0x110000)                /* (gunichar) -1 or -2: not UTF-8 */
        {
          g_string_append_printf (out, "\\x%02x", byte);
          p++;
          continue;
        }
      switch (c)
        {
        case '\n': named = "\\n"; break;
        case '\r': named = "\\r"; break;
        case '\t': named = output ? "\t" : "\\t"; break;
        case '\033': named = "\\e"; break;
        case '\a': named = "\\a"; break;
        case '\b': named = "\\b"; break;
        case '\f': named = "\\f"; break;
        case '\v': named = "\\v"; break;
        case '\\': named = output ? "\\" : "\\\\"; break;
        default: break;
        }
      if (named != NULL)
        g_string_append (out, named);
      else if (c < 0x20 || c == 0x7f)
        g_string_append_printf (out, "\\x%02x", c);
      else if ((c >= 0x80 && c < 0xa0) || (c >= 0x202a && c <= 0x202e) ||
               (c >= 0x2066 && c <= 0x2069))
        g_string_append_printf (out, "\\u%04x", c);
      else
        g_string_append_len (out, p, g_utf8_next_char (p) - p);
      p = g_utf8_next_char (p);
    }
}

char *
ctl_escape (const char *text)
{
  GString *out = g_string_sized_new (strlen (text));

  append_escaped (out, text, -1, FALSE);
  return g_string_free (out, FALSE);
}

char *
ctl_escape_output (const char *text,
                   gsize       length)
{
  GString *out = g_string_sized_new (length);

  append_escaped (out, text, (gssize) length, TRUE);
  return g_string_free (out, FALSE);
}

char *
ctl_format_time (guint64 usec)
{
  g_autoptr(GDateTime) time = NULL;

  if (usec == 0)
    return g_strdup (_("never"));
  time = g_date_time_new_from_unix_local ((gint64) (usec / G_USEC_PER_SEC));
  if (time == NULL)
    return g_strdup ("?");
  return g_date_time_format (time, "%a %Y-%m-%d %H:%M:%S %Z");
}

char *
ctl_format_age (guint64 usec,
                gint64  now_usec)
{
  gint64 seconds;

  if (usec == 0)
    return g_strdup ("-");
  seconds = MAX (0, (now_usec - (gint64) usec) / G_USEC_PER_SEC);
  if (seconds < 120)
    return g_strdup_printf ("%" G_GINT64_FORMAT "s", seconds);
  if (seconds < 2 * 3600)
    return g_strdup_printf ("%" G_GINT64_FORMAT "m", seconds / 60);
  if (seconds < 2 * 86400)
    return g_strdup_printf ("%" G_GINT64_FORMAT "h", seconds / 3600);
  return g_strdup_printf ("%" G_GINT64_FORMAT "d", seconds / 86400);
}

char *
ctl_format_exit_status (guint32 status)
{
  /* containerd's convention: 128 + n for a process killed by signal n */
  if (status > 128 && status < 128 + 65)
    {
      const char *name = g_strsignal (status - 128);

      return g_strdup_printf (_("%u (signal %u, %s)"), status, status - 128, name);
    }
  return g_strdup_printf ("%u", status);
}

char *
ctl_format_bytes (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

/* "TaskPid" → "task_pid", "CgroupPath" → "cgroup_path" */
char *
ctl_snake_case (const char *camel)
{
  GString *out = g_string_new (NULL);

  for (const char *p = camel; *p != '\0'; p++)
    {
      if (g_ascii_isupper (*p) && p != camel)
        g_string_append_c (out, '_');
      g_string_append_c (out, g_ascii_tolower (*p));
    }
  return g_string_free (out, FALSE);
}

JsonNode *
ctl_json_from_variant (GVariant *value)
{
  return json_gvariant_serialize (value);
}

void
ctl_print_json (JsonNode *node,
                gboolean  pretty)
{
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autofree char *text = NULL;

  json_generator_set_pretty (generator, pretty);
  json_generator_set_indent (generator, 2);
  json_generator_set_root (generator, node);
  text = json_generator_to_data (generator, NULL);
  g_print ("%s\n", text);
  fflush (stdout);
}

void
ctl_print_field (const char *label,
                 const char *value)
{
  /* labels are right-aligned by display width, as systemctl status does */
  int pad = 16 - (int) ctl_display_width (label);
  g_autofree char *shown = ctl_escape (value);

  g_print ("%*s%s: %s\n", MAX (pad, 0), "", label, shown);
}

/* --- tables -------------------------------------------------------------------------- */

typedef struct {
  char    *title;
  int      priority;        /* lower numbers go first when the terminal is narrow */
  gboolean can_shrink;
  gboolean right_align;
  guint    width;
  gboolean shown;
} Column;

struct _CtlTable {
  Ctl       *ctl;
  GArray    *columns;       /* Column */
  GPtrArray *rows;          /* GStrv */
  GPtrArray *colors;        /* per row: GStrv of SGR or NULL */
};

CtlTable *
ctl_table_new (Ctl *ctl)
{
  CtlTable *table = g_new0 (CtlTable, 1);

  table->ctl = ctl;
  table->columns = g_array_new (FALSE, TRUE, sizeof (Column));
  table->rows = g_ptr_array_new_with_free_func ((GDestroyNotify) g_strfreev);
  table->colors = g_ptr_array_new_with_free_func ((GDestroyNotify) g_strfreev);
  return table;
}

void
ctl_table_free (CtlTable *table)
{
  for (guint i = 0; i < table->columns->len; i++)
    g_free (g_array_index (table->columns, Column, i).title);
  g_array_unref (table->columns);
  g_ptr_array_unref (table->rows);
  g_ptr_array_unref (table->colors);
  g_free (table);
}

void
ctl_table_add_column (CtlTable   *table,
                      const char *title,
                      int         priority,
                      gboolean    can_shrink,
                      gboolean    right_align)
{
  Column column = { g_strdup (title), priority, can_shrink, right_align, 0, TRUE };

  g_array_append_val (table->columns, column);
}

void
ctl_table_add_row (CtlTable *table,
                   ...)
{
  GStrv row = g_new0 (char *, table->columns->len + 1);
  va_list args;

  va_start (args, table);
  for (guint i = 0; i < table->columns->len; i++)
    {
      const char *cell = va_arg (args, const char *);

      /* the cells are text from the service: never a control character to the terminal */
      row[i] = ctl_escape (cell != NULL ? cell : "");
    }
  va_end (args);
  g_ptr_array_add (table->rows, row);
  g_ptr_array_add (table->colors, NULL);
}

void
ctl_table_set_cell_color (CtlTable   *table,
                          guint       column,
                          const char *sgr)
{
  GStrv *colors;

  g_return_if_fail (table->rows->len > 0 && column < table->columns->len);
  if (sgr == NULL)
    return;
  colors = (GStrv *) &g_ptr_array_index (table->colors, table->colors->len - 1);
  if (*colors == NULL)
    *colors = g_new0 (char *, table->columns->len + 1);
  /* g_strfreev stops at the first NULL: keep every slot filled */
  for (guint i = 0; i < table->columns->len; i++)
    if ((*colors)[i] == NULL)
      (*colors)[i] = g_strdup ("");
  g_free ((*colors)[column]);
  (*colors)[column] = g_strdup (sgr);
}

/* the columns @c takes on a terminal: 2 for East Asian wide and full-width characters,
 * 0 for combining marks and other zero-width characters, 1 for the rest */
static guint
char_width (gunichar c)
{
  if (g_unichar_iszerowidth (c))
    return 0;
  return g_unichar_iswide (c) ? 2 : 1;
}

guint
ctl_display_width (const char *text)
{
  guint width = 0;

  for (const char *p = text; *p != '\0'; p = g_utf8_next_char (p))
    width += char_width (g_utf8_get_char (p));
  return width;
}

static guint
total_width (CtlTable *table)
{
  guint total = 0;
  gboolean first = TRUE;

  for (guint i = 0; i < table->columns->len; i++)
    {
      Column *column = &g_array_index (table->columns, Column, i);

      if (!column->shown)
        continue;
      total += column->width + (first ? 0 : 2);
      first = FALSE;
    }
  return total;
}

/* narrow the table to the terminal: drop the least important columns first, then
 * shorten the columns that can be shortened, with an ellipsis */
static void
fit (CtlTable *table)
{
  guint width = table->ctl->width;

  for (guint i = 0; i < table->columns->len; i++)
    {
      Column *column = &g_array_index (table->columns, Column, i);

      column->width = ctl_display_width (column->title);
      for (guint r = 0; r < table->rows->len; r++)
        column->width = MAX (column->width,
                             ctl_display_width (((GStrv) g_ptr_array_index (table->rows, r))[i]));
    }
  if (width == 0)
    return;
  while (total_width (table) > width)
    {
      Column *drop = NULL;
      Column *widest = NULL;
      guint shown = 0;
      int excess = (int) (total_width (table) - width);

      for (guint i = 0; i < table->columns->len; i++)
        {
          Column *column = &g_array_index (table->columns, Column, i);

          if (!column->shown)
            continue;
          shown++;
          if (column->can_shrink && column->width > 8 &&
              (widest == NULL || column->width > widest->width))
            widest = column;
          if (drop == NULL || column->priority > drop->priority)
            drop = column;
        }
      /* shortening one column is enough: keep every column */
      if (widest != NULL && (int) widest->width - excess >= 8)
        {
          widest->width -= (guint) excess;
          return;
        }
      if (shown <= 2 || drop == NULL || drop->priority == 0)
        {
          /* only essential columns are left: shorten what can be, down to 8 each */
          for (guint i = 0; i < table->columns->len && excess > 0; i++)
            {
              Column *column = &g_array_index (table->columns, Column, i);
              int spare = (int) column->width - 8;

              if (!column->shown || !column->can_shrink || spare <= 0)
                continue;
              column->width -= (guint) MIN (spare, excess);
              excess -= MIN (spare, excess);
            }
          return;
        }
      drop->shown = FALSE;
    }
}

static char *
cell_text (const char *text,
           guint       width)
{
  g_autofree char *cut = NULL;
  const char *p = text;
  guint used = 0;

  if (ctl_display_width (text) <= width)
    return g_strdup (text);
  /* as many whole characters as fit beside the ellipsis, with their combining marks */
  while (*p != '\0')
    {
      guint next = char_width (g_utf8_get_char (p));

      if (used + next > width - 1)
        break;
      used += next;
      p = g_utf8_next_char (p);
    }
  cut = g_strndup (text, p - text);
  return g_strconcat (cut, "…", NULL);
}

static void
print_cell (CtlTable   *table,
            Column     *column,
            const char *text,
            const char *sgr,
            gboolean    last)
{
  g_autofree char *shown = cell_text (text, column->width);
  guint pad = column->width - ctl_display_width (shown);
  gboolean colored = sgr != NULL && *sgr != '\0' && table->ctl->color;

  if (column->right_align)
    g_print ("%*s", (int) pad, "");
  g_print ("%s%s%s", colored ? sgr : "", shown, colored ? SGR_RESET : "");
  if (!column->right_align && !last)
    g_print ("%*s", (int) pad, "");
}

void
ctl_table_print (CtlTable *table)
{
  guint last = 0;

  fit (table);
  for (guint i = 0; i < table->columns->len; i++)
    if (g_array_index (table->columns, Column, i).shown)
      last = i;

  for (int r = -1; r < (int) table->rows->len; r++)
    {
      GStrv row = r < 0 ? NULL : g_ptr_array_index (table->rows, r);
      GStrv colors = r < 0 ? NULL : g_ptr_array_index (table->colors, r);
      gboolean first = TRUE;

      for (guint i = 0; i < table->columns->len; i++)
        {
          Column *column = &g_array_index (table->columns, Column, i);

          if (!column->shown)
            continue;
          if (!first)
            g_print ("  ");
          first = FALSE;
          if (row == NULL)
            print_cell (table, column, column->title, table->ctl->color ? "\033[1m" : NULL,
                        i == last);
          else
            print_cell (table, column, row[i], colors != NULL ? colors[i] : NULL, i == last);
        }
      g_print ("\n");
    }
}
