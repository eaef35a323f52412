/* Fuzzes the answers of a user placement policy (engine/placement.c): a
 * policy registered through the public API (pl_placement_register) whose
 * every answer (choose_victims' victims, prefetch's units, their counts,
 * where_to_update's tiers) is read from the input, trains a 4-layer MLP,
 * 128 wide, whose model state (1 MiB of weights, gradients and AdamW
 * moments; 0.75 MiB with SGD) fills the runtime's 1 MiB compute-tier
 * budget (a disk tier behind it): the engine asks for victims at most
 * steps (its model-data budget is a fifth of the budget in the warm-up
 * iteration, 90 % of it less the activations after), and StarPU evicts on
 * its own when the policy's answers leave too little room.
 *
 * The runtime is started once per process (fuzz_setup) and serves every
 * input; each input builds an engine, trains two steps and frees it.
 *
 * Oracle, independent of the engine's own checks: the harness judges each
 * answer it gives against the contract of include/pleiades/placement.h (a
 * count in [0, n_units], nothing written past victims[n_units] /
 * units[n_units], units in [0, n_units), each at most once, victims among
 * those offered in `resident` and not needed by the step (the units
 * before_step announced), a prefetch of at most max_prefetch units whose
 * bytes not yet resident fit its budget, a tier that is a pl_tier). Then:
 *  - with no bad answer, every step succeeds, its loss bitwise equal to
 *    the reference run's (the same model, options and batches under the
 *    built-in "auto" policy: placement only moves data), and the
 *    parameters after the run are bitwise the reference's;
 *  - a bad answer given for a step of the forward or backward pass fails
 *    that train step; one given for an optimizer update (or a tier) fails
 *    that call or the next (the engine's documented rule), at the latest
 *    a final probe step; the failure is PL_STATUS_RUNTIME_ERROR with a
 *    message naming the policy, the callback, the step and the bad value
 *    of one of the bad answers given;
 *  - no call fails without a bad answer before it;
 *  - after a failure the engine is still usable: a step with good answers
 *    (auto's) gives the reference loss of the step the engine is at
 *    (pl_engine_steps: a refused update changed nothing), and the
 *    parameters are the reference's after as many updates.
 * Valid victims that free fewer bytes than asked are a hint StarPU's own
 * accounting corrects: they must not change the losses either. Besides:
 * the sanitizers, and libFuzzer's timeout for a step that hangs.
 *
 * Input: byte 0 picks the options (max_prefetch 0-3, gradient clipping on
 * or off, AdamW or SGD, 1 or 2 tiles); bytes 1-8 are where_to_update's
 * answers (chunk c gets byte 1 + c % 8: below 0xE0 a valid tier, above a
 * value that is none); the rest is a stream that choose_victims reads from
 * its front and prefetch from its back: per call a mode byte and the bytes
 * the mode takes (fuzz_answer): auto's answer, a valid random answer,
 * auto's answer spoilt one way, raw bytes, nothing, everything it may
 * list. Once the two ends meet every answer is auto's.
 *
 * Seeds: all-auto inputs for each option set, and inputs whose answers
 * are each kind of bad answer and each kind of valid one. With
 * PL_FUZZ_VERBOSE set in the environment each input prints its options,
 * the bad answers it gave and how its last call ended. */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <pleiades.h>

#include "fuzz_common.h"

const char fuzz_name[] = "placement";

enum {
    W = 128,          /* width of every layer */
    LAYERS = 4,       /* a chunk per weight (64 KiB), and one per bias */
    B = 4,            /* samples per batch */
    RUNS = 2,         /* train steps per input */
    REF_STEPS = 3,    /* the reference's steps (runs, the probe, recovery) */
    N_CONFIGS = 8,    /* option sets byte 0 picks (prefetch aside) */
    N_TIERS = 8,      /* where_to_update answers in the header */
    MAX_BAD = 16,     /* bad tiers remembered per input */
};

static pl_runtime_t *runtime;
static pl_graph_t *graph;
static float batches[REF_STEPS + 1][B * W]; /* batch k feeds step k (1-based) */
static double ref_loss[N_CONFIGS][REF_STEPS + 1];
static float *ref_params[N_CONFIGS][REF_STEPS + 1]; /* after k updates */
static float *got_params;
static size_t n_values;

static void die_library(const char *what) { fuzz_die("%s: %s", what, pl_last_error()); }

/* ------------------------------------------------------ the input */

static fuzz_reader in; /* the header: options and tiers */

/* The rest, read by the policy's callbacks. choose_victims and prefetch
 * run on StarPU's threads, where_to_update on the thread that submits the
 * updates, at times that vary from run to run against theirs: the stream
 * is for the first two, the tiers a table of where_to_update's. The
 * stream's front is choose_victims', its back prefetch's (so that the
 * fuzzer reaches prefetch's answers, later and rarer, without shifting
 * every answer before them); once the two meet, every answer is auto's. */
static const uint8_t *stream;
static size_t stream_lo, stream_hi;
static uint8_t tiers[N_TIERS];
static bool behave; /* answer as auto, read nothing: the probe and recovery */

static uint8_t next_byte(bool victims) {
    if (stream_lo >= stream_hi) return 0;
    return victims ? stream[stream_lo++] : stream[--stream_hi];
}

typedef struct bad_answer {
    char fn[16];     /* choose_victims, prefetch, where_to_update */
    int step;        /* the placement step (an update's, for a tier) */
    int n_values;    /* one of which the engine's message must give */
    long long values[8];
} bad_answer;

/* The engine reports the first bad answer it finds. choose_victims and
 * prefetch answer one at a time, each checked before the next call, so
 * the report names the first of theirs, unless a bad tier came earlier:
 * where_to_update answers on another thread, as the updates are
 * submitted, and any of its bad answers may come first. */
static pthread_mutex_t bad_lock = PTHREAD_MUTEX_INITIALIZER;
static bad_answer first_bad;        /* choose_victims' or prefetch's */
static bad_answer tier_bads[MAX_BAD]; /* where_to_update's (the first MAX_BAD) */
static int n_bads;          /* bad answers given */
static int n_tier_bads;     /* of which where_to_update's */
static int pass_bads;       /* of which for forward or backward steps */

/* ------------------------------------------------------ the policy */

typedef struct fz_state {
    void *inner; /* auto's state: auto's answers */
    int n_units, n_steps, n_chunks, n_ops;
    int *step_offset, *step_units; /* copies of the info's */
    int64_t *unit_bytes;           /* likewise */
    int max_prefetch;              /* the options' */
    int step;                      /* of the last before_step */
    bool *needed, *taken, *offered;
    int *cands;
} fz_state;

static const pl_placement_policy *auto_policy;
static int n_ops; /* the graph's ops, for the step numbering (set by fz_init) */

static void fz_free(void *state) {
    fz_state *s = state;
    if (!s) return;
    auto_policy->free(s->inner);
    free(s->step_offset);
    free(s->step_units);
    free(s->unit_bytes);
    free(s->needed);
    free(s->taken);
    free(s->offered);
    free(s->cands);
    free(s);
}

static void *fz_init(const pl_placement_info *info) {
    int n = info->n_units;
    if (n <= 0 || n % 2 || info->n_steps <= n / 2 || (info->n_steps - n / 2) % 2)
        fuzz_die("init: %d units, %d steps", n, info->n_steps);
    fz_state *s = calloc(1, sizeof *s);
    if (!s) fuzz_die("out of memory");
    s->n_units = n;
    s->n_steps = info->n_steps;
    s->n_chunks = n / 2;
    s->n_ops = n_ops = (info->n_steps - n / 2) / 2;
    s->step = -1;
    int total = info->step_offset[info->n_steps];
    s->step_offset = malloc(((size_t)info->n_steps + 1) * sizeof *s->step_offset);
    s->step_units = malloc(((size_t)total + 1) * sizeof *s->step_units);
    s->unit_bytes = malloc((size_t)n * sizeof *s->unit_bytes);
    s->max_prefetch = info->options->max_prefetch;
    s->needed = calloc((size_t)n, sizeof *s->needed);
    s->taken = calloc((size_t)n, sizeof *s->taken);
    s->offered = calloc((size_t)n, sizeof *s->offered);
    s->cands = calloc((size_t)n, sizeof *s->cands);
    if (!s->step_offset || !s->step_units || !s->unit_bytes || !s->needed || !s->taken ||
        !s->offered || !s->cands)
        fuzz_die("out of memory");
    memcpy(s->unit_bytes, info->unit_bytes, (size_t)n * sizeof *s->unit_bytes);
    memcpy(s->step_offset, info->step_offset, ((size_t)info->n_steps + 1) * sizeof(int));
    memcpy(s->step_units, info->step_units, (size_t)total * sizeof(int));
    for (int i = 0; i < total; i++)
        if (s->step_units[i] < 0 || s->step_units[i] >= n)
            fuzz_die("init: step unit %d out of [0, %d)", s->step_units[i], n);
    s->inner = auto_policy->init(info);
    return s;
}

static void fz_before_step(void *state, int step, const int *needed, int n_needed,
                           const bool *resident, const pl_memory_stats *stats) {
    fz_state *s = state;
    if (step < 0 || step >= s->n_steps)
        fuzz_die("before_step: step %d out of [0, %d)", step, s->n_steps);
    int lo = s->step_offset[step], hi = s->step_offset[step + 1];
    if (n_needed != hi - lo || (n_needed && memcmp(needed, s->step_units + lo,
                                                   (size_t)n_needed * sizeof *needed)))
        fuzz_die("before_step: step %d's needed units are not those of the info", step);
    s->step = step;
    memset(s->needed, 0, (size_t)s->n_units * sizeof *s->needed);
    for (int i = 0; i < n_needed; i++) s->needed[needed[i]] = true;
    auto_policy->before_step(s->inner, step, needed, n_needed, resident, stats);
}

/* Records a bad answer (values: what the engine's message may give). */
static void bad(const fz_state *s, const char *fn, int step, int n_values,
                const long long *values) {
    pthread_mutex_lock(&bad_lock);
    bool tier = strcmp(fn, "where_to_update") == 0;
    bad_answer *b = tier ? (n_tier_bads < MAX_BAD ? &tier_bads[n_tier_bads] : NULL)
                         : (n_bads == n_tier_bads ? &first_bad : NULL);
    if (b) {
        snprintf(b->fn, sizeof b->fn, "%s", fn);
        b->step = step;
        b->n_values = n_values < 8 ? n_values : 8;
        memcpy(b->values, values, (size_t)b->n_values * sizeof *values);
    }
    n_bads++;
    n_tier_bads += tier;
    if (step < 2 * s->n_ops) pass_bads++;
    pthread_mutex_unlock(&bad_lock);
}

/* The harness's own judgement of an answer: `n` returned, out[0, wrote)
 * written. Victims must also be offered and not needed; a prefetch lists
 * at most max_prefetch units, those not resident worth at most `budget`
 * bytes. */
static void judge(fz_state *s, const char *fn, int n, const int *out, int wrote,
                  bool victims, const bool *resident, int64_t budget) {
    int cap = s->n_units;
    long long why[8];
    int k = 0;
    if (wrote > cap) why[k++] = wrote; /* "wrote at least <wrote> entries" */
    if (n < 0 || n > cap) why[k++] = n;
    memset(s->taken, 0, (size_t)cap * sizeof *s->taken);
    int64_t bytes = 0;
    for (int i = 0; n <= cap && i < n && k < 8; i++) {
        int u = out[i];
        if (u < 0 || u >= cap) why[k++] = u;
        else if (s->taken[u]) why[k++] = u;
        else if (victims && (s->needed[u] || !s->offered[u])) why[k++] = u;
        else if (!victims && !resident[u]) bytes += s->unit_bytes[u];
        if (u >= 0 && u < cap) s->taken[u] = true;
    }
    if (!victims && n > s->max_prefetch && n <= cap && k < 8) why[k++] = n;
    if (!victims && bytes > budget && k < 8) why[k++] = bytes;
    if (k) bad(s, fn, s->step, k, why);
}

/* A small signed value: mostly near the units' range, sometimes extreme. */
static int small_int(uint8_t b) {
    return b == 0x80 ? INT_MIN : b == 0x7F ? INT_MAX : (int)(int8_t)b;
}

/* Spoils a valid answer out[0, n) one way the input picks; returns the
 * count, *wrote the entries written. */
static int spoil(const fz_state *s, bool victims, int *out, int n, int *wrote) {
    int cap = s->n_units;
    uint8_t how = next_byte(victims), b = next_byte(victims);
    switch (how % 6) {
    case 0: /* an entry twice (past the capacity when the answer is full) */
        if (n > 0) out[n] = out[b % n], *wrote = ++n;
        return n;
    case 1: { /* an entry replaced by a small value */
        int at = b % (n + 1);
        uint8_t v = next_byte(victims);
        out[at] = at < cap ? small_int(v) : (int)(int8_t)v;
        if (at == n) *wrote = ++n;
        return n;
    }
    case 2: { /* the count off (INT_MIN, INT_MAX at the extremes) */
        long long m = (long long)n + small_int(b);
        return m > INT_MAX ? INT_MAX : m < INT_MIN ? INT_MIN : (int)m;
    }
    case 3: /* entries written past the capacity */
        *wrote = cap + 1 + b % (cap + 1);
        for (int i = cap; i < *wrote; i++) out[i] = b % cap;
        return n;
    default: { /* 4: a unit the step needs; 5: a unit not offered */
        int pick[64], np = 0;
        for (int u = 0; u < cap && np < 64; u++)
            if (how % 6 == 4 ? s->needed[u] : !s->offered[u]) pick[np++] = u;
        if (np == 0) return n;
        int at = n < cap ? n : b % n;
        out[at] = pick[b % np];
        if (at == n) *wrote = ++n;
        return n;
    }
    }
}

/* The answer of choose_victims (victims) or prefetch (!victims) into out[]
 * (which holds n_units entries, and 2·n_units + 1 in this engine: its
 * guard entries, which tell a policy writing past the capacity; writing
 * further would corrupt the heap, which no engine can check). */
static int fuzz_answer(fz_state *s, bool victims, int step, int64_t bytes,
                       const bool *resident, int *out) {
    int cap = s->n_units, most = 2 * cap + 1;
    uint8_t mode = behave ? 0 : next_byte(victims);
    int n = 0, wrote = 0;
    /* Candidates a valid answer may list: victims offered and not needed;
     * any unit for a prefetch (resident ones are skipped). */
    int nc = 0;
    for (int u = 0; u < cap; u++)
        if (!victims || (s->offered[u] && !s->needed[u])) s->cands[nc++] = u;
    switch (mode % 8) {
    case 3: { /* a valid random answer */
        int want = next_byte(victims) % ((victims ? cap : s->max_prefetch) + 1);
        int64_t left = bytes;
        for (int i = 0; i < want && nc > 0; i++) {
            int j = next_byte(victims) % nc, u = s->cands[j];
            s->cands[j] = s->cands[--nc];
            if (!victims && !resident[u]) {
                if (s->unit_bytes[u] > left) continue; /* over the budget */
                left -= s->unit_bytes[u];
            }
            out[n++] = u;
        }
        wrote = n;
        break;
    }
    case 5: /* raw: a count and entries (none past the capacity equal to
             * INT_MIN: that is the engine's guard value, and a policy
             * writing exactly it there cannot be told from one that does
             * not write) */
        n = small_int(next_byte(victims));
        wrote = next_byte(victims) % (most + 1);
        for (int i = 0; i < wrote; i++) {
            uint8_t v = next_byte(victims);
            out[i] = i < cap ? small_int(v) : (int)(int8_t)v;
        }
        break;
    case 6: /* nothing */
        break;
    case 7: /* everything it may list (a prefetch: mostly beyond its limits) */
        for (int i = 0; i < nc; i++) out[n++] = s->cands[i];
        wrote = n;
        break;
    default: /* 0-2: auto's answer; 4: auto's answer, spoilt one way */
        n = victims ? auto_policy->choose_victims(s->inner, step, bytes, resident, out)
                    : auto_policy->prefetch(s->inner, step, bytes, resident, out);
        wrote = n;
        if (mode % 8 == 4) n = spoil(s, victims, out, n, &wrote);
        break;
    }
    judge(s, victims ? "choose_victims" : "prefetch", n, out, wrote, victims, resident,
          bytes);
    return n;
}

static int fz_choose_victims(void *state, int step, int64_t bytes, const bool *resident,
                             int *victims) {
    fz_state *s = state;
    if (step != s->step || bytes <= 0 || !resident || !victims)
        fuzz_die("choose_victims: step %d (before_step's %d), %" PRId64 " bytes", step,
                 s->step, bytes);
    for (int u = 0; u < s->n_units; u++) s->offered[u] = resident[u];
    return fuzz_answer(s, true, step, bytes, resident, victims);
}

static int fz_prefetch(void *state, int step, int64_t budget, const bool *resident,
                       int *units) {
    fz_state *s = state;
    if (step != s->step || budget <= 0 || !resident || !units)
        fuzz_die("prefetch: step %d (before_step's %d), budget %" PRId64, step, s->step,
                 budget);
    return fuzz_answer(s, false, step, budget, resident, units);
}

static pl_tier fz_where_to_update(void *state, int chunk) {
    fz_state *s = state;
    if (chunk < 0 || chunk >= s->n_chunks)
        fuzz_die("where_to_update: chunk %d out of [0, %d)", chunk, s->n_chunks);
    if (behave) return auto_policy->where_to_update(s->inner, chunk);
    uint8_t b = tiers[chunk % N_TIERS];
    int tier = b < 0xE0 ? b % 3 : b < 0xF0 ? 3 + (b - 0xE0) : (int)(int8_t)b;
    if (tier < 0 || tier > PL_TIER_DISK) {
        long long v = tier;
        bad(s, "where_to_update", 2 * s->n_ops + chunk, 1, &v);
    }
    return (pl_tier)tier;
}

static const pl_placement_policy fuzz_policy = {
    .name = "fuzz", .init = fz_init, .before_step = fz_before_step,
    .choose_victims = fz_choose_victims, .prefetch = fz_prefetch,
    .where_to_update = fz_where_to_update, .free = fz_free};

/* ------------------------------------------------------ running */

typedef struct config {
    int max_prefetch;
    int id; /* clip, SGD, tiles: the reference's index */
} config;

static config config_of(uint8_t b) { return (config){.max_prefetch = b & 3, .id = (b >> 2) & 7}; }

static pl_engine_t *engine_for(const pl_placement_policy *policy, config c) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.tiles = c.id & 4 ? 2 : 1;
    eo.chunk_elems = (size_t)W * W;
    eo.max_norm = c.id & 1 ? 0.05f : 0.0f;
    eo.optimizer.kind = c.id & 2 ? PL_OPTIMIZER_SGD : PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = c.id & 2 ? 0.1f : 1e-3f;
    eo.placement.policy = policy;
    eo.placement.max_prefetch = c.max_prefetch;
    pl_engine_t *e = pl_engine_new(runtime, graph, &eo);
    if (!e) die_library("pl_engine_new");
    return e;
}

static void read_params(pl_engine_t *e, float *out) {
    for (int i = 0; i < pl_graph_num_params(graph); i++) {
        const pl_tensor_t *p = pl_graph_param(graph, i);
        size_t n = (size_t)pl_tensor_numel(p);
        if (pl_engine_get_param(e, p, out, n) != PL_STATUS_OK) die_library("pl_engine_get_param");
        out += n;
    }
}

static pl_status train(pl_engine_t *e, int k, double *loss) {
    const void *d[1] = {batches[k]};
    pl_batch b = {.size = B, .data = d};
    pl_step_result r;
    pl_clear_error();
    pl_status st = pl_engine_train_step(e, &b, &r);
    *loss = r.loss;
    return st;
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

void fuzz_setup(void) {
    fuzz_starpu_env();
    char dir[4096];
    fuzz_scratch_path(dir, sizeof dir, "offload");
    if (mkdir(dir, 0700) != 0) fuzz_die("cannot create %s", dir);
    pl_runtime_options ro = pl_runtime_options_default();
    ro.device = PL_DEVICE_CPU;
    ro.cpu_workers = 1;
    ro.compute_budget_mb = 1;
    ro.offload_dir = dir;
    if (!(runtime = pl_runtime_new(&ro))) die_library("pl_runtime_new");
    graph = pl_graph_new(3);
    int64_t shape[1] = {W};
    pl_tensor_t *h = graph ? pl_graph_input(graph, "x", PL_DTYPE_F32, 1, shape) : NULL;
    for (int l = 0; h && l < LAYERS; l++) {
        char name[16];
        snprintf(name, sizeof name, "fc%d", l);
        h = pl_linear(graph, h, W, name);
        if (h && l + 1 < LAYERS) h = pl_relu(graph, h);
    }
    if (!h || pl_graph_set_loss(graph, pl_mean(graph, h)) != PL_STATUS_OK)
        die_library("building the MLP");
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int k = 0; k <= REF_STEPS; k++)
        for (int i = 0; i < B * W; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            batches[k][i] = (float)((double)(x >> 11) * 0x1.0p-53 - 0.5);
        }
    n_values = (size_t)pl_graph_param_count(graph);
    if (!(got_params = malloc(n_values * sizeof *got_params))) fuzz_die("out of memory");
    auto_policy = pl_placement_auto();
    if (pl_placement_register(&fuzz_policy) != PL_STATUS_OK) die_library("registering 'fuzz'");
    /* The references, under auto; lru's losses must be the same (what a
     * policy chooses never changes them). */
    const pl_placement_policy *lru = pl_placement_find("lru");
    if (!lru) die_library("pl_placement_find(\"lru\")");
    for (int id = 0; id < N_CONFIGS; id++) {
        config c = {.max_prefetch = 2, .id = id};
        pl_engine_t *e = engine_for(auto_policy, c), *l = engine_for(lru, c);
        for (int k = 1; k <= REF_STEPS; k++) {
            double loss_lru;
            if (train(e, k, &ref_loss[id][k])) die_library("the reference's step");
            if (train(l, k, &loss_lru)) die_library("lru's step");
            if (!same_bits(loss_lru, ref_loss[id][k]))
                fuzz_die("options %d, step %d: loss %.17g under auto, %.17g under lru", id, k,
                         ref_loss[id][k], loss_lru);
            if (!(ref_params[id][k] = malloc(n_values * sizeof(float))))
                fuzz_die("out of memory");
            read_params(e, ref_params[id][k]);
        }
        pl_engine_free(l);
        pl_engine_free(e);
    }
}

void fuzz_teardown(void) {
    pl_graph_free(graph);
    pl_runtime_free(runtime);
    graph = NULL;
    runtime = NULL;
    for (int id = 0; id < N_CONFIGS; id++)
        for (int k = 0; k <= REF_STEPS; k++) free(ref_params[id][k]);
    free(got_params);
}

/* Whether `msg` has `v` as a whole number. */
static bool has_number(const char *msg, long long v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", v);
    size_t n = strlen(num);
    for (const char *p = strstr(msg, num); p; p = strstr(p + 1, num)) {
        bool start = p == msg || (!(p[-1] >= '0' && p[-1] <= '9') && (v < 0 || p[-1] != '-'));
        bool end = !(p[n] >= '0' && p[n] <= '9');
        if (start && end) return true;
    }
    return false;
}

/* Whether `msg` names bad answer `b`: its callback, its step and one of
 * its bad values. */
static bool names(const char *msg, const bad_answer *b) {
    char step[64];
    if (b->step >= 2 * n_ops)
        snprintf(step, sizeof step, "update of chunk %d", b->step - 2 * n_ops);
    else
        snprintf(step, sizeof step, "%s of op", b->step < n_ops ? "forward" : "backward");
    if (!strstr(msg, b->fn) || !strstr(msg, step)) return false;
    for (int j = 0; j < b->n_values; j++)
        if (has_number(msg, b->values[j])) return true;
    return false;
}

/* A failed call: a runtime error naming the policy and the first bad
 * answer of choose_victims or prefetch, or one of where_to_update's. */
static void check_failure(pl_status st, const char *when) {
    const char *msg = pl_last_error();
    if (n_bads == 0)
        fuzz_die("%s failed without a bad answer: %s: %s", when, pl_status_string(st), msg);
    if (st != PL_STATUS_RUNTIME_ERROR || !strstr(msg, "placement policy 'fuzz'"))
        fuzz_die("%s: a bad answer gave %s, \"%s\" (want a runtime error naming the policy)",
                 when, pl_status_string(st), msg);
    if (n_bads > n_tier_bads && names(msg, &first_bad)) return;
    for (int i = 0; i < n_tier_bads && i < MAX_BAD; i++)
        if (names(msg, &tier_bads[i])) return;
    if (n_bads > n_tier_bads)
        fuzz_die("%s: the message \"%s\" does not name the first bad answer (%s for step "
                 "%d, value %lld%s) nor a bad tier (%d given)", when, msg, first_bad.fn,
                 first_bad.step, first_bad.values[0], first_bad.n_values > 1 ? ", ..." : "",
                 n_tier_bads);
    fuzz_die("%s: the message \"%s\" names none of the %d bad tiers given", when, msg,
             n_tier_bads);
}

static void check_params(pl_engine_t *e, int id, const char *when) {
    int64_t k = pl_engine_steps(e);
    if (k < 0 || k > REF_STEPS) fuzz_die("%s: %" PRId64 " steps", when, k);
    if (k == 0) return; /* no update ran: nothing to compare (no reference) */
    read_params(e, got_params);
    if (memcmp(got_params, ref_params[id][k], n_values * sizeof *got_params) != 0)
        fuzz_die("%s: the parameters after %" PRId64 " updates are not the reference's",
                 when, k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    in = (fuzz_reader){data, size};
    config c = config_of(fuzz_byte(&in));
    for (int i = 0; i < N_TIERS; i++) tiers[i] = fuzz_byte(&in);
    stream = in.data;
    stream_lo = 0;
    stream_hi = in.size;
    behave = false;
    n_bads = n_tier_bads = pass_bads = 0;
    pl_engine_t *e = engine_for(&fuzz_policy, c);
    pl_status st = PL_STATUS_OK;
    double loss = 0.0;
    char when[64] = "";
    for (int k = 1; k <= RUNS && !st; k++) {
        int before = pass_bads;
        snprintf(when, sizeof when, "train step %d", k);
        st = train(e, k, &loss);
        if (!st && pass_bads > before)
            fuzz_die("%s succeeded after %d bad answers for its passes", when,
                     pass_bads - before);
        if (!st && !same_bits(loss, ref_loss[c.id][k]))
            fuzz_die("%s: loss %.17g, the reference's %.17g (options %d)", when, loss,
                     ref_loss[c.id][k], c.id);
    }
    behave = true;
    if (!st && n_bads > 0) { /* an update's bad answer: the next call fails */
        snprintf(when, sizeof when, "the probe step after %d bad answers", n_bads);
        st = train(e, (int)pl_engine_steps(e) + 1, &loss);
        if (!st) fuzz_die("%s succeeded", when);
    }
    if (getenv("PL_FUZZ_VERBOSE"))
        fprintf(stderr, "  options %d prefetch %d: %d bad (%d in passes, %d tiers; the first "
                "%s for step %d, value %lld), %s: %s\n", c.id, c.max_prefetch, n_bads,
                pass_bads, n_tier_bads, n_bads > n_tier_bads ? first_bad.fn : "-",
                first_bad.step, first_bad.values[0], when, st ? pl_last_error() : "ok");
    if (st) {
        check_failure(st, when);
        /* The engine is still usable: one more step, with good answers,
         * from where the refused step left it. */
        int64_t k = pl_engine_steps(e) + 1;
        if (k < 1 || k > REF_STEPS) fuzz_die("%" PRId64 " steps after a failure", k - 1);
        n_bads = n_tier_bads = 0;
        st = train(e, (int)k, &loss);
        if (st) fuzz_die("the step after a failure (good answers) failed: %s", pl_last_error());
        if (!same_bits(loss, ref_loss[c.id][k]))
            fuzz_die("the step after a failure: loss %.17g, the reference's step %" PRId64
                     " %.17g (options %d)", loss, k, ref_loss[c.id][k], c.id);
    }
    check_params(e, c.id, "after the run");
    pl_engine_free(e);
    return 0;
}

/* A seed: the options byte, the tiers, then a stream whose front holds
 * `victims` repeated `times` times and whose back `prefetch` as often
 * (laid out so that prefetch, reading backwards, reads it in order). */
static void put_seed(const char *dir, const char *name, uint8_t options, uint8_t tier,
                     const uint8_t *victims, size_t n_victims, const uint8_t *prefetch,
                     size_t n_prefetch, int times, int *count) {
    uint8_t buf[1 + N_TIERS + 1024];
    size_t n = 0;
    buf[n++] = options;
    for (int i = 0; i < N_TIERS; i++) buf[n++] = tier;
    for (int t = 0; t < times; t++)
        for (size_t i = 0; i < n_victims && n < sizeof buf; i++) buf[n++] = victims[i];
    size_t back = (size_t)times * n_prefetch;
    if (n + back > sizeof buf) fuzz_die("seed %s: too long", name);
    for (size_t i = 0; i < back; i++) buf[n + back - 1 - i] = prefetch[i % n_prefetch];
    fuzz_seed_put(dir, name, buf, n + back, count);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    /* Every option set, all answers auto's (max_prefetch 0-3 in turn). */
    for (int id = 0; id < N_CONFIGS; id++) {
        char name[32];
        snprintf(name, sizeof name, "auto-options-%d", id);
        put_seed(dir, name, (uint8_t)(id << 2 | (id & 3)), 0, NULL, 0, NULL, 0, 0, &count);
    }
    /* Each kind of answer given to every choose_victims call, then to
     * every prefetch call, the other answering as auto (prefetching 2,
     * options 0: AdamW, no clipping, one tile). */
    static const struct {
        const char *name;
        uint8_t pattern[8];
        size_t n;
    } kinds[] = {
        {"valid-random", {3, 4, 1, 2, 7, 0}, 6},
        {"valid-nothing", {6}, 1},
        {"everything", {7}, 1},
        {"spoilt-twice", {4, 0, 0}, 3},
        {"spoilt-out-of-range", {4, 1, 0, 100}, 4},
        {"spoilt-negative", {4, 1, 0, 0xF9}, 4},
        {"spoilt-count-huge", {4, 2, 0x7F}, 3},
        {"spoilt-count-minus-1", {4, 2, 0xFF}, 3},
        {"spoilt-count-min", {4, 2, 0x80}, 3},
        {"spoilt-past-capacity", {4, 3, 2}, 3},
        {"spoilt-needed", {4, 4, 0}, 3},
        {"spoilt-not-offered", {4, 5, 1}, 3},
        {"raw", {5, 3, 4, 0, 1, 2, 3}, 7},
        {"raw-count-0-past-capacity", {5, 0, 20, 1, 1, 1, 1, 1}, 8},
    };
    static const uint8_t auto_answer[1] = {0};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "victims-%s", kinds[i].name);
        put_seed(dir, name, 2, 0, kinds[i].pattern, kinds[i].n, auto_answer, 1, 40, &count);
        snprintf(name, sizeof name, "prefetch-%s", kinds[i].name);
        put_seed(dir, name, 2, 0, auto_answer, 1, kinds[i].pattern, kinds[i].n, 40, &count);
    }
    /* Only later answers bad: the first few dozen auto's. */
    static const uint8_t late[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0};
    put_seed(dir, "victims-spoilt-late", 0, 0, late, sizeof late, NULL, 0, 1, &count);
    static const uint8_t mixed[] = {0, 3, 7, 6, 3, 2, 1, 0, 6};
    put_seed(dir, "valid-mixed", 3, 0, mixed, sizeof mixed, mixed, sizeof mixed, 20, &count);
    /* Tiers: valid ones, and values that are none (8, -1). */
    put_seed(dir, "tiers-valid", 1 << 2, 0x41, NULL, 0, NULL, 0, 0, &count);
    put_seed(dir, "tier-8", 0, 0xE5, NULL, 0, NULL, 0, 0, &count);
    put_seed(dir, "tier-negative", 3 << 2, 0xFF, NULL, 0, NULL, 0, 0, &count);
    fuzz_seed_put(dir, "empty", "", 0, &count);
    return count;
}
