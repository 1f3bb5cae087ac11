/* uvcuda/napi.h: promises settled by uvcuda futures, one uvcuda loop context
 * per napi_env. See include/uvcuda/napi.h for the contract.
 *
 * Per env (instance data): the loop context, a list of pending requests
 * (so teardown can close them) and a free list of requests whose future is
 * initialised and IDLE (uvcuda futures may be restarted after their
 * callback, which saves an init/close per promise).
 *
 * Teardown (async cleanup hook): close every future -> their callbacks run
 * with UVCUDA_ECANCELED (release only, no JS) -> close_cb frees each ->
 * the last one closes the loop context -> its close_cb removes the hook,
 * which lets Node go on tearing the env down. */
#define _GNU_SOURCE 1 /* dladdr, RTLD_NODELETE */
#include "uvcuda/napi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uvcuda_napi_ext.h"

#define ENV_MAGIC 0x75766e61u /* "uvna" */
#define IDLE_MAX 512          /* cached idle requests per env */
#define KEEP_INLINE 4

struct req;

struct napi_state {
  uint32_t magic;
  napi_env env;
  pthread_t thread;   /* the env's JS thread: the one that made this state */
  uvcuda_loop_t ul;
  int ul_ready;       /* uvcuda_loop_init succeeded */
  int ul_closed;      /* its close_cb ran */
  int closing;        /* teardown started */
  int have_opts;
  uvcuda_options_t opts;
  napi_async_cleanup_hook_handle hook;
  struct req *live;   /* started, callback not yet run */
  struct req *idle;   /* IDLE futures ready for reuse */
  size_t nidle;
  size_t nfutures;    /* initialised, close_cb not yet run */
  uvcuda_napi_stats_t stats;
  void *user_data;
  napi_finalize user_finalize;
  void *user_hint;
};

struct req {
  uvcuda_future_t fut; /* fut.data == this */
  struct napi_state *st;
  struct req *next, *prev;
  napi_deferred deferred;
  napi_async_context actx;
  uvcuda_napi_enqueue_cb enqueue;
  uvcuda_napi_convert_cb convert;
  uvcuda_napi_release_cb release;
  void *data;
  napi_ref *keep;
  size_t nkeep;
  napi_ref keep_inline[KEEP_INLINE];
  /* An enqueue that failed: uvcuda calls back at once, while what it put
   * on the stream before failing, and the work ahead of it, may still run
   * with what `keep` holds. A second future with no op, started right
   * after it (its marker is next on the stream), says when that is done:
   * the promise rejects then, in stream order. */
  int enqueue_failed;  /* the enqueue returned an error */
  struct req *drain;   /* that second future, until its callback */
  struct req *drained; /* in the drain: the await it drains for */
  int failed_with;     /* its callback came (never with 0 here): its status */
};

/* ---- threads ----------------------------------------------------------- */

/* A call from another thread than the env's enters V8 there, and V8 aborts
 * the process; so each is refused once the env's state says whose it is. */
static int foreign_thread(const struct napi_state *st) {
  return st->magic == ENV_MAGIC && !pthread_equal(st->thread, pthread_self());
}

static struct napi_state *dead_of(napi_env env);

/* The same, from env alone: reading the instance data slot does not enter
 * V8. An env being torn down on this thread is this thread's. */
static int off_thread(napi_env env) {
  void *p = NULL;
  if (dead_of(env) != NULL) return 0;
  if (napi_get_instance_data(env, &p) != napi_ok || p == NULL) return 0;
  return foreign_thread(p);
}

/* ---- errors ------------------------------------------------------------ */

static int is_load_error(int err) {
  return err == UVCUDA_ENODRIVER || err == UVCUDA_ENOSYM ||
         err == UVCUDA_EDRIVEROLD;
}

/* String(err) of an error shown as Node core shows its own. */
static napi_value coded_to_string(napi_env env, napi_callback_info info) {
  static const char *const key[3] = {"name", "code", "message"};
  napi_value self, v, out = NULL;
  char part[3][512], text[1600];
  size_t len;
  int i;
  if (napi_get_cb_info(env, info, NULL, NULL, &self, NULL) != napi_ok) return NULL;
  for (i = 0; i < 3; i++) {
    part[i][0] = '\0';
    if (napi_get_named_property(env, self, key[i], &v) == napi_ok &&
        napi_coerce_to_string(env, v, &v) == napi_ok)
      napi_get_value_string_utf8(env, v, part[i], sizeof(part[i]), &len);
  }
  snprintf(text, sizeof(text), "%s [%s]: %s", part[0], part[1], part[2]);
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &out);
  return out;
}

/* Node core's errors name their code where they are printed: the stack's
 * first line and String(err) read `TypeError [ERR_X]: message`, while
 * err.name stays 'TypeError'. The stack is formatted at its first read,
 * with the name of that moment (as Node's addCodeToName did), so this is
 * called once the message is final. */
napi_status uvcuda_napi__show_code(napi_env env, napi_value err) {
  napi_value name, code, shown, key, stack, fn;
  napi_property_descriptor d;
  char n[64], c[96], both[176];
  size_t len;
  napi_status s;
  if ((s = napi_get_named_property(env, err, "name", &name)) != napi_ok ||
      (s = napi_get_named_property(env, err, "code", &code)) != napi_ok ||
      (s = napi_get_value_string_utf8(env, name, n, sizeof(n), &len)) != napi_ok ||
      (s = napi_get_value_string_utf8(env, code, c, sizeof(c), &len)) != napi_ok)
    return s;
  snprintf(both, sizeof(both), "%s [%s]", n, c);
  if ((s = napi_create_string_utf8(env, both, NAPI_AUTO_LENGTH, &shown)) != napi_ok ||
      (s = napi_create_string_utf8(env, "name", NAPI_AUTO_LENGTH, &key)) != napi_ok ||
      (s = napi_set_property(env, err, key, shown)) != napi_ok ||
      (s = napi_get_named_property(env, err, "stack", &stack)) != napi_ok ||
      (s = napi_delete_property(env, err, key, NULL)) != napi_ok ||
      (s = napi_create_function(env, "toString", NAPI_AUTO_LENGTH, coded_to_string,
                                NULL, &fn)) != napi_ok)
    return s;
  memset(&d, 0, sizeof(d));
  d.utf8name = "toString";
  d.value = fn;
  d.attributes = napi_writable | napi_configurable; /* not enumerable */
  return napi_define_properties(env, err, 1, &d);
}

/* err's Error with message msg: code, errno, cudaResult, shown as Node
 * shows its own. */
napi_status uvcuda_napi__error_msg(napi_env env, int err, const char *msg,
                                   napi_value *error) {
  napi_value code, text, num;
  napi_status s;
  int r;
  if ((s = napi_create_string_utf8(env, uvcuda_err_name(err), NAPI_AUTO_LENGTH,
                                   &code)) != napi_ok ||
      (s = napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text)) != napi_ok ||
      (s = napi_create_error(env, code, text, error)) != napi_ok ||
      (s = napi_create_int32(env, err, &num)) != napi_ok ||
      (s = napi_set_named_property(env, *error, "errno", num)) != napi_ok)
    return s;
  if ((r = uvcuda_cuda_result(err)) != 0) {
    if ((s = napi_create_int32(env, r, &num)) != napi_ok ||
        (s = napi_set_named_property(env, *error, "cudaResult", num)) != napi_ok)
      return s;
  }
  return uvcuda_napi__show_code(env, *error);
}

/* err's Error; `why` (NULL: none) follows the code's text, as the
 * driver's dlerror does for a load error. */
static napi_status create_error(napi_env env, int err, const char *why,
                                napi_value *error) {
  char msg[768];
  const char *detail = why;

  if (env == NULL || error == NULL) return napi_invalid_arg;
  *error = NULL;
  if (off_thread(env)) return napi_generic_failure;
  if (detail == NULL && is_load_error(err)) detail = uvcuda_driver_dlerror();
  if (detail != NULL)
    snprintf(msg, sizeof(msg), "%s (%s)", uvcuda_strerror(err), detail);
  else
    snprintf(msg, sizeof(msg), "%s", uvcuda_strerror(err));
  return uvcuda_napi__error_msg(env, err, msg, error);
}

napi_status uvcuda_napi_create_error(napi_env env, int err, napi_value *error) {
  return create_error(env, err, NULL, error);
}

static napi_status throw_why(napi_env env, int err, const char *why) {
  napi_value e;
  napi_status s = create_error(env, err, why, &e);
  if (s != napi_ok) return s;
  if ((s = napi_throw(env, e)) != napi_ok) return s;
  return napi_pending_exception;
}

napi_status uvcuda_napi_throw(napi_env env, int err) {
  return throw_why(env, err, NULL);
}

/* ---- residency --------------------------------------------------------- */

/* Node dlclose()s an addon that only worker threads loaded once the last of
 * them ends (nodejs/node#25577). This code may still run after that, on
 * threads the envs neither own nor can join then: CUDA host functions that
 * uvcuda enqueued run on the driver's thread whenever the GPU gets to them
 * (a terminated worker's cancelled work may still be queued, and a closed
 * loop's tickets run and free themselves), and the addon's process-wide
 * threads (uvcuda's reactor, bindings/node's reaper) are shared by every
 * env. Joining our own threads in the last env's cleanup would leave the
 * driver's thread out and make a worker's exit wait for the device. So the
 * shared object holding this helper keeps itself resident, on the first
 * helper call of the process (before any thread or host function of it
 * exists): it dlopen()s itself again with RTLD_NOLOAD | RTLD_NODELETE, what
 * -Wl,-z,nodelete does at link time, but holding as well for any addon that
 * compiles this helper in and links without that flag. Node's dlclose then
 * leaves it mapped until the process exits, threads and state included; a
 * later worker's require gets this same copy. Cost: the addon's pages stay
 * mapped once its last worker ended. */
static pthread_once_t resident_once = PTHREAD_ONCE_INIT;

static void make_resident(void) {
  Dl_info info;
  /* Any address inside this shared object names it. */
  if (dladdr(&resident_once, &info) == 0 || info.dli_fname == NULL) return;
  /* The handle is never closed: that reference, too, keeps it. */
  if (dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE) == NULL)
    fprintf(stderr, "uvcuda: cannot keep %s loaded (%s): unloading it while "
                    "GPU work is in flight may crash\n",
            info.dli_fname, dlerror());
}

/* ---- per-env state ----------------------------------------------------- */

/* Once Node has finalized the env's instance data, its slot cannot be
 * read: Node 20 deletes the reference that holds it and still reads
 * through it (freed memory: NULL, a stale pointer or garbage). A helper
 * call from the user's finalizer, or from a napi_wrap finalizer Node runs
 * later, must neither read it nor take the env for a fresh one (setting
 * instance data on a dying env: a double free). So the finalized state
 * stays the thread's until it exits, and every read of the slot asks it
 * first: an env runs on one thread (the main one, or its worker's), which
 * runs no other env after it. */
static pthread_once_t dead_once = PTHREAD_ONCE_INIT;
static pthread_key_t dead_key;
static int dead_key_ok;

static void dead_free(void *p) {
  struct napi_state *st = p;
  /* uvcuda's handles still point into a state whose loop did not close. */
  if (st->ul_ready && !st->ul_closed) return;
  st->magic = 0;
  free(st);
}

static void dead_init(void) { dead_key_ok = pthread_key_create(&dead_key, dead_free) == 0; }

static struct napi_state *dead_of(napi_env env) {
  struct napi_state *st;
  pthread_once(&dead_once, dead_init);
  if (!dead_key_ok || (st = pthread_getspecific(dead_key)) == NULL) return NULL;
  return st->env == env ? st : NULL;
}

static void state_finalize(napi_env env, void *data, void *hint) {
  struct napi_state *st = data, *old;
  (void)hint;
  if (st == NULL || st->magic != ENV_MAGIC) return;
  st->closing = 1;
  pthread_once(&dead_once, dead_init);
  if (dead_key_ok) {
    if ((old = pthread_getspecific(dead_key)) != NULL) dead_free(old);
    pthread_setspecific(dead_key, st);
  }
  /* Its finalizer may still read the data (uvcuda_napi_get_data). */
  if (st->user_finalize) st->user_finalize(env, st->user_data, st->user_hint);
  st->user_finalize = NULL;
  st->user_data = NULL;
  if (!dead_key_ok) dead_free(st); /* no key: as before, freed now */
}

static napi_status state_get(napi_env env, struct napi_state **out) {
  struct napi_state *st = NULL;
  void *p = NULL;
  napi_status s;

  if (env == NULL || out == NULL) return napi_invalid_arg;
  pthread_once(&resident_once, make_resident);
  if ((st = dead_of(env)) != NULL) { /* being torn down: not the slot */
    *out = st;
    return napi_ok;
  }
  if ((s = napi_get_instance_data(env, &p)) != napi_ok) return s;
  if (p != NULL) {
    st = p;
    /* Nothing can be thrown from another thread. */
    if (foreign_thread(st)) return napi_generic_failure;
    if (st->magic != ENV_MAGIC) {
      napi_throw_error(env, "ERR_UVCUDA_INSTANCE_DATA",
                       "the env's instance data is not uvcuda's: use "
                       "uvcuda_napi_set_data instead of napi_set_instance_data");
      return napi_pending_exception;
    }
    *out = st;
    return napi_ok;
  }
  st = calloc(1, sizeof(*st));
  if (st == NULL) return uvcuda_napi_throw(env, UVCUDA_ENOMEM);
  st->magic = ENV_MAGIC;
  st->env = env;
  st->thread = pthread_self();
  if ((s = napi_set_instance_data(env, st, state_finalize, NULL)) != napi_ok) {
    free(st);
    return s;
  }
  *out = st;
  return napi_ok;
}

static void on_env_cleanup(napi_async_cleanup_hook_handle hook, void *arg);

/* Which environment variable alone makes `in` (NULL: defaults) fail to
 * resolve: each is tried with the others' parts set by options. NULL if
 * none does. */
static const char *env_culprit(const uvcuda_options_t *in) {
  const uint32_t both = UVCUDA_OPT_ADAPTIVE | UVCUDA_OPT_NO_ADAPTIVE;
  static const char *const vars[3] = {"UVCUDA_COMPLETION", "UVCUDA_SPIN_BUDGET_US",
                                      "UVCUDA_ADAPTIVE"};
  uvcuda_options_t base, o, r;
  int i;

  if (in == NULL) {
    uvcuda_options_init(&base);
    in = &base;
  }
  for (i = 0; i < 3; i++) {
    o = *in;
    if (i != 0 && o.completion == UVCUDA_COMPLETION_DEFAULT)
      o.completion = UVCUDA_COMPLETION_AUTO;
    if (i != 1 && o.spin_budget_us == -1) o.spin_budget_us = 20;
    if (i != 2 && !(o.flags & both)) o.flags |= UVCUDA_OPT_NO_ADAPTIVE;
    if (uvcuda_options_resolve(&o, &r) != 0) {
      const char *v = getenv(vars[i]);
      if (v != NULL && v[0] != '\0') return vars[i];
    }
  }
  return NULL;
}

/* The first field of the options passed to uvcuda_napi_configure whose
 * default makes them valid (its value into *v), else NULL. */
static const char *field_culprit(const uvcuda_options_t *in, long long *v) {
  uvcuda_options_t o, r;
#define TRY(f, dflt)                                                    \
  o = *in;                                                              \
  o.f = dflt;                                                           \
  if (in->f != (dflt) && uvcuda_options_resolve(&o, &r) == 0) {        \
    *v = (long long)in->f;                                              \
    return #f;                                                          \
  }
  TRY(completion, UVCUDA_COMPLETION_DEFAULT)
  TRY(spin_budget_us, -1)
  TRY(probe_interval_us, -1)
  TRY(reactor_spin_us, -1)
  TRY(reactor_yield_us, -1)
  TRY(reactor_sleep_max_us, -1)
  TRY(reactor_backoff_pct, -1)
  TRY(flags, 0u)
#undef TRY
  return NULL;
}

/* uvcuda_napi_throw, naming the environment variable or the option at
 * fault, if any. */
static napi_status throw_opts_error(napi_env env, int err, const uvcuda_options_t *in) {
  char msg[256];
  const char *var = NULL, *field = NULL;
  long long v = 0;
  napi_value e;
  napi_status s;

  if (err == UVCUDA_EINVAL || err == UVCUDA_ESTRATEGY) var = env_culprit(in);
  if (var == NULL && in != NULL && (err == UVCUDA_EINVAL || err == UVCUDA_ESTRATEGY))
    field = field_culprit(in, &v);
  if (var == NULL && field == NULL) return uvcuda_napi_throw(env, err);
  if (var != NULL)
    snprintf(msg, sizeof(msg), "%s: $%s is '%.64s'", uvcuda_strerror(err), var,
             getenv(var));
  else
    snprintf(msg, sizeof(msg), "%s: the option %s is %lld (uvcuda_options_t, see "
             "uvcuda.h for its range)", uvcuda_strerror(err), field, v);
  if ((s = uvcuda_napi__error_msg(env, err, msg, &e)) != napi_ok ||
      (s = napi_throw(env, e)) != napi_ok)
    return s;
  return napi_pending_exception;
}

napi_status uvcuda_napi__settings(napi_env env, uvcuda_loop_t **loop,
                                  uvcuda_completion_t *completion,
                                  uint64_t *spin_budget_ns, int *adaptive) {
  struct napi_state *st = NULL;
  uvcuda_options_t r;
  napi_status s;
  int err;

  if ((s = state_get(env, &st)) != napi_ok) return s;
  *loop = NULL;
  if (st->ul_ready && !st->closing) {
    *loop = &st->ul;
    *completion = uvcuda_loop_completion(&st->ul);
    *spin_budget_ns = uvcuda_loop_spin_budget_ns(&st->ul);
    *adaptive = uvcuda_loop_adaptive(&st->ul) != 0;
    return napi_ok;
  }
  if ((err = uvcuda_options_resolve(st->have_opts ? &st->opts : NULL, &r)) != 0)
    return throw_opts_error(env, err, st->have_opts ? &st->opts : NULL);
  *completion = r.completion;
  *spin_budget_ns = (uint64_t)r.spin_budget_us * 1000u;
  *adaptive = (r.flags & UVCUDA_OPT_ADAPTIVE) != 0;
  return napi_ok;
}

napi_status uvcuda_napi_loop(napi_env env, uvcuda_loop_t **loop) {
  struct napi_state *st = NULL;
  uv_loop_t *uv = NULL;
  napi_status s;
  int err;

  if (loop == NULL) return napi_invalid_arg;
  *loop = NULL;
  if ((s = state_get(env, &st)) != napi_ok) return s;
  /* From the cleanup hook on, JS can't run: nothing can be thrown (a
   * napi_wrap finalizer runs before the instance data's). */
  if (st->closing) return napi_generic_failure;
  if (!st->ul_ready) {
    if ((s = napi_get_uv_event_loop(env, &uv)) != napi_ok) return s;
    err = uvcuda_loop_init(uv, &st->ul, st->have_opts ? &st->opts : NULL);
    if (err != 0) return throw_opts_error(env, err, st->have_opts ? &st->opts : NULL);
    st->ul.data = st;
    st->ul_ready = 1;
    s = napi_add_async_cleanup_hook(env, on_env_cleanup, st, &st->hook);
    if (s != napi_ok) {
      /* Without the hook nothing would close the context at teardown. */
      st->ul_ready = 0;
      if (uvcuda_loop_close(&st->ul, NULL) != 0) st->ul_ready = 1;
      return s;
    }
  }
  *loop = &st->ul;
  return napi_ok;
}

napi_status uvcuda_napi_configure(napi_env env, const uvcuda_options_t *opts) {
  struct napi_state *st = NULL;
  napi_status s;

  if ((s = state_get(env, &st)) != napi_ok) return s;
  if (st->closing) return napi_generic_failure; /* JS can't run: no throw */
  if (st->ul_ready)
    return throw_why(env, UVCUDA_EBUSY,
                     "configure before the first awaited call of this thread: "
                     "its loop context is open, with the settings it had");
  if (opts == NULL) {
    st->have_opts = 0;
  } else {
    st->opts = *opts;
    st->have_opts = 1;
  }
  return napi_ok;
}

napi_status uvcuda_napi_set_data(napi_env env, void *data, napi_finalize finalize,
                                 void *hint) {
  struct napi_state *st = NULL;
  napi_status s;
  if ((s = state_get(env, &st)) != napi_ok) return s;
  /* Tearing down: the data would be finalized late or never; it stays the
   * caller's. */
  if (st->closing) return napi_generic_failure;
  st->user_data = data;
  st->user_finalize = finalize;
  st->user_hint = hint;
  return napi_ok;
}

napi_status uvcuda_napi_get_data(napi_env env, void **data) {
  struct napi_state *st = NULL;
  napi_status s;
  if (data == NULL) return napi_invalid_arg;
  *data = NULL;
  if ((s = state_get(env, &st)) != napi_ok) return s;
  *data = st->user_data;
  return napi_ok;
}

int uvcuda_napi_closing(napi_env env) {
  void *p = NULL;
  if (env == NULL) return 0;
  if (dead_of(env) != NULL) return 1;
  if (napi_get_instance_data(env, &p) != napi_ok || p == NULL) return 0;
  if (((struct napi_state *)p)->magic != ENV_MAGIC) return 0;
  if (foreign_thread(p)) return 1; /* nothing may be started from there */
  return ((struct napi_state *)p)->closing;
}

napi_status uvcuda_napi__count_rejected(napi_env env) {
  uvcuda_loop_t *ul;
  struct napi_state *st;
  napi_status s;
  /* Opened as an await opens it: configure() is too late from here on, and
   * the options' error (thrown) is the call's, uncounted, as for an await. */
  if ((s = uvcuda_napi_loop(env, &ul)) != napi_ok) return s;
  st = ul->data;
  st->stats.awaited++;
  st->stats.rejected++;
  return napi_ok;
}

napi_status uvcuda_napi_stats(napi_env env, uvcuda_napi_stats_t *stats) {
  struct napi_state *st = NULL;
  napi_status s;
  if (stats == NULL) return napi_invalid_arg;
  memset(stats, 0, sizeof(*stats));
  if ((s = state_get(env, &st)) != napi_ok) return s;
  *stats = st->stats;
  return napi_ok;
}

/* ---- requests ---------------------------------------------------------- */

static void live_add(struct napi_state *st, struct req *r) {
  r->prev = NULL;
  r->next = st->live;
  if (st->live) st->live->prev = r;
  st->live = r;
}

static void live_del(struct napi_state *st, struct req *r) {
  if (r->prev) r->prev->next = r->next; else st->live = r->next;
  if (r->next) r->next->prev = r->prev;
  r->next = r->prev = NULL;
}

static void on_loop_closed(uvcuda_loop_t *ul) {
  struct napi_state *st = ul->data;
  napi_async_cleanup_hook_handle hook = st->hook;
  st->ul_closed = 1;
  st->hook = NULL;
  if (hook) napi_remove_async_cleanup_hook(hook);
}

static void close_loop(struct napi_state *st) {
  int err = uvcuda_loop_close(&st->ul, on_loop_closed);
  if (err != 0) {
    /* Cannot happen once every future is closed; do not hang teardown. */
    napi_async_cleanup_hook_handle hook = st->hook;
    fprintf(stderr, "uvcuda: uvcuda_loop_close at env teardown: %s\n",
            uvcuda_err_name(err));
    st->hook = NULL;
    if (hook) napi_remove_async_cleanup_hook(hook);
  }
}

static void on_req_closed(uvcuda_future_t *f) {
  struct req *r = f->data;
  struct napi_state *st = r->st;
  free(r);
  st->nfutures--;
  if (st->closing && st->nfutures == 0) close_loop(st);
}

static struct req *req_get(struct napi_state *st) {
  struct req *r = st->idle;
  if (r != NULL) {
    st->idle = r->next;
    st->nidle--;
    r->next = NULL;
    return r;
  }
  r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  if (uvcuda_future_init(&st->ul, &r->fut) != 0) {
    free(r);
    return NULL;
  }
  r->fut.data = r;
  r->st = st;
  st->nfutures++;
  return r;
}

/* The future is IDLE (inside or after its callback): cache or close it. */
static void req_put(struct napi_state *st, struct req *r) {
  r->enqueue = NULL;
  r->convert = NULL;
  r->release = NULL;
  r->data = NULL;
  r->deferred = NULL;
  r->actx = NULL;
  r->keep = NULL;
  r->nkeep = 0;
  r->enqueue_failed = r->failed_with = 0;
  r->drain = r->drained = NULL;
  if (!st->closing && st->nidle < IDLE_MAX) {
    r->prev = NULL;
    r->next = st->idle;
    st->idle = r;
    st->nidle++;
    return;
  }
  if (uvcuda_future_close(&r->fut, on_req_closed) != 0) {
    /* Already closing (teardown closed it): its close_cb will free it. */
  }
}

static void drop_keep(napi_env env, napi_ref *keep, size_t n, napi_ref *inl) {
  size_t i;
  for (i = 0; i < n; i++)
    if (keep[i]) napi_delete_reference(env, keep[i]);
  if (keep != inl) free(keep);
}

static int op_trampoline(uvcuda_future_t *f, uvcuda_stream_t stream) {
  struct req *r = f->data;
  int err = r->enqueue(stream, r->data);
  if (err != 0) r->enqueue_failed = 1;
  return err;
}

/* The value to resolve with, or (returns 0) the exception to reject with. */
static int convert_result(napi_env env, uvcuda_napi_convert_cb convert, void *data,
                          const napi_ref *keep, size_t nkeep, napi_value *out) {
  napi_value kept_inline[KEEP_INLINE], *kept = NULL, value = NULL, code, msg;
  bool pending = false;
  napi_status s;
  size_t i;

  if (nkeep > 0) {
    kept = nkeep <= KEEP_INLINE ? kept_inline : calloc(nkeep, sizeof(*kept));
    if (kept == NULL) {
      uvcuda_napi_create_error(env, UVCUDA_ENOMEM, out);
      return 0;
    }
    for (i = 0; i < nkeep; i++)
      if (napi_get_reference_value(env, keep[i], &kept[i]) != napi_ok) kept[i] = NULL;
  }
  s = convert(env, data, kept, &value);
  if (kept != kept_inline) free(kept);
  napi_is_exception_pending(env, &pending);
  if (pending) {
    napi_get_and_clear_last_exception(env, out);
    return 0;
  }
  if (s != napi_ok) {
    napi_create_string_utf8(env, "ERR_UVCUDA_CONVERT", NAPI_AUTO_LENGTH, &code);
    napi_create_string_utf8(env, "converting the result of the GPU work failed",
                            NAPI_AUTO_LENGTH, &msg);
    if (napi_create_error(env, code, msg, out) == napi_ok)
      uvcuda_napi__show_code(env, *out);
    return 0;
  }
  if (value == NULL) napi_get_undefined(env, &value);
  *out = value;
  return 1;
}

/* The future's callback: settles the promise inside a handle scope and a
 * callback scope (so microtasks and nextTicks run when it closes), or, at
 * env teardown, only releases. */
static void on_done(uvcuda_future_t *f, int status) {
  struct req *r = f->data;
  struct napi_state *st = r->st;
  napi_env env = st->env;
  napi_deferred deferred = r->deferred;
  napi_async_context actx = r->actx;
  uvcuda_napi_convert_cb convert = r->convert;
  uvcuda_napi_release_cb release = r->release;
  void *data = r->data;
  napi_ref *keep = r->keep;
  size_t nkeep = r->nkeep;
  napi_ref keep_copy[KEEP_INLINE];
  napi_handle_scope hs = NULL;
  napi_callback_scope cs = NULL;
  napi_value resource, value = NULL;
  bool pending = false;
  int ok;

  if (r->drain != NULL) { /* settles when the drain's callback runs */
    r->failed_with = status;
    return;
  }
  live_del(st, r);
  st->stats.pending--;
  if (keep == r->keep_inline) { /* r may be reused before we are done */
    memcpy(keep_copy, keep, nkeep * sizeof(*keep));
    keep = keep_copy;
  }
  if (napi_open_handle_scope(env, &hs) != napi_ok) hs = NULL;

  if (st->closing) {
    /* Env teardown: JS may not run, so the promise stays unsettled. */
    if (release) release(env, data, status);
    drop_keep(env, keep, nkeep, keep_copy);
    if (actx) napi_async_destroy(env, actx);
    req_put(st, r); /* the cleanup hook closed it already */
    if (hs) napi_close_handle_scope(env, hs);
    return;
  }

  if (napi_create_object(env, &resource) != napi_ok ||
      napi_open_callback_scope(env, resource, actx, &cs) != napi_ok)
    cs = NULL;
  if (status == 0 && convert != NULL) {
    ok = convert_result(env, convert, data, keep, nkeep, &value);
  } else if (status == 0) {
    napi_get_undefined(env, &value);
    ok = 1;
  } else {
    ok = 0;
    if (uvcuda_napi_create_error(env, status, &value) != napi_ok) {
      napi_is_exception_pending(env, &pending);
      if (pending) napi_get_and_clear_last_exception(env, &value);
      else napi_get_undefined(env, &value);
    }
  }
  if (ok) {
    napi_resolve_deferred(env, deferred, value);
    st->stats.resolved++;
  } else {
    napi_reject_deferred(env, deferred, value);
    st->stats.rejected++;
  }
  if (release) release(env, data, status);
  drop_keep(env, keep, nkeep, keep_copy);
  /* Back to the cache before the scope closes: microtasks that run there
   * may await again and take it. */
  req_put(st, r);
  if (cs) napi_close_callback_scope(env, cs);
  if (hs) napi_close_handle_scope(env, hs);
  if (actx) napi_async_destroy(env, actx);
}

/* The drain's callback: the stream has run what the failed enqueue put on
 * it; its await settles now with its own status (or as a teardown has it). */
static void on_drained(uvcuda_future_t *f, int status) {
  struct req *d = f->data, *r = d->drained;
  struct napi_state *st = d->st;
  live_del(st, d);
  req_put(st, d);
  r->drain = NULL;
  if (r->failed_with != 0)
    on_done(&r->fut, status == UVCUDA_ECANCELED ? status : r->failed_with);
}

/* After a start whose enqueue failed: the drain (see struct req), or
 * none if it can't start (the promise then rejects at once, as before). */
static void start_drain(struct napi_state *st, struct req *r, uvcuda_stream_t stream) {
  struct req *d = req_get(st);
  if (d == NULL) return;
  if (uvcuda_future_start(&d->fut, stream, NULL, on_drained) != 0) {
    req_put(st, d);
    return;
  }
  d->drained = r;
  r->drain = d;
  live_add(st, d);
}

static void on_env_cleanup(napi_async_cleanup_hook_handle hook, void *arg) {
  struct napi_state *st = arg;
  struct req *r;
  (void)hook;
  st->closing = 1;
  /* Pending ones: their callback runs with UVCUDA_ECANCELED, then close_cb. */
  for (r = st->live; r; r = r->next) uvcuda_future_close(&r->fut, on_req_closed);
  while ((r = st->idle) != NULL) {
    st->idle = r->next;
    st->nidle--;
    uvcuda_future_close(&r->fut, on_req_closed);
  }
  if (st->nfutures == 0) close_loop(st);
}

napi_status uvcuda_napi_await_ex(napi_env env, const uvcuda_napi_await_t *a,
                                 napi_value *promise) {
  struct napi_state *st = NULL;
  uvcuda_loop_t *ul;
  struct req *r;
  napi_value name, undef;
  napi_status s = napi_ok;
  size_t i;
  int err = 0, bad_keep = 0;

  if (env == NULL || a == NULL || promise == NULL) return napi_invalid_arg;
  *promise = NULL;
  if (a->nkeep > 0 && a->keep == NULL) return napi_invalid_arg;
  if ((s = uvcuda_napi_loop(env, &ul)) != napi_ok) return s;
  st = ul->data;
  if ((r = req_get(st)) == NULL) return uvcuda_napi_throw(env, UVCUDA_ENOMEM);

  r->keep = a->nkeep <= KEEP_INLINE ? r->keep_inline
                                    : calloc(a->nkeep, sizeof(*r->keep));
  r->nkeep = 0;
  if (r->keep == NULL) {
    req_put(st, r);
    return uvcuda_napi_throw(env, UVCUDA_ENOMEM);
  }
  if ((s = napi_create_promise(env, &r->deferred, promise)) != napi_ok) {
    r->deferred = NULL;
    goto fail;
  }
  if ((s = napi_create_string_utf8(env, a->resource_name ? a->resource_name : "uvcuda",
                                   NAPI_AUTO_LENGTH, &name)) != napi_ok ||
      (s = napi_async_init(env, NULL, name, &r->actx)) != napi_ok)
    goto fail;
  for (i = 0; i < a->nkeep; i++) {
    if ((s = napi_create_reference(env, a->keep[i], 1, &r->keep[i])) != napi_ok) {
      bad_keep = 1; /* Node-API refs take objects and functions only */
      goto fail;
    }
    r->nkeep++;
  }
  r->enqueue = a->enqueue;
  r->convert = a->convert;
  r->release = a->release;
  r->data = a->data;

  /* Only misuse fails here; errors of the work reject the promise. */
  err = uvcuda_future_start(&r->fut, a->stream, a->enqueue ? op_trampoline : NULL,
                            on_done);
  if (err != 0) goto fail;
  live_add(st, r);
  st->stats.pending++;
  st->stats.awaited++;
  if (r->enqueue_failed) start_drain(st, r, a->stream);
  return napi_ok;

fail:
  /* Nobody holds this promise: settle it quietly to free the deferred
   * (before any exception is thrown: settling refuses to run then). */
  if (r->deferred != NULL && napi_get_undefined(env, &undef) == napi_ok)
    napi_resolve_deferred(env, r->deferred, undef);
  drop_keep(env, r->keep, r->nkeep, r->keep_inline);
  if (r->actx) napi_async_destroy(env, r->actx);
  req_put(st, r);
  *promise = NULL; /* nothing was started: no promise to hand out */
  if (err != 0) return uvcuda_napi_throw(env, err);
  if (bad_keep) {
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && !pending)
      napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE",
                            "uvcuda_napi_await_ex: keep values must be objects or functions");
    return napi_pending_exception;
  }
  return s;
}

napi_status uvcuda_napi_await(napi_env env, uvcuda_stream_t stream,
                              uvcuda_napi_enqueue_cb enqueue,
                              uvcuda_napi_convert_cb convert,
                              uvcuda_napi_release_cb release, void *data,
                              napi_value *promise) {
  uvcuda_napi_await_t a;
  memset(&a, 0, sizeof(a));
  a.stream = stream;
  a.enqueue = enqueue;
  a.convert = convert;
  a.release = release;
  a.data = data;
  return uvcuda_napi_await_ex(env, &a, promise);
}
