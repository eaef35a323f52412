/* CRC32C of a whole file (ISA-L's crc32_iscsi, the Castagnoli polynomial
 * that iSCSI, ext4 and TFRecord use): what a checkpoint records for each of
 * its files so that a bit flip or a zeroed block is caught on load, which a
 * format check alone cannot see (any bit pattern is some float). */
#ifndef PL_UTIL_FILE_CRC_H
#define PL_UTIL_FILE_CRC_H

#include <stdint.h>

/* The CRC32C and size of file `path` (read through once); 0, or an errno
 * value when the file cannot be opened (*why, when `why` is not NULL,
 * then says what is wrong) or read (*why NULL). Only a regular file is read (opened through
 * util/regular_file: ENODEV for a FIFO, which would block the reader, or
 * another kind of file). */
int pl_file_crc32c(const char *path, uint32_t *crc, uint64_t *bytes, const char **why);

#endif
