/* TensorBoard event files, read back by an independent decoder
 * (tests/tensorboard_decode.py: its own CRC32C and TFRecord framing,
 * python3-protobuf with TensorFlow's field numbers):
 *   - the writer: nested log folders are created, the file is named
 *     events.out.tfevents.<time>.<host>.<pid>, scalars (step 0, a zero, a
 *     negative, 0.1, a step past 2^32) decode to what was written at float
 *     precision, a second writer in the same second gets its own file;
 *   - a flipped byte (length, CRCs, data) or a truncated file makes the
 *     decoder fail on the CRC or the framing;
 *   - a log folder under a regular file is refused, naming it, by the
 *     writer, by pl_hook_tensorboard and by pl_trainer_add_hook;
 *   - end to end: pl_hook_loss, pl_hook_lr_scheduler and
 *     pl_hook_tensorboard over 2 epochs of a small MLP with loss scaling:
 *     train/loss, lr and loss_scale at steps 1..N and test/loss after each
 *     epoch, equal to what a recording hook saw.
 * Skipped (77) when python3 or google.protobuf is missing.
 *
 * Usage: test_tensorboard PYTHON3 tests/tensorboard_decode.py */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pleiades.h"
#include "test_util.h"
#include "trainer/tensorboard/event_writer.h"

static const char *python, *decoder;

/* Runs argv with stdout and stderr into *out (malloc'd, NUL-terminated):
 * the exit status, or -1 if it could not run. */
static int run_capture(char *const argv[], char **out) {
    int fds[2];
    *out = NULL;
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *buf = tu_xmalloc(cap);
    ssize_t n;
    while ((n = read(fds[0], buf + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 2) buf = realloc(buf, cap *= 2);
    }
    close(fds[0]);
    buf[len] = '\0';
    *out = buf;
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static int decode(const char *file, char **out) {
    char *argv[] = {(char *)python, (char *)decoder, (char *)file, NULL};
    return run_capture(argv, out);
}

typedef struct scalar {
    int64_t step;
    char tag[64];
    double value;
} scalar;

/* Decodes `file` and compares its "STEP TAG VALUE" lines with want[0..n),
 * values at float precision. */
static void expect_scalars(const char *what, const char *file, const scalar *want, int n) {
    char *out;
    int rc = decode(file, &out);
    CHECK(rc == 0, "%s: the decoder failed (%d): %s", what, rc, out ? out : "");
    int i = 0;
    for (char *line = out, *next; rc == 0 && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        long long step;
        char tag[64], value[64];
        if (sscanf(line, "%lld %63s %63s", &step, tag, value) != 3) {
            CHECK(0, "%s: decoder line '%s'", what, line);
            continue;
        }
        double got = strtod(value, NULL);
        if (i < n)
            CHECK(step == want[i].step && !strcmp(tag, want[i].tag) &&
                      got == (double)(float)want[i].value,
                  "%s: scalar %d is '%lld %s %s', want '%lld %s %.9g'", what, i, step, tag,
                  value, (long long)want[i].step, want[i].tag, (double)(float)want[i].value);
        i++;
    }
    CHECK(rc != 0 || i == n, "%s: %d scalars decoded, want %d", what, i, n);
    free(out);
}

/* The decoder on `data` with byte `at` flipped (or cut to `at` bytes):
 * must fail with `msg` in its output. */
static void expect_corrupt(const unsigned char *data, size_t len, size_t at, bool truncate,
                           const char *msg) {
    char path[1024];
    tu_scratch_path(path, sizeof path, "corrupt");
    FILE *f = fopen(path, "wb");
    if (!f) {
        CHECK(0, "cannot write %s", path);
        return;
    }
    if (truncate) {
        fwrite(data, 1, at, f);
    } else {
        fwrite(data, 1, at, f);
        fputc(data[at] ^ 0x20, f);
        fwrite(data + at + 1, 1, len - at - 1, f);
    }
    fclose(f);
    char *out;
    int rc = decode(path, &out);
    CHECK(rc == 1 && out && strstr(out, msg),
          "%s byte %zu of %zu: decoder exit %d, output '%s', want 1 and '%s'",
          truncate ? "cut at" : "flipped", at, len, rc, out ? out : "", msg);
    if (rc == 1 && out && strstr(out, msg))
        printf("  ok  %s byte %zu of %zu -> %s", truncate ? "cut at" : "flipped", at, len,
               strstr(out, "tensorboard_decode:"));
    free(out);
}

static void test_writer(void) {
    char dir[1024];
    tu_scratch_path(dir, sizeof dir, "runs/a/b"); /* made with its parents */
    pl_tb_writer *w = pl_tb_writer_open(dir);
    CHECK(w, "pl_tb_writer_open: %s", pl_last_error());
    if (!w) return;
    char path[1024], prefix[1100], suffix[64];
    snprintf(path, sizeof path, "%s", pl_tb_writer_path(w));
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", dir);
    snprintf(suffix, sizeof suffix, ".%ld", (long)getpid());
    CHECK(!strncmp(path, prefix, strlen(prefix)) &&
              !strcmp(path + strlen(path) - strlen(suffix), suffix),
          "file name %s", path);
    const scalar want[] = {
        {0, "train/loss", 2.5},     {1, "train/loss", 0.1},
        {1, "lr", 0.1f},            {2, "train/loss", -1.75e-3},
        {2, "zero", 0.0},           {3, "memory/peak_host_bytes", 123456789.0},
        {(int64_t)1 << 40, "far", -3e30},
    };
    int n = (int)(sizeof want / sizeof want[0]);
    for (int i = 0; i < n; i++) {
        CHECK(pl_tb_writer_scalar(w, want[i].tag, want[i].step, want[i].value) == PL_STATUS_OK,
              "scalar %d: %s", i, pl_last_error());
        if (i == 3) CHECK(pl_tb_writer_flush(w) == PL_STATUS_OK, "flush: %s", pl_last_error());
    }
    tu_expect_error(__LINE__, "pl_tb_writer_scalar(empty tag)", pl_tb_writer_scalar(w, "", 1, 1.0),
                    PL_STATUS_INVALID_ARGUMENT, "tag", NULL);
    /* A second writer in the same folder (likely the same second). */
    pl_tb_writer *w2 = pl_tb_writer_open(dir);
    CHECK(w2 && strcmp(pl_tb_writer_path(w2), path) != 0, "second writer: %s",
          w2 ? pl_tb_writer_path(w2) : pl_last_error());
    char path2[1024] = "";
    if (w2) {
        snprintf(path2, sizeof path2, "%s", pl_tb_writer_path(w2));
        CHECK(pl_tb_writer_scalar(w2, "other", 7, 7.0) == PL_STATUS_OK, "%s", pl_last_error());
    }
    CHECK(pl_tb_writer_close(w2) == PL_STATUS_OK, "close: %s", pl_last_error());
    CHECK(pl_tb_writer_close(w) == PL_STATUS_OK, "close: %s", pl_last_error());
    printf("wrote %s\n", path);
    expect_scalars("writer", path, want, n);
    const scalar want2[] = {{7, "other", 7.0}};
    if (path2[0]) expect_scalars("second writer", path2, want2, 1);

    /* Corruption: the file holds the version record then the scalars. */
    size_t len;
    unsigned char *data = tu_read_file(path, &len);
    CHECK(data && len > 100, "cannot read %s back", path);
    if (!data || len <= 100) {
        free(data);
        return;
    }
    size_t second = 12 + (size_t)data[0] + 4; /* the first scalar's record */
    expect_corrupt(data, len, second + 2, false, "CRC mismatch in the length");
    expect_corrupt(data, len, second + 9, false, "CRC mismatch in the length");
    expect_corrupt(data, len, second + 12 + 5, false, "CRC mismatch in the data");
    expect_corrupt(data, len, len / 2, false, "CRC mismatch");
    expect_corrupt(data, len, len - 1, false, "CRC mismatch in the data");
    expect_corrupt(data, len, len - 1, true, "truncated");
    free(data);
}

static void test_refused(void) {
    char file[1024], dir[1100];
    tu_scratch_path(file, sizeof file, "plain");
    FILE *f = fopen(file, "w");
    CHECK(f, "cannot create %s", file);
    if (f) fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    pl_tb_writer *w = pl_tb_writer_open(dir);
    CHECK(!w, "pl_tb_writer_open under a regular file succeeded");
    pl_tb_writer_close(w);
    tu_expect_error(__LINE__, "pl_tb_writer_open(file/sub)", pl_last_status(),
                    PL_STATUS_IO_ERROR, dir, "not a directory");
    pl_hook h = pl_hook_tensorboard(dir);
    CHECK(!h.name && !h.user_data, "pl_hook_tensorboard under a regular file: name %s",
          h.name ? h.name : "NULL");
    tu_expect_error(__LINE__, "pl_hook_tensorboard(file/sub)", pl_last_status(),
                    PL_STATUS_IO_ERROR, dir, "not a directory");
    tu_expect_error(__LINE__, "pl_tb_writer_open(\"\")", pl_tb_writer_open("") ? PL_STATUS_OK : pl_last_status(),
                    PL_STATUS_INVALID_ARGUMENT, "log directory", NULL);
}

/* ------------------------------------------------------------ end to end */

enum { B = 8, IN = 12, K = 4, BATCHES = 3, TEST_BATCHES = 2, EPOCHS = 2,
       MAX_SCALARS = 64 };

typedef struct source {
    float x[B * IN];
    int32_t y[B];
    const void *data[2];
    int64_t epoch, next, batches;
} source;

static int64_t src_start(void *u, int64_t epoch) {
    source *s = u;
    s->epoch = epoch;
    s->next = 0;
    return s->batches;
}

static int src_next(void *u, pl_batch *b) {
    source *s = u;
    if (s->next == s->batches) return 0;
    uint64_t st = 1000 * (uint64_t)s->epoch + (uint64_t)s->next++ + (s->batches == BATCHES ? 0 : 77);
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < IN; j++)
            s->x[i * IN + j] = (float)(tu_splitmix64(&st) >> 40) / 16777216.0f * 2 - 1;
        s->y[i] = s->x[i * IN] > 0 ? (s->x[i * IN + 1] > 0 ? 3 : 2) : (s->x[i * IN + 2] > 0);
    }
    s->data[0] = s->x;
    s->data[1] = s->y;
    *b = (pl_batch){.size = B, .data = s->data};
    return 1;
}

typedef struct recorder {
    scalar want[MAX_SCALARS];
    int n;
} recorder;

static void record(recorder *r, pl_trainer_t *t, const char *tag, double v) {
    if (r->n == MAX_SCALARS) return;
    scalar *s = &r->want[r->n++];
    s->step = pl_trainer_step(t);
    snprintf(s->tag, sizeof s->tag, "%s", tag);
    s->value = v;
}

/* What TensorboardHook should have written, in its order. */
static pl_status rec_iter(pl_trainer_t *t, void *u, const pl_step_result *o) {
    recorder *r = u;
    double lr = 0, scale = 0;
    bool overflow;
    record(r, t, "train/loss", o->loss);
    CHECK(pl_trainer_state_get(t, "lr", &lr), "no lr state");
    record(r, t, "lr", lr);
    CHECK(pl_engine_loss_scale(pl_trainer_engine(t), &scale, &overflow) == PL_STATUS_OK,
          "pl_engine_loss_scale: %s", pl_last_error());
    record(r, t, "loss_scale", scale);
    return PL_STATUS_OK;
}

static pl_status rec_test(pl_trainer_t *t, void *u) {
    double v = 0;
    CHECK(pl_trainer_state_get(t, "test/loss", &v), "no test/loss state");
    record(u, t, "test/loss", v);
    return PL_STATUS_OK;
}

static void test_trainer(void) {
    pl_runtime_options ro = pl_runtime_options_default();
    ro.cpu_workers = 2;
    pl_runtime_t *rt = pl_runtime_new(&ro);
    CHECK(rt, "pl_runtime_new: %s", pl_last_error());
    if (!rt) return;
    pl_graph_t *g = pl_graph_new(3);
    int64_t shape[1] = {IN};
    pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, shape);
    pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
    pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 16, "fc1"));
    CHECK(pl_graph_set_loss(g, pl_cross_entropy(g, pl_linear(g, h, K, "head"), y)) == PL_STATUS_OK,
          "graph: %s", pl_last_error());
    pl_engine_options eo = pl_engine_options_default();
    eo.batch_size = B;
    eo.optimizer.lr = 0.01f;
    eo.lr_scheduler = pl_lr_scheduler_default(PL_LR_STEP); /* halves per update */
    eo.lr_scheduler.gamma = 0.5;
    eo.loss_scaler.enabled = true;
    eo.loss_scaler.growth_interval = 2; /* the scale moves within the run */
    pl_engine_t *e = pl_engine_new(rt, g, &eo);
    CHECK(e, "pl_engine_new: %s", pl_last_error());
    pl_trainer_t *t = e ? pl_trainer_new(e) : NULL;
    CHECK(!e || t, "pl_trainer_new: %s", pl_last_error());
    recorder *rec = tu_xmalloc(sizeof *rec);
    rec->n = 0;
    char dir[1024], file[1300] = "";
    tu_scratch_path(dir, sizeof dir, "trainer-run");
    if (t) {
        char bad[1100];
        tu_scratch_path(bad, sizeof bad, "plain/sub");
        tu_expect_error(__LINE__, "pl_trainer_add_hook(pl_hook_tensorboard(file/sub))",
                        pl_trainer_add_hook(t, pl_hook_tensorboard(bad)), PL_STATUS_IO_ERROR,
                        bad, NULL);
        pl_hook rh = {.name = "recorder", .priority = 20, .user_data = rec,
                      .after_train_iter = rec_iter, .after_test_epoch = rec_test};
        CHECK(pl_trainer_add_hook(t, pl_hook_loss()) == PL_STATUS_OK &&
                  pl_trainer_add_hook(t, pl_hook_lr_scheduler()) == PL_STATUS_OK &&
                  pl_trainer_add_hook(t, pl_hook_tensorboard(dir)) == PL_STATUS_OK &&
                  pl_trainer_add_hook(t, rh) == PL_STATUS_OK,
              "hooks: %s", pl_last_error());
        source train = {.batches = BATCHES}, test = {.batches = TEST_BATCHES};
        pl_fit_options fo = pl_fit_options_default();
        fo.train = (pl_data_source){.start_epoch = src_start, .next = src_next, .user_data = &train};
        fo.test = (pl_data_source){.start_epoch = src_start, .next = src_next, .user_data = &test};
        fo.has_test = true;
        fo.epochs = EPOCHS;
        CHECK(pl_trainer_fit(t, &fo) == PL_STATUS_OK, "pl_trainer_fit: %s", pl_last_error());
        pl_trainer_free(t); /* closes the event file */
    }
    DIR *d = opendir(dir);
    int files = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (strstr(de->d_name, "tfevents")) {
            files++;
            snprintf(file, sizeof file, "%s/%s", dir, de->d_name);
        }
    if (d) closedir(d);
    CHECK(files == 1, "%d event files in %s, want 1", files, dir);
    CHECK(rec->n == EPOCHS * (BATCHES * 3 + 1), "the recorder saw %d scalars, want %d", rec->n,
          EPOCHS * (BATCHES * 3 + 1));
    CHECK(rec->n > 4 && rec->want[rec->n - 2].value != rec->want[2].value,
          "the loss scale never moved (%g)", rec->want[2].value);
    if (files == 1) expect_scalars("trainer", file, rec->want, rec->n);
    for (int i = 0; i < rec->n; i++)
        printf("  %lld %s %.9g\n", (long long)rec->want[i].step, rec->want[i].tag,
               rec->want[i].value);
    free(rec);
    pl_engine_free(e);
    pl_graph_free(g);
    pl_runtime_free(rt);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        printf("usage: test_tensorboard PYTHON3 tensorboard_decode.py\n");
        return 2;
    }
    python = argv[1];
    decoder = argv[2];
    if (!tu_scratch_create("pl_tensorboard")) {
        printf("FAIL: cannot create a scratch directory\n");
        return 1;
    }
    test_refused();
    char *out;
    char *check[] = {(char *)python, (char *)decoder, "--check", NULL};
    int rc = run_capture(check, &out);
    if (rc != 0) {
        printf("SKIP: %s cannot decode event files (python3-protobuf missing?): %s\n", python,
               out ? out : "");
        free(out);
        tu_remove_tree(tu_scratch_dir());
        return tu_failures ? 1 : 77;
    }
    free(out);
    test_writer();
    test_trainer();
    if (tu_failures) {
        printf("%d check(s) failed (files kept in %s)\n", tu_failures, tu_scratch_dir());
        return 1;
    }
    tu_remove_tree(tu_scratch_dir());
    printf("tensorboard: all checks passed\n");
    return 0;
}
