/* Helpers shared by the C tests; see test_util.h. */
#define _GNU_SOURCE /* mkdtemp, nftw's FTW_DEPTH / FTW_PHYS */
#include "test_util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Line-buffered stdout: CTest reads a pipe, and a test killed by its time
 * limit would otherwise lose everything it printed (where it got to). */
__attribute__((constructor)) static void tu_line_buffered_stdout(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
}

static char tu_timeout_msg[160];

/* Only async-signal-safe calls: write and _exit. */
static void tu_on_alarm(int sig) {
    (void)sig;
    ssize_t w = write(STDOUT_FILENO, tu_timeout_msg, strlen(tu_timeout_msg));
    (void)w;
    _exit(1);
}

bool tu_pipeline_skipped(const pl_runtime_t *rt, int stages, const char *what) {
    int gpus = pl_runtime_cuda_workers(rt);
    if (gpus == 0 || gpus >= stages) return false;
    printf("skip %s: %d pipeline stages need %d GPUs, this runtime has %d (the CPU suite "
           "runs it)\n", what, stages, stages, gpus);
    return true;
}

void tu_time_limit(unsigned seconds, const char *what) {
    snprintf(tu_timeout_msg, sizeof tu_timeout_msg, "FAIL: timed out after %u s (%s)\n",
             seconds, what);
    signal(SIGALRM, tu_on_alarm);
    alarm(seconds);
}

int tu_failures;

void tu_expect_error_at(const char *file, int line, const char *what,
                        pl_status got, pl_status want, const char *frag1,
                        const char *frag2) {
    const char *msg = pl_last_error();
    bool ok = got == want && (!frag1 || strstr(msg, frag1)) &&
              (!frag2 || strstr(msg, frag2));
    if (!ok) {
        tu_failures++;
        printf("FAIL %s:%d: %s: status '%s' (want '%s'), message \"%s\" "
               "(must contain \"%s\"%s%s%s)\n",
               file, line, what, pl_status_string(got),
               pl_status_string(want), msg, frag1 ? frag1 : "",
               frag2 ? ", \"" : "", frag2 ? frag2 : "", frag2 ? "\"" : "");
    } else {
        printf("  ok  %-34s -> %s\n", what, msg);
    }
}

void *tu_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("FAIL: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ----------------------------------------------------- scratch directory */

/* Short enough for snprintf'd paths in the tests' fixed buffers. */
static char scratch[64];

bool tu_scratch_create(const char *prefix) {
    int n = snprintf(scratch, sizeof scratch, "/tmp/%s_XXXXXX", prefix);
    if (n < 0 || (size_t)n >= sizeof scratch) {
        scratch[0] = '\0';
        errno = ENAMETOOLONG;
        return false;
    }
    return mkdtemp(scratch) != NULL;
}

const char *tu_scratch_dir(void) { return scratch; }

void tu_scratch_path(char *out, size_t size, const char *name) {
    snprintf(out, size, "%s/%s", scratch, name);
}

static int remove_entry(const char *path, const struct stat *sb, int flag,
                        struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_remove_tree(const char *path) {
    /* FTW_DEPTH: a directory's entries go before the directory itself. */
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---------------------------------------------------------------- files */

void *tu_read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* ----------------------------------------------------------------- PRNG */

uint64_t tu_splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

void tu_ramp_tokens(uint64_t *state, int vocab, int context, int n_seq, int32_t *tokens,
                    int32_t *targets) {
    for (int b = 0; b < n_seq; b++) {
        int32_t x = (int32_t)(tu_splitmix64(state) % (uint64_t)vocab);
        for (int i = 0; i <= context; i++) {
            if (i < context) tokens[b * context + i] = x;
            if (i > 0) targets[b * context + i - 1] = x;
            x = (int32_t)((x + 1 + (tu_splitmix64(state) % 4 == 0 ? 7 : 0)) % vocab);
        }
    }
}

bool tu_train_tokens(pl_engine_t *e, const int32_t *tokens, const int32_t *targets,
                     int batch, int step_no, double *loss) {
    const void *data[2] = {tokens, targets};
    pl_batch b = {.size = batch, .data = data};
    pl_step_result r;
    if (pl_engine_train_step(e, &b, &r) != PL_STATUS_OK) {
        printf("FAIL: train step %d: %s\n", step_no, pl_last_error());
        tu_failures++;
        return false;
    }
    if (loss) *loss = r.loss;
    return true;
}

int64_t tu_read_params(pl_graph_t *g, pl_engine_t *e, float *dst) {
    int64_t off = 0;
    for (int i = 0; i < pl_graph_num_params(g); i++) {
        pl_tensor_t *p = pl_graph_param(g, i);
        if (dst && pl_engine_get_param(e, p, dst + off, (size_t)pl_tensor_numel(p)) !=
                       PL_STATUS_OK)
            return -1;
        off += pl_tensor_numel(p);
    }
    return off;
}

void tu_class_batch(int64_t index, int batch, int in, float *x, int32_t *y) {
    uint64_t s = 0x9e3779b97f4a7c15u * (uint64_t)(index + 1);
    for (int i = 0; i < batch; i++) {
        float sum = 0;
        for (int j = 0; j < in; j++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            x[i * in + j] = (float)((s >> 40) / 16777216.0) * 2 - 1;
            if (j < 3) sum += x[i * in + j];
        }
        y[i] = sum > 0.5f ? 3 : sum > 0 ? 2 : sum > -0.5f ? 1 : 0;
    }
}
