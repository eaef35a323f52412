/* Softmax cross-entropy, accuracy and mean. The softmax subtracts the row
 * maximum before exponentiating so large logits cannot overflow, and the
 * log-sum-exp is formed from that shifted sum. */
#include <math.h>

#include "codelets/cpu/kernels.h"

double cross_entropy_forward(float *dlogits, const float *logits,
                             const int32_t *labels, int64_t N, int64_t K,
                             float scale, int64_t *bad_labels) {
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = logits + i * K;
        int32_t y = labels[i];
        float maxv = row[0];
        for (int64_t k = 1; k < K; k++) maxv = row[k] > maxv ? row[k] : maxv;
        double sum = 0.0;
        for (int64_t k = 0; k < K; k++) sum += exp((double)row[k] - maxv);
        double lse = maxv + log(sum);
        if (y < 0 || y >= K) {
            (*bad_labels)++;
            if (dlogits)
                for (int64_t k = 0; k < K; k++) dlogits[i * K + k] = 0.0f;
            continue;
        }
        total += lse - row[y];
        if (dlogits) {
            float *drow = dlogits + i * K;
            for (int64_t k = 0; k < K; k++) {
                float p = (float)exp((double)row[k] - lse);
                drow[k] = (p - (k == y ? 1.0f : 0.0f)) * scale;
            }
        }
    }
    return total;
}

int64_t accuracy_forward(const float *logits, const int32_t *labels, int64_t N,
                         int64_t K) {
    int64_t correct = 0;
    for (int64_t i = 0; i < N; i++) {
        const float *row = logits + i * K;
        int64_t best = 0;
        for (int64_t k = 1; k < K; k++)
            if (row[k] > row[best]) best = k;
        correct += best == labels[i];
    }
    return correct;
}

double mean_forward(const float *inp, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += inp[i];
    return s;
}

void mean_backward(float *dinp, int64_t n, float scale, int accumulate) {
    for (int64_t i = 0; i < n; i++) dinp[i] = accumulate ? dinp[i] + scale : scale;
}
