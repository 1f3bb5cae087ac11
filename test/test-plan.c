/* The reactor's plan for one watch (lib/plan.h): when it looks next, with
 * made-up times (no thread, no clock, no driver). Suite unit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "modes.h"
#include "plan.h"

#define US 1000ull
#define MS (1000ull * US)

static const struct uvcuda__plan_params params = {
    .lead_ns = 10 * US, .floor_ns = 20 * US, .sleep_max_ns = 1 * MS, .pct = 5};

static struct uvcuda__watch watch(uint64_t since, uint64_t due, uint64_t dev,
                                  uint64_t quiet) {
  struct uvcuda__watch w;
  uvcuda__watch_init(&w, NULL);
  w.since_ns = since;
  w.due_ns = due;
  w.dev_ns = dev;
  w.quiet_until_ns = quiet;
  w.after_ns = since;
  return w;
}

/* The loop polls a pre-woken future itself until its window ends. */
static void no_look_while_the_loop_polls(void **state) {
  struct uvcuda__watch w = watch(0, 0, 0, 700 * US);
  (void)state;
  /* A lead past it: a reactor waking a lead early wakes as it ends,
   * rather than polling through the loop's last lead of it. */
  assert_int_equal(uvcuda__plan_next(&w, 1 * US, &params), 710 * US);
  assert_int_equal(uvcuda__plan_next(&w, 699 * US, &params), 710 * US);
  /* After it: backing off, as for a wait nobody predicted. */
  assert_int_equal(uvcuda__plan_next(&w, 800 * US, &params), 840 * US);
}

/* No prediction: the next look is 5 % of the time waited later, at least
 * the floor, at most sleep_max. */
static void unpredicted_waits_back_off_with_their_length(void **state) {
  struct uvcuda__watch w = watch(1 * MS, 0, 0, 0);
  (void)state;
  assert_int_equal(uvcuda__plan_next(&w, 1 * MS + 20 * US, &params),
                   1 * MS + 40 * US); /* floor */
  assert_int_equal(uvcuda__plan_next(&w, 3 * MS, &params),
                   3 * MS + 100 * US); /* 5 % of 2 ms */
  assert_int_equal(uvcuda__plan_next(&w, 101 * MS, &params),
                   102 * MS); /* 5 ms, capped at 1 ms */
  /* A look before the wait began (clock order across threads): floor. */
  assert_int_equal(uvcuda__plan_next(&w, 0, &params), 20 * US);
}

/* A predicted end: nothing before the window, every pass in it, back-off
 * after it. */
static void predicted_waits_are_looked_at_in_their_window(void **state) {
  struct uvcuda__watch w = watch(0, 2 * MS, 10 * US, 0);
  uint64_t open, close;
  (void)state;
  uvcuda__plan_window(&w, &params, &open, &close);
  assert_int_equal(open, 2 * MS - 10 * US - 10 * US - 1 * US);
  assert_int_equal(close, 2 * MS + 2 * 10 * US + 2 * US);
  assert_int_equal(uvcuda__plan_next(&w, 1 * US, &params), open);
  assert_int_equal(uvcuda__plan_next(&w, open - 1, &params), open);
  assert_int_equal(uvcuda__plan_next(&w, open, &params), open);
  assert_int_equal(uvcuda__plan_next(&w, close - 1, &params), close - 1);
  assert_int_equal(uvcuda__plan_next(&w, close, &params),
                   close + close / 20); /* 5 % of the time waited */
  /* A window that would open before the wait began opens at its start. */
  w = watch(5 * MS, 5 * MS + 5 * US, 10 * US, 0);
  uvcuda__plan_window(&w, &params, &open, &close);
  assert_int_equal(open, 5 * MS);
  /* No prediction: no window. */
  w = watch(0, 0, 0, 0);
  uvcuda__plan_window(&w, &params, &open, &close);
  assert_int_equal(open, 0);
  assert_int_equal(close, 0);
}

/* Seen at the first look inside its window: the work ended before. */
static void a_first_look_in_the_window_is_early(void **state) {
  struct uvcuda__watch w = watch(0, 2 * MS, 10 * US, 0);
  uint64_t open, close;
  (void)state;
  uvcuda__plan_window(&w, &params, &open, &close);
  w.after_ns = open - 500 * US; /* the look before: a probe */
  assert_true(uvcuda__plan_early(&w, open + 1 * US, &params));
  w.after_ns = open + 1 * US; /* polled inside the window already */
  assert_false(uvcuda__plan_early(&w, open + 2 * US, &params));
  w = watch(0, 0, 0, 0); /* no prediction: never early */
  assert_false(uvcuda__plan_early(&w, 3 * MS, &params));
}

/* A reactor that looks exactly when its plan says sees a wait that ended
 * at `end` no later than max(floor, 5 % of the time waited) after it, with
 * a number of looks that grows with the log of the wait. */
static void backoff_latency_is_a_share_of_the_wait(void **state) {
  static const uint64_t ends[] = {1 * US,   19 * US,  21 * US,  100 * US,
                                  333 * US, 1 * MS,   2 * MS,   7 * MS,
                                  20 * MS,  100 * MS, 1000 * MS};
  size_t i;
  (void)state;
  for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
    struct uvcuda__watch w = watch(0, 0, 0, 0);
    uint64_t look = 20 * US, late, bound; /* the arm, after a 20 µs spin */
    unsigned looks = 1;
    while (look < ends[i]) {
      look = uvcuda__plan_next(&w, look, &params);
      looks++;
    }
    late = look - ends[i];
    bound = look / 20 > params.floor_ns ? look / 20 : params.floor_ns;
    if (bound > params.sleep_max_ns) bound = params.sleep_max_ns;
    if (late > bound)
      fail_msg("a wait of %llu ns seen %llu ns late (bound %llu)",
               (unsigned long long)ends[i], (unsigned long long)late,
               (unsigned long long)bound);
    /* 20 µs steps to 400 µs, then 5 % steps to 20 ms, then 1 ms. */
    if (ends[i] == 100 * MS && looks > 200)
      fail_msg("%u looks for a 100 ms wait", looks);
  }
}

static void lead_and_floor_follow_the_lateness(void **state) {
  struct uvcuda__predict late = {0};
  uint64_t lead;
  (void)state;
  assert_int_equal(uvcuda__plan_lead(&late), UVCUDA__PLAN_LATE_INIT_NS);
  uvcuda__predict_add(&late, 4 * US);
  uvcuda__predict_add(&late, 4 * US);
  lead = uvcuda__plan_lead(&late);
  assert_true(lead >= 4 * US && lead < UVCUDA__PLAN_LATE_INIT_NS);
  assert_int_equal(uvcuda__plan_floor(lead), UVCUDA__PLAN_FLOOR_NS);
  assert_int_equal(uvcuda__plan_floor(30 * US), 60 * US);
  /* A stalled machine cannot teach a lead beyond the cap. */
  uvcuda__predict_add(&late, 10 * MS);
  uvcuda__predict_add(&late, 10 * MS);
  assert_true(uvcuda__plan_lead(&late) <= UVCUDA__PLAN_LATE_MAX_NS);
}

/* The modes of a stream's recent lengths (modes.h): where they cluster. */
static void modes_of_recent_lengths(void **state) {
  struct uvcuda__modes m = {0};
  uint64_t c = 0, sp = 0;
  int i;
  (void)state;
  /* Two kinds of work, 5 µs and 500 µs, a little jitter. */
  for (i = 0; i < 16; i++)
    uvcuda__modes_add(&m, i % 2 ? 500 * US + (uint64_t)i * 300 : 5 * US + i * 10);
  assert_true(uvcuda__modes_next(&m, 0, &c, &sp));
  assert_true(c >= 5 * US && c < 6 * US);
  assert_true(uvcuda__modes_next(&m, 20 * US, &c, &sp)); /* the spin is over */
  assert_true(c >= 500 * US && c < 505 * US);
  assert_true(sp <= 3 * US);
  assert_false(uvcuda__modes_next(&m, 600 * US, &c, &sp)); /* outlasted */
  /* Lengths spread evenly over 5 µs .. 2 ms: no mode. */
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 16; i++) uvcuda__modes_add(&m, 5 * US + (uint64_t)i * 133 * US);
  assert_false(uvcuda__modes_next(&m, 0, &c, &sp));
  /* Four alike are not yet a mode; the fifth makes one. */
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 4; i++) uvcuda__modes_add(&m, 1 * MS);
  assert_false(uvcuda__modes_next(&m, 0, &c, &sp));
  uvcuda__modes_add(&m, 1 * MS + 10 * US);
  assert_true(uvcuda__modes_next(&m, 0, &c, &sp));
  /* The ring keeps the last 16: old lengths leave it. */
  for (i = 0; i < 16; i++) uvcuda__modes_add(&m, 3 * MS);
  assert_true(uvcuda__modes_next(&m, 0, &c, &sp));
  assert_int_equal(c, 3 * MS);
  assert_int_equal(sp, 0);
  /* A length beyond 32 bits saturates instead of wrapping. */
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 5; i++) uvcuda__modes_add(&m, 10000 * MS);
  assert_true(uvcuda__modes_next(&m, 0, &c, &sp));
  assert_int_equal(c, UINT32_MAX);
}

/* A wait is not slept through to the next kind while other lengths in no
 * kind lie between its age and that kind: with UVCUDA__MODES_STRAYS such,
 * the work may well end first (a short kind not yet seen five times: the
 * reactor slept through 28 ms work to the window of the 100 ms kind, and
 * seeing it there taught a 60 ms length, in the simulation). Fewer are
 * allowed, and lengths the wait has outlasted do not count. */
static void work_between_kinds_is_not_slept_through(void **state) {
  struct uvcuda__modes m;
  uint64_t c, sp;
  int i;
  (void)state;
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 16; i++) /* 100 ms, and 27, 29 and 31 ms work: no kind */
    uvcuda__modes_add(&m, i % 2 ? 100 * MS : (i % 3 * 2 + 27) * MS);
  assert_false(uvcuda__modes_next(&m, 20 * MS, &c, &sp));
  /* Past them: the 100 ms kind again. */
  assert_true(uvcuda__modes_next(&m, 31 * MS, &c, &sp));
  assert_int_equal(c, 100 * MS);
  /* Three strays (a spin's misses of a short kind, seen late), or strays
   * the wait has outlasted: still the kind; a fourth, not. */
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 10; i++) uvcuda__modes_add(&m, 100 * MS);
  uvcuda__modes_add(&m, 28 * MS);
  uvcuda__modes_add(&m, 40 * MS);
  uvcuda__modes_add(&m, 50 * MS);
  assert_true(uvcuda__modes_next(&m, 20 * MS, &c, &sp));
  uvcuda__modes_add(&m, 7 * MS);
  uvcuda__modes_add(&m, 9 * MS);
  assert_true(uvcuda__modes_next(&m, 20 * MS, &c, &sp));
  uvcuda__modes_add(&m, 60 * MS);
  assert_false(uvcuda__modes_next(&m, 20 * MS, &c, &sp));
}

/* Random lengths, uniform over 5 µs .. 2 ms (the bench's `mixed`), rarely
 * look like a mode: one would keep the reactor from looking until its
 * window, however early the work ended. Of 1000 rings of 16 (a fixed
 * generator), at most 5 % have one (with this generator: 1 %; when four
 * of a kind made a mode, 18 %, and a mixed wait came 30 µs later on
 * average on the H100), while two kinds, half each, keep theirs. */
static void uniform_lengths_rarely_make_a_mode(void **state) {
  struct uvcuda__modes m;
  uint64_t c, sp, x = 88172645463325252ull;
  int ring, i, found = 0, kept = 0;
  (void)state;
  for (ring = 0; ring < 1000; ring++) {
    memset(&m, 0, sizeof(m));
    for (i = 0; i < 16; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
      uvcuda__modes_add(&m, 5 * US + x % (1995 * US));
    }
    found += uvcuda__modes_next(&m, 20 * US, &c, &sp);
    memset(&m, 0, sizeof(m));
    for (i = 0; i < 16; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      uvcuda__modes_add(&m, (x >> 32) % 2 ? 500 * US + x % (4 * US) : 5 * US);
    }
    kept += uvcuda__modes_next(&m, 20 * US, &c, &sp) && c >= 500 * US;
  }
  if (found > 50) fail_msg("%d of 1000 uniform rings made a mode", found);
  if (kept < 900) fail_msg("only %d of 1000 two-kind rings kept theirs", kept);
  print_message("uniform rings with a mode: %d of 1000; two kinds: %d\n", found,
                kept);
}

/* A lone future nobody predicts spins its budget, or, when five or more
 * recent lengths are within twice it, until the longest of them (+2 us,
 * at most twice the budget) (modes.h). */
static void a_kind_just_past_the_budget_is_spun_for(void **state) {
  struct uvcuda__modes m;
  int i;
  (void)state;
  memset(&m, 0, sizeof(m));
  assert_int_equal(uvcuda__modes_spin(&m, 20 * US), 20 * US); /* none */
  for (i = 0; i < 16; i++) /* 24, 25 µs and 500 µs, alternately */
    uvcuda__modes_add(&m, i % 2 ? 500 * US : (24 + i % 4 / 2) * US);
  assert_int_equal(uvcuda__modes_spin(&m, 20 * US), 27 * US);
  /* Within the budget already: the budget; past twice it: twice it. */
  assert_int_equal(uvcuda__modes_spin(&m, 30 * US), 30 * US);
  assert_int_equal(uvcuda__modes_spin(&m, 13 * US), 26 * US);
  assert_int_equal(uvcuda__modes_spin(&m, 11 * US), 11 * US); /* none within */
  /* A short kind's tail, seen late (spread out): its longest within. */
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 16; i++)
    uvcuda__modes_add(&m, i % 2 ? 500 * US : (i < 8 ? 15 : 22 + i) * US);
  assert_int_equal(uvcuda__modes_spin(&m, 20 * US), 38 * US);
  /* Four within: not enough. */
  memset(&m, 0, sizeof(m));
  for (i = 0; i < 16; i++) uvcuda__modes_add(&m, i >= 12 ? 30 * US : 2000 * US);
  assert_int_equal(uvcuda__modes_spin(&m, 20 * US), 20 * US);
  uvcuda__modes_add(&m, 31 * US);
  assert_int_equal(uvcuda__modes_spin(&m, 20 * US), 33 * US);
}

/* The probe gap: the interval for young waits, 5 % of an older one,
 * at most UVCUDA__PLAN_PROBE_MAX_NS; never below the interval. */
static void probes_back_off_with_the_youngest_wait(void **state) {
  (void)state;
  assert_int_equal(uvcuda__plan_probe_gap(1 * MS, 0, 5), 1 * MS);
  assert_int_equal(uvcuda__plan_probe_gap(1 * MS, 20 * MS, 5), 1 * MS);
  assert_int_equal(uvcuda__plan_probe_gap(1 * MS, 100 * MS, 5), 5 * MS);
  assert_int_equal(uvcuda__plan_probe_gap(1 * MS, 10000 * MS, 5),
                   UVCUDA__PLAN_PROBE_MAX_NS);
  assert_int_equal(uvcuda__plan_probe_gap(1 * MS, UINT64_MAX, 100),
                   UVCUDA__PLAN_PROBE_MAX_NS);
  /* An interval longer than the cap stays the interval. */
  assert_int_equal(uvcuda__plan_probe_gap(200 * MS, 10000 * MS, 5), 200 * MS);
}

/* When the next probe is due (plan.h): not before some wait is overdue,
 * then a probe gap after the last. */
static void work_done_in_time_is_not_probed(void **state) {
  const uint64_t t = 5000 * MS; /* now */
  (void)state;
  /* The last probe long ago, but the only wait began 0.3 ms ago: its
   * first probe is an interval after its start, not now. */
  assert_int_equal(uvcuda__plan_probe_at(0, t - 300 * US, t - 300 * US, t,
                                         1 * MS, 5),
                   t + 700 * US);
  /* Predicted to end 2 ms after it began: an interval after that. */
  assert_int_equal(uvcuda__plan_probe_at(0, t - 300 * US, t + 1700 * US, t,
                                         1 * MS, 5),
                   t + 2700 * US);
  /* Overdue long since, probed 0.4 ms ago: the gap after that probe. */
  assert_int_equal(uvcuda__plan_probe_at(t - 400 * US, t - 5 * MS, t - 5 * MS,
                                         t, 1 * MS, 5),
                   t + 600 * US);
  /* Never probed and overdue: due at once (in the past). */
  assert_true(uvcuda__plan_probe_at(0, t - 5 * MS, t - 5 * MS, t, 1 * MS, 5) <=
              t);
  /* A wait that never ends, 1 s old: the gap is 5 % of it. */
  assert_int_equal(uvcuda__plan_probe_at(t, t - 1000 * MS, t - 1000 * MS, t,
                                         1 * MS, 5),
                   t + 50 * MS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(no_look_while_the_loop_polls),
      cmocka_unit_test(unpredicted_waits_back_off_with_their_length),
      cmocka_unit_test(predicted_waits_are_looked_at_in_their_window),
      cmocka_unit_test(a_first_look_in_the_window_is_early),
      cmocka_unit_test(backoff_latency_is_a_share_of_the_wait),
      cmocka_unit_test(lead_and_floor_follow_the_lateness),
      cmocka_unit_test(modes_of_recent_lengths),
      cmocka_unit_test(uniform_lengths_rarely_make_a_mode),
      cmocka_unit_test(work_between_kinds_is_not_slept_through),
      cmocka_unit_test(a_kind_just_past_the_budget_is_spun_for),
      cmocka_unit_test(probes_back_off_with_the_youngest_wait),
      cmocka_unit_test(work_done_in_time_is_not_probed),
  };
  return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
