/* TensorBoard event files (internal): scalars as TensorFlow Events
 * (trainer/tensorboard/event.proto, serialised by protobuf-c) in TFRecord
 * framing, the format TensorBoard reads:
 *
 *   uint64 length (little-endian)   uint32 masked CRC32C of those 8 bytes
 *   length bytes of an Event        uint32 masked CRC32C of the Event
 *
 * with mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8. The first
 * Event of a file holds file_version "brain.Event:2".
 *
 *   pl_tb_writer *w = pl_tb_writer_open("runs/mlp");
 *   pl_tb_writer_scalar(w, "train/loss", step, loss);
 *   pl_tb_writer_close(w);
 *
 * Failures report through pl_fail with messages naming the file or folder. */
#ifndef PL_TRAINER_TENSORBOARD_EVENT_WRITER_H
#define PL_TRAINER_TENSORBOARD_EVENT_WRITER_H

#include <stdint.h>

#include "pleiades.h"

typedef struct pl_tb_writer pl_tb_writer;

/* Creates `log_dir` (and its parents) if missing and a new file
 * <log_dir>/events.out.tfevents.<unix seconds>.<hostname>.<pid> in it (with
 * a ".N" suffix when a writer of this process opened one in the same
 * second), then writes the file_version event. NULL on failure
 * (pl_last_error() says why). */
pl_tb_writer *pl_tb_writer_open(const char *log_dir);

/* The file's path (valid until close). */
const char *pl_tb_writer_path(const pl_tb_writer *w);

/* One scalar (stored as a float, as TensorBoard's simple_value is) at
 * `step`, stamped with the current time. Buffered: reaches the file on
 * flush, on close, or with a later scalar once 5 s have passed since the
 * last flush (so a TensorBoard watching the run sees it move). */
pl_status pl_tb_writer_scalar(pl_tb_writer *w, const char *tag, int64_t step,
                              double value);

pl_status pl_tb_writer_flush(pl_tb_writer *w);

/* Flushes, closes and frees (NULL is fine); an error of the final writes
 * is returned, the writer is freed all the same. */
pl_status pl_tb_writer_close(pl_tb_writer *w);

#endif
