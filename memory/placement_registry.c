/* The registry of placement policies (pleiades/placement.h): the built-ins
 * by name, and users' policies registered beside them.
 *
 * Adding a built-in policy is one file, memory/placement_NAME.c, that
 * defines `const pl_placement_policy *pl_placement_NAME(void)` against the
 * public interface (as a user would), plus one line in BUILTINS below;
 * the CLI and every other lookup find it by its policy's name from then
 * on. */
#include "util/registry.h"
#include "memory/placement.h"

/* One line per built-in (the function returning it), in the order
 * listings show them. */
#define BUILTINS(X)                \
    X(pl_placement_static)         \
    X(pl_placement_auto)           \
    X(pl_placement_static_cpu)     \
    X(pl_placement_static_cuda)    \
    X(pl_placement_lru)

/* Declared here so that a built-in needs no header (the older ones have
 * one too; a repeated declaration is allowed). */
#define DECLARE(f) const pl_placement_policy *f(void);
BUILTINS(DECLARE)
#define GETTER(f) f,
static const pl_placement_policy *(*const builtins[])(void) = {BUILTINS(GETTER)};
#define N_BUILTINS ((int)(sizeof builtins / sizeof *builtins))

static const void *builtin(int i) { return builtins[i](); }
static const char *name_of(const void *policy) {
    return ((const pl_placement_policy *)policy)->name;
}

static pl_registry registry =
    PL_REGISTRY_INIT("pl_placement", "placement policy", N_BUILTINS, builtin, name_of);

pl_status pl_placement_register(const pl_placement_policy *policy) {
    /* Every callback is optional to the engine (it skips a missing one),
     * so the name is all a policy must have. */
    return pl_registry_add(&registry, policy);
}

const pl_placement_policy *pl_placement_find(const char *name) {
    return pl_registry_find(&registry, name);
}

int pl_placement_count(void) { return pl_registry_count(&registry); }

const pl_placement_policy *pl_placement_at(int index) {
    return pl_registry_at(&registry, index);
}
