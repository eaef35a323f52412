/* Fashion-MNIST from its gzip-compressed IDX files.
 *
 * IDX layout (all integers big-endian):
 *   images: magic 0x00000803, n, rows, cols, then n*rows*cols pixel bytes;
 *   labels: magic 0x00000801, n, then n label bytes.
 *
 * Files are read through zlib, which also reads uncompressed files
 * transparently. The header is not trusted: the payload buffer grows with
 * the bytes actually present, so a corrupt header promising gigabytes costs
 * no more memory than the file holds before it is reported as truncated.
 * Every file is read to its end, so zlib verifies the gzip CRC and data
 * beyond what the header promises is reported rather than ignored. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "graph/dataset.h"
#include "graph/error.h"

#define FMNIST_MEAN 0.2860f /* of the training pixels scaled to [0, 1] */
#define FMNIST_STD 0.3530f
#define FMNIST_CLASSES 10

#define IDX_MAGIC_IMAGES UINT32_C(0x00000803) /* unsigned byte, 3 dims */
#define IDX_MAGIC_LABELS UINT32_C(0x00000801) /* unsigned byte, 1 dim */

/* gzread() takes an int length; stay well below INT_MAX per call. */
#define GZ_READ_MAX ((size_t)1 << 30)
/* First payload allocation; doubled as the data turns out to be there. */
#define PAYLOAD_INITIAL ((size_t)1 << 20)

static const char *const who = "pl_dataset_fashion_mnist";

typedef struct idx_images {
    int64_t n, rows, cols;
    uint8_t *pixels; /* [n, rows * cols] */
} idx_images;

typedef struct idx_labels {
    int64_t n;
    uint8_t *values; /* [n] */
} idx_labels;

/* ------------------------------------------------------------- reading */

/* Turns a failed gzread() into a status: I/O errors keep errno's text,
 * anything else is a damaged gzip stream. */
static pl_status gz_failure(gzFile gz, const char *path) {
    int saved_errno = errno;
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    if (errnum == Z_ERRNO)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: read failed: %s", path,
                       strerror(saved_errno));
    if (errnum == Z_MEM_ERROR)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    /* zlib prefixes its message with the path, which ours already names. */
    size_t plen = strlen(path);
    if (strncmp(msg, path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
        msg += plen + 2;
    return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: corrupt gzip data: %s", path,
                   msg);
}

/* Reads up to `len` bytes; *got < len only at the end of the data. */
static pl_status gz_read_upto(gzFile gz, const char *path, uint8_t *buf,
                              size_t len, size_t *got) {
    *got = 0;
    while (*got < len) {
        size_t want = len - *got < GZ_READ_MAX ? len - *got : GZ_READ_MAX;
        int n = gzread(gz, buf + *got, (unsigned)want);
        if (n < 0)
            return gz_failure(gz, path);
        if (n == 0)
            return PL_STATUS_OK;
        *got += (size_t)n;
    }
    return PL_STATUS_OK;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads the magic and `ndims` dimension sizes into dims[]. */
static pl_status idx_read_header(gzFile gz, const char *path, uint32_t magic,
                                 int ndims, uint32_t *dims) {
    uint8_t buf[4 * 4];
    size_t len = 4 * (size_t)(1 + ndims), got;
    pl_status st = gz_read_upto(gz, path, buf, len, &got);
    if (st != PL_STATUS_OK)
        return st;
    if (got < len)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: truncated header: expected %zu bytes, got %zu",
                       path, len, got);
    if (be32(buf) != magic)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: bad magic 0x%08x, expected 0x%08x", path,
                       (unsigned)be32(buf), (unsigned)magic);
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(buf + 4 * (1 + i));
    return PL_STATUS_OK;
}

/* Reads up to `len` payload bytes into a new buffer (*out, owned by the
 * caller on success; *got < len when the data ends early). */
static pl_status idx_read_payload(gzFile gz, const char *path, size_t len,
                                  uint8_t **out, size_t *got) {
    size_t cap = len < PAYLOAD_INITIAL ? len : PAYLOAD_INITIAL;
    uint8_t *buf = malloc(cap + 1); /* +1: malloc(0) may return NULL */
    *got = 0;
    while (buf) {
        size_t n;
        pl_status st = gz_read_upto(gz, path, buf + *got, cap - *got, &n);
        if (st != PL_STATUS_OK) {
            free(buf);
            return st;
        }
        *got += n;
        if (*got < cap || cap == len) {
            *out = buf;
            return PL_STATUS_OK;
        }
        cap = cap <= len / 2 ? cap * 2 : len;
        uint8_t *grown = realloc(buf, cap + 1);
        if (!grown)
            free(buf);
        buf = grown;
    }
    return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory for %zu bytes",
                   path, len);
}

/* After the payload the file must end: this also makes zlib reach the gzip
 * trailer and check its CRC, which stopping at the last byte would skip. */
static pl_status idx_expect_end(gzFile gz, const char *path) {
    uint8_t extra;
    size_t got;
    pl_status st = gz_read_upto(gz, path, &extra, 1, &got);
    if (st == PL_STATUS_OK && got != 0)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: unexpected data after the last item", path);
    return st;
}

static pl_status idx_open(const char *path, gzFile *gz) {
    errno = 0;
    *gz = gzopen(path, "rb");
    if (!*gz)
        /* errno is 0 when zlib itself failed to allocate its state. */
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open: %s", path,
                       strerror(errno ? errno : ENOMEM));
    return PL_STATUS_OK;
}

/* --------------------------------------------------------------- files */

static pl_status read_images(gzFile gz, const char *path, idx_images *img) {
    uint32_t dims[3];
    pl_status st = idx_read_header(gz, path, IDX_MAGIC_IMAGES, 3, dims);
    if (st != PL_STATUS_OK)
        return st;
    img->n = dims[0];
    img->rows = dims[1];
    img->cols = dims[2];
    /* rows * cols < 2^64; the payload must also fit in floats later. */
    uint64_t features = (uint64_t)dims[1] * dims[2];
    if (features == 0)
        return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: empty images of %ux%u",
                       path, (unsigned)dims[1], (unsigned)dims[2]);
    if (img->n > 0 && features > SIZE_MAX / sizeof(float) / (uint64_t)img->n)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %lld images of %ux%u are too large", path,
                       (long long)img->n, (unsigned)dims[1],
                       (unsigned)dims[2]);
    size_t len = (size_t)img->n * (size_t)features, got;
    st = idx_read_payload(gz, path, len, &img->pixels, &got);
    if (st == PL_STATUS_OK && got < len)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: truncated: expected %lld images of %ux%u "
                     "(%zu bytes), got %zu bytes",
                     path, (long long)img->n, (unsigned)dims[1],
                     (unsigned)dims[2], len, got);
    if (st == PL_STATUS_OK)
        st = idx_expect_end(gz, path);
    return st;
}

static pl_status check_label_values(const char *path, const idx_labels *lab) {
    for (int64_t i = 0; i < lab->n; i++)
        if (lab->values[i] >= FMNIST_CLASSES)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: label %u at index %lld is out of range "
                           "[0, %d]",
                           path, (unsigned)lab->values[i], (long long)i,
                           FMNIST_CLASSES - 1);
    return PL_STATUS_OK;
}

static pl_status read_labels(gzFile gz, const char *path, idx_labels *lab) {
    uint32_t n = 0;
    pl_status st = idx_read_header(gz, path, IDX_MAGIC_LABELS, 1, &n);
    if (st != PL_STATUS_OK)
        return st;
    lab->n = n;
    size_t got;
    st = idx_read_payload(gz, path, n, &lab->values, &got);
    if (st == PL_STATUS_OK && got < n)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: truncated: expected %lld labels, got %zu", path,
                     (long long)n, got);
    if (st == PL_STATUS_OK)
        st = idx_expect_end(gz, path);
    if (st == PL_STATUS_OK)
        st = check_label_values(path, lab);
    return st;
}

/* Each opens, reads and closes one file; on failure the caller still frees
 * whatever buffer was attached (free(NULL) when none). */
static pl_status load_images(const char *path, idx_images *img) {
    gzFile gz;
    pl_status st = idx_open(path, &gz);
    if (st != PL_STATUS_OK)
        return st;
    st = read_images(gz, path, img);
    gzclose(gz);
    return st;
}

static pl_status load_labels(const char *path, idx_labels *lab) {
    gzFile gz;
    pl_status st = idx_open(path, &gz);
    if (st != PL_STATUS_OK)
        return st;
    st = read_labels(gz, path, lab);
    gzclose(gz);
    return st;
}

/* ------------------------------------------------------------- dataset */

/* Pixels take 256 values, so normalise through a table: one float division
 * per value instead of per pixel, and every pixel of value v gets exactly
 * (v / 255 - mean) / std evaluated in float. */
static pl_dataset_t *to_dataset(const idx_images *img,
                                const idx_labels *lab) {
    pl_dataset_t *ds =
        pl_dataset_alloc(img->n, img->rows * img->cols, FMNIST_CLASSES, who);
    if (!ds)
        return NULL;
    float table[256];
    for (int v = 0; v < 256; v++)
        table[v] = ((float)v / 255.0f - FMNIST_MEAN) / FMNIST_STD;
    size_t count = (size_t)ds->size * (size_t)ds->features;
    for (size_t i = 0; i < count; i++)
        ds->x[i] = table[img->pixels[i]];
    for (int64_t i = 0; i < ds->size; i++)
        ds->y[i] = lab->values[i];
    return ds;
}

static pl_dataset_t *load_split(const char *images_path,
                                const char *labels_path) {
    idx_images img = {0};
    idx_labels lab = {0};
    pl_dataset_t *ds = NULL;
    if (load_images(images_path, &img) == PL_STATUS_OK &&
        load_labels(labels_path, &lab) == PL_STATUS_OK) {
        if (lab.n != img.n)
            pl_fail(PL_STATUS_FORMAT_ERROR,
                    "%s: count mismatch: %lld labels, but %s has %lld "
                    "images",
                    labels_path, (long long)lab.n, images_path,
                    (long long)img.n);
        else
            ds = to_dataset(&img, &lab);
    }
    free(img.pixels);
    free(lab.values);
    return ds;
}

/* "<dir>/<split>-<suffix>" in a new string; NULL when out of memory. */
static char *split_path(const char *dir, const char *split,
                        const char *suffix) {
    size_t dlen = strlen(dir);
    const char *sep = dlen == 0 || dir[dlen - 1] == '/' ? "" : "/";
    int len = snprintf(NULL, 0, "%s%s%s-%s", dir, sep, split, suffix);
    char *path = len < 0 ? NULL : malloc((size_t)len + 1);
    if (path)
        snprintf(path, (size_t)len + 1, "%s%s%s-%s", dir, sep, split, suffix);
    return path;
}

pl_dataset_t *pl_dataset_fashion_mnist(const char *dir, bool train) {
    if (!dir) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: dir is NULL", who);
        return NULL;
    }
    /* The file names of the original distribution (and Debian's copy). */
    const char *split = train ? "train" : "t10k";
    char *images_path = split_path(dir, split, "images-idx3-ubyte.gz");
    char *labels_path = split_path(dir, split, "labels-idx1-ubyte.gz");
    pl_dataset_t *ds = NULL;
    if (images_path && labels_path)
        ds = load_split(images_path, labels_path);
    else
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", who);
    free(images_path);
    free(labels_path);
    return ds;
}
