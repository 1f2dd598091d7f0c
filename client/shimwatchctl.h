/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatchctl: the command line client of shimwatchd. It speaks only the public D-Bus
 * API (introspection/, docs/dbus-api.xml); nothing here is shared with the service.
 */
#pragma once

#include <gio/gio.h>
#include <json-glib/json-glib.h>

#include "shimwatchctl-common.h"

G_BEGIN_DECLS

typedef struct {
  /* global options */
  gboolean         json;
  gboolean         system;
  gboolean         session;
  char            *address;
  char            *namespace_;     /* -n: of a bare ID, and what list shows */
  gboolean         no_ask_password;
  gboolean         version;

  GDBusConnection *connection;
  gboolean         color;          /* stdout is a terminal that takes colours */
  guint            width;          /* of the terminal, 0 = unlimited */
} Ctl;

typedef struct _CtlCommand CtlCommand;

/* a command is handed its own entry of the table (shimwatchctl-main.c) */
typedef int (*CtlCommandFunc) (Ctl              *ctl,
                               const CtlCommand *command,
                               int               argc,
                               char            **argv);

struct _CtlCommand {
  const char     *name;
  const char     *parameters;      /* e.g. "NS/ID" (translated at run time) */
  const char     *summary;         /* N_() */
  CtlCommandFunc  func;
};

/* shimwatchctl.c */
/* the global options, bound to ctl: NULL-terminated, to be freed with g_free() */
GOptionEntry *ctl_global_options    (Ctl             *ctl);
gboolean     ctl_parse_command_line (Ctl             *ctl,
                                     const CtlCommand *command,
                                     const GOptionEntry *entries,
                                     const char      *description,
                                     int             *argc,
                                     char          ***argv,
                                     int              min_args,
                                     int              max_args,
                                     int             *exit_code);
int          ctl_usage_error        (const CtlCommand *command,
                                     const char       *format,
                                     ...) G_GNUC_PRINTF (2, 3);

/* shimwatchctl-bus.c */
gboolean     ctl_connect            (Ctl          *ctl,
                                     int          *exit_code);
/* Following the service in a main loop (wait, monitor): ctl_follow_start() subscribes to
 * the NameOwnerChanged of the service's name (@owner_changed) and makes the connection's
 * end quit @loop with CTL_EXIT_FAILURE, said on standard error; ctl_follow_sync() returns
 * once the bus has every match rule asked for so far, so nothing sent from then on is
 * missed; ctl_follow_end() undoes the start. */
typedef struct {
  Ctl       *ctl;
  GMainLoop *loop;        /* the one the caller runs, once it does */
  int        exit_code;   /* CTL_EXIT_OK unless the connection ended */
  guint      owner_sub;
} CtlFollow;

void         ctl_follow_start       (CtlFollow           *follow,
                                     Ctl                 *ctl,
                                     GDBusSignalCallback  owner_changed,
                                     gpointer             user_data);
void         ctl_follow_sync        (CtlFollow           *follow);
void         ctl_follow_end         (CtlFollow           *follow);
GVariant    *ctl_call               (Ctl          *ctl,
                                     const char   *path,
                                     const char   *interface,
                                     const char   *method,
                                     GVariant     *parameters,
                                     const char   *reply_type,
                                     gboolean      changes_state,
                                     GUnixFDList **out_fd_list,
                                     GError      **error);
int          ctl_fail               (Ctl          *ctl,
                                     const GError *error,
                                     const char   *method,
                                     const char   *format,
                                     ...) G_GNUC_PRINTF (4, 5);
gboolean     ctl_error_is_unknown_method (const GError *error);
gboolean     ctl_parse_task         (Ctl          *ctl,
                                     const CtlCommand *command,
                                     const char   *arg,
                                     char        **out_namespace,
                                     char        **out_id,
                                     int          *exit_code);
char        *ctl_get_shim_path      (Ctl          *ctl,
                                     const char   *namespace_,
                                     const char   *id,
                                     int          *exit_code);
char        *ctl_task_name_from_path (const char  *path);

/* shimwatchctl-output.c */
void         ctl_output_init        (Ctl          *ctl);
const char  *ctl_color              (Ctl          *ctl,
                                     const char   *sgr);
const char  *ctl_status_color       (Ctl          *ctl,
                                     const char   *status);
char        *ctl_format_time        (guint64       usec);
char        *ctl_format_age         (guint64       usec,
                                     gint64        now_usec);
char        *ctl_format_exit_status (guint32       status);
char        *ctl_format_bytes       (guint64       bytes);
char        *ctl_snake_case         (const char   *camel);
char        *ctl_escape             (const char   *text);
char        *ctl_escape_output      (const char   *text,
                                     gsize         length);
guint        ctl_display_width      (const char   *text);
JsonNode    *ctl_json_from_variant  (GVariant     *value);
void         ctl_print_json         (JsonNode     *node,
                                     gboolean      pretty);
void         ctl_print_field        (const char   *label,
                                     const char   *value);

typedef struct _CtlTable CtlTable;
CtlTable    *ctl_table_new          (Ctl          *ctl);
void         ctl_table_add_column   (CtlTable     *table,
                                     const char   *title,
                                     int           priority,
                                     gboolean      can_shrink,
                                     gboolean      right_align);
void         ctl_table_add_row      (CtlTable     *table,
                                     ...) G_GNUC_NULL_TERMINATED;
void         ctl_table_set_cell_color (CtlTable   *table,
                                       guint       column,
                                       const char *sgr);
void         ctl_table_print        (CtlTable     *table);
void         ctl_table_free         (CtlTable     *table);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (CtlTable, ctl_table_free)

/* the commands (ctl_cmd_help: shimwatchctl-main.c) */
int ctl_cmd_list    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_status  (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_run     (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_start   (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_stop    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_kill    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_pause   (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_resume  (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_delete  (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_reap    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_monitor (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_logs    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_history (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_label   (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_wait    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_version (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_help    (Ctl *ctl, const CtlCommand *command, int argc, char **argv);
int ctl_cmd_metrics (Ctl *ctl, const CtlCommand *command, int argc, char **argv);

G_END_DECLS
