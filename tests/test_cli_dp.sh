#!/usr/bin/env bash
# `pleiades train --dp N` under mpirun: refusals (--dp without mpirun or
# with another -np, a batch --dp does not divide, ranks given different
# flags), a two-rank GPT run whose losses equal one process's on the same
# global batch, ZeRO-2 checkpoints, ZeRO-3 losses = ZeRO-2's, --pp 2
# (stages across ranks, also under a memory placement) and --pp 2 --dp 2
# (4 ranks, also in bf16) against one process's 1F1B with one merged trace,
# per-rank traces with the collectives, and a rank killed with SIGKILL ending the whole job with a
# non-zero status within 60 s instead of hanging.
#
# Usage: test_cli_dp.sh PATH-TO-PLEIADES MPIEXEC [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_dp.sh PATH-TO-PLEIADES MPIEXEC [TEXT]}
mpiexec=${2:?usage: test_cli_dp.sh PATH-TO-PLEIADES MPIEXEC [TEXT]}
text=${3:-/usr/share/games/fortunes}
time_limit=300 # seconds per CLI run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# Open MPI refuses root without these; two ranks may share a core.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=("$mpiexec" --oversubscribe)
gpt=(train --model gpt --data "$text" --layers 2 --channels 32 --heads 2 --context 16
     --batch-size 8 --workers 1 --quiet)

# --- refusals
expect 2 "not started by mpirun" "${gpt[@]}" --steps 2 --dp 2
expect 2 "--cpu-offload on: offloads ZeRO's optimizer-state shards" "${gpt[@]}" --steps 2 \
    --cpu-offload on

# mpirun_expect STATUS NEEDLE NP ARG...: like expect, under mpirun -np NP.
mpirun_expect() {
    local want=$1 needle=$2 np=$3
    shift 3
    limited "${mpi[@]}" -np "$np" "$cli" "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "mpirun -np $np pleiades $*: exit status $got, expected $want"
    elif ! grep -qF -- "$needle" "$tmp/err"; then
        fail "mpirun -np $np pleiades $*: stderr does not mention '$needle'"
    else
        ok "mpirun -np $np pleiades $*"
    fi
}
# losses_close A B N REL KEYS: metrics files A and B hold the same N
# (step, key) entries of KEYS ("loss", or "loss val_loss"), each value of
# B within REL (relative) of A's.
losses_close() {
    python3 - "$@" <<'EOF'
import json, sys
a_path, b_path, n, rel, keys = sys.argv[1:6]
def losses(path):
    return [(r["step"], k, r[k]) for r in map(json.loads, open(path))
            for k in keys.split() if k in r]
a, b = losses(a_path), losses(b_path)
assert len(a) == len(b) == int(n), (len(a), len(b))
for (sa, ka, va), (sb, kb, vb) in zip(a, b):
    assert (sa, ka) == (sb, kb) and abs(va - vb) <= float(rel) * abs(va), (sa, ka, va, vb)
EOF
}
# same_losses A B N REL KEYS OK FAIL: losses_close, reported as ok OK or
# fail FAIL.
same_losses() {
    if losses_close "$1" "$2" "$3" "$4" "$5"; then ok "$6"; else fail "$7"; fi
}

mpirun_expect 2 "--dp 3, but mpirun started 2 processes" 2 "${gpt[@]}" --steps 2 --dp 3
mpirun_expect 2 "but mpirun started 2 processes" 2 "${gpt[@]}" --steps 2
mpirun_expect 2 "--batch-size: the global batch 7 is not divisible by --dp 2" 2 \
    "${gpt[@]}" --steps 2 --dp 2 --batch-size 7

# Two ranks given different seeds (MPMD launch): refused, naming the flag.
limited "${mpi[@]}" -np 1 "$cli" "${gpt[@]}" --steps 2 --dp 2 --seed 1 : \
    -np 1 "$cli" "${gpt[@]}" --steps 2 --dp 2 --seed 2 >"$tmp/out" 2>"$tmp/err"
got=$?
if [ "$got" -ne 0 ] && grep -qF "the ranks of this job differ in --seed" "$tmp/err"; then
    ok "ranks with different --seed are refused ($(grep -m1 -F 'differ in' "$tmp/err"))"
else
    fail "ranks with different --seed: exit $got, expected a refusal naming --seed"
fi

# --- two ranks train like one process on the same global batch
limited "$cli" "${gpt[@]}" --steps 6 --eval-every 3 --metrics "$tmp/one.jsonl" \
    >"$tmp/out" 2>"$tmp/err" || fail "one-process reference run failed"
limited "${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --steps 6 --eval-every 3 --dp 2 \
    --metrics "$tmp/two.jsonl" >"$tmp/out" 2>"$tmp/err" || fail "two-rank run failed"
# Losses to fp32 rounding: the sums are the same, in another order.
same_losses "$tmp/one.jsonl" "$tmp/two.jsonl" 8 1e-5 "loss val_loss" \
    "two ranks (--dp 2) log the losses of one process to fp32 rounding" \
    "two ranks (--dp 2): losses differ from one process's"

# --- checkpoints of a ZeRO-2 run (--cpu-offload on: on a CPU-only build
# the update is on the host anyway): saved after 3 of 6 steps, resumed by
# two ranks (exactly the straight run's losses) and by one process (the
# states are whole in the file: to fp32 rounding)
z2=("${gpt[@]}" --dp 2 --zero-stage 2 --cpu-offload on)
limited "${mpi[@]}" -np 2 "$cli" "${z2[@]}" --steps 6 --metrics "$tmp/z.jsonl" \
    >"$tmp/out" 2>"$tmp/err" || fail "ZeRO-2 straight run failed"
# The end-of-run line on each rank's model state (not under --quiet):
# ZeRO-2 keeps its gradient shards, not the whole gradients.
loud=()
for a in "${z2[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
limited "${mpi[@]}" -np 2 "$cli" "${loud[@]}" --steps 2 --paje "$tmp/z2.paje" \
    >"$tmp/out" 2>"$tmp/err" || fail "ZeRO-2 run without --quiet failed"
# Its Paje trace (ViTE) shows the collectives as collectives and the
# gradients' returns as memory tasks (before 2026-11-27 a collective
# showed as an optimizer task).
if [ -x /usr/bin/pj_dump ]; then
    if /usr/bin/pj_dump "$tmp/z2.paje" >"$tmp/pj" 2>&1 &&
        grep -q '^State.*collective' "$tmp/pj" && grep -q '^State.*memory' "$tmp/pj"; then
        ok "ZeRO-2 --paje: pj_dump reads collective and memory states"
    else
        fail "ZeRO-2 --paje: no collective or memory states in pj_dump's output"
    fi
fi
if grep -q "^model state per rank (ZeRO-2): .*whole gradients released between steps, reduced gradient shards [0-9.]* MiB.*at most [0-9.]* MiB of whole gradients" "$tmp/out"; then
    ok "ZeRO-2 --dp 2: the run ends with each rank's model state ($(grep -m1 -o 'reduced gradient shards [0-9.]* MiB' "$tmp/out"))"
else
    fail "ZeRO-2 --dp 2: no model-state line naming the released gradients: $(grep 'model state' "$tmp/out")"
fi
limited "${mpi[@]}" -np 2 "$cli" "${z2[@]}" --steps 3 --checkpoint-dir "$tmp/ck" \
    >"$tmp/out" 2>"$tmp/err" || fail "ZeRO-2 run with --checkpoint-dir failed"
limited "${mpi[@]}" -np 2 "$cli" "${z2[@]}" --steps 6 --resume "$tmp/ck" \
    --metrics "$tmp/zr.jsonl" >"$tmp/out" 2>"$tmp/err" || fail "ZeRO-2 resume failed"
if [ -d "$tmp/ck/step-3" ] && [ "$(ls "$tmp/ck" | wc -l)" -eq 1 ] &&
    diff <(grep -o '"step":[4-6],"loss":[^,]*' "$tmp/z.jsonl") \
        <(grep -o '"step":[4-6],"loss":[^,]*' "$tmp/zr.jsonl") >/dev/null &&
    [ "$(grep -c '"step":[4-6],"loss"' "$tmp/zr.jsonl")" -eq 3 ]; then
    ok "ZeRO-2 --dp 2: checkpoint after step 3 (one folder, by rank 0), resumed: steps 4-6 bitwise"
else
    fail "ZeRO-2 --dp 2: resumed steps 4-6 differ from the straight run (or no checkpoint)"
fi
limited "$cli" "${gpt[@]}" --steps 6 --resume "$tmp/ck" --metrics "$tmp/z1.jsonl" \
    >"$tmp/out" 2>"$tmp/err" || fail "one-process resume of a ZeRO-2 checkpoint failed"
if python3 - "$tmp/z.jsonl" "$tmp/z1.jsonl" <<'EOF'; then
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
for s in (4, 5, 6):
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])
EOF
    ok "a ZeRO-2 checkpoint of 2 ranks resumed by one process goes on like the run"
else
    fail "a ZeRO-2 checkpoint of 2 ranks resumed by one process: losses differ"
fi

# --- ZeRO-3 (--zero-stage 3): the losses of the ZeRO-2 run above, with
# --save gathering the sharded weights on every rank; no pipeline with it
limited "${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --dp 2 --zero-stage 3 --steps 6 \
    --metrics "$tmp/z3.jsonl" --save "$tmp/z3.safetensors" >"$tmp/out" 2>"$tmp/err" ||
    fail "ZeRO-3 run failed: $(tail -n 3 "$tmp/err")"
if diff <(grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/z.jsonl") \
        <(grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/z3.jsonl") >/dev/null &&
    [ "$(grep -c '"loss"' "$tmp/z3.jsonl")" -ge 6 ] && [ -s "$tmp/z3.safetensors" ]; then
    ok "ZeRO-3 --dp 2: the ZeRO-2 run's losses bitwise, weights saved"
else
    fail "ZeRO-3 --dp 2: losses differ from ZeRO-2's (or no --save file)"
fi
# ... and under a memory budget with auto placement and a disk tier
mkdir -p "$tmp/off"
limited "${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --dp 2 --zero-stage 3 --steps 6 --budget-mb 1 \
    --offload-dir "$tmp/off" --metrics "$tmp/z3b.jsonl" >"$tmp/out" 2>"$tmp/err" ||
    fail "ZeRO-3 run under --budget-mb 1 failed: $(tail -n 3 "$tmp/err")"
if diff <(grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/z3.jsonl") \
        <(grep -o '"step":[0-9]*,"loss":[^,]*' "$tmp/z3b.jsonl") >/dev/null; then
    ok "ZeRO-3 --dp 2 --budget-mb 1 (auto placement): the same losses bitwise"
else
    fail "ZeRO-3 --dp 2 under a budget: losses differ from the run without one"
fi
mpirun_expect 2 "--zero-stage 3 with --schedule 1f1b" 2 "${gpt[@]}" --steps 2 --dp 2 \
    --zero-stage 3 --schedule 1f1b --stages 2
mpirun_expect 2 "--zero-stage" 2 "${gpt[@]}" --steps 2 --dp 2 --zero-stage 4

# --- pipeline stages across ranks (--pp 2): the one-process 1F1B run's
# losses exactly (the tied embedding's two stages' gradients are summed
# apart in one process too, engine/tied_grads.c),
# --save of every stage's weights, one merged trace
# with both ranks' stage tracks; refusals
pp=("${gpt[@]}" --schedule 1f1b --microbatches 4 --steps 4)
limited "$cli" "${pp[@]}" --workers 2 --metrics "$tmp/p1.jsonl" >"$tmp/out" 2>"$tmp/err" ||
    fail "one-process 1F1B run failed"
# (without --quiet: the start-up line says who polls MPI)
loud=()
for a in "${pp[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
limited "${mpi[@]}" -np 2 "$cli" "${loud[@]}" --pp 2 --metrics "$tmp/p2.jsonl" \
    --save "$tmp/pp.safetensors" --trace "$tmp/pp.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "--pp 2 run failed: $(tail -n 3 "$tmp/err")"
grep -q "MPI progressed between worker 0's tasks" "$tmp/out" ||
    fail "--pp 2: the start-up line does not say StarPU-MPI's thread runs worker 0"
# The measured balance sums its step-2 times over the ranks right after
# step 2: with 2 steps in all, every rank must join that sum (until
# 2026-11-27 only the printing rank did, and the run hung at its end).
# (Not anchored at the line's start: mpirun gives the ranks a terminal, so
# on a loaded machine, where a step takes over 2 s, the progress line
# "\r\033[K  step 1 ..." can precede it on the same line.)
if limited "${mpi[@]}" -np 2 "$cli" "${loud[@]}" --pp 2 --steps 2 >"$tmp/out" 2>"$tmp/err" &&
    grep -q "pipeline stages cut on the block times of training step 2" "$tmp/out"; then
    ok "--pp 2 --steps 2 ends, printing the measured stage balance's cut"
else
    fail "--pp 2 --steps 2: hung or failed, or no stage-times line: $(tail -n 2 "$tmp/err")"
fi
same_losses "$tmp/p1.jsonl" "$tmp/p2.jsonl" 4 0 loss \
    "--pp 2 logs the one-process 1F1B losses exactly" \
    "--pp 2: losses differ from the one-process 1F1B run's"
if [ -s "$tmp/pp.safetensors" ] && [ ! -e "$tmp/pp.json.rank1" ] &&
    grep -q '"rank 1 / stage 1 / ' "$tmp/pp.json" && grep -q '"rank 0 / stage 0 / ' "$tmp/pp.json" &&
    "$cli" trace-summary "$tmp/pp.json" >"$tmp/sum" 2>"$tmp/err" &&
    grep -q "stage 1: bubble" "$tmp/sum"; then
    ok "--pp 2: weights saved, one merged trace with both ranks' stages"
else
    fail "--pp 2: no --save file, or the trace is not one file with both ranks' stage tracks"
fi
expect 2 "not started by mpirun" "${pp[@]}" --pp 2
# StarPU-MPI's progression thread apart (the default runs it in worker 0):
# the same losses; the flag needs a run over ranks, and a known mode
limited "${mpi[@]}" -np 2 "$cli" "${loud[@]}" --pp 2 --mpi-progress thread \
    --metrics "$tmp/p3.jsonl" >"$tmp/out" 2>"$tmp/err" ||
    fail "--pp 2 --mpi-progress thread run failed: $(tail -n 3 "$tmp/err")"
grep -q "MPI progressed by StarPU-MPI's own thread" "$tmp/out" ||
    fail "--mpi-progress thread: the start-up line does not say so"
same_losses "$tmp/p1.jsonl" "$tmp/p3.jsonl" 4 0 loss \
    "--pp 2 --mpi-progress thread logs the one-process 1F1B losses exactly" \
    "--pp 2 --mpi-progress thread: losses differ from the one-process 1F1B run's"
expect 2 "only a run over several ranks" "${pp[@]}" --mpi-progress worker
expect 2 "--mpi-progress" "${pp[@]}" --pp 2 --mpi-progress sometimes

# --pp 2 under a memory placement: a GPT of 4 MiB of parameters, 4 MiB of
# compute tier per rank, chunks offloaded to disk; the one-process 1F1B
# run under the same budget's losses and saved weights, bitwise.
placed=(train --model gpt --data "$text" --layers 4 --channels 128 --heads 2 --context 32
        --batch-size 8 --schedule 1f1b --microbatches 4 --steps 4 --eval-every 0
        --placement auto --budget-mb 4)
mkdir -p "$tmp/off1" "$tmp/off2"
if limited "$cli" "${placed[@]}" --workers 2 --offload-dir "$tmp/off1" \
       --metrics "$tmp/q1.jsonl" --save "$tmp/q1.safetensors" >"$tmp/out" 2>"$tmp/err" &&
   limited "${mpi[@]}" -np 2 "$cli" "${placed[@]}" --pp 2 --workers 1 \
       --offload-dir "$tmp/off2" --metrics "$tmp/q2.jsonl" --save "$tmp/q2.safetensors" \
       >"$tmp/out" 2>"$tmp/err" &&
   grep -q "^placement auto: compute-tier budget 4 MiB per rank, offload" "$tmp/out" &&
   grep -q "^memory (auto, budget 4 MiB per rank): rank 0 (stage 0): peak compute" \
       "$tmp/out" &&
   grep -q "^memory (auto, budget 4 MiB per rank): rank 1 (stage 1): peak compute" \
       "$tmp/out" && losses_close "$tmp/q1.jsonl" "$tmp/q2.jsonl" 4 0 loss &&
   cmp -s "$tmp/q1.safetensors" "$tmp/q2.safetensors"; then
    ok "--pp 2 --placement auto --budget-mb 4: the one-process losses and weights, bitwise"
else
    fail "--pp 2 under placement: differs from one process, or failed: $(tail -n 3 "$tmp/err")"
fi
mpirun_expect 2 "--pp 2 x --dp 2 = 4 ranks, but mpirun started 2" 2 "${pp[@]}" --pp 2 --dp 2

# --- hybrid --dp 2 --pp 2 on 4 ranks: each replica half of the global
# batch of 8 in 2 microbatches (the one-process run's microbatch size of
# 2), ZeRO-2 inside each stage; the one-process 1F1B losses to rounding,
# the grid on the start-up line, one trace with all four ranks
# (not --quiet: the start-up line)
limited "${mpi[@]}" -np 4 "$cli" train --model gpt --data "$text" --layers 2 --channels 32 \
    --heads 2 --context 16 --batch-size 8 --workers 1 --schedule 1f1b --steps 4 --pp 2 --dp 2 \
    --microbatches 2 --zero-stage 2 --metrics "$tmp/h.jsonl" --save "$tmp/h.safetensors" \
    --trace "$tmp/h.json" >"$tmp/out" 2>"$tmp/err" ||
    fail "--pp 2 --dp 2 run failed: $(tail -n 3 "$tmp/err")"
same_losses "$tmp/p1.jsonl" "$tmp/h.jsonl" 4 1e-4 loss \
    "--pp 2 --dp 2 logs the one-process 1F1B losses on the same global batch" \
    "--pp 2 --dp 2: losses differ from the one-process 1F1B run's"

# The default rank order is Colossal-AI's dp_outside: replica-major, so
# ranks 0 and 1 are replica 0's stages 0 and 1.
if grep -qF "grid dp 2 x pp 2 over 4 ranks, dp outside on (rank: (dp, pp) 0: (0, 0) 1: (0, 1) 2: (1, 0) 3: (1, 1))" "$tmp/out" &&
    [ -s "$tmp/h.safetensors" ] &&
    grep -q '"rank 3 / stage 1 / ' "$tmp/h.json" && grep -q '"rank 1 / stage 1 / ' "$tmp/h.json" &&
    grep -q '"rank 2 / stage 0 / ' "$tmp/h.json"; then
    ok "--pp 2 --dp 2: the grid and its rank map on the start-up line, weights saved, one trace of 4 ranks"
else
    fail "--pp 2 --dp 2: no grid line with the dp-outside map, --save file or merged trace of the four ranks: $(grep -o 'grid dp[^;]*' "$tmp/out")"
fi
# --dp-outside off: stage-major ranks (0 and 1 are stage 0's replicas),
# the same losses.
limited "${mpi[@]}" -np 4 "$cli" train --model gpt --data "$text" --layers 2 --channels 32 \
    --heads 2 --context 16 --batch-size 8 --workers 1 --schedule 1f1b --steps 4 --pp 2 --dp 2 \
    --microbatches 2 --zero-stage 2 --dp-outside off --metrics "$tmp/h_off.jsonl" \
    >"$tmp/out" 2>"$tmp/err" || fail "--pp 2 --dp 2 --dp-outside off run failed: $(tail -n 3 "$tmp/err")"
if grep -qF "dp outside off (rank: (dp, pp) 0: (0, 0) 1: (1, 0) 2: (0, 1) 3: (1, 1))" "$tmp/out" &&
    cmp -s <(grep -o '"loss":[^,]*' "$tmp/h.jsonl") <(grep -o '"loss":[^,]*' "$tmp/h_off.jsonl") &&
    [ "$(grep -c '"loss"' "$tmp/h_off.jsonl")" -ge 4 ]; then
    ok "--dp-outside off: the stage-major map on the start-up line, the default order's losses"
else
    fail "--dp-outside off: $(grep -o 'grid dp[^;]*' "$tmp/out"); losses on/off:" \
        "$(grep -o '"loss":[^,]*' "$tmp/h.jsonl" "$tmp/h_off.jsonl" | tr '\n' ' ')"
fi
mpirun_expect 2 "--dp-outside: only a grid of --dp D and --pp P, both > 1" 2 "${gpt[@]}" \
    --steps 2 --dp 2 --dp-outside off

# --- 16 bits: the same grid in bf16 (ZeRO-2 shards its fp32 master
# weights; gradients reduced in fp32, rounded once) against one process's
# bf16 1F1B, to bf16 rounding (each rank rounds its gradients before the
# mean); bf16 ZeRO-3 against bf16 DDP
limited "$cli" "${pp[@]}" --workers 2 --precision bf16 --metrics "$tmp/b1.jsonl" \
    >"$tmp/out" 2>"$tmp/err" || fail "one-process bf16 1F1B run failed"
limited "${mpi[@]}" -np 4 "$cli" "${pp[@]}" --pp 2 --dp 2 --microbatches 2 --zero-stage 2 \
    --precision bf16 --metrics "$tmp/b4.jsonl" >"$tmp/out" 2>"$tmp/err" ||
    fail "bf16 --pp 2 --dp 2 run failed: $(tail -n 3 "$tmp/err")"
same_losses "$tmp/b1.jsonl" "$tmp/b4.jsonl" 4 1e-2 loss \
    "bf16 --pp 2 --dp 2 --zero-stage 2 logs the one-process bf16 1F1B losses to bf16 rounding" \
    "bf16 --pp 2 --dp 2: losses differ from the one-process bf16 1F1B run's"
for z in 0 3; do
    limited "${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --steps 4 --dp 2 --zero-stage $z \
        --precision bf16 --metrics "$tmp/bz$z.jsonl" >"$tmp/out" 2>"$tmp/err" ||
        fail "bf16 --zero-stage $z run failed: $(tail -n 3 "$tmp/err")"
done
same_losses "$tmp/bz0.jsonl" "$tmp/bz3.jsonl" 4 2e-3 loss \
    "bf16 --zero-stage 3 logs the bf16 DDP losses to bf16 rounding" \
    "bf16 --zero-stage 3: losses differ from the bf16 DDP run's"
mpirun_expect 2 "--pp 2: stages across ranks need a pipeline --schedule" 2 "${gpt[@]}" \
    --steps 2 --pp 2
mpirun_expect 2 "--pp 2 with --stages 3" 2 "${pp[@]}" --pp 2 --stages 3

# --- traces: one per rank, collectives on their own track with bytes and waits
limited "${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --steps 2 --dp 2 --reduce-bucket-size-in-m 0 \
    --chunk-mb 0.02 --trace "$tmp/t.json" >"$tmp/out" 2>"$tmp/err" || fail "traced --dp 2 run failed"
if [ -s "$tmp/t.json" ] && [ -s "$tmp/t.json.rank1" ] &&
    grep -q '"phase":"C".*"bytes":[1-9][0-9]*,"wait_us":[0-9]' "$tmp/t.json.rank1" &&
    "$cli" trace-summary "$tmp/t.json.rank1" >"$tmp/sum" 2>"$tmp/err" &&
    grep -q "collectives / CPU" "$tmp/sum" &&
    grep -q "Communication (data parallelism): [1-9][0-9]* collective(s)" "$tmp/sum" &&
    grep -q "^  [0-9.]* ms of it waiting for the other ranks to arrive, [0-9.]* ms moving" \
        "$tmp/sum"; then
    ok "--trace under --dp 2: a trace per rank, collectives with bytes and waits, trace-summary's communication lines"
else
    fail "--trace under --dp 2: expected t.json and t.json.rank1 with collectives, bytes and waits"
fi

# --- a rank killed with SIGKILL ends the job within 60 s, non-zero
"${mpi[@]}" -np 2 "$cli" "${gpt[@]}" --steps 100000 --dp 2 >"$tmp/out" 2>"$tmp/err" &
job=$!
sleep 5
victim=$(pgrep -P "$job" -f pleiades | tail -1)
if [ -z "$victim" ]; then
    fail "dead rank: found no rank of mpirun ($job) to kill"
    kill -9 "$job" 2>/dev/null
else
    kill -9 "$victim"
    start=$SECONDS
    while kill -0 "$job" 2>/dev/null && [ $((SECONDS - start)) -lt 60 ]; do sleep 1; done
    if kill -0 "$job" 2>/dev/null; then
        fail "dead rank: the job still runs 60 s after rank pid $victim was killed"
        pkill -9 -P "$job"
        kill -9 "$job"
    else
        wait "$job"
        got=$?
        if [ "$got" -ne 0 ]; then
            ok "dead rank: mpirun ended with status $got after $((SECONDS - start)) s"
        else
            fail "dead rank: mpirun ended with status 0"
        fi
    fi
fi

finish "data-parallel CLI checks passed"
