/* Wire format of the uvcuda example server (examples/server), shared by the
 * server, the load client and the end-to-end test. Header only.
 *
 * Every integer is little-endian. A connection carries a stream of frames in
 * each direction; requests may be pipelined and replies may come back in any
 * order (GPU work on several streams finishes out of order): match them by id.
 *
 *   request  u32 len | u8 op | u8 flags | u16 reserved | u32 id | u32 arg | payload
 *            len = 12 + payload bytes (everything after the len field)
 *   reply    u32 len | u8 status | u8 op | u16 reserved | u32 id | payload
 *            len = 8 + payload bytes
 *
 *   op        payload                   arg            reply payload
 *   PING      0..PROTO_PING_MAX bytes   ignored        the same bytes (no GPU)
 *   CHECKSUM  0..max-request bytes      ignored        u32 FNV-1a 32 of the payload,
 *                                                      by kernel uvcuda_checksum_u8
 *   ADD       u32 words (len % 4 == 0)  value          each word + value (mod 2^32),
 *                                                      by kernel uvcuda_add_u32
 *   SLEEP     empty                     microseconds   empty, after a GPU kernel that
 *                                                      spins that long (uvcuda_sleep_ns)
 *
 * flags and reserved must be 0. Errors are replies with a nonzero status and
 * a short ASCII message as payload. After BAD_OP, BAD_REQUEST and GPU_ERROR
 * the connection goes on (the length told where the next frame starts);
 * after MALFORMED, TOO_LARGE and BUSY the server closes it (it stops reading,
 * writes the replies already due, then shuts the connection down).
 */
#ifndef UVCUDA_SERVER_PROTOCOL_H
#define UVCUDA_SERVER_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PROTO_REQ_HDR 16u /* bytes of a request before its payload */
#define PROTO_REP_HDR 12u /* bytes of a reply before its payload */
#define PROTO_REQ_FIXED 12u /* smallest request len (no payload) */
#define PROTO_REP_FIXED 8u  /* smallest reply len */
#define PROTO_PING_MAX 4096u
#define PROTO_DEFAULT_PORT 7878

enum proto_op {
  PROTO_OP_PING = 1,
  PROTO_OP_CHECKSUM = 2,
  PROTO_OP_ADD = 3,
  PROTO_OP_SLEEP = 4
};

enum proto_status {
  PROTO_OK = 0,
  PROTO_BAD_OP = 1,      /* unknown op; payload skipped, connection goes on */
  PROTO_BAD_REQUEST = 2, /* bad flags / length / arg for the op; goes on */
  PROTO_TOO_LARGE = 3,   /* len above the server's maximum; closed */
  PROTO_MALFORMED = 4,   /* len below 12; closed */
  PROTO_BUSY = 5,        /* too many connections; closed */
  PROTO_GPU_ERROR = 6    /* the device work failed; goes on */
};

static inline const char *proto_status_name(int st) {
  switch (st) {
    case PROTO_OK: return "OK";
    case PROTO_BAD_OP: return "BAD_OP";
    case PROTO_BAD_REQUEST: return "BAD_REQUEST";
    case PROTO_TOO_LARGE: return "TOO_LARGE";
    case PROTO_MALFORMED: return "MALFORMED";
    case PROTO_BUSY: return "BUSY";
    case PROTO_GPU_ERROR: return "GPU_ERROR";
    default: return "?";
  }
}

static inline const char *proto_op_name(int op) {
  switch (op) {
    case PROTO_OP_PING: return "ping";
    case PROTO_OP_CHECKSUM: return "checksum";
    case PROTO_OP_ADD: return "add";
    case PROTO_OP_SLEEP: return "sleep";
    default: return "?";
  }
}

static inline void proto_put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

static inline uint32_t proto_get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* Writes a request header for a payload of n bytes. */
static inline void proto_req_header(unsigned char *h, uint8_t op, uint32_t id,
                                    uint32_t arg, uint32_t n) {
  proto_put_u32(h, PROTO_REQ_FIXED + n);
  h[4] = op;
  h[5] = 0;
  h[6] = 0;
  h[7] = 0;
  proto_put_u32(h + 8, id);
  proto_put_u32(h + 12, arg);
}

/* Writes a reply header for a payload of n bytes. */
static inline void proto_rep_header(unsigned char *h, uint8_t status,
                                    uint8_t op, uint32_t id, uint32_t n) {
  proto_put_u32(h, PROTO_REP_FIXED + n);
  h[4] = status;
  h[5] = op;
  h[6] = 0;
  h[7] = 0;
  proto_put_u32(h + 8, id);
}

/* FNV-1a, 32 bits: what kernel uvcuda_checksum_u8 computes. */
static inline uint32_t proto_fnv1a(const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  uint32_t h = 0x811C9DC5u;
  size_t i;
  for (i = 0; i < n; i++) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

#endif
