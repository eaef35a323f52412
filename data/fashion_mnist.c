/* Fashion-MNIST from its gzip-compressed IDX files.
 *
 * IDX layout (all integers big-endian):
 *   images: magic 0x00000803, n, rows, cols, then n*rows*cols pixel bytes;
 *   labels: magic 0x00000801, n, then n label bytes.
 *
 * A file that starts with the gzip magic (1f 8b) is inflated with zlib,
 * member after member (`gzip -c a b` is one valid file); any other file
 * is read as the plain IDX bytes. zlib's gzread() would do both, but it
 * silently ignores whatever follows the last gzip member, so the stream is
 * driven here instead: bytes after a member that do not start another one
 * are reported. The header is not trusted: the payload buffer grows with
 * the bytes actually present, so a corrupt header promising gigabytes
 * costs no more memory than the file holds before it is reported as
 * truncated. Every file is read to its end, so zlib verifies each member's
 * CRC and length, and data beyond what the header promises is reported
 * rather than ignored. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data/dataset.h"
#include "util/error.h"
#include "util/regular_file.h"

#define FMNIST_MEAN 0.2860f /* of the training pixels scaled to [0, 1] */
#define FMNIST_STD 0.3530f
#define FMNIST_CLASSES 10

#define IDX_MAGIC_IMAGES UINT32_C(0x00000803) /* unsigned byte, 3 dims */
#define IDX_MAGIC_LABELS UINT32_C(0x00000801) /* unsigned byte, 1 dim */
/* Pixels per image: 2^31 (a 46341 x 46341 image) is far beyond any image
 * dataset and keeps rows * cols and every per-image size in range. */
#define IDX_MAX_PIXELS (INT64_C(1) << 31)

/* z_stream counts in uInt and read() returns ssize_t: stay well below both
 * limits per call. */
#define READ_MAX ((size_t)1 << 30)
/* Compressed (or plain) bytes read from the file at a time. */
#define INPUT_SIZE ((size_t)1 << 16)
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

/* One open IDX file. z.next_in/z.avail_in hold the bytes read from the
 * file and not yet consumed, in both modes (plain reads copy them out
 * before reading on). */
typedef struct idx_file {
    int fd;
    const char *path;
    bool gzip;      /* the file starts with the gzip magic */
    bool inflating; /* inflateInit2 succeeded: inflateEnd is owed */
    bool eof;       /* read() has returned 0 */
    bool done;      /* gzip: the last member ended, no data follows */
    uint64_t offset; /* bytes read from the file so far */
    uint8_t *in;     /* [INPUT_SIZE] */
    z_stream z;
} idx_file;

/* Reads more of the file behind the bytes not yet consumed (which move to
 * the front of the buffer); at the end of the file it sets f->eof. */
static pl_status idx_fill(idx_file *f) {
    if (f->eof)
        return PL_STATUS_OK;
    if (f->z.avail_in > 0 && f->z.next_in != f->in)
        memmove(f->in, f->z.next_in, f->z.avail_in);
    f->z.next_in = f->in;
    for (;;) {
        ssize_t n = read(f->fd, f->in + f->z.avail_in,
                         INPUT_SIZE - f->z.avail_in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pl_fail(PL_STATUS_IO_ERROR, "%s: read failed: %s", f->path,
                           strerror(errno));
        f->eof = n == 0;
        f->z.avail_in += (uInt)n;
        f->offset += (uint64_t)n;
        return PL_STATUS_OK;
    }
}

/* Fills until at least `want` unconsumed bytes are buffered or the file
 * ends (want <= INPUT_SIZE). */
static pl_status idx_fill_upto(idx_file *f, size_t want) {
    pl_status st = PL_STATUS_OK;
    while (st == PL_STATUS_OK && f->z.avail_in < want && !f->eof)
        st = idx_fill(f);
    return st;
}

static bool starts_gzip_member(const idx_file *f) {
    return f->z.avail_in >= 2 && f->z.next_in[0] == 0x1f &&
           f->z.next_in[1] == 0x8b;
}

static void idx_close(idx_file *f) {
    if (f->inflating)
        inflateEnd(&f->z);
    if (f->fd >= 0)
        close(f->fd);
    free(f->in);
    f->fd = -1;
    f->in = NULL;
    f->inflating = false;
}

/* Opens `path` and decides from its first bytes whether it is gzip'd. On
 * failure everything is released. */
static pl_status idx_open(const char *path, idx_file *f) {
    memset(f, 0, sizeof *f);
    f->path = path;
    /* Only a regular file is an IDX file: a FIFO would block the open
     * until a writer appears, forever. */
    const char *why;
    f->fd = pl_open_regular(path, 0, &why);
    if (f->fd < 0 && errno == EINVAL)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: not a regular file (a FIFO, "
                       "socket or device cannot be read as a data set)", path);
    if (f->fd < 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot %s: %s", path,
                       errno == EISDIR ? "read" : "open",
                       errno == EISDIR ? strerror(EISDIR) : why);
    pl_status st = PL_STATUS_OK;
    if (!(f->in = malloc(INPUT_SIZE)))
        st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    f->z.next_in = f->in;
    if (st == PL_STATUS_OK)
        st = idx_fill_upto(f, 2);
    if (st == PL_STATUS_OK && (f->gzip = starts_gzip_member(f))) {
        /* 16 + window bits: a gzip wrapper, whose CRC zlib then checks. */
        int rc = inflateInit2(&f->z, 16 + MAX_WBITS);
        if (rc == Z_OK)
            f->inflating = true;
        else
            st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory "
                         "for zlib (%s)", path, zError(rc));
    }
    if (st != PL_STATUS_OK)
        idx_close(f);
    return st;
}

/* Plain file: the buffered bytes first, then straight from the file. */
static pl_status plain_read(idx_file *f, uint8_t *buf, size_t len,
                            size_t *got) {
    size_t take = f->z.avail_in < len ? f->z.avail_in : len;
    memcpy(buf, f->z.next_in, take);
    f->z.next_in += take;
    f->z.avail_in -= (uInt)take;
    *got = take;
    while (*got < len && !f->eof) {
        size_t want = len - *got < READ_MAX ? len - *got : READ_MAX;
        ssize_t n = read(f->fd, buf + *got, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return pl_fail(PL_STATUS_IO_ERROR, "%s: read failed: %s", f->path,
                           strerror(errno));
        f->eof = n == 0;
        *got += (size_t)n;
        f->offset += (uint64_t)n;
    }
    return PL_STATUS_OK;
}

/* A gzip member has ended: another one may follow, anything else after it
 * is an error (gzread() would skip it in silence). */
static pl_status gzip_member_end(idx_file *f) {
    pl_status st = idx_fill_upto(f, 2);
    if (st != PL_STATUS_OK)
        return st;
    if (f->z.avail_in == 0) {
        f->done = true;
        return PL_STATUS_OK;
    }
    if (!starts_gzip_member(f))
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: unexpected data after the end of the gzip stream "
                       "(at byte %llu of the file)", f->path,
                       (unsigned long long)(f->offset - f->z.avail_in));
    if (inflateReset(&f->z) != Z_OK)
        return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: corrupt gzip data: "
                       "cannot restart zlib", f->path);
    return PL_STATUS_OK;
}

static pl_status gzip_read(idx_file *f, uint8_t *buf, size_t len,
                           size_t *got) {
    *got = 0;
    while (*got < len && !f->done) {
        pl_status st = PL_STATUS_OK;
        if (f->z.avail_in == 0 && (st = idx_fill(f)) != PL_STATUS_OK)
            return st;
        size_t want = len - *got < READ_MAX ? len - *got : READ_MAX;
        f->z.next_out = buf + *got;
        f->z.avail_out = (uInt)want;
        uInt in_before = f->z.avail_in;
        int rc = inflate(&f->z, Z_NO_FLUSH);
        size_t produced = want - f->z.avail_out;
        *got += produced;
        if (rc == Z_STREAM_END) {
            st = gzip_member_end(f);
        } else if (rc == Z_MEM_ERROR) {
            st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory",
                         f->path);
        } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
            /* No progress with the whole file read: the stream was cut. */
            if (produced == 0 && f->z.avail_in == in_before && f->eof)
                st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: corrupt gzip data: "
                             "unexpected end of file", f->path);
        } else { /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR */
            st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: corrupt gzip data: %s",
                         f->path, f->z.msg ? f->z.msg : zError(rc));
        }
        if (st != PL_STATUS_OK)
            return st;
    }
    return PL_STATUS_OK;
}

/* Reads up to `len` bytes of IDX data; *got < len only at the end of the
 * data. */
static pl_status idx_read(idx_file *f, uint8_t *buf, size_t len,
                          size_t *got) {
    return f->gzip ? gzip_read(f, buf, len, got)
                   : plain_read(f, buf, len, got);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads the magic and `ndims` dimension sizes into dims[]. */
static pl_status idx_read_header(idx_file *f, uint32_t magic, int ndims,
                                 uint32_t *dims) {
    uint8_t buf[4 * 4];
    size_t len = 4 * (size_t)(1 + ndims), got;
    pl_status st = idx_read(f, buf, len, &got);
    if (st != PL_STATUS_OK)
        return st;
    if (got < len)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: truncated header: expected %zu bytes, got %zu",
                       f->path, len, got);
    if (be32(buf) != magic)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: bad magic 0x%08x, expected 0x%08x", f->path,
                       (unsigned)be32(buf), (unsigned)magic);
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(buf + 4 * (1 + i));
    return PL_STATUS_OK;
}

/* Reads up to `len` payload bytes into a new buffer (*out, owned by the
 * caller on success; *got < len when the data ends early). */
static pl_status idx_read_payload(idx_file *f, size_t len, uint8_t **out,
                                  size_t *got) {
    size_t cap = len < PAYLOAD_INITIAL ? len : PAYLOAD_INITIAL;
    uint8_t *buf = malloc(cap + 1); /* +1: malloc(0) may return NULL */
    *got = 0;
    while (buf) {
        size_t n;
        pl_status st = idx_read(f, buf + *got, cap - *got, &n);
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
                   f->path, len);
}

/* After the payload the data must end: this also makes zlib reach the end
 * of the gzip stream, check its CRC and look at what follows it, which
 * stopping at the last byte would skip. */
static pl_status idx_expect_end(idx_file *f) {
    uint8_t extra;
    size_t got;
    pl_status st = idx_read(f, &extra, 1, &got);
    if (st == PL_STATUS_OK && got != 0)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: unexpected data after the last item", f->path);
    return st;
}

/* --------------------------------------------------------------- files */

static pl_status read_images(idx_file *f, idx_images *img) {
    const char *path = f->path;
    uint32_t dims[3];
    pl_status st = idx_read_header(f, IDX_MAGIC_IMAGES, 3, dims);
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
    /* Checked apart from the count: with no images the payload check
     * below passes whatever the size, and the size is an int64_t feature
     * count (4294967295 x 4294967295 overflowed it, found by fuzzing). */
    if (features > IDX_MAX_PIXELS)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: images of %ux%u are too large (at most %lld "
                       "pixels each)",
                       path, (unsigned)dims[1], (unsigned)dims[2],
                       (long long)IDX_MAX_PIXELS);
    if (img->n > 0 && features > SIZE_MAX / sizeof(float) / (uint64_t)img->n)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %lld images of %ux%u are too large", path,
                       (long long)img->n, (unsigned)dims[1],
                       (unsigned)dims[2]);
    size_t len = (size_t)img->n * (size_t)features, got;
    st = idx_read_payload(f, len, &img->pixels, &got);
    if (st == PL_STATUS_OK && got < len)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: truncated: expected %lld images of %ux%u "
                     "(%zu bytes), got %zu bytes",
                     path, (long long)img->n, (unsigned)dims[1],
                     (unsigned)dims[2], len, got);
    if (st == PL_STATUS_OK)
        st = idx_expect_end(f);
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

static pl_status read_labels(idx_file *f, idx_labels *lab) {
    uint32_t n = 0;
    pl_status st = idx_read_header(f, IDX_MAGIC_LABELS, 1, &n);
    if (st != PL_STATUS_OK)
        return st;
    lab->n = n;
    size_t got;
    st = idx_read_payload(f, n, &lab->values, &got);
    if (st == PL_STATUS_OK && got < n)
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: truncated: expected %lld labels, got %zu", f->path,
                     (long long)n, got);
    if (st == PL_STATUS_OK)
        st = idx_expect_end(f);
    if (st == PL_STATUS_OK)
        st = check_label_values(f->path, lab);
    return st;
}

/* Each opens, reads and closes one file; on failure the caller still frees
 * whatever buffer was attached (free(NULL) when none). */
static pl_status load_images(const char *path, idx_images *img) {
    idx_file f;
    pl_status st = idx_open(path, &f);
    if (st != PL_STATUS_OK)
        return st;
    st = read_images(&f, img);
    idx_close(&f);
    return st;
}

static pl_status load_labels(const char *path, idx_labels *lab) {
    idx_file f;
    pl_status st = idx_open(path, &f);
    if (st != PL_STATUS_OK)
        return st;
    st = read_labels(&f, lab);
    idx_close(&f);
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
