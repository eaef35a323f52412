#!/usr/bin/env bash
# The disk tier's files (--offload-dir) never outlive their run, and
# nothing else in the directory is ever touched.
#   - SIGINT, SIGTERM, kill -9: the run's files are gone right after it
#     ends (its janitor process removes them);
#   - kill -9 of the run and its janitor together (the whole process
#     group): the next run using the directory removes the dead run's
#     folder;
#   - what is not a run folder of ours (a user's file, a look-alike folder
#     without our owner file, a symlink named like a run folder, another
#     host's run, a live process's run) is left alone, and in a dead run's
#     folder only our files are removed.
# Every run is under a time limit.
#
# Usage: test_cli_offload.sh PATH-TO-PLEIADES [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_offload.sh PATH-TO-PLEIADES [TEXT]}
text=${2:-/usr/share/games/fortunes}
time_limit=120
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

if [ ! -e "$text" ]; then
    echo "no text at $text: skipping"
    finish "offload: skipped"
    exit 0
fi

# A 2 MiB budget makes this GPT evict to the disk tier at every step.
tiny=(train --model gpt --data "$text" --layers 2 --channels 64 --heads 4 --context 32
      --batch-size 8 --eval-every 0 --workers 2 --chunk-mb 0.0625 --placement auto
      --budget-mb 2)

# files DIR: the regular files under DIR, one per line.
files() { find "$1" -type f 2>/dev/null; }

# wait_for_files DIR: true once DIR holds a data file (the run has
# offloaded: not only its owner file), false after 60 s.
wait_for_files() {
    for _ in $(seq 600); do
        [ -n "$(find "$1" -type f ! -name owner 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    return 1
}

# wait_empty DIR: true once DIR holds no file, false after 10 s.
wait_empty() {
    for _ in $(seq 100); do
        [ -z "$(files "$1")" ] && return 0
        sleep 0.1
    done
    return 1
}

# start_run DIR [FLAG...]: a long run offloading into DIR, in the background: its
# pid is $run_pid, which also leads a process group of its own (the run and
# its janitor), SIGINT is at its default (a background job of a script
# would otherwise ignore it) and an alarm ends it after the time limit.
start_run() {
    local off=$1
    shift
    perl -e 'use POSIX (); POSIX::setsid(); $SIG{INT} = "DEFAULT"; alarm shift; exec @ARGV' \
        "$time_limit" "$cli" "${tiny[@]}" --steps 100000 --offload-dir "$off" "$@" \
        >"$tmp/run.out" 2>"$tmp/err" &
    run_pid=$!
}

# --- signals: the files are gone right after the run
# (saving a checkpoint every step: one may be in flight when the signal
# comes, and is abandoned cleanly: every step-<N> left is complete)
for sig in INT TERM KILL; do
    off="$tmp/off-$sig"
    mkdir -p "$off"
    start_run "$off" --checkpoint-dir "$tmp/ck-$sig" --save-every 1 --keep-last 3
    if ! wait_for_files "$off"; then
        fail "SIG$sig: the run never wrote to $off"
        kill -KILL -- "-$run_pid" 2>/dev/null
        wait "$run_pid" 2>/dev/null
        continue
    fi
    for _ in $(seq 600); do # and a checkpoint written
        [ -n "$(find "$tmp/ck-$sig" -name state.json 2>/dev/null)" ] && break
        sleep 0.1
    done
    # the run alone: the janitor is what removes its files
    kill "-$sig" "$run_pid"
    wait "$run_pid" 2>/dev/null
    if wait_empty "$off"; then
        ok "SIG$sig: the run's offload files are removed"
    else
        fail "SIG$sig: left in $off: $(files "$off" | head -3 | tr '\n' ' ')"
    fi
    torn=0
    for d in "$tmp/ck-$sig"/step-*; do
        case $d in *.tmp.*) continue ;; esac
        [ -f "$d/state.json" ] || torn=$((torn + 1))
    done
    if [ "$torn" -eq 0 ] && ls -d "$tmp/ck-$sig"/step-* >/dev/null 2>&1; then
        ok "SIG$sig: every checkpoint left is complete"
    else
        fail "SIG$sig: $torn incomplete step-<N> in $tmp/ck-$sig (or none)"
    fi
done

# --- kill -9 of the whole group (the janitor too): the next run sweeps
off="$tmp/off-group"
mkdir -p "$off"
start_run "$off"
if wait_for_files "$off"; then
    kill -KILL -- "-$run_pid"
    wait "$run_pid" 2>/dev/null
    sleep 0.5
    left=$(files "$off" | wc -l)
    if limited "$cli" "${tiny[@]}" --steps 1 --offload-dir "$off" >/dev/null 2>"$tmp/err" &&
        [ -z "$(files "$off")" ]; then
        ok "a killed run's $left file(s) removed by the next run"
    else
        fail "the next run left in $off: $(files "$off" | head -3 | tr '\n' ' ')"
    fi
else
    fail "the run never wrote to $off"
    kill -KILL -- "-$run_pid" 2>/dev/null
    wait "$run_pid" 2>/dev/null
fi

# --- only our files, only dead runs'
off="$tmp/off-mixed"
mkdir -p "$off" "$tmp/precious"
echo keep >"$tmp/precious/important.txt"
echo keep >"$off/keep.txt"
# a look-alike without an owner file
mkdir -p "$off/pleiades-offload-999999" && echo keep >"$off/pleiades-offload-999999/0.offload"
# a symlink named like a run folder, to a folder with our file names
cp "$tmp/precious/important.txt" "$tmp/precious/0.offload"
ln -s "$tmp/precious" "$off/pleiades-offload-999998"
# owner files of a dead process: this host's, another host's
sh -c 'exit 0' &
dead=$!
wait "$dead"
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
host=$(uname -n) # what gethostname(2) returns
owner() { printf 'pleiades offload run\npid %s\nstart 1\nboot %s\nhost %s\n' "$1" "$boot" "$2"; }
mkdir -p "$off/pleiades-offload-$dead"
owner "$dead" "$host" >"$off/pleiades-offload-$dead/owner"
echo ours >"$off/pleiades-offload-$dead/3.offload"
echo keep >"$off/pleiades-offload-$dead/notes.txt"
mkdir -p "$off/pleiades-offload-$((dead + 1))"
owner "$((dead + 1))" "another-$host" >"$off/pleiades-offload-$((dead + 1))/owner"
echo keep >"$off/pleiades-offload-$((dead + 1))/1.offload"
# a live process's run (this shell's)
mkdir -p "$off/pleiades-offload-$$"
start=$(awk '{ sub(/.*\) /, ""); print $20 }' /proc/$$/stat)
printf 'pleiades offload run\npid %s\nstart %s\nboot %s\nhost %s\n' "$$" "$start" "$boot" \
    "$host" >"$off/pleiades-offload-$$/owner"
echo keep >"$off/pleiades-offload-$$/2.offload"
if limited "$cli" "${tiny[@]}" --steps 1 --offload-dir "$off" >/dev/null 2>"$tmp/err"; then
    ok "a run in a directory of others' files"
else
    fail "a run in a directory of others' files failed"
fi
for f in "$off/keep.txt" "$off/pleiades-offload-999999/0.offload" "$tmp/precious/important.txt" \
    "$tmp/precious/0.offload" "$off/pleiades-offload-$dead/notes.txt" \
    "$off/pleiades-offload-$((dead + 1))/1.offload" "$off/pleiades-offload-$$/2.offload"; do
    if [ -f "$f" ]; then ok "kept: ${f#"$tmp"/}"; else fail "removed: $f"; fi
done
[ -L "$off/pleiades-offload-999998" ] || fail "removed: the symlink pleiades-offload-999998"
if [ ! -e "$off/pleiades-offload-$dead/3.offload" ]; then
    ok "a dead run's own file removed"
else
    fail "a dead run's own file was left: $off/pleiades-offload-$dead/3.offload"
fi

finish "offload files: removed however the run ends, and nothing else"
