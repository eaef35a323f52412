/* Helpers of the tests against PyTorch references; see reference_util.h. */
#include "reference_util.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------- file reading */

void tu_need(tu_reader *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) {
        fprintf(stderr, "%s: truncated file (unexpected end of data)\n",
                r->path);
        exit(2);
    }
}

uint32_t tu_rd_u32(tu_reader *r) {
    tu_need(r, 4);
    uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 |
                 (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    r->p += 4;
    return v;
}

int32_t tu_rd_i32(tu_reader *r) { return (int32_t)tu_rd_u32(r); }

float tu_rd_f32(tu_reader *r) {
    uint32_t u = tu_rd_u32(r);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float *tu_rd_f32s(tu_reader *r, int64_t n) {
    tu_need(r, (size_t)n * 4);
    float *a = tu_xmalloc((size_t)n * sizeof *a);
    for (int64_t i = 0; i < n; i++) a[i] = tu_rd_f32(r);
    return a;
}

int32_t *tu_rd_i32s(tu_reader *r, int64_t n) {
    tu_need(r, (size_t)n * 4);
    int32_t *a = tu_xmalloc((size_t)n * sizeof *a);
    for (int64_t i = 0; i < n; i++) a[i] = tu_rd_i32(r);
    return a;
}

void tu_read_reference(tu_reader *r, tu_reference *ref, int n_params,
                       const int64_t *numel, int64_t n_logits, int n_steps) {
    ref->n_params = n_params;
    ref->p0 = tu_xmalloc((size_t)n_params * sizeof *ref->p0);
    ref->grads = tu_xmalloc((size_t)n_params * sizeof *ref->grads);
    ref->p_final = tu_xmalloc((size_t)n_params * sizeof *ref->p_final);
    for (int i = 0; i < n_params; i++) ref->p0[i] = tu_rd_f32s(r, numel[i]);
    ref->logits = tu_rd_f32s(r, n_logits);
    ref->loss = tu_rd_f32(r);
    for (int i = 0; i < n_params; i++)
        ref->grads[i] = tu_rd_f32s(r, numel[i]);
    ref->step_losses = tu_rd_f32s(r, n_steps);
    for (int i = 0; i < n_params; i++)
        ref->p_final[i] = tu_rd_f32s(r, numel[i]);
}

void tu_reference_free(tu_reference *ref) {
    for (int i = 0; i < ref->n_params; i++) {
        free(ref->p0[i]);
        free(ref->grads[i]);
        free(ref->p_final[i]);
    }
    free(ref->p0);
    free(ref->grads);
    free(ref->p_final);
    free(ref->logits);
    free(ref->step_losses);
}

void tu_open_reference(tu_reader *r, int argc, char **argv,
                       const tu_format *f) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s %s.bin\n", argv[0], f->name);
        exit(2);
    }
    r->path = argv[1];
    r->data = tu_read_file(r->path, &r->size);
    if (!r->data) {
        perror(r->path);
        exit(2);
    }
    r->p = r->data;
    r->end = r->data + r->size;
    if (r->size < f->header_bytes) {
        fprintf(stderr, "%s: %zu bytes, too short for the %zu-byte header\n",
                r->path, r->size, f->header_bytes);
        exit(2);
    }
    int32_t magic = tu_rd_i32(r), version = tu_rd_i32(r);
    if (magic != f->magic) {
        fprintf(stderr,
                "%s: bad magic %d (expected %d): not %s reference file; "
                "regenerate with /usr/bin/python3 tests/reference/%s.py\n",
                r->path, magic, f->magic, f->what, f->name);
        exit(2);
    }
    if (version != f->version) {
        fprintf(stderr,
                "%s: version %d, this test reads version %d; regenerate with "
                "/usr/bin/python3 tests/reference/%s.py\n",
                r->path, version, f->version, f->name);
        exit(2);
    }
}

void tu_expect_size(const tu_reader *r, size_t expect) {
    if (r->size != expect) {
        fprintf(stderr, "%s: %zu bytes, expected %zu for this header\n",
                r->path, r->size, expect);
        exit(2);
    }
}

/* ----------------------------------------------------------- comparisons */

float tu_max_abs(const float *a, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(a[i]) > m) m = fabsf(a[i]);
    return m;
}

void tu_check_array(const char *name, const float *got, const float *ref,
                    int64_t n, float rtol, float min_scale) {
    double maxdiff = 0.0;
    int64_t at = 0;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d != d) { /* report where the NaN is */
            nan = 1;
            at = i;
        }
        if (d > maxdiff) {
            maxdiff = d;
            at = i;
        }
    }
    double scale = tu_max_abs(ref, n);
    if (scale < min_scale) scale = min_scale;
    int ok = !nan && maxdiff <= rtol * scale;
    printf("%s %s %.3e (rel %.3e, tol %.0e; worst [%lld] %.8g vs %.8g)\n",
           ok ? "OK" : "FAIL", name, maxdiff, maxdiff / scale, (double)rtol,
           (long long)at, (double)got[at], (double)ref[at]);
    if (!ok) tu_failures++;
}

void tu_check_scalar(const char *name, double got, double ref, double rtol) {
    double d = fabs(got - ref);
    double scale = fabs(ref) > 1.0 ? fabs(ref) : 1.0;
    int ok = d == d && d <= rtol * scale;
    printf("%s %s %.3e (%.8f vs %.8f, tol %.0e)\n", ok ? "OK" : "FAIL", name,
           d, got, ref, rtol * scale);
    if (!ok) tu_failures++;
}

/* ------------------------------------------------ the shared experiment */

void tu_workers_from_env(pl_runtime_options *o) {
    const char *nw = getenv("PL_CPU_WORKERS");
    if (nw && *nw) o->cpu_workers = atoi(nw);
}

pl_engine_options tu_reference_options(int batch_size, float lr) {
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = batch_size;
    eo.tiles = 2;
    eo.optimizer.kind = PL_OPTIMIZER_ADAMW;
    eo.optimizer.lr = lr;
    eo.optimizer.weight_decay = 0.01f;
    eo.optimizer.beta1 = 0.9f;
    eo.optimizer.beta2 = 0.999f;
    eo.optimizer.eps = 1e-8f;
    return eo;
}

void tu_check_param_count(const pl_graph_t *g, int64_t total) {
    if (pl_graph_param_count(g) != total) {
        fprintf(stderr, "FAIL graph has %lld parameters, reference %lld\n",
                (long long)pl_graph_param_count(g), (long long)total);
        exit(1);
    }
}

void tu_load_param(pl_engine_t *e, pl_tensor_t *param, const float *values,
                   int64_t numel, const char *name) {
    CHECK_PL(pl_engine_set_param(e, param, values, (size_t)pl_tensor_numel(param)));
    float *got = tu_param_values(e, param, numel);
    if (memcmp(got, values, (size_t)numel * sizeof *got) != 0) {
        printf("FAIL set/get_param %s round trip\n", name);
        tu_failures++;
    }
    free(got);
}

pl_step_result tu_check_first_step(pl_engine_t *e, const pl_batch *batch,
                                   const tu_reference *ref, int64_t n_logits,
                                   const int32_t *labels, int64_t n_labels,
                                   const char *labels_what) {
    pl_step_options so = {.forward_only = false, .return_loss = true,
                          .return_output_label = true};
    pl_step_result res;
    memset(&res, 0, sizeof res);
    CHECK_PL(pl_engine_forward_backward(e, batch, &so, &res));
    if (res.size != batch->size || !res.output) {
        printf("FAIL output: size %lld, output %p\n", (long long)res.size,
               (const void *)res.output);
        tu_failures++;
    } else {
        tu_check_array("logits", res.output, ref->logits, n_logits, 1e-5f,
                       1e-30f);
    }
    if (res.labels) {
        int same = memcmp(res.labels, labels,
                          (size_t)n_labels * sizeof *labels) == 0;
        printf("%s %s\n", same ? "OK" : "FAIL", labels_what);
        if (!same) tu_failures++;
    }
    tu_check_scalar("loss", res.loss, ref->loss, 1e-5);
    return res;
}

float *tu_param_values(pl_engine_t *e, pl_tensor_t *param, int64_t numel) {
    float *values = tu_xmalloc((size_t)numel * sizeof *values);
    CHECK_PL(pl_engine_get_param(e, param, values, (size_t)pl_tensor_numel(param)));
    return values;
}

void tu_check_grad(pl_engine_t *e, pl_tensor_t *param, const char *name,
                   const float *ref, int64_t numel, float rtol) {
    float *got = tu_xmalloc((size_t)numel * sizeof *got);
    CHECK_PL(pl_engine_get_grad(e, param, got, (size_t)pl_tensor_numel(param)));
    char what[160];
    snprintf(what, sizeof what, "grad %s", name);
    tu_check_array(what, got, ref, numel, rtol, 1e-30f);
    free(got);
}

void tu_check_train_steps(pl_engine_t *e, const pl_batch *batch,
                          const float *step_losses, int n_steps,
                          double rtol) {
    CHECK_PL(pl_engine_optimizer_step(e));
    for (int k = 1; k < n_steps; k++) {
        pl_step_result sr;
        memset(&sr, 0, sizeof sr);
        CHECK_PL(pl_engine_train_step(e, batch, &sr));
        char name[64];
        snprintf(name, sizeof name, "step %d loss", k);
        tu_check_scalar(name, sr.loss, step_losses[k], rtol);
    }
    if (pl_engine_steps(e) != n_steps) {
        printf("FAIL optimizer steps %lld, expected %d\n",
               (long long)pl_engine_steps(e), n_steps);
        tu_failures++;
    }
}

int tu_report(const char *test) {
    if (tu_failures) {
        printf("[%s] %d check(s) FAILED\n", test, tu_failures);
        return 1;
    }
    printf("[%s] all checks passed\n", test);
    return 0;
}

/* ------------------------------------------------- text reference files */

typedef struct text_array {
    char name[64];
    int64_t n;
    double *v;
} text_array;

static struct {
    const char *name;
    text_array *a;
    int n, cap;
} text_ref;

static void text_unusable(const char *path, const char *why) {
    printf("FAIL %s: %s (regenerate it: /usr/bin/python3 tests/reference/%s.py > "
           "tests/reference/%s.txt)\n", path, why, text_ref.name, text_ref.name);
    exit(2);
}

void tu_text_load(const char *path, const char *name) {
    text_ref.name = name;
    size_t len;
    char *text = tu_read_file(path, &len);
    if (!text) text_unusable(path, "cannot be read");
    char header[80];
    int hl = snprintf(header, sizeof header, "%s 1\n", name);
    if (strncmp(text, header, (size_t)hl) != 0)
        text_unusable(path, "not a version 1 file of this reference");
    char *next;
    for (char *line = text + hl; *line; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        if (*line == '\n' || *line == '#') continue;
        if (text_ref.n == text_ref.cap) {
            text_ref.cap = text_ref.cap ? 2 * text_ref.cap : 32;
            text_ref.a = realloc(text_ref.a, (size_t)text_ref.cap * sizeof *text_ref.a);
            if (!text_ref.a) text_unusable(path, "out of memory");
        }
        text_array *r = &text_ref.a[text_ref.n];
        int used = 0;
        long long n = 0;
        /* The count is checked against the line before it sizes anything. */
        if (sscanf(line, "%63s %lld%n", r->name, &n, &used) != 2 || n < 1 ||
            n > (long long)(next - line))
            text_unusable(path, "a line is not '<name> <count> <values...>'");
        r->n = n;
        r->v = tu_xmalloc((size_t)n * sizeof *r->v);
        char *p = line + used;
        for (int64_t i = 0; i < n; i++) {
            char *end;
            r->v[i] = strtod(p, &end);
            if (end == p || end > next) text_unusable(path, "an array is shorter than its count");
            p = end;
        }
        text_ref.n++;
    }
    free(text);
}

const double *tu_text_get(const char *array, int64_t n) {
    for (int i = 0; i < text_ref.n; i++)
        if (!strcmp(text_ref.a[i].name, array)) {
            if (text_ref.a[i].n != n) {
                printf("FAIL reference %s has %lld values, want %lld\n", array,
                       (long long)text_ref.a[i].n, (long long)n);
                exit(2);
            }
            return text_ref.a[i].v;
        }
    printf("FAIL reference has no array %s\n", array);
    exit(2);
}

float *tu_text_floats(const char *array, int64_t n) {
    const double *v = tu_text_get(array, n);
    float *f = tu_xmalloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    return f;
}

void tu_text_free(void) {
    for (int i = 0; i < text_ref.n; i++) free(text_ref.a[i].v);
    free(text_ref.a);
    text_ref.a = NULL;
    text_ref.n = text_ref.cap = 0;
}
