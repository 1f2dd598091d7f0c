/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl's printing (client/shimwatchctl-output.c): control characters escaped,
 * task output escaped but for tabs, and tables aligned and shortened by display width,
 * with wide (CJK) characters and combining marks.
 */
#include "config.h"

#include <string.h>
#include <glib.h>

#include "shimwatchctl.h"

static GString *printed;

static void
capture (const char *text)
{
  g_string_append (printed, text);
}

static void
test_escape (void)
{
  static const struct {
    const char *in;
    const char *out;
  } cases[] = {
    { "plain text, ünïcödé, 中文", "plain text, ünïcödé, 中文" },
    { "\033]0;owned\007", "\\e]0;owned\\a" },
    { "\033[2J\033[H", "\\e[2J\\e[H" },
    { "a\nb\rc\td", "a\\nb\\rc\\td" },
    { "\b\f\v\x01\x7f", "\\b\\f\\v\\x01\\x7f" },
    { "back\\slash", "back\\\\slash" },
    { "\xc2\x9b" "31m", "\\u009b31m" },                       /* C1 CSI */
    { "abc\xe2\x80\xae" "cba", "abc\\u202ecba" },            /* right-to-left override */
    { "bad \xff\xfe utf-8", "bad \\xff\\xfe utf-8" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree char *escaped = ctl_escape (cases[i].in);

      g_assert_cmpstr (escaped, ==, cases[i].out);
    }
}

static void
test_escape_output (void)
{
  /* a task's output line: a tab and a backslash stay, the rest as ctl_escape; a NUL is
   * shown, not an end */
  const char line[] = "col1\tcol2 \\n \033[31mred\033[0m\r\0end";
  g_autofree char *escaped = ctl_escape_output (line, sizeof line - 1);

  g_assert_cmpstr (escaped, ==, "col1\tcol2 \\n \\e[31mred\\e[0m\\r\\x00end");
}

static void
test_display_width (void)
{
  g_assert_cmpuint (ctl_display_width ("abc"), ==, 3);
  g_assert_cmpuint (ctl_display_width ("中文"), ==, 4);           /* wide */
  g_assert_cmpuint (ctl_display_width ("e\xcc\x81"), ==, 1);    /* e + combining acute */
  g_assert_cmpuint (ctl_display_width ("ｗｉｄｅ"), ==, 8);       /* full-width */
}

static GStrv
print_table (guint width)
{
  Ctl ctl = { 0 };
  g_autoptr(CtlTable) table = NULL;
  GPrintFunc old;
  g_autofree char *text = NULL;

  ctl.width = width;
  table = ctl_table_new (&ctl);
  ctl_table_add_column (table, "NAME", 0, TRUE, FALSE);
  ctl_table_add_column (table, "VALUE", 0, FALSE, TRUE);
  ctl_table_add_column (table, "NOTE", 0, FALSE, FALSE);
  ctl_table_add_row (table, "ascii", "1", "x", NULL);
  ctl_table_add_row (table, "中文名字中文名字", "22", "y", NULL);
  ctl_table_add_row (table, "cafe\xcc\x81", "333", "z", NULL);
  ctl_table_add_row (table, "tab\there", "4", "\033[31m", NULL);
  printed = g_string_new (NULL);
  old = g_set_print_handler (capture);
  ctl_table_print (table);
  g_set_print_handler (old);
  text = g_string_free (g_steal_pointer (&printed), FALSE);
  return g_strsplit (text, "\n", -1);
}

/* what a terminal gives @text, counted here on its own: the printer's count is on test */
static guint
terminal_width (const char *text)
{
  guint width = 0;

  for (const char *p = text; *p != '\0'; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);

      width += g_unichar_iszerowidth (c) ? 0 : g_unichar_iswide (c) ? 2 : 1;
    }
  return width;
}

/* the display column where @needle starts in @line */
static guint
column_of (const char *line,
           const char *needle)
{
  const char *at = strstr (line, needle);
  g_autofree char *before = NULL;

  g_assert_nonnull (at);
  before = g_strndup (line, at - line);
  return terminal_width (before);
}

static void
test_table_alignment (void)
{
  g_auto(GStrv) lines = print_table (0);

  g_assert_cmpuint (g_strv_length (lines), ==, 6);          /* 5 lines and "" */
  /* every line as wide, by display width, and the columns start where the header's do */
  for (guint i = 1; i < 5; i++)
    {
      g_assert_cmpuint (column_of (lines[i], i == 1 ? "1" : i == 2 ? "22" : i == 3 ? "333"
                                                                                   : "4") +
                        (i == 1 ? 1 : i == 2 ? 2 : i == 3 ? 3 : 1), ==,
                        column_of (lines[0], "VALUE") + 5);  /* right-aligned */
      g_assert_cmpuint (column_of (lines[i], i == 1 ? "x" : i == 2 ? "y" : i == 3 ? "z"
                                                                               : "\\e[31m"),
                        ==, column_of (lines[0], "NOTE"));
    }
  /* the cells are escaped: no control character reaches the terminal */
  g_assert_nonnull (strstr (lines[4], "tab\\there"));
  g_assert_null (strchr (lines[4], '\033'));
  g_assert_null (strchr (lines[4], '\t'));
}

static void
test_table_shortened (void)
{
  /* 6 columns narrower than the table: NAME (16 wide) shrinks to 10, by display width;
   * its wide characters are cut whole, before the ellipsis */
  g_auto(GStrv) lines = print_table (25);

  for (guint i = 0; lines[i] != NULL && lines[i][0] != '\0'; i++)
    g_assert_cmpuint (terminal_width (lines[i]), <=, 25);
  g_assert_cmpuint (terminal_width (lines[4]), ==, 25);      /* the widest NOTE */
  g_assert_true (g_str_has_prefix (lines[2], "中文名字… "));
  g_assert_cmpuint (column_of (lines[1], "1"), ==, column_of (lines[2], "22") + 1);
  g_assert_cmpuint (column_of (lines[2], "y"), ==, column_of (lines[0], "NOTE"));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ctl-output/escape", test_escape);
  g_test_add_func ("/ctl-output/escape-output", test_escape_output);
  g_test_add_func ("/ctl-output/display-width", test_display_width);
  g_test_add_func ("/ctl-output/table-alignment", test_table_alignment);
  g_test_add_func ("/ctl-output/table-shortened", test_table_shortened);
  return g_test_run ();
}
