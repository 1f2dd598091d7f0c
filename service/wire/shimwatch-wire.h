/* SPDX-License-Identifier: Apache-2.0
 *
 * shimwatch-wire: the protobuf-c / json-glib boundary. Every byte that crosses a shim's
 * socket, a shim's stdout or a bundle's config.json is encoded or decoded here; nothing
 * else in shimwatch includes protobuf-c or json-glib headers.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* ttrpc framing (containerd/ttrpc channel.go) */
#define SHIMWATCH_TTRPC_HEADER_LENGTH      10
#define SHIMWATCH_TTRPC_MESSAGE_LENGTH_MAX (4u << 20)

typedef enum {
  SHIMWATCH_TTRPC_TYPE_REQUEST  = 1,
  SHIMWATCH_TTRPC_TYPE_RESPONSE = 2,
  SHIMWATCH_TTRPC_TYPE_DATA     = 3,
} ShimwatchTtrpcType;

#define SHIMWATCH_TTRPC_FLAG_REMOTE_CLOSED 0x01
#define SHIMWATCH_TTRPC_FLAG_REMOTE_OPEN   0x02
#define SHIMWATCH_TTRPC_FLAG_NO_DATA       0x04

typedef struct {
  guint32 length;
  guint32 stream_id;
  guint8  type;
  guint8  flags;
} ShimwatchTtrpcHeader;

void shimwatch_wire_header_encode (const ShimwatchTtrpcHeader *header,
                                   guint8                     *out);
void shimwatch_wire_header_decode (const guint8               *in,
                                   ShimwatchTtrpcHeader       *header);

/* gRPC status codes, as carried in google.rpc.Status.code */
typedef enum {
  SHIMWATCH_GRPC_OK                  = 0,
  SHIMWATCH_GRPC_CANCELLED           = 1,
  SHIMWATCH_GRPC_UNKNOWN             = 2,
  SHIMWATCH_GRPC_INVALID_ARGUMENT    = 3,
  SHIMWATCH_GRPC_DEADLINE_EXCEEDED   = 4,
  SHIMWATCH_GRPC_NOT_FOUND           = 5,
  SHIMWATCH_GRPC_ALREADY_EXISTS      = 6,
  SHIMWATCH_GRPC_PERMISSION_DENIED   = 7,
  SHIMWATCH_GRPC_RESOURCE_EXHAUSTED  = 8,
  SHIMWATCH_GRPC_FAILED_PRECONDITION = 9,
  SHIMWATCH_GRPC_ABORTED             = 10,
  SHIMWATCH_GRPC_OUT_OF_RANGE        = 11,
  SHIMWATCH_GRPC_UNIMPLEMENTED       = 12,
  SHIMWATCH_GRPC_INTERNAL            = 13,
  SHIMWATCH_GRPC_UNAVAILABLE         = 14,
  SHIMWATCH_GRPC_DATA_LOSS           = 15,
  SHIMWATCH_GRPC_UNAUTHENTICATED     = 16,
} ShimwatchGrpcCode;

#define SHIMWATCH_WIRE_ERROR (shimwatch_wire_error_quark ())
typedef enum {
  SHIMWATCH_WIRE_ERROR_INVALID,     /* bytes that do not decode, or decode to nonsense */
  SHIMWATCH_WIRE_ERROR_UNSUPPORTED, /* well-formed but a version or protocol we do not speak */
} ShimwatchWireError;
GQuark shimwatch_wire_error_quark (void);

/* containerd's identifier rule: ^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$, at most 76 chars */
#define SHIMWATCH_IDENTIFIER_MAX_LENGTH 76
gboolean shimwatch_identifier_validate (const char  *what,
                                        const char  *value,
                                        GError     **error);

/* CLOCK_REALTIME microseconds from a google.protobuf.Timestamp; 0 for unset / Go zero time */
gint64 shimwatch_wire_timestamp_to_usec (gint64 seconds,
                                         gint32 nanos);

/* ttrpc.Request / ttrpc.Response */
typedef struct {
  char   *service;
  char   *method;
  GBytes *payload;
  gint64  timeout_nano;
  char   *namespace_;   /* containerd-namespace-ttrpc metadata, or NULL */
} ShimwatchTtrpcRequest;

void shimwatch_ttrpc_request_free (ShimwatchTtrpcRequest *request);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchTtrpcRequest, shimwatch_ttrpc_request_free)

GBytes                *shimwatch_wire_encode_request  (const char    *service,
                                                       const char    *method,
                                                       GBytes        *payload,
                                                       gint64         timeout_nano,
                                                       const char    *namespace_);
ShimwatchTtrpcRequest *shimwatch_wire_decode_request  (const guint8  *data,
                                                       gsize          length,
                                                       GError       **error);
GBytes                *shimwatch_wire_encode_response (int            code,
                                                       const char    *message,
                                                       GBytes        *payload);
gboolean               shimwatch_wire_decode_response (const guint8  *data,
                                                       gsize          length,
                                                       int           *code,
                                                       char         **message,
                                                       GBytes       **payload,
                                                       GError       **error);

/* shim `start` output: BootstrapResult protobuf, JSON, or a plain address */
typedef struct {
  int   version;
  char *address;
  char *protocol;
} ShimwatchBootstrap;

void                shimwatch_bootstrap_free          (ShimwatchBootstrap *bootstrap);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchBootstrap, shimwatch_bootstrap_free)
ShimwatchBootstrap *shimwatch_wire_parse_start_output (GBytes             *output,
                                                       GError            **error);

/* google.protobuf.Any{containerd.runc.v1.Options{root, systemd_cgroup}}: start's stdin,
 * Create's options */
GBytes *shimwatch_wire_encode_runc_options (const char *runc_root,
                                            gboolean    systemd_cgroup);

/* JSON from others (a bundle's config.json, a task record, a shim's start output) may
 * nest arrays and objects at most this deep; deeper input is refused before parsing */
#define SHIMWATCH_WIRE_JSON_MAX_DEPTH 128

/* FALSE (SHIMWATCH_WIRE_ERROR_INVALID) if @data nests deeper than @max_depth, or has a raw
 * control character or an escape RFC 8259 does not know in a string: a byte scan, cheap
 * enough for any input, run before json-glib (which would accept such strings) */
gboolean shimwatch_wire_json_check (const char  *data,
                                    gsize        length,
                                    guint        max_depth,
                                    GError     **error);

/* root.path of an OCI config.json, as written there (relative to the bundle or absolute) */
char   *shimwatch_wire_oci_config_root_path (const char  *contents,
                                             gsize        length,
                                             GError     **error);

/* What a task's record and its Command property keep of process.args: the first
 * arguments, up to SHIMWATCH_COMMAND_MAX_ARGS of them and SHIMWATCH_COMMAND_MAX_BYTES
 * (each argument counted with a terminating NUL). An argument that does not fit whole is
 * cut to what fits and ends with "…"; when anything was cut, one more, last element
 * says so: "[cut: N more arguments]" (N may be 0 when only an argument was shortened). */
#define SHIMWATCH_COMMAND_MAX_ARGS   1024
#define SHIMWATCH_COMMAND_MAX_BYTES  65536
#define SHIMWATCH_COMMAND_CUT_FORMAT "[cut: %u more arguments]"

/* process.args of an OCI config.json (NULL-terminated, maybe empty), bounded as above */
GStrv   shimwatch_wire_oci_process_args (const char  *contents,
                                         gsize        length,
                                         GError     **error);

/* Copy of an OCI config.json whose root.path is made absolute against bundle_dir, so the
 * rootfs stays referenced (not copied) from a task directory elsewhere, and whose
 * linux.cgroupsPath is default_cgroups_path when the bundle names none. *cgroups_path
 * (if not NULL) gets the cgroupsPath the task will have, NULL if none. */
GBytes *shimwatch_wire_rewrite_oci_config (const char  *contents,
                                           gsize        length,
                                           const char  *bundle_dir,
                                           const char  *default_cgroups_path,
                                           char       **cgroups_path,
                                           GError     **error);

/* Task API (containerd.task.v2 / v3: same messages) */
typedef enum {
  SHIMWATCH_TASK_STATUS_UNKNOWN = 0,
  SHIMWATCH_TASK_STATUS_CREATED = 1,
  SHIMWATCH_TASK_STATUS_RUNNING = 2,
  SHIMWATCH_TASK_STATUS_STOPPED = 3,
  SHIMWATCH_TASK_STATUS_PAUSED  = 4,
  SHIMWATCH_TASK_STATUS_PAUSING = 5,
} ShimwatchTaskStatus;

const char *shimwatch_task_status_to_string (ShimwatchTaskStatus status);

typedef struct {
  guint32 pid;
  guint32 exit_status;
  gint64  exited_at;   /* usec since the epoch, 0 = unknown */
} ShimwatchExit;

typedef struct {
  ShimwatchTaskStatus status;
  guint32             pid;
  guint32             exit_status;
  gint64              exited_at;
} ShimwatchTaskState;

/* containerd.types.Mount: what the shim mounts on <bundle>/rootfs before runc create */
typedef struct {
  const char         *type;
  const char         *source;
  const char         *target;
  const char * const *options;
} ShimwatchMount;

typedef struct {
  const char           *id;
  const char           *bundle;
  const ShimwatchMount *rootfs;        /* n_rootfs mounts, or NULL */
  gsize                 n_rootfs;
  const char *stdin_path;
  const char *stdout_path;
  const char *stderr_path;
  gboolean    terminal;
  const char *runc_root;
  gboolean    systemd_cgroup;   /* runc --systemd-cgroup (Options.systemd_cgroup) */
} ShimwatchCreateParams;

GBytes  *shimwatch_wire_encode_connect_request    (const char               *id);
GBytes  *shimwatch_wire_encode_pids_request       (const char               *id);
GBytes  *shimwatch_wire_encode_process_request    (const char               *id,
                                                   const char               *exec_id);
GBytes  *shimwatch_wire_encode_create_request     (const ShimwatchCreateParams *params);
GBytes  *shimwatch_wire_encode_kill_request       (const char               *id,
                                                   const char               *exec_id,
                                                   guint32                   signal_number,
                                                   gboolean                  all);
GBytes  *shimwatch_wire_encode_shutdown_request   (const char               *id,
                                                   gboolean                  now);
/* PauseRequest and ResumeRequest: {id = 1} */
GBytes  *shimwatch_wire_encode_pause_request      (const char               *id);
GBytes  *shimwatch_wire_encode_resume_request     (const char               *id);
gboolean shimwatch_wire_decode_connect_response   (GBytes                   *payload,
                                                   guint32                  *shim_pid,
                                                   guint32                  *task_pid,
                                                   GError                  **error);
gboolean shimwatch_wire_decode_pid_response       (GBytes                   *payload,
                                                   guint32                  *pid,
                                                   GError                  **error);
gboolean shimwatch_wire_decode_state_response     (GBytes                   *payload,
                                                   ShimwatchTaskState       *state,
                                                   GError                  **error);
gboolean shimwatch_wire_decode_wait_response      (GBytes                   *payload,
                                                   ShimwatchExit            *exit_info,
                                                   GError                  **error);
gboolean shimwatch_wire_decode_delete_response    (GBytes                   *payload,
                                                   ShimwatchExit            *exit_info,
                                                   GError                  **error);
GArray  *shimwatch_wire_decode_pids_response      (GBytes                   *payload,
                                                   GError                  **error);
gboolean shimwatch_wire_decode_empty              (GBytes                   *payload,
                                                   GError                  **error);

/* Events forwarded by shims (containerd.services.events.ttrpc.v1.Events/Forward) */
typedef enum {
  SHIMWATCH_EVENT_OTHER,
  SHIMWATCH_EVENT_TASK_CREATE,
  SHIMWATCH_EVENT_TASK_START,
  SHIMWATCH_EVENT_TASK_EXIT,
  SHIMWATCH_EVENT_TASK_DELETE,
  SHIMWATCH_EVENT_TASK_OOM,
  SHIMWATCH_EVENT_TASK_EXEC_ADDED,
  SHIMWATCH_EVENT_TASK_EXEC_STARTED,
  SHIMWATCH_EVENT_TASK_PAUSED,
  SHIMWATCH_EVENT_TASK_RESUMED,
} ShimwatchEventKind;

typedef struct {
  ShimwatchEventKind kind;
  char              *namespace_;
  char              *topic;
  char              *type_url;
  gint64             timestamp;     /* envelope time, usec */
  char              *container_id;
  char              *exec_id;       /* TaskExit.id / TaskDelete.id / exec events */
  char              *bundle;        /* TaskCreate */
  guint32            pid;
  guint32            exit_status;
  gint64             exited_at;
} ShimwatchEvent;

#define SHIMWATCH_TYPE_EVENT (shimwatch_event_get_type ())
GType           shimwatch_event_get_type (void) G_GNUC_CONST;
ShimwatchEvent *shimwatch_event_copy     (const ShimwatchEvent *event);
void            shimwatch_event_free     (ShimwatchEvent       *event);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchEvent, shimwatch_event_free)

ShimwatchEvent *shimwatch_wire_decode_forward_request (GBytes               *payload,
                                                       GError              **error);
GBytes         *shimwatch_wire_encode_forward_request (const ShimwatchEvent *event);

/* Task records: one JSON file per task, what a restarted service needs to finish the job
 * exactly once (see shimwatch-records.h) */
#define SHIMWATCH_RECORD_VERSION 1

typedef struct {
  char         *namespace_;
  char         *id;
  char         *runtime;
  char         *shim_binary;
  char         *task_dir;
  char         *address;
  guint32       shim_pid;
  guint32       task_pid;
  guint64       task_start_time;   /* /proc/<pid>/stat field 22: guards against pid reuse */
  gint64        created_at;
  char         *status;            /* the Status property when written */
  gboolean      exit_known;        /* a real exit was seen (forwarded, or our own SIGKILL) */
  ShimwatchExit exit;
  gboolean      exit_emitted;      /* TaskExit went out */
  gboolean      disconnected;      /* ShimDisconnected went out: cleanup is under way */
  gboolean      deleted;           /* a normal Delete completed */
  gboolean      delete_emitted;    /* TaskDelete went out: only files are left to remove */
  /* what the task is and how it ended; optional (absent from records of 0.1.0) */
  char         *owner;             /* "shimwatch" */
  char         *bundle_source;     /* the bundle path CreateTask was given */
  GStrv         command;           /* process.args */
  GVariant     *labels;            /* a{ss} */
  gint64        started_at;
  char         *exit_reason;       /* "" while running */
  gboolean      oom;               /* the shim reported an OOM kill */
  /* the signal (ShimDisconnected, TaskExit, TaskDelete) whose flag above was set ahead
   * of time, or NULL; pending_sent says whether it went out, and the flag holds only if
   * it did. Loaded from the task's marks file (a pending mark, shimwatch-marks.h), or
   * from a record written before the marks file, whose "pending_sent" digit the ledger
   * flipped. */
  char         *pending_signal;
  gboolean      pending_sent;
  /* the last mark of the task's marks file that this record includes: a restart lays
   * only later marks over it */
  guint64       marks_seq;
  /* the task's own cgroup below every hierarchy's root ("/shimwatch/<ns>/<id>"), NULL when
   * the record is older than per-task cgroups */
  char         *cgroup_path;
} ShimwatchRecord;

void             shimwatch_record_free          (ShimwatchRecord  *record);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (ShimwatchRecord, shimwatch_record_free)
GBytes          *shimwatch_wire_encode_record   (const ShimwatchRecord *record);
ShimwatchRecord *shimwatch_wire_decode_record   (const char       *data,
                                                 gsize             length,
                                                 GError          **error);

G_END_DECLS
