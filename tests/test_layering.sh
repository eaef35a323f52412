#!/usr/bin/env bash
# The layering rule (docs/architecture.md, "Layers"): layers call only downward.
#   include/    the public API: no project header
#   util/       the bottom layer: only util/ and the public API
#   ops/        the built-in ops, written as a user's op would be: ops/,
#               util/, public API (never the engine or graph internals)
#   memory/, scheduling/: their own folder, util/, public API;
#               never graph/ or engine/ (above them) nor each other's
#   trace/      trace writers: trace/, util/, public API
#   data/       datasets and the batch loader: data/, util/, public API
#   optim/      optimizer updates and schedules: optim/, util/, public API,
#               and the CUDA launchers of ops/cuda/*.h
#   graph/      tensors and ops: graph/, util/, public API
#   models/     whole models built of ops (the GPT): models/, util/, the
#               public API only, as a user's model would be
#   bench/      benchmarks: pleiades.h, their helper (bench_util.h), and the
#               kernel headers of ops/ a kernel benchmark times (kernels.h,
#               gemm.h, gemm_bf16.h, cuda/kernels.h)
#   cli/        the command line: its own files (beside it), util/, pleiades.h
#   collectives/ MPI collectives as StarPU codelets: collectives/, util/,
#               public API
#   engine/     graph -> tasks: everything above except checkpoint/; inside
#               it, the core and its modules (below)
#   checkpoint/ checkpoint formats: checkpoint/, util/, pleiades.h, and the
#               engine only through engine/engine_state.h (never a field of
#               struct pl_engine)
#   trainer/    the trainer and its hooks: trainer/, util/, pleiades.h only
#               (the built-in hooks are written as a user's would be), and
#               the protobuf-c code generated for TensorBoard events
#   examples/   pleiades.h only (and their own helpers beside them)
# Each project include of a file in these folders is checked: "..." and
# <...> naming pleiades*.h or a project folder; the test fails naming the
# file, the line and the rule it breaks.
#
# Inside engine/ (docs/architecture.md, "The engine: a core and feature
# modules"), each file engine/NAME.c or NAME.h belongs to component NAME,
# listed below as one of three kinds:
#   interface  what the core offers its modules: its struct and functions
#              (engine_internal.h, runtime_internal.h), the hooks through
#              which a module asks another and the shared task slots
#              (hooks.h, hooks.c), the gradient reductions' state
#              (grad_reduction.h, .c), the activation memory counted as
#              tasks run and the one way to drop an activation
#              (activation_memory.h, .c). Includes of engine/ only
#              interface headers.
#   module     a feature with its own header and opaque state: includes of
#              engine/ only its own header and the interface headers, never
#              another module's header nor the core's own (what it needs of
#              another module goes through e->hooks).
#   core       the rest (engine.c, step.c, ...): any engine/ header (the
#              core calls the modules, downward).
# A new module is one more name in ENGINE_MODULES; a file of engine/ in no
# list fails. And the includes among components (X.c and X.h as one) make
# no circle; the test names every circle with its files. It prints the
# figures: files in include circles, module-to-module includes.
#
# With a C compiler as second argument, each topic header of the public API
# (include/pleiades/*.h) must also compile on its own.
#
# Usage: test_layering.sh SOURCE-DIR [CC]
set -u
src=${1:?usage: test_layering.sh SOURCE-DIR [CC]}
cc=${2:-}
cd "$src" || exit 1
failures=0

# The project includes of a file, one "LINE HEADER" per line: "..." ones,
# and <...> ones naming pleiades*.h or a file of a project folder.
project_includes() {
    awk '/^[ \t]*#[ \t]*include[ \t]*["<]/ {
        h = $0
        sub(/^[ \t]*#[ \t]*include[ \t]*/, "", h)
        quoted = h ~ /^"/
        sub(/^["<]/, "", h)
        sub(/[">].*/, "", h)
        if (quoted || h ~ /^(pleiades|util|ops|memory|scheduling|trace|data|optim|graph|models|bench|cli|collectives|engine|checkpoint|trainer|examples)[\/.]/)
            print FNR, h
    }' "$1"
}

# check DIR ALLOWED-REGEX [beside]: every project include of DIR/**.{c,h,cu}
# must match ALLOWED-REGEX; with `beside`, a header named without a folder
# must also be a file beside the one including it (the folder's own).
check() {
    local dir=$1 allowed=$2 beside=${3:-}
    while IFS= read -r file; do
        while read -r line header; do
            if ! grep -Eq "^($allowed)$" <<<"$header"; then
                echo "FAIL: $file:$line includes \"$header\" ($dir/ may include only: $allowed)"
                failures=$((failures + 1))
            elif [ -n "$beside" ] && [[ $header != */* && $header != pleiades.h ]] &&
                [ ! -e "$(dirname "$file")/$header" ]; then
                echo "FAIL: $file:$line includes \"$header\", which is not a file of $dir/ ($dir/ may include only its own files, beside it)"
                failures=$((failures + 1))
            fi
        done < <(project_includes "$file")
    done < <(find "$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
}

check include    'pleiades(/[a-z_]+)?\.h'
check util       'pleiades\.h|util/[a-z_]+\.h'
check ops        'pleiades(/[a-z_]+)?\.h|util/[a-z_]+\.h|ops/[a-z0-9_/]+\.(h|cuh)'
check memory     'pleiades\.h|util/[a-z_]+\.h|memory/[a-z_]+\.h'
check scheduling 'pleiades\.h|util/[a-z_]+\.h|scheduling/[a-z_]+\.h'
check trace      'pleiades\.h|util/[a-z_]+\.h|trace/[a-z_]+\.h'
check data       'pleiades\.h|util/[a-z_]+\.h|data/[a-z_]+\.h'
check optim      'pleiades\.h|util/[a-z_]+\.h|optim/[a-z_]+\.h|ops/cuda/[a-z_]+\.h'
check graph      'pleiades\.h|util/[a-z_]+\.h|graph/[a-z_]+\.h'
check models     'pleiades\.h|util/[a-z_]+\.h|models/[a-z_]+\.h'
check bench      'pleiades\.h|bench_util\.h|ops/(kernels|gemm|gemm_bf16|cuda/kernels)\.h'
check cli        'pleiades\.h|[a-z_]+\.h|util/[a-z_]+\.h' beside
check collectives 'pleiades\.h|util/[a-z_]+\.h|collectives/[a-z_]+\.h'
check engine     'pleiades\.h|(util|memory|scheduling|trace|graph|engine|optim|collectives)/[a-z0-9_/]+\.h'
check checkpoint 'pleiades\.h|(util|checkpoint)/[a-z_/]+\.h|engine/engine_state\.h'
check trainer    'pleiades\.h|util/[a-z_]+\.h|trainer/[a-z_/]+\.h|[a-z_]+\.pb-c\.h'
check examples   'pleiades\.h|[a-z_]+\.h' beside

# Inside engine/: the core, its interface and its modules (see the top).
ENGINE_INTERFACE='engine_internal runtime_internal hooks grad_reduction activation_memory'
ENGINE_MODULES='check_finite clip data_parallel loss_scaler offload pipeline_ranks placement
    recompute task_fusion tied_grads zero3'
ENGINE_CORE='engine engine_state gradcheck op_tasks param_init pipeline runtime step trace'

# engine_kind NAME: sets `kind` to interface, module, core or none.
engine_kind() {
    local w
    kind=none
    for w in $ENGINE_INTERFACE; do [ "$w" = "$1" ] && kind=interface; done
    for w in $ENGINE_MODULES; do [ "$w" = "$1" ] && kind=module; done
    for w in $ENGINE_CORE; do [ "$w" = "$1" ] && kind=core; done
}

interface_list=$(for w in $ENGINE_INTERFACE; do
    [ -e "engine/$w.h" ] && printf 'engine/%s.h ' "$w"; done)
module_includes=0
engine_edges=$(mktemp)
trap 'rm -f "$engine_edges"' EXIT
for file in engine/*.c engine/*.h; do
    [ -e "$file" ] || continue
    name=${file#engine/}
    name=${name%.*}
    engine_kind "$name"
    from=$kind
    echo "N $name $file" >>"$engine_edges"
    if [ "$from" = none ]; then
        echo "FAIL: $file: '$name' is in none of ENGINE_INTERFACE, ENGINE_MODULES, ENGINE_CORE of tests/test_layering.sh (a new module: add it to ENGINE_MODULES)"
        failures=$((failures + 1))
        continue
    fi
    while read -r line header; do
        [[ $header == engine/* ]] || continue
        to_name=${header#engine/}
        to_name=${to_name%.*}
        [ "$to_name" = "$name" ] && continue
        echo "E $name $to_name" >>"$engine_edges"
        engine_kind "$to_name"
        if [ "$from" = module ] && [ "$kind" != interface ]; then
            [ "$kind" = module ] && module_includes=$((module_includes + 1))
            echo "FAIL: $file:$line includes \"$header\" (engine module $name may include of engine/ only engine/$name.h and the core's interface: ${interface_list% }; what it needs of another module goes through e->hooks, engine/hooks.h)"
            failures=$((failures + 1))
        elif [ "$from" = interface ] && [ "$kind" != interface ]; then
            echo "FAIL: $file:$line includes \"$header\" (the engine's interface, $name, may include of engine/ only the interface: ${interface_list% })"
            failures=$((failures + 1))
        fi
    done < <(project_includes "$file")
done
# Circles: strongly connected components (Tarjan) of the graph whose nodes
# are components (X.c and X.h together) and whose edges are includes.
circles=$(awk '
$1 == "N" { if (!($2 in files)) node[++nn] = $2; files[$2] = files[$2] " " $3; nf[$2]++ }
$1 == "E" && !(($2, $3) in seen) { seen[$2, $3]; adj[$2, ++deg[$2]] = $3 }
function strong(v,   i, w) {
    num[v] = low[v] = ++idx
    stk[++sp] = v
    on[v] = 1
    for (i = 1; i <= deg[v]; i++) {
        w = adj[v, i]
        if (!(w in num)) {
            strong(w)
            if (low[w] < low[v]) low[v] = low[w]
        } else if (on[w] && num[w] < low[v]) low[v] = num[w]
    }
    if (low[v] == num[v]) {
        comp = ""
        n = k = 0
        do {
            w = stk[sp--]
            on[w] = 0
            comp = comp files[w]
            n += nf[w]
            k++
        } while (w != v)
        if (k > 1) { print n, comp; total += n }
    }
}
END {
    for (i = 1; i <= nn; i++) if (!(node[i] in num)) strong(node[i])
    print "total", total + 0
}' "$engine_edges")
circle_files=$(sed -n 's/^total //p' <<<"$circles")
while read -r n list; do
    [ "$n" = total ] && continue
    echo "FAIL: include circle in engine/ ($n files):$list (engine/hooks.h lets a module ask another without including it)"
    failures=$((failures + 1))
done <<<"$circles"
echo "engine: $circle_files files in include circles, $module_includes module-to-module includes"

if [ -n "$cc" ]; then
    for h in include/pleiades/*.h; do
        if ! echo "#include \"${h#include/}\"" |
            "$cc" -std=c11 -Wall -Wextra -Werror -fsyntax-only -Iinclude -x c -; then
            echo "FAIL: $h does not compile on its own"
            failures=$((failures + 1))
        fi
    done
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures include(s) break the layering"
    exit 1
fi
echo "layering: every include goes downward"
