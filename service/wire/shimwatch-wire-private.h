/* SPDX-License-Identifier: Apache-2.0
 *
 * What the wire files share; only they include it (and with it protobuf-c and json-glib):
 *   shimwatch-wire.c            ttrpc framing, requests and responses, identifiers
 *   shimwatch-wire-bootstrap.c  what `shim start` prints (bootstrap protocol)
 *   shimwatch-wire-task.c       the Task API's requests and responses
 *   shimwatch-wire-events.c     the events of the Events service (Forward)
 *   shimwatch-wire-json.c       JSON from others: depth checks, the OCI config
 *   shimwatch-wire-record.c     task records (JSON on disk)
 */
#pragma once

#include <json-glib/json-glib.h>

#include "any.pb-c.h"
#include "bootstrap.pb-c.h"
#include "envelope.pb-c.h"
#include "events.pb-c.h"
#include "forward.pb-c.h"
#include "runc_options.pb-c.h"
#include "shim.pb-c.h"
#include "ttrpc.pb-c.h"

#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define NAMESPACE_METADATA_KEY "containerd-namespace-ttrpc"
#define TYPE_URL_RUNC_OPTIONS  "containerd.runc.v1.Options"

/* protobuf-c wants a non-NULL buffer even for zero-length input */
extern const guint8 shimwatch_wire_empty_buffer[1];

const guint8     *shimwatch_wire_bytes_data     (GBytes                           *bytes,
                                                 gsize                            *length);
GBytes           *shimwatch_wire_pack_message   (const ProtobufCMessage           *message);
ProtobufCMessage *shimwatch_wire_unpack_message (const ProtobufCMessageDescriptor *descriptor,
                                                 GBytes                           *payload,
                                                 GError                          **error);
/* proto3 strings are not checked for UTF-8 by protobuf-c; D-Bus strings must be valid */
gboolean          shimwatch_wire_check_utf8     (const char                       *field,
                                                 const char                       *value,
                                                 GError                          **error);
gint64            shimwatch_wire_timestamp_usec (const Google__Protobuf__Timestamp *timestamp);
/* parse JSON from others; an error says where (shimwatch-wire-json.c) */
gboolean          shimwatch_wire_load_json      (JsonParser                       *parser,
                                                 const char                       *data,
                                                 gsize                             length,
                                                 GError                          **error);

G_END_DECLS
