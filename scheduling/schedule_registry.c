/* The registry of pipeline schedules (pleiades/schedule.h): the built-ins
 * by name, and users' schedules registered beside them.
 *
 * Adding a built-in schedule is one file, scheduling/schedule_NAME.c,
 * that defines `const pl_schedule_def pl_schedule_NAME` against the public
 * interface (as a user would), plus one line in BUILTINS below; the CLI
 * and every other lookup find it by its def's name from then on. The
 * pl_schedule_kind enum is not extended: it stays for API compatibility
 * with the schedules it names (pl_pipeline_builtin), and newer built-ins
 * are reached by name alone. */
#include <string.h>

#include "util/error.h"
#include "util/registry.h"
#include "scheduling/pipeline.h"

/* One line per built-in, in the order listings show them. */
#define BUILTINS(X)              \
    X(pl_schedule_1f1b)          \
    X(pl_schedule_interleaved)   \
    X(pl_schedule_zb_h1)         \
    X(pl_schedule_gpipe)         \
    X(pl_schedule_zbv)

/* Declared here so that a built-in needs no header (the older ones are in
 * the public API too; a repeated declaration is allowed). */
#define DECLARE(def) extern const pl_schedule_def def;
BUILTINS(DECLARE)
#define ADDRESS(def) &def,
static const pl_schedule_def *const builtins[] = {BUILTINS(ADDRESS)};
#define N_BUILTINS ((int)(sizeof builtins / sizeof *builtins))

static const void *builtin(int i) { return builtins[i]; }
static const char *name_of(const void *def) { return ((const pl_schedule_def *)def)->name; }

static pl_registry registry =
    PL_REGISTRY_INIT("pl_schedule", "schedule", N_BUILTINS, builtin, name_of);

pl_status pl_schedule_register(const pl_schedule_def *def) {
    /* What pl_engine_new would refuse later is refused here, where the
     * mistake is made. */
    if (def && def->name && strcmp(def->name, "none") == 0)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_schedule_register: 'none' is no schedule's name: it stands for "
                       "the non-pipelined run (the CLI's --schedule none)");
    if (def && def->name && *def->name && !def->build)
        return pl_fail(PL_STATUS_INVALID_ARGUMENT,
                       "pl_schedule_register: schedule '%s' has no build function",
                       def->name);
    return pl_registry_add(&registry, def);
}

const pl_schedule_def *pl_schedule_find(const char *name) {
    return pl_registry_find(&registry, name);
}

int pl_schedule_count(void) { return pl_registry_count(&registry); }

const pl_schedule_def *pl_schedule_at(int index) { return pl_registry_at(&registry, index); }

/* The enum's pipelined values, frozen (see above). */
const pl_schedule_def *pl_pipeline_builtin(pl_schedule_kind kind) {
    switch (kind) {
    case PL_SCHEDULE_1F1B: return &pl_schedule_1f1b;
    case PL_SCHEDULE_ZB_H1: return &pl_schedule_zb_h1;
    case PL_SCHEDULE_INTERLEAVED: return &pl_schedule_interleaved;
    default: return NULL;
    }
}
