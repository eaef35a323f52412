/* Fuzzes the token-file reader (data/tokens.c): pl_dataset_tokens on the
 * input's file in one of the three formats, then pl_text_batch on what it
 * accepted. An input is
 *
 *   byte 0       the format: PL_TOKENS_LLMC, _RAW_U16, _RAW_U32 (mod 3;
 *                values 3..5 pass 3..5 unreduced, which must be refused)
 *   bytes 1-2    the vocabulary, uint16 (0 must be refused)
 *   byte 3       bit 0: the vocabulary is shifted left by 8 bits (past
 *                65536, for uint32 tokens)
 *   byte 4       B, as a signed byte (<= 0 must be refused)
 *   bytes 5-6    T, a signed 16-bit value modulo 2048 (likewise)
 *   bytes 7-14   the batch seed
 *   bytes 15-22  the batch index (any int64)
 *   the rest     the file
 *
 * Invariants: the file is accepted exactly when this harness's own
 * reading of the format (below, written from the format's description,
 * not from the reader) finds it valid; a refusal names the file and,
 * for a damaged header or token, a byte offset; an accepted file has the
 * expected number of tokens, and a batch succeeds exactly when B > 0 and
 * 0 < T < tokens, and is the windows of the documented formula. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pleiades.h>

#include "fuzz_common.h"
#include "data/dataset.h"
#include "util/random.h"

const char fuzz_name[] = "tokens";

enum { MAX_T = 2048, HEADER = 1024 };

static char file_path[4096];

void fuzz_setup(void) { fuzz_scratch_path(file_path, sizeof file_path, "tokens.bin"); }

void fuzz_teardown(void) {}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t token_at(const uint8_t *p, int width, uint64_t i) {
    p += i * (uint64_t)width;
    return width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : rd32(p);
}

/* The expected reading: the tokens' start, width and count, or false
 * when the file must be refused (*offset_named: the error must name a
 * byte offset). */
static bool expect(const uint8_t *f, size_t n, int format, int64_t vocab, size_t *start,
                   int *width, uint64_t *count, bool *offset_named) {
    *offset_named = false;
    if (format > 2 || vocab < 1) return false;
    *start = 0;
    *width = format == 2 ? 4 : 2;
    if (format == 0) {
        if (n < HEADER) return false;
        *offset_named = true;
        int32_t magic = (int32_t)rd32(f), version = (int32_t)rd32(f + 4);
        int32_t c = (int32_t)rd32(f + 8);
        if (!(magic == 20240520 && version == 1) && !(magic == 20240801 && version == 7))
            return false;
        *width = magic == 20240520 ? 2 : 4;
        for (int k = 3; k < 256; k++)
            if (rd32(f + 4 * k) != 0) return false;
        if (c < 0 || (uint64_t)c * (uint64_t)*width != n - HEADER) return false;
        *start = HEADER;
        *count = (uint64_t)c;
    } else {
        if (n == 0 || n % (size_t)*width) return false;
        *count = n / (size_t)*width;
    }
    *offset_named = false;
    if (*count < 2) return false;
    for (uint64_t i = 0; i < *count; i++)
        if ((int64_t)token_at(f + *start, *width, i) >= vocab) {
            *offset_named = true;
            return false;
        }
    return true;
}

static void check_batch(const pl_dataset_t *ds, const uint8_t *toks, int width, int64_t B,
                        int64_t T, uint64_t seed, int64_t index) {
    size_t n = B > 0 && T > 0 ? (size_t)(B * T) : 1;
    int32_t *tok = malloc(n * sizeof *tok), *tgt = malloc(n * sizeof *tgt);
    if (!tok || !tgt) fuzz_die("out of memory");
    pl_status st = pl_text_batch(ds, B, T, seed, index, tok, tgt);
    bool valid = B > 0 && T > 0 && T < ds->size;
    if (valid != (st == PL_STATUS_OK))
        fuzz_die("pl_text_batch(B %lld, T %lld) on %lld tokens: %s", (long long)B,
                 (long long)T, (long long)ds->size,
                 st == PL_STATUS_OK ? "accepted" : pl_last_error());
    if (st == PL_STATUS_OK) {
        uint64_t state = pl_stream_state(seed, index);
        for (int64_t b = 0; b < B; b++) {
            uint64_t off = pl_random_below(&state, (uint64_t)(ds->size - T));
            for (int64_t t = 0; t < T; t++)
                if (tok[b * T + t] != (int32_t)token_at(toks, width, off + (uint64_t)t) ||
                    tgt[b * T + t] != (int32_t)token_at(toks, width, off + (uint64_t)t + 1))
                    fuzz_die("window %lld at token %" PRIu64 " differs at %lld", (long long)b,
                             off, (long long)t);
        }
    }
    free(tok);
    free(tgt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_reader r = {data, size};
    int format = fuzz_byte(&r) % 6;
    int64_t vocab = fuzz_u16(&r);
    if (fuzz_byte(&r) & 1) vocab <<= 8;
    int64_t B = (int8_t)fuzz_byte(&r);
    int64_t T = (int16_t)fuzz_u16(&r) % MAX_T;
    uint64_t seed = fuzz_u64(&r);
    int64_t index = (int64_t)fuzz_u64(&r);
    fuzz_write_file(file_path, r.data, r.size);
    size_t start = 0;
    int width = 2;
    uint64_t count = 0;
    bool offset_named;
    bool ok = expect(r.data, r.size, format, vocab, &start, &width, &count, &offset_named);
    pl_dataset_t *ds = pl_dataset_tokens(file_path, (pl_token_format)format, vocab);
    if (ok != (ds != NULL))
        fuzz_die("format %d, vocab %lld, %zu bytes: %s, expected %s", format,
                 (long long)vocab, r.size, ds ? "accepted" : pl_last_error(),
                 ok ? "accepted" : "refused");
    if (!ds) {
        if (!strstr(pl_last_error(), file_path))
            fuzz_die("the error does not name the file: %s", pl_last_error());
        if (offset_named && !strstr(pl_last_error(), "byte offset"))
            fuzz_die("the error does not name the byte offset: %s", pl_last_error());
        return 0;
    }
    if (ds->size != (int64_t)count || pl_dataset_features(ds) != 1)
        fuzz_die("%lld tokens, expected %" PRIu64, (long long)ds->size, count);
    check_batch(ds, r.data + start, width, B, T, seed, index);
    pl_dataset_free(ds);
    return 0;
}

/* --------------------------------------------------------------- seeds */

static void put_input(const char *dir, const char *name, uint8_t format, uint32_t vocab,
                      int8_t B, int16_t T, uint64_t index, const uint8_t *file, size_t len,
                      int *count) {
    uint8_t *in = malloc(23 + len);
    if (!in) fuzz_die("out of memory");
    bool shift = vocab > 65535;
    uint32_t v = shift ? vocab >> 8 : vocab;
    in[0] = format;
    in[1] = (uint8_t)v;
    in[2] = (uint8_t)(v >> 8);
    in[3] = shift;
    in[4] = (uint8_t)B;
    in[5] = (uint8_t)T;
    in[6] = (uint8_t)((uint16_t)T >> 8);
    for (int i = 0; i < 8; i++) {
        in[7 + i] = (uint8_t)(UINT64_C(42) >> (8 * i));
        in[15 + i] = (uint8_t)(index >> (8 * i));
    }
    if (len) memcpy(in + 23, file, len);
    fuzz_seed_put(dir, name, in, 23 + len, count);
    free(in);
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* An llm.c file of n tokens (i * 7 mod vocab) of `width` bytes in `f`;
 * its length. */
static size_t llmc_file(uint8_t *f, int n, int width, uint32_t vocab) {
    memset(f, 0, HEADER);
    put32(f, width == 2 ? 20240520 : 20240801);
    put32(f + 4, width == 2 ? 1 : 7);
    put32(f + 8, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        uint32_t t = (uint32_t)i * 7 % vocab;
        uint8_t *p = f + HEADER + i * width;
        if (width == 2) {
            p[0] = (uint8_t)t;
            p[1] = (uint8_t)(t >> 8);
        } else {
            put32(p, t);
        }
    }
    return HEADER + (size_t)n * (size_t)width;
}

int fuzz_make_seeds(const char *dir) {
    int count = 0;
    static uint8_t f[HEADER + 64 * 4];
    size_t n = llmc_file(f, 64, 2, 300);
    put_input(dir, "llmc-u16", 0, 300, 4, 16, 0, f, n, &count);
    put_input(dir, "llmc-u16-small-vocab", 0, 100, 2, 8, 1, f, n, &count);
    put_input(dir, "llmc-u16-raw", 1, 300, 2, 8, 1, f + HEADER, n - HEADER, &count);
    put_input(dir, "llmc-truncated", 0, 300, 2, 8, 0, f, n - 1, &count);
    put_input(dir, "llmc-long-window", 0, 300, 1, 63, 3, f, n, &count);
    put_input(dir, "llmc-too-long-window", 0, 300, 1, 64, 3, f, n, &count);
    put_input(dir, "llmc-bad-B", 0, 300, -1, 8, 0, f, n, &count);
    put_input(dir, "header-only", 0, 300, 1, 1, 0, f, HEADER, &count);
    f[200] = 1; /* a reserved header int */
    put_input(dir, "llmc-reserved", 0, 300, 1, 4, 0, f, n, &count);
    n = llmc_file(f, 64, 4, 70000);
    put_input(dir, "llmc-u32", 0, 70000, 3, 5, 9, f, n, &count);
    put_input(dir, "raw-u32", 2, 70000, 3, 5, 9, f + HEADER, n - HEADER, &count);
    put_input(dir, "raw-u32-odd", 2, 70000, 3, 5, 9, f + HEADER, n - HEADER - 3, &count);
    put_input(dir, "bad-format", 4, 70000, 1, 1, 0, f, n, &count);
    put_input(dir, "empty", 1, 300, 1, 1, 0, f, 0, &count);
    put_input(dir, "vocab-0", 1, 0, 1, 1, 0, f + HEADER, 8, &count);
    return count;
}
