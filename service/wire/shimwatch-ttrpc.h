/* SPDX-License-Identifier: Apache-2.0
 *
 * ShimwatchTtrpc: one ttrpc connection on the GLib main loop. It can make unary calls
 * (client role) and answer requests (server role, with a request handler). However the
 * connection ends (EOF, reset, read or write error, protocol-level fatal error, local
 * close), every pending call fails with SHIMWATCH_TTRPC_ERROR_CLOSED and the "closed"
 * signal is emitted exactly once. The socket itself is closed right after the signal: a
 * handler that tells the world the peer is gone does so before anything else is spent.
 */
#pragma once

#include <gio/gio.h>

#include "shimwatch-wire.h"

G_BEGIN_DECLS

#define SHIMWATCH_TTRPC_ERROR (shimwatch_ttrpc_error_quark ())
/* Codes 0–16 are the gRPC status the peer answered (ShimwatchGrpcCode); a local deadline
 * is SHIMWATCH_GRPC_DEADLINE_EXCEEDED, an oversized frame SHIMWATCH_GRPC_RESOURCE_EXHAUSTED.
 * The codes below are local conditions. */
typedef enum {
  SHIMWATCH_TTRPC_ERROR_CLOSED   = 100, /* "ttrpc: closed": the connection ended */
  SHIMWATCH_TTRPC_ERROR_PROTOCOL = 101, /* the peer sent something we cannot decode */
  SHIMWATCH_TTRPC_ERROR_OUTPUT_FULL = 102, /* the peer does not read: closed at the cap */
} ShimwatchTtrpcError;

/* What may wait to be written to one peer, beyond the frame being queued. A server peer
 * that lets its replies pile up to this is closed (SHIMWATCH_TTRPC_ERROR_OUTPUT_FULL); a
 * client call to a peer that does not read its requests fails at once with
 * SHIMWATCH_GRPC_RESOURCE_EXHAUSTED and the connection stays. */
#define SHIMWATCH_TTRPC_OUTPUT_LIMIT (1024 * 1024)
GQuark shimwatch_ttrpc_error_quark (void);

#define SHIMWATCH_TYPE_TTRPC (shimwatch_ttrpc_get_type ())
G_DECLARE_FINAL_TYPE (ShimwatchTtrpc, shimwatch_ttrpc, SHIMWATCH, TTRPC, GObject)

/* Server role: called for every valid unary request; answer with shimwatch_ttrpc_respond(). */
typedef void (*ShimwatchTtrpcRequestHandler) (ShimwatchTtrpc        *ttrpc,
                                              guint32                stream_id,
                                              ShimwatchTtrpcRequest *request,
                                              gpointer               user_data);

ShimwatchTtrpc *shimwatch_ttrpc_new                 (GSocketConnection            *connection);
void            shimwatch_ttrpc_connect_async       (const char                   *address,
                                                     GCancellable                 *cancellable,
                                                     GAsyncReadyCallback           callback,
                                                     gpointer                      user_data);
ShimwatchTtrpc *shimwatch_ttrpc_connect_finish      (GAsyncResult                 *result,
                                                     GError                      **error);
GSocketAddress *shimwatch_ttrpc_parse_address       (const char                   *address,
                                                     GError                      **error);

void            shimwatch_ttrpc_set_request_handler (ShimwatchTtrpc               *self,
                                                     ShimwatchTtrpcRequestHandler  handler,
                                                     gpointer                      user_data,
                                                     GDestroyNotify                destroy);
void            shimwatch_ttrpc_start               (ShimwatchTtrpc               *self);

typedef enum {
  SHIMWATCH_TTRPC_CALL_NONE     = 0,
  /* The answer is not awaited promptly: it waits in the socket, without waking the main
   * loop, until shimwatch_ttrpc_collect(), the call's deadline (which needs a timeout_ms),
   * or any other input on the connection reads it. For periodic checks of many peers that
   * are collected together. The peer's hang-up is still seen at once. */
  SHIMWATCH_TTRPC_CALL_DEFERRED = 1 << 0,
  /* With DEFERRED: the connection keeps no timer for the deadline (timeout_ms still goes
   * to the peer); the caller, which keeps one deadline for many such calls, ends them with
   * shimwatch_ttrpc_expire_deferred(). A timer per call would add a GSource to the main
   * context per check, and every main-loop iteration walks them all. */
  SHIMWATCH_TTRPC_CALL_CALLER_DEADLINE = 1 << 1,
} ShimwatchTtrpcCallFlags;

void            shimwatch_ttrpc_call_async          (ShimwatchTtrpc               *self,
                                                     const char                   *service,
                                                     const char                   *method,
                                                     GBytes                       *payload,
                                                     const char                   *namespace_,
                                                     guint                         timeout_ms,
                                                     GAsyncReadyCallback           callback,
                                                     gpointer                      user_data);
void            shimwatch_ttrpc_call_full_async     (ShimwatchTtrpc               *self,
                                                     const char                   *service,
                                                     const char                   *method,
                                                     GBytes                       *payload,
                                                     const char                   *namespace_,
                                                     guint                         timeout_ms,
                                                     ShimwatchTtrpcCallFlags       flags,
                                                     GAsyncReadyCallback           callback,
                                                     gpointer                      user_data);
GBytes         *shimwatch_ttrpc_call_finish         (ShimwatchTtrpc               *self,
                                                     GAsyncResult                 *result,
                                                     GError                      **error);

void            shimwatch_ttrpc_respond             (ShimwatchTtrpc               *self,
                                                     guint32                       stream_id,
                                                     int                           code,
                                                     const char                   *message,
                                                     GBytes                       *payload);

#ifdef SHIMWATCH_TEST_HOOKS
/* tests (-Dtest_hooks): a smaller cap than SHIMWATCH_TTRPC_OUTPUT_LIMIT */
void            shimwatch_ttrpc_set_output_limit    (ShimwatchTtrpc               *self,
                                                     gsize                         limit);
#endif
/* what waits to be written */
gsize           shimwatch_ttrpc_get_output_pending  (ShimwatchTtrpc               *self);

/* Where the connection's events come among the fds found ready at the same moment
 * (shimwatch_poller_watch_set_priority()); G_PRIORITY_DEFAULT unless set */
void            shimwatch_ttrpc_set_priority        (ShimwatchTtrpc               *self,
                                                     int                           priority);

/* Reads, now, what the peer has sent: the answers of DEFERRED calls that arrived */
void            shimwatch_ttrpc_collect             (ShimwatchTtrpc               *self);
/* Their deadline passed: reads what arrived (an answer that came counts), then fails every
 * CALLER_DEADLINE call still pending with SHIMWATCH_GRPC_DEADLINE_EXCEEDED */
void            shimwatch_ttrpc_expire_deferred     (ShimwatchTtrpc               *self);

void            shimwatch_ttrpc_close               (ShimwatchTtrpc               *self);
gboolean        shimwatch_ttrpc_is_closed           (ShimwatchTtrpc               *self);

G_END_DECLS
