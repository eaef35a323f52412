#!/usr/bin/env bash
# `pleiades trace-summary` on a real trace: test_trace writes one (a 1F1B
# GPT step over 2 stages) into a temporary directory, then the summary must
# print a bubble line per stage with the theoretical value, per-track busy
# times and the critical path; with --png (when gnuplot is installed) it
# must write a non-empty PNG, and without gnuplot on PATH it must fail with
# a message naming gnuplot. Malformed input is an error naming the file
# and where it breaks.
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

if command -v gnuplot >/dev/null 2>&1; then
    "$cli" trace-summary "$tmp/trace.json" --png "$tmp/gantt.png" >"$tmp/out" 2>"$tmp/err" ||
        fail "--png: exit status $?: $(cat "$tmp/err")"
    [ -s "$tmp/gantt.png" ] || fail "--png: no image written"
    head -c 8 "$tmp/gantt.png" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" ||
        fail "--png: not a PNG file"
else
    echo "note: gnuplot not installed (Debian: gnuplot-nox); PNG check skipped"
fi
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
