/* Tests of the data section of the API: the Fashion-MNIST IDX reader (on
 * small synthetic files written here with zlib, and on Debian's copy of the
 * real data set when it is installed) and the shuffling batch loader.
 * Exit status 0 on success; every failed check prints a line. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/dataset.h"
#include "pleiades.h"
#include "test_util.h"

#define REAL_DIR "/usr/share/datasets/fashion-mnist"
#define IMAGES "images-idx3-ubyte.gz"
#define LABELS "labels-idx1-ubyte.gz"

/* ------------------------------------------------------ synthetic files */

/* What to write for one split; the defaults (fixture_valid) are correct
 * files, and each error test changes one thing. */
typedef struct fixture {
    uint32_t image_magic, label_magic;
    uint32_t n_images, n_labels; /* counts in the headers */
    uint32_t rows, cols;
    size_t image_cut, label_cut; /* keep only this many uncompressed bytes */
    size_t label_extra;          /* bytes appended after the labels */
    int bad_label;               /* >= 0: the last label's value */
    int corrupt_images;          /* 1: cut the .gz in half, 2: flip a byte */
    int images_as_dir;           /* the images "file" is a directory */
    int no_images, no_labels;
    /* How the files are stored: 0 one gzip member, 1 uncompressed, 2 the
     * images as two gzip members (a valid gzip file, as `gzip -c a b`). */
    int storage;
    size_t label_gz_trailing;    /* raw bytes after the labels' gzip data */
} fixture;

static fixture fixture_valid(uint32_t n, uint32_t rows, uint32_t cols) {
    return (fixture){.image_magic = 0x803, .label_magic = 0x801,
                     .n_images = n, .n_labels = n, .rows = rows, .cols = cols,
                     .image_cut = SIZE_MAX, .label_cut = SIZE_MAX,
                     .bad_label = -1};
}

/* Pixel j of image i: 7 is odd, so 7k mod 256 visits all byte values,
 * 0 and 255 included (k = 0 and k = 73) for images of >= 74 pixels. */
static uint8_t pixel(uint32_t i, uint32_t j, uint32_t features) {
    return (uint8_t)((i * features + j) * 7u);
}

/* Label of sample i: 3 is coprime with 10, so 10 samples get distinct
 * labels that are not simply their index. */
static uint8_t label(uint32_t i) { return (uint8_t)(i * 3u % 10u); }

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void path_join(char *out, size_t size, const char *dir,
                      const char *split, const char *name) {
    snprintf(out, size, "%s/%s-%s", dir, split, name);
}

/* mode "wb" writes one gzip member, "ab" appends another. */
static int write_gz_mode(const char *path, const char *mode,
                         const uint8_t *bytes, size_t len) {
    gzFile gz = gzopen(path, mode);
    if (!gz)
        return -1;
    int ok = len == 0 || gzwrite(gz, bytes, (unsigned)len) == (int)len;
    return gzclose(gz) == Z_OK && ok ? 0 : -1;
}

static int write_gz(const char *path, const uint8_t *bytes, size_t len) {
    return write_gz_mode(path, "wb", bytes, len);
}

/* Raw bytes written (mode "wb") or appended ("ab") as they are. */
static int write_raw(const char *path, const char *mode, const void *bytes,
                     size_t len) {
    FILE *f = fopen(path, mode);
    if (!f)
        return -1;
    size_t put = fwrite(bytes, 1, len, f);
    return fclose(f) == 0 && put == len ? 0 : -1;
}

/* The file as the fixture stores it (see fixture.storage). */
static int write_stored(const char *path, const fixture *fx,
                        const uint8_t *bytes, size_t len) {
    if (fx->storage == 1)
        return write_raw(path, "wb", bytes, len);
    if (fx->storage == 2)
        return write_gz_mode(path, "wb", bytes, len / 2) ||
                       write_gz_mode(path, "ab", bytes + len / 2,
                                     len - len / 2)
                   ? -1
                   : 0;
    return write_gz(path, bytes, len);
}

/* Damages a written .gz file: mode 1 truncates it to half its size, mode 2
 * flips the bits of a byte in the middle of the deflate stream. */
static int corrupt_file(const char *path, int mode) {
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (mode == 1)
        return truncate(path, st.st_size / 2);
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -1;
    int rc = fseek(f, st.st_size / 2, SEEK_SET);
    int c = rc == 0 ? fgetc(f) : EOF;
    if (c != EOF && fseek(f, st.st_size / 2, SEEK_SET) == 0)
        fputc(c ^ 0xff, f);
    return fclose(f) == 0 && c != EOF ? 0 : -1;
}

static int write_images(const char *path, const fixture *fx) {
    uint32_t features = fx->rows * fx->cols;
    size_t len = 16 + (size_t)fx->n_images * features;
    uint8_t *buf = malloc(len);
    if (!buf)
        return -1;
    put_be32(buf, fx->image_magic);
    put_be32(buf + 4, fx->n_images);
    put_be32(buf + 8, fx->rows);
    put_be32(buf + 12, fx->cols);
    for (uint32_t i = 0; i < fx->n_images; i++)
        for (uint32_t j = 0; j < features; j++)
            buf[16 + (size_t)i * features + j] = pixel(i, j, features);
    int rc = write_stored(path, fx, buf,
                          len < fx->image_cut ? len : fx->image_cut);
    free(buf);
    if (rc == 0 && fx->corrupt_images)
        rc = corrupt_file(path, fx->corrupt_images);
    return rc;
}

static int write_labels(const char *path, const fixture *fx) {
    size_t len = 8 + (size_t)fx->n_labels + fx->label_extra;
    uint8_t *buf = calloc(len, 1);
    if (!buf)
        return -1;
    put_be32(buf, fx->label_magic);
    put_be32(buf + 4, fx->n_labels);
    for (uint32_t i = 0; i < fx->n_labels; i++)
        buf[8 + i] = label(i);
    if (fx->bad_label >= 0 && fx->n_labels > 0)
        buf[8 + fx->n_labels - 1] = (uint8_t)fx->bad_label;
    int rc = write_stored(path, fx, buf,
                          len < fx->label_cut ? len : fx->label_cut);
    free(buf);
    if (rc == 0 && fx->label_gz_trailing) {
        /* Not another gzip member: zeros, as padding tools leave them. */
        uint8_t *zeros = calloc(fx->label_gz_trailing, 1);
        rc = zeros ? write_raw(path, "ab", zeros, fx->label_gz_trailing) : -1;
        free(zeros);
    }
    return rc;
}

static int write_split(const char *dir, const char *split, const fixture *fx) {
    char path[4096];
    int rc = 0;
    path_join(path, sizeof path, dir, split, IMAGES);
    if (fx->images_as_dir)
        rc = mkdir(path, 0700);
    else if (!fx->no_images)
        rc = write_images(path, fx);
    path_join(path, sizeof path, dir, split, LABELS);
    if (rc == 0 && !fx->no_labels)
        rc = write_labels(path, fx);
    return rc;
}

static void remove_dir(const char *dir) {
    static const char *const splits[] = {"train", "t10k"};
    char path[4096];
    for (int s = 0; s < 2; s++) {
        path_join(path, sizeof path, dir, splits[s], IMAGES);
        if (unlink(path) != 0 && errno == EISDIR)
            rmdir(path);
        path_join(path, sizeof path, dir, splits[s], LABELS);
        unlink(path);
    }
    rmdir(dir);
}

static int make_temp_dir(char *dir, size_t size) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, size, "%s/pl_test_data_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

/* ------------------------------------------------------------- helpers */

static float normalised(uint8_t v) {
    return ((float)v / 255.0f - 0.2860f) / 0.3530f;
}

/* Reads a whole epoch: ids[k] is the k-th sample seen (identified by its
 * first feature, see make_dataset), sizes[b] the size of batch b. Returns
 * the number of samples; *batches the number of batches. */
static int64_t read_epoch(pl_loader_t *l, int64_t *ids, int64_t *sizes,
                          int64_t *batches) {
    pl_batch b;
    int64_t seen = 0;
    *batches = 0;
    while (pl_loader_next(l, &b)) {
        const float *x = b.data[0];
        const int32_t *y = b.data[1];
        for (int64_t i = 0; i < b.size; i++) {
            int64_t id = (int64_t)x[i * 3];
            CHECK(x[i * 3 + 1] == -(float)id && x[i * 3 + 2] == id + 0.5f,
                  "sample %lld: features not of one sample", (long long)id);
            CHECK(y[i] == (int32_t)(id % 10), "sample %lld: label %d",
                  (long long)id, y[i]);
            ids[seen++] = id;
        }
        sizes[(*batches)++] = b.size;
    }
    return seen;
}

/* n samples of 3 features: (i, -i, i + 0.5), label i % 10; exact in float
 * for the sizes used here, so a batch row names the sample it came from. */
static pl_dataset_t *make_dataset(int64_t n) {
    pl_dataset_t *ds = pl_dataset_alloc(n, 3, 10, "test");
    if (!ds)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        ds->x[i * 3] = (float)i;
        ds->x[i * 3 + 1] = -(float)i;
        ds->x[i * 3 + 2] = (float)i + 0.5f;
        ds->y[i] = (int32_t)(i % 10);
    }
    return ds;
}

static int same_order(const int64_t *a, const int64_t *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* ---------------------------------------------------------- IDX reader */

/* Loads `n` samples of a split through an unshuffled loader and compares
 * every value with what write_images/write_labels put in the files. */
static void check_split_values(const pl_dataset_t *ds, uint32_t n,
                               uint32_t features, const char *split) {
    CHECK(pl_dataset_size(ds) == n, "%s: size %lld, expected %u", split,
          (long long)pl_dataset_size(ds), n);
    CHECK(pl_dataset_features(ds) == features, "%s: features %lld", split,
          (long long)pl_dataset_features(ds));
    pl_loader_t *l = pl_loader_new(ds, n, false, false, 0);
    pl_batch b;
    if (!l || !pl_loader_next(l, &b) || b.size != n) {
        CHECK(0, "%s: no single full batch: %s", split, pl_last_error());
        pl_loader_free(l);
        return;
    }
    const float *x = b.data[0];
    const int32_t *y = b.data[1];
    int bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < features; j++)
            bad += x[i * features + j] != normalised(pixel(i, j, features));
        bad += y[i] != label(i);
    }
    CHECK(bad == 0, "%s: %d values differ from the files", split, bad);
    pl_loader_free(l);
}

static void test_valid_files(void) {
    char dir[4096];
    if (make_temp_dir(dir, sizeof dir) != 0) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    fixture train = fixture_valid(10, 4, 4), test = fixture_valid(3, 2, 5);
    CHECK(write_split(dir, "train", &train) == 0, "writing train files");
    CHECK(write_split(dir, "t10k", &test) == 0, "writing t10k files");

    pl_dataset_t *ds = pl_dataset_fashion_mnist(dir, true);
    CHECK(ds != NULL, "train: %s", pl_last_error());
    if (ds) {
        check_split_values(ds, 10, 16, "train");
        /* Independent of the test's own formula: pixel 0 of image 0 is 0,
         * pixel 73 (image 4, pixel 9) is 255. */
        pl_loader_t *l = pl_loader_new(ds, 10, false, false, 0);
        pl_batch b;
        if (l && pl_loader_next(l, &b)) {
            const float *x = b.data[0];
            CHECK(fabsf(x[0] - -0.81019830f) < 1e-6f, "0 -> %.8f", x[0]);
            CHECK(fabsf(x[73] - 2.02266289f) < 1e-6f, "255 -> %.8f", x[73]);
        }
        pl_loader_free(l);
    }
    pl_dataset_free(ds);

    /* The test split reads the t10k files, not the train ones. */
    ds = pl_dataset_fashion_mnist(dir, false);
    CHECK(ds != NULL, "t10k: %s", pl_last_error());
    if (ds)
        check_split_values(ds, 3, 10, "t10k");
    pl_dataset_free(ds);

    /* Uncompressed files, and images in two gzip members, read alike. */
    for (int storage = 1; storage <= 2; storage++) {
        fixture fx = fixture_valid(10, 4, 4);
        fx.storage = storage;
        char other[4096];
        if (make_temp_dir(other, sizeof other) != 0) {
            CHECK(0, "mkdtemp: %s", strerror(errno));
            break;
        }
        CHECK(write_split(other, "train", &fx) == 0, "writing storage %d",
              storage);
        ds = pl_dataset_fashion_mnist(other, true);
        CHECK(ds != NULL, "storage %d: %s", storage, pl_last_error());
        if (ds)
            check_split_values(ds, 10, 16, storage == 1 ? "plain" : "members");
        pl_dataset_free(ds);
        remove_dir(other);
    }

    /* A trailing slash on the directory is fine. */
    char slashed[4200];
    snprintf(slashed, sizeof slashed, "%s/", dir);
    ds = pl_dataset_fashion_mnist(slashed, true);
    CHECK(ds != NULL, "dir with '/': %s", pl_last_error());
    pl_dataset_free(ds);
    remove_dir(dir);
}

/* Writes `fx` as the train split of a fresh directory and expects loading
 * it to fail with `want`, naming `file` (train-<file>) and `detail`. */
static void expect_error(const char *what, const fixture *fx, bool train,
                         pl_status want, const char *file,
                         const char *detail) {
    char dir[4096], path[4200];
    if (make_temp_dir(dir, sizeof dir) != 0) {
        CHECK(0, "%s: mkdtemp: %s", what, strerror(errno));
        return;
    }
    if (write_split(dir, "train", fx) != 0) {
        CHECK(0, "%s: writing the files failed", what);
        remove_dir(dir);
        return;
    }
    pl_clear_error();
    pl_dataset_t *ds = pl_dataset_fashion_mnist(dir, train);
    path_join(path, sizeof path, dir, train ? "train" : "t10k", file);
    const char *msg = pl_last_error();
    CHECK(ds == NULL, "%s: loaded anyway", what);
    CHECK(pl_last_status() == want, "%s: status '%s', expected '%s' (%s)",
          what, pl_status_string(pl_last_status()), pl_status_string(want),
          msg);
    CHECK(strstr(msg, path) != NULL, "%s: message does not name %s: %s",
          what, path, msg);
    CHECK(strstr(msg, detail) != NULL, "%s: message lacks '%s': %s", what,
          detail, msg);
    pl_dataset_free(ds);
    remove_dir(dir);
}

static void test_bad_files(void) {
    const pl_status io = PL_STATUS_IO_ERROR, fmt = PL_STATUS_FORMAT_ERROR;
    fixture fx;

    fx = fixture_valid(10, 4, 4); fx.no_images = 1;
    expect_error("missing images", &fx, true, io, IMAGES, strerror(ENOENT));
    fx = fixture_valid(10, 4, 4); fx.no_labels = 1;
    expect_error("missing labels", &fx, true, io, LABELS, strerror(ENOENT));
    fx = fixture_valid(10, 4, 4);
    expect_error("missing test split", &fx, false, io, IMAGES,
                 strerror(ENOENT));
    fx = fixture_valid(10, 4, 4); fx.images_as_dir = 1;
    expect_error("images is a directory", &fx, true, io, IMAGES,
                 strerror(EISDIR));

    fx = fixture_valid(10, 4, 4); fx.image_magic = 0x801;
    expect_error("bad image magic", &fx, true, fmt, IMAGES, "bad magic");
    fx = fixture_valid(10, 4, 4); fx.label_magic = 0x803;
    expect_error("bad label magic", &fx, true, fmt, LABELS, "bad magic");
    fx = fixture_valid(10, 4, 4); fx.image_cut = 10;
    expect_error("truncated image header", &fx, true, fmt, IMAGES,
                 "truncated header");
    fx = fixture_valid(10, 4, 4); fx.label_cut = 0;
    expect_error("empty labels file", &fx, true, fmt, LABELS,
                 "truncated header");
    fx = fixture_valid(10, 4, 4); fx.image_cut = 16 + 9 * 16 + 5;
    expect_error("truncated images", &fx, true, fmt, IMAGES,
                 "truncated: expected 10 images of 4x4 (160 bytes), "
                 "got 149 bytes");
    fx = fixture_valid(10, 4, 4); fx.label_cut = 8 + 7;
    expect_error("truncated labels", &fx, true, fmt, LABELS,
                 "truncated: expected 10 labels, got 7");
    fx = fixture_valid(10, 4, 4); fx.label_extra = 1;
    expect_error("data after the labels", &fx, true, fmt, LABELS,
                 "unexpected data");
    /* Bytes after the gzip stream that start no further member: gzread()
     * would skip them in silence, the loader names them. */
    fx = fixture_valid(10, 4, 4); fx.label_gz_trailing = 1;
    expect_error("a byte after the gzip stream", &fx, true, fmt, LABELS,
                 "unexpected data after the end of the gzip stream");
    fx = fixture_valid(10, 4, 4); fx.label_gz_trailing = 512;
    expect_error("512 bytes after the gzip stream", &fx, true, fmt, LABELS,
                 "unexpected data after the end of the gzip stream");
    fx = fixture_valid(10, 4, 4); fx.storage = 1; fx.label_extra = 3;
    expect_error("data after plain labels", &fx, true, fmt, LABELS,
                 "unexpected data after the last item");
    fx = fixture_valid(10, 4, 4); fx.bad_label = 10;
    expect_error("label 10", &fx, true, fmt, LABELS,
                 "label 10 at index 9 is out of range");
    fx = fixture_valid(10, 4, 4); fx.bad_label = 255;
    expect_error("label 255", &fx, true, fmt, LABELS, "out of range");
    fx = fixture_valid(10, 4, 4); fx.n_labels = 9;
    expect_error("count mismatch", &fx, true, fmt, LABELS,
                 "9 labels, but");
    /* A damaged compressed stream is a format error too, whether zlib
     * reports it or the data simply comes up short. */
    fx = fixture_valid(200, 28, 28); fx.corrupt_images = 1;
    expect_error("cut .gz file", &fx, true, fmt, IMAGES, ": ");
    fx = fixture_valid(200, 28, 28); fx.corrupt_images = 2;
    expect_error("flipped .gz byte", &fx, true, fmt, IMAGES, ": ");

    pl_clear_error();
    CHECK(pl_dataset_fashion_mnist(NULL, true) == NULL, "NULL dir loaded");
    CHECK(pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "pl_dataset_fashion_mnist") &&
              strstr(pl_last_error(), "dir"),
          "NULL dir: %s", pl_last_error());
    CHECK(pl_dataset_size(NULL) == -1 &&
              pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "pl_dataset_size"),
          "pl_dataset_size(NULL): %s", pl_last_error());
    CHECK(pl_dataset_features(NULL) == -1 &&
              strstr(pl_last_error(), "pl_dataset_features"),
          "pl_dataset_features(NULL): %s", pl_last_error());
    pl_dataset_free(NULL);
}

/* -------------------------------------------------------------- loader */

/* Every sample exactly once per epoch, batch sizes and counts. */
static void test_coverage(const pl_dataset_t *ds, int64_t batch_size,
                          bool drop_last) {
    int64_t n = ds->size, ids[1000], sizes[1000], batches;
    int64_t want_batches = drop_last ? n / batch_size
                                     : (n + batch_size - 1) / batch_size;
    int64_t want_seen = drop_last ? want_batches * batch_size : n;
    pl_loader_t *l = pl_loader_new(ds, batch_size, true, drop_last, 1);
    CHECK(l != NULL, "pl_loader_new: %s", pl_last_error());
    if (!l)
        return;
    CHECK(pl_loader_batches_per_epoch(l) == want_batches,
          "n %lld batch %lld drop_last %d: %lld batches per epoch",
          (long long)n, (long long)batch_size, drop_last,
          (long long)pl_loader_batches_per_epoch(l));
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        pl_loader_start_epoch(l, epoch);
        int64_t seen = read_epoch(l, ids, sizes, &batches);
        CHECK(batches == want_batches && seen == want_seen,
              "epoch %lld: %lld batches / %lld samples, expected %lld / %lld",
              (long long)epoch, (long long)batches, (long long)seen,
              (long long)want_batches, (long long)want_seen);
        char count[1000] = {0};
        int dup = 0;
        for (int64_t k = 0; k < seen; k++)
            dup += ids[k] < 0 || ids[k] >= n || count[ids[k]]++ > 0;
        CHECK(dup == 0, "epoch %lld: %d samples repeated or out of range",
              (long long)epoch, dup);
        for (int64_t b = 0; b < batches; b++) {
            int64_t want = b < n / batch_size ? batch_size : n % batch_size;
            CHECK(sizes[b] == want, "batch %lld has %lld samples, not %lld",
                  (long long)b, (long long)sizes[b], (long long)want);
        }
        pl_batch b;
        CHECK(!pl_loader_next(l, &b) && !pl_loader_next(l, &b),
              "a batch after the end of the epoch");
    }
    pl_loader_free(l);
}

static void epoch_order(const pl_dataset_t *ds, uint64_t seed, int64_t epoch,
                        int64_t *ids) {
    int64_t sizes[1000], batches;
    pl_loader_t *l = pl_loader_new(ds, 7, true, false, seed);
    if (!l) {
        CHECK(0, "pl_loader_new: %s", pl_last_error());
        return;
    }
    pl_loader_start_epoch(l, epoch);
    read_epoch(l, ids, sizes, &batches);
    pl_loader_free(l);
}

static void test_order(const pl_dataset_t *ds) {
    int64_t n = ds->size, a[1000], b[1000], sizes[1000], batches;

    epoch_order(ds, 7, 3, a);
    epoch_order(ds, 7, 3, b);
    CHECK(same_order(a, b, n), "same seed and epoch, different order");
    epoch_order(ds, 7, 4, b);
    CHECK(!same_order(a, b, n), "epochs 3 and 4 in the same order");
    epoch_order(ds, 8, 3, b);
    CHECK(!same_order(a, b, n), "seeds 7 and 8 in the same order");

    /* Rewinding: reading part of an epoch and restarting it, or visiting
     * other epochs first, gives the same order again. */
    pl_loader_t *l = pl_loader_new(ds, 7, true, false, 7);
    pl_batch batch;
    if (l) {
        pl_loader_start_epoch(l, 0);
        read_epoch(l, b, sizes, &batches);
        pl_loader_start_epoch(l, 3);
        CHECK(pl_loader_next(l, &batch), "no first batch");
        pl_loader_start_epoch(l, 3);
        read_epoch(l, b, sizes, &batches);
        CHECK(same_order(a, b, n), "restarted epoch 3 in another order");
    }
    pl_loader_free(l);

    /* Unshuffled: the dataset's order, every epoch. */
    l = pl_loader_new(ds, 7, false, false, 7);
    if (l) {
        pl_loader_start_epoch(l, 5);
        read_epoch(l, a, sizes, &batches);
        int off = 0;
        for (int64_t i = 0; i < n; i++)
            off += a[i] != i;
        CHECK(off == 0, "unshuffled loader moved %d samples", off);
    }
    pl_loader_free(l);
}

/* The order is part of the contract (same seed + epoch -> same order on
 * every machine). These orders were cross-checked against an independent
 * Python model of splitmix64 + Fisher-Yates, so a change of PRNG, seeding
 * or shuffle shows up here. */
static void test_golden_order(const pl_dataset_t *ds10) {
    static const int64_t want0[10] = {6, 7, 9, 8, 2, 0, 1, 3, 5, 4};
    static const int64_t want1[10] = {9, 7, 1, 4, 8, 3, 0, 6, 5, 2};
    int64_t got[10], sizes[10], batches;
    pl_loader_t *l = pl_loader_new(ds10, 4, true, false, 42);
    if (!l) {
        CHECK(0, "pl_loader_new: %s", pl_last_error());
        return;
    }
    read_epoch(l, got, sizes, &batches); /* epoch 0 without start_epoch */
    CHECK(same_order(got, want0, 10),
          "seed 42 epoch 0: %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld",
          (long long)got[0], (long long)got[1], (long long)got[2],
          (long long)got[3], (long long)got[4], (long long)got[5],
          (long long)got[6], (long long)got[7], (long long)got[8],
          (long long)got[9]);
    pl_loader_start_epoch(l, 1);
    read_epoch(l, got, sizes, &batches);
    CHECK(same_order(got, want1, 10),
          "seed 42 epoch 1: %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld",
          (long long)got[0], (long long)got[1], (long long)got[2],
          (long long)got[3], (long long)got[4], (long long)got[5],
          (long long)got[6], (long long)got[7], (long long)got[8],
          (long long)got[9]);
    pl_loader_free(l);
}

/* Batches are copies: rewriting one in place (as a batch-process callback
 * may) must not change the dataset. */
static void test_batches_are_copies(const pl_dataset_t *ds) {
    pl_loader_t *l = pl_loader_new(ds, 4, false, false, 0);
    pl_batch b;
    if (!l || !pl_loader_next(l, &b)) {
        CHECK(0, "no batch: %s", pl_last_error());
        pl_loader_free(l);
        return;
    }
    CHECK(b.data[0] != (const void *)ds->x && b.data[1] != (const void *)ds->y,
          "batch points into the dataset");
    ((float *)b.data[0])[0] = 1234.0f;
    ((int32_t *)b.data[1])[0] = 77;
    CHECK(ds->x[0] == 0.0f && ds->y[0] == 0, "writing a batch changed the "
                                             "dataset");
    pl_loader_free(l);
}

static void test_loader_arguments(const pl_dataset_t *ds) {
    pl_batch b;
    pl_clear_error();
    CHECK(pl_loader_new(NULL, 4, true, false, 0) == NULL &&
              pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "pl_loader_new") &&
              strstr(pl_last_error(), "ds"),
          "pl_loader_new(NULL): %s", pl_last_error());
    pl_clear_error();
    CHECK(pl_loader_new(ds, 0, true, false, 0) == NULL &&
              pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "batch_size"),
          "batch_size 0: %s", pl_last_error());
    pl_clear_error();
    CHECK(!pl_loader_next(NULL, &b) &&
              pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "pl_loader_next"),
          "pl_loader_next(NULL): %s", pl_last_error());
    pl_loader_t *l = pl_loader_new(ds, 4, true, false, 0);
    pl_clear_error();
    CHECK(l && !pl_loader_next(l, NULL) &&
              pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "batch"),
          "pl_loader_next(l, NULL): %s", pl_last_error());
    pl_loader_free(l);
    pl_clear_error();
    pl_loader_start_epoch(NULL, 1);
    CHECK(pl_last_status() == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "pl_loader_start_epoch"),
          "pl_loader_start_epoch(NULL): %s", pl_last_error());
    CHECK(pl_loader_batches_per_epoch(NULL) == -1 &&
              strstr(pl_last_error(), "pl_loader_batches_per_epoch"),
          "pl_loader_batches_per_epoch(NULL): %s", pl_last_error());
    pl_loader_free(NULL);
}

/* GradAccumDataloader's example: 10 batches of 4 samples with
 * accumulate_size 4 give 8 batches (updates after batches 4 and 8), the
 * last 2 skipped; every epoch alike, and 1 restores all 10. */
static void test_accumulation_tail(void) {
    pl_dataset_t *ds = make_dataset(40);
    pl_loader_t *l = ds ? pl_loader_new(ds, 4, true, true, 3) : NULL;
    CHECK(l != NULL, "loader: %s", pl_last_error());
    if (!l) {
        pl_dataset_free(ds);
        return;
    }
    CHECK(pl_loader_batches_per_epoch(l) == 10, "10 batches of 4");
    CHECK(pl_loader_set_accumulation(l, 4) == PL_STATUS_OK, "set_accumulation: %s",
          pl_last_error());
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        pl_loader_start_epoch(l, epoch);
        int n = 0, updates = 0;
        pl_batch b;
        while (pl_loader_next(l, &b)) updates += ++n % 4 == 0;
        CHECK(n == 8 && updates == 2 && pl_loader_batches_per_epoch(l) == 8,
              "epoch %lld: %d batches, %d updates (want 8, 2)", (long long)epoch, n,
              updates);
    }
    CHECK(pl_loader_set_accumulation(l, 1) == PL_STATUS_OK &&
              pl_loader_batches_per_epoch(l) == 10, "accumulation 1 keeps 10 batches");
    pl_clear_error();
    CHECK(pl_loader_set_accumulation(l, 0) == PL_STATUS_INVALID_ARGUMENT &&
              strstr(pl_last_error(), "accumulate_size 0"),
          "accumulate_size 0: %s", pl_last_error());
    pl_loader_free(l);
    pl_dataset_free(ds);
}

static void test_loader(void) {
    test_accumulation_tail();
    pl_dataset_t *ds10 = make_dataset(10), *ds1000 = make_dataset(1000);
    CHECK(ds10 && ds1000, "pl_dataset_alloc: %s", pl_last_error());
    if (ds10 && ds1000) {
        test_coverage(ds10, 4, true);   /* 2 batches of 4 */
        test_coverage(ds10, 4, false);  /* 4, 4, 2 */
        test_coverage(ds10, 5, true);   /* exact: both give 2 */
        test_coverage(ds10, 5, false);
        test_coverage(ds10, 32, true);  /* bigger than the data: 0 */
        test_coverage(ds10, 32, false); /* one batch of 10 */
        test_coverage(ds1000, 64, true);
        test_coverage(ds1000, 64, false);
        test_coverage(ds1000, 1, false);
        test_order(ds1000);
        test_golden_order(ds10);
        test_batches_are_copies(ds10);
        test_loader_arguments(ds10);
    }
    pl_dataset_free(ds10);
    pl_dataset_free(ds1000);
}

/* ------------------------------------------------------------ real data */

/* Debian's dataset-fashion-mnist: sizes, balanced classes (6000 / 1000 per
 * class) and that the normalisation centres the training pixels. */
static void check_real_split(bool train) {
    const char *split = train ? "train" : "t10k";
    int64_t want = train ? 60000 : 10000;
    pl_dataset_t *ds = pl_dataset_fashion_mnist(REAL_DIR, train);
    CHECK(ds != NULL, "%s: %s", split, pl_last_error());
    if (!ds)
        return;
    CHECK(pl_dataset_size(ds) == want, "%s: %lld samples", split,
          (long long)pl_dataset_size(ds));
    CHECK(pl_dataset_features(ds) == 784, "%s: %lld features", split,
          (long long)pl_dataset_features(ds));
    int64_t per_class[10] = {0};
    for (int64_t i = 0; i < ds->size; i++)
        per_class[ds->y[i]]++;
    for (int c = 0; c < 10; c++)
        CHECK(per_class[c] == want / 10, "%s: class %d has %lld samples",
              split, c, (long long)per_class[c]);
    if (train) {
        double sum = 0, sq = 0;
        size_t count = (size_t)ds->size * (size_t)ds->features;
        for (size_t i = 0; i < count; i++) {
            sum += ds->x[i];
            sq += (double)ds->x[i] * ds->x[i];
        }
        double mean = sum / (double)count;
        double std = sqrt(sq / (double)count - mean * mean);
        CHECK(fabs(mean) < 1e-3 && fabs(std - 1) < 1e-3,
              "train: normalised mean %g std %g", mean, std);
    }
    pl_dataset_free(ds);
}

/* DistributedSampler's split: for 2 and 3 ranks, rank r's batch b holds
 * positions r, r + N, ... of the one-process batch b (same seed, same
 * epoch), so the ranks together see exactly its samples; a last batch
 * (drop_last false) of fewer samples than ranks is dropped on every rank;
 * a global batch N does not divide is refused. */
static void test_shards(void) {
    pl_dataset_t *ds = make_dataset(21);
    CHECK(ds != NULL, "make_dataset");
    if (!ds) return;
    int64_t whole[32], whole_sizes[8], batches;
    pl_loader_t *one = pl_loader_new(ds, 6, true, false, 9);
    pl_loader_start_epoch(one, 2);
    int64_t n_whole = read_epoch(one, whole, whole_sizes, &batches);
    CHECK(n_whole == 21 && batches == 4, "one process: %lld samples in %lld batches",
          (long long)n_whole, (long long)batches);
    for (int world = 2; world <= 4; world++) {
        int64_t seen = 0;
        for (int r = 0; r < world; r++) {
            pl_loader_t *l = pl_loader_new(ds, 6, true, false, 9);
            pl_status st = pl_loader_set_shard(l, r, world);
            if (world == 4) { /* 6 % 4 != 0 */
                tu_expect_error(__LINE__, "a global batch of 6 over 4 ranks", st,
                                PL_STATUS_INVALID_ARGUMENT, "not divisible", "4 ranks");
                pl_loader_free(l);
                continue;
            }
            CHECK(st == PL_STATUS_OK, "pl_loader_set_shard(%d, %d): %s", r, world,
                  pl_last_error());
            pl_loader_start_epoch(l, 2);
            int64_t ids[32], sizes[8], nb;
            int64_t n = read_epoch(l, ids, sizes, &nb);
            /* 21 = 3 full batches + 3: the tail has >= world samples. */
            CHECK(nb == 4 && pl_loader_batches_per_epoch(l) == 4,
                  "rank %d of %d: %lld batches", r, world, (long long)nb);
            int64_t k = 0;
            for (int64_t b = 0; b < nb; b++)
                for (int64_t i = r; i < whole_sizes[b]; i += world, k++)
                    CHECK(k < n && ids[k] == whole[b * 6 + i],
                          "rank %d of %d, batch %lld: sample %lld is not position %lld of "
                          "the one-process batch", r, world, (long long)b, (long long)k,
                          (long long)i);
            seen += n;
            pl_loader_free(l);
        }
        if (world < 4)
            CHECK(seen == n_whole, "%d ranks saw %lld samples, one process %lld", world,
                  (long long)seen, (long long)n_whole);
    }
    /* 20 samples, batch 6: a tail of 2 is dropped for 3 ranks, kept for 2. */
    pl_dataset_t *ds20 = make_dataset(20);
    pl_loader_t *l = ds20 ? pl_loader_new(ds20, 6, false, false, 0) : NULL;
    CHECK(l && pl_loader_set_shard(l, 0, 3) == PL_STATUS_OK &&
              pl_loader_batches_per_epoch(l) == 3,
          "a 2-sample tail over 3 ranks: %lld batches, expected 3",
          l ? (long long)pl_loader_batches_per_epoch(l) : -1LL);
    CHECK(l && pl_loader_set_shard(l, 1, 2) == PL_STATUS_OK &&
              pl_loader_batches_per_epoch(l) == 4,
          "a 2-sample tail over 2 ranks: %lld batches, expected 4",
          l ? (long long)pl_loader_batches_per_epoch(l) : -1LL);
    tu_expect_error(__LINE__, "rank 2 of 2", pl_loader_set_shard(l, 2, 2),
                    PL_STATUS_INVALID_ARGUMENT, "rank 2 of world 2", NULL);
    pl_loader_free(l);
    pl_dataset_free(ds20);
    pl_loader_free(one);
    pl_dataset_free(ds);
}

/* pl_dataset_fingerprint: the bytes as loaded and zlib's CRC-32 of them,
 * run on over several datasets; a one-bit change moves the CRC, not the
 * size. */
static void test_fingerprint(void) {
    pl_dataset_t *a = make_dataset(100), *b = make_dataset(100);
    CHECK(a && b, "pl_dataset_alloc: %s", pl_last_error());
    if (!a || !b) {
        pl_dataset_free(a);
        pl_dataset_free(b);
        return;
    }
    pl_fingerprint fa = {0, 0}, fb = {0, 0};
    CHECK(pl_dataset_fingerprint(a, &fa) == PL_STATUS_OK, "fingerprint: %s", pl_last_error());
    uLong want = crc32_z(0, (const Bytef *)a->x, 300 * sizeof(float));
    want = crc32_z(want, (const Bytef *)a->y, 100 * sizeof(int32_t));
    CHECK(fa.bytes == 1600 && fa.crc32 == (uint32_t)want,
          "fingerprint %llu bytes crc32 %08x, want 1600 bytes crc32 %08lx",
          (unsigned long long)fa.bytes, (unsigned)fa.crc32, want);
    ((unsigned char *)b->x)[17] ^= 1;
    CHECK(pl_dataset_fingerprint(b, &fb) == PL_STATUS_OK && fb.bytes == fa.bytes &&
              fb.crc32 != fa.crc32,
          "one flipped bit: %llu bytes crc32 %08x against %08x", (unsigned long long)fb.bytes,
          (unsigned)fb.crc32, (unsigned)fa.crc32);
    /* Two datasets: one fingerprint of both, in order. */
    pl_fingerprint both = {0, 0};
    pl_dataset_fingerprint(a, &both);
    pl_dataset_fingerprint(b, &both);
    CHECK(both.bytes == 3200 && both.crc32 != fa.crc32, "two datasets: %llu bytes",
          (unsigned long long)both.bytes);
    /* A text dataset: its bytes. */
    char path[] = "/tmp/pl_fingerprint_XXXXXX";
    int fd = mkstemp(path);
    const char text[] = "a few bytes of text, the same on every rank\n";
    bool written = fd >= 0 && write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1);
    if (fd >= 0) close(fd);
    pl_dataset_t *t = written ? pl_dataset_text(path, true) : NULL;
    CHECK(t, "text dataset %s: %s", path, pl_last_error());
    pl_fingerprint ft = {0, 0};
    if (t) {
        int64_t n = pl_dataset_size(t);
        CHECK(pl_dataset_fingerprint(t, &ft) == PL_STATUS_OK && ft.bytes == (uint64_t)n &&
                  ft.crc32 == (uint32_t)crc32_z(0, (const Bytef *)text, (size_t)n),
              "text fingerprint: %llu bytes crc32 %08x", (unsigned long long)ft.bytes,
              (unsigned)ft.crc32);
    }
    pl_dataset_free(t);
    unlink(path);
    pl_clear_error();
    CHECK(pl_dataset_fingerprint(NULL, &fa) == PL_STATUS_INVALID_ARGUMENT &&
              pl_dataset_fingerprint(a, NULL) == PL_STATUS_INVALID_ARGUMENT,
          "NULL arguments accepted");
    pl_dataset_free(a);
    pl_dataset_free(b);
}

int main(void) {
    test_fingerprint();
    test_shards();
    test_valid_files();
    test_bad_files();
    test_loader();
    if (access(REAL_DIR, R_OK) == 0) {
        check_real_split(true);
        check_real_split(false);
    } else {
        printf("skipping the real data set: %s not found\n", REAL_DIR);
    }
    if (tu_failures) {
        printf("%d check(s) failed\n", tu_failures);
        return 1;
    }
    printf("all data tests passed\n");
    return 0;
}
