/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl logs (a task's output through OpenLog) and history (GetHistory).
 */
#include "config.h"

#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <glib/gi18n.h>
#include <gio/gunixfdlist.h>
#include <gio/gunixinputstream.h>

#include "shimwatchctl.h"

/* --- logs ---------------------------------------------------------------------------- */

/* "<RFC 3339 time> <stream> <text>" */
static gboolean
split_log_line (char        *line,
                const char **time,
                const char **stream,
                const char **text)
{
  char *space = strchr (line, ' ');
  char *second;

  if (space == NULL)
    return FALSE;
  *space = '\0';
  second = strchr (space + 1, ' ');
  *time = line;
  *stream = space + 1;
  if (second != NULL)
    {
      *second = '\0';
      *text = second + 1;
    }
  else
    *text = space + 1 + strlen (space + 1);       /* "", inside @line */
  return TRUE;
}

/* Lines from the log fd, in big reads and without a copy each: a follower has to keep up
 * with a task that writes as fast as it can (the service drops one that does not) */
typedef struct {
  int   fd;
  char *buf;
  gsize size;
  gsize start;       /* of the next line */
  gsize end;         /* of what was read */
} LineReader;

static void
line_reader_clear (LineReader *reader)
{
  g_clear_pointer (&reader->buf, g_free);
  if (reader->fd >= 0)
    close (reader->fd);
  reader->fd = -1;
}

/* the next line, NUL-terminated in place (valid until the next call), or NULL at EOF
 * or with @error set */
static char *
line_reader_next (LineReader *reader,
                  gsize      *length,
                  GError    **error)
{
  for (;;)
    {
      char *newline = reader->end > reader->start
                      ? memchr (reader->buf + reader->start, '\n', reader->end - reader->start)
                      : NULL;
      char *line;
      gssize n;

      if (newline != NULL)
        {
          line = reader->buf + reader->start;
          *newline = '\0';
          *length = (gsize) (newline - line);
          reader->start = (gsize) (newline - reader->buf) + 1;
          return line;
        }
      if (reader->start > 0)
        {
          memmove (reader->buf, reader->buf + reader->start, reader->end - reader->start);
          reader->end -= reader->start;
          reader->start = 0;
        }
      if (reader->end + 1 >= reader->size)
        {
          reader->size *= 2;
          reader->buf = g_realloc (reader->buf, reader->size);
        }
      n = read (reader->fd, reader->buf + reader->end, reader->size - reader->end - 1);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int saved_errno = errno;

          g_set_error_literal (error, G_IO_ERROR, g_io_error_from_errno (saved_errno),
                               g_strerror (saved_errno));
          return NULL;
        }
      if (n == 0)
        {
          if (reader->end == 0)
            return NULL;
          /* a last line without its newline */
          reader->buf[reader->end] = '\0';
          *length = reader->end;
          reader->start = reader->end = 0;
          return reader->buf;
        }
      reader->end += (gsize) n;
    }
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (LineReader, line_reader_clear)

/* nothing read is left to print: the time to flush */
static gboolean
line_reader_is_empty (const LineReader *reader)
{
  return reader->start == reader->end;
}

static void
add_line_json (JsonBuilder *builder,
               const char  *time,
               const char  *stream,
               const char  *text)
{
  json_builder_begin_object (builder);
  json_builder_set_member_name (builder, "time");
  json_builder_add_string_value (builder, time);
  json_builder_set_member_name (builder, "stream");
  json_builder_add_string_value (builder, stream);
  json_builder_set_member_name (builder, "text");
  json_builder_add_string_value (builder, text);
  json_builder_end_object (builder);
}

int
ctl_cmd_logs (Ctl              *ctl,
              const CtlCommand *command,
              int               argc,
              char            **argv)
{
  gboolean follow = FALSE;
  gboolean timestamps = FALSE;
  int tail = -1;
  const GOptionEntry entries[] = {
    { "follow", 'f', 0, G_OPTION_ARG_NONE, &follow,
      N_("Keep printing new output until the task is deleted"), NULL },
    { "tail", 'N', 0, G_OPTION_ARG_INT, &tail,
      N_("Print only the last N lines"), N_("N") },
    { "timestamps", 't', 0, G_OPTION_ARG_NONE, &timestamps,
      N_("Prefix each line with its time"), NULL },
    { NULL }
  };
  g_autofree char *namespace_ = NULL;
  g_autofree char *id = NULL;
  g_autofree char *name = NULL;
  g_autofree char *path = NULL;
  g_auto(GVariantBuilder) options = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE_VARDICT);
  g_autoptr(GUnixFDList) fds = NULL;
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(LineReader) input = { .fd = -1 };
  g_autoptr(JsonBuilder) document = NULL;
  gint32 handle;
  int fd;
  gboolean fell_behind = FALSE;
  int exit_code = CTL_EXIT_OK;
  gboolean escape_stdout = isatty (STDOUT_FILENO);
  gboolean escape_stderr = isatty (STDERR_FILENO);

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 1, 1, &exit_code))
    return exit_code;
  if (!ctl_parse_task (ctl, command, argv[1], &namespace_, &id, &exit_code))
    return exit_code;
  if (tail < -1)
    return ctl_usage_error (command, _("--tail must not be negative"));
  name = g_strdup_printf ("%s/%s", namespace_, id);
  if (!ctl_connect (ctl, &exit_code))
    return exit_code;
  path = ctl_get_shim_path (ctl, namespace_, id, &exit_code);
  if (path == NULL)
    return exit_code;

  if (tail >= 0)
    g_variant_builder_add (&options, "{sv}", "tail", g_variant_new_uint32 ((guint32) tail));
  if (follow)
    g_variant_builder_add (&options, "{sv}", "follow", g_variant_new_boolean (TRUE));
  /* reading output may need authorization (org.shimwatch.read-logs) */
  reply = ctl_call (ctl, path, CTL_SHIM_IFACE, "OpenLog", g_variant_new ("(a{sv})", &options),
                    "(h)", TRUE, &fds, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "OpenLog", _("cannot read the output of %s"), name);
  g_variant_get (reply, "(h)", &handle);
  fd = fds != NULL ? g_unix_fd_list_get (fds, handle, &error) : -1;
  if (fd < 0)
    {
      g_printerr (_("%s: the service sent no log for %s\n"), g_get_prgname (), name);
      return CTL_EXIT_FAILURE;
    }
  input.fd = fd;
  input.size = 256 * 1024;
  input.buf = g_malloc (input.size);

  if (ctl->json && !follow)
    {
      document = json_builder_new ();
      json_builder_begin_object (document);
      json_builder_set_member_name (document, "namespace");
      json_builder_add_string_value (document, namespace_);
      json_builder_set_member_name (document, "id");
      json_builder_add_string_value (document, id);
      json_builder_set_member_name (document, "lines");
      json_builder_begin_array (document);
    }
  for (;;)
    {
      char *line;
      const char *time, *stream, *text;
      gsize length;

      line = line_reader_next (&input, &length, &error);
      if (line == NULL)
        break;
      if (!split_log_line (line, &time, &stream, &text))
        continue;
      /* the service's last line to a reader that did not keep up (then EOF) */
      if (g_str_equal (stream, "shimwatch"))
        {
          fell_behind = fell_behind || g_str_equal (text, "fell-behind");
          continue;
        }
      if (document != NULL)
        add_line_json (document, time, stream, text);
      else if (ctl->json)
        {
          g_autoptr(JsonBuilder) builder = json_builder_new ();
          g_autoptr(JsonNode) root = NULL;

          add_line_json (builder, time, stream, text);
          root = json_builder_get_root (builder);
          ctl_print_json (root, FALSE);
        }
      else
        {
          /* the task's stderr goes to ours, as docker logs does */
          gboolean is_stderr = g_str_equal (stream, "stderr");
          FILE *out = is_stderr ? stderr : stdout;
          gsize text_length = length - (gsize) (text - line);
          g_autofree char *escaped = NULL;

          /* the least trusted text there is: on a terminal its control characters are
           * shown, not obeyed; through a pipe it goes as the task wrote it */
          if (is_stderr ? escape_stderr : escape_stdout)
            {
              escaped = ctl_escape_output (text, text_length);
              text = escaped;
              text_length = strlen (escaped);
            }
          if (follow && out == stderr)
            fflush (stdout);
          if (timestamps)
            fprintf (out, "%s ", time);
          fwrite (text, 1, text_length, out);
          putc ('\n', out);
          /* once nothing more is at hand: a write per line would not keep up */
          if (follow && line_reader_is_empty (&input))
            fflush (out);
        }
    }
  if (error != NULL)
    {
      g_printerr (_("%s: cannot read the output of %s: %s\n"), g_get_prgname (), name,
                  error->message);
      return CTL_EXIT_FAILURE;
    }
  if (fell_behind)
    {
      fflush (stdout);
      g_printerr (_("%s: stopped following %s: its output came faster than it was read, "
                    "and the service dropped this reader\n"), g_get_prgname (), name);
      return CTL_EXIT_FAILURE;
    }
  if (document != NULL)
    {
      g_autoptr(JsonNode) root = NULL;

      json_builder_end_array (document);
      json_builder_end_object (document);
      root = json_builder_get_root (document);
      ctl_print_json (root, TRUE);
    }
  return CTL_EXIT_OK;
}

/* --- history ------------------------------------------------------------------------- */

int
ctl_cmd_history (Ctl              *ctl,
                 const CtlCommand *command,
                 int               argc,
                 char            **argv)
{
  int limit = 0;
  const GOptionEntry entries[] = {
    { "lines", 'N', 0, G_OPTION_ARG_INT, &limit,
      N_("Show at most the last N events (default 100)"), N_("N") },
    { NULL }
  };
  g_autofree char *namespace_ = NULL;
  g_autofree char *id = NULL;
  g_auto(GVariantBuilder) options = G_VARIANT_BUILDER_INIT (G_VARIANT_TYPE_VARDICT);
  g_autoptr(GVariant) reply = NULL;
  g_autoptr(GVariant) events = NULL;
  g_autoptr(GError) error = NULL;
  int exit_code = CTL_EXIT_OK;

  if (!ctl_parse_command_line (ctl, command, entries, NULL, &argc, &argv, 0, 1, &exit_code))
    return exit_code;
  if (limit < 0)
    return ctl_usage_error (command, _("--lines must not be negative"));
  if (argc == 2 && !ctl_parse_task (ctl, command, argv[1], &namespace_, &id, &exit_code))
    return exit_code;
  if (argc < 2 && ctl->namespace_ != NULL)
    namespace_ = g_strdup (ctl->namespace_);
  if (!ctl_connect (ctl, &exit_code))
    return exit_code;
  if (limit > 0)
    g_variant_builder_add (&options, "{sv}", "limit", g_variant_new_uint32 ((guint32) limit));
  if (namespace_ != NULL)
    g_variant_builder_add (&options, "{sv}", "namespace", g_variant_new_string (namespace_));
  if (id != NULL)
    g_variant_builder_add (&options, "{sv}", "id", g_variant_new_string (id));
  reply = ctl_call (ctl, CTL_MANAGER_PATH, CTL_MANAGER_IFACE, "GetHistory",
                    g_variant_new ("(a{sv})", &options), "(aa{sv})", FALSE, NULL, &error);
  if (reply == NULL)
    return ctl_fail (ctl, error, "GetHistory", _("cannot read the history"));
  events = g_variant_get_child_value (reply, 0);

  if (ctl->json)
    {
      g_autoptr(JsonBuilder) builder = json_builder_new ();
      g_autoptr(JsonNode) root = NULL;

      json_builder_begin_object (builder);
      json_builder_set_member_name (builder, "events");
      json_builder_add_value (builder, ctl_json_from_variant (events));
      json_builder_end_object (builder);
      root = json_builder_get_root (builder);
      ctl_print_json (root, TRUE);
      return CTL_EXIT_OK;
    }
  if (g_variant_n_children (events) == 0)
    {
      g_print (_("No events.\n"));
      return CTL_EXIT_OK;
    }
  {
    g_autoptr(CtlTable) table = ctl_table_new (ctl);

    ctl_table_add_column (table, _("TIME"), 0, FALSE, FALSE);
    ctl_table_add_column (table, _("EVENT"), 0, FALSE, FALSE);
    ctl_table_add_column (table, _("TASK"), 0, TRUE, FALSE);
    ctl_table_add_column (table, _("PID"), 2, FALSE, TRUE);
    ctl_table_add_column (table, _("STATUS"), 1, FALSE, TRUE);
    ctl_table_add_column (table, _("REASON"), 3, TRUE, FALSE);
    for (gsize i = 0; i < g_variant_n_children (events); i++)
      {
        g_autoptr(GVariant) event = g_variant_get_child_value (events, i);
        guint64 time = 0;
        guint32 pid = 0, status = 0;
        const char *kind = "", *ns = "", *task_id = "", *reason = "";
        g_autofree char *when = NULL;
        g_autofree char *task = NULL;
        g_autofree char *pid_text = NULL;
        g_autofree char *status_text = NULL;
        gboolean has_status;

        g_variant_lookup (event, "time", "t", &time);
        g_variant_lookup (event, "event", "&s", &kind);
        g_variant_lookup (event, "namespace", "&s", &ns);
        g_variant_lookup (event, "id", "&s", &task_id);
        g_variant_lookup (event, "pid", "u", &pid);
        g_variant_lookup (event, "reason", "&s", &reason);
        has_status = g_variant_lookup (event, "exit_status", "u", &status);
        when = ctl_format_time (time);
        task = g_strdup_printf ("%s/%s", ns, task_id);
        pid_text = pid != 0 ? g_strdup_printf ("%u", pid) : g_strdup ("-");
        /* an exit status means something for the events that end a task */
        status_text = has_status && (g_str_equal (kind, "exit") || g_str_equal (kind, "delete") ||
                                     g_str_equal (kind, "reap"))
                      ? g_strdup_printf ("%u", status) : g_strdup ("-");
        ctl_table_add_row (table, when, kind, task, pid_text, status_text,
                           *reason != '\0' ? reason : "-", NULL);
      }
    ctl_table_print (table);
  }
  return CTL_EXIT_OK;
}
