#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ITEM_MEM, ITEM_FUTURES, ITEM_STREAM, ITEM_GATE };

struct tu_fx_item {
  struct tu_fx_item *next;
  int kind;
  void *p; /* the memory, the first future, the stream, the gate's word */
  size_t n, stride;
};

/* The running case's fixture: tu_stream() and tu_gate_init() note into it.
 * Cases run one at a time on the main thread. */
static tu_fx_t *current;
static unsigned rec_order;

static struct tu_fx_item *item_add(tu_fx_t *fx, int kind, void *p, size_t n,
                                   size_t stride) {
  struct tu_fx_item *it = calloc(1, sizeof(*it));
  if (it == NULL) fail_msg("fixture: out of memory");
  it->kind = kind;
  it->p = p;
  it->n = n;
  it->stride = stride;
  it->next = fx->items;
  fx->items = it;
  return it;
}

static void item_drop(tu_fx_t *fx, int kind, void *p) {
  struct tu_fx_item **pp, *it;
  for (pp = &fx->items; (it = *pp) != NULL; pp = &it->next) {
    if (it->kind == kind && it->p == p) {
      *pp = it->next;
      free(it);
      return;
    }
  }
}

int tu_fx_setup(void **state) {
  tu_fx_t *fx = calloc(1, sizeof(*fx));
  if (fx == NULL) return -1;
  fx->prestate = *state;
  rec_order = 0;
  current = fx;
  *state = fx;
  return 0;
}

int tu_fx_setup_loop(void **state) {
  const tu_fx_spec_t *spec = *state;
  tu_fx_t *fx;
  if (tu_fx_setup(state) != 0) return -1;
  fx = *state;
  tu_fx_open_with(fx, spec->completion, spec->spin_us);
  return 0;
}

tu_fx_t *tu_fx(void **state) { return *state; }

const void *tu_fx_prestate(void **state) { return tu_fx(state)->prestate; }

tu_fx_loop_t *tu_fx_loop(void **state, int i) { return &tu_fx(state)->loops[i]; }

static tu_fx_loop_t *loop_slot(tu_fx_t *fx) {
  int i;
  for (i = 0; i < TU_FX_LOOPS; i++)
    if (!fx->loops[i].uv_on) return &fx->loops[i];
  fail_msg("fixture: more than %d loops open", TU_FX_LOOPS);
  return NULL;
}

tu_fx_loop_t *tu_fx_open_uv(tu_fx_t *fx) {
  tu_fx_loop_t *lp = loop_slot(fx);
  memset(lp, 0, sizeof(*lp));
  assert_int_equal(uv_loop_init(&lp->uv), 0);
  lp->uv_on = 1;
  return lp;
}

tu_fx_loop_t *tu_fx_open(tu_fx_t *fx, const uvcuda_options_t *o) {
  tu_fx_loop_t *lp = tu_fx_open_uv(fx);
  TU_OK(uvcuda_loop_init(&lp->uv, &lp->ul, o));
  lp->ul_on = 1;
  return lp;
}

tu_fx_loop_t *tu_fx_open_with(tu_fx_t *fx, uvcuda_completion_t c, int spin_us) {
  uvcuda_options_t o;
  uvcuda_options_init(&o);
  o.completion = c;
  o.spin_budget_us = spin_us;
  return tu_fx_open(fx, &o);
}

void tu_fx_close(tu_fx_loop_t *lp) {
  tu_loop_close(&lp->uv, &lp->ul);
  lp->ul_on = 0;
  assert_int_equal(tu_fx_close_uv(lp), 0);
}

int tu_fx_close_uv(tu_fx_loop_t *lp) {
  int rc = uv_loop_close(&lp->uv);
  if (rc == 0) lp->uv_on = 0;
  return rc;
}

void *tu_fx_alloc(tu_fx_t *fx, size_t size) {
  void *p = calloc(1, size ? size : 1);
  if (p == NULL) fail_msg("fixture: out of memory");
  item_add(fx, ITEM_MEM, p, 0, 0);
  return p;
}

void tu_fx_track(tu_fx_t *fx, uvcuda_future_t *first, size_t n, size_t stride) {
  item_add(fx, ITEM_FUTURES, first, n, stride);
}

uvcuda_future_t *tu_fx_futures(tu_fx_t *fx, size_t n) {
  uvcuda_future_t *f = tu_fx_alloc(fx, n * sizeof(*f));
  tu_fx_track(fx, f, n, sizeof(*f));
  return f;
}

tu_rec_t *tu_fx_rec(tu_fx_t *fx) { return tu_fx_alloc(fx, sizeof(tu_rec_t)); }

void tu_rec_done(uvcuda_future_t *f, int status) {
  tu_rec_t *r = f->data;
  r->calls++;
  r->status = status;
  r->order = ++rec_order;
  r->t_ns = tu_now_ns();
  r->cb_state = (int)uvcuda_future_state(f);
  r->cb_active = uvcuda_future_is_active(f);
}

void tu_rec_closed(uvcuda_future_t *f) {
  tu_rec_t *r = f->data;
  r->closed++;
  r->closed_state = (int)uvcuda_future_state(f);
}

void tu_fx_note_stream(CUstream s, int alive) {
  if (current == NULL) return;
  if (alive) item_add(current, ITEM_STREAM, (void *)s, 0, 0);
  else item_drop(current, ITEM_STREAM, (void *)s);
}

void tu_fx_note_gate(uint32_t *host, int alive) {
  if (current == NULL) return;
  if (alive) item_add(current, ITEM_GATE, host, 0, 0);
  else item_drop(current, ITEM_GATE, host);
}

/* ---- teardown: best effort, never an assertion ---- */

#define FUTURE_AT(it, i) \
  ((uvcuda_future_t *)((char *)(it)->p + (i) * (it)->stride))

static void run_open_loops(tu_fx_t *fx) {
  int i;
  for (i = 0; i < TU_FX_LOOPS; i++)
    if (fx->loops[i].uv_on) uv_run(&fx->loops[i].uv, UV_RUN_NOWAIT);
}

/* Whether a tracked future is active (or, closing: its close_cb due). */
static int any_busy(tu_fx_t *fx, int closing) {
  struct tu_fx_item *it;
  size_t i;
  for (it = fx->items; it; it = it->next) {
    if (it->kind != ITEM_FUTURES) continue;
    for (i = 0; i < it->n; i++) {
      uvcuda_future_t *f = FUTURE_AT(it, i);
      if (uvcuda_future_is_active(f)) return 1;
      if (closing && uvcuda_future_state(f) == UVCUDA_FUTURE_CLOSING) return 1;
    }
  }
  return 0;
}

static void run_while_busy(tu_fx_t *fx, int closing) {
  uint64_t end = tu_now_ns() + 5000000000ull;
  while (any_busy(fx, closing) && tu_now_ns() < end) run_open_loops(fx);
}

static void on_fx_closed(uvcuda_loop_t *ul) { *(int *)ul->data = 1; }

static void close_handle(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* 0, or -1 if the loop stays open (it may still reach fixture memory). */
static int loop_teardown(tu_fx_loop_t *lp, int i) {
  uint64_t end;
  int closed = 0, rc;

  if (lp->ul_on) {
    lp->ul.data = &closed;
    rc = uvcuda_loop_close(&lp->ul, on_fx_closed);
    if (rc == UVCUDA_ENOTINIT) {
      closed = 1; /* the case closed it */
    } else if (rc != 0 && rc != UVCUDA_ECLOSING) {
      fprintf(stderr, "fixture: loop %d: uvcuda_loop_close: %s: left open\n",
              i, uvcuda_err_name(rc));
      return -1;
    }
    end = tu_now_ns() + 5000000000ull;
    while (!closed && tu_now_ns() < end) uv_run(&lp->uv, UV_RUN_NOWAIT);
    if (!closed) {
      fprintf(stderr, "fixture: loop %d: its close never finished\n", i);
      return -1;
    }
    lp->ul_on = 0;
  }
  if (!lp->uv_on) return 0;
  uv_walk(&lp->uv, close_handle, NULL); /* a failed case's timers */
  uv_run(&lp->uv, UV_RUN_NOWAIT);
  if (tu_fx_close_uv(lp) == 0) return 0;
  fprintf(stderr, "fixture: loop %d: uv_loop_close failed: left open\n", i);
  return -1;
}

int tu_fx_teardown(void **state) {
  tu_fx_t *fx = *state;
  struct tu_fx_item *it, *next;
  size_t k;
  int i, left_open = 0;

  current = NULL;
  /* Held work runs to its end, so that the streams can be destroyed. */
  for (it = fx->items; it; it = it->next)
    if (it->kind == ITEM_GATE)
      __atomic_store_n((uint32_t *)it->p, 1, __ATOMIC_RELEASE);
  /* Futures a failed case left active complete (their callbacks see their
   * own data, in fixture memory), then every future is closed. */
  run_while_busy(fx, 0);
  for (it = fx->items; it; it = it->next)
    if (it->kind == ITEM_FUTURES)
      for (k = 0; k < it->n; k++) uvcuda_future_close(FUTURE_AT(it, k), NULL);
  run_while_busy(fx, 1);
  for (it = fx->items; it; it = it->next)
    if (it->kind == ITEM_STREAM) tu_stream_destroy((CUstream)it->p);
  for (i = 0; i < TU_FX_LOOPS; i++)
    if (loop_teardown(&fx->loops[i], i) != 0) left_open = 1;
  for (it = fx->items; it; it = next) {
    next = it->next;
    if (it->kind == ITEM_GATE) {
      tu_gate_t g = {it->p, 0};
      tu_gate_free(&g);
    } else if (it->kind == ITEM_MEM && !left_open) {
      free(it->p); /* else leaked: an open loop may still reach it */
    }
    free(it);
  }
  if (left_open) return 0; /* fx too: it holds the loops */
  free(fx);
  *state = NULL;
  return 0;
}
