/* The per-case fixture of the sim and gpu suites: the loops a case opens
 * and what it puts on them, closed by the case's cmocka teardown even after
 * a failed assertion. cmocka longjmps out of the test body, so whatever the
 * teardown must reach (loops, futures, what their callbacks write) lives in
 * fixture memory, never on the case's stack; the streams and gates a case
 * makes with tu_stream() and tu_gate_init() are noted by the fixture too.
 *
 *   cmocka_unit_test_setup_teardown(a_case, tu_fx_setup, tu_fx_teardown)
 *
 * Teardown: opens the gates still held, lets the futures still active
 * finish (a few seconds at most), closes every future, destroys the
 * streams, closes every loop (and any handle left on it), frees the rest. A
 * case that closes what it opened leaves it nothing to do. */
#ifndef UVCUDA_TEST_FIXTURE_H
#define UVCUDA_TEST_FIXTURE_H

#include "tu.h"

#define TU_FX_LOOPS 4

typedef struct {
  uv_loop_t uv;
  uvcuda_loop_t ul;
  int uv_on; /* uv_loop_init done, uv_loop_close not yet */
  int ul_on; /* uvcuda_loop_init done */
} tu_fx_loop_t;

/* A case whose setup opens its loop: the prestate. */
typedef struct {
  uvcuda_completion_t completion;
  int spin_us; /* -1: the library's default */
} tu_fx_spec_t;

typedef struct tu_fx_s {
  const void *prestate;
  tu_fx_loop_t loops[TU_FX_LOOPS];
  struct tu_fx_item *items; /* allocations and futures to close */
} tu_fx_t;

/* cmocka setup/teardown. *state is the prestate before setup and the
 * fixture after. tu_fx_setup_loop also opens loop 0 as the prestate's
 * tu_fx_spec_t says. */
int tu_fx_setup(void **state);
int tu_fx_setup_loop(void **state);
int tu_fx_teardown(void **state);

tu_fx_t *tu_fx(void **state);
const void *tu_fx_prestate(void **state);
tu_fx_loop_t *tu_fx_loop(void **state, int i);

/* Opens a loop (asserted): a uv loop, then a uvcuda loop with o (NULL:
 * defaults). tu_fx_open_uv: the uv loop only. */
tu_fx_loop_t *tu_fx_open(tu_fx_t *fx, const uvcuda_options_t *o);
tu_fx_loop_t *tu_fx_open_with(tu_fx_t *fx, uvcuda_completion_t c, int spin_us);
tu_fx_loop_t *tu_fx_open_uv(tu_fx_t *fx);
/* Closes it now, asserting that the uvcuda loop's close finishes and
 * uv_loop_close returns 0. */
void tu_fx_close(tu_fx_loop_t *lp);
/* uv_loop_close, noted: for a case that closes its uvcuda loop itself. */
int tu_fx_close_uv(tu_fx_loop_t *lp);

/* Zeroed memory that lives until teardown. */
void *tu_fx_alloc(tu_fx_t *fx, size_t size);
/* n futures in fixture memory (not initialised): teardown closes them. */
uvcuda_future_t *tu_fx_futures(tu_fx_t *fx, size_t n);
/* Futures inside tu_fx_alloc memory, every stride bytes from first. */
void tu_fx_track(tu_fx_t *fx, uvcuda_future_t *first, size_t n, size_t stride);

/* A future's recorder (its data): what its callbacks saw. */
typedef struct {
  int calls;
  int status;   /* of the last callback */
  int closed;   /* close callbacks */
  unsigned order; /* the last callback's place among every recorder's */
  uint64_t t_ns;  /* of the last callback */
  int cb_state, cb_active; /* the future's state and is_active in it */
  int closed_state;        /* its state in the last close callback */
} tu_rec_t;

tu_rec_t *tu_fx_rec(tu_fx_t *fx);
void tu_rec_done(uvcuda_future_t *f, int status);
void tu_rec_closed(uvcuda_future_t *f);

/* tu.c tells the fixture of a case's streams and gates. */
void tu_fx_note_stream(CUstream s, int alive);
void tu_fx_note_gate(uint32_t *host, int alive);

#endif
