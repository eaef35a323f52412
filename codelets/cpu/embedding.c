/* Token + position embedding (GPT-2's encoder). */
#include <string.h>

#include "codelets/cpu/kernels.h"

void embedding_forward(float *out, const int32_t *tokens, const float *wte,
                       const float *wpe, int64_t B, int64_t T, int64_t C,
                       int64_t V, int64_t *bad_tokens) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            float *o = out + (b * T + t) * C;
            int32_t tok = tokens[b * T + t];
            const float *p = wpe + t * C;
            if (tok < 0 || tok >= V) {
                (*bad_tokens)++;
                memset(o, 0, C * sizeof *o);
                continue;
            }
            const float *e = wte + (int64_t)tok * C;
            for (int64_t c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

void embedding_backward_weight(float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, int64_t B, int64_t T,
                               int64_t C, int64_t V, int accumulate_wte,
                               int accumulate_wpe) {
    if (!accumulate_wte) memset(dwte, 0, V * C * sizeof *dwte);
    if (!accumulate_wpe) memset(dwpe, 0, T * C * sizeof *dwpe);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *d = dout + (b * T + t) * C;
            int32_t tok = tokens[b * T + t];
            /* The forward zeroes a bad token's whole row (wpe included), so
             * that row has no gradient into either table. */
            if (tok < 0 || tok >= V) continue;
            float *p = dwpe + t * C;
            for (int64_t c = 0; c < C; c++) p[c] += d[c];
            float *e = dwte + (int64_t)tok * C;
            for (int64_t c = 0; c < C; c++) e[c] += d[c];
        }
}
