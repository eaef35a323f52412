/* CRC32C of a whole file (ISA-L's crc32_iscsi, the Castagnoli polynomial
 * that iSCSI, ext4 and TFRecord use): what a checkpoint records for each of
 * its files so that a bit flip or a zeroed block is caught on load, which a
 * format check alone cannot see (any bit pattern is some float). */
#ifndef PL_UTIL_FILE_CRC_H
#define PL_UTIL_FILE_CRC_H

#include <stdint.h>

/* The CRC32C and size of file `path` (read through once); 0, or an errno
 * value when the file cannot be opened or read. Only a regular file is
 * read (ENODEV otherwise: a FIFO would block the reader). */
int pl_file_crc32c(const char *path, uint32_t *crc, uint64_t *bytes);

#endif
