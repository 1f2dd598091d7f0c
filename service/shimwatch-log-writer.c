/* SPDX-License-Identifier: Apache-2.0
 *
 * the service's log writer (see shimwatch-log-writer.h)
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shimwatch-log-writer.h"
#include "shimwatch-logging.h"
#include "shimwatch-write.h"

/* the levels GLib writes to stderr, and those it starts with a blank line */
#define STDERR_LEVELS (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING | \
                       G_LOG_LEVEL_MESSAGE)
#define ALERT_LEVELS  (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING)

static struct {
  gboolean       journal;     /* stderr is a stream of the journal */
  gboolean       tty_out;     /* stdout, stderr: GLib colours its lines there */
  gboolean       tty_err;
  GLogLevelFlags prefixed;    /* levels whose lines start "(prgname:pid): " */
  GLogLevelFlags fatal;       /* levels made fatal (G_DEBUG=fatal-criticals, ...) */
} writer = {
  /* GLib's default when G_MESSAGES_PREFIXED is unset */
  .prefixed = G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING | G_LOG_LEVEL_DEBUG,
  .fatal = G_LOG_FATAL_MASK,
};

/* the minute of the last tzset() (minutes since the epoch) */
static gint zone_minute = -1;

/* the pid in the "(prgname:pid): " prefix. glibc does not cache getpid(): without this,
 * a syscall for each such line (a dead shim's warning). A forked child asks again. */
static gint own_pid;

static void
forget_pid (void)
{
  own_pid = 0;
}

static gulong
get_own_pid (void)
{
  static gsize registered;
  gint pid;

  if (g_once_init_enter (&registered))
    {
      pthread_atfork (NULL, NULL, forget_pid);
      g_once_init_leave (&registered, 1);
    }
  pid = g_atomic_int_get (&own_pid);
  if (pid == 0)
    {
      pid = (gint) getpid ();
      g_atomic_int_set (&own_pid, pid);
    }
  return (gulong) pid;
}

void
shimwatch_log_writer_install (void)
{
  const char *prefixed = g_getenv ("G_MESSAGES_PREFIXED");

  writer.journal = g_log_writer_is_journald (fileno (stderr));
  writer.tty_out = g_log_writer_supports_color (fileno (stdout));
  writer.tty_err = g_log_writer_supports_color (fileno (stderr));
  if (prefixed != NULL)
    {
      /* as GLib reads it */
      static const GDebugKey keys[] = {
        { "error", G_LOG_LEVEL_ERROR },
        { "critical", G_LOG_LEVEL_CRITICAL },
        { "warning", G_LOG_LEVEL_WARNING },
        { "message", G_LOG_LEVEL_MESSAGE },
        { "info", G_LOG_LEVEL_INFO },
        { "debug", G_LOG_LEVEL_DEBUG },
      };

      writer.prefixed = g_parse_debug_string (prefixed, keys, G_N_ELEMENTS (keys));
    }
  /* there is no getter: set and put back */
  writer.fatal = g_log_set_always_fatal (G_LOG_FATAL_MASK);
  g_log_set_always_fatal (writer.fatal);
  writer.fatal |= G_LOG_FATAL_MASK;
  g_log_set_writer_func (shimwatch_log_writer, NULL, NULL);
}

/* printable ASCII, tabs and newlines: what GLib writes as it is, in any locale's charset */
static gboolean
is_plain (const char *text,
          gsize       length)
{
  for (gsize i = 0; i < length; i++)
    {
      guchar c = (guchar) text[i];

      if ((c < 0x20 || c >= 0x7f) && c != '\t' && c != '\n')
        return FALSE;
    }
  return TRUE;
}

static gboolean
local_time (gint64     real_time,
            struct tm *tm)
{
  time_t secs = (time_t) (real_time / G_USEC_PER_SEC);
  gint minute = (gint) (secs / 60);

  /* localtime_r() keeps the zone it read first; tzset() reads it again (a stat() of
   * /etc/localtime when TZ is unset), once a minute rather than on every line */
  if (g_atomic_int_get (&zone_minute) != minute)
    {
      g_atomic_int_set (&zone_minute, minute);
      tzset ();
    }
  return localtime_r (&secs, tm) != NULL;
}

static void
append_2 (GString *line,
          int      value,
          char     after)
{
  g_string_append_c (line, (char) ('0' + value / 10 % 10));
  g_string_append_c (line, (char) ('0' + value % 10));
  g_string_append_c (line, after);
}

gboolean
shimwatch_log_writer_format (GLogLevelFlags   level,
                             const GLogField *fields,
                             gsize            n_fields,
                             gint64           real_time,
                             GString         *line)
{
  const char *message = NULL;
  const char *domain = NULL;
  gssize message_length = -1;
  gssize domain_length = -1;
  GLogLevelFlags mask = level & G_LOG_LEVEL_MASK;
  const char *name;
  struct tm tm;
  int ms;

  switch ((int) mask)
    {
    case G_LOG_LEVEL_ERROR:
      name = "ERROR **";
      break;
    case G_LOG_LEVEL_CRITICAL:
      name = "CRITICAL **";
      break;
    case G_LOG_LEVEL_WARNING:
      name = "WARNING **";
      break;
    case G_LOG_LEVEL_MESSAGE:
      name = "Message";
      break;
    case G_LOG_LEVEL_INFO:
      name = "INFO";
      break;
    case G_LOG_LEVEL_DEBUG:
      name = "DEBUG";
      break;
    default:
      return FALSE;
    }
  if (level & (G_LOG_FLAG_RECURSION | G_LOG_FLAG_FATAL))
    return FALSE;

  for (gsize i = 0; i < n_fields && (message == NULL || domain == NULL); i++)
    {
      if (message == NULL && strcmp (fields[i].key, "MESSAGE") == 0)
        {
          message = fields[i].value;
          message_length = fields[i].length;
        }
      else if (domain == NULL && strcmp (fields[i].key, "GLIB_DOMAIN") == 0)
        {
          domain = fields[i].value;
          domain_length = fields[i].length;
        }
    }
  if (message == NULL)
    return FALSE;
  if (message_length < 0)
    message_length = (gssize) strlen (message);
  /* GLib escapes control characters and converts to the locale's charset */
  if (!is_plain (message, (gsize) message_length) || !local_time (real_time, &tm))
    return FALSE;

  if (mask & ALERT_LEVELS)
    g_string_append_c (line, '\n');
  if (domain == NULL)
    g_string_append (line, "** ");
  if ((writer.prefixed & mask) == mask)
    {
      const char *prgname = g_get_prgname ();

      g_string_append_printf (line, "(%s:%lu): ", prgname != NULL ? prgname : "process",
                              get_own_pid ());
    }
  if (domain != NULL)
    {
      g_string_append_len (line, domain, domain_length);
      g_string_append_c (line, '-');
    }
  g_string_append (line, name);
  g_string_append (line, ": ");
  append_2 (line, tm.tm_hour, ':');
  append_2 (line, tm.tm_min, ':');
  append_2 (line, tm.tm_sec, '.');
  ms = (int) (real_time / 1000 % 1000);
  g_string_append_c (line, (char) ('0' + ms / 100));
  append_2 (line, ms % 100, ':');
  g_string_append_c (line, ' ');
  g_string_append_len (line, message, message_length);
  return TRUE;
}

GLogWriterOutput
shimwatch_log_writer (GLogLevelFlags   level,
                      const GLogField *fields,
                      gsize            n_fields,
                      gpointer         user_data)
{
  g_autoptr(GString) line = NULL;
  const char *domain = NULL;
  gboolean to_stderr = (level & STDERR_LEVELS) != 0;
  int fd;

  for (gsize i = 0; i < n_fields && domain == NULL; i++)
    if (strcmp (fields[i].key, "GLIB_DOMAIN") == 0)
      domain = fields[i].value;
  if (shimwatch_log_would_drop (level, domain))
    return G_LOG_WRITER_HANDLED;
  /* lines GLib treats in ways of its own: GLib's writer */
  if ((level & writer.fatal) != 0 || (to_stderr ? writer.tty_err : writer.tty_out))
    return g_log_writer_default (level, fields, n_fields, user_data);

  if (writer.journal &&
      g_log_writer_journald (level, fields, n_fields, user_data) == G_LOG_WRITER_HANDLED)
    return G_LOG_WRITER_HANDLED;

  fd = fileno (to_stderr ? stderr : stdout);
  line = g_string_sized_new (256);
  if (fd < 0 || !shimwatch_log_writer_format (level, fields, n_fields, g_get_real_time (), line))
    return g_log_writer_default (level, fields, n_fields, user_data);
  g_string_append_c (line, '\n');
  /* one write: lines from several threads never interleave */
  /* as GLib's writer: a line that cannot be written is lost */
  shimwatch_write_all (fd, line->str, line->len);
  return G_LOG_WRITER_HANDLED;
}
