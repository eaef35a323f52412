/* What the fuzz harnesses of tests/fuzz share.
 *
 * Each harness is one file with a libFuzzer entry point
 * (LLVMFuzzerTestOneInput) plus the four hooks below. It is linked either
 * with libFuzzer (cmake -DPLEIADES_FUZZ=ON, clang: scripts/fuzz) or with
 * replay_main.c, which runs the entry point once over every file it is
 * given: the CTest tests replay the generated seeds and the saved crash
 * and regression inputs (tests/fuzz/crashes/<harness>/) that way.
 *
 * Both builds take `--make-seeds DIR` (handled in LLVMFuzzerInitialize):
 * the harness writes its seed corpus into DIR, then exits when nothing
 * else is on the command line, or goes on (replaying, or fuzzing) with the
 * remaining arguments. Seeds are generated, never stored in git. */
#ifndef PL_TESTS_FUZZ_COMMON_H
#define PL_TESTS_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------ provided by a harness */

/* Its name ("safetensors"): scratch directory and messages. */
extern const char fuzz_name[];

/* Once before the first input (and before --make-seeds): e.g. start
 * StarPU and build the engines inputs are loaded into. */
void fuzz_setup(void);

/* Releases what fuzz_setup made (the replay program calls it at the end,
 * so that a leak checker sees only the inputs' leaks). */
void fuzz_teardown(void);

/* Writes the seed corpus into the existing directory `dir` (fuzz_seed_put);
 * returns the number of files written. */
int fuzz_make_seeds(const char *dir);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---------------------------------------------------- fuzz_common.c */

int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Prints "fuzz <name>: <message>" and aborts: for failures of the
 * harness's own environment (a full disk), and for broken invariants,
 * which the fuzzer then reports as findings. */
void fuzz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* A directory of this process's own under $TMPDIR (or /tmp), created on
 * first use and removed at exit. */
const char *fuzz_scratch(void);

/* out = "<scratch>/<name>". */
void fuzz_scratch_path(char *out, size_t size, const char *name);

/* Writes `size` bytes to `path` (created or truncated); dies on failure. */
void fuzz_write_file(const char *path, const void *data, size_t size);

/* Writes one seed "<dir>/<name>" and counts it in *count. */
void fuzz_seed_put(const char *dir, const char *name, const void *data,
                   size_t size, int *count);

/* The environment the project's tests run StarPU in (quiet, unbound, one
 * CPU worker, a fresh STARPU_HOME in the scratch directory); call before
 * starting a runtime. */
void fuzz_starpu_env(void);

/* Runs `fn` with stdout sent to /dev/null: commands that print reports
 * (trace-summary) stay quiet, while stderr still carries the sanitizers'
 * findings. */
int fuzz_run_silenced(int (*fn)(void *), void *arg);

/* A tiny classifier (5 inputs, a ReLU layer of 3, 4 classes, seed 11) for
 * harnesses that load files into an engine; dies if it cannot be built. */
struct pl_graph;
struct pl_graph *fuzz_tiny_mlp(void);

/* Little helpers for carving parameters out of an input. */
typedef struct fuzz_reader {
    const uint8_t *data;
    size_t size;
} fuzz_reader;

/* The next byte (0 once the input is used up). */
uint8_t fuzz_byte(fuzz_reader *r);
/* The next 2/8 bytes, little-endian (missing bytes read as 0). */
uint16_t fuzz_u16(fuzz_reader *r);
uint64_t fuzz_u64(fuzz_reader *r);

#endif
