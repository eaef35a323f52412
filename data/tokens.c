/* Pre-tokenized corpora: the token files of llm.c and nanoGPT, memory
 * mapped. Their samples are windows of T + 1 tokens drawn by
 * pl_text_batch exactly as a text split's windows are (data/text.c
 * documents the offsets), so the text source, its data-parallel shards
 * and the CLI treat both alike.
 *
 * Formats (every integer little-endian):
 *   PL_TOKENS_LLMC     llm.c's dev/data .bin files: a header of 256 int32 --
 *                      [0] magic, [1] version, [2] number of tokens, the
 *                      other 253 zero (llm.c writes zeros there) -- then
 *                      the tokens. magic 20240520 with version 1: uint16
 *                      tokens (GPT-2's); magic 20240801 with version 7:
 *                      uint32 tokens (llm.c's LLaMA-3 files), for
 *                      vocabularies over 65536.
 *   PL_TOKENS_RAW_U16  nanoGPT's train.bin/val.bin: bare uint16 tokens.
 *   PL_TOKENS_RAW_U32  bare uint32 tokens.
 *
 * The file is mapped, never read into memory as a whole: a corpus of
 * billions of tokens costs the pages its windows touch. It is still read
 * once through at load, sequentially, because every token is checked
 * against the vocabulary there: a bad token is an error naming the file,
 * its byte offset and its value before training starts, instead of an
 * out-of-range embedding row (or a wrong loss) hours into a run. A file
 * truncated by someone else after the load would fault (SIGBUS) on the
 * missing pages, as with any mapped file; the load itself checks the
 * size it mapped. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "util/error.h"
#include "util/regular_file.h"

static const char *const who = "pl_dataset_tokens";

enum {
    LLMC_HEADER_INTS = 256,
    LLMC_HEADER_BYTES = LLMC_HEADER_INTS * 4,
    LLMC_MAGIC_U16 = 20240520,
    LLMC_VERSION_U16 = 1,
    LLMC_MAGIC_U32 = 20240801,
    LLMC_VERSION_U32 = 7,
    MIN_WINDOW = 2, /* T >= 1 tokens and their targets */
};

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

const char *pl_token_format_name(pl_token_format format) {
    switch (format) {
    case PL_TOKENS_LLMC: return "llmc";
    case PL_TOKENS_RAW_U16: return "raw-u16";
    case PL_TOKENS_RAW_U32: return "raw-u32";
    }
    return "?";
}

/* The llm.c header at `map` (`size` bytes mapped, >= the header): where
 * the tokens start, how wide each is and how many there are, each field
 * checked against the file. */
static pl_status parse_llmc(const uint8_t *map, size_t size, const char *path,
                            size_t *offset, int *width, uint64_t *count) {
    if (size < LLMC_HEADER_BYTES)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %s: %zu bytes, shorter than llm.c's header of %d bytes "
                       "(truncated, or not an llm.c token file: --data-format raw-u16?)",
                       who, path, size, LLMC_HEADER_BYTES);
    int32_t magic = (int32_t)le32(map), version = (int32_t)le32(map + 4);
    int32_t n = (int32_t)le32(map + 8);
    if (magic != LLMC_MAGIC_U16 && magic != LLMC_MAGIC_U32)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %s: byte offset 0: magic %" PRId32 ", expected %d (llm.c, "
                       "uint16 tokens) or %d (uint32 tokens); not an llm.c token file",
                       who, path, magic, LLMC_MAGIC_U16, LLMC_MAGIC_U32);
    int want = magic == LLMC_MAGIC_U16 ? LLMC_VERSION_U16 : LLMC_VERSION_U32;
    if (version != want)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %s: byte offset 4: version %" PRId32 ", expected %d for magic "
                       "%" PRId32, who, path, version, want, magic);
    *width = magic == LLMC_MAGIC_U16 ? 2 : 4;
    if (n < 0)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %s: byte offset 8: token count %" PRId32 " is negative", who,
                       path, n);
    for (int k = 3; k < LLMC_HEADER_INTS; k++) {
        int32_t v = (int32_t)le32(map + 4 * k);
        if (v != 0)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: %s: byte offset %d: header int %d is %" PRId32
                           ", expected 0 (llm.c leaves it zero; a damaged header?)",
                           who, path, 4 * k, k, v);
    }
    /* In 64 bits: n < 2^31 tokens of <= 4 bytes cannot overflow. */
    uint64_t body = (uint64_t)size - LLMC_HEADER_BYTES;
    uint64_t need = (uint64_t)n * (uint64_t)*width;
    if (need != body)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %s: byte offset 8: token count %" PRId32 " needs %" PRIu64
                       " bytes of uint%d tokens after the header, the file has %" PRIu64
                       " (%s)", who, path, n, need, 8 * *width, body,
                       need > body ? "truncated" : "trailing bytes");
    *offset = LLMC_HEADER_BYTES;
    *count = (uint64_t)n;
    return PL_STATUS_OK;
}

/* Every token below `vocab`; the first that is not is the error. */
static pl_status check_tokens(const uint8_t *p, uint64_t count, int width,
                              size_t offset, int64_t vocab, const char *path) {
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *q = p + i * (uint64_t)width;
        uint32_t v = (uint32_t)q[0] | (uint32_t)q[1] << 8;
        if (width == 4) v |= (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        if ((int64_t)v >= vocab)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: %s: byte offset %" PRIu64 " (token index %" PRIu64 "): token %"
                           PRIu32 " is outside the vocabulary [0, %" PRId64 ")",
                           who, path, (uint64_t)offset + i * (uint64_t)width, i, v, vocab);
    }
    return PL_STATUS_OK;
}

/* Maps the open regular file `fd` of `size` bytes and checks it; on
 * success ds holds the map. */
static pl_status map_tokens(pl_dataset_t *ds, int fd, size_t size, pl_token_format format,
                            int64_t vocab, const char *path) {
    if (size == 0)
        return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: %s: empty file, no tokens", who, path);
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot map %zu bytes: %s", who, path,
                       size, strerror(errno));
    ds->map = map;
    ds->map_len = size;
    size_t offset = 0;
    int width = format == PL_TOKENS_RAW_U32 ? 4 : 2;
    uint64_t count = 0;
    pl_status st = PL_STATUS_OK;
    if (format == PL_TOKENS_LLMC) {
        st = parse_llmc(map, size, path, &offset, &width, &count);
    } else if (size % (size_t)width != 0) {
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: %s: %zu bytes is not a whole number of uint%d tokens (%zu "
                     "byte%s left over: truncated, or another format?)",
                     who, path, size, 8 * width, size % (size_t)width,
                     size % (size_t)width == 1 ? "" : "s");
    } else {
        count = size / (size_t)width;
    }
    if (st) return st;
    if (count < MIN_WINDOW)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %s: %" PRIu64 " token%s, too few for a window of %d tokens",
                       who, path, count, count == 1 ? "" : "s", MIN_WINDOW);
    const uint8_t *tokens = (const uint8_t *)map + offset;
    (void)madvise(map, size, MADV_SEQUENTIAL); /* a hint: failure is harmless */
    st = check_tokens(tokens, count, width, offset, vocab, path);
    (void)madvise(map, size, MADV_RANDOM); /* from now on: windows anywhere */
    if (st) return st;
    ds->tokens = tokens;
    ds->token_bytes = width;
    ds->size = (int64_t)count;
    return PL_STATUS_OK;
}

pl_dataset_t *pl_dataset_tokens(const char *path, pl_token_format format, int64_t vocab) {
    if (!path) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: path is NULL", who);
        return NULL;
    }
    if (format != PL_TOKENS_LLMC && format != PL_TOKENS_RAW_U16 &&
        format != PL_TOKENS_RAW_U32) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: %s: format %d is not a pl_token_format",
                who, path, (int)format);
        return NULL;
    }
    /* Tokens become int32 inputs (the embedding's rows). */
    if (vocab < 1 || vocab > INT32_MAX) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "%s: %s: vocabulary %" PRId64
                " outside [1, %d]", who, path, vocab, INT32_MAX);
        return NULL;
    }
    const char *why;
    int fd = pl_open_regular(path, 0, &why);
    if (fd < 0) {
        pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot open: %s", who, path, why);
        return NULL;
    }
    struct stat sb;
    pl_dataset_t *ds = calloc(1, sizeof *ds);
    pl_status st = PL_STATUS_OK;
    if (!ds || !(ds->text_path = strdup(path)))
        st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: %s: out of memory", who, path);
    else if (fstat(fd, &sb) != 0)
        st = pl_fail(PL_STATUS_IO_ERROR, "%s: %s: cannot stat: %s", who, path,
                     strerror(errno));
    else if (sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX ||
             (uint64_t)sb.st_size > (uint64_t)INT64_MAX / 2)
        st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: %s: size %lld cannot be mapped", who,
                     path, (long long)sb.st_size);
    else
        st = map_tokens(ds, fd, (size_t)sb.st_size, format, vocab, path);
    close(fd); /* the map keeps the file */
    if (st) {
        pl_dataset_free(ds);
        return NULL;
    }
    ds->features = 1; /* a sample is one token */
    ds->classes = vocab;
    return ds;
}
