/* A SentencePiece model (scripts/tokenize's tokenizer.model) for
 * `pleiades generate --tokenizer`, through Debian's sentencepiece tools run
 * as subprocesses: spm_export_vocab (its pieces), spm_encode (a prompt's
 * ids) and spm_decode (ids to text). Not libsentencepiece: it is C++, and
 * the tools are what scripts/tokenize encodes with, so both sides share
 * one implementation. Lines are joined with the piece of the byte "\n"
 * (<0x0A>), as scripts/tokenize joins them. */
#ifndef PL_CLI_TOKENIZER_H
#define PL_CLI_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct cli_tokenizer {
    const char *model; /* the path, as given */
    int64_t vocab;     /* its pieces */
    int64_t newline;   /* the id of <0x0A>; -1 without one */
} cli_tokenizer;

/* Reads the model's pieces; CLI_EXIT_OK, or CLI_EXIT_FAILURE after saying
 * why (naming --tokenizer and the file). */
int cli_tokenizer_open(const char *model, cli_tokenizer *t);

/* The ids of `text` (malloc'd into *ids, *n of them). */
int cli_tokenizer_encode(const cli_tokenizer *t, const char *text, int32_t **ids, size_t *n);

/* The text of ids[0..n) (malloc'd, *len bytes, NUL-terminated too). */
int cli_tokenizer_decode(const cli_tokenizer *t, const int32_t *ids, size_t n, char **text,
                         size_t *len);

#endif
