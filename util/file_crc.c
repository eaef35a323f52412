/* CRC32C of a whole file (see file_crc.h). */
#include "util/file_crc.h"

#include <errno.h>
#include <fcntl.h>
#include <isa-l/crc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/regular_file.h"

int pl_file_crc32c(const char *path, uint32_t *crc, uint64_t *bytes, const char **why) {
    const char *unused;
    if (!why) why = &unused;
    int fd = pl_open_regular(path, 0, why);
    if (fd < 0) return errno == EISDIR || errno == EINVAL ? ENODEV : errno;
    int err = 0;
    enum { BLOCK = 1 << 20 };
    unsigned char *buf = malloc(BLOCK);
    if (!buf) {
        close(fd);
        return ENOMEM;
    }
    /* Standard CRC32C: initial value and final xor all ones (ISA-L's
     * function leaves both to the caller so that blocks chain). */
    uint32_t c = 0xffffffffu;
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, BLOCK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            err = errno;
            *why = NULL; /* opened: a read error, which err says */
            break;
        }
        if (n == 0) break;
        c = crc32_iscsi(buf, (int)n, c);
        total += (uint64_t)n;
    }
    free(buf);
    close(fd);
    if (!err) {
        *crc = ~c;
        *bytes = total;
    }
    return err;
}
