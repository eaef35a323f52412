#!/usr/bin/env bash
# Memory placement from the command line (`pleiades train --budget-mb ...`):
# usage errors (exit 2, naming the flag), run-time refusals (exit 1, naming
# the directory or the missing flag) and tiny real GPT runs under a 2 MiB
# budget with a disk tier, whose --metrics step lines carry the memory
# figures and whose summary prints them.
#
# Usage: test_cli_memory.sh PATH-TO-PLEIADES [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_memory.sh PATH-TO-PLEIADES [TEXT]}
text=${2:-/usr/share/games/fortunes}
time_limit=120 # seconds per CLI run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

if limited "$cli" train --help >"$tmp/out" 2>"$tmp/err" &&
    grep -qF -- "--budget-mb" "$tmp/out" && grep -qF -- "--offload-dir" "$tmp/out" &&
    grep -qF -- "--placement NAME" "$tmp/out"; then
    ok "pleiades train --help lists the placement options"
else
    fail "pleiades train --help: expected --budget-mb, --offload-dir, --placement"
fi

# --- usage errors: exit 2 before anything is loaded
expect 2 "--shard-param-frac"   train --model gpt --budget-mb 4 --shard-param-frac 1.5
expect 2 "--offload-optim-frac" train --budget-mb 4 --offload-optim-frac -0.1
expect 2 "--offload-param-frac" train --budget-mb 4 --offload-param-frac x
expect 2 "--budget-mb"          train --model gpt --placement auto
expect 2 "--budget-mb"          train --model gpt --budget-mb 0
expect 2 "--placement"          train --model gpt --budget-mb 4 --placement nosuch
expect 2 "--offload-dir"        train --model gpt --offload-dir "$tmp"
expect 2 "--max-prefetch"       train --model gpt --max-prefetch 2
expect 2 "--max-prefetch"       train --model gpt --budget-mb 4 --max-prefetch -1
expect 2 "--chunk-mb"           train --model gpt --chunk-mb 0
expect 2 "--chunk-mb fixes the chunk size" train --model gpt --chunk-mb 2 --hidden-dim 1024
expect 2 "--min-chunk-size-m"   train --model gpt --min-chunk-size-m 0
expect 2 "--search-range-m"     train --model gpt --search-range-m 5000
expect 2 "--chunk-search-n-grids" train --model gpt --chunk-search-n-grids 0
expect 2 "--steady-cuda-cap-ratio" train --budget-mb 4 --steady-cuda-cap-ratio 0
expect 2 "--warmup-non-model-data-ratio" train --budget-mb 4 \
    --warmup-non-model-data-ratio 1
expect 2 "--shard-param-frac"   train --budget-mb 4 --placement cpu \
    --shard-param-frac 0.5
expect 2 "--host-budget-mb"     train --budget-mb 4 --host-budget-mb 8 --device cpu

if [ ! -e "$text" ]; then
    echo "no text at $text: skipping the runs"
    finish "all placement CLI checks passed (runs skipped)"
    exit 0
fi

tiny=(train --model gpt --data "$text" --layers 2 --channels 64 --heads 4
      --context 32 --batch-size 8 --eval-every 0 --workers 2 --chunk-mb 0.0625)

# --- run-time refusals: exit 1, saying what is wrong
missing="$tmp/nonexistent"
expect 1 "$missing" "${tiny[@]}" --steps 1 --budget-mb 2 --offload-dir "$missing"
# Model state and activations need ~9 MiB: 2 MiB without a disk tier is an
# error, not a livelock.
expect 1 "--offload-dir" "${tiny[@]}" --steps 1 --budget-mb 2
expect 1 "raise --budget-mb" "${tiny[@]}" --steps 1 --budget-mb 1 \
    --chunk-mb 4 --offload-dir "$tmp"

# 16-bit storage counts 2-byte parameters, gradients and activations: the
# tiny model needs 8.9 MB in fp32 but 6.0 MB in bf16 (fp32 master weights
# and AdamW states included), so 7 MiB without a disk tier refuses fp32
# and trains bf16.
expect 1 "--offload-dir" "${tiny[@]}" --steps 1 --budget-mb 7
if limited "$cli" "${tiny[@]}" --steps 1 --budget-mb 7 --precision bf16 >"$tmp/out" \
    2>"$tmp/err" && grep -q "^final val loss" "$tmp/out"; then
    ok "--precision bf16 trains under --budget-mb 7, where fp32 is refused"
else
    fail "--precision bf16 --budget-mb 7: $(cat "$tmp/err")"
fi

# The searched chunk size fits the budget: a 4-layer, 256-channel GPT's
# default chunk (17.9 MB for an AdamW update at once) halves until every
# step fits 14 MiB, so the default trains where --chunk-mb 2 would; an
# explicit --chunk-mb is kept, and refused when it cannot fit.
mkdir -p "$tmp/off-search"
fit=(train --model gpt --data "$text" --layers 4 --channels 256 --context 64
     --batch-size 8 --eval-every 0 --workers 2 --steps 1 --placement static
     --budget-mb 14 --offload-dir "$tmp/off-search")
if limited "$cli" "${fit[@]}" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "^final val loss" "$tmp/out"; then
    ok "gpt --budget-mb 14: the searched chunk size fits the budget"
else
    fail "gpt --budget-mb 14 with the default chunk size: $(cat "$tmp/err")"
fi
expect 1 "raise --budget-mb" "${fit[@]}" --chunk-mb 4

# --- tiny real runs under a 2 MiB budget
budget=$((2 * 1024 * 1024))
for placement in auto lru static; do
    off="$tmp/off-$placement"
    mkdir -p "$off"
    metrics="$tmp/m-$placement.jsonl"
    what="gpt --placement $placement --budget-mb 2"
    limited "$cli" "${tiny[@]}" --steps 3 --placement "$placement" --budget-mb 2 \
        --max-prefetch 2 --offload-dir "$off" --metrics "$metrics" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "$what: exit status $rc"
        continue
    fi
    ok "$what"
    n=$(grep -c '"bytes_moved":[1-9]' "$metrics")
    if [ "$n" -eq 3 ]; then ok "$what: 3 step lines with bytes_moved > 0"
    else fail "$what: $n step lines with bytes_moved > 0, expected 3"; fi
    for key in peak_compute_bytes peak_host_bytes evictions prefetch_hits; do
        n=$(grep -c "\"$key\":[0-9]" "$metrics")
        if [ "$n" -ne 3 ]; then fail "$what: $n step lines with $key, expected 3"; fi
    done
    over=$(grep -o '"peak_compute_bytes":[0-9]*' "$metrics" | cut -d: -f2 |
           awk -v b="$budget" '$1 > b || $1 <= 0' | wc -l)
    if [ "$over" -eq 0 ]; then ok "$what: peak_compute_bytes within the budget"
    else fail "$what: $over steps with peak_compute_bytes outside (0, $budget]"; fi
    if grep -q "^memory ($placement, budget 2 MiB): peak compute [0-9.]* MiB" "$tmp/out"
    then ok "$what: memory summary"
    else fail "$what: no 'memory ($placement, budget 2 MiB): ...' summary"; fi
    if grep -q "^placement $placement: compute-tier budget 2 MiB" "$tmp/out"
    then ok "$what: placement header"
    else fail "$what: no 'placement $placement: ...' header line"; fi
done

# StarPU's own messages (purging buffers to keep within the budget) stay
# off unless the environment asks for them: the runtime sets STARPU_SILENT
# only where it is unset (the tests' environment sets it, so it is unset
# here for these runs).
quiet_run=("${tiny[@]}" --steps 2 --placement auto --budget-mb 2 --offload-dir "$tmp/off-auto")
env -u STARPU_SILENT timeout "$time_limit" "$cli" "${quiet_run[@]}" >"$tmp/out" 2>&1
if grep -q '^\[starpu\]' "$tmp/out"; then
    fail "a budgeted run printed StarPU's messages: $(grep '^\[starpu\]' "$tmp/out" | head -2)"
else
    ok "a budgeted run prints no StarPU messages by default"
fi
env STARPU_SILENT=0 timeout "$time_limit" "$cli" "${quiet_run[@]}" >"$tmp/out" 2>&1
if grep -q '^\[starpu\]' "$tmp/out"; then
    ok "STARPU_SILENT=0 shows StarPU's messages"
else
    fail "STARPU_SILENT=0: StarPU printed nothing (the check above proves nothing then)"
fi

# Same seed, any placement: the same losses.
if [ -s "$tmp/m-auto.jsonl" ] && [ -s "$tmp/m-lru.jsonl" ]; then
    grep -o '"loss":[^,]*' "$tmp/m-auto.jsonl" >"$tmp/l-auto"
    grep -o '"loss":[^,]*' "$tmp/m-lru.jsonl" >"$tmp/l-lru"
    if cmp -s "$tmp/l-auto" "$tmp/l-lru"; then ok "auto and lru: same losses"
    else fail "auto and lru runs gave different losses"; fi
fi

# The MLP trainer takes the same options (one epoch of 30 steps).
mnist=/usr/share/datasets/fashion-mnist
if [ -d "$mnist" ]; then
    mkdir -p "$tmp/off-mlp"
    what="mlp --budget-mb 5"
    limited "$cli" train --data "$mnist" --hidden 16 --epochs 1 --batch-size 2000 \
        --workers 2 --budget-mb 5 --chunk-mb 0.0625 --offload-dir "$tmp/off-mlp" \
        --metrics "$tmp/mlp.jsonl" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    steps=$(grep -c '"epoch":1,"loss"' "$tmp/mlp.jsonl" 2>/dev/null)
    moved=$(grep -c '"bytes_moved":[1-9]' "$tmp/mlp.jsonl" 2>/dev/null)
    if [ "$rc" -eq 0 ] && [ "$steps" -gt 0 ] && [ "$moved" -eq "$steps" ] &&
        grep -q "^memory (auto, budget 5 MiB)" "$tmp/out"; then
        ok "$what: $steps step lines with bytes_moved, memory summary"
    else
        fail "$what: exit $rc, $moved of $steps step lines with bytes_moved > 0"
    fi
fi

# No placement: the step lines have no memory keys (documented).
limited "$cli" "${tiny[@]}" --steps 1 --metrics "$tmp/plain.jsonl" \
    >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 0 ] && ! grep -q bytes_moved "$tmp/plain.jsonl" &&
    ! grep -q '^memory (' "$tmp/out"; then
    ok "no placement: no memory keys, no memory summary"
else
    fail "no placement: expected a run without memory keys or summary"
fi

finish "all placement CLI checks passed"
