#!/usr/bin/env bash
# Ranks that cannot go on together end a `pleiades train --dp 2` job with
# a message instead of hanging or training on silently:
#   timeout  one of two ranks stopped (SIGSTOP) in the middle of training:
#            the other ends the job within --collective-timeout plus a
#            margin, naming the rank that did not arrive and the
#            collective, with a non-zero status; nothing is left running
#   data     the same --data path holding different text on the two ranks
#            (each rank started in a directory of its own, mpirun -wdir):
#            refused at start-up, naming both ranks and both fingerprints
#
# Usage: test_cli_ranks.sh PATH-TO-PLEIADES MPIEXEC timeout|data
set -u

cli=${1:?usage: test_cli_ranks.sh PATH-TO-PLEIADES MPIEXEC timeout|data}
mpiexec=${2:?usage: test_cli_ranks.sh PATH-TO-PLEIADES MPIEXEC timeout|data}
check=${3:?usage: test_cli_ranks.sh PATH-TO-PLEIADES MPIEXEC timeout|data}
time_limit=120 # seconds per CLI run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# Open MPI refuses root without these; two ranks may share a core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=("$mpiexec" --oversubscribe)
gpt=(train --model gpt --layers 2 --channels 32 --heads 2 --context 16 --batch-size 8
     --workers 1 --quiet)

# rank_pid JOB R: the pid of rank R among the processes under mpirun JOB
# (Open MPI gives each rank its number in OMPI_COMM_WORLD_RANK).
rank_pid() {
    local p
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$p"
            return
        fi
    done
}

# alive SID PID: the processes of session SID, and PID, that still run.
alive() {
    local p
    for p in $(pgrep -s "$1" 2>/dev/null) $2; do
        case $(ps -o stat= -p "$p" 2>/dev/null) in
        "" | Z*) ;;
        *) echo "$p" ;;
        esac
    done | sort -u | tr '\n' ' '
}

timeout_check() {
    local limit=5 margin=40
    # mpirun in a session of its own: whatever is left of the job at the
    # end can be found (and ended) by its process group.
    setsid "${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --data /usr/share/games/fortunes \
        --steps 1000000 --eval-every 0 --dp 2 --collective-timeout "$limit" \
        --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err" &
    local job=$! start victim=
    # Stopped once training runs (a metrics line), not during start-up.
    for _ in $(seq 600); do
        [ -s "$tmp/m.jsonl" ] && break
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    victim=$(rank_pid "$job" 1)
    if [ ! -s "$tmp/m.jsonl" ] || [ -z "$victim" ]; then
        fail "stopped rank: the job did not start training, or no rank 1 under mpirun ($job)"
    else
        kill -STOP "$victim"
        start=$SECONDS
        while kill -0 "$job" 2>/dev/null && [ $((SECONDS - start)) -lt $((limit + margin)) ]; do
            sleep 0.5
        done
        if kill -0 "$job" 2>/dev/null; then
            fail "stopped rank: the job still runs $((limit + margin)) s after rank 1 (pid $victim) was stopped, with --collective-timeout $limit"
        else
            wait "$job"
            local got=$?
            if [ "$got" -eq 0 ]; then
                fail "stopped rank: mpirun ended with status 0"
            elif ! grep -q "rank 1 did not arrive" "$tmp/err" ||
                ! grep -Eq "collective timeout: the [^,]+, collective [0-9]+ among ranks 0, 1," "$tmp/err"; then
                fail "stopped rank: status $got, but stderr does not name rank 1 and the collective"
            else
                ok "stopped rank: status $got after $((SECONDS - start)) s: $(grep -m1 'did not arrive' "$tmp/err")"
            fi
        fi
    fi
    # Nothing of the job may outlive it (zombies aside: ended, not yet
    # reaped by whoever adopted them); whatever does is continued (so
    # that it can act on a signal) and killed.
    local left=
    for _ in $(seq 20); do
        left=$(alive "$job" "$victim")
        [ -z "$left" ] && break
        sleep 0.5
    done
    if [ -n "$left" ]; then
        fail "stopped rank: processes of the job still ran at the end: $left"
        for p in $left; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    fi
    wait "$job" 2>/dev/null
}

data_check() {
    # The same relative --data path in two directories, one byte apart.
    mkdir -p "$tmp/a" "$tmp/b"
    seq 1 4000 | tr '\n' ' ' >"$tmp/a/corpus.txt"
    cp "$tmp/a/corpus.txt" "$tmp/b/corpus.txt"
    printf 'X' | dd of="$tmp/b/corpus.txt" bs=1 seek=5000 conv=notrunc status=none
    # (the program by its absolute path: -wdir moves the ranks)
    local one=("$(realpath "$cli")" "${gpt[@]}" --data corpus.txt --steps 2 --dp 2)
    limited "${mpi[@]}" -np 1 -wdir "$tmp/a" "${one[@]}" : -np 1 -wdir "$tmp/b" "${one[@]}" \
        >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" -ne 0 ] && grep -q "rank 0 read" "$tmp/err" && grep -q "rank 1 read" "$tmp/err" &&
        grep -q "corpus.txt" "$tmp/err" && [ "$(grep -Eo 'crc32 [0-9a-f]{8}' "$tmp/err" | sort -u | wc -l)" -ge 2 ]; then
        ok "different data under one --data path refused: $(grep -m1 'corpus.txt' "$tmp/err")"
    else
        fail "different data on the two ranks: exit $got, expected a refusal naming both ranks and both fingerprints"
    fi
    # The same contents in both directories: accepted.
    cp "$tmp/a/corpus.txt" "$tmp/b/corpus.txt"
    if limited "${mpi[@]}" -np 1 -wdir "$tmp/a" "${one[@]}" : -np 1 -wdir "$tmp/b" "${one[@]}" \
        >"$tmp/out" 2>"$tmp/err"; then
        ok "the same data in two directories trains"
    else
        fail "the same data in two directories: the run failed"
    fi
}

case $check in
timeout) timeout_check ;;
data) data_check ;;
*) echo "test_cli_ranks.sh: unknown check '$check' (timeout or data)" >&2; exit 2 ;;
esac
finish "rank checks ($check) passed"
