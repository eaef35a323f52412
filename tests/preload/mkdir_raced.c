/* LD_PRELOAD shim: every mkdir() of a path ending in "-raced" creates the
 * folder and then fails with EEXIST, as it does for the slower of two ranks
 * that create the same --checkpoint-dir at the same moment. It makes that
 * race deterministic for test_cli_checkpoint.sh. Other paths go straight
 * to the C library's mkdir. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int mkdir(const char *path, mode_t mode) {
    int (*real_mkdir)(const char *, mode_t) =
        (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    if (!real_mkdir) {
        errno = ENOSYS;
        return -1;
    }
    int rc = real_mkdir(path, mode);
    size_t n = strlen(path);
    if (rc == 0 && n >= 6 && strcmp(path + n - 6, "-raced") == 0) {
        errno = EEXIST; /* made, but "by someone else" */
        return -1;
    }
    return rc;
}
