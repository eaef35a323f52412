#!/usr/bin/env bash
# `pleiades trace-summary` on a real trace: test_trace writes one (a 1F1B
# GPT step over 2 stages) into a temporary directory, then the summary must
# print a bubble line per stage with the theoretical value, per-track busy
# times and the critical path; with --png (when gnuplot is installed) it
# must write a non-empty PNG, and without gnuplot on PATH it must fail with
# a message naming gnuplot. Malformed input is an error naming the file
# and where it breaks.
#
# The Gantt chart's labels and layout are checked on the gnuplot script
# that PLEIADES_GANTT_SCRIPT makes trace-summary write beside the PNG
# (written even without gnuplot): on traces of known order and widths,
# each item (a run of adjacent slices of one phase and microbatch on one
# track) is labelled once with its microbatch, in the schedule's order,
# "m/cC" with several chunks, and slices too narrow for the text are not;
# the key lies right of the plot and the time is the x axis's label.
#
# Usage: test_trace_summary.sh PATH-TO-test_trace PATH-TO-pleiades
set -u

gen=${1:?usage: test_trace_summary.sh TEST_TRACE PLEIADES}
cli=${2:?usage: test_trace_summary.sh TEST_TRACE PLEIADES}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

if ! "$gen" "$tmp" >"$tmp/gen.out" 2>&1; then
    cat "$tmp/gen.out" >&2
    fail "test_trace could not produce a trace"
    exit 1
fi

"$cli" trace-summary "$tmp/trace.json" >"$tmp/out" 2>"$tmp/err"
status=$?
cat "$tmp/out"
[ "$status" -eq 0 ] || fail "trace-summary exit status $status: $(cat "$tmp/err")"
for stage in 0 1; do
    grep -q "^  stage $stage: bubble [0-9.-]* measured, 0.2500 theoretical" "$tmp/out" ||
        fail "no bubble line for stage $stage with the theoretical 0.2500"
done
grep -q "^Critical path: [0-9.]* ms over [0-9]* tasks" "$tmp/out" ||
    fail "no critical path line"
grep -q "^  stage 0 / CPU [0-9]*  *[0-9]" "$tmp/out" || fail "no per-track line"
# Fused op tasks (the engine's default): fewer StarPU tasks than events.
tasks=$(sed -n 's/^  \([0-9]*\) tasks on .*/\1/p' "$tmp/out")
ran=$(sed -n 's/^  ran as \([0-9]*\) StarPU tasks: .*/\1/p' "$tmp/out")
[ -n "$ran" ] && [ -n "$tasks" ] && [ "$ran" -lt "$tasks" ] ||
    fail "fused op tasks: 'ran as' line missing or not fewer than $tasks tasks ('$ran')"
# Events naming the same fused task count once.
printf '%s\n' '{"traceEvents":[' \
    '{"ph":"X","name":"F a mb0","pid":1,"tid":1,"ts":0,"dur":10,"args":{"phase":"F","microbatch":0,"stage":0,"fused_task":7}},' \
    '{"ph":"X","name":"F b mb0","pid":1,"tid":1,"ts":10,"dur":10,"args":{"phase":"F","microbatch":0,"stage":0,"fused_task":7}},' \
    '{"ph":"X","name":"F a mb1","pid":1,"tid":1,"ts":30,"dur":10,"args":{"phase":"F","microbatch":1,"stage":0,"fused_task":8}},' \
    '{"ph":"X","name":"O opt","pid":1,"tid":1,"ts":50,"dur":10,"args":{"phase":"O","microbatch":-1,"stage":0}}' \
    ']}' >"$tmp/fused.json"
"$cli" trace-summary "$tmp/fused.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "fused: exit status $?: $(cat "$tmp/err")"
grep -q "^  ran as 3 StarPU tasks: 2 fused ones holding 3 of the tasks above, 1 on their own" \
    "$tmp/out" || fail "fused: $(grep 'ran as' "$tmp/out")"
sed 's/,"fused_task":[0-9]*//' "$tmp/fused.json" >"$tmp/plain.json"
"$cli" trace-summary "$tmp/plain.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "plain: exit status $?: $(cat "$tmp/err")"
grep -q "^  4 tasks on" "$tmp/out" && ! grep -q "ran as" "$tmp/out" ||
    fail "no fused task, yet a 'ran as' line (or no task line)"

# Idle by cause on the real trace: every track's head, tail, deps and
# between add up to its idle time in the Tracks table (the engine writes
# args.ready_ts on every task), and gaps between tasks are counted.
"$cli" trace-summary "$tmp/trace.json" >"$tmp/out" 2>"$tmp/err"
awk '
    /^Tracks/ { part = 1; next }
    /^Idle by cause/ { part = 2; next }
    /^$/ { part = 0 }
    part == 1 && /^  stage/ { idle[$1 " " $2 " " $3 " " $4 " " $5] = $(NF - 1) }
    part == 2 && /^  stage/ {
        name = $1 " " $2 " " $3 " " $4 " " $5
        sum = $6 + $7 + $8 + $9; seen++
        if (!(name in idle)) { print "no Tracks line for " name; bad = 1; next }
        d = sum - idle[name]; if (d < 0) d = -d
        if (d > 0.005) { print name ": causes add up to " sum " ms, idle " idle[name]; bad = 1 }
        gaps += $10
    }
    END { if (seen < 2) { print "fewer than 2 stage tracks in Idle by cause"; bad = 1 }
          if (gaps < 2) { print "no gaps between tasks counted"; bad = 1 }
          exit bad }' "$tmp/out" >"$tmp/idle.err" ||
    fail "idle by cause on the engine's trace: $(cat "$tmp/idle.err")"
# A trace of known times (µs). Track 1/1: a fused task of two ops, ready at
# 10, run 10-20 and 21-30 (1 between its ops); the next ready at 25 while
# the first ran, started at 35 (5 between); the next ready at 52, after
# the worker went idle at 45 (7 waiting for dependencies), started at 60 (8
# between); the last without ready_ts, 5 after (not split). Track 1/2 spans
# 0-100. Head 10, tail 20; between 1 + 5 + 8 = 14 over 2 gaps, median 8.
printf '%s\n' '{"traceEvents":[' \
    '{"ph":"X","name":"F a mb0","pid":1,"tid":1,"ts":10,"dur":10,"args":{"phase":"F","microbatch":0,"stage":0,"fused_task":1,"ready_ts":10}},' \
    '{"ph":"X","name":"F b mb0","pid":1,"tid":1,"ts":21,"dur":9,"args":{"phase":"F","microbatch":0,"stage":0,"fused_task":1,"ready_ts":20}},' \
    '{"ph":"X","name":"F a mb1","pid":1,"tid":1,"ts":35,"dur":10,"args":{"phase":"F","microbatch":1,"stage":0,"ready_ts":25}},' \
    '{"ph":"X","name":"B a mb0","pid":1,"tid":1,"ts":60,"dur":10,"args":{"phase":"B","microbatch":0,"stage":0,"ready_ts":52}},' \
    '{"ph":"X","name":"B a mb1","pid":1,"tid":1,"ts":75,"dur":5,"args":{"phase":"B","microbatch":1,"stage":0}},' \
    '{"ph":"X","name":"F x mb0","pid":1,"tid":2,"ts":0,"dur":100,"args":{"phase":"F","microbatch":0,"stage":1,"ready_ts":0}}' \
    ']}' >"$tmp/ready.json"
"$cli" trace-summary "$tmp/ready.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "ready: exit status $?: $(cat "$tmp/err")"
grep -q '^  1/1  *0\.010  *0\.020  *0\.007  *0\.014  *2  *8\.0  (+0\.005 ms before slices without ready_ts)$' \
    "$tmp/out" || fail "ready: track 1/1 split wrongly: $(grep '^  1/1 ' "$tmp/out" | tail -1)"
grep -q '^  1/2  *0\.000  *0\.000  *0\.000  *0\.000  *0  *0\.0$' "$tmp/out" ||
    fail "ready: track 1/2 split wrongly: $(grep '^  1/2 ' "$tmp/out" | tail -1)"
# Without ready_ts (another tool's trace), the split is not made up.
"$cli" trace-summary "$tmp/plain.json" >"$tmp/out" 2>"$tmp/err"
grep -q "^(no args.ready_ts in this trace: idle time is not split by cause)" "$tmp/out" &&
    ! grep -q "^Idle by cause" "$tmp/out" || fail "plain: idle split without ready_ts"

# Collectives: their time, what compute covered, and their waits for the
# other ranks (args.wait_us) told apart from moving the data. Two of 4 and
# 6 ms, the first waiting 3 (its wait no longer than its slice: 9 is
# clipped to 6, the second's); compute covers 2 ms of the first.
printf '%s\n' '{"traceEvents":[' \
    '{"ph":"X","name":"W a mb0","pid":1,"tid":0,"ts":0,"dur":2000,"args":{"phase":"W","microbatch":0,"stage":0}},' \
    '{"ph":"X","name":"C allreduce.b0","pid":1,"tid":1,"ts":0,"dur":4000,"args":{"phase":"C","bytes":4096,"wait_us":3000}},' \
    '{"ph":"X","name":"C allreduce.b1","pid":1,"tid":1,"ts":5000,"dur":6000,"args":{"phase":"C","bytes":4096,"wait_us":9000}}' \
    ']}' >"$tmp/comm.json"
"$cli" trace-summary "$tmp/comm.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "collectives: exit status $?: $(cat "$tmp/err")"
grep -q "^Communication (data parallelism): 2 collective(s), 10.000 ms, 20.0% of it hidden behind computation" \
    "$tmp/out" && grep -q "^  9.000 ms of it waiting for the other ranks to arrive, 1.000 ms moving and summing data" \
    "$tmp/out" || fail "collectives: $(grep -A1 Communication "$tmp/out")"

# A trace merged over ranks (stages across ranks): each rank's
# collectives against its own computation only. Rank 0's 2-ms collective
# overlaps its own forward for 1 ms (50 %); rank 1's overlaps only rank
# 0's forward (0 %, though 50 % if other ranks' work counted).
printf '%s\n' '{"traceEvents":[' \
    '{"ph":"M","name":"thread_name","pid":1,"tid":0,"args":{"name":"rank 0 / stage 0 / CPU 0"}},' \
    '{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"rank 0 / collectives / CPU 1"}},' \
    '{"ph":"M","name":"thread_name","pid":1,"tid":1024,"args":{"name":"rank 1 / stage 1 / CPU 0"}},' \
    '{"ph":"M","name":"thread_name","pid":1,"tid":1025,"args":{"name":"rank 1 / collectives / CPU 1"}},' \
    '{"ph":"X","name":"F a mb0","pid":1,"tid":0,"ts":0,"dur":2000,"args":{"phase":"F","microbatch":0,"stage":0}},' \
    '{"ph":"X","name":"C sum.c0","pid":1,"tid":1,"ts":1000,"dur":2000,"args":{"phase":"C","bytes":8,"wait_us":500}},' \
    '{"ph":"X","name":"F b mb0","pid":1,"tid":1024,"ts":5000,"dur":1000,"args":{"phase":"F","microbatch":0,"stage":1}},' \
    '{"ph":"X","name":"C sum.c0","pid":1,"tid":1025,"ts":1000,"dur":2000,"args":{"phase":"C","bytes":8,"wait_us":1500}}' \
    ']}' >"$tmp/ranks.json"
"$cli" trace-summary "$tmp/ranks.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "per-rank collectives: exit status $?: $(cat "$tmp/err")"
grep -q "^  rank 0: 1 collective(s), 2.000 ms, 50.0% of it hidden" "$tmp/out" &&
    grep -q "^  rank 1: 1 collective(s), 2.000 ms, 0.0% of it hidden" "$tmp/out" &&
    grep -q "^    1.500 ms of it waiting for the other ranks" "$tmp/out" ||
    fail "per-rank collectives: $(grep -A4 Communication "$tmp/out")"

if command -v gnuplot >/dev/null 2>&1; then
    "$cli" trace-summary "$tmp/trace.json" --png "$tmp/gantt.png" >"$tmp/out" 2>"$tmp/err" ||
        fail "--png: exit status $?: $(cat "$tmp/err")"
    [ -s "$tmp/gantt.png" ] || fail "--png: no image written"
    head -c 8 "$tmp/gantt.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" ||
        fail "--png: not a PNG file"
else
    echo "note: gnuplot not installed (Debian: gnuplot-nox); PNG check skipped"
fi
# The Gantt script: the labels of row Y ("m" or "m/cC", by time) of the
# $LABELS datablock of SCRIPT, on one line.
labels_of() { # SCRIPT Y
    awk -v y="$2" '/^\$LABELS << EOD$/ { on = 1; next } on && /^EOD$/ { on = 0 }
        on && $2 == y { gsub(/"/, "", $3); print $1, $3 }' "$1" |
        sort -g | awk '{ printf "%s%s", sep, $2; sep = " " } END { print "" }'
}
# gantt NAME: draws $tmp/NAME.json, keeping the script in $tmp/NAME.gp;
# without gnuplot the PNG fails but the script is still written.
gantt() {
    rm -f "$tmp/$1.gp"
    PLEIADES_GANTT_SCRIPT="$tmp/$1.gp" "$cli" trace-summary "$tmp/$1.json" \
        --png "$tmp/$1.png" >"$tmp/out" 2>"$tmp/err"
    status=$?
    if command -v gnuplot >/dev/null 2>&1; then
        [ "$status" -eq 0 ] || fail "$1: --png: exit status $status: $(cat "$tmp/err")"
        head -c 8 "$tmp/$1.png" 2>/dev/null | od -An -tx1 |
            grep -q "89 50 4e 47 0d 0a 1a 0a" || fail "$1: --png: not a PNG file"
    fi
    [ -s "$tmp/$1.gp" ] || fail "$1: PLEIADES_GANTT_SCRIPT: no script written"
}

# A 1F1B step over 2 stages and 4 microbatches, 1 ms per item: each F and
# B item is 3 ops of 298 us 2 us apart (merged into one label), each B is
# followed by a 4 us W slice (under a pixel wide: no label). Stage 0 runs
# F0 F1 B0 F2 B1 F3 B2 B3, stage 1 F0 B0 F1 B1 F2 B2 F3 B3.
{
    printf '{"traceEvents":[\n'
    sep=''
    for stage in 0 1; do
        printf '%s{"ph":"M","name":"thread_name","pid":1,"tid":%d,"args":{"name":"stage %d / CPU %d"}}' \
            "$sep" "$stage" "$stage" "$stage"
        sep=$',\n'
        printf '%s{"ph":"M","name":"thread_sort_index","pid":1,"tid":%d,"args":{"sort_index":%d}}' \
            "$sep" "$stage" "$stage"
        if [ "$stage" -eq 0 ]; then order="F0 F1 B0 F2 B1 F3 B2 B3"; else order="F0 B0 F1 B1 F2 B2 F3 B3"; fi
        k=0
        for it in $order; do
            phase=${it%?} mb=${it#?}
            for op in 0 1 2; do
                printf '%s{"ph":"X","name":"%s op%d mb%d","pid":1,"tid":%d,"ts":%d,"dur":298,"args":{"phase":"%s","microbatch":%d,"stage":%d,"chunk":0}}' \
                    "$sep" "$phase" "$op" "$mb" "$stage" $((k * 1000 + op * 300)) "$phase" "$mb" "$stage"
            done
            [ "$phase" = B ] &&
                printf '%s{"ph":"X","name":"W op0 mb%d","pid":1,"tid":%d,"ts":%d,"dur":4,"args":{"phase":"W","microbatch":%d,"stage":%d,"chunk":0}}' \
                    "$sep" "$mb" "$stage" $((k * 1000 + 950)) "$mb" "$stage"
            k=$((k + 1))
        done
    done
    printf '\n],"otherData":{"schedule":"1f1b","stages":2,"chunks":1,"microbatches":4,"theoretical_bubble":0.2}}\n'
} >"$tmp/order.json"
gantt order
got=$(labels_of "$tmp/order.gp" 1)
[ "$got" = "0 1 0 2 1 3 2 3" ] || fail "order: stage 0's labels are '$got', not '0 1 0 2 1 3 2 3'"
got=$(labels_of "$tmp/order.gp" 0)
[ "$got" = "0 0 1 1 2 2 3 3" ] || fail "order: stage 1's labels are '$got', not '0 0 1 1 2 2 3 3'"
# Labels are drawn from data, after the boxes, not as one `set label` each.
grep -q '^     \$LABELS using 1:2:3:4 with labels' "$tmp/order.gp" ||
    fail "order: the labels are not plotted from \$LABELS"
! grep -q '^set label' "$tmp/order.gp" || fail "order: labels set one by one"
# The axis labels are the axes', the key right of the plot (clear of the
# time axis's label below it): at a screen x right of the right margin.
grep -qx "set xlabel 'time (ms)'" "$tmp/order.gp" || fail "order: no time axis label"
awk '/^set rmargin at screen / { r = $5 } /^set key at screen / { k = $5 + 0 }
    END { exit !(r > 0 && k > r) }' "$tmp/order.gp" ||
    fail "order: the key is not right of the plot: $(grep -E '^set (key|rmargin)' "$tmp/order.gp")"
! grep -Eq '^set key.*(below|bottom|bmargin|inside)' "$tmp/order.gp" ||
    fail "order: the key is below or inside the plot"
grep -q "^plot.*title 'forward'" "$tmp/order.gp" && ! grep -q "title 'time" "$tmp/order.gp" ||
    fail "order: the key's entries are not the phases"

# A stage of two workers (tracks 0 and 2): busy 1000 + 2000 us in a 4000-us
# span, at least one of them busy 2500 us: bubble (2 x 4000 - 3000) / 3000,
# idle with neither busy (4000 - 2500) / 2500.
printf '%s\n' '{"traceEvents":[' \
    '{"ph":"X","name":"F a mb0","pid":1,"tid":0,"ts":0,"dur":1000,"args":{"phase":"F","microbatch":0,"stage":0,"chunk":0}},' \
    '{"ph":"X","name":"F a mb1","pid":1,"tid":2,"ts":500,"dur":1000,"args":{"phase":"F","microbatch":1,"stage":0,"chunk":0}},' \
    '{"ph":"X","name":"B a mb0","pid":1,"tid":2,"ts":3000,"dur":1000,"args":{"phase":"B","microbatch":0,"stage":0,"chunk":0}},' \
    '{"ph":"X","name":"F b mb0","pid":1,"tid":1,"ts":0,"dur":4000,"args":{"phase":"F","microbatch":0,"stage":1,"chunk":0}}' \
    '],"otherData":{"schedule":"1f1b","stages":2,"chunks":1,"microbatches":2,"theoretical_bubble":0.5}}' \
    >"$tmp/two_workers.json"
if "$cli" trace-summary "$tmp/two_workers.json" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "^  stage 0: bubble 1.6667 measured, 0.5000 theoretical; .* 3 tasks on 2 workers" "$tmp/out" &&
    grep -q "^  stage 0: idle with none of its 2 workers busy 0.6000 over its span" "$tmp/out" &&
    ! grep -q "^  stage 1: idle with none" "$tmp/out"; then
    echo "ok: a stage of two workers: bubble per worker and idle with neither busy"
else
    fail "a stage of two workers: $(grep 'stage 0' "$tmp/out") $(cat "$tmp/err")"
fi

# Interleaved: two chunks per stage label "microbatch/cchunk".
printf '%s\n' '{"traceEvents":[' \
    '{"ph":"X","name":"F a mb2","pid":1,"tid":1,"ts":0,"dur":900,"args":{"phase":"F","microbatch":2,"stage":0,"chunk":1}},' \
    '{"ph":"X","name":"B a mb0","pid":1,"tid":1,"ts":1000,"dur":900,"args":{"phase":"B","microbatch":0,"stage":0,"chunk":0}},' \
    '{"ph":"X","name":"O opt","pid":1,"tid":1,"ts":2000,"dur":900,"args":{"phase":"O","microbatch":-1,"stage":0,"chunk":0}}' \
    '],"otherData":{"schedule":"interleaved","stages":1,"chunks":2,"microbatches":4}}' >"$tmp/chunks.json"
gantt chunks
got=$(labels_of "$tmp/chunks.gp" 0)
[ "$got" = "2/c1 0/c0" ] || fail "chunks: labels '$got', not '2/c1 0/c0' (none on the optimizer)"
# Without args, the microbatch comes from the name (".t<k>", " mb<k>").
# Microbatch 7 is 20 slices of 1 us, 4 us apart (under 2 px): one span
# wide enough for a label, but a pale comb, mostly gaps: no label.
{
    printf '%s\n' '[{"ph":"X","name":"fc1.F.t5","pid":1,"tid":1,"ts":0,"dur":900,"cat":"F"},' \
        '{"ph":"X","name":"B fc1 mb6","pid":1,"tid":1,"ts":1000,"dur":900,"cat":"B"},' \
        '{"ph":"X","name":"opt.c0","pid":1,"tid":1,"ts":2000,"dur":900,"cat":"O"}'
    for i in $(seq 0 19); do
        printf ',{"ph":"X","name":"fc2.F.t7","pid":1,"tid":1,"ts":%d,"dur":1,"cat":"F"}\n' $((2950 + 5 * i))
    done
    printf ']\n'
} >"$tmp/names.json"
gantt names
got=$(labels_of "$tmp/names.gp" 0)
[ "$got" = "5 6" ] || fail "names: labels '$got', not '5 6'"
# The real trace: labels of its microbatches 0..3 only (how many fit
# depends on the timing).
gantt trace
got=$(labels_of "$tmp/trace.gp" 0; labels_of "$tmp/trace.gp" 1; labels_of "$tmp/trace.gp" 2; labels_of "$tmp/trace.gp" 3)
! echo "$got" | tr ' ' '\n' | grep -qv '^[0-3]\?$' || fail "trace: labels '$got' beyond microbatches 0..3"

# A missing gnuplot is a clear error, not a shell message.
PATH=/nonexistent "$cli" trace-summary "$tmp/trace.json" --png "$tmp/x.png" \
    >/dev/null 2>"$tmp/err"
status=$?
[ "$status" -eq 1 ] && grep -q "gnuplot not found" "$tmp/err" ||
    fail "without gnuplot: status $status, stderr '$(cat "$tmp/err")'"
[ ! -e "$tmp/x.png" ] || fail "without gnuplot: an image was written"

# Errors name the file and where the JSON breaks: line, column, byte
# offset and the member it breaks in.
printf '{"traceEvents": [ {"ph": "X", ' >"$tmp/bad.json"
"$cli" trace-summary "$tmp/bad.json" >/dev/null 2>"$tmp/err"
status=$?
[ "$status" -eq 1 ] && grep -q "bad.json: not valid JSON: line 1" "$tmp/err" &&
    grep -qF "bad.json: not valid JSON: line 1, column 31 (byte 30), in traceEvents[0]: " "$tmp/err" ||
    fail "malformed JSON: status $status, stderr '$(cat "$tmp/err")'"
# A missing comma on line 3: the offset is that of the token found instead.
printf '{"traceEvents": [\n{"ph": "X", "ts": 0, "dur": 5, "tid": 1},\n{"ph": "X", "ts": 1 "dur": 2}\n]}\n' \
    >"$tmp/comma.json"
"$cli" trace-summary "$tmp/comma.json" >/dev/null 2>"$tmp/err"
status=$?
[ "$status" -eq 1 ] &&
    grep -qF "comma.json: not valid JSON: line 3, column 21 (byte 80), in traceEvents[1]: " "$tmp/err" ||
    fail "missing comma: status $status, stderr '$(cat "$tmp/err")'"
# A NUL byte is refused (jansson 2.14 would skip one after a number).
printf '[{"ph":"X","ts":1\0,"dur":1}]' >"$tmp/nul.json"
"$cli" trace-summary "$tmp/nul.json" >/dev/null 2>"$tmp/err"
status=$?
[ "$status" -eq 1 ] &&
    grep -qF "nul.json: not valid JSON: line 1, column 18 (byte 17): a NUL byte" "$tmp/err" ||
    fail "NUL byte: status $status, stderr '$(cat "$tmp/err")'"
# Valid JSON that other tools may write is read: a member given twice (the
# last one wins) and "\u0000" in a string.
printf '%s' '{"traceEvents":[{"ph":"X","ts":5,"ts":0,"dur":5,"tid":1,"name":"a\u0000b"}]}' \
    >"$tmp/lenient.json"
"$cli" trace-summary "$tmp/lenient.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "repeated member, \\u0000: exit status $?, stderr '$(cat "$tmp/err")'"
"$cli" trace-summary "$tmp/missing.json" >/dev/null 2>"$tmp/err"
[ "$?" -eq 1 ] && grep -q "missing.json: cannot open" "$tmp/err" ||
    fail "missing file: stderr '$(cat "$tmp/err")'"
"$cli" trace-summary >/dev/null 2>"$tmp/err"
[ "$?" -eq 2 ] && grep -q -- "--help" "$tmp/err" || fail "no file: not a usage error"

# Every number read from the file is range-checked: a stage count of 2e9
# used to be a loop bound (a line per stage, without end) and out-of-range
# numbers were cast to int. Each is refused with status 1 and a message
# naming the file and the field.
expect_refused() { # NAME FIELD JSON
    printf '%s' "$3" >"$tmp/$1.json"
    timeout 20 "$cli" trace-summary "$tmp/$1.json" >"$tmp/out" 2>"$tmp/err"
    status=$?
    { [ "$status" -eq 1 ] && grep -qF "$1.json: $2: expected" "$tmp/err" &&
        [ ! -s "$tmp/out" ]; } ||
        fail "$1: status $status, stderr '$(cat "$tmp/err")'"
}
ev='{"ph":"X","ts":0,"dur":5,"pid":1,"tid":1,"args":{"stage":0}}'
expect_refused stages otherData.stages \
    "{\"traceEvents\":[$ev],\"otherData\":{\"stages\":2e9}}"
expect_refused chunks otherData.chunks \
    "{\"traceEvents\":[$ev],\"otherData\":{\"chunks\":-1}}"
expect_refused microbatches otherData.microbatches \
    "{\"traceEvents\":[$ev],\"otherData\":{\"microbatches\":1e300}}"
expect_refused bubble otherData.theoretical_bubble \
    "{\"traceEvents\":[$ev],\"otherData\":{\"theoretical_bubble\":-0.5}}"
expect_refused stage 'traceEvents[1].args.stage' \
    "{\"traceEvents\":[$ev,{\"ph\":\"X\",\"ts\":1,\"args\":{\"stage\":3e9}}]}"
expect_refused microbatch 'traceEvents[1].args.microbatch' \
    "{\"traceEvents\":[$ev,{\"ph\":\"X\",\"ts\":1,\"args\":{\"microbatch\":-2}}]}"
expect_refused chunk 'traceEvents[1].args.chunk' \
    "{\"traceEvents\":[$ev,{\"ph\":\"X\",\"ts\":1,\"args\":{\"chunk\":0.5}}]}"
expect_refused fused 'traceEvents[1].args.fused_task' \
    "{\"traceEvents\":[$ev,{\"ph\":\"X\",\"ts\":1,\"args\":{\"fused_task\":-3}}]}"
expect_refused wait 'traceEvents[1].args.wait_us' \
    "{\"traceEvents\":[$ev,{\"ph\":\"X\",\"ts\":1,\"args\":{\"phase\":\"C\",\"wait_us\":-1}}]}"
expect_refused item_w otherData.item_w_us \
    "{\"traceEvents\":[$ev],\"otherData\":{\"item_w_us\":-1}}"
expect_refused ts 'traceEvents[0].ts' '{"traceEvents":[{"ph":"B","ts":1e999}]}'
expect_refused int 'traceEvents[0].ts' '{"traceEvents":[{"ph":"X","ts":100000000000000000000}]}'
expect_refused dur '[0].dur' '[{"ph":"X","ts":0,"dur":-1}]'
expect_refused tid '[0].tid' '[{"ph":"X","ts":0,"dur":1,"tid":-1e400}]'
expect_refused sort '[0].args.sort_index' \
    "[{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":1e308}},$ev]"
# In range, the same fields are fine.
printf '%s' "{\"traceEvents\":[$ev],\"otherData\":{\"stages\":3,\"chunks\":1,\"microbatches\":4,\"theoretical_bubble\":0.5}}" \
    >"$tmp/in_range.json"
"$cli" trace-summary "$tmp/in_range.json" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "^  stage 2: bubble n/a" "$tmp/out" ||
    fail "in-range otherData: stderr '$(cat "$tmp/err")'"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed" >&2
    exit 1
fi
echo ok
