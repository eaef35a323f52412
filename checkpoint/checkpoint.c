/* Full checkpoints (pleiades/checkpoint.h): a directory with the weights,
 * the optimizer states and a JSON state file, from which training resumes
 * bit for bit.
 *
 * Why these three things suffice: between updates the engine's whole
 * training state is its parameters, the optimizer's per-parameter states
 * and the step count. The LR schedule, OneCycle's momentum and AdamW's bias
 * correction are functions of the step count alone; gradients are
 * overwritten by the first backward after an update, so they need no
 * saving. What the caller adds (epoch, batch index, seeds) goes in as
 * named values.
 *
 * Atomicity: the files are written into "<dir>.tmp.<pid>" (each through
 * util/atomic_file, so each is synced), then the directory is renamed to
 * `dir` and its parent synced. A save killed before the rename leaves only
 * the temporary directory, which the next save into the same parent
 * removes once its process is gone; earlier checkpoints are never touched.
 * Loading reads and checks everything before the engine changes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/safetensors.h"
#include "engine/engine_state.h"
#include "util/error.h"
#include "util/atomic_file.h"
#include "util/file_crc.h"
#include "util/regular_file.h"

#define STATE_FORMAT "pleiades-checkpoint"
/* 2: "files" holds each file's size and CRC32C (1: none, still read). */
#define STATE_VERSION 2

/* ------------------------------------------------------------ values */

pl_status pl_checkpoint_values_set(pl_checkpoint_values *v, const char *key,
                                   int64_t value) {
    if (!v || !key || !*key || strlen(key) >= sizeof v->key[0])
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_checkpoint_values_set: %s", !v ? "values is NULL"
                       : !key || !*key ? "the key is empty"
                                       : "the key is longer than 31 bytes");
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->key[i], key)) {
            v->value[i] = value;
            return PL_STATUS_OK;
        }
    if (v->n < 0 || v->n >= PL_CHECKPOINT_MAX_VALUES)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_checkpoint_values_set: no room for '%s' (at most %d values)",
                       key, PL_CHECKPOINT_MAX_VALUES);
    snprintf(v->key[v->n], sizeof v->key[0], "%s", key);
    v->value[v->n++] = value;
    return PL_STATUS_OK;
}

pl_status pl_checkpoint_values_get(const pl_checkpoint_values *v, const char *key,
                                   int64_t *value) {
    if (!v || !key || !value)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_checkpoint_values_get: %s is NULL",
                       !v ? "values" : !key ? "key" : "value");
    for (int i = 0; i < v->n && i < PL_CHECKPOINT_MAX_VALUES; i++)
        if (!strcmp(v->key[i], key)) {
            *value = v->value[i];
            return PL_STATUS_OK;
        }
    return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint values: no value '%s'", key);
}

/* ------------------------------------------------- optimizer states */

static const char *optimizer_name(pl_optimizer_kind k) {
    return k == PL_OPTIMIZER_ADAMW ? "adamw" : "sgd";
}

/* PyTorch's state_dict names for the states, in the engine's order. */
static const char *precision_name(pl_precision p) {
    return p == PL_PRECISION_BF16 ? "bf16" : p == PL_PRECISION_FP16 ? "fp16" : "fp32";
}

static const char *state_suffix(pl_optimizer_kind k, int s) {
    return k == PL_OPTIMIZER_ADAMW ? (s == 0 ? "exp_avg" : "exp_avg_sq") : "momentum_buffer";
}

typedef struct state_list {
    pl_engine_t *e;
    int n_params, n_states;
    pl_st_entry *entries; /* param-major: (param i, state s) at i·n_states + s */
    char (*names)[160];
} state_list;

static void state_list_free(state_list *l) {
    free(l->entries);
    free(l->names);
}

static pl_status state_list_init(state_list *l, pl_engine_t *e) {
    memset(l, 0, sizeof *l);
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    l->e = e;
    l->n_states = v.n_states;
    pl_st_entry *params;
    pl_status st = pl_st_param_entries(v.graph, &params, &l->n_params);
    if (st) return st;
    int n = l->n_params * l->n_states;
    l->entries = calloc(n ? n : 1, sizeof *l->entries);
    l->names = calloc(n ? n : 1, sizeof *l->names);
    if (!l->entries || !l->names) {
        free(params);
        state_list_free(l);
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < l->n_params; i++)
        for (int s = 0; s < l->n_states; s++) {
            int k = i * l->n_states + s;
            snprintf(l->names[k], sizeof l->names[k], "%s.%s", params[i].name,
                     state_suffix(v.options->optimizer.kind, s));
            l->entries[k] = params[i];
            l->entries[k].name = l->names[k];
        }
    free(params);
    return PL_STATUS_OK;
}

static pl_status get_state(void *ctx, int k, float *out) {
    state_list *l = ctx;
    return pl_engine_optimizer_state_io(l->e, k / l->n_states, k % l->n_states, out, NULL);
}

static pl_status get_master(void *ctx, int i, float *out) {
    pl_engine_t *e = ctx;
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    return pl_engine_master_io(e, pl_graph_param(v.graph, i), out, NULL);
}

static pl_status get_param(void *ctx, int i, float *out) {
    pl_engine_t *e = ctx;
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    const pl_tensor_t *p = pl_graph_param(v.graph, i);
    return pl_engine_get_param(e, p, out, (size_t)pl_tensor_numel(p));
}

/* ------------------------------------------------------ state.json */

static json_t *state_json(const pl_engine_t *e, const pl_checkpoint_values *v) {
    pl_engine_view ev;
    pl_engine_view_get(e, &ev);
    const pl_optimizer_options *o = &ev.options->optimizer;
    const pl_lr_scheduler_options *s = &ev.options->lr_scheduler;
    json_t *values = json_object();
    for (int i = 0; v && i < v->n && i < PL_CHECKPOINT_MAX_VALUES; i++)
        json_object_set_new(values, v->key[i], json_integer(v->value[i]));
    json_t *root = json_pack(
        "{s:s, s:i, s:I, s:s, s:I, s:i, s:{s:s, s:f, s:f, s:f, s:f, s:f, s:f}, "
        "s:{s:i, s:I, s:I}, s:f, s:o}",
        "format", STATE_FORMAT, "version", STATE_VERSION, "step", (json_int_t)ev.steps,
        "precision", precision_name(ev.options->precision),
        "parameters", (json_int_t)pl_graph_param_count(ev.graph),
        "accumulate_size", ev.options->accumulate_size, "optimizer", "kind",
        optimizer_name(o->kind), "lr", (double)o->lr, "weight_decay",
        (double)o->weight_decay, "momentum", (double)o->momentum, "beta1",
        (double)o->beta1, "beta2", (double)o->beta2, "eps", (double)o->eps,
        "lr_scheduler", "kind", (int)s->kind, "total_steps", (json_int_t)s->total_steps,
        "warmup_steps", (json_int_t)s->warmup_steps, "max_norm", (double)ev.options->max_norm,
        "values", values);
    /* Dynamic loss scaling, when on: what a resume needs to go on exactly. */
    const pl_loss_scaler_state ls = ev.scaler;
    if (root && ev.scaled) {
        json_object_set_new(root, "loss_scaler",
                            json_pack("{s:f, s:I, s:I}", "scale", ls.scale, "growth_step",
                                      (json_int_t)ls.growth_step, "hysteresis_step",
                                      (json_int_t)ls.hysteresis_step));
    }
    /* 16-bit: whether master.safetensors holds fp32 master weights. */
    if (root && ev.half)
        json_object_set_new(root, "master_weights", json_boolean(ev.master));
    return root;
}

typedef struct state_read {
    int64_t step;
    pl_checkpoint_values values;
    bool has_scaler; /* a "loss_scaler" object (older files have none) */
    double scale;
    int64_t growth_step, hysteresis_step;
    json_t *files; /* "files" (version 2; NULL in version 1), owned */
} state_read;

/* The duplicated fields: what a caller keeps in "values" under these keys
 * (the trainer's hooks and the CLI do) restates a field of the file, and
 * the two must agree; a file that disagrees with itself was edited or
 * damaged, and resuming from it would start at the wrong place. */
static pl_status check_duplicates(const char *path, int64_t step, json_t *root,
                                  const pl_checkpoint_values *v) {
    int64_t x;
    bool scaled = json_object_get(root, "loss_scaler") != NULL;
    /* values.step counts iterations, `step` updates: they differ only by
     * the updates a loss scaler skipped on overflow. */
    if (!pl_checkpoint_values_get(v, "step", &x) && (scaled ? x < step : x != step))
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: field 'step' is %" PRId64 " but 'values.step' is %" PRId64
                       " (they must agree%s): the file was edited or is damaged",
                       path, step, x, scaled ? ": at least as many steps as updates" : "");
    json_t *acc = json_object_get(root, "accumulate_size");
    if (!pl_checkpoint_values_get(v, "accumulate", &x) &&
        (!json_is_integer(acc) || json_integer_value(acc) != x))
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: field 'accumulate_size' is %" PRId64 " but 'values.accumulate' is "
                       "%" PRId64 " (they must agree): the file was edited or is damaged",
                       path, json_is_integer(acc) ? (int64_t)json_integer_value(acc) : -1, x);
    pl_clear_error(); /* the lookups of absent keys */
    return PL_STATUS_OK;
}

/* "files": each file's size and CRC32C (an object per file name). */
static pl_status check_files_field(const char *path, json_t *files) {
    if (!json_is_object(files))
        return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'files': expected an object", path);
    const char *name;
    json_t *f;
    json_object_foreach(files, name, f) {
        json_t *bytes = json_object_get(f, "bytes"), *crc = json_object_get(f, "crc32c");
        if (!json_is_integer(bytes) || json_integer_value(bytes) < 0)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: field 'files.%s.bytes': expected an integer >= 0", path, name);
        if (!json_is_integer(crc) || json_integer_value(crc) < 0 ||
            json_integer_value(crc) > 0xffffffffLL)
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: field 'files.%s.crc32c': expected an integer in [0, 2^32)",
                           path, name);
    }
    return PL_STATUS_OK;
}

/* Checks file dir/name against its size and CRC32C in state.json's
 * "files" (version 2; a version-1 checkpoint has none to check). */
static pl_status verify_file(const state_read *s, const char *path, const char *name) {
    if (!s->files) return PL_STATUS_OK;
    json_t *f = json_object_get(s->files, name);
    if (!f)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "state.json beside %s: field 'files': no checksum for %s", path, name);
    uint64_t want_bytes = (uint64_t)json_integer_value(json_object_get(f, "bytes"));
    uint32_t want_crc = (uint32_t)json_integer_value(json_object_get(f, "crc32c"));
    uint32_t crc;
    uint64_t bytes;
    const char *why;
    int err = pl_file_crc32c(path, &crc, &bytes, &why);
    if (err && why) return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open: %s", path, why);
    if (err) return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot read: %s", path, strerror(err));
    if (bytes != want_bytes)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: %" PRIu64 " bytes, but state.json recorded %" PRIu64
                       ": the file is truncated or was replaced",
                       path, bytes, want_bytes);
    if (crc != want_crc)
        return pl_fail(PL_STATUS_FORMAT_ERROR,
                       "%s: checksum mismatch (CRC32C 0x%08" PRIx32 ", state.json recorded 0x%08"
                       PRIx32 "): the file is damaged",
                       path, crc, want_crc);
    return PL_STATUS_OK;
}

/* The caller's named integers of a state file ("values"; NULL: none). */
static pl_status parse_values(const char *path, json_t *values, pl_checkpoint_values *out) {
    const char *key;
    json_t *v;
    json_object_foreach(values, key, v) {
        if (!json_is_integer(v))
            return pl_fail(PL_STATUS_FORMAT_ERROR,
                           "%s: field 'values.%s': expected an integer", path, key);
        if (pl_checkpoint_values_set(out, key, json_integer_value(v)))
            return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'values.%s': %s", path, key,
                           pl_last_error());
    }
    return PL_STATUS_OK;
}

/* Loads state file `path`, checking its format and version. */
static pl_status load_state_file(const char *path, json_t **out) {
    *out = NULL;
    json_error_t err;
    /* Opened as a regular file first: a FIFO in its place would block
     * json_load_file forever, and a directory read as an empty file. */
    const char *why;
    int fd = pl_open_regular(path, 0, &why);
    if (fd < 0) return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot open: %s", path, why);
    errno = 0;
    json_t *root = json_loadfd(fd, 0, &err);
    int read_err = errno;
    close(fd);
    if (!root) {
        /* jansson reports an unreadable file with line -1 */
        if (err.line < 0)
            return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot read: %s", path,
                           read_err ? strerror(read_err) : err.text);
        return pl_fail(PL_STATUS_FORMAT_ERROR, "%s: line %d: %s", path, err.line, err.text);
    }
    const char *format = json_string_value(json_object_get(root, "format"));
    json_t *version = json_object_get(root, "version");
    pl_status st = PL_STATUS_OK;
    if (!json_is_object(root) || !format || strcmp(format, STATE_FORMAT))
        st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'format': not \"%s\"", path,
                     STATE_FORMAT);
    else if (!json_is_integer(version) || json_integer_value(version) < 1 ||
             json_integer_value(version) > STATE_VERSION)
        st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'version': expected 1 to %d", path,
                     STATE_VERSION);
    if (st)
        json_decref(root);
    else
        *out = root;
    return st;
}

/* Parses and checks path (state.json) against the engine; names the
 * field at fault. */
static pl_status read_state(const pl_engine_t *e, const char *path, state_read *out) {
    memset(out, 0, sizeof *out);
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    const pl_engine_options *eo = v.options;
    json_t *root;
    pl_status st = load_state_file(path, &root);
    if (st) return st;
    json_t *step = json_object_get(root, "step");
    json_t *opt = json_object_get(root, "optimizer");
    const char *kind = json_string_value(json_object_get(opt, "kind"));
    const char *precision = json_string_value(json_object_get(root, "precision"));
    json_t *params = json_object_get(root, "parameters");
    json_t *master = json_object_get(root, "master_weights");
    json_t *values = json_object_get(root, "values");
    json_t *scaler = json_object_get(root, "loss_scaler");
    json_t *ls_scale = json_object_get(scaler, "scale");
    json_t *ls_growth = json_object_get(scaler, "growth_step");
    json_t *ls_hyst = json_object_get(scaler, "hysteresis_step");
    json_t *files = json_object_get(root, "files");
    bool checksummed = json_integer_value(json_object_get(root, "version")) >= 2;
    if (!json_is_integer(step) || json_integer_value(step) < 0 ||
        json_integer_value(step) > ((json_int_t)1 << 52))
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: field 'step': expected an integer in [0, 2^52]", path);
    else if (!kind)
        st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'optimizer.kind': expected a string",
                     path);
    else if (strcmp(kind, optimizer_name(eo->optimizer.kind)))
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: the checkpoint's optimizer is %s, the engine's %s (resume with "
                     "the optimizer it was saved with)",
                     path, kind, optimizer_name(eo->optimizer.kind));
    else if (!precision || strcmp(precision, precision_name(eo->precision)))
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: field 'precision': the checkpoint's is %s, the engine's %s (resume "
                     "with the precision it was saved with)", path,
                     precision ? precision : "missing", precision_name(eo->precision));
    else if (v.half && (!json_is_boolean(master) || json_is_true(master) != v.master))
        st = pl_fail(PL_STATUS_INVALID_ARGUMENT,
                     "%s: field 'master_weights': the checkpoint's is %s, the engine's %s", path,
                     !json_is_boolean(master) ? "missing" : json_is_true(master) ? "true" : "false",
                     v.master ? "true" : "false");
    else if (!json_is_integer(params) ||
             json_integer_value(params) != (json_int_t)pl_graph_param_count(v.graph))
        st = pl_fail(PL_STATUS_SHAPE_MISMATCH,
                     "%s: field 'parameters': the checkpoint's model has %" PRId64
                     " parameters, the engine's %" PRId64,
                     path, json_is_integer(params) ? (int64_t)json_integer_value(params) : -1,
                     pl_graph_param_count(v.graph));
    else if (values && !json_is_object(values))
        st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'values': expected an object", path);
    else if (scaler && !(json_is_number(ls_scale) && json_number_value(ls_scale) > 0 &&
                         json_number_value(ls_scale) <= 0x1p127))
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: field 'loss_scaler.scale': expected a number in (0, 2^127]", path);
    else if (scaler && !(json_is_integer(ls_growth) && json_integer_value(ls_growth) >= 0))
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: field 'loss_scaler.growth_step': expected an integer >= 0", path);
    else if (scaler && !(json_is_integer(ls_hyst) && json_integer_value(ls_hyst) >= 0))
        st = pl_fail(PL_STATUS_FORMAT_ERROR,
                     "%s: field 'loss_scaler.hysteresis_step': expected an integer >= 0",
                     path);
    else if (checksummed)
        st = check_files_field(path, files);
    if (!st) {
        out->step = (int64_t)json_integer_value(step);
        out->has_scaler = scaler != NULL;
        if (scaler) {
            out->scale = json_number_value(ls_scale);
            out->growth_step = (int64_t)json_integer_value(ls_growth);
            out->hysteresis_step = (int64_t)json_integer_value(ls_hyst);
        }
        st = parse_values(path, values, &out->values);
        if (!st) st = check_duplicates(path, out->step, root, &out->values);
        if (!st && checksummed) out->files = json_incref(files);
    }
    json_decref(root);
    return st;
}

pl_status pl_checkpoint_read_values(const char *dir, pl_checkpoint_values *values) {
    if (!dir || !values)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_checkpoint_read_values: %s is NULL",
                       !dir ? "dir" : "values");
    memset(values, 0, sizeof *values);
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/state.json", dir) >= sizeof path)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", dir);
    json_t *root;
    pl_status st = load_state_file(path, &root);
    if (st) return st;
    json_t *v = json_object_get(root, "values");
    if (v && !json_is_object(v))
        st = pl_fail(PL_STATUS_FORMAT_ERROR, "%s: field 'values': expected an object", path);
    else
        st = parse_values(path, v, values);
    json_decref(root);
    return st;
}

/* -------------------------------------------------------- directories */

static pl_status join(char *buf, size_t size, const char *dir, const char *name) {
    if ((size_t)snprintf(buf, size, "%s/%s", dir, name) >= size)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s/%s", dir,
                       name);
    return PL_STATUS_OK;
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The parent directory of path (for syncing and sweeping). */
static void parent_of(const char *path, char *buf, size_t size) {
    snprintf(buf, size, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash) snprintf(buf, size, ".");
    else if (slash == buf) buf[1] = '\0';
    else *slash = '\0';
}

/* -------------------------------------------------------------- save */

static pl_status write_state_json(const pl_engine_t *e, const char *path,
                                  const pl_checkpoint_values *v, json_t *files) {
    json_t *root = state_json(e, v);
    /* Each file's size and CRC32C: a flipped bit or a zeroed block is
     * still a well-formed file, which only a checksum tells apart. */
    if (root) json_object_set(root, "files", files);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (!text) return pl_fail(PL_STATUS_OUT_OF_MEMORY, "%s: out of memory", path);
    pl_atomic_file f;
    int err = pl_atomic_file_open(&f, path);
    size_t len = strlen(text);
    if (!err) {
        const char *p = text;
        while (len > 0 && !err) {
            ssize_t n = write(f.fd, p, len);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) err = errno;
            else p += n, len -= (size_t)n;
        }
        if (!err && write(f.fd, "\n", 1) != 1) err = errno ? errno : EIO;
        err = err ? (pl_atomic_file_discard(&f), err) : pl_atomic_file_commit(&f);
    }
    free(text);
    if (err) return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot write: %s", path, strerror(err));
    return PL_STATUS_OK;
}

static pl_status save_files(pl_engine_t *e, const char *dir,
                            const pl_checkpoint_values *values);

pl_status pl_engine_save_checkpoint(pl_engine_t *e, const char *dir,
                                    const pl_checkpoint_values *values) {
    if (!e || !dir || !*dir)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_save_checkpoint: %s",
                       !e ? "engine is NULL" : "no directory given");
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    if (v.accumulating != 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_engine_save_checkpoint: %d of %d accumulated batches into the "
                       "next update: save between updates (their gradients are not saved)",
                       v.accumulating, v.options->accumulate_size);
    /* Data parallel: every rank holds the same parameters; ZeRO's
     * optimizer states are assembled on rank 0 (a collective every rank
     * joins), which alone writes, in the one-process format. */
    if (v.world_size == 1) return save_files(e, dir, values);
    pl_status st = pl_engine_save_begin(e);
    if (st) return st;
    if (pl_engine_dp_rank(e) == 0) st = save_files(e, dir, values);
    pl_engine_save_end(e);
    /* Every rank returns once the checkpoint is complete on disk (a rank
     * may load it next) and learns whether rank 0 could write it. */
    bool failed;
    pl_status cst = pl_engine_ranks_any(e, st != PL_STATUS_OK, &failed);
    if (st) return st;
    if (cst) return cst;
    if (failed)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: rank 0 could not write the checkpoint (its "
                       "message says why)", dir);
    return PL_STATUS_OK;
}

/* Records file dir/name's size and CRC32C in `files` (state.json's
 * "files"), read back once it is on disk: what a load verifies. */
static pl_status record_file(json_t *files, const char *dir, const char *name) {
    char path[PATH_MAX];
    pl_status st = join(path, sizeof path, dir, name);
    if (st) return st;
    uint32_t crc;
    uint64_t bytes;
    int err = pl_file_crc32c(path, &crc, &bytes, NULL);
    if (err) return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot read back: %s", path, strerror(err));
    if (json_object_set_new(files, name,
                            json_pack("{s:I, s:I}", "bytes", (json_int_t)bytes, "crc32c",
                                      (json_int_t)crc)))
        return pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    return PL_STATUS_OK;
}

/* Writes one safetensors file of the checkpoint into tmp and records it. */
static pl_status write_tensors(json_t *files, const char *tmp, const char *name,
                               const pl_st_entry *entries, int n, pl_st_get_fn get, void *ctx) {
    const char *meta_keys[1] = {"format"}, *meta_values[1] = {"pleiades"};
    char path[PATH_MAX];
    pl_status st = join(path, sizeof path, tmp, name);
    if (!st) st = pl_st_write(path, entries, n, get, ctx, meta_keys, meta_values, 1);
    if (!st) st = record_file(files, tmp, name);
    return st;
}

/* Writes the checkpoint directory (rank 0 of a data-parallel job). */
static pl_status save_files(pl_engine_t *e, const char *dir, const pl_checkpoint_values *values) {
    char tmp[PATH_MAX], old[PATH_MAX], path[PATH_MAX], parent[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid()) >= sizeof tmp ||
        (size_t)snprintf(old, sizeof old, "%s.old.tmp.%ld", dir, (long)getpid()) >= sizeof old)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", dir);
    parent_of(dir, parent, sizeof parent);
    const char *base = strrchr(dir, '/');
    pl_ckpt_sweep_temporaries(parent, base ? base + 1 : dir);
    /* A save replaces a checkpoint of its own kind, nothing else: what a
     * user put under that name (a link, a folder of theirs) stays. */
    bool exists;
    const char *why = pl_ckpt_foreign(dir, &exists);
    if (why)
        return pl_fail(PL_STATUS_IO_ERROR,
                       "%s: refusing to replace it: it is %s (move it away, or save elsewhere)",
                       dir, why);
    if (!pl_ckpt_remove(tmp)) /* this process's own, from a failed save */
        return pl_fail(PL_STATUS_IO_ERROR, "%s: in the way of the save (see the warning)", tmp);
    if (mkdir(tmp, 0777) != 0)
        return pl_fail(PL_STATUS_IO_ERROR, "%s: cannot create: %s", tmp, strerror(errno));
    pl_status st = pl_ckpt_mark(tmp);
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    pl_st_entry *params = NULL;
    int n_params = 0;
    state_list states;
    json_t *files = json_object();
    if (!st && !files) st = pl_fail(PL_STATUS_OUT_OF_MEMORY, "out of memory");
    if (!st) st = pl_st_param_entries(v.graph, &params, &n_params);
    if (!st)
        st = write_tensors(files, tmp, "model.safetensors", params, n_params, get_param, e);
    /* 16-bit with master weights: model.safetensors holds the 16-bit
     * weights (as fp32 values, exactly), this the fp32 copy the optimizer
     * updates; both are needed to go on exactly. */
    if (!st && v.master)
        st = write_tensors(files, tmp, "master.safetensors", params, n_params, get_master, e);
    free(params);
    if (!st && !(st = state_list_init(&states, e))) {
        st = write_tensors(files, tmp, "optimizer.safetensors", states.entries,
                           states.n_params * states.n_states, get_state, &states);
        state_list_free(&states);
    }
    if (!st) st = join(path, sizeof path, tmp, "state.json");
    if (!st) st = write_state_json(e, path, values, files);
    json_decref(files);
    if (!st) {
        sync_dir(tmp);
        /* An existing checkpoint of that name steps aside first. */
        bool replaced = exists && rename(dir, old) == 0;
        if (rename(tmp, dir) != 0) {
            st = pl_fail(PL_STATUS_IO_ERROR, "%s: cannot rename %s into place: %s", dir, tmp,
                         strerror(errno));
            if (replaced) rename(old, dir);
        } else if (replaced) {
            pl_ckpt_remove(old);
        }
        sync_dir(parent);
    }
    if (st) pl_ckpt_remove(tmp);
    return st;
}

/* -------------------------------------------------------------- load */

/* A healthy run saves finite values (a diverged one stops first). A NaN
 * or infinity is refused before it reaches the engine: loaded, it would
 * only show up steps later as a diverged loss. */
static pl_status check_finite(const char *path, const pl_st_entry *entries, int n,
                              const float *values) {
    for (int i = 0; i < n; i++) {
        for (int64_t k = 0; k < entries[i].numel; k++)
            if (!isfinite(values[k]))
                return pl_fail(PL_STATUS_FORMAT_ERROR,
                               "%s: tensor '%s' holds %s at element %" PRId64
                               ": refused (a healthy run saves finite values; the file is "
                               "damaged, or its run had diverged)",
                               path, entries[i].name, isnan(values[k]) ? "NaN" : "an infinity",
                               k);
        values += entries[i].numel;
    }
    return PL_STATUS_OK;
}

/* Reads one safetensors file of checkpoint dir: its checksum first, then
 * its tensors, then their values. */
static pl_status read_tensors(const state_read *state, const char *dir, const char *name,
                              const pl_st_entry *entries, int n, const char *what,
                              float **values) {
    char path[PATH_MAX];
    pl_status st = join(path, sizeof path, dir, name);
    if (!st) st = verify_file(state, path, name);
    if (!st) st = pl_st_read(path, entries, n, what, values);
    if (!st) st = check_finite(path, entries, n, *values);
    return st;
}

pl_status pl_engine_load_checkpoint(pl_engine_t *e, const char *dir,
                                    pl_checkpoint_values *values) {
    if (!e || !dir)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_load_checkpoint: %s is NULL",
                       !e ? "engine" : "dir");
    char path[PATH_MAX];
    state_read state;
    /* ZeRO-3: the weights are written into whole chunks, whose other
     * tensors must be there (a collective: first, before anything a rank
     * alone may fail at). */
    pl_status st = pl_engine_gather_params(e);
    if (!st) st = join(path, sizeof path, dir, "state.json");
    if (!st) st = read_state(e, path, &state);
    if (st) return st;
    float *weights = NULL, *moments = NULL, *masters = NULL;
    pl_st_entry *params = NULL;
    int n_params = 0;
    state_list states = {0};
    pl_engine_view v;
    pl_engine_view_get(e, &v);
    st = pl_st_param_entries(v.graph, &params, &n_params);
    if (!st) st = read_tensors(&state, dir, "model.safetensors", params, n_params, "the model",
                               &weights);
    if (!st && v.master)
        st = read_tensors(&state, dir, "master.safetensors", params, n_params,
                          "the master weights", &masters);
    if (!st) st = state_list_init(&states, e);
    if (!st)
        st = read_tensors(&state, dir, "optimizer.safetensors", states.entries,
                          states.n_params * states.n_states, "the optimizer", &moments);
    if (!st) st = pl_engine_load_open(e);
    /* Everything read and checked: now the engine changes. */
    const float *w = weights, *m = moments, *mw = masters;
    for (int i = 0; !st && i < n_params; i++) {
        const pl_tensor_t *p = pl_graph_param(v.graph, i);
        size_t numel = (size_t)pl_tensor_numel(p);
        st = pl_engine_set_param(e, p, w, numel);
        w += numel;
        if (!st && mw) { /* after set_param, which wrote the weights there too */
            st = pl_engine_master_io(e, p, NULL, mw);
            mw += numel;
        }
        for (int s = 0; !st && s < states.n_states; s++) {
            st = pl_engine_optimizer_state_io(e, i, s, NULL, m);
            m += numel;
        }
    }
    pl_engine_load_close(e, !st);
    if (!st) {
        /* The scaler goes on from the saved state when both scale; a run
         * that did not (or a file without it) starts from initial_scale. */
        pl_loss_scaler_state scaler = {.scale = state.scale,
                                       .growth_step = state.growth_step,
                                       .hysteresis_step = state.hysteresis_step};
        pl_engine_restore_position(e, state.step, state.has_scaler ? &scaler : NULL);
        if (values) *values = state.values;
    }
    free(params);
    free(weights);
    free(moments);
    free(masters);
    state_list_free(&states);
    json_decref(state.files);
    return st;
}


pl_status pl_engine_resume_checkpoint(pl_engine_t *e, const char *path,
                                      pl_checkpoint_values *values, char *loaded, size_t size) {
    if (!e || !path || !loaded || !size)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT, "pl_engine_resume_checkpoint: %s",
                       !e ? "engine is NULL" : !path ? "path is NULL" : "no room for the path");
    char state[PATH_MAX];
    pl_status st = join(state, sizeof state, path, "state.json");
    if (st) return st;
    /* One checkpoint named: it loads, or the resume is refused. */
    if (pl_ckpt_has_state(path)) {
        if ((size_t)snprintf(loaded, size, "%s", path) >= size)
            return pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", path);
        return pl_engine_load_checkpoint(e, path, values);
    }
    /* A root: the newest of its step-<N> that passes every check (a load
     * changes nothing until all is checked, so trying is safe). */
    int64_t *steps;
    int n;
    if ((st = pl_checkpoint_steps(path, &steps, &n))) return st;
    bool quiet = pl_engine_dp_rank(e) != 0; /* every rank tries; one speaks */
    char newest[PATH_MAX] = "", first_error[512] = "";
    st = n ? PL_STATUS_IO_ERROR
           : pl_fail(PL_STATUS_IO_ERROR, "%s: no checkpoint (no step-<N> directory) in it", path);
    for (int i = n - 1; i >= 0 && st; i--) {
        char dir[PATH_MAX];
        if ((size_t)snprintf(dir, sizeof dir, "%s/step-%" PRId64, path, steps[i]) >= sizeof dir) {
            st = pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", path);
            break;
        }
        st = pl_engine_load_checkpoint(e, dir, values);
        if (!st) {
            if (*newest && !quiet)
                pl_warn("resuming from %s, the newest valid checkpoint, instead of %s", dir,
                        newest);
            if ((size_t)snprintf(loaded, size, "%s", dir) >= size)
                st = pl_fail(PL_STATUS_INVALID_ARGUMENT, "checkpoint path too long: %s", dir);
        } else {
            if (!*newest) {
                snprintf(newest, sizeof newest, "%s", dir);
                snprintf(first_error, sizeof first_error, "%s", pl_last_error());
            }
            if (!quiet) pl_warn("%s fails validation: %s", dir, pl_last_error());
        }
    }
    free(steps);
    if (st && *newest)
        st = pl_fail(st, "%s: no valid checkpoint in it (the newest, %s: %s)", path, newest,
                     first_error);
    return st;
}
