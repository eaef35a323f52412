/* Placement policies as pure logic, on hand-made access sequences (no
 * StarPU, no engine): the built-in static and auto policies, the presets
 * of pl_placement_by_name, and the built-in LRU policy.
 *
 * Expected answers are worked out by hand in the comments, and the auto
 * policy is also compared with a brute-force Belady oracle written here
 * (next use found by scanning the cyclic sequence step by step, victims
 * by sorting all candidates) on random sequences. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"
#include "test_util.h"

#define MAX_UNITS 64
#define MAX_STEPS 64
#define INF INT64_MAX

/* ------------------------------------------------------------ sequences */

/* An access sequence under construction: steps are added one at a time as
 * -1-terminated lists. */
typedef struct seq {
    int n_units, n_steps;
    int64_t bytes[MAX_UNITS];
    bool is_optim[MAX_UNITS];
    int offset[MAX_STEPS + 1];
    int units[MAX_UNITS * MAX_STEPS];
    pl_placement_options opts;
    pl_placement_info info;
} seq;

static void seq_init(seq *q, int n_units, const int64_t *bytes) {
    memset(q, 0, sizeof *q);
    q->n_units = n_units;
    for (int u = 0; u < n_units; u++) {
        q->bytes[u] = bytes[u];
        q->is_optim[u] = u & 1;
    }
}

/* Appends a step needing the units of `list` (terminated by -1). */
static void seq_step(seq *q, const int *list) {
    int k = q->offset[q->n_steps];
    for (int i = 0; list[i] >= 0; i++) q->units[k++] = list[i];
    q->offset[++q->n_steps] = k;
}

#define STEP(q, ...) seq_step((q), (const int[]){__VA_ARGS__, -1})
#define EMPTY_STEP(q) seq_step((q), (const int[]){-1})

/* The info for a policy, with q->opts as options (or none). */
static const pl_placement_info *seq_info(seq *q, bool with_options) {
    q->info = (pl_placement_info){
        .n_units = q->n_units,
        .unit_bytes = q->bytes,
        .unit_is_optim = q->is_optim,
        .n_steps = q->n_steps,
        .step_offset = q->offset,
        .step_units = q->units,
        .capacity = 1 << 20,
        .options = with_options ? &q->opts : NULL,
    };
    return &q->info;
}

static bool step_uses(const seq *q, int step, int u) {
    for (int i = q->offset[step]; i < q->offset[step + 1]; i++)
        if (q->units[i] == u) return true;
    return false;
}

/* ------------------------------------------------------------- checking */

static void print_list(const char *label, const int *a, int n) {
    printf("%s [", label);
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", a[i]);
    printf("]");
}

/* Compares a returned list with the expected one, element by element. */
static void expect_list(int line, const char *what, const int *got, int n_got,
                        const int *want, int n_want) {
    bool same = n_got == n_want;
    for (int i = 0; same && i < n_got; i++) same = got[i] == want[i];
    if (!same) {
        tu_failures++;
        printf("FAIL %s:%d: %s: ", __FILE__, line, what);
        print_list("got", got, n_got);
        print_list(", want", want, n_want);
        printf("\n");
    }
}

#define EXPECT(what, got, n_got, ...)                                        \
    do {                                                                     \
        const int want_[] = {__VA_ARGS__};                                   \
        expect_list(__LINE__, (what), (got), (n_got), want_,                 \
                    (int)(sizeof want_ / sizeof want_[0]));                  \
    } while (0)
#define EXPECT_NONE(what, got, n_got) expect_list(__LINE__, (what), (got), (n_got), NULL, 0)

static void all_resident(bool *res, int n, bool v) {
    for (int u = 0; u < n; u++) res[u] = v;
}

/* Runs a policy's choose_victims with before_step for the same step first,
 * as the engine does (announcing the sequence's own needs). */
static int victims_at(const pl_placement_policy *p, void *st, const seq *q,
                      int step, int64_t bytes, const bool *res, int *out) {
    pl_memory_stats ms = {.capacity = 1 << 20};
    p->before_step(st, step, q->units + q->offset[step],
                   q->offset[step + 1] - q->offset[step], res, &ms);
    return p->choose_victims(st, step, bytes, res, out);
}

/* ----------------------------------------------------- brute-force OPT */

/* Steps from `step` to u's next use, scanning the repeating sequence one
 * step at a time: step+1, ..., step+n_steps (the same step of the next
 * iteration). INF when no step uses u. */
static int64_t oracle_next_use(const seq *q, int step, int u) {
    for (int d = 1; d <= q->n_steps; d++)
        if (step_uses(q, (step + d) % q->n_steps, u)) return d;
    return INF;
}

static const int64_t *oracle_keys;
static int by_key_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (oracle_keys[x] != oracle_keys[y]) return oracle_keys[x] > oracle_keys[y] ? -1 : 1;
    return x - y;
}

/* Belady's victims: resident units the step does not need, furthest next
 * use first (ties: lowest index), while fewer than `bytes` are chosen. */
static int oracle_victims(const seq *q, int step, int64_t bytes,
                          const bool *res, int *out) {
    int64_t key[MAX_UNITS];
    int cand[MAX_UNITS], n = 0;
    for (int u = 0; u < q->n_units; u++) {
        if (!res[u] || step_uses(q, step, u)) continue;
        key[u] = oracle_next_use(q, step, u);
        cand[n++] = u;
    }
    oracle_keys = key;
    qsort(cand, (size_t)n, sizeof *cand, by_key_desc);
    int k = 0;
    int64_t sum = 0;
    if (bytes <= 0) return 0;
    while (k < n && sum < bytes) {
        out[k] = cand[k];
        sum += q->bytes[cand[k]];
        k++;
    }
    return k;
}

/* Prefetch: walk steps step+1 .. step+n_steps-1 (wrapping); distinct
 * non-resident units the current step does not need, in order, while they
 * fit the budget (stop at the first that does not) and max is not reached. */
static int oracle_prefetch(const seq *q, int step, int64_t budget, int max,
                           const bool *res, int *out) {
    bool taken[MAX_UNITS] = {false};
    int n = 0;
    int64_t used = 0;
    if (budget <= 0 || max <= 0) return 0;
    for (int d = 1; d < q->n_steps; d++) {
        int st = (step + d) % q->n_steps;
        for (int i = q->offset[st]; i < q->offset[st + 1]; i++) {
            int u = q->units[i];
            if (res[u] || step_uses(q, step, u) || taken[u]) continue;
            if (used + q->bytes[u] > budget) return n;
            taken[u] = true;
            out[n++] = u;
            used += q->bytes[u];
            if (n == max) return n;
        }
    }
    return n;
}

/* ----------------------------------------------------------------- auto */

/* The sequence of the auto tests: 4 chunks (8 units), 6 steps.
 *   s0 {0}   s1 {2}   s2 {4}   s3 {4,5}   s4 {2,3}   s5 {0,1}
 * Units 6 and 7 (chunk 3) are never used. Unit 3 is large (100 bytes),
 * the others 10. */
static void auto_seq(seq *q) {
    const int64_t b[8] = {10, 10, 10, 100, 10, 10, 10, 10};
    seq_init(q, 8, b);
    STEP(q, 0);
    STEP(q, 2);
    STEP(q, 4);
    STEP(q, 4, 5);
    STEP(q, 2, 3);
    STEP(q, 0, 1);
}

static void test_auto_victims(void) {
    const pl_placement_policy *p = pl_placement_auto();
    CHECK(p && strcmp(p->name, "auto") == 0, "pl_placement_auto is named auto");
    seq q;
    auto_seq(&q);
    void *st = p->init(seq_info(&q, false));
    CHECK(st != NULL, "auto init");
    bool res[8];
    int v[8], n;

    /* Step 0 (needs 0), everything resident. Next uses after s0: 1 → s5
     * (5 steps), 2 → s1 (1), 3 → s4 (4), 4 → s2 (2), 5 → s3 (3); 6, 7
     * never. Furthest first: 6, 7 (never, by index), 1, 3, 5, 4, 2. */
    all_resident(res, 8, true);
    n = victims_at(p, st, &q, 0, 1000, res, v);
    EXPECT("auto s0, all candidates", v, n, 6, 7, 1, 3, 5, 4, 2);
    /* `bytes` bounds the list: 15 bytes need two 10-byte units. */
    n = victims_at(p, st, &q, 0, 15, res, v);
    EXPECT("auto s0, 15 bytes", v, n, 6, 7);
    n = victims_at(p, st, &q, 0, 10, res, v);
    EXPECT("auto s0, exactly one unit's bytes", v, n, 6);
    n = victims_at(p, st, &q, 0, 0, res, v);
    EXPECT_NONE("auto s0, nothing to free", v, n);

    /* Wrap-around: step 4 (needs 2, 3), resident 0, 1, 4, 5. Next uses:
     * 0, 1 → s5 (1 step); 4 → s2 of the next iteration (4); 5 → s3 of the
     * next iteration (5). */
    all_resident(res, 8, false);
    res[0] = res[1] = res[4] = res[5] = true;
    n = victims_at(p, st, &q, 4, 10, res, v);
    EXPECT("auto s4 wraps: 5 is used furthest away", v, n, 5);
    n = victims_at(p, st, &q, 4, 20, res, v);
    EXPECT("auto s4, 20 bytes", v, n, 5, 4);
    n = victims_at(p, st, &q, 4, 25, res, v);
    EXPECT("auto s4, 25 bytes", v, n, 5, 4, 0);
    /* Not enough in all: every candidate, never the needed 2 and 3 even
     * when resident, never the non-resident 6, 7. */
    res[2] = res[3] = true;
    n = victims_at(p, st, &q, 4, 1 << 20, res, v);
    EXPECT("auto s4, more than all candidates hold", v, n, 5, 4, 0, 1);

    /* Step 5 (needs 0, 1): the last step; next uses wrap: 2 → s1 (2),
     * 3 → s4 (5), 4 → s2 (3), 5 → s3 (4); 6, 7 never. */
    all_resident(res, 8, true);
    n = victims_at(p, st, &q, 5, 1000, res, v);
    EXPECT("auto s5 (last step)", v, n, 6, 7, 3, 5, 4, 2);

    /* What before_step announces counts as needed too: step 1 with unit 5
     * announced on top of the sequence's 2. After s1: 0 → s5 (4), 1 → s5
     * (4), 3 → s4 (3), 4 → s2 (1); 6, 7 never. */
    pl_memory_stats ms = {0};
    const int extra[2] = {2, 5};
    p->before_step(st, 1, extra, 2, res, &ms);
    n = p->choose_victims(st, 1, 1000, res, v);
    EXPECT("auto s1 with unit 5 announced", v, n, 6, 7, 0, 1, 3, 4);
    p->free(st);
}

static void test_auto_prefetch(void) {
    const pl_placement_policy *p = pl_placement_auto();
    seq q;
    auto_seq(&q);
    bool res[8];
    int v[8], n;

    /* max_prefetch 0 (GeminiPlugin's default): nothing. */
    q.opts = (pl_placement_options){.max_prefetch = 0};
    void *st = p->init(seq_info(&q, true));
    all_resident(res, 8, false);
    res[0] = true;
    n = p->prefetch(st, 0, 1000, res, v);
    EXPECT_NONE("auto prefetch with max_prefetch 0", v, n);
    p->free(st);

    q.opts = (pl_placement_options){.max_prefetch = 3};
    st = p->init(seq_info(&q, true));
    /* From s0 (0 resident): s1 {2}, s2 {4}, s3 {4, 5} → 2, 4, 5. */
    n = p->prefetch(st, 0, 1000, res, v);
    EXPECT("auto prefetch from s0, order of next use", v, n, 2, 4, 5);
    /* The budget: 25 bytes fit two 10-byte units. */
    n = p->prefetch(st, 0, 25, res, v);
    EXPECT("auto prefetch within 25 bytes", v, n, 2, 4);
    n = p->prefetch(st, 0, 9, res, v);
    EXPECT_NONE("auto prefetch, budget below any unit", v, n);
    /* Wrapping from s4 (2, 3 resident): s5 {0, 1}, s0 {0}, s1 {2}
     * resident, s2 {4} → 0, 1, 4 (max 3). */
    all_resident(res, 8, false);
    res[2] = res[3] = true;
    n = p->prefetch(st, 4, 1000, res, v);
    EXPECT("auto prefetch wraps into the next iteration", v, n, 0, 1, 4);
    /* Stop at the first unit that does not fit: from s3 nothing resident,
     * s4 {2, 3}: 2 (10) fits 50, 3 (100) does not → only 2, though 0 and 1
     * (s5) would fit. Units 4, 5 are needed by s3 itself. */
    all_resident(res, 8, false);
    n = p->prefetch(st, 3, 50, res, v);
    EXPECT("auto prefetch stops at a unit over budget", v, n, 2);
    p->free(st);

    /* max_prefetch above the candidates: everything reachable, once each;
     * from s3: 2, 3 (s4), 0, 1 (s5); then s0 {0}, s1 {2}, s2 {4: needed}. */
    q.opts = (pl_placement_options){.max_prefetch = 100};
    st = p->init(seq_info(&q, true));
    n = p->prefetch(st, 3, 1000, res, v);
    EXPECT("auto prefetch, all distinct candidates", v, n, 2, 3, 0, 1);
    /* Announced needs are not prefetched: s3 with 2 announced too. */
    pl_memory_stats ms = {0};
    const int need[3] = {4, 5, 2};
    p->before_step(st, 3, need, 3, res, &ms);
    n = p->prefetch(st, 3, 1000, res, v);
    EXPECT("auto prefetch skips announced needs", v, n, 3, 0, 1);
    CHECK(p->where_to_update(st, 0) == PL_TIER_COMPUTE &&
              p->where_to_update(st, 3) == PL_TIER_COMPUTE,
          "auto updates on the compute tier");
    p->free(st);
}

/* Random sequences against the brute-force oracle: victims and prefetch
 * lists must match exactly; and the invariants hold on their own. */
static void test_auto_random(void) {
    const pl_placement_policy *p = pl_placement_auto();
    uint64_t rng = 12345;
    int mismatches = 0, checks = 0;
    for (int trial = 0; trial < 400; trial++) {
        seq q;
        int64_t b[MAX_UNITS];
        int nu = 1 + (int)(tu_splitmix64(&rng) % 16);
        int ns = 1 + (int)(tu_splitmix64(&rng) % 12);
        for (int u = 0; u < nu; u++) b[u] = 1 + (int64_t)(tu_splitmix64(&rng) % 50);
        seq_init(&q, nu, b);
        for (int s = 0; s < ns; s++) {
            int list[MAX_UNITS + 1], k = 0;
            for (int u = 0; u < nu; u++)
                if (tu_splitmix64(&rng) % 4 == 0) list[k++] = u;
            list[k] = -1;
            seq_step(&q, list);
        }
        q.opts = (pl_placement_options){.max_prefetch = (int)(tu_splitmix64(&rng) % 6)};
        void *st = p->init(seq_info(&q, true));
        for (int r = 0; r < 10; r++) {
            bool res[MAX_UNITS];
            int64_t total = 0;
            for (int u = 0; u < nu; u++) {
                res[u] = tu_splitmix64(&rng) % 2;
                total += b[u];
            }
            int step = (int)(tu_splitmix64(&rng) % (uint64_t)ns);
            int64_t bytes = (int64_t)(tu_splitmix64(&rng) % (uint64_t)(total + 20));
            int got[MAX_UNITS], want[MAX_UNITS];
            int ng = victims_at(p, st, &q, step, bytes, res, got);
            int nw = oracle_victims(&q, step, bytes, res, want);
            checks++;
            bool same = ng == nw;
            for (int i = 0; same && i < ng; i++) same = got[i] == want[i];
            /* Invariants, independent of the order: resident, not needed,
             * distinct, and no victim beyond the one that reached `bytes`. */
            int64_t sum = 0;
            bool seen[MAX_UNITS] = {false};
            for (int i = 0; i < ng; i++) {
                int u = got[i];
                CHECK(u >= 0 && u < nu && res[u] && !step_uses(&q, step, u) && !seen[u],
                      "auto victim %d of step %d is resident, unneeded, distinct", u, step);
                if (u >= 0 && u < nu) seen[u] = true;
                CHECK(sum < bytes, "auto victim list goes past the bytes asked for");
                sum += b[u >= 0 && u < nu ? u : 0];
            }
            if (!same && mismatches++ < 5) {
                printf("FAIL auto vs oracle (trial %d, step %d, bytes %lld): ", trial, step,
                       (long long)bytes);
                print_list("got", got, ng);
                print_list(", want", want, nw);
                printf("\n");
            }
            int64_t budget = (int64_t)(tu_splitmix64(&rng) % 120);
            ng = p->prefetch(st, step, budget, res, got);
            nw = oracle_prefetch(&q, step, budget, q.opts.max_prefetch, res, want);
            checks++;
            same = ng == nw;
            for (int i = 0; same && i < ng; i++) same = got[i] == want[i];
            if (!same && mismatches++ < 5) {
                printf("FAIL auto prefetch vs oracle (trial %d, step %d, budget %lld): ",
                       trial, step, (long long)budget);
                print_list("got", got, ng);
                print_list(", want", want, nw);
                printf("\n");
            }
        }
        p->free(st);
    }
    if (mismatches) tu_failures++;
    printf("%s auto vs brute-force Belady: %d of %d lists differ\n",
           mismatches ? "FAIL" : "ok  ", mismatches, checks);
}

/* A sequence long enough that a quadratic policy would show: 20000 steps
 * over 2000 units, every step's victims asked for. A guard against
 * per-call costs growing with n_steps · n_units, not a benchmark. */
static void test_auto_large(void) {
    enum { NU = 2000, NS = 20000 };
    int64_t *bytes = tu_xmalloc(NU * sizeof *bytes);
    bool *flag = tu_xmalloc(NU * sizeof *flag), *res = tu_xmalloc(NU * sizeof *res);
    int *off = tu_xmalloc((NS + 1) * sizeof *off), *units = tu_xmalloc(2 * NS * sizeof *units);
    int *v = tu_xmalloc(NU * sizeof *v);
    for (int u = 0; u < NU; u++) {
        bytes[u] = 100;
        flag[u] = u & 1;
        res[u] = true;
    }
    for (int s = 0; s <= NS; s++) off[s] = 2 * s;
    for (int s = 0; s < NS; s++) {
        units[2 * s] = (s * 7) % NU;
        units[2 * s + 1] = (s * 13 + 1) % NU;
    }
    pl_placement_options o = {.max_prefetch = 4};
    pl_placement_info info = {.n_units = NU, .unit_bytes = bytes, .unit_is_optim = flag,
                              .n_steps = NS, .step_offset = off, .step_units = units,
                              .capacity = 1 << 30, .options = &o};
    const pl_placement_policy *p = pl_placement_auto();
    void *st = p->init(&info);
    int64_t total = 0;
    for (int s = 0; s < NS; s += 10) {
        int n = p->choose_victims(st, s, 250, res, v);
        total += n;
        n = p->prefetch(st, s, 1000, res, v);
    }
    CHECK(total == 3 * (NS / 10), "large sequence: 3 victims (300 bytes) per call");
    p->free(st);
    free(bytes);
    free(flag);
    free(res);
    free(off);
    free(units);
    free(v);
}

/* --------------------------------------------------------------- static */

/* 4 chunks whose parameter units hold 10, 20, 30, 40 bytes (100 in all);
 * optimizer units twice that. Steps: s0 needs nothing, s1 needs unit 2. */
static void static_seq(seq *q) {
    const int64_t b[8] = {10, 20, 20, 40, 30, 60, 40, 80};
    seq_init(q, 8, b);
    EMPTY_STEP(q);
    STEP(q, 2);
}

static void check_tiers(int line, const pl_placement_policy *p, void *st,
                        const pl_tier *want) {
    for (int k = 0; k < 4; k++)
        if (p->where_to_update(st, k) != want[k]) {
            tu_failures++;
            printf("FAIL %s:%d: %s: chunk %d updates on tier %d, want %d\n", __FILE__,
                   line, p->name, k, (int)p->where_to_update(st, k), (int)want[k]);
        }
}
#define TIERS(p, st, a, b, c, d) \
    check_tiers(__LINE__, (p), (st), (const pl_tier[]){(a), (b), (c), (d)})
#define H PL_TIER_HOST
#define C PL_TIER_COMPUTE

static void test_static(void) {
    const pl_placement_policy *p = pl_placement_static();
    CHECK(p && strcmp(p->name, "static") == 0, "pl_placement_static is named static");
    seq q;
    static_seq(&q);
    bool res[8];
    int v[8], n;
    all_resident(res, 8, true);

    /* Defaults (no options): shard 1, offload_optim 0 → every parameter
     * unit is sharded (class 2), no optimizer state offloaded (class 3);
     * all updates on the compute tier. */
    void *st = p->init(seq_info(&q, false));
    n = victims_at(p, st, &q, 0, 1 << 20, res, v);
    EXPECT("static defaults: sharded params, then optimizer states", v, n,
           0, 2, 4, 6, 1, 3, 5, 7);
    TIERS(p, st, C, C, C, C);
    p->free(st);

    /* shard 0.25, offload_optim 0.5. Bytes before chunks 0..3: 0, 10, 30,
     * 60. Sharded: before < 25 → chunks 0, 1 (chunk 1 straddles 25: the
     * fraction rounds up to whole chunks). Optimizer offloaded: before < 50
     * → chunks 0, 1, 2. offload_param 0.5 is ignored (the others are not 1).
     * Classes: offloaded optimizer units 1, 3, 5; sharded params 0, 2;
     * optimizer state kept on compute 7; non-sharded params 4, 6. */
    q.opts = (pl_placement_options){.shard_param_frac = 0.25f, .offload_optim_frac = 0.5f,
                                    .offload_param_frac = 0.5f};
    st = p->init(seq_info(&q, true));
    TIERS(p, st, H, H, H, C);
    n = victims_at(p, st, &q, 0, 1 << 20, res, v);
    EXPECT("static 0.25/0.5: class order when everything must go", v, n,
           1, 3, 5, 0, 2, 7, 4, 6);
    n = victims_at(p, st, &q, 0, 1, res, v);
    EXPECT("static: one byte → the first offloaded optimizer unit", v, n, 1);
    /* 20 + 40 + 60 = 120 bytes: exactly the offloaded optimizer units. */
    n = victims_at(p, st, &q, 0, 120, res, v);
    EXPECT("static: 120 bytes = the offloaded optimizer units", v, n, 1, 3, 5);
    n = victims_at(p, st, &q, 0, 121, res, v);
    EXPECT("static: then sharded params", v, n, 1, 3, 5, 0);
    /* 150 = 120 + 10 + 20: all of classes 1 and 2; no non-sharded
     * parameter nor compute-tier optimizer state while those suffice. */
    n = victims_at(p, st, &q, 0, 150, res, v);
    EXPECT("static: non-sharded params stay while others suffice", v, n, 1, 3, 5, 0, 2);
    /* One byte more: the kept optimizer state (7) before non-sharded
     * params — the engine must never be stuck. */
    n = victims_at(p, st, &q, 0, 151, res, v);
    EXPECT("static: last resort, optimizer state first", v, n, 1, 3, 5, 0, 2, 7);
    n = victims_at(p, st, &q, 0, 231, res, v);
    EXPECT("static: last resort, non-sharded params last", v, n, 1, 3, 5, 0, 2, 7, 4);
    /* Needed (s1 needs 2) and non-resident (3, 6) units never come back. */
    res[3] = res[6] = false;
    n = victims_at(p, st, &q, 1, 1 << 20, res, v);
    EXPECT("static: never needed or non-resident units", v, n, 1, 5, 0, 7, 4);
    all_resident(res, 8, true);
    CHECK(p->prefetch(st, 0, 1 << 20, res, v) == 0, "static prefetches nothing");
    p->free(st);

    /* "Up to and including" would differ from the prefix rule here: shard
     * 0.1 → before(0) = 0 < 10 → chunk 0 only; shard 0.11 → before(1) = 10
     * < 11 → chunks 0 and 1 although they hold 30 > 11 bytes. */
    q.opts = (pl_placement_options){.shard_param_frac = 0.1f};
    st = p->init(seq_info(&q, true));
    n = victims_at(p, st, &q, 0, 10, res, v);
    EXPECT("static shard 0.1: chunk 0 sharded", v, n, 0);
    n = victims_at(p, st, &q, 0, 11, res, v);
    EXPECT("static shard 0.1: then compute-tier optimizer states", v, n, 0, 1);
    p->free(st);
    q.opts = (pl_placement_options){.shard_param_frac = 0.11f};
    st = p->init(seq_info(&q, true));
    n = victims_at(p, st, &q, 0, 11, res, v);
    EXPECT("static shard 0.11: chunk 1 straddles, so it is sharded", v, n, 0, 2);
    p->free(st);

    /* offload_param honoured: shard 1, offload_optim 1, offload_param 0.5
     * → params of chunks 0, 1, 2 offloaded (before 0, 10, 30 < 50), every
     * optimizer unit offloaded; only param 6 stays a plain sharded unit. */
    q.opts = (pl_placement_options){.shard_param_frac = 1.0f, .offload_optim_frac = 1.0f,
                                    .offload_param_frac = 0.5f};
    st = p->init(seq_info(&q, true));
    n = victims_at(p, st, &q, 0, 1 << 20, res, v);
    EXPECT("static offload_param 0.5: offloaded units first", v, n, 0, 1, 2, 3, 4, 5, 7, 6);
    TIERS(p, st, H, H, H, H);
    p->free(st);

    /* ... and ignored when offload_optim < 1: optimizer states of chunks
     * 0..3 offloaded (before 0, 10, 30, 60 < 90), params plain sharded. */
    q.opts = (pl_placement_options){.shard_param_frac = 1.0f, .offload_optim_frac = 0.9f,
                                    .offload_param_frac = 0.5f};
    st = p->init(seq_info(&q, true));
    n = victims_at(p, st, &q, 0, 1 << 20, res, v);
    EXPECT("static offload_param ignored without offload_optim 1", v, n,
           1, 3, 5, 7, 0, 2, 4, 6);
    TIERS(p, st, H, H, H, H);
    p->free(st);

    /* Fractions outside [0, 1] clamp: −1 → 0, 2 → 1. */
    q.opts = (pl_placement_options){.shard_param_frac = -1.0f, .offload_optim_frac = 2.0f};
    st = p->init(seq_info(&q, true));
    n = victims_at(p, st, &q, 0, 1 << 20, res, v);
    EXPECT("static clamped fractions", v, n, 1, 3, 5, 7, 0, 2, 4, 6);
    TIERS(p, st, H, H, H, H);
    CHECK(p->where_to_update(st, 4) == C && p->where_to_update(st, -1) == C,
          "static: chunks out of range update on compute");
    p->free(st);

    /* f = 1 takes every chunk, a trailing empty one included (its "before"
     * equals the total, which a strict < alone would miss). */
    const int64_t zb[4] = {10, 10, 0, 0};
    seq_init(&q, 4, zb);
    EMPTY_STEP(&q);
    q.opts = (pl_placement_options){.shard_param_frac = 1.0f, .offload_optim_frac = 1.0f};
    st = p->init(seq_info(&q, true));
    CHECK(p->where_to_update(st, 1) == H, "static f=1: an empty last chunk is offloaded");
    p->free(st);
}

/* -------------------------------------------------------------- by_name */

static void test_by_name(void) {
    pl_placement_options o = {.shard_param_frac = 0.3f, .offload_optim_frac = 0.4f,
                              .offload_param_frac = 0.5f, .max_prefetch = 7};
    CHECK(pl_placement_by_name("static", &o) == pl_placement_static(), "by_name static");
    CHECK(pl_placement_by_name("auto", &o) == pl_placement_auto(), "by_name auto");
    CHECK(o.shard_param_frac == 0.3f && o.offload_optim_frac == 0.4f &&
              o.offload_param_frac == 0.5f && o.max_prefetch == 7,
          "static/auto leave the options alone");
    CHECK(pl_placement_by_name("lru", &o) == NULL, "unknown name → NULL");
    CHECK(pl_placement_by_name("Static", &o) == NULL, "names are case-sensitive");
    CHECK(pl_placement_by_name(NULL, &o) == NULL, "NULL name → NULL");
    CHECK(pl_placement_by_name("", &o) == NULL, "empty name → NULL");

    seq q;
    static_seq(&q);
    bool res[8];
    int v[8], n;
    all_resident(res, 8, true);

    /* "cpu": everything sharded and offloaded → every unit in class 1,
     * victims by index; every update on the host. */
    const pl_placement_policy *cpu = pl_placement_by_name("cpu", &o);
    CHECK(cpu && strcmp(cpu->name, "cpu") == 0, "by_name cpu");
    CHECK(o.shard_param_frac == 1.0f && o.offload_optim_frac == 1.0f &&
              o.offload_param_frac == 1.0f && o.max_prefetch == 7,
          "cpu sets the three fractions to 1 (and nothing else)");
    /* The preset holds whatever options the engine passes. */
    q.opts = (pl_placement_options){.shard_param_frac = 0.0f};
    void *st = cpu->init(seq_info(&q, true));
    n = victims_at(cpu, st, &q, 0, 1 << 20, res, v);
    EXPECT("cpu preset: all units offloaded, by index", v, n, 0, 1, 2, 3, 4, 5, 6, 7);
    TIERS(cpu, st, H, H, H, H);
    cpu->free(st);

    /* "cuda": nothing sharded or offloaded → optimizer states (last
     * resort), then parameters; every update on compute. */
    const pl_placement_policy *cuda = pl_placement_by_name("cuda", &o);
    CHECK(cuda && strcmp(cuda->name, "cuda") == 0, "by_name cuda");
    CHECK(o.shard_param_frac == 0.0f && o.offload_optim_frac == 0.0f &&
              o.offload_param_frac == 0.0f,
          "cuda sets the three fractions to 0");
    q.opts = (pl_placement_options){.shard_param_frac = 1.0f, .offload_optim_frac = 1.0f};
    st = cuda->init(seq_info(&q, true));
    n = victims_at(cuda, st, &q, 0, 1 << 20, res, v);
    EXPECT("cuda preset: nothing offloaded", v, n, 1, 3, 5, 7, 0, 2, 4, 6);
    TIERS(cuda, st, C, C, C, C);
    cuda->free(st);
    CHECK(pl_placement_by_name("cpu", NULL) == cpu, "by_name cpu without options");
}

/* ------------------------------------------------------------------ LRU */

static void test_lru(void) {
    const pl_placement_policy *p = pl_placement_find("lru");
    CHECK(p && strcmp(p->name, "lru") == 0, "the built-in policy is named lru");
    /* 5 units of 10 bytes; s0 {0}, s1 {1}, s2 {2}, s3 {3}; unit 4 never. */
    const int64_t b[5] = {10, 10, 10, 10, 10};
    seq q;
    seq_init(&q, 5, b);
    STEP(&q, 0);
    STEP(&q, 1);
    STEP(&q, 2);
    STEP(&q, 3);
    void *st = p->init(seq_info(&q, false));
    bool res[5];
    int v[5], n;
    all_resident(res, 5, true);
    /* Steps 0, 1, 2, 3, 0, then 1: last uses (clock) 0 → 5, 1 → 6 (now),
     * 2 → 3, 3 → 4, 4 → never. LRU order: 4, 2, 3, 0. */
    pl_memory_stats ms = {0};
    for (int s = 0; s < 4; s++) p->before_step(st, s, q.units + q.offset[s], 1, res, &ms);
    p->before_step(st, 0, q.units + q.offset[0], 1, res, &ms);
    n = victims_at(p, st, &q, 1, 1000, res, v);
    EXPECT("lru: never used, then least recently used", v, n, 4, 2, 3, 0);
    n = p->choose_victims(st, 1, 15, res, v);
    EXPECT("lru: bytes bound the list", v, n, 4, 2);
    res[4] = res[2] = false;
    n = p->choose_victims(st, 1, 10, res, v);
    EXPECT("lru: only resident units", v, n, 3);
    CHECK(p->prefetch(st, 1, 1000, res, v) == 0, "lru prefetches nothing");
    CHECK(p->where_to_update(st, 0) == PL_TIER_COMPUTE, "lru updates on compute");
    p->free(st);

    /* The contrast with Belady at the same point: auto (after s1, next
     * uses 2 → 1 step, 3 → 2, 0 → 3) evicts 0 first, LRU evicts 2. */
    st = pl_placement_auto()->init(seq_info(&q, false));
    res[2] = true;
    res[4] = false;
    n = victims_at(pl_placement_auto(), st, &q, 1, 10, res, v);
    EXPECT("auto at the same point evicts the unit used furthest ahead", v, n, 0);
    pl_placement_auto()->free(st);
}

int main(void) {
    test_auto_victims();
    test_auto_prefetch();
    test_auto_random();
    test_auto_large();
    test_static();
    test_by_name();
    test_lru();
    if (tu_failures) {
        printf("FAIL: %d placement check(s) failed\n", tu_failures);
        return 1;
    }
    printf("ok: placement policies\n");
    return 0;
}
