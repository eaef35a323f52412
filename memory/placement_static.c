/* Gemini's static placement (Colossal-AI StaticPlacementPolicy), as a
 * pl_placement_policy: a fixed classification of the units decided once,
 * from three fractions of chunk memory, instead of a look at the future.
 *
 *   shard_param_frac   (default 1.0): the parameter units (values and
 *                      gradients, unit 2k) of the first that fraction of
 *                      chunk memory are "sharded": they may leave the
 *                      compute tier between uses. The others stay.
 *   offload_optim_frac (0.0): the optimizer-state units (2k+1) of the first
 *                      that fraction are "offloaded": they live on the host
 *                      and their chunk's update runs there.
 *   offload_param_frac (0.0): the parameter units of the first that
 *                      fraction are offloaded too; honoured only when the
 *                      other two are 1.0 (Colossal-AI ignores it otherwise,
 *                      since unsharded parameters cannot be offloaded and
 *                      offloading parameters whose update runs on the
 *                      device would move them twice per iteration).
 *
 * "The first f of chunk memory" is Colossal-AI's setup_grads_device rule:
 * walk the chunks in index order and take chunk k while the bytes already
 * taken (chunks 0..k-1, exclusive of k) are below f·total (f read to 6
 * decimal places, see in_first). The chunk that
 * straddles the boundary is therefore included — the fraction is rounded
 * up to whole chunks — f = 0 takes none and f = 1 takes all (zero-byte
 * chunks included). "Chunk memory" is the parameter unit's bytes (values +
 * gradients), the same measure for all three fractions, so that the
 * classification does not change with the optimizer.
 *
 * Victims, when the engine must free `bytes` for a step, come in a fixed
 * order of classes (never a unit the step needs, never a non-resident one):
 *   1. offloaded units (optimizer states of offloaded chunks, and
 *      parameters when offload_param_frac is honoured): they belong on
 *      the host anyway;
 *   2. sharded parameter units;
 *   3. optimizer states that are not offloaded;
 *   4. parameter units that are not sharded.
 * Classes 3 and 4 break the classification, and are only reached when 1
 * and 2 together cannot free `bytes`: the engine must never be stuck, so
 * the policy then gives what makes the step possible, non-sharded
 * parameters last. Within a class, lowest unit index first: static needs
 * no recency, and index order matches the forward pass's use order, so the
 * earliest-used chunks go first. The list stops as soon as the bytes
 * chosen reach `bytes` (the engine asks only under pressure; evicting more
 * would move data for nothing). Static prefetches nothing. */
#include "memory/placement.h"

#include <stdlib.h>
#include <string.h>

typedef struct static_state {
    pl_place_seq q;
    int n_chunks;
    bool *optim_offloaded; /* [n_chunks] */
    int *order;            /* all units in victim order (classes, index) */
} static_state;

/* Forced fractions of a preset, or NULL to read the options. */
typedef struct preset {
    float shard, offload_optim, offload_param;
} preset;

static const preset cpu_preset = {1.0f, 1.0f, 1.0f};
static const preset cuda_preset = {0.0f, 0.0f, 0.0f};

/* Out-of-range or NaN fractions become the nearest meaningful value
 * (`!(f > 0)` also catches NaN). */
static double clamp_frac(float f) {
    if (!(f > 0.0f)) return 0.0;
    return f >= 1.0f ? 1.0 : (double)f;
}

/* Colossal-AI's prefix rule (see the top of the file). The fraction is
 * read to 6 decimal places: 0.1f is 0.100000001 and even the double 0.7
 * times 100 is 70.00000000000001, so a plain `before < f·total` would take
 * the chunk that starts exactly at the boundary (the one at byte 10 of 100
 * for f = 0.1). */
static bool in_first(double before, double total, double f) {
    if (f >= 1.0) return true;
    if (f <= 0.0) return false;
    return before < (f - 1e-6) * total;
}

static void *static_init_preset(const pl_placement_info *info, const preset *p) {
    static_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (!pl_place_seq_init(&s->q, info)) {
        free(s);
        return NULL;
    }
    int nu = s->q.n_units;
    s->n_chunks = (nu + 1) / 2;
    s->optim_offloaded = calloc((size_t)s->n_chunks + 1, sizeof *s->optim_offloaded);
    bool *sharded = calloc((size_t)s->n_chunks + 1, sizeof *sharded);
    bool *param_offloaded = calloc((size_t)s->n_chunks + 1, sizeof *param_offloaded);
    s->order = calloc((size_t)nu + 1, sizeof *s->order);
    if (!s->optim_offloaded || !sharded || !param_offloaded || !s->order) {
        free(sharded);
        free(param_offloaded);
        free(s->optim_offloaded);
        free(s->order);
        pl_place_seq_free(&s->q);
        free(s);
        return NULL;
    }

    const pl_placement_options *o = &s->q.options;
    double shard = clamp_frac(p ? p->shard : o->shard_param_frac);
    double optim = clamp_frac(p ? p->offload_optim : o->offload_optim_frac);
    double param = clamp_frac(p ? p->offload_param : o->offload_param_frac);
    if (shard < 1.0 || optim < 1.0) param = 0.0;

    double total = 0;
    for (int k = 0; k < s->n_chunks; k++) total += (double)s->q.unit_bytes[2 * k];
    double before = 0;
    for (int k = 0; k < s->n_chunks; k++) {
        sharded[k] = in_first(before, total, shard);
        s->optim_offloaded[k] = in_first(before, total, optim);
        param_offloaded[k] = in_first(before, total, param);
        before += (double)s->q.unit_bytes[2 * k];
    }

    /* The victim order: classes 1-4 of the list at the top (0-3 here), by
     * ascending index within each. */
    int n = 0;
    for (int cls = 0; cls < 4; cls++)
        for (int u = 0; u < nu; u++) {
            int k = u / 2;
            bool optim_unit = pl_place_seq_is_optim(&s->q, u);
            int c;
            if (optim_unit)
                c = s->optim_offloaded[k] ? 0 : 2;
            else
                c = param_offloaded[k] ? 0 : sharded[k] ? 1 : 3;
            if (c == cls) s->order[n++] = u;
        }
    free(sharded);
    free(param_offloaded);
    return s;
}

static void *static_init(const pl_placement_info *info) {
    return static_init_preset(info, NULL);
}
static void *cpu_init(const pl_placement_info *info) {
    return static_init_preset(info, &cpu_preset);
}
static void *cuda_init(const pl_placement_info *info) {
    return static_init_preset(info, &cuda_preset);
}

static void static_before_step(void *state, int step, const int *needed,
                               int n_needed, const bool *resident,
                               const pl_memory_stats *stats) {
    (void)resident;
    (void)stats;
    if (state) pl_place_seq_announce(&((static_state *)state)->q, step, needed, n_needed);
}

static int static_choose_victims(void *state, int step, int64_t bytes,
                                 const bool *resident, int *victims) {
    static_state *s = state;
    if (!s || !resident || !victims || bytes <= 0) return 0;
    pl_place_seq_mark_needed(&s->q, step);
    int n = 0;
    int64_t freed = 0;
    for (int i = 0; i < s->q.n_units && freed < bytes; i++) {
        int u = s->order[i];
        if (!resident[u] || pl_place_seq_needed(&s->q, u)) continue;
        victims[n++] = u;
        freed += s->q.unit_bytes[u];
    }
    return n;
}

static int static_prefetch(void *state, int step, int64_t budget,
                           const bool *resident, int *units) {
    /* Static placement decides nothing by the future: units come in when
     * their step needs them. */
    (void)state;
    (void)step;
    (void)budget;
    (void)resident;
    (void)units;
    return 0;
}

static pl_tier static_where_to_update(void *state, int chunk) {
    static_state *s = state;
    if (!s || chunk < 0 || chunk >= s->n_chunks) return PL_TIER_COMPUTE;
    return s->optim_offloaded[chunk] ? PL_TIER_HOST : PL_TIER_COMPUTE;
}

static void static_free(void *state) {
    static_state *s = state;
    if (!s) return;
    pl_place_seq_free(&s->q);
    free(s->optim_offloaded);
    free(s->order);
    free(s);
}

#define STATIC_POLICY(NAME, INIT)                                              \
    {                                                                         \
        .name = NAME, .init = INIT, .before_step = static_before_step,        \
        .choose_victims = static_choose_victims, .prefetch = static_prefetch, \
        .where_to_update = static_where_to_update, .free = static_free,       \
    }

static const pl_placement_policy static_policy = STATIC_POLICY("static", static_init);
static const pl_placement_policy cpu_policy = STATIC_POLICY("cpu", cpu_init);
static const pl_placement_policy cuda_policy = STATIC_POLICY("cuda", cuda_init);

const pl_placement_policy *pl_placement_static(void) { return &static_policy; }
const pl_placement_policy *pl_placement_static_cpu(void) { return &cpu_policy; }
const pl_placement_policy *pl_placement_static_cuda(void) { return &cuda_policy; }

bool pl_placement_static_sharded(const pl_placement_policy *policy,
                                 const pl_placement_options *options, const int64_t *bytes,
                                 int n, bool *sharded) {
    const preset *p = policy == pl_placement_static_cpu()    ? &cpu_preset
                      : policy == pl_placement_static_cuda() ? &cuda_preset
                                                             : NULL;
    if (!p && policy != pl_placement_static()) return false;
    double f = clamp_frac(p ? p->shard : options ? options->shard_param_frac : 1.0f);
    double total = 0, before = 0;
    for (int k = 0; k < n; k++) total += (double)bytes[k];
    for (int k = 0; k < n; k++) {
        sharded[k] = in_first(before, total, f);
        before += (double)bytes[k];
    }
    return true;
}
