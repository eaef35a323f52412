#!/usr/bin/env bash
# `pleiades train --model gpt` and `pleiades generate`: usage errors (exit 2,
# naming the flags), run-time errors (exit 1, naming the path), and a tiny
# real run whose metrics and checkpoint `generate` then samples from,
# reproducibly for a given seed.
#
# Usage: test_cli_gpt.sh PATH-TO-PLEIADES [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_gpt.sh PATH-TO-PLEIADES [TEXT]}
text=${2:-/usr/share/games/fortunes}
time_limit=300 # seconds per CLI run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# --- help
if limited "$cli" generate --help >"$tmp/out" 2>"$tmp/err" &&
    grep -qF -- "--temperature" "$tmp/out"; then
    ok "pleiades generate --help"
else
    fail "pleiades generate --help: expected exit 0 and the options"
fi
if limited "$cli" train --help >"$tmp/out" 2>"$tmp/err" &&
    grep -qF -- "--eval-every" "$tmp/out"; then
    ok "pleiades train --help lists the GPT options"
else
    fail "pleiades train --help: expected exit 0 and --eval-every"
fi

# --- usage errors: exit 2 before anything is loaded
expect 2 "--channels"   train --model gpt --channels 30 --heads 4
expect 2 "--heads"      train --model gpt --channels 30 --heads 4
expect 2 "--context"    train --model gpt --context 0
expect 2 "--layers"     train --model gpt --layers 0
expect 2 "--steps"      train --model gpt --steps 0
expect 2 "--eval-every" train --model gpt --eval-every -1
expect 2 "--epochs"     train --model gpt --epochs 2
expect 2 "--steps"      train --model mlp --steps 10
expect 2 "--save"       train --save "$tmp/x.safetensors"
expect 2 "--checkpoint" generate --tokens 5
expect 2 "--tokens"     generate --checkpoint "$tmp/m.safetensors" --tokens 0
expect 2 "--tokens"     generate --checkpoint "$tmp/m.safetensors" --tokens x
expect 2 "--temperature" generate --checkpoint "$tmp/m.safetensors" \
    --temperature -1
expect 2 "stray"        generate --checkpoint "$tmp/m.safetensors" stray

expect 2 "--accumulate"   train --accumulate 0
expect 2 "--lr-schedule"  train --lr-schedule cosin
expect 2 "--gamma"        train --lr-schedule cosine --gamma 0.5
expect 2 "--milestones"   train --lr-schedule multistep
expect 2 "--milestones"   train --lr-schedule multistep --milestones 5,3
expect 2 "--pct-start"    train --lr-schedule onecycle --pct-start 1

# --- run-time errors: exit 1 naming the path
missing="$tmp/nonexistent"
expect 1 "$missing" train --model gpt --data "$missing" --steps 1
expect 1 "$missing/m.safetensors" train --model gpt --steps 1 \
    --data "$text" --save "$missing/m.safetensors"
expect 1 "$missing.safetensors" generate --checkpoint "$missing.safetensors"
printf 'not a checkpoint\n' >"$tmp/bogus.safetensors"
expect 1 "$tmp/bogus.safetensors" generate \
    --checkpoint "$tmp/bogus.safetensors"

# --data naming a FIFO used to block forever in open(); a time limit would
# turn that into a failure, but it must be refused at once.
mkfifo "$tmp/fifo"
expect 1 "not a regular file" train --model gpt --steps 1 --data "$tmp/fifo"

# Non-finite values: an absurd --lr overflows the weights after the first
# update. Without --check-finite the run stops at the NaN loss pointing at
# the flag; with it, step 2 stops before its update naming the first op
# whose output overflowed.
diverge=(train --model gpt --data "$text" --layers 1 --channels 16 --steps 6
    --lr 1e30 --workers 1)
expect 1 "training diverged: loss" "${diverge[@]}"
expect 1 "--check-finite to name" "${diverge[@]}"
expect 1 "check_finite: the output of pl_linear 'h0.attn.qkv'" "${diverge[@]}" --check-finite
if limited "$cli" train --help >"$tmp/out" 2>"$tmp/err" &&
    grep -qF -- "--check-finite" "$tmp/out"; then
    ok "pleiades train --help lists --check-finite"
else
    fail "pleiades train --help: expected --check-finite"
fi

# Every output path is checked before training, so a bad --trace cannot
# cost the run (and its --save) after the last step.
limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 \
    --steps 2 --trace "$missing/t.json" --save "$tmp/kept.safetensors" \
    >"$tmp/out" 2>"$tmp/err"
got=$?
if [ "$got" -ne 1 ] || ! grep -qF -- "--trace" "$tmp/err" ||
    grep -q "^step" "$tmp/out"; then
    fail "train --trace <missing dir>: exit $got, expected 1 before any step"
else
    ok "train --trace <missing dir> refused before training"
fi
expect 1 "--save" train --model gpt --steps 1 --data "$text" --save "$tmp"

# --zero-stage in one process (one data-parallel rank) has nothing to
# shard; the start-up line says so instead of dropping the flag silently.
limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 \
    --heads 1 --steps 1 --eval-every 0 --zero-stage 2 >"$tmp/out" 2>"$tmp/err"
got=$?
if [ "$got" -ne 0 ] || ! grep -qF -- "--zero-stage 2 over 1 data-parallel rank: nothing to shard" "$tmp/out"; then
    fail "train --zero-stage 2 in one process: exit $got, or no start-up note"
else
    ok "train --zero-stage 2 in one process: the start-up line says there is nothing to shard"
fi

# --- the LR schedule reaches the optimizer and the metrics: cosine with 4
# warm-up steps over 12 steps is base*(k+1)/4 for k < 4, then
# base*(1+cos(pi*(k-4)/8))/2 (CosineAnnealingWarmupLR)
limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 \
    --heads 1 --steps 12 --eval-every 0 --lr 0.001 --lr-schedule cosine \
    --warmup-steps 4 --metrics "$tmp/lr.jsonl" >"$tmp/out" 2>"$tmp/err"
if awk -F'"lr":' 'BEGIN { bad = 0; k = 0 }
    /"lr":/ { split($2, v, /[,}]/); lr = v[1] + 0
              want = k < 4 ? 0.001 * (k + 1) / 4 : 0.0005 * (1 + cos(3.141592653589793 * (k - 4) / 8))
              if (lr - want > 1e-8 || want - lr > 1e-8) bad = 1; k++ }
    END { exit bad || k != 12 }' "$tmp/lr.jsonl"; then
    ok "train --lr-schedule cosine: the metrics' LRs follow the schedule"
else
    fail "train --lr-schedule cosine: LRs $(grep -o '"lr":[^,]*' "$tmp/lr.jsonl" | tr '\n' ' ')"
fi

# --- gradient accumulation: --steps counts updates of --accumulate batches
limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 \
    --heads 1 --steps 2 --accumulate 3 --eval-every 0 \
    --metrics "$tmp/acc.jsonl" >"$tmp/out" 2>"$tmp/err"
if grep -q "x 3 accumulated per update; 2 steps" "$tmp/out" &&
    [ "$(grep -c '"loss"' "$tmp/acc.jsonl")" -eq 2 ]; then
    ok "train --accumulate 3: 2 updates of 3 batches"
else
    fail "train --accumulate 3: $(cat "$tmp/out")"
fi

# --- clipping: --max-norm puts each update's pre-clip norm in the metrics;
# a max_norm far below it changes the run, one far above does not
expect 2 "--max-norm"  train --model gpt --max-norm -1
expect 2 "--norm-type" train --model gpt --norm-type 1
for run in tiny:0.01 huge:1000 off:0; do
    name=${run%%:*} norm=${run#*:}
    limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 \
        --heads 1 --steps 3 --eval-every 0 --max-norm "$norm" --seed 5 \
        --metrics "$tmp/clip_$name.jsonl" >"$tmp/out" 2>"$tmp/err" ||
        fail "train --max-norm $norm: $(cat "$tmp/err")"
    grep -o '"loss":[^,]*' "$tmp/clip_$name.jsonl" >"$tmp/clip_$name.loss"
done
norms=$(grep -o '"grad_norm":[0-9.e+-]*' "$tmp/clip_tiny.jsonl" | wc -l)
if [ "$norms" -eq 3 ] && ! grep -q grad_norm "$tmp/clip_off.jsonl" &&
    cmp -s "$tmp/clip_huge.loss" "$tmp/clip_off.loss" &&
    ! cmp -s "$tmp/clip_tiny.loss" "$tmp/clip_off.loss"; then
    ok "train --max-norm: grad_norm per update; clips only when the norm exceeds it"
else
    fail "train --max-norm: $norms grad_norm values; losses tiny/huge/off:" \
        "$(cat "$tmp/clip_tiny.loss" "$tmp/clip_huge.loss" "$tmp/clip_off.loss" | tr '\n' ' ')"
fi

# --- a user-written schedule from the command line (--schedule gpipe:
# examples/schedules/gpipe.c), ZB-H1 and ZB-V (2 chunks per stage in a
# V: stage 0 holds blocks 0 and 3) train exactly like the
# non-pipelined run with as many tiles as microbatches (same losses in the
# metrics), and their traces carry their names
expect 2 "--schedule" train --model gpt --schedule gpip
for s in none:--tiles gpipe:--microbatches zb-h1:--microbatches zbv:--microbatches; do
    name=${s%%:*} flag=${s#*:}
    limited "$cli" train --model gpt --data "$text" --layers 2 --channels 16 \
        --heads 1 --steps 3 --eval-every 0 --seed 5 --workers 2 --batch-size 8 \
        --schedule "$name" "$flag" 4 --metrics "$tmp/sched_$name.jsonl" \
        --trace "$tmp/sched_$name.json" >"$tmp/sched_$name.out" 2>"$tmp/err" ||
        fail "train --schedule $name: $(cat "$tmp/err")"
    grep -o '"loss":[^,]*' "$tmp/sched_$name.jsonl" >"$tmp/sched_$name.loss"
done
# ZB-H1's theoretical bubble in the trace is the paper's formula with the
# step's measured mean F, B and W item times (p=2, m=4), and trace-summary
# prints it with those times.
if python3 - "$tmp/sched_zb-h1.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))["otherData"]
f, b, w = o["item_f_us"], o["item_b_us"], o["item_w_us"]
p, m = 2, 4
want = max(0.0, (p - 1) * (f + b - w) / (m * (f + b + w)))
sys.exit(0 if f > 0 and b > 0 and w > 0 and abs(o["theoretical_bubble"] - want) < 1e-12 else 1)
PY
then
    if limited "$cli" trace-summary "$tmp/sched_zb-h1.json" >"$tmp/out" 2>"$tmp/err" &&
        grep -qE "^  theoretical bubble [0-9.]+: zb-h1's formula with the measured mean item times F [0-9.]+ ms, B [0-9.]+ ms, W [0-9.]+ ms$" "$tmp/out"; then
        ok "zb-h1: theoretical bubble from the measured F/B/W times, in the trace and its summary"
    else
        fail "zb-h1: trace-summary: $(grep -i theoretical "$tmp/out") $(cat "$tmp/err")"
    fi
else
    fail "zb-h1: the trace's theoretical bubble is not the paper's formula of its item times"
fi
# ZB-V: the V on the start-up line (4 blocks, one per part: stage 0 holds
# the first and the last), and its theory from the measured item times
# in the trace and its summary.
if grep -qE '^pipeline zbv: 2 stages x 2 chunks, 4 microbatches; 1 worker per stage; stage 0: blocks 0, 3 \| stage 1: blocks 1, 2 \(cut on FLOPs\)$' \
        "$tmp/sched_zbv.out" &&
    limited "$cli" trace-summary "$tmp/sched_zbv.json" >"$tmp/out" 2>"$tmp/err" &&
    grep -qE "^  theoretical bubble [0-9.]+: zbv's formula with the measured mean item times F [0-9.]+ ms, B [0-9.]+ ms, W [0-9.]+ ms$" "$tmp/out"; then
    ok "train --schedule zbv: the V on the start-up line, its theory in the trace summary"
else
    fail "train --schedule zbv: $(grep pipeline "$tmp/sched_zbv.out") $(grep -i theoretical "$tmp/out")"
fi
# The start-up line names the schedule, P, V, M and each stage's blocks
# (4 blocks: embedding, 2 layers, head), cut on FLOPs first; after step 2
# (timed) a line gives the measured cut, every block in one stage.
if grep -qE '^pipeline gpipe: 2 stages x 1 chunk, 4 microbatches; 1 worker per stage; stage 0: blocks 0(-[0-2])? \| stage 1: blocks [1-3](-3)? \(cut on FLOPs; recut on the times measured in training step 2\)$' \
        "$tmp/sched_gpipe.out" &&
    grep -qE '^pipeline stages cut on the block times of training step 2: stage 0: blocks 0(-[0-2])? \([0-9.]+ ms\) \| stage 1: blocks [1-3](-3)? \([0-9.]+ ms\)$' \
        "$tmp/sched_gpipe.out"; then
    ok "train --schedule gpipe: start-up line with the FLOP cut, then the measured cut"
else
    fail "train --schedule gpipe: pipeline lines: $(grep pipeline "$tmp/sched_gpipe.out")"
fi
# Under a placement policy weight gradients write whole-chunk handles,
# which order them across stages: a schedule that lists W items (ZB-H1)
# is refused, naming the way out; 1F1B trains.
expect 1 "schedule 'zb-h1' lists W items, which a placement policy does not allow" \
    train --model gpt --data "$text" --layers 2 --channels 16 --heads 1 --steps 2 \
    --workers 2 --batch-size 8 --schedule zb-h1 --budget-mb 64
if grep -qF "use a schedule without W items (1f1b, interleaved)" "$tmp/err" &&
    limited "$cli" train --model gpt --data "$text" --layers 2 --channels 16 --heads 1 \
        --steps 2 --workers 2 --batch-size 8 --schedule 1f1b --budget-mb 64 \
        --eval-every 0 >"$tmp/out" 2>"$tmp/err"; then
    ok "train --budget-mb: ZB-H1 refused with the alternative, 1F1B trains"
else
    fail "train --budget-mb with zb-h1/1f1b: $(cat "$tmp/err")"
fi
expect 2 "--stage-balance" train --model gpt --stage-balance flops
expect 2 "--stage-balance" train --model gpt --schedule 1f1b --stage-balance fast
expect 2 "--stage-balance" train --model gpt --schedule 1f1b --layers-per-stage 3,3 \
    --stage-balance flops
limited "$cli" train --model gpt --data "$text" --layers 2 --channels 16 --heads 1 \
    --steps 3 --eval-every 0 --workers 2 --batch-size 8 --schedule 1f1b \
    --stage-balance flops >"$tmp/out" 2>"$tmp/err" ||
    fail "train --stage-balance flops: $(cat "$tmp/err")"
if grep -qE '^pipeline 1f1b: 2 stages x 1 chunk, 4 microbatches; .*\(cut on FLOPs\)$' "$tmp/out" &&
    ! grep -q "block times" "$tmp/out"; then
    ok "train --stage-balance flops: the FLOP cut throughout"
else
    fail "train --stage-balance flops: $(grep pipeline "$tmp/out")"
fi
# One block per part (4 blocks, 2 stages x 2 chunks): nothing to choose,
# so nothing is timed and the start-up line promises no recut.
limited "$cli" train --model gpt --data "$text" --layers 2 --channels 16 --heads 1 \
    --steps 3 --eval-every 0 --workers 2 --batch-size 8 --schedule interleaved \
    --microbatches 4 >"$tmp/out" 2>"$tmp/err" ||
    fail "train --schedule interleaved, 4 blocks: $(cat "$tmp/err")"
if grep -qE '^pipeline interleaved: 2 stages x 2 chunks, 4 microbatches; 1 worker per stage; stage 0: blocks 0, 2 \| stage 1: blocks 1, 3 \(cut on FLOPs\)$' "$tmp/out" &&
    ! grep -q "block times" "$tmp/out"; then
    ok "train: one block per part is cut once, with no recut promised"
else
    fail "train, one block per part: $(grep pipeline "$tmp/out")"
fi
# Default microbatch counts: 2P when it divides the batch, else the next
# count that does (3 stages, batch 16: 8), never one the user did not give
# refused in --microbatches' name; a stage per worker, said in flag terms.
limited "$cli" train --model gpt --data "$text" --layers 4 --channels 16 --heads 1 \
    --steps 1 --eval-every 0 --workers 3 --batch-size 16 --schedule 1f1b \
    --stages 3 >"$tmp/out" 2>"$tmp/err" ||
    fail "train --stages 3, batch 16: $(cat "$tmp/err")"
if grep -qE '^pipeline 1f1b: 3 stages x 1 chunk, 8 microbatches; ' "$tmp/out"; then
    ok "train --stages 3 --batch-size 16: 8 microbatches by default"
else
    fail "train --stages 3 --batch-size 16: $(grep pipeline "$tmp/out")"
fi
expect 2 "give --workers 3" train --model gpt --data "$text" --layers 4 --channels 16 \
    --heads 1 --steps 1 --workers 2 --schedule 1f1b --stages 3
expect 2 "--warmup-steps 5: must be less than the schedule's 2 steps" train --model gpt \
    --data "$text" --layers 1 --channels 16 --heads 1 --steps 2 --lr-schedule cosine \
    --warmup-steps 5
expect 2 "multiple of 3" train --model gpt --layers 4 --schedule interleaved --stages 3 \
    --batch-size 8
# Fewer samples than stages: one sample per microbatch, m = 2 < p = 3
# (1F1B's warm-up min(p-s-1, m)), where this was once refused.
limited "$cli" train --model gpt --data "$text" --layers 4 --channels 16 --heads 1 \
    --steps 2 --eval-every 0 --workers 3 --schedule 1f1b --stages 3 --batch-size 2 \
    >"$tmp/out" 2>"$tmp/err" || fail "train --stages 3 --batch-size 2: $(cat "$tmp/err")"
if grep -qE '^pipeline 1f1b: 3 stages x 1 chunk, 2 microbatches; ' "$tmp/out"; then
    ok "train --schedule 1f1b --stages 3 --batch-size 2: 2 microbatches (m < p)"
else
    fail "train --stages 3 --batch-size 2: $(grep pipeline "$tmp/out")"
fi
for name in gpipe zb-h1 zbv; do
    if [ "$(wc -l <"$tmp/sched_$name.loss")" -eq 3 ] &&
        cmp -s "$tmp/sched_none.loss" "$tmp/sched_$name.loss" &&
        grep -q "\"schedule\": *\"$name\"" "$tmp/sched_$name.json"; then
        ok "train --schedule $name: the losses of --schedule none, traced as $name"
    else
        fail "train --schedule $name: losses none/$name:" \
            "$(cat "$tmp/sched_none.loss" "$tmp/sched_$name.loss" | tr '\n' ' ')"
    fi
done

# --- activation recomputation: --recompute full and selective train to
# the losses of keeping everything (the sched_none run: 4 tiles, same
# seed), report their plan and the activations' peak (below keeping
# everything's, read from the metrics), also under 1F1B; the knobs are
# refused where they do nothing
for rc in full:none selective:none full:1f1b; do
    mode=${rc%%:*} sched=${rc#*:}
    limited "$cli" train --model gpt --data "$text" --layers 2 --channels 16 \
        --heads 1 --steps 3 --eval-every 0 --seed 5 --workers 2 --batch-size 8 \
        --schedule "$sched" $([ "$sched" = none ] && echo --tiles || echo --microbatches) 4 \
        --recompute "$mode" --metrics "$tmp/rc_$mode$sched.jsonl" >"$tmp/out" 2>"$tmp/err" ||
        fail "train --recompute $mode --schedule $sched: $(cat "$tmp/err")"
    grep -o '"loss":[^,]*' "$tmp/rc_$mode$sched.jsonl" >"$tmp/rc.loss"
    peak=$(grep -o '"activation_peak_bytes":[0-9]*' "$tmp/rc_$mode$sched.jsonl" | tail -1 |
        cut -d: -f2)
    if [ "$(wc -l <"$tmp/rc.loss")" -eq 3 ] && cmp -s "$tmp/sched_none.loss" "$tmp/rc.loss" &&
        grep -q "^recompute ($mode): stage 0: " "$tmp/out" &&
        grep -q "^memory: activations peak " "$tmp/out" && [ -n "$peak" ] && [ "$peak" -gt 0 ]; then
        ok "train --recompute $mode --schedule $sched: the losses of keeping everything," \
            "activations peak $peak B"
        echo "$peak" >"$tmp/peak_$mode$sched"
    else
        fail "train --recompute $mode --schedule $sched: losses" \
            "$(cat "$tmp/sched_none.loss" "$tmp/rc.loss" | tr '\n' ' ') peak '$peak';" \
            "$(grep -E '^(recompute|memory)' "$tmp/out")"
    fi
done
if [ -f "$tmp/peak_fullnone" ] && [ -f "$tmp/peak_selectivenone" ] &&
    [ "$(cat "$tmp/peak_fullnone")" -lt "$(cat "$tmp/peak_selectivenone")" ]; then
    ok "train --recompute: full peaks below selective"
else
    fail "train --recompute: full's peak not below selective's"
fi
expect 2 "--recompute-layers: only applies with --recompute full or selective" train \
    --model gpt --recompute-layers 2
expect 2 "not both" train --model gpt --recompute full --recompute-ratio 0.5 \
    --recompute-layers 1
expect 2 "--check-finite" train --model gpt --recompute full --check-finite
expect 2 "--recompute" train --model gpt --recompute partial
expect 2 "--recompute-ratio" train --model gpt --recompute full --recompute-ratio 1.5

# --- dynamic loss scaling: power-of-two scales leave the losses as they
# are; each step's scale and overflow flag go into the metrics
expect 2 "--initial-scale" train --model gpt --loss-scale dynamic --initial-scale 0
expect 2 "--loss-scale"    train --model gpt --loss-scale static
limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 --heads 1 \
    --steps 4 --eval-every 0 --seed 5 --loss-scale dynamic --growth-interval 2 \
    --metrics "$tmp/ls.jsonl" >"$tmp/out" 2>"$tmp/err" ||
    fail "train --loss-scale dynamic: $(cat "$tmp/err")"
scales=$(grep -o '"loss_scale":[0-9.e+]*' "$tmp/ls.jsonl" | cut -d: -f2 | tr '\n' ' ')
if [ "$(grep -o '"loss":[^,]*' "$tmp/ls.jsonl" | head -3)" = "$(cat "$tmp/clip_off.loss")" ] &&
    [ "$(grep -c '"overflow":0' "$tmp/ls.jsonl")" -eq 4 ] &&
    [ "$scales" = "65536 131072 131072 262144 " ]; then
    ok "train --loss-scale dynamic: same losses, the scale grows every 2 clean steps"
else
    fail "train --loss-scale dynamic: scales '$scales'; $(head -2 "$tmp/ls.jsonl")"
fi

# --- sizes checked before anything is allocated (hardening regressions):
# attention's B·NH·T² scratch once wrapped a 32-bit length (heap overflow),
# and a model larger than memory grew for a minute before failing.
expect 1 "h0.attn.att" train --model gpt --layers 1 --channels 16 --heads 16 \
    --context 16384 --batch-size 1 --steps 1 --data "$text"
expect 1 "of memory are available" train --model gpt --layers 64 \
    --channels 16384 --heads 1024 --steps 1 --data "$text"
# The same through a crafted checkpoint's metadata (a header, no tensors).
# crafted FILE JSON: a safetensors file holding only the header JSON.
crafted() {
    local len=${#2}
    # shellcheck disable=SC2059
    printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))\\0\\0\\0\\0\\0\\0%s" \
        "$2" >"$1"
}
meta='"model":"gpt","vocab":"256","channels":"16"'
crafted "$tmp/crafted.safetensors" \
    "{\"__metadata__\":{$meta,\"context\":\"16384\",\"layers\":\"1\",\"heads\":\"16\"}}"
expect 1 "h0.attn.att" generate --checkpoint "$tmp/crafted.safetensors"
# Metadata asking for more than `train` accepts is refused by name, before
# a billion layers are built.
crafted "$tmp/layers.safetensors" \
    "{\"__metadata__\":{$meta,\"context\":\"16\",\"layers\":\"1000000000\",\"heads\":\"1\"}}"
expect 1 "metadata 'layers'" generate --checkpoint "$tmp/layers.safetensors"

# --- a tiny real run
ckpt="$tmp/m.safetensors"
metrics="$tmp/m.jsonl"
limited "$cli" train --model gpt --data "$text" --layers 1 --channels 16 \
    --heads 2 --context 16 --steps 5 --eval-every 5 --batch-size 4 \
    --workers 2 --save "$ckpt" --metrics "$metrics" --tensorboard "$tmp/tb" \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 0 ]; then
    fail "tiny gpt run: exit status $rc"
else
    ok "tiny gpt run"
    steps=$(grep -c '"tokens_per_s"' "$metrics")
    if [ "$steps" -eq 5 ]; then ok "5 step lines with tokens_per_s"
    else fail "metrics: $steps lines with tokens_per_s, expected 5"; fi
    if grep -q '"step":5,"val_loss":[0-9]' "$metrics"; then ok "val_loss"
    else fail "metrics: no val_loss line for step 5"; fi
    if grep -q '^step 5/5  train loss [0-9.]*  val loss [0-9.]*' "$tmp/out"
    then ok "progress line"
    else fail "stdout: no 'step 5/5  train loss ... val loss ...' line"; fi
    if grep -q 'unigram entropy [0-9]' "$tmp/out"; then ok "entropy line"
    else fail "stdout: no unigram entropy"; fi
    if [ -s "$ckpt" ] && grep -qxF "saved $ckpt" "$tmp/out"; then
        ok "checkpoint saved"
    else
        fail "no checkpoint at $ckpt or no 'saved' line"
    fi
    # --tensorboard: the event file's train/loss scalars are the metrics
    # file's losses (as floats), decoded independently of our C code
    decode="$(dirname "$0")/tensorboard_decode.py"
    events=$(ls "$tmp"/tb/events.out.tfevents.* 2>/dev/null | head -1)
    if ! /usr/bin/python3 "$decode" --check 2>/dev/null; then
        echo "SKIP: --tensorboard decoding (no python3-protobuf)"
    elif [ -n "$events" ] && /usr/bin/python3 "$decode" "$events" >"$tmp/tb.txt"; then
        tb=$(awk '$2 == "train/loss" { printf "%.5g\n", $3 }' "$tmp/tb.txt")
        js=$(sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$metrics" | awk '{ printf "%.5g\n", $1 }')
        vl=$(grep -c ' test/loss ' "$tmp/tb.txt")
        if [ -n "$tb" ] && [ "$tb" = "$js" ] && [ "$vl" -eq 1 ]; then
            ok "--tensorboard: 5 train/loss scalars as in the metrics file, 1 test/loss"
        else
            fail "--tensorboard: train/loss '$(echo $tb)' vs metrics '$(echo $js)', $vl test/loss"
        fi
    else
        fail "--tensorboard: no decodable event file in $tmp/tb: $(ls "$tmp/tb" 2>&1)"
    fi
fi

# generate GEN-ARGS... > $tmp/gen: exit 0 expected.
generate() {
    limited "$cli" generate --checkpoint "$ckpt" --workers 2 "$@" \
        >"$tmp/gen" 2>"$tmp/err"
}

if [ -s "$ckpt" ]; then
    generate --prompt "Hello" --tokens 20 --seed 1 && cp "$tmp/gen" "$tmp/g1"
    generate --prompt "Hello" --tokens 20 --seed 1 && cp "$tmp/gen" "$tmp/g2"
    generate --prompt "Hello" --tokens 20 --seed 2 && cp "$tmp/gen" "$tmp/g3"
    if [ ! -f "$tmp/g1" ] || [ ! -f "$tmp/g2" ] || [ ! -f "$tmp/g3" ]; then
        fail "generate failed"
    else
        # Piped output has no trailing newline: exactly 5 + 20 bytes.
        n=$(wc -c <"$tmp/g1")
        if [ "$n" -eq 25 ]; then ok "generate: 25 bytes"
        else fail "generate: $n bytes, expected 25 (prompt 5 + 20)"; fi
        if [ "$(head -c 5 "$tmp/g1")" = "Hello" ]; then ok "prompt echoed"
        else fail "generate: output does not start with the prompt"; fi
        if cmp -s "$tmp/g1" "$tmp/g2"; then ok "same seed, same text"
        else fail "generate: seed 1 twice gave different text"; fi
        if ! cmp -s "$tmp/g1" "$tmp/g3"; then ok "other seed, other text"
        else fail "generate: seeds 1 and 2 gave the same text"; fi
    fi
    # Temperature 0 is greedy: the seed does not matter.
    generate --prompt "" --tokens 8 --temperature 0 --seed 1 &&
        cp "$tmp/gen" "$tmp/t1"
    generate --prompt "" --tokens 8 --temperature 0 --seed 2 &&
        cp "$tmp/gen" "$tmp/t2"
    if [ -f "$tmp/t1" ] && [ "$(wc -c <"$tmp/t1")" -eq 8 ] &&
        cmp -s "$tmp/t1" "$tmp/t2"; then
        ok "greedy generation from an empty prompt"
    else
        fail "generate --temperature 0 --prompt '': expected the same 8 bytes"
    fi
fi

finish "all GPT CLI checks passed"
