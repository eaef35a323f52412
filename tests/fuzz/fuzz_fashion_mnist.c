/* Fuzzes the Fashion-MNIST IDX reader (data/fashion_mnist.c,
 * pl_dataset_fashion_mnist). The loader reads a directory holding
 * "<split>-images-idx3-ubyte.gz" and "<split>-labels-idx1-ubyte.gz" (split
 * "train" or "t10k"), each gzip'd or plain. An input is
 *
 *   byte 0      flags: 1 = gzip the images part, 2 = gzip the labels part,
 *               4 = the t10k split (else train)
 *   bytes 1-2   n, little-endian: the images part is the next n bytes
 *               (fewer when the input ends first)
 *   the rest    the labels part
 *
 * and each part is written as the file's bytes (compressed first when its
 * flag says so; uncompressed parts may be gzip data themselves, which the
 * seeds use to exercise the gzip reader with members, trailers and
 * trailing bytes).
 *
 * The invariant is differential: an oracle written here (decode each file
 * as one or more gzip members with nothing after them, or as plain bytes,
 * then check the IDX layout) says whether the pair is valid, and the
 * loader must load exactly the valid pairs: with the oracle's sample
 * count, rows x cols features, its labels, and pixels that map each byte
 * value to one float, increasing with the value. Failures name the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include <pleiades.h>

#include "fuzz_common.h"
#include "data/dataset.h"

const char fuzz_name[] = "fashion_mnist";

enum { F_GZIP_IMAGES = 1, F_GZIP_LABELS = 2, F_TEST_SPLIT = 4 };

static char data_dir[4096];

void fuzz_setup(void) {
    fuzz_scratch_path(data_dir, sizeof data_dir, "fashion-mnist");
    if (mkdir(data_dir, 0700) != 0)
        fuzz_die("cannot create %s", data_dir);
}

void fuzz_teardown(void) {}

/* A gzip member holding data[0..size) (*out malloc'd). `level` 0 stores. */
static size_t gzip_bytes(const uint8_t *data, size_t size, int level,
                         uint8_t **out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    /* 16 + window bits: a gzip wrapper instead of zlib's. */
    if (deflateInit2(&z, level, Z_DEFLATED, 16 + MAX_WBITS, 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        fuzz_die("deflateInit2 failed");
    size_t cap = deflateBound(&z, (uLong)size) + 64;
    *out = malloc(cap);
    if (!*out)
        fuzz_die("out of memory");
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = *out;
    z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        fuzz_die("deflate did not finish");
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    return n;
}

/* ------------------------------------------------------------- oracle */

/* Decoded files larger than this are not compared (only a crafted
 * deflate stream expands a small input that far). */
#define ORACLE_MAX ((size_t)64 << 20)

typedef struct decoded {
    uint8_t *bytes;
    size_t n;
    bool valid;    /* well-formed gzip (or plain) */
    bool too_big;  /* past ORACLE_MAX: no verdict */
} decoded;

/* Appends one gzip member starting at in[*pos] to d, advancing *pos past
 * it; false when it is damaged or cut. */
static bool oracle_member(const uint8_t *in, size_t n, size_t *pos,
                          decoded *d, size_t *cap) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        fuzz_die("inflateInit2 failed");
    z.next_in = (Bytef *)(in + *pos);
    z.avail_in = (uInt)(n - *pos);
    bool ok = false;
    for (;;) {
        if (d->n == *cap) {
            if (*cap >= ORACLE_MAX) {
                d->too_big = true;
                break;
            }
            *cap *= 2;
            if (!(d->bytes = realloc(d->bytes, *cap)))
                fuzz_die("out of memory");
        }
        z.next_out = d->bytes + d->n;
        z.avail_out = (uInt)(*cap - d->n);
        int rc = inflate(&z, Z_NO_FLUSH);
        d->n = *cap - z.avail_out;
        if (rc == Z_STREAM_END) {
            ok = true;
            break;
        }
        /* Anything else than progress, or a full output buffer, means a
         * damaged or cut member. */
        if (!(rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)))
            break;
    }
    *pos = n - z.avail_in;
    inflateEnd(&z);
    return ok;
}

static decoded oracle_decode(const uint8_t *in, size_t n) {
    decoded d = {malloc(n + 4096), 0, true, false};
    size_t cap = n + 4096;
    if (!d.bytes)
        fuzz_die("out of memory");
    if (n < 2 || in[0] != 0x1f || in[1] != 0x8b) { /* plain */
        memcpy(d.bytes, in, n);
        d.n = n;
        return d;
    }
    size_t pos = 0;
    while (pos < n && d.valid && !d.too_big) {
        /* Each member starts with the magic: anything else is garbage. */
        if (n - pos < 2 || in[pos] != 0x1f || in[pos + 1] != 0x8b)
            d.valid = false;
        else
            d.valid = oracle_member(in, n, &pos, &d, &cap);
    }
    return d;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

/* The IDX layout of both decoded files; *n samples of *features bytes. */
static bool oracle_idx(const decoded *img, const decoded *lab, uint64_t *n,
                       uint64_t *features) {
    if (!img->valid || !lab->valid || img->n < 16 || lab->n < 8 ||
        be32(img->bytes) != 0x803 || be32(lab->bytes) != 0x801)
        return false;
    *n = be32(img->bytes + 4);
    *features = (uint64_t)be32(img->bytes + 8) * be32(img->bytes + 12);
    /* The loader's limit (pleiades/data.h): at most 2^31 pixels an image. */
    if (*features == 0 || *features > ((uint64_t)1 << 31) ||
        be32(lab->bytes + 4) != *n || lab->n - 8 != *n ||
        (*n && (img->n - 16) / *n != *features) ||
        (img->n - 16) != *n * *features)
        return false;
    for (uint64_t i = 0; i < *n; i++)
        if (lab->bytes[8 + i] >= 10)
            return false;
    return true;
}

static void check_dataset(const pl_dataset_t *ds, const decoded *img,
                          const decoded *lab, uint64_t n, uint64_t features) {
    if (ds->size != (int64_t)n || ds->features != (int64_t)features ||
        ds->classes != 10)
        fuzz_die("dataset of %lld samples x %lld features, %lld classes; "
                 "the files hold %llu x %llu", (long long)ds->size,
                 (long long)ds->features, (long long)ds->classes,
                 (unsigned long long)n, (unsigned long long)features);
    for (uint64_t i = 0; i < n; i++)
        if (ds->y[i] != lab->bytes[8 + i])
            fuzz_die("label %llu is %d, the file says %d",
                     (unsigned long long)i, (int)ds->y[i],
                     lab->bytes[8 + i]);
    float of_byte[256];
    bool seen[256] = {false};
    for (uint64_t i = 0; i < n * features; i++) {
        uint8_t v = img->bytes[16 + i];
        float x = ds->x[i];
        if (!isfinite(x) || (seen[v] && x != of_byte[v]))
            fuzz_die("pixel %llu (byte %d) became %g",
                     (unsigned long long)i, v, (double)x);
        of_byte[v] = x;
        seen[v] = true;
    }
    float last = -INFINITY;
    for (int v = 0; v < 256; v++)
        if (seen[v]) {
            if (!(of_byte[v] > last))
                fuzz_die("byte %d maps to %g, not above smaller bytes", v,
                         (double)of_byte[v]);
            last = of_byte[v];
        }
}

/* The file as written to disk for a part. */
static uint8_t *file_bytes(const uint8_t *data, size_t size, bool gzip,
                           size_t *n) {
    uint8_t *out;
    if (gzip)
        return *n = gzip_bytes(data, size, 1, &out), out;
    if (!(out = malloc(size + 1)))
        fuzz_die("out of memory");
    memcpy(out, data, size);
    *n = size;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_reader r = {data, size};
    uint8_t flags = fuzz_byte(&r);
    size_t n_images = fuzz_u16(&r);
    if (n_images > r.size)
        n_images = r.size;
    const char *split = flags & F_TEST_SPLIT ? "t10k" : "train";
    size_t n_img_file, n_lab_file;
    uint8_t *img_file = file_bytes(r.data, n_images, flags & F_GZIP_IMAGES,
                                   &n_img_file);
    uint8_t *lab_file = file_bytes(r.data + n_images, r.size - n_images,
                                   flags & F_GZIP_LABELS, &n_lab_file);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", data_dir, split);
    fuzz_write_file(path, img_file, n_img_file);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", data_dir, split);
    fuzz_write_file(path, lab_file, n_lab_file);

    pl_dataset_t *ds =
        pl_dataset_fashion_mnist(data_dir, !(flags & F_TEST_SPLIT));
    if (!ds && !strstr(pl_last_error(), data_dir))
        fuzz_die("the error does not name the file: %s", pl_last_error());
    decoded img = oracle_decode(img_file, n_img_file);
    decoded lab = oracle_decode(lab_file, n_lab_file);
    uint64_t n = 0, features = 0;
    bool valid = oracle_idx(&img, &lab, &n, &features);
    if (!img.too_big && !lab.too_big) {
        if (valid && !ds)
            fuzz_die("valid files refused: %s", pl_last_error());
        if (!valid && ds)
            fuzz_die("invalid files loaded (images %s, labels %s)",
                     img.valid ? "decode" : "do not decode",
                     lab.valid ? "decode" : "do not decode");
        if (ds)
            check_dataset(ds, &img, &lab, n, features);
    }
    pl_dataset_free(ds);
    free(img.bytes);
    free(lab.bytes);
    free(img_file);
    free(lab_file);
    return 0;
}

/* --------------------------------------------------------------- seeds */

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An input from its two parts, as the harness splits them. */
static void put_input(const char *dir, const char *name, uint8_t flags,
                      const uint8_t *images, size_t n_images,
                      const uint8_t *labels, size_t n_labels, int *count) {
    uint8_t *in = malloc(3 + n_images + n_labels);
    if (!in)
        fuzz_die("out of memory");
    in[0] = flags;
    in[1] = (uint8_t)n_images;
    in[2] = (uint8_t)(n_images >> 8);
    memcpy(in + 3, images, n_images);
    memcpy(in + 3 + n_images, labels, n_labels);
    fuzz_seed_put(dir, name, in, 3 + n_images + n_labels, count);
    free(in);
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    enum { N = 3, ROWS = 2, COLS = 3 };
    uint8_t images[16 + N * ROWS * COLS], labels[8 + N];
    put_be32(images, 0x803);
    put_be32(images + 4, N);
    put_be32(images + 8, ROWS);
    put_be32(images + 12, COLS);
    for (int i = 0; i < N * ROWS * COLS; i++)
        images[16 + i] = (uint8_t)(i * 37);
    put_be32(labels, 0x801);
    put_be32(labels + 4, N);
    for (int i = 0; i < N; i++)
        labels[8 + i] = (uint8_t)(i * 3 % 10);
    const size_t ni = sizeof images, nl = sizeof labels;

    /* Valid files: compressed by the harness, plain, and the test split. */
    put_input(dir, "valid-gzip", F_GZIP_IMAGES | F_GZIP_LABELS, images, ni,
              labels, nl, &count);
    put_input(dir, "valid-plain", 0, images, ni, labels, nl, &count);
    put_input(dir, "valid-t10k", F_TEST_SPLIT | F_GZIP_IMAGES, images, ni,
              labels, nl, &count);

    /* gzip data given as is: stored and compressed members, two members,
     * bytes after the stream, a cut stream, a damaged CRC. */
    uint8_t *gz, *gz2;
    size_t n = gzip_bytes(images, ni, 0, &gz);
    put_input(dir, "stored-member", F_GZIP_LABELS, gz, n, labels, nl, &count);
    free(gz);
    n = gzip_bytes(labels, nl, 9, &gz);
    put_input(dir, "raw-gzip-labels", F_GZIP_IMAGES, images, ni, gz, n,
              &count);
    size_t half = gzip_bytes(labels, 9, 6, &gz2);
    uint8_t *two = malloc(half + n + 8);
    if (!two)
        fuzz_die("out of memory");
    memcpy(two, gz2, half);
    free(gz2);
    size_t rest = gzip_bytes(labels + 9, nl - 9, 6, &gz2);
    memcpy(two + half, gz2, rest);
    free(gz2);
    put_input(dir, "two-members", F_GZIP_IMAGES, images, ni, two, half + rest,
              &count);
    free(two);
    uint8_t *longer = malloc(n + 8);
    if (!longer)
        fuzz_die("out of memory");
    memcpy(longer, gz, n);
    memcpy(longer + n, "\0\0\0\0TAIL", 8);
    put_input(dir, "trailing-bytes", F_GZIP_IMAGES, images, ni, longer, n + 8,
              &count);
    put_input(dir, "trailing-zero", F_GZIP_IMAGES, images, ni, longer,
              n + 1, &count);
    longer[n] = 0x1f; /* half a gzip magic */
    put_input(dir, "trailing-1f", F_GZIP_IMAGES, images, ni, longer, n + 1,
              &count);
    put_input(dir, "cut-stream", F_GZIP_IMAGES, images, ni, gz, n - 5,
              &count);
    memcpy(longer, gz, n);
    longer[n - 6] ^= 0x40; /* in the CRC32 of the trailer */
    put_input(dir, "bad-crc", F_GZIP_IMAGES, images, ni, longer, n, &count);
    free(longer);
    free(gz);

    /* IDX-level mistakes, compressed by the harness. */
    uint8_t bad[sizeof images];
    const uint8_t both = F_GZIP_IMAGES | F_GZIP_LABELS;
    memcpy(bad, images, ni);
    put_be32(bad + 4, 0x7fffffff); /* promises far more than is there */
    put_input(dir, "huge-count", both, bad, ni, labels, nl, &count);
    memcpy(bad, images, ni);
    put_be32(bad + 8, 0);
    put_input(dir, "empty-images", both, bad, ni, labels, nl, &count);
    memcpy(bad, images, ni);
    put_be32(bad, 0x801);
    put_input(dir, "bad-magic", both, bad, ni, labels, nl, &count);
    uint8_t more[sizeof images + 1];
    memcpy(more, images, ni);
    more[ni] = 7;
    put_input(dir, "extra-pixel", both, more, ni + 1, labels, nl, &count);
    uint8_t lab[sizeof labels + 1];
    memcpy(lab, labels, nl);
    lab[8] = 10;
    put_input(dir, "label-10", both, images, ni, lab, nl, &count);
    memcpy(lab, labels, nl);
    lab[nl] = 0;
    put_input(dir, "label-extra", both, images, ni, lab, nl + 1, &count);
    put_input(dir, "labels-short", both, images, ni, labels, nl - 1, &count);
    put_be32(lab + 4, 2);
    put_input(dir, "count-mismatch", both, images, ni, lab, 10, &count);
    uint8_t zero_images[16];
    memcpy(zero_images, images, 16);
    put_be32(zero_images + 4, 0);
    uint8_t zero_labels[8];
    memcpy(zero_labels, labels, 8);
    put_be32(zero_labels + 4, 0);
    put_input(dir, "zero-samples", both, zero_images, 16, zero_labels, 8,
              &count);
    put_input(dir, "empty", both, images, 0, labels, 0, &count);
    return count;
}
