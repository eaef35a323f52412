/* The batches a token file yields, for test_data_tokens.py: loads PATH
 * with pl_dataset_tokens and prints, for each rank of WORLD, the first
 * BATCHES batches of a pl_text_source (B windows of T tokens, SEED, the
 * rank's shard), one line per window:
 *
 *   rank batch row : t_0 ... t_{T-1} : target_0 ... target_{T-1}
 *
 * A refused file prints the library's error on stderr and exits 1. Public
 * API only, as a user's loader would be.
 *
 *   tokens_dump PATH FORMAT VOCAB B T SEED BATCHES WORLD */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pleiades.h"

static int64_t arg(const char *s) { return strtoll(s, NULL, 10); }

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: tokens_dump PATH FORMAT VOCAB B T SEED BATCHES WORLD\n");
        return 2;
    }
    pl_token_format format = strcmp(argv[2], "llmc") == 0      ? PL_TOKENS_LLMC
                             : strcmp(argv[2], "raw-u16") == 0 ? PL_TOKENS_RAW_U16
                                                               : PL_TOKENS_RAW_U32;
    int64_t vocab = arg(argv[3]), B = arg(argv[4]), T = arg(argv[5]);
    uint64_t seed = (uint64_t)arg(argv[6]);
    int64_t batches = arg(argv[7]);
    int world = (int)arg(argv[8]);
    pl_dataset_t *ds = pl_dataset_tokens(argv[1], format, vocab);
    if (!ds) {
        fprintf(stderr, "%s\n", pl_last_error());
        return 1;
    }
    printf("size %lld\n", (long long)pl_dataset_size(ds));
    int rc = 0;
    for (int rank = 0; rank < world && rc == 0; rank++) {
        pl_text_source_t *s = pl_text_source_new(ds, B, T, seed, batches, false);
        if (!s || pl_text_source_set_shard(s, rank, world) != PL_STATUS_OK) {
            fprintf(stderr, "%s\n", pl_last_error());
            pl_text_source_free(s);
            rc = 1;
            break;
        }
        pl_data_source src = pl_text_source(s);
        src.start_epoch(src.user_data, 0);
        pl_batch b;
        for (int64_t i = 0; src.next(src.user_data, &b) == 1; i++)
            for (int64_t r = 0; r < b.size; r++) {
                const int32_t *tok = (const int32_t *)b.data[0] + r * T;
                const int32_t *tgt = (const int32_t *)b.data[1] + r * T;
                printf("%d %lld %lld :", rank, (long long)i, (long long)r);
                for (int64_t t = 0; t < T; t++) printf(" %d", tok[t]);
                printf(" :");
                for (int64_t t = 0; t < T; t++) printf(" %d", tgt[t]);
                printf("\n");
            }
        pl_text_source_free(s);
    }
    pl_dataset_free(ds);
    return rc;
}
