#!/usr/bin/env bash
# `pleiades trace-summary` scales with the number of tracks: a trace of
# 200 000 tracks must take at most 40 times as long as one of 20 000 (10
# times is linear; quadratic, as before, is 100 times: each event's track
# was a linear search of every track, and per-rank collectives and
# per-stage bubbles rescanned every event or track once per rank or stage).
# The ratio, not a time, is the bound, so that a slow or loaded machine or
# a sanitizer build passes it and a quadratic summary fails it anywhere;
# the 200 000-track run is killed once past the bound (at least 60 s).
#
# Two generated traces, each at both sizes:
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
small=20000
max_ratio=40

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run NAME N LIMIT_S: trace-summary on $tmp/NAME-N.json, killed after
# LIMIT_S seconds; its time in ms in $elapsed. False (after a message)
# when it failed or was killed.
run() {
    local start status
    start=$(now_ms)
    timeout "$3" "$cli" trace-summary "$tmp/$1-$2.json" >"$tmp/$1-$2.out" 2>"$tmp/$1-$2.err"
    status=$?
    elapsed=$(($(now_ms) - start))
    if [ "$status" -eq 124 ]; then
        fail "$1: $2 tracks: still running after $3 s (killed)"
        return 1
    elif [ "$status" -ne 0 ]; then
        fail "$1: $2 tracks: exit status $status: $(head -3 "$tmp/$1-$2.err")"
        return 1
    fi
}

# scaled NAME: times NAME at $small then $tracks tracks; true when the
# larger ran within max_ratio times the smaller's time.
scaled() {
    run "$1" "$small" 600 || return 1
    local base=$elapsed
    local limit=$(((base * max_ratio + 999) / 1000))
    [ "$limit" -ge 60 ] || limit=60
    run "$1" "$tracks" "$limit" || return 1
    local ratio=$((elapsed * 10 / (base > 0 ? base : 1)))
    if [ "$elapsed" -gt $((base * max_ratio)) ]; then
        fail "$1: $tracks tracks took $elapsed ms, $((ratio / 10)).$((ratio % 10)) times" \
            "the $base ms of $small (at most $max_ratio)"
        return 1
    fi
    echo "ok: $1: $small tracks in $base ms, $tracks in $elapsed ms" \
        "($((ratio / 10)).$((ratio % 10)) times)"
}

for n in "$small" "$tracks"; do
    awk -v n="$n" 'BEGIN {
        printf "{\"traceEvents\":["
        for (i = 0; i < n; i++)
            printf "%s{\"ph\":\"X\",\"name\":\"F t%d\",\"pid\":1,\"tid\":%d,\"ts\":%d,\"dur\":5}",
                i ? "," : "", i, i, i
        printf "]}\n"
    }' >"$tmp/plain-$n.json"
    # Track i: rank i, a forward of stage i mod 1024 at [i, i+5) µs and a
    # collective at [i+3, i+8): 2 of its 5 µs hidden behind that rank's
    # forward (40.0 %).
    awk -v n="$n" 'BEGIN {
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
    }' >"$tmp/ranked-$n.json"
done

if scaled plain; then
    out="$tmp/plain-$tracks.out"
    grep -q "^  $tracks tasks on $tracks tracks, 0 flows" "$out" ||
        fail "plain: no '$tracks tasks on $tracks tracks' line"
    [ "$(grep -c '^  1/[0-9]* ' "$out")" -eq "$tracks" ] ||
        fail "plain: not one line per track in the Tracks table"
fi

if scaled ranked; then
    out="$tmp/ranked-$tracks.out"
    [ "$(grep -c '^  rank [0-9]*: 1 collective(s), 0.005 ms, 40.0% of it hidden' "$out")" \
        -eq "$tracks" ] || fail "ranked: not one collective line per rank, 40.0% hidden"
    # Stage 0 holds tracks 0, 1024, 2048, ...: ceil(200000 / 1024) of them.
    per_stage=$(((tracks + 1023) / 1024))
    grep -q "^  stage 0: .*, $per_stage tasks on $per_stage workers;" "$out" ||
        fail "ranked: stage 0 not $per_stage tasks on $per_stage workers: $(grep '^  stage 0:' "$out")"
    grep -q "^  stage 1023: bubble" "$out" || fail "ranked: no line for stage 1023"
fi

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo ok
