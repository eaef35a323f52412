/*
 * pleiades.h — the public C API of Pleiades: neural-network training as
 * StarPU task graphs.
 *
 * A model is a graph of tensors and ops. An engine turns each training
 * iteration of that graph into StarPU tasks (forward, input-gradient and
 * weight-gradient backward, loss, optimizer update) and runs them on the
 * StarPU workers. Model state is packed into chunks (contiguous StarPU
 * vector handles) that the optimizer updates as a whole.
 *
 * Usage:
 *
 *   pl_runtime_options ro = pl_runtime_options_default();
 *   pl_runtime_t *rt = pl_runtime_new(&ro);              // starts StarPU
 *   pl_graph_t *g = pl_graph_new(42);                      // seed for init
 *   int64_t in_shape[1] = {784};
 *   pl_tensor_t *x = pl_graph_input(g, "x", PL_DTYPE_F32, 1, in_shape);
 *   pl_tensor_t *y = pl_graph_input(g, "y", PL_DTYPE_I32, 0, NULL);
 *   pl_tensor_t *h = pl_relu(g, pl_linear(g, x, 1024, "fc1"));
 *   pl_tensor_t *logits = pl_linear(g, h, 10, "fc2");
 *   pl_tensor_t *loss = pl_cross_entropy(g, logits, y);
 *   pl_graph_set_loss(g, loss);
 *   pl_engine_options eo = pl_engine_options_default();
 *   eo.batch_size = 256;
 *   pl_engine_t *e = pl_engine_new(rt, g, &eo);
 *   const void *data[2] = {images, labels};
 *   pl_batch b = {.size = 256, .data = data};
 *   pl_step_result r;
 *   pl_engine_train_step(e, &b, &r);                       // r.loss
 *   pl_engine_free(e); pl_graph_free(g); pl_runtime_free(rt);
 *
 * The API is split by topic; this header includes them all:
 *   pleiades/status.h      version, status codes, pl_last_error()
 *   pleiades/runtime.h     StarPU's lifetime, workers, memory tiers
 *   pleiades/graph.h       graphs, tensors, introspection
 *   pleiades/models.h      whole models of ops: the GPT builder
 *   pleiades/op.h          the op interface: user ops, pl_gradcheck
 *   pleiades/ops.h         the built-in ops: builders, definitions, attributes
 *   pleiades/placement.h   placement policies and their knobs
 *   pleiades/data.h        batches, datasets, loaders
 *   pleiades/lr_scheduler.h learning-rate schedules (Colossal-AI's names)
 *   pleiades/schedule.h    pipeline schedules as per-stage work-item lists
 *   pleiades/engine.h      engines, optimizers, schedules, traces
 *   pleiades/checkpoint.h  safetensors weights, full checkpoints
 *   pleiades/trainer.h     the trainer, its hooks and data sources
 *
 * Errors: functions return a pl_status (or NULL for constructors); the
 * message of the last failure on the calling thread is pl_last_error().
 * Thread safety: build a graph and drive an engine from one thread at a
 * time; distinct graphs and engines may be used from distinct threads.
 */
#ifndef PLEIADES_H
#define PLEIADES_H

#include "pleiades/status.h"
#include "pleiades/runtime.h"
#include "pleiades/graph.h"
#include "pleiades/models.h"
#include "pleiades/op.h"
#include "pleiades/ops.h"
#include "pleiades/placement.h"
#include "pleiades/data.h"
#include "pleiades/lr_scheduler.h"
#include "pleiades/schedule.h"
#include "pleiades/engine.h"
#include "pleiades/checkpoint.h"
#include "pleiades/trainer.h"

#endif /* PLEIADES_H */
