/* Turning one op of one tile into StarPU tasks, for any op definition
 * (pleiades/op.h): the engine knows no op by name. Forward: one task per
 * op (the loss op of a training step may compute its input's gradient in
 * the same task, loss_forward). Backward: one task per input that needs a
 * gradient (B) and, for ops with parameters, one weight-gradient task (W)
 * that nothing downstream in the backward pass waits for, so it can fill
 * idle time.
 *
 * Each definition gets StarPU codelets whose CPU (and CUDA) function is a
 * trampoline: it unpacks the task's buffers into a pl_op_call and calls
 * the op's kernel. A task carries exactly the buffers its kernel reads
 * (backward_*_reads), with the access modes that implies.
 *
 * Gradients of activations are overwritten by the first task that writes
 * them in a step and accumulated by later ones (a tensor used by several
 * ops); parameter gradients are overwritten by the first W task after an
 * optimizer step and accumulated after that (tiles, gradient accumulation).
 * StarPU's sequential consistency orders the accumulating tasks in
 * submission order, so sums are formed in the same order on every run. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* First: it brings in starpu.h, whose starpu_config.h defines
 * STARPU_USE_CUDA (tested just below). */
#include "engine/activation_memory.h"
#include "engine/data_parallel.h"
#include "engine/engine_internal.h"
#include "engine/hooks.h"
#include "engine/op_tasks.h"
#include "engine/pipeline.h"
#include "engine/recompute.h"
#include "engine/task_fusion.h"
#include "engine/tied_grads.h"

#ifdef STARPU_USE_CUDA
#include <starpu_cublas_v2.h>
#endif

#include "graph/error.h"
#include "util/half.h"
#include "util/random.h"
#if defined(STARPU_USE_CUDA) && defined(PL_WITH_CUDA)
#include "util/half_cuda.h"
#define PL_HALF_ON_CUDA 1 /* the 16-bit trampoline also runs on GPUs */
#endif

enum { K_FORWARD, K_LOSS, K_INPUT, K_WEIGHT };

#define MAX_BUFS (2 * PL_OP_MAX_PARAMS + PL_OP_MAX_INPUTS + 5 + PL_RECOMPUTE_MAX_GATES)

/* A task's argument block: which buffer is which, and the per-task values
 * of the call. Buffer indices are -1 when absent. */
typedef struct op_task_args {
    pl_op_exec *x;
    int kernel, input;
    int64_t samples;
    float scale;
    bool accumulate;
    bool accumulate_param[PL_OP_MAX_PARAMS];
    bool training;
    bool rerun; /* a recomputation's forward (phase R) */
    int tile;
    uint64_t seed;
    int64_t sample_offset;
    signed char b_out, b_saved, b_invalid, b_dout, b_dinput;
    signed char b_in[PL_OP_MAX_INPUTS], b_param[PL_OP_MAX_PARAMS],
        b_dparam[PL_OP_MAX_PARAMS];
    int64_t off[MAX_BUFS]; /* element offsets (parameters in a whole chunk) */
} op_task_args;

starpu_data_handle_t pl_param_handle(pl_engine_t *e, const pl_tensor_t *p) {
    return e->chunks.chunks[e->trt[p->id].chunk].h_param;
}

size_t pl_param_value_offset(const pl_engine_t *e, const pl_tensor_t *p) {
    const pl_tensor_rt *r = &e->trt[p->id];
    return e->chunks.chunks[r->chunk].offsets[r->slot];
}

starpu_data_handle_t pl_param_grad_handle(pl_engine_t *e, const pl_tensor_t *p) {
    const pl_tensor_rt *r = &e->trt[p->id];
    const pl_chunk *c = &e->chunks.chunks[r->chunk];
    return e->chunks.managed ? c->h_grad : c->grad_children[r->slot];
}

size_t pl_param_grad_offset(const pl_engine_t *e, const pl_tensor_t *p) {
    return e->chunks.managed ? pl_param_value_offset(e, p) : 0;
}

/* ------------------------------------------------------------ trampolines */

static const pl_op_kernels *kernels_of(const pl_op_def *d, int kernel, int input) {
    return kernel == K_FORWARD ? &d->forward
           : kernel == K_LOSS  ? &d->loss_forward
           : kernel == K_INPUT ? &d->backward_input[input]
                               : &d->backward_weight;
}

static const char *kernel_label(int kernel) {
    static const char *names[] = {"forward", "loss_forward", "backward_input",
                                  "backward_weight"};
    return names[kernel];
}

static void *buf_ptr(void *buffers[], int i, const op_task_args *a, size_t elem) {
    if (i < 0) return NULL;
    return (char *)STARPU_VECTOR_GET_PTR(buffers[i]) + (size_t)a->off[i] * elem;
}

/* ------------------------------------------------------- 16-bit operands */

/* Each worker thread's fp32 scratch for the widened operands of its task
 * (grown as needed, freed when the thread ends). */
typedef struct scratch_buf {
    float *p;
    size_t cap;
} scratch_buf;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *s) {
    scratch_buf *b = s;
    pl_act_mem_scratch(-(int64_t)(b->cap * sizeof *b->p));
    free(b->p);
    free(b);
}

static void scratch_key_init(void) { pthread_key_create(&scratch_key, scratch_free); }

static float *scratch_get(size_t floats) {
    pthread_once(&scratch_once, scratch_key_init);
    scratch_buf *b = pthread_getspecific(scratch_key);
    if (!b) {
        if (!(b = calloc(1, sizeof *b))) return NULL;
        pthread_setspecific(scratch_key, b);
    }
    if (b->cap < floats) {
        float *p = malloc(floats * sizeof *p);
        if (!p) return NULL;
        free(b->p);
        pl_act_mem_scratch((int64_t)((floats - b->cap) * sizeof *p));
        b->p = p;
        b->cap = floats;
    }
    return b->p;
}

/* One 16-bit operand of a call: where the call's pointer is, how many
 * values, and whether the kernel reads and/or writes it. */
typedef struct half_operand {
    void **slot;
    int64_t n;
    bool read, write;
} half_operand;

static void half_add(half_operand *ops, int *k, bool half, void *slot, int64_t n,
                     bool read, bool write) {
    if (!half || !*(void **)slot || n <= 0) return;
    ops[(*k)++] = (half_operand){.slot = slot, .n = n, .read = read, .write = write};
}

/* Runs a kernel whose operands include 16-bit ones: widens each to fp32
 * scratch (those the kernel reads: inputs, parameters, the saved tensor
 * and output when read, an accumulated gradient), points the call at the
 * scratch, runs the kernel and rounds what it wrote back into the 16-bit
 * buffers. The kernel itself is the fp32 one, unchanged. On a CUDA worker
 * the scratch is device memory from the stream's pool (cudaMallocAsync,
 * freed in stream order after the kernels that use it) and the
 * conversions are util/half_cuda.cu's, which round as the CPU's do. */
static int run_half(pl_op_call *c, const pl_op_exec *x, int kernel, pl_op_kernel k,
                    bool cuda) {
    half_operand ops[MAX_BUFS];
    int n = 0;
    bool forward = kernel == K_FORWARD || kernel == K_LOSS;
    for (int i = 0; i < c->n_inputs; i++)
        half_add(ops, &n, x->half_in[i], &c->in[i], c->samples * c->in_numel[i], true, false);
    for (int i = 0; i < c->n_params; i++) {
        half_add(ops, &n, x->half_params, &c->param[i], c->param_numel[i], true, false);
        half_add(ops, &n, x->half_params, &c->dparam[i], c->param_numel[i],
                 c->accumulate_param[i], true);
    }
    half_add(ops, &n, x->half_out, &c->out, c->samples * c->out_numel, !forward, forward);
    half_add(ops, &n, x->half_out, &c->dout, c->samples * c->out_numel, true, false);
    half_add(ops, &n, x->half_saved, &c->saved, c->samples * c->saved_numel, !forward,
             forward);
    if (c->dinput)
        half_add(ops, &n, x->half_in[c->input], &c->dinput,
                 c->samples * c->in_numel[c->input], c->accumulate, true);
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)ops[i].n;
    bool bf16 = x->engine->bf16;
    float *scratch = NULL;
#ifdef PL_HALF_ON_CUDA
    if (cuda && total > 0 &&
        cudaMallocAsync((void **)&scratch, total * sizeof *scratch, c->stream) != cudaSuccess)
        scratch = NULL;
#endif
    if (!cuda) scratch = scratch_get(total);
    if (!scratch && total > 0) {
        snprintf(c->error, c->error_size,
                 "out of %s memory for %zu floats of 16-bit operands widened to fp32",
                 cuda ? "GPU" : "host", total);
        return -1;
    }
    void *raw[MAX_BUFS];
    size_t off = 0;
    for (int i = 0; i < n; off += (size_t)ops[i].n, i++) {
        raw[i] = *ops[i].slot;
        float *f = scratch + off;
        if (ops[i].read) {
#ifdef PL_HALF_ON_CUDA
            if (cuda) pl_cuda_half_to_float(c->stream, bf16, raw[i], f, ops[i].n);
            else
#endif
                pl_half_to_float(bf16, raw[i], f, ops[i].n);
        }
        *ops[i].slot = f;
    }
    int rc = k(c);
    for (int i = 0; i < n && rc == 0; i++) {
        if (!ops[i].write) continue;
#ifdef PL_HALF_ON_CUDA
        if (cuda) pl_cuda_half_from_float(c->stream, bf16, *ops[i].slot, raw[i], ops[i].n);
        else
#endif
            pl_half_from_float(bf16, *ops[i].slot, raw[i], ops[i].n);
    }
#ifdef PL_HALF_ON_CUDA
    if (cuda && scratch) cudaFreeAsync(scratch, c->stream);
#endif
    return rc;
}

/* Fills the call from the op's fixed part and the task's buffers, runs the
 * kernel and records a failure for the engine to report. */
static void run_kernel(void *buffers[], void *cl_arg, bool cuda) {
    const op_task_args *a = cl_arg;
    pl_op_exec *x = a->x;
    pl_op_call c = x->call;
    char error[256] = "";
    c.samples = a->samples;
    c.scale = a->scale;
    c.input = a->input;
    c.accumulate = a->accumulate;
    c.training = a->training;
    c.seed = a->seed;
    c.sample_offset = a->sample_offset;
    memcpy(c.accumulate_param, a->accumulate_param, sizeof c.accumulate_param);
    for (int i = 0; i < c.n_inputs; i++)
        c.in[i] = buf_ptr(buffers, a->b_in[i], a, 1);
    size_t param_elem = x->half_params ? sizeof(uint16_t) : sizeof(float);
    for (int i = 0; i < c.n_params; i++) {
        c.param[i] = buf_ptr(buffers, a->b_param[i], a, param_elem);
        c.dparam[i] = buf_ptr(buffers, a->b_dparam[i], a, param_elem);
    }
    c.out = buf_ptr(buffers, a->b_out, a, 1);
    c.saved = buf_ptr(buffers, a->b_saved, a, 1);
    c.invalid = buf_ptr(buffers, a->b_invalid, a, 1);
    c.dout = buf_ptr(buffers, a->b_dout, a, 1);
    c.dinput = buf_ptr(buffers, a->b_dinput, a, 1);
    c.error = error;
    c.error_size = sizeof error;
#ifdef STARPU_USE_CUDA
    if (cuda) {
        c.stream = starpu_cuda_get_local_stream();
        c.cublas = starpu_cublas_get_local_handle();
    }
#endif
    /* The measured stage balance's step: the kernel's CPU time on this
     * worker's thread, which a time slice given to another process does
     * not inflate (wall time did: on a loaded machine one descheduled
     * task could outweigh a whole block and move the cut). */
    pl_engine_t *e = x->engine;
    /* Activation recomputation's auto plan times the first runs of the
     * forwards (what a re-run costs), the same way. */
    bool time_forward = !cuda && a->kernel == K_FORWARD && !a->rerun && pl_recompute_timing(e);
    bool timed = (!cuda && pl_engine_balance_timing(e)) || time_forward;
    if (a->kernel == K_FORWARD || a->kernel == K_LOSS)
        pl_act_mem_forward_writes(e, (int)(x->op - e->g->ops), a->tile);
    if (a->kernel == K_LOSS || a->kernel == K_INPUT)
        pl_act_mem_grad_writes(e, x->op->in[a->kernel == K_LOSS ? 0 : a->input], a->tile);
    struct timespec t0;
    if (timed) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    const pl_op_kernels *ks = kernels_of(x->op->def, a->kernel, a->input);
    pl_op_kernel k = cuda ? ks->cuda : ks->cpu;
    int rc = PL_OP_DECLINED;
    pl_op_kernel k_bf16 = cuda ? ks->cuda_bf16 : ks->cpu_bf16;
    if (x->engine->bf16 && k_bf16) {
        /* The op's own bf16 kernel on the operands as stored. */
        memcpy(c.bf16.in, x->half_in, sizeof c.bf16.in);
        c.bf16.params = x->half_params;
        c.bf16.out = x->half_out;
        c.bf16.saved = x->half_saved;
        rc = k_bf16(&c);
        memset(&c.bf16, 0, sizeof c.bf16);
    }
    if (rc == PL_OP_DECLINED)
        rc = x->engine->half ? run_half(&c, x, a->kernel, k, cuda) : k(&c);
    if (timed) {
        struct timespec t1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 +
                    (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
        if (pl_engine_balance_timing(e)) pl_engine_balance_add(e, x->op->block, us);
        if (time_forward) pl_recompute_time_forward(e, x->op->block, us);
    }
    if (rc != 0) pl_engine_kernel_failed(x, kernel_label(a->kernel), a->input, rc, error);
}

static void op_cpu(void *buffers[], void *cl_arg) { run_kernel(buffers, cl_arg, false); }

#ifdef STARPU_USE_CUDA
static void op_cuda(void *buffers[], void *cl_arg) { run_kernel(buffers, cl_arg, true); }

/* History-based performance models let StarPU's dmda-family schedulers
 * weigh CPU against GPU. StarPU keeps every model it has seen until
 * shutdown (and writes them then), so they live for the process: one per
 * symbol, shared by every engine. */
static struct starpu_perfmodel *perfmodel_for(const char *symbol) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static struct model {
        struct starpu_perfmodel m;
        char symbol[64];
        struct model *next;
    } *models;
    pthread_mutex_lock(&lock);
    struct model *m = models;
    while (m && strcmp(m->symbol, symbol) != 0) m = m->next;
    if (!m && (m = calloc(1, sizeof *m))) {
        snprintf(m->symbol, sizeof m->symbol, "%s", symbol);
        m->m.type = STARPU_HISTORY_BASED;
        m->m.symbol = m->symbol;
        m->next = models;
        models = m;
    }
    pthread_mutex_unlock(&lock);
    return m ? &m->m : NULL;
}
#endif

/* ---------------------------------------------------------------- set-up */

static void codelet_init(struct starpu_codelet *cl, char *name, size_t name_size,
                         const pl_op_def *d, const char *what, const pl_op_kernels *k) {
    memset(cl, 0, sizeof *cl);
    snprintf(name, name_size, "%s_%s", d->name, what);
    cl->name = name;
    cl->cpu_funcs[0] = op_cpu;
#ifdef STARPU_USE_CUDA
    if (k->cuda) {
        char symbol[64];
        snprintf(symbol, sizeof symbol, "pleiades_%s", name);
        cl->cuda_funcs[0] = op_cuda;
        cl->cuda_flags[0] = STARPU_CUDA_ASYNC;
        cl->model = perfmodel_for(symbol);
    }
#else
    (void)k;
#endif
    /* Tasks set their own buffer count and modes (pl_engine_submit). */
    cl->nbuffers = STARPU_VARIABLE_NBUFFERS;
}

/* Ops whose kernels lack a CUDA version run those tasks on CPU workers;
 * with no CPU worker at all they could not run, so that is refused. */
static pl_status check_cuda(const pl_engine_t *e, const pl_op *op) {
    if (e->rt->cuda_workers == 0) return PL_STATUS_OK;
    /* 16-bit operands: the trampoline widens them for the fp32 kernels on
     * either kind of worker (run_half). */
    const pl_op_def *d = op->def;
    const char *missing = !d->forward.cuda ? "forward" : NULL;
    for (int i = 0; !missing && i < op->n_inputs; i++)
        if (d->backward_input[i].cpu && !d->backward_input[i].cuda) missing = "backward_input";
    if (!missing && d->backward_weight.cpu && !d->backward_weight.cuda)
        missing = "backward_weight";
    if (!missing) return PL_STATUS_OK;
    char what[128];
    pl_op_describe(e->g, op, what, sizeof what);
    if (e->rt->cpu_workers == 0)
        return pl_fail(PL_STATUS_UNSUPPORTED,
                       "pl_engine_new: %s (op kind '%s') has no CUDA %s kernel and the "
                       "runtime has no CPU worker to run it on (set "
                       "pl_runtime_options.cpu_workers, CLI --workers)", what, d->name,
                       missing);
    fprintf(stderr, "pleiades: %s (op kind '%s') has no CUDA %s kernel: those tasks run "
            "on CPU workers\n", what, d->name, missing);
    return PL_STATUS_OK;
}

static pl_op_codelets *codelets_for(pl_engine_t *e, const pl_op_def *d) {
    for (int i = 0; i < e->n_codelets; i++)
        if (e->codelets[i].def == d) return &e->codelets[i];
    pl_op_codelets *c = &e->codelets[e->n_codelets++];
    c->def = d;
    codelet_init(&c->f, c->names[0], sizeof c->names[0], d, "forward", &d->forward);
    codelet_init(&c->l, c->names[1], sizeof c->names[1], d, "loss", &d->loss_forward);
    codelet_init(&c->w, c->names[2], sizeof c->names[2], d, "backward_weight",
                 &d->backward_weight);
    for (int i = 0; i < PL_OP_MAX_INPUTS; i++) {
        char what[32];
        snprintf(what, sizeof what, "backward_input%d", i);
        codelet_init(&c->b[i], c->names[3 + i], sizeof c->names[3 + i], d, what,
                     &d->backward_input[i]);
    }
    return c;
}

static void shape_of(const pl_tensor_t *t, int *ndim, int64_t *shape, int64_t *numel) {
    *ndim = t->ndim;
    memcpy(shape, t->shape, sizeof t->shape);
    *numel = t->numel;
}

void pl_op_call_template(const pl_graph_t *g, const pl_op *op, pl_op_call *c) {
    memset(c, 0, sizeof *c);
    c->op = op->name;
    c->attrs = op->attrs;
    c->n_inputs = op->n_inputs;
    c->n_params = pl_op_n_params(op);
    for (int i = 0; i < c->n_inputs; i++)
        shape_of(g->tensors[op->in[i]], &c->in_ndim[i], c->in_shape[i], &c->in_numel[i]);
    for (int i = 0; i < c->n_params; i++)
        shape_of(g->tensors[op->in[op->n_inputs + i]], &c->param_ndim[i], c->param_shape[i],
                 &c->param_numel[i]);
    shape_of(g->tensors[op->out], &c->out_ndim, c->out_shape, &c->out_numel);
    if (op->saved >= 0) c->saved_numel = g->tensors[op->saved]->numel;
}

pl_status pl_engine_ops_init(pl_engine_t *e) {
    const pl_graph_t *g = e->g;
    e->op_exec = calloc(g->n_ops ? g->n_ops : 1, sizeof *e->op_exec);
    e->codelets = calloc(g->n_ops ? g->n_ops : 1, sizeof *e->codelets);
    if (!e->op_exec || !e->codelets)
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "pl_engine_new: out of memory");
    for (int o = 0; o < g->n_ops; o++) {
        const pl_op *op = &g->ops[o];
        if (op->def->whole_batch && e->n_tiles > 1) {
            char what[128];
            return pl_fail(PL_STATUS_UNSUPPORTED,
                           "pl_engine_new: %s needs the whole batch in one task "
                           "(whole_batch), but the engine splits it into %d tiles: set "
                           "tiles = 1 and no pipeline schedule",
                           pl_op_describe(g, op, what, sizeof what), e->n_tiles);
        }
        pl_status st = check_cuda(e, op);
        if (st) return st;
        pl_op_exec *x = &e->op_exec[o];
        x->engine = e;
        x->op = op;
        x->cl = codelets_for(e, op->def);
        pl_op_call_template(g, op, &x->call);
        for (int i = 0; i < op->n_inputs; i++)
            x->half_in[i] = pl_engine_tensor_half(e, g->tensors[op->in[i]]);
        x->half_params = e->half && pl_op_n_params(op) > 0;
        x->half_out = pl_engine_tensor_half(e, g->tensors[op->out]);
        x->half_saved = op->saved >= 0 && pl_engine_tensor_half(e, g->tensors[op->saved]);

    }
    pthread_mutex_init(&e->kernel_error_lock, NULL);
    e->kernel_error_init = true;
    return PL_STATUS_OK;
}

void pl_engine_ops_free(pl_engine_t *e) {
    free(e->op_exec);
    free(e->codelets);
    if (e->kernel_error_init) pthread_mutex_destroy(&e->kernel_error_lock);
}

void pl_engine_step_failed(pl_engine_t *e, const char *fmt, ...) {
    pthread_mutex_lock(&e->kernel_error_lock);
    if (!e->kernel_failed) { /* the first failure is the one to report */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->kernel_error, sizeof e->kernel_error, fmt, ap);
        va_end(ap);
        e->kernel_failed = true;
    }
    pthread_mutex_unlock(&e->kernel_error_lock);
}

void pl_engine_kernel_failed(pl_op_exec *x, const char *kernel, int input, int rc,
                             const char *message) {
    pl_engine_t *e = x->engine;
    char what[128], which[32] = "";
    pl_op_describe(e->g, x->op, what, sizeof what);
    if (!strcmp(kernel, "backward_input")) snprintf(which, sizeof which, "[%d]", input);
    pl_engine_step_failed(e, "%s: its %s%s kernel failed (returned %d)%s%s", what, kernel,
                          which, rc, *message ? ": " : "", message);
}

pl_status pl_engine_check_kernels(pl_engine_t *e) {
    pthread_mutex_lock(&e->kernel_error_lock);
    bool failed = e->kernel_failed;
    pthread_mutex_unlock(&e->kernel_error_lock);
    if (!failed) return PL_STATUS_OK;
    /* The failed step's other tasks may still run, and fail too (the same
     * kernel on another tile): their failures are this step's, not the
     * next one's, so they end before the report is cleared. */
    starpu_task_wait_for_all();
    pthread_mutex_lock(&e->kernel_error_lock);
    char msg[sizeof e->kernel_error];
    memcpy(msg, e->kernel_error, sizeof msg);
    e->kernel_failed = false;
    pthread_mutex_unlock(&e->kernel_error_lock);
    pl_engine_grads_discard(e);
    return pl_fail(PL_STATUS_RUNTIME_ERROR, "%s", msg);
}

/* ------------------------------------------------------------- submission */

/* A task under construction: handles, modes and the argument block. */
typedef struct task_builder {
    starpu_data_handle_t h[MAX_BUFS];
    enum starpu_data_access_mode m[MAX_BUFS];
    int n;
    op_task_args a;
} task_builder;

static signed char add(task_builder *t, starpu_data_handle_t h,
                       enum starpu_data_access_mode mode, int64_t off) {
    t->h[t->n] = h;
    t->m[t->n] = mode;
    t->a.off[t->n] = off;
    return (signed char)t->n++;
}

/* The seed of op `op_index`'s random numbers in the current pass
 * (pl_op_call.seed). A training pass is named by (optimizer steps taken,
 * forward_backward calls since the last update): unique per pass, as the
 * two only change together at an update, and restored by a checkpoint
 * (saved at an accumulation boundary with the step count), so a resumed
 * run draws what an uninterrupted one would. Each input is mixed in
 * (pl_stream_state) rather than added: sums of seeds and counters would
 * let (step 1, op 0) replay (step 0, op 1). The constant keeps these
 * streams apart from parameter initialisation, which also starts from the
 * graph's seed. */
static uint64_t op_seed(const pl_engine_t *e, int op_index) {
    uint64_t z = pl_stream_state(e->g->seed ^ UINT64_C(0x6F7072616E646F6D), e->steps);
    z = pl_stream_state(z, e->accumulate_step);
    return pl_stream_state(z, op_index);
}

static void builder_init(task_builder *t, pl_engine_t *e, int op_index, int kernel,
                         int tile) {
    memset(t, 0, sizeof *t);
    t->a.x = &e->op_exec[op_index];
    t->a.kernel = kernel;
    t->a.samples = e->tile_samples[tile];
    t->a.training = true; /* backward tasks; forward ones set their step's */
    t->a.seed = op_seed(e, op_index);
    t->a.tile = tile;
    for (int i = 0; i < tile; i++) t->a.sample_offset += e->tile_samples[i];
    t->a.b_out = t->a.b_saved = t->a.b_invalid = t->a.b_dout = t->a.b_dinput = -1;
    memset(t->a.b_in, -1, sizeof t->a.b_in);
    memset(t->a.b_param, -1, sizeof t->a.b_param);
    memset(t->a.b_dparam, -1, sizeof t->a.b_dparam);
}

static pl_tensor_t *T(pl_engine_t *e, int id) { return e->g->tensors[id]; }

static void add_inputs(task_builder *t, pl_engine_t *e, const pl_op *op, int tile) {
    for (int i = 0; i < op->n_inputs; i++)
        t->a.b_in[i] = add(t, e->trt[op->in[i]].val[tile], STARPU_R, 0);
}

static void add_params(task_builder *t, pl_engine_t *e, const pl_op *op) {
    for (int i = 0; i < pl_op_n_params(op); i++) {
        const pl_tensor_t *p = T(e, op->in[op->n_inputs + i]);
        t->a.b_param[i] = add(t, pl_param_handle(e, p), STARPU_R,
                              (int64_t)pl_param_value_offset(e, p));
    }
}

/* What a backward kernel reads besides the output's gradient. */
static void add_reads(task_builder *t, pl_engine_t *e, const pl_op *op, int tile,
                      unsigned reads) {
    if (reads & PL_OP_READS_INPUTS) add_inputs(t, e, op, tile);
    if (reads & PL_OP_READS_PARAMS) add_params(t, e, op);
    if ((reads & PL_OP_READS_SAVED) && op->saved >= 0)
        t->a.b_saved = add(t, e->trt[op->saved].val[tile], STARPU_R, 0);
    if (reads & PL_OP_READS_OUTPUT)
        t->a.b_out = add(t, e->trt[op->out].val[tile], STARPU_R, 0);
}

static pl_status submit_at(pl_engine_t *e, task_builder *t, struct starpu_codelet *cl,
                           size_t index) {
    if (pl_fusion_active(e->fusion)) { /* collected into a fused task (engine/task_fusion.c) */
        bool taken = false;
        pl_status st = pl_fusion_add(e, cl, index, &t->a, sizeof t->a, t->n, t->h, t->m,
                                     &taken);
        if (st || taken) return st;
    }
    return pl_engine_submit_modes(e, cl, index, &t->a, sizeof t->a, t->n, t->h, t->m);
}

static pl_status submit(pl_engine_t *e, task_builder *t, struct starpu_codelet *cl,
                        int op_index, int slot, int tile) {
    return submit_at(e, t, cl, pl_task_index(e, op_index, slot, tile));
}

/* Claims the gradient of activation `id` in `tile` for writing: returns
 * whether the writer must accumulate, and marks it written. */
static bool claim_grad(pl_engine_t *e, int id, int tile) {
    bool *w = &e->trt[id].grad_written[tile];
    bool acc = *w;
    *w = true;
    return acc;
}

static bool claim_param_grad(pl_engine_t *e, int id) {
    bool *w = &e->trt[id].param_grad_written;
    bool acc = *w;
    *w = true;
    return acc;
}

/* d loss / d (the loss op's sum): the mean's 1 / (batch count), times the
 * gradient-accumulation factor. */
static float loss_scale(const pl_engine_t *e, const pl_op *op) {
    return pl_engine_loss_grad_scale(e) / (float)((double)e->batch_samples * op->scalar_count);
}

/* A forward task: the op's own (slot F, or L for the fused loss task) or,
 * recompute_task >= 0, its run again before its backward (task slot
 * recompute_task: activation recomputation, never the fused loss). Both
 * draw the same seed (op_seed: the step's pass and the op), so a re-run
 * writes the bits the first run wrote, dropout masks included. */
static pl_status forward(pl_engine_t *e, int op_index, int tile, bool training,
                         int64_t recompute_task, const starpu_data_handle_t *gates,
                         int n_gates) {
    const pl_op *op = &e->g->ops[op_index];
    pl_op_exec *x = &e->op_exec[op_index];
    const pl_tensor_t *in0 = T(e, op->in[0]);
    /* The loss task: forward and the input's gradient from one pass, when
     * this task is the first writer of that gradient. */
    bool fuse = recompute_task < 0 && training && op->out == e->g->loss &&
                op->def->loss_forward.cpu && in0->requires_grad &&
                !e->trt[in0->id].grad_written[tile];
    if (recompute_task < 0) x->fused[tile] = fuse;
    task_builder t;
    builder_init(&t, e, op_index, fuse ? K_LOSS : K_FORWARD, tile);
    t.a.training = training;
    t.a.rerun = recompute_task >= 0;
    t.a.b_out = add(&t, e->trt[op->out].val[tile], STARPU_W, 0);
    if (fuse) {
        claim_grad(e, in0->id, tile);
        t.a.scale = loss_scale(e, op);
        t.a.b_dinput = add(&t, e->trt[in0->id].grad[tile], STARPU_W, 0);
    }
    if (op->saved >= 0) t.a.b_saved = add(&t, e->trt[op->saved].val[tile], STARPU_W, 0);
    if (op->invalid >= 0)
        t.a.b_invalid = add(&t, e->trt[op->invalid].val[tile], STARPU_W, 0);
    add_inputs(&t, e, op, tile);
    add_params(&t, e, op);
    /* Read by no kernel: only ordering (see pl_op_submit_recompute). */
    for (int i = 0; i < n_gates && i < PL_RECOMPUTE_MAX_GATES; i++) add(&t, gates[i], STARPU_R, 0);
    if (recompute_task >= 0) return submit_at(e, &t, &x->cl->f, (size_t)recompute_task);
    return submit(e, &t, fuse ? &x->cl->l : &x->cl->f, op_index,
                  fuse ? PL_SLOT_L : PL_SLOT_F, tile);
}

pl_status pl_op_submit_forward(pl_engine_t *e, int op_index, int tile, bool training) {
    return forward(e, op_index, tile, training, -1, NULL, 0);
}

pl_status pl_op_submit_recompute(pl_engine_t *e, int op_index, int tile, size_t task,
                                 const starpu_data_handle_t *gates, int n_gates) {
    return forward(e, op_index, tile, true, (int64_t)task, gates, n_gates);
}

static pl_status backward_input(pl_engine_t *e, int op_index, int i, int tile,
                                bool is_loss) {
    const pl_op *op = &e->g->ops[op_index];
    const pl_tensor_t *x = T(e, op->in[i]);
    task_builder t;
    builder_init(&t, e, op_index, K_INPUT, tile);
    t.a.input = i;
    t.a.accumulate = claim_grad(e, x->id, tile);
    t.a.b_dinput = add(&t, e->trt[x->id].grad[tile], t.a.accumulate ? STARPU_RW : STARPU_W, 0);
    if (is_loss)
        t.a.scale = loss_scale(e, op);
    else
        t.a.b_dout = add(&t, e->trt[op->out].grad[tile], STARPU_R, 0);
    add_reads(&t, e, op, tile, op->def->backward_input_reads);
    return submit(e, &t, &e->op_exec[op_index].cl->b[i], op_index, PL_SLOT_B0 + i, tile);
}

static pl_status backward_weight(pl_engine_t *e, int op_index, int tile, bool is_loss) {
    const pl_op *op = &e->g->ops[op_index];
    task_builder t;
    builder_init(&t, e, op_index, K_WEIGHT, tile);
    for (int i = 0; i < pl_op_n_params(op); i++) {
        const pl_tensor_t *p = T(e, op->in[op->n_inputs + i]);
        /* A later use of a tied parameter: its own buffer, from its start
         * (engine/tied_grads.c). */
        bool tie_acc = false;
        starpu_data_handle_t tie = pl_engine_tie_grad(e, op_index, i, &tie_acc);
        if (tie) {
            t.a.accumulate_param[i] = tie_acc;
            t.a.b_dparam[i] = add(&t, tie, tie_acc ? STARPU_RW : STARPU_W, 0);
            continue;
        }
        bool acc = claim_param_grad(e, p->id);
        t.a.accumulate_param[i] = acc;
        /* ZeRO-2: the chunk's gradients back from their release first,
         * once the backward pass reaches this op (its output's gradient;
         * for the loss, the loss: a fused loss task writes no logits). */
        pl_status st = pl_engine_dp_grads_back(
            e, e->trt[p->id].chunk,
            is_loss ? e->trt[op->out].val[tile] : e->trt[op->out].grad[tile]);
        if (st) return st;
        /* A whole-chunk gradient handle (placement) holds other tensors'
         * gradients too: always RW, the kernel's flag does the rest. */
        t.a.b_dparam[i] = add(&t, pl_param_grad_handle(e, p),
                              acc || e->chunks.managed ? STARPU_RW : STARPU_W,
                              (int64_t)pl_param_grad_offset(e, p));
    }
    if (is_loss)
        t.a.scale = loss_scale(e, op);
    else
        t.a.b_dout = add(&t, e->trt[op->out].grad[tile], STARPU_R, 0);
    add_reads(&t, e, op, tile, op->def->backward_weight_reads);
    return submit(e, &t, &e->op_exec[op_index].cl->w, op_index, PL_SLOT_W, tile);
}

pl_status pl_op_submit_backward(pl_engine_t *e, int op_index, int tile) {
    const pl_op *op = &e->g->ops[op_index];
    bool is_loss = op->out == e->g->loss;
    /* Only ops whose output received a gradient this step propagate one;
     * the loss is the seed. */
    if (!is_loss && !(e->trt[op->out].grad_written && e->trt[op->out].grad_written[tile]))
        return PL_STATUS_OK;
    for (int i = 0; i < op->n_inputs; i++) {
        if (!op->def->backward_input[i].cpu || !T(e, op->in[i])->requires_grad) continue;
        if (i == 0 && is_loss && e->op_exec[op_index].fused[tile]) continue; /* done */
        pl_status st = backward_input(e, op_index, i, tile, is_loss);
        if (st) return st;
    }
    if (pl_op_n_params(op) > 0) return backward_weight(e, op_index, tile, is_loss);
    return PL_STATUS_OK;
}
