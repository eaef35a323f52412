#!/usr/bin/env bash
# The installed library as a user meets it (docs/install.md): the build is
# installed into a temporary prefix with `cmake --install`, then two
# examples, copied out of the source tree, are built against that prefix
# alone, both ways a user would (pkg-config and a plain cc command line; a
# CMake project with find_package(Pleiades)), and run. Also: the installed
# headers are exactly include/'s and each compiles alone as strict C11,
# libpleiades.so carries its SONAME, and the installed CLI starts.
#
# Usage: test_install.sh BUILD-DIR SOURCE-DIR CC CMAKE [CFLAGS]
# CFLAGS go to every compile and link (the sanitizer build passes
# -fsanitize=...: a program loading an instrumented library must be too).
set -u

build=${1:?usage: test_install.sh BUILD-DIR SOURCE-DIR CC CMAKE [CFLAGS]}
src=${2:?}
cc=${3:?}
cmake=${4:?}
read -r -a cflags <<<"${5:-}"
# The examples: an op of one's own (pleiades/op.h, pipelines, a memory
# budget) and hooks of one's own (pleiades/trainer.h); each checks its own
# results, exits 0 when they hold, and runs in about a second.
programs=(custom_op trainer_hooks)
time_limit=60 # seconds per example run

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0
prefix=$tmp/prefix

fail() {
    echo "FAIL: $*" >&2
    if [ -s "$tmp/err" ]; then sed 's/^/    /' "$tmp/err" | tail -20 >&2; fi
    failures=$((failures + 1))
}
ok() { echo "ok: $*"; }

# A DESTDIR in the environment would install under $DESTDIR$prefix.
if env -u DESTDIR "$cmake" --install "$build" --prefix "$prefix" >"$tmp/out" 2>"$tmp/err"; then
    ok "cmake --install into a temporary prefix"
else
    fail "cmake --install $build --prefix $prefix"
    exit 1
fi

# --- what is installed
(cd "$src/include" && find . -name '*.h' | sort) >"$tmp/want"
(cd "$prefix/include" && find . -type f | sort) >"$tmp/got"
if cmp -s "$tmp/want" "$tmp/got"; then
    ok "installed headers are include/'s ($(wc -l <"$tmp/want") files)"
else
    fail "installed headers differ from include/'s: $(diff "$tmp/want" "$tmp/got" | grep '^[<>]' | tr '\n' ' ')"
fi
: >"$tmp/err"
for h in "$prefix"/include/pleiades.h "$prefix"/include/pleiades/*.h; do
    name=${h#"$prefix"/include/}
    echo "#include <$name>" >"$tmp/one.c"
    if ! "$cc" "${cflags[@]}" -std=c11 -pedantic -Wall -Wextra -Werror -I"$prefix/include" \
        -c "$tmp/one.c" -o "$tmp/one.o" 2>>"$tmp/err"; then
        fail "<$name> does not compile alone as C11 against the installed headers"
    fi
done
[ -s "$tmp/err" ] || ok "each installed header compiles alone (-std=c11 -pedantic -Werror)"

lib=$(find "$prefix" -name 'libpleiades.so.*.*' -type f | head -1)
if [ -n "$lib" ] && readelf -d "$lib" | grep -q 'SONAME.*\[libpleiades\.so\.0\]'; then
    ok "$(basename "$lib") has SONAME libpleiades.so.0"
else
    fail "no installed libpleiades.so.X.Y with SONAME libpleiades.so.0 (found '${lib:-nothing}')"
fi
libdir=$(dirname "${lib:-$prefix/lib/x}")

# The CLI finds the installed library beside it, whatever LD_LIBRARY_PATH says.
if env -u LD_LIBRARY_PATH "$prefix/bin/pleiades" --version >"$tmp/out" 2>"$tmp/err" &&
    grep -q '^pleiades .* (library ' "$tmp/out"; then
    ok "the installed CLI runs: $(head -1 "$tmp/out")"
else
    fail "$prefix/bin/pleiades --version"
fi

# --- the programs, out of tree: only the prefix may supply Pleiades
mkdir -p "$tmp/user"
for p in "${programs[@]}"; do cp "$src/examples/$p.c" "$tmp/user/"; done

# run HOW PROGRAM: runs a built example briefly in its own folder.
run() {
    local how=$1 exe=$2
    mkdir -p "$tmp/run-$how" && cd "$tmp/run-$how" || return
    if env -u LD_LIBRARY_PATH timeout "$time_limit" "$exe" >"$tmp/out" 2>"$tmp/err"; then
        ok "$how: $(basename "$exe") runs"
    else
        echo "    (exit $?; last output: $(tail -1 "$tmp/out"))" >>"$tmp/err"
        fail "$how: $(basename "$exe") failed"
    fi
    cd "$tmp" || return
}

# 1. pkg-config and a plain cc command line, as docs/install.md shows it
export PKG_CONFIG_PATH=$libdir/pkgconfig
if pc=$(pkg-config --cflags --libs pleiades 2>"$tmp/err"); then
    ok "pkg-config --cflags --libs pleiades: $pc"
    read -r -a pcflags <<<"$pc"
    for p in "${programs[@]}"; do
        if "$cc" "${cflags[@]}" -std=c11 -Wall -Wextra -Werror -o "$tmp/user/$p-pc" \
            "$tmp/user/$p.c" "${pcflags[@]}" -lm -Wl,-rpath,"$libdir" 2>"$tmp/err"; then
            ok "pkg-config: $p builds"
            run pkg-config "$tmp/user/$p-pc"
        else
            fail "pkg-config: $p does not build"
        fi
    done
else
    fail "pkg-config does not know the installed pleiades.pc"
fi

# 2. a CMake project with find_package(Pleiades)
if "$cmake" -S "$src/tests/install" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${cflags[*]} -Wall -Wextra -Werror" \
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON -DPL_SOURCE_DIR="$tmp/user" \
    -DPL_PROGRAMS="$(IFS=';'; echo "${programs[*]}")" >"$tmp/out" 2>"$tmp/err" &&
    "$cmake" --build "$tmp/cmake-build" >"$tmp/out" 2>"$tmp/err"; then
    ok "find_package(Pleiades): ${programs[*]} build"
    for p in "${programs[@]}"; do run cmake "$tmp/cmake-build/$p"; done
else
    cat "$tmp/out" >>"$tmp/err"
    fail "find_package(Pleiades): the CMake project does not configure or build"
fi

if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo "the installed library builds and runs two programs both ways"
