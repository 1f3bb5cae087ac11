/* End-to-end tests of uvcuda-server and uvcuda-load on 127.0.0.1.
 *
 *   uvcuda-server-e2e SERVER CLIENT CASE [MODE] [--gpu]
 *
 * CASE: load | malformed | limits | shutdown | gpuerror (simulation only:
 * injected launch failures). MODE: uvcuda (default),
 * threadpool, once (--await once) or hostfn (--completion hostfn).
 * --gpu: exit 77 (skipped) unless a real CUDA driver and device are there,
 * and run the server with --require-gpu.
 *
 * Each case starts its own server on an ephemeral port (--port 0
 * --port-file), talks to it with blocking sockets that have timeouts and
 * with the load client, and ends with SIGTERM and a check that the server
 * exited 0. Everything is bounded: socket timeouts, waitpid deadlines and a
 * SIGALRM watchdog that kills the server. UVCUDA_TEST_SLOW=1 multiplies the
 * time limits by 10; UVCUDA_E2E_WRAPPER="valgrind ..." runs the server
 * under that command.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol.h"
#include "simprobe.h" /* support/ */
#include "uvcuda.h"

static const char *server_path, *client_path;
static const char *mode = "uvcuda";
static int gpu;
static int slow = 1;
static pid_t server_pid = -1;
static int server_port;
static char tmpdir[256];
static const char *case_name = "?";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

static void cleanup(void) {
  char path[300];
  if (server_pid > 0) {
    kill(server_pid, SIGKILL);
    waitpid(server_pid, NULL, 0);
    server_pid = -1;
  }
  if (tmpdir[0]) {
    snprintf(path, sizeof(path), "%s/port", tmpdir);
    unlink(path);
    rmdir(tmpdir);
  }
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "e2e %s/%s: FAIL: ", case_name, mode);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  cleanup();
  exit(1);
}

#define CHECK(cond, ...)         \
  do {                           \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "e2e %s/%s: ", case_name, mode);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void on_alarm(int sig) {
  static const char msg[] = "e2e: watchdog: the test ran too long\n";
  (void)sig;
  if (write(2, msg, sizeof(msg) - 1) < 0) {
  }
  if (server_pid > 0) kill(server_pid, SIGKILL);
  _exit(1);
}

/* ---- processes -------------------------------------------------------- */

static void exec_with_wrapper(const char *prog, char **args) {
  char *argv[64];
  int n = 0, i;
  const char *wrap = getenv("UVCUDA_E2E_WRAPPER");
  char *w = wrap && *wrap ? strdup(wrap) : NULL, *tok, *save = NULL;
  for (tok = w ? strtok_r(w, " ", &save) : NULL; tok && n < 40;
       tok = strtok_r(NULL, " ", &save))
    argv[n++] = tok;
  argv[n++] = (char *)prog;
  for (i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
  argv[n] = NULL;
  execvp(argv[0], argv);
  perror(argv[0]);
  _exit(127);
}

/* Starts the server with the mode's options plus `extra` (NULL-ended). */
static void server_start(const char *const *extra) {
  char portfile[300];
  char *args[48];
  int n = 0, i;
  double deadline;
  FILE *f;

  snprintf(portfile, sizeof(portfile), "%s/port", tmpdir);
  unlink(portfile);
  args[n++] = "--port";
  args[n++] = "0";
  args[n++] = "--port-file";
  args[n++] = portfile;
  if (!strcmp(mode, "threadpool")) args[n++] = "--threadpool";
  if (!strcmp(mode, "once")) args[n++] = "--await", args[n++] = "once";
  if (!strcmp(mode, "hostfn")) args[n++] = "--completion", args[n++] = "hostfn";
  if (gpu) args[n++] = "--require-gpu";
  for (i = 0; extra && extra[i] && n < 46; i++) args[n++] = (char *)extra[i];
  args[n] = NULL;

  fflush(NULL);
  server_pid = fork();
  CHECK(server_pid >= 0, "fork: %s", strerror(errno));
  if (server_pid == 0) exec_with_wrapper(server_path, args);

  deadline = now_s() + 20.0 * slow;
  for (;;) {
    int st;
    if (waitpid(server_pid, &st, WNOHANG) == server_pid) {
      server_pid = -1;
      fail("the server exited at start (status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    if ((f = fopen(portfile, "r")) != NULL) {
      int ok = fscanf(f, "%d", &server_port) == 1;
      fclose(f);
      if (ok && server_port > 0) break;
    }
    CHECK(now_s() < deadline, "the server did not listen within %d s", 20 * slow);
    sleep_ms(10);
  }
}

/* Waits for the server to exit; returns its exit status (-1: a signal). */
static int server_wait(double timeout_s) {
  double deadline = now_s() + timeout_s * slow;
  int st;
  for (;;) {
    pid_t r = waitpid(server_pid, &st, WNOHANG);
    if (r == server_pid) break;
    CHECK(r == 0, "waitpid: %s", strerror(errno));
    CHECK(now_s() < deadline, "the server did not exit within %.0f s", timeout_s * slow);
    sleep_ms(5);
  }
  server_pid = -1;
  if (WIFSIGNALED(st)) fail("the server died of signal %d", WTERMSIG(st));
  return WEXITSTATUS(st);
}

static void server_stop_ok(void) {
  int rc;
  CHECK(kill(server_pid, SIGTERM) == 0, "kill: %s", strerror(errno));
  rc = server_wait(15);
  CHECK(rc == 0, "the server exited %d after SIGTERM, want 0", rc);
}

static int run_client(const char *const *extra) {
  char port[16], timeout[16];
  char *args[48];
  int n = 0, i, st;
  pid_t pid;
  double deadline;
  snprintf(port, sizeof(port), "%d", server_port);
  snprintf(timeout, sizeof(timeout), "%d", 30 * slow);
  args[n++] = (char *)client_path;
  args[n++] = "--port";
  args[n++] = port;
  args[n++] = "--timeout-s";
  args[n++] = timeout;
  for (i = 0; extra[i] && n < 46; i++) args[n++] = (char *)extra[i];
  args[n] = NULL;
  fflush(NULL);
  pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    execv(client_path, args);
    perror(client_path);
    _exit(127);
  }
  deadline = now_s() + 40.0 * slow;
  for (;;) {
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (now_s() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      fail("the client did not finish");
    }
    sleep_ms(5);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- sockets ----------------------------------------------------------- */

static int sock_connect_rc(int *fd_out) {
  struct sockaddr_in a;
  struct timeval tv = {5 * slow, 0};
  int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0, "socket: %s", strerror(errno));
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)server_port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
    int e = errno;
    close(fd);
    return -e;
  }
  *fd_out = fd;
  return 0;
}

static int sock_connect(void) {
  int fd = -1, rc = sock_connect_rc(&fd);
  CHECK(rc == 0, "connect to 127.0.0.1:%d: %s", server_port, strerror(-rc));
  return fd;
}

static void send_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    CHECK(k > 0, "send: %s", k < 0 ? strerror(errno) : "0");
    b += k;
    n -= (size_t)k;
  }
}

static void send_req(int fd, uint8_t op, uint32_t id, uint32_t arg, const void *payload,
                     uint32_t n) {
  unsigned char h[PROTO_REQ_HDR];
  proto_req_header(h, op, id, arg, n);
  send_all(fd, h, sizeof(h));
  if (n) send_all(fd, payload, n);
}

/* 0 and the whole of n bytes, 1 on EOF before any byte, -1 otherwise. */
static int recv_all(int fd, void *p, size_t n) {
  char *b = p;
  size_t got = 0;
  while (got < n) {
    ssize_t k = recv(fd, b + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) return got == 0 ? 1 : -1;
    if (k < 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

typedef struct {
  uint8_t status, op;
  uint32_t id, n;
  unsigned char *p; /* malloc'd, NUL-terminated */
} reply_t;

/* 0: a reply; 1: EOF; -1: timeout, reset or a bad frame. */
static int recv_reply(int fd, reply_t *r) {
  unsigned char h[PROTO_REP_HDR];
  uint32_t len;
  int rc = recv_all(fd, h, 4);
  if (rc) return rc;
  if (recv_all(fd, h + 4, PROTO_REP_HDR - 4)) return -1;
  len = proto_get_u32(h);
  if (len < PROTO_REP_FIXED || len > (32u << 20)) return -1;
  r->status = h[4];
  r->op = h[5];
  r->id = proto_get_u32(h + 8);
  r->n = len - PROTO_REP_FIXED;
  r->p = malloc(r->n + 1);
  if (!r->p) return -1;
  if (r->n && recv_all(fd, r->p, r->n)) {
    free(r->p);
    return -1;
  }
  r->p[r->n] = 0;
  return 0;
}

static reply_t expect_reply(int fd, const char *what) {
  reply_t r;
  int rc = recv_reply(fd, &r);
  CHECK(rc == 0, "%s: no reply (%s)", what,
        rc == 1 ? "connection closed" : "timeout, reset or bad frame");
  return r;
}

static void expect_status(int fd, uint8_t status, const char *what) {
  reply_t r = expect_reply(fd, what);
  CHECK(r.status == status, "%s: status %s (%s), want %s", what,
        proto_status_name(r.status), (char *)r.p, proto_status_name(status));
  free(r.p);
}

/* The server must close the connection (after any replies) within the
 * socket timeout. Returns the number of replies seen before the EOF. */
static int expect_eof(int fd, const char *what) {
  int n = 0;
  for (;;) {
    reply_t r;
    int rc = recv_reply(fd, &r);
    if (rc == 1) return n;
    CHECK(rc == 0, "%s: want the connection closed, got a timeout or reset", what);
    free(r.p);
    n++;
  }
}

static void ping_ok(int fd, uint32_t id) {
  reply_t r;
  send_req(fd, PROTO_OP_PING, id, 0, "pong", 4);
  r = expect_reply(fd, "ping");
  CHECK(r.status == PROTO_OK && r.id == id && r.n == 4 && !memcmp(r.p, "pong", 4),
        "ping: status %s id %u n %u", proto_status_name(r.status), r.id, r.n);
  free(r.p);
}

static void fill(unsigned char *p, size_t n, uint32_t seed) {
  size_t i;
  uint32_t x = seed * 2654435761u + 1;
  for (i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

static void checksum_ok(int fd, uint32_t id, size_t n) {
  unsigned char *buf = malloc(n ? n : 1);
  reply_t r;
  fill(buf, n, id);
  send_req(fd, PROTO_OP_CHECKSUM, id, 0, buf, (uint32_t)n);
  r = expect_reply(fd, "checksum");
  CHECK(r.status == PROTO_OK && r.id == id && r.n == 4 &&
            proto_get_u32(r.p) == proto_fnv1a(buf, n),
        "checksum of %zu bytes: status %s (%s)", n, proto_status_name(r.status),
        (char *)r.p);
  free(r.p);
  free(buf);
}

/* ---- cases ---------------------------------------------------------------- */

static const char *const small_pools[] = {
    "--slots", "64", "--slot-bytes", "16384", "--large-slots", "2",
    "--max-request", "262144", "--streams", "4", NULL};

static void case_load(void) {
  int rc;
  server_start(small_pools);
  {
    static const char *const mix[] = {"--threads", "2", "--conns", "8", "--depth", "8",
                                      "--requests", "150", "--size", "1:20000",
                                      "--idle-pings", "20", "--label", "mix", NULL};
    rc = run_client(mix);
    CHECK(rc == 0, "load client (mix) exited %d", rc);
  }
  {
    static const char *const big[] = {"--conns", "2", "--depth", "2", "--requests", "3",
                                      "--op", "add", "--size", "262144", "--no-ping",
                                      "--label", "max-size", NULL};
    rc = run_client(big);
    CHECK(rc == 0, "load client (max-size add) exited %d", rc);
  }
  {
    static const char *const sl[] = {"--conns", "4", "--depth", "4", "--requests", "5",
                                     "--op", "sleep", "--sleep-us", "2000",
                                     "--idle-pings", "5", "--label", "sleep", NULL};
    rc = run_client(sl);
    CHECK(rc == 0, "load client (sleep) exited %d", rc);
  }
  {
    static const char *const pg[] = {"--conns", "2", "--depth", "16", "--requests", "200",
                                     "--op", "ping", "--size", "0:4096", "--no-ping",
                                     "--label", "ping", NULL};
    rc = run_client(pg);
    CHECK(rc == 0, "load client (ping) exited %d", rc);
  }
  server_stop_ok();
}

static void case_malformed(void) {
  static const char *const o[] = {"--max-request", "65536", "--max-sleep-us", "50000",
                                  "--linger-ms", "200", NULL};
  unsigned char junk[8192];
  int fd, i, n;
  server_start(o);

  fd = sock_connect();
  /* resynchronisable errors: the connection goes on */
  send_req(fd, 99, 1, 0, "0123456789", 10);
  expect_status(fd, PROTO_BAD_OP, "unknown op");
  ping_ok(fd, 2);
  send_req(fd, PROTO_OP_ADD, 3, 1, "abcdef", 6);
  expect_status(fd, PROTO_BAD_REQUEST, "add of 6 bytes");
  checksum_ok(fd, 4, 3);
  {
    unsigned char h[PROTO_REQ_HDR + 4];
    proto_req_header(h, PROTO_OP_CHECKSUM, 5, 0, 4);
    h[5] = 1; /* flags */
    memcpy(h + PROTO_REQ_HDR, "abcd", 4);
    send_all(fd, h, sizeof(h));
    expect_status(fd, PROTO_BAD_REQUEST, "nonzero flags");
  }
  send_req(fd, PROTO_OP_SLEEP, 6, 1000000, NULL, 0);
  expect_status(fd, PROTO_BAD_REQUEST, "sleep above the maximum");
  send_req(fd, PROTO_OP_SLEEP, 7, 0, "x", 1);
  expect_status(fd, PROTO_BAD_REQUEST, "sleep with a payload");
  fill(junk, 5000, 7);
  send_req(fd, PROTO_OP_PING, 8, 0, junk, 5000);
  expect_status(fd, PROTO_BAD_REQUEST, "ping above 4096 bytes");
  checksum_ok(fd, 9, 0);
  checksum_ok(fd, 10, 65536);
  {
    /* a request that arrives one byte at a time */
    unsigned char req[PROTO_REQ_HDR + 12];
    reply_t r;
    proto_req_header(req, PROTO_OP_ADD, 11, 5, 12);
    for (i = 0; i < 12; i++) req[PROTO_REQ_HDR + i] = (unsigned char)i;
    for (i = 0; i < (int)sizeof(req); i++) {
      send_all(fd, req + i, 1);
      sleep_ms(2);
    }
    r = expect_reply(fd, "byte-by-byte add");
    CHECK(r.status == PROTO_OK && r.n == 12 &&
              proto_get_u32(r.p) == proto_get_u32(req + PROTO_REQ_HDR) + 5 &&
              proto_get_u32(r.p + 8) == proto_get_u32(req + PROTO_REQ_HDR + 8) + 5,
          "byte-by-byte add: status %s", proto_status_name(r.status));
    free(r.p);
  }
  close(fd);

  /* errors that end the connection: a reply, then a clean close */
  fd = sock_connect();
  {
    unsigned char h[PROTO_REQ_HDR];
    proto_req_header(h, PROTO_OP_CHECKSUM, 20, 0, 0);
    proto_put_u32(h, 3); /* len < 12 */
    send_all(fd, h, sizeof(h));
  }
  expect_status(fd, PROTO_MALFORMED, "frame length 3");
  CHECK(expect_eof(fd, "after MALFORMED") == 0, "replies after MALFORMED");
  close(fd);

  fd = sock_connect();
  {
    unsigned char h[PROTO_REQ_HDR];
    proto_req_header(h, PROTO_OP_CHECKSUM, 21, 0, 65537);
    send_all(fd, h, sizeof(h));
  }
  expect_status(fd, PROTO_TOO_LARGE, "payload of max + 1 bytes");
  expect_eof(fd, "after TOO_LARGE");
  close(fd);

  fd = sock_connect();
  {
    unsigned char h[PROTO_REQ_HDR];
    proto_req_header(h, PROTO_OP_ADD, 22, 0, 0);
    proto_put_u32(h, 0xFFFFFFFFu);
    send_all(fd, h, sizeof(h));
    send_all(fd, junk, 1000); /* input the server will not read: lingering */
  }
  expect_status(fd, PROTO_TOO_LARGE, "length 2^32-1");
  expect_eof(fd, "after TOO_LARGE (4 GiB)");
  close(fd);

  /* garbage, then our FIN: whatever it parses as, the server must close */
  for (i = 0; i < 4; i++) {
    fd = sock_connect();
    fill(junk, sizeof(junk), 100 + (uint32_t)i);
    if (i == 1) junk[0] = junk[1] = junk[2] = junk[3] = 0; /* len 0 */
    if (i == 2) proto_put_u32(junk, 200), junk[4] = PROTO_OP_CHECKSUM, junk[5] = 0,
                junk[6] = junk[7] = 0; /* one valid frame, then noise */
    send_all(fd, junk, sizeof(junk));
    shutdown(fd, SHUT_WR);
    n = expect_eof(fd, "garbage");
    note("garbage #%d: %d replies, then closed", i, n);
    close(fd);
  }

  /* a partial header, then gone */
  fd = sock_connect();
  send_all(fd, "\x20\x00", 2);
  close(fd);
  /* GPU work whose client is gone before the reply */
  fd = sock_connect();
  fill(junk, sizeof(junk), 5);
  for (i = 0; i < 8; i++) send_req(fd, PROTO_OP_CHECKSUM, 30 + (uint32_t)i, 0, junk, 8192);
  for (i = 0; i < 8; i++) send_req(fd, PROTO_OP_SLEEP, 40 + (uint32_t)i, 20000, NULL, 0);
  close(fd);
  /* and one that resets */
  fd = sock_connect();
  for (i = 0; i < 8; i++) send_req(fd, PROTO_OP_SLEEP, 50 + (uint32_t)i, 10000, NULL, 0);
  {
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  close(fd);
  sleep_ms(50);

  /* still serving */
  fd = sock_connect();
  ping_ok(fd, 60);
  checksum_ok(fd, 61, 1000);
  close(fd);
  server_stop_ok();
}

typedef struct {
  int fd;
  int count;
  size_t size;
} flood_t;

static void *flood_pings(void *arg) {
  flood_t *f = arg;
  unsigned char *buf = malloc(PROTO_REQ_HDR + f->size);
  int i;
  for (i = 0; i < f->count; i++) {
    proto_req_header(buf, PROTO_OP_PING, 1000 + (uint32_t)i, 0, (uint32_t)f->size);
    memset(buf + PROTO_REQ_HDR, i & 0xff, f->size);
    send_all(f->fd, buf, PROTO_REQ_HDR + f->size);
  }
  free(buf);
  return NULL;
}

static void case_limits(void) {
  static const char *const o[] = {"--max-conns", "4", "--pipeline", "4", "--slots", "8",
                                  "--slot-bytes", "4096", "--large-slots", "1",
                                  "--max-request", "16384", "--write-queue", "65536",
                                  "--linger-ms", "200", NULL};
  int fds[4], extra[2], i, k;
  double deadline;
  unsigned char *buf;
  server_start(o);

  for (i = 0; i < 4; i++) {
    fds[i] = sock_connect();
    ping_ok(fds[i], (uint32_t)i + 1);
  }
  for (i = 0; i < 2; i++) {
    extra[i] = sock_connect();
    expect_status(extra[i], PROTO_BUSY, "connection above --max-conns");
    CHECK(expect_eof(extra[i], "after BUSY") == 0, "replies after BUSY");
    close(extra[i]);
  }
  /* a freed place is taken again */
  close(fds[0]);
  deadline = now_s() + 5.0 * slow;
  for (;;) {
    reply_t r;
    fds[0] = sock_connect();
    send_req(fds[0], PROTO_OP_PING, 9, 0, NULL, 0);
    r = expect_reply(fds[0], "ping after a close");
    free(r.p);
    if (r.status == PROTO_OK) break;
    CHECK(r.status == PROTO_BUSY, "status %s", proto_status_name(r.status));
    close(fds[0]);
    CHECK(now_s() < deadline, "the closed connection's place was not freed");
    sleep_ms(20);
  }

  /* 100 pipelined requests against --pipeline 4 and 8 slots */
  buf = malloc(100 * 4096);
  for (i = 0; i < 100; i++) {
    fill(buf + (size_t)i * 4096, 4096, (uint32_t)i);
    send_req(fds[1], PROTO_OP_CHECKSUM, 100 + (uint32_t)i, 0, buf + (size_t)i * 4096, 4096);
  }
  {
    int seen[100] = {0};
    for (k = 0; k < 100; k++) {
      reply_t r = expect_reply(fds[1], "pipelined checksum");
      int j = (int)r.id - 100;
      CHECK(r.status == PROTO_OK && j >= 0 && j < 100 && !seen[j] && r.n == 4 &&
                proto_get_u32(r.p) == proto_fnv1a(buf + (size_t)j * 4096, 4096),
            "pipelined checksum: id %u status %s", r.id, proto_status_name(r.status));
      seen[j] = 1;
      free(r.p);
    }
  }
  /* two connections share the one large slot */
  for (k = 2; k < 4; k++)
    for (i = 0; i < 5; i++)
      send_req(fds[k], PROTO_OP_CHECKSUM, 200 + (uint32_t)i, 0, buf + (size_t)i * 16000, 16000);
  for (k = 2; k < 4; k++)
    for (i = 0; i < 5; i++) {
      reply_t r = expect_reply(fds[k], "large checksum");
      int j = (int)r.id - 200;
      CHECK(r.status == PROTO_OK && j >= 0 && j < 5 &&
                proto_get_u32(r.p) == proto_fnv1a(buf + (size_t)j * 16000, 16000),
            "large checksum: id %u status %s", r.id, proto_status_name(r.status));
      free(r.p);
    }
  free(buf);

  /* a client that does not read: the server stops reading too (write queue
   * bound), and nothing is lost once it reads again */
  {
    flood_t f = {fds[1], 3000, 4096};
    pthread_t t;
    int answered = 0;
    CHECK(pthread_create(&t, NULL, flood_pings, &f) == 0, "pthread_create");
    sleep_ms(300);
    for (i = 0; i < f.count; i++) {
      reply_t r = expect_reply(fds[1], "flooded ping");
      CHECK(r.status == PROTO_OK && r.id == 1000 + (uint32_t)i && r.n == 4096 &&
                r.p[0] == (unsigned char)(i & 0xff),
            "flooded ping %d: id %u status %s", i, r.id, proto_status_name(r.status));
      free(r.p);
      answered++;
    }
    pthread_join(t, NULL);
    note("%d pings of 4 KiB answered in order after the write-queue pause", answered);
  }
  for (i = 0; i < 4; i++) {
    ping_ok(fds[i], 5000 + (uint32_t)i);
    close(fds[i]);
  }
  server_stop_ok();
}

/* Sends SIGTERM with GPU work in flight: every received request is
 * answered, connections are closed, the server exits 0 after the work. */
static void case_shutdown(void) {
  static const char *const o[] = {"--streams", "2", "--linger-ms", "300",
                                  "--max-sleep-us", "1000000", NULL};
  static const char *const o2[] = {"--streams", "1", "--drain-timeout-ms", "20000", NULL};
  int a[2], part, idle, i, k, rc, fd;
  unsigned char buf[1000];
  double t_sig, t_exit;
  int answered = 0, after = 0, got[2] = {0, 0}, seen[2][8];

  memset(seen, 0, sizeof(seen));
  server_start(o);
  for (k = 0; k < 2; k++) {
    a[k] = sock_connect();
    for (i = 0; i < 4; i++) send_req(a[k], PROTO_OP_SLEEP, (uint32_t)i, 250000, NULL, 0);
    for (i = 4; i < 8; i++) {
      fill(buf, sizeof(buf), (uint32_t)(k * 8 + i));
      send_req(a[k], PROTO_OP_CHECKSUM, (uint32_t)i, 0, buf, sizeof(buf));
    }
  }
  part = sock_connect();
  {
    unsigned char h[PROTO_REQ_HDR];
    proto_req_header(h, PROTO_OP_CHECKSUM, 77, 0, 1000);
    send_all(part, h, sizeof(h));
    send_all(part, buf, 10); /* 990 bytes never come */
  }
  idle = sock_connect();
  /* A ping behind them: the server parses in order, so once it is answered
   * all 8 requests of the connection have been taken (1 s of GPU work on
   * 2 streams: still running at the signal). */
  for (k = 0; k < 2; k++) {
    send_req(a[k], PROTO_OP_PING, 99, 0, NULL, 0);
    for (;;) {
      reply_t r = expect_reply(a[k], "ping behind the GPU requests");
      CHECK(r.status == PROTO_OK, "before the signal: status %s", proto_status_name(r.status));
      free(r.p);
      if (r.id == 99) break;
      CHECK(r.id < 8 && !seen[k][r.id], "before the signal: id %u", r.id);
      seen[k][r.id] = 1; /* answered early: fine */
      got[k]++;
    }
  }

  t_sig = now_s();
  CHECK(kill(server_pid, SIGTERM) == 0, "kill: %s", strerror(errno));
  /* the listener goes away at once */
  sleep_ms(50 * slow);
  rc = sock_connect_rc(&fd);
  if (rc == 0) {
    CHECK(expect_eof(fd, "connection after SIGTERM") == 0, "a reply after SIGTERM");
    close(fd);
    note("a connection after SIGTERM was accepted by the backlog, then closed");
  } else { /* refused; reset: it was in the backlog as the listener closed */
    CHECK(rc == -ECONNREFUSED || rc == -ECONNRESET, "connect after SIGTERM: %s",
          strerror(-rc));
  }

  for (k = 0; k < 2; k++) {
    while (got[k] < 8) {
      reply_t r = expect_reply(a[k], "request in flight at SIGTERM");
      CHECK(r.status == PROTO_OK && r.id < 8 && !seen[k][r.id],
            "in flight: id %u status %s (%s)", r.id, proto_status_name(r.status),
            (char *)r.p);
      if (r.id >= 4) {
        fill(buf, sizeof(buf), (uint32_t)(k * 8) + r.id);
        CHECK(r.n == 4 && proto_get_u32(r.p) == proto_fnv1a(buf, sizeof(buf)),
              "checksum in flight: wrong");
      }
      seen[k][r.id] = 1;
      got[k]++;
      after++;
      free(r.p);
    }
    answered += got[k];
    CHECK(expect_eof(a[k], "drained connection") == 0, "extra replies");
    close(a[k]);
  }
  CHECK(expect_eof(part, "partial request at SIGTERM") == 0, "a reply to a partial request");
  CHECK(expect_eof(idle, "idle connection at SIGTERM") == 0, "a reply on an idle connection");
  close(part);
  close(idle);
  rc = server_wait(15);
  t_exit = now_s();
  CHECK(rc == 0, "the server exited %d after draining, want 0", rc);
  note("%d requests answered, %d of them after SIGTERM; the server exited %.0f ms "
       "after SIGTERM", answered, after, (t_exit - t_sig) * 1e3);
  /* The drain: all 16 answered, then EOF, then exit 0. (It waited for
   * the GPU work: 1 s per stream, just taken when the signal went; no
   * clock is checked, so a slow machine cannot fail this.) */
  CHECK(answered == 16, "answered %d of 16", answered);

  /* A second signal does not wait for clients: exit 1, promptly, no crash.
   * One stream and 2 s of GPU work, so most of it is still queued then. The
   * second signal goes once the first has visibly been handled (the
   * listener is gone), and is another one: pending signals of one kind
   * merge, and valgrind, for one, delivers them late. */
  server_start(o2);
  fd = sock_connect();
  for (i = 0; i < 40; i++) send_req(fd, PROTO_OP_SLEEP, (uint32_t)i, 50000, NULL, 0);
  sleep_ms(60 * slow);
  t_sig = now_s();
  kill(server_pid, SIGINT);
  for (;;) {
    int probe = -1;
    rc = sock_connect_rc(&probe);
    if (rc == -ECONNREFUSED || rc == -ECONNRESET) break;
    CHECK(rc == 0, "connect during the drain: %s", strerror(-rc));
    close(probe);
    CHECK(now_s() - t_sig < 10.0 * slow, "the server did not stop listening after SIGINT");
    sleep_ms(10);
  }
  kill(server_pid, SIGTERM);
  {
    int n = expect_eof(fd, "forced close");
    note("forced close: %d of 40 answered before the connection closed", n);
    CHECK(n < 40, "every request was answered: the second signal was not seen");
  }
  close(fd);
  rc = server_wait(15);
  CHECK(rc == 1, "the server exited %d after a second signal, want 1", rc);
  note("exit 1, %.0f ms after the first signal", (now_s() - t_sig) * 1e3);
}

/* Simulation only: the next two kernel launches fail (SIMCUDA_FAIL). The
 * requests get GPU_ERROR replies naming the CUDA error, the connection and
 * the server go on. With --await once the upload was enqueued before the
 * failed launch: the server awaits it before reusing the slot. */
static void case_gpuerror(void) {
  reply_t r;
  unsigned char words[64];
  int fd;
  setenv("SIMCUDA_FAIL", "cuLaunchKernel=701:2", 1);
  server_start(small_pools);
  unsetenv("SIMCUDA_FAIL");
  fd = sock_connect();
  fill(words, sizeof(words), 3);
  send_req(fd, PROTO_OP_CHECKSUM, 1, 0, words, sizeof(words));
  r = expect_reply(fd, "checksum with a failing launch");
  CHECK(r.status == PROTO_GPU_ERROR && r.id == 1 && strstr((char *)r.p, "CUDA_ERROR"),
        "failing launch: status %s (%s)", proto_status_name(r.status), (char *)r.p);
  note("GPU_ERROR reply: %s", (char *)r.p);
  free(r.p);
  send_req(fd, PROTO_OP_ADD, 2, 1, words, sizeof(words));
  expect_status(fd, PROTO_GPU_ERROR, "add with a failing launch");
  checksum_ok(fd, 3, 5000);
  ping_ok(fd, 4);
  close(fd);
  server_stop_ok();
}

/* ---- main ------------------------------------------------------------------ */

static int gpu_available(void) {
  uvcuda_driver_info_t info;
  if (uvcuda_driver_info(&info) != 0) {
    fprintf(stderr, "e2e: no CUDA driver (%s): skipping\n",
            uvcuda_driver_dlerror() ? uvcuda_driver_dlerror() : "?");
    return 0;
  }
  if (support_driver_is_simulation()) {
    fprintf(stderr, "e2e: the loaded driver is the simulation: skipping\n");
    return 0;
  }
  if (info.device_count < 1) {
    fprintf(stderr, "e2e: no CUDA device: skipping\n");
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  int i, npos = 0;
  const char *pos[4] = {0};
  const char *s;
  struct sigaction sa;

  for (i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--gpu"))
      gpu = 1;
    else if (npos < 4)
      pos[npos++] = argv[i];
  }
  if (npos < 3) {
    fprintf(stderr, "usage: %s SERVER CLIENT load|malformed|limits|shutdown|gpuerror "
                    "[uvcuda|threadpool|once|hostfn] [--gpu]\n", argv[0]);
    return 2;
  }
  server_path = pos[0];
  client_path = pos[1];
  case_name = pos[2];
  if (pos[3]) mode = pos[3];
  if ((s = getenv("UVCUDA_TEST_SLOW")) && *s && strcmp(s, "0")) slow = 10;
  if (gpu && !gpu_available()) return 77;

  signal(SIGPIPE, SIG_IGN);
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm((unsigned)(120 * slow));
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/uvcuda-e2e-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }

  if (!strcmp(case_name, "load"))
    case_load();
  else if (!strcmp(case_name, "malformed"))
    case_malformed();
  else if (!strcmp(case_name, "limits"))
    case_limits();
  else if (!strcmp(case_name, "shutdown"))
    case_shutdown();
  else if (!strcmp(case_name, "gpuerror")) {
    if (gpu) {
      fprintf(stderr, "e2e: gpuerror needs the simulated driver: skipping\n");
      cleanup();
      return 77;
    }
    case_gpuerror();
  }
  else {
    fprintf(stderr, "e2e: unknown case %s\n", case_name);
    cleanup();
    return 2;
  }
  cleanup();
  fprintf(stderr, "e2e %s/%s: PASS\n", case_name, mode);
  return 0;
}
