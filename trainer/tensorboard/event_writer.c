/* TensorBoard event files: Events serialised by protobuf-c (event.pb-c.h,
 * generated at build time from event.proto) in TFRecord framing with
 * ISA-L's CRC32C. See event_writer.h. */
#include "trainer/tensorboard/event_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "event.pb-c.h"
#include "util/error.h"

/* A writer flushes on its own once this long has passed since the last. */
#define PL_TB_AUTO_FLUSH_SECONDS 5.0

struct pl_tb_writer {
    FILE *f;
    char *path;
    uint8_t *buf; /* serialised Event */
    size_t cap;
    double last_flush; /* CLOCK_MONOTONIC seconds */
    pl_status failed;  /* the first write error: later calls repeat it */
};

static double now_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CRC32C (Castagnoli) as TFRecord masks it. */
static uint32_t masked_crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = ~crc32_iscsi((unsigned char *)p, (int)n, 0xffffffffu);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* *sb for `p`, made a folder first if it does not exist. */
static bool stat_or_mkdir(const char *p, struct stat *sb) {
    if (stat(p, sb) == 0) return true;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return false;
    return stat(p, sb) == 0; /* made now, or by someone else meanwhile */
}

/* mkdir -p: every missing folder of `dir`, parents first. */
static pl_status make_dirs(const char *dir) {
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "TensorBoard log directory '%s': out of memory", dir);
    memcpy(p, dir, n + 1);
    pl_status st = PL_STATUS_OK;
    for (size_t i = 1; i <= n && st == PL_STATUS_OK; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        if (p[i - 1] == '/') continue; /* "a//b", or a trailing '/' */
        char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (!stat_or_mkdir(p, &sb))
            st = pl_fail(PL_STATUS_IO_ERROR, "TensorBoard log directory '%s': cannot create '%s': %s",
                         dir, p, strerror(errno));
        else if (!S_ISDIR(sb.st_mode))
            st = pl_fail(PL_STATUS_IO_ERROR,
                         "TensorBoard log directory '%s': '%s' exists and is not a directory", dir, p);
        p[i] = c;
    }
    free(p);
    return st;
}

/* One TFRecord holding `ev`. */
static pl_status write_event(pl_tb_writer *w, const Tensorflow__Event *ev) {
    if (w->failed != PL_STATUS_OK)
        return pl_fail(w->failed, "TensorBoard: '%s' failed earlier: no more events written", w->path);
    size_t n = tensorflow__event__get_packed_size(ev);
    if (n > INT_MAX) /* ISA-L's length is an int; a tag cannot be this long */
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "TensorBoard: an event of %zu bytes for '%s'", n, w->path);
    if (n > w->cap) {
        uint8_t *b = realloc(w->buf, n);
        if (!b) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "TensorBoard: out of memory writing '%s'", w->path);
        w->buf = b;
        w->cap = n;
    }
    tensorflow__event__pack(ev, w->buf);
    uint8_t head[12], tail[4];
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)n >> (8 * i));
    put_le32(head + 8, masked_crc32c(head, 8));
    put_le32(tail, masked_crc32c(w->buf, n));
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head ||
        (n && fwrite(w->buf, 1, n, w->f) != n) || fwrite(tail, 1, sizeof tail, w->f) != sizeof tail) {
        w->failed = PL_STATUS_IO_ERROR;
        return pl_fail(PL_STATUS_IO_ERROR, "TensorBoard: cannot write '%s': %s", w->path, strerror(errno));
    }
    return PL_STATUS_OK;
}

pl_status pl_tb_writer_flush(pl_tb_writer *w) {
    if (!w) return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_tb_writer_flush: NULL writer");
    if (w->failed != PL_STATUS_OK)
        return pl_fail(w->failed, "TensorBoard: '%s' failed earlier: no more events written", w->path);
    w->last_flush = now_seconds(CLOCK_MONOTONIC);
    if (fflush(w->f) != 0) {
        w->failed = PL_STATUS_IO_ERROR;
        return pl_fail(PL_STATUS_IO_ERROR, "TensorBoard: cannot write '%s': %s", w->path, strerror(errno));
    }
    return PL_STATUS_OK;
}

pl_status pl_tb_writer_scalar(pl_tb_writer *w, const char *tag, int64_t step, double value) {
    if (!w || !tag || !*tag)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_tb_writer_scalar: NULL writer or empty tag");
    Tensorflow__Summary__Value v = TENSORFLOW__SUMMARY__VALUE__INIT;
    v.tag = (char *)tag;
    v.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)value;
    Tensorflow__Summary__Value *vs[1] = {&v};
    Tensorflow__Summary s = TENSORFLOW__SUMMARY__INIT;
    s.n_value = 1;
    s.value = vs;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = now_seconds(CLOCK_REALTIME);
    ev.step = step;
    ev.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    ev.summary = &s;
    pl_status st = write_event(w, &ev);
    if (st == PL_STATUS_OK && now_seconds(CLOCK_MONOTONIC) - w->last_flush >= PL_TB_AUTO_FLUSH_SECONDS)
        st = pl_tb_writer_flush(w);
    return st;
}

pl_status pl_tb_writer_close(pl_tb_writer *w) {
    if (!w) return PL_STATUS_OK;
    pl_status st = w->failed;
    if (st != PL_STATUS_OK)
        pl_fail(st, "TensorBoard: '%s' failed earlier: events after the failure are missing", w->path);
    if (fclose(w->f) != 0 && st == PL_STATUS_OK)
        st = pl_fail(PL_STATUS_IO_ERROR, "TensorBoard: cannot write '%s': %s", w->path, strerror(errno));
    free(w->buf);
    free(w->path);
    free(w);
    return st;
}

const char *pl_tb_writer_path(const pl_tb_writer *w) { return w ? w->path : NULL; }

pl_tb_writer *pl_tb_writer_open(const char *log_dir) {
    if (!log_dir || !*log_dir) {
        pl_fail(PL_STATUS_INVALID_ARGUMENT, "TensorBoard: NULL or empty log directory");
        return NULL;
    }
    if (make_dirs(log_dir) != PL_STATUS_OK) return NULL;
    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    pl_tb_writer *w = calloc(1, sizeof *w);
    size_t cap = strlen(log_dir) + strlen(host) + 96;
    if (w) w->path = malloc(cap);
    if (!w || !w->path) {
        free(w);
        pl_fail(PL_STATUS_OUT_OF_MEMORY, "TensorBoard: out of memory opening a file in '%s'", log_dir);
        return NULL;
    }
    /* A second writer of this process in the same second (two runs into one
     * folder) gets ".1", ".2", ...: TensorBoard reads every *tfevents* file. */
    long long secs = (long long)time(NULL);
    int fd = -1;
    for (int k = 0; k < 1000 && fd < 0; k++) {
        int len = snprintf(w->path, cap, "%s/events.out.tfevents.%lld.%s.%ld", log_dir, secs, host, (long)getpid());
        if (k > 0) snprintf(w->path + len, cap - (size_t)len, ".%d", k);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd >= 0 && !(w->f = fdopen(fd, "wb"))) close(fd);
    if (!w->f) {
        pl_fail(PL_STATUS_IO_ERROR, "TensorBoard: cannot create '%s': %s", w->path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    w->last_flush = now_seconds(CLOCK_MONOTONIC);
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.wall_time = now_seconds(CLOCK_REALTIME);
    ev.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    ev.file_version = (char *)"brain.Event:2";
    /* Flushed at once: TensorBoard sees the run from its start. */
    if (write_event(w, &ev) != PL_STATUS_OK || pl_tb_writer_flush(w) != PL_STATUS_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pl_last_error());
        pl_tb_writer_close(w);
        pl_fail(PL_STATUS_IO_ERROR, "%s", msg);
        return NULL;
    }
    return w;
}
