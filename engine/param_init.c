/* Seeded parameter initialisation. Each parameter has its own stream,
 * seeded from (graph seed, parameter index) through splitmix64
 * (util/random.h), so the values of a parameter do not depend on how many
 * others precede it in a chunk or on the number of workers. */
#include <math.h>
#include <stdint.h>

#include "engine/engine_internal.h"
#include "util/random.h"

/* Uniform in [0, 1) from the top 24 bits: exactly representable floats. */
static float uniform01(uint64_t *state) {
    return (float)(pl_splitmix64_next(state) >> 40) * (1.0f / 16777216.0f);
}

/* Standard normal by Box–Muller (one value per pair of uniforms: simple,
 * and initialisation is not a hot path). */
static float normal01(uint64_t *state) {
    double u1 = ((double)(pl_splitmix64_next(state) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(pl_splitmix64_next(state) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void pl_param_init(const pl_graph_t *g, const pl_tensor_t *p, float *dst) {
    uint64_t state = g->seed ^ (0xA0761D6478BD642Full * (uint64_t)(p->param_index + 1));
    for (int64_t i = 0; i < p->numel; i++) {
        switch (p->init) {
        case PL_INIT_UNIFORM:
            dst[i] = (2.0f * uniform01(&state) - 1.0f) * p->init_scale;
            break;
        case PL_INIT_NORMAL: dst[i] = normal01(&state) * p->init_scale; break;
        case PL_INIT_ZEROS: dst[i] = 0.0f; break;
        case PL_INIT_ONES: dst[i] = 1.0f; break;
        }
    }
}
