/* SentencePiece through its command-line tools (see tokenizer.h). */
#define _POSIX_C_SOURCE 200809L /* fork/exec, poll, also under -std=c11 */

#include "tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* Generous bounds on what the tools may print: a vocabulary of 16 Mi
 * pieces, a text of 1 Mi tokens of (rarely) long pieces. */
#define MAX_OUTPUT ((size_t)1 << 30)

typedef struct growing {
    char *data;
    size_t len, cap;
} growing;

static bool grow(growing *g, size_t extra) {
    if (g->cap - g->len > extra) return true;
    size_t cap = g->cap ? g->cap : 65536;
    while (cap - g->len <= extra) cap *= 2;
    if (cap > MAX_OUTPUT + 1) return false;
    char *p = realloc(g->data, cap);
    if (!p) return false;
    g->data = p;
    g->cap = cap;
    return true;
}

/* Runs argv[0] (from PATH) with `in` on its standard input and its
 * standard output into *out (NUL-terminated); stderr is ours, so the
 * tool's own messages reach the user. Input and output are pumped
 * together (poll), so that neither pipe can fill and stall the other. */
static int run_tool(char *const argv[], const char *in, size_t in_len, growing *out) {
    int to[2], from[2];
    if (pipe(to) != 0) goto pipe_failed;
    if (pipe(from) != 0) {
        close(to[0]);
        close(to[1]);
        goto pipe_failed;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        cli_error("--tokenizer: cannot start %s: %s", argv[0], strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    if (pid == 0) {
        dup2(to[0], STDIN_FILENO);
        dup2(from[1], STDOUT_FILENO);
        close(to[0]), close(to[1]), close(from[0]), close(from[1]);
        execvp(argv[0], argv);
        fprintf(stderr, "%s: --tokenizer: cannot run %s: %s (Debian: apt-get install "
                "sentencepiece)\n", CLI_PROGRAM, argv[0], strerror(errno));
        _exit(127);
    }
    close(to[0]);
    close(from[1]);
    /* Non-blocking: a write takes what fits and the loop reads meanwhile. */
    fcntl(to[1], F_SETFL, fcntl(to[1], F_GETFL) | O_NONBLOCK);
    /* A tool that exits early must not kill us with SIGPIPE. */
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    size_t sent = 0;
    bool ok = true;
    int wfd = to[1];
    if (in_len == 0) {
        close(wfd);
        wfd = -1;
    }
    for (;;) {
        struct pollfd p[2] = {{.fd = from[0], .events = POLLIN}, {.fd = wfd, .events = POLLOUT}};
        if (poll(p, wfd >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR) continue;
            ok = false;
            break;
        }
        if (wfd >= 0 && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t k = write(wfd, in + sent, in_len - sent);
            if (k > 0) sent += (size_t)k;
            if (k < 0 && errno != EINTR && errno != EAGAIN) sent = in_len; /* it stopped reading */
            if (sent == in_len) {
                close(wfd);
                wfd = -1;
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!grow(out, 65536)) {
                ok = false;
                break;
            }
            ssize_t k = read(from[0], out->data + out->len, out->cap - out->len - 1);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            out->len += (size_t)k;
        }
    }
    if (wfd >= 0) close(wfd);
    close(from[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    signal(SIGPIPE, old);
    if (out->data) out->data[out->len] = '\0';
    if (!ok) {
        cli_error("--tokenizer: %s printed more than expected, or out of memory", argv[0]);
        return CLI_EXIT_FAILURE;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        cli_error("--tokenizer: %s failed (exit status %d)", argv[0],
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return CLI_EXIT_FAILURE;
    }
    return CLI_EXIT_OK;
pipe_failed:
    cli_error("--tokenizer: cannot make a pipe: %s", strerror(errno));
    return CLI_EXIT_FAILURE;
}

/* "--model=PATH", malloc'd. */
static char *model_arg(const char *model) {
    size_t n = strlen(model) + sizeof "--model=";
    char *a = malloc(n);
    if (a) snprintf(a, n, "--model=%s", model);
    return a;
}

int cli_tokenizer_open(const char *model, cli_tokenizer *t) {
    *t = (cli_tokenizer){.model = model, .vocab = 0, .newline = -1};
    if (access(model, R_OK) != 0) {
        cli_error("--tokenizer: cannot read '%s': %s", model, strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    char *m = model_arg(model);
    growing out = {0};
    char *argv[] = {"spm_export_vocab", m, "--output_format=vocab", NULL};
    int rc = m ? run_tool(argv, NULL, 0, &out) : CLI_EXIT_FAILURE;
    /* One "piece\tscore" line per id, in id order. */
    for (char *line = out.data; rc == CLI_EXIT_OK && line && *line;) {
        char *end = strchr(line, '\n');
        if (strncmp(line, "<0x0A>\t", 7) == 0) t->newline = t->vocab;
        t->vocab++;
        line = end ? end + 1 : NULL;
    }
    if (rc == CLI_EXIT_OK && t->vocab == 0) {
        cli_error("--tokenizer: '%s' has no pieces (not a SentencePiece model?)", model);
        rc = CLI_EXIT_FAILURE;
    }
    free(out.data);
    free(m);
    return rc;
}

int cli_tokenizer_encode(const cli_tokenizer *t, const char *text, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    if (strchr(text, '\n') && t->newline < 0) {
        cli_error("--prompt: has a line feed, which '%s' has no piece for (<0x0A>)", t->model);
        return CLI_EXIT_FAILURE;
    }
    char *m = model_arg(t->model);
    growing out = {0};
    char *argv[] = {"spm_encode", m, "--output_format=id", NULL};
    /* spm_encode reads lines: the last needs its line feed, which is not
     * the text's (unless the text ends with one: then an empty line). */
    size_t len = strlen(text);
    char *in = malloc(len + 2);
    int rc = m && in ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
    if (rc == CLI_EXIT_OK) {
        memcpy(in, text, len);
        in[len] = '\n';
        rc = run_tool(argv, in, len + 1, &out);
    }
    /* Lines of ids back, joined with <0x0A>: at most one id per byte of
     * output. */
    int32_t *v = rc == CLI_EXIT_OK ? malloc((out.len + 1) * sizeof *v) : NULL;
    if (rc == CLI_EXIT_OK && !v) rc = CLI_EXIT_FAILURE;
    size_t k = 0;
    bool first_line = true;
    for (char *p = out.data; rc == CLI_EXIT_OK && p && *p;) {
        if (!first_line) v[k++] = (int32_t)t->newline;
        first_line = false;
        char *end = strchr(p, '\n');
        if (end) *end = '\0';
        for (char *q = p; *q;) {
            char *after;
            errno = 0;
            long long id = strtoll(q, &after, 10);
            if (after == q) break;
            if (errno || id < 0 || id >= t->vocab) {
                cli_error("--tokenizer: spm_encode printed id '%.20s', outside [0, %" PRId64 ")",
                          q, t->vocab);
                rc = CLI_EXIT_FAILURE;
                break;
            }
            v[k++] = (int32_t)id;
            q = after;
        }
        p = end ? end + 1 : NULL;
    }
    if (rc == CLI_EXIT_OK) {
        *ids = v;
        *n = k;
    } else {
        free(v);
        if (!m || !in) cli_error("out of memory");
    }
    free(in);
    free(out.data);
    free(m);
    return rc;
}

int cli_tokenizer_decode(const cli_tokenizer *t, const int32_t *ids, size_t n, char **text,
                         size_t *len) {
    *text = NULL;
    *len = 0;
    growing in = {0}, out = {0};
    char *m = model_arg(t->model);
    int rc = m ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
    /* One line of ids: spm_decode prints its text and a line feed, which
     * is not the text's. */
    for (size_t i = 0; rc == CLI_EXIT_OK && i < n; i++) {
        if (!grow(&in, 16)) rc = CLI_EXIT_FAILURE;
        else in.len += (size_t)snprintf(in.data + in.len, 16, i ? " %" PRId32 : "%" PRId32,
                                        ids[i]);
    }
    if (rc == CLI_EXIT_OK && !grow(&in, 2)) rc = CLI_EXIT_FAILURE;
    if (rc != CLI_EXIT_OK) cli_error("out of memory");
    if (rc == CLI_EXIT_OK) {
        in.data[in.len++] = '\n';
        char *argv[] = {"spm_decode", m, "--input_format=id", NULL};
        rc = run_tool(argv, in.data, in.len, &out);
    }
    if (rc == CLI_EXIT_OK) {
        if (!out.data && !grow(&out, 1)) rc = CLI_EXIT_FAILURE;
    }
    if (rc == CLI_EXIT_OK) {
        if (out.len > 0 && out.data[out.len - 1] == '\n') out.data[--out.len] = '\0';
        out.data[out.len] = '\0';
        *text = out.data;
        *len = out.len;
    } else {
        free(out.data);
    }
    free(in.data);
    free(m);
    return rc;
}
