#!/usr/bin/env bash
# `pleiades trace-summary` scales with the number of tracks: 200 000
# tracks must finish well within a time limit (each took a linear search
# of every track per event before, and per-rank collectives and per-stage
# bubbles scanned every event or track once per rank or stage: minutes).
#
# Two generated traces, each of 200 000 tracks:
#   plain   one slice per track (the loader's track lookup);
#   ranked  every track a rank of its own ("rank N / CPU 0") holding a
#           forward of one of 1024 stages and a collective (the per-rank
#           communication and per-stage bubble parts).
# The figures printed are checked where they are known, so a fast but
# wrong summary fails too.
#
# Usage: test_trace_summary_tracks.sh PLEIADES
set -u

cli=${1:?usage: test_trace_summary_tracks.sh PLEIADES}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0
tracks=200000
# Generous: the fixed summary takes a few seconds of CPU (more under the
# sanitizers); the quadratic one took minutes.
limit=60

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# run NAME: trace-summary on $tmp/NAME.json under the time limit.
run() {
    local start end status
    start=$(date +%s)
    timeout "$limit" "$cli" trace-summary "$tmp/$1.json" >"$tmp/$1.out" 2>"$tmp/$1.err"
    status=$?
    end=$(date +%s)
    if [ "$status" -eq 124 ]; then
        fail "$1: $tracks tracks: still running after ${limit} s (killed)"
        return 1
    elif [ "$status" -ne 0 ]; then
        fail "$1: exit status $status: $(head -3 "$tmp/$1.err")"
        return 1
    fi
    echo "ok: $1: $tracks tracks in $((end - start)) s"
}

awk -v n="$tracks" 'BEGIN {
    printf "{\"traceEvents\":["
    for (i = 0; i < n; i++)
        printf "%s{\"ph\":\"X\",\"name\":\"F t%d\",\"pid\":1,\"tid\":%d,\"ts\":%d,\"dur\":5}",
            i ? "," : "", i, i, i
    printf "]}\n"
}' >"$tmp/plain.json"
if run plain; then
    grep -q "^  $tracks tasks on $tracks tracks, 0 flows" "$tmp/plain.out" ||
        fail "plain: no '$tracks tasks on $tracks tracks' line"
    [ "$(grep -c '^  1/[0-9]* ' "$tmp/plain.out")" -eq "$tracks" ] ||
        fail "plain: not one line per track in the Tracks table"
fi

# Track i: rank i, a forward of stage i mod 1024 at [i, i+5) µs and a
# collective at [i+3, i+8): 2 of its 5 µs hidden behind that rank's
# forward (40.0 %).
awk -v n="$tracks" 'BEGIN {
    printf "{\"traceEvents\":["
    for (i = 0; i < n; i++) {
        printf "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"rank %d / CPU 0\"}},",
            i ? "," : "", i, i
        printf "{\"ph\":\"X\",\"name\":\"F t%d\",\"pid\":1,\"tid\":%d,\"ts\":%d,\"dur\":5,\"args\":{\"phase\":\"F\",\"stage\":%d,\"microbatch\":0}},",
            i, i, i, i % 1024
        printf "{\"ph\":\"X\",\"name\":\"C allreduce\",\"pid\":1,\"tid\":%d,\"ts\":%d,\"dur\":5,\"args\":{\"phase\":\"C\"}}",
            i, i + 3
    }
    printf "]}\n"
}' >"$tmp/ranked.json"
if run ranked; then
    [ "$(grep -c '^  rank [0-9]*: 1 collective(s), 0.005 ms, 40.0% of it hidden' "$tmp/ranked.out")" \
        -eq "$tracks" ] || fail "ranked: not one collective line per rank, 40.0% hidden"
    # Stage 0 holds tracks 0, 1024, 2048, ...: ceil(200000 / 1024) of them.
    per_stage=$(((tracks + 1023) / 1024))
    grep -q "^  stage 0: .*, $per_stage tasks on $per_stage workers;" "$tmp/ranked.out" ||
        fail "ranked: stage 0 not $per_stage tasks on $per_stage workers: $(grep '^  stage 0:' "$tmp/ranked.out")"
    grep -q "^  stage 1023: bubble" "$tmp/ranked.out" || fail "ranked: no line for stage 1023"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo ok
