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
#   bench/      benchmarks: the public API, their helper, and the kernel
#               headers of ops/ that a kernel-level benchmark times
#   cli/        the command line: its own files, util/, the public API
#   collectives/ MPI collectives as StarPU codelets: collectives/, util/,
#               public API
#   engine/     graph → tasks: everything above except checkpoint/
#   checkpoint/ checkpoint formats: the engine only through
#               engine/engine_state.h (never a field of struct pl_engine)
#   trainer/    the trainer and its hooks: trainer/, util/, the public API
#               only (the built-in hooks are written as a user's would be),
#               and the protobuf-c code generated for TensorBoard events
#   examples/   the public API only (and their own helpers beside them)
# Each project include ("...") of a file in these folders is checked; the
# test fails naming the file, the line and the rule it breaks.
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

# check DIR ALLOWED-REGEX: every '#include "X"' in DIR/**.{c,h,cu} must
# match ALLOWED-REGEX.
check() {
    local dir=$1 allowed=$2
    while IFS= read -r hit; do
        file=${hit%%:*}
        rest=${hit#*:}
        line=${rest%%:*}
        header=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"${rest#*:}")
        [ -n "$header" ] || continue
        if ! grep -Eq "^($allowed)$" <<<"$header"; then
            echo "FAIL: $file:$line includes \"$header\" ($dir/ may include only: $allowed)"
            failures=$((failures + 1))
        fi
    done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
        '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir")
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
check bench      'pleiades\.h|bench_util\.h|ops/[a-z0-9_]+\.h'
check cli        'pleiades\.h|[a-z_]+\.h|util/[a-z_]+\.h'
check collectives 'pleiades\.h|util/[a-z_]+\.h|collectives/[a-z_]+\.h'
check engine     'pleiades\.h|(util|memory|scheduling|trace|graph|engine|optim|collectives)/[a-z0-9_/]+\.h'
check checkpoint 'pleiades\.h|(util|checkpoint)/[a-z_/]+\.h|graph/error\.h|engine/engine_state\.h'
check trainer    'pleiades\.h|util/[a-z_]+\.h|trainer/[a-z_/]+\.h|[a-z_]+\.pb-c\.h'
check examples   'pleiades\.h|[a-z_]+\.h'

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
