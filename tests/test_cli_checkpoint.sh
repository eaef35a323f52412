#!/usr/bin/env bash
# `pleiades train --checkpoint-dir/--save-every/--keep-last/--resume`:
# a run resumed from a checkpoint logs exactly the losses of a run that
# never stopped (non-pipelined and 1F1B); --keep-last prunes; bad resumes
# are refused; and `kill -9` at any moment leaves every step-<N> complete
# and the newest one resumable.
#
# Usage: test_cli_checkpoint.sh PATH-TO-PLEIADES [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_checkpoint.sh PATH-TO-PLEIADES [TEXT]}
text=${2:-/usr/share/games/fortunes}
time_limit=300
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

gpt=(train --model gpt --data "$text" --layers 2 --channels 16 --heads 2 --context 16
     --batch-size 4 --eval-every 0 --seed 5 --accumulate 2)

# "STEP LOSS" per training step of a metrics file (epoch lines have no loss)
losses() { sed -n 's/.*"step":\([0-9]*\),.*"loss":\([^,}]*\).*/\1 \2/p' "$1"; }

# --- exact resume: 3 + 3 steps log the last 3 losses of 6 straight ones,
# in fp32 and bf16 (master weights and all), pipelined, under a budget
for sched in "none --precision bf16" "1f1b --stages 2 --microbatches 2 --precision bf16" \
             "none --precision bf16 --placement auto --budget-mb 4" \
             "none --precision fp16" "none" "1f1b --stages 2 --microbatches 2"; do
    # shellcheck disable=SC2086
    set -- --schedule $sched
    rm -rf "$tmp/d"
    limited "$cli" "${gpt[@]}" "$@" --steps 6 --metrics "$tmp/a.jsonl" >/dev/null 2>"$tmp/err" &&
    limited "$cli" "${gpt[@]}" "$@" --steps 3 --checkpoint-dir "$tmp/d" --save-every 1 \
        --keep-last 2 >/dev/null 2>"$tmp/err" &&
    limited "$cli" "${gpt[@]}" "$@" --steps 6 --resume "$tmp/d" \
        --metrics "$tmp/b.jsonl" >"$tmp/out" 2>"$tmp/err" ||
        fail "--schedule $sched: a run failed"
    if [ "$(losses "$tmp/a.jsonl" | tail -3)" = "$(losses "$tmp/b.jsonl")" ] &&
        [ "$(losses "$tmp/b.jsonl" | wc -l)" -eq 3 ] &&
        grep -q "resumed from $tmp/d/step-3 at step 3" "$tmp/out"; then
        ok "--schedule $sched: 3 + resume + 3 steps = 6 steps, loss for loss"
    else
        fail "--schedule $sched: straight $(losses "$tmp/a.jsonl" | tr '\n' ' ')" \
            "resumed $(losses "$tmp/b.jsonl" | tr '\n' ' ')"
    fi
    if [ "$(ls "$tmp/d")" = "$(printf 'step-2\nstep-3')" ]; then
        ok "--keep-last 2 keeps step-2 and step-3"
    else
        fail "--keep-last 2 left: $(ls "$tmp/d" | tr '\n' ' ')"
    fi
done

# --- refused: exit 2 for usage, 1 for a checkpoint that cannot be used
expect 2 "--checkpoint-dir" train --model gpt --save-every 5
expect 2 "--checkpoint-dir" train --model gpt --keep-last 1
expect 1 "no checkpoint" "${gpt[@]}" --steps 6 --resume "$tmp"
expect 2 "--seed 5" "${gpt[@]}" --steps 6 --seed 6 --resume "$tmp/d"
expect 2 "--steps counts all steps" "${gpt[@]}" --steps 3 --resume "$tmp/d"
expect 1 "optimizer is adamw" "${gpt[@]}" --steps 6 --optimizer sgd --resume "$tmp/d"
# another shape: named by its flag before anything loads (the checkpoint
# keeps the config), and without the config by the engine's parameter count
expect 2 "holds a GPT with --channels 16, this run builds --channels 32" "${gpt[@]}" \
    --steps 6 --channels 32 --resume "$tmp/d"
rm -rf "$tmp/t" && mkdir -p "$tmp/t" && cp -r "$tmp/d/step-3" "$tmp/t/" &&
    sed -i '/"gpt\./d' "$tmp/t/step-3/state.json" || fail "could not drop the config"
expect 1 "field 'parameters'" "${gpt[@]}" --steps 6 --channels 32 --resume "$tmp/t"
# generate from a checkpoint directory: the newest step's weights, the
# same text as from the --save file of the same run
limited "$cli" "${gpt[@]}" --steps 3 --checkpoint-dir "$tmp/g" --save-every 2 \
    --save "$tmp/g.safetensors" >/dev/null 2>"$tmp/err" || fail "a run to generate from failed"
for c in "$tmp/g.safetensors" "$tmp/g" "$tmp/g/step-3" "$tmp/g/step-2"; do
    limited "$cli" generate --checkpoint "$c" --tokens 40 --temperature 1 --seed 3 \
        >"$tmp/gen_$(basename "$c")" 2>"$tmp/err" || fail "generate --checkpoint $c failed"
done
if cmp -s "$tmp/gen_g.safetensors" "$tmp/gen_g" && cmp -s "$tmp/gen_g" "$tmp/gen_step-3" &&
    [ "$(wc -c <"$tmp/gen_g")" -eq 40 ] && ! cmp -s "$tmp/gen_g" "$tmp/gen_step-2"; then
    ok "generate --checkpoint DIR: the newest step's text, that of the --save file"
else
    fail "generate from $tmp/g: '$(cat "$tmp/gen_g")' vs the --save file's" \
        "'$(cat "$tmp/gen_g.safetensors")', step-2's '$(cat "$tmp/gen_step-2")'"
fi
expect 1 "holds no GPT config" generate --checkpoint "$tmp/t"
# a data position out of range in state.json: refused, never counted with
rm -rf "$tmp/t" && mkdir -p "$tmp/t" && cp -r "$tmp/d/step-3" "$tmp/t/" &&
    sed -i 's/"epoch": [0-9]*/"epoch": 9223372036854775807/' "$tmp/t/step-3/state.json" ||
    fail "could not make a tampered checkpoint"
expect 1 "each in [0, 2^52]" "${gpt[@]}" --steps 6 --resume "$tmp/t"
# a NaN in the optimizer states (the first float of the data): refused at
# load, naming the tensor, not a diverged loss steps later
rm -rf "$tmp/t" && mkdir -p "$tmp/t" && cp -r "$tmp/d/step-3" "$tmp/t/" &&
    opt="$tmp/t/step-3/optimizer.safetensors" &&
    header=$(od -An -t u8 -N 8 "$opt" | tr -d ' ') &&
    printf '\x00\x00\xc0\x7f' |
    dd of="$opt" bs=1 seek=$((8 + header)) conv=notrunc status=none ||
    fail "could not make a damaged checkpoint"
# its checksum catches it first, naming the file
expect 1 "optimizer.safetensors: checksum mismatch" "${gpt[@]}" --steps 6 --resume "$tmp/t"
# a checkpoint of the format before checksums (version 1) still refuses it
python3 - "$tmp/t/step-3/state.json" <<'PY' || fail "could not make a version-1 state.json"
import json, sys
s = json.load(open(sys.argv[1]))
s["version"] = 1
del s["files"]
json.dump(s, open(sys.argv[1], "w"))
PY
expect 1 "holds NaN at element 0: refused" "${gpt[@]}" --steps 6 --resume "$tmp/t"
# a root whose newest checkpoint is damaged resumes from the newest valid
# one and says so, naming both; the damaged one named alone is refused
rm -rf "$tmp/t" && cp -r "$tmp/d" "$tmp/t" &&
    printf '\x00\x00\x00\x00' |
    dd of="$tmp/t/step-3/model.safetensors" bs=1 seek=200 conv=notrunc status=none ||
    fail "could not make a damaged checkpoint"
if limited "$cli" "${gpt[@]}" --steps 6 --resume "$tmp/t" >"$tmp/out" 2>"$tmp/err" &&
    grep -q "resumed from $tmp/t/step-2 at step 2" "$tmp/out" &&
    grep -q "step-3 fails validation: .*model.safetensors: checksum mismatch" "$tmp/err" &&
    grep -q "resuming from $tmp/t/step-2, the newest valid checkpoint, instead of $tmp/t/step-3" \
        "$tmp/err"; then
    ok "--resume DIR with a damaged newest checkpoint: resumes step-2 and names both"
else
    fail "--resume past a damaged step-3: $(cat "$tmp/out" "$tmp/err")"
fi
expect 1 "model.safetensors: checksum mismatch" "${gpt[@]}" --steps 6 --resume "$tmp/t/step-3"
# state.json's fields and the values that restate them must agree
rm -rf "$tmp/t" && mkdir -p "$tmp/t" && cp -r "$tmp/d/step-3" "$tmp/t/" &&
    sed -i 's/"step": 3,/"step": 2,/' "$tmp/t/step-3/state.json" ||
    fail "could not make a tampered checkpoint"
expect 1 "field 'step' is 2 but 'values.step' is 3" "${gpt[@]}" --steps 6 --resume "$tmp/t"

# --- nothing outside the run's own checkpoints is ever deleted: a link
# named like a checkpoint (pruned by --keep-last) or like a killed save's
# temporary (swept by the next save) is left alone, its target intact, and
# named in a warning
rm -rf "$tmp/pr" "$tmp/sw" "$tmp/precious" "$tmp/precious2"
mkdir -p "$tmp/pr" "$tmp/sw" "$tmp/precious" "$tmp/precious2" &&
    echo keep >"$tmp/precious/important.txt" && echo keep >"$tmp/precious2/important.txt" &&
    ln -s ../precious "$tmp/pr/step-1" && ln -s ../precious2 "$tmp/sw/step-9.tmp.999999" ||
    fail "could not set up the links"
limited "$cli" "${gpt[@]}" --steps 4 --save-every 2 --keep-last 1 --checkpoint-dir "$tmp/pr" \
    >/dev/null 2>"$tmp/err" || fail "the --keep-last run failed: $(cat "$tmp/err")"
if [ -f "$tmp/precious/important.txt" ] && [ -L "$tmp/pr/step-1" ] &&
    [ "$(ls "$tmp/pr")" = "$(printf 'step-1\nstep-4')" ] &&
    grep -q "left '$tmp/pr/step-1' alone: it is a symbolic link" "$tmp/err"; then
    ok "--keep-last: a step-1 link is left alone and named, its target intact"
else
    fail "--keep-last through a link: $(ls "$tmp/precious" "$tmp/pr" | tr '\n' ' ') $(cat "$tmp/err")"
fi
limited "$cli" "${gpt[@]}" --steps 2 --checkpoint-dir "$tmp/sw" >/dev/null 2>"$tmp/err" ||
    fail "the --checkpoint-dir run failed: $(cat "$tmp/err")"
if [ -f "$tmp/precious2/important.txt" ] && [ -L "$tmp/sw/step-9.tmp.999999" ] &&
    grep -q "left '$tmp/sw/step-9.tmp.999999' alone" "$tmp/err"; then
    ok "a link named like a killed save's temporary is left alone, its target intact"
else
    fail "the sweep through a link: $(ls "$tmp/precious2") $(cat "$tmp/err")"
fi
# a save never replaces what is not its own checkpoint
rm -rf "$tmp/pr" && mkdir -p "$tmp/pr/step-2" && echo mine >"$tmp/pr/step-2/notes.txt"
expect 1 "refusing to replace it: it is a directory without Pleiades' marker" "${gpt[@]}" \
    --steps 2 --checkpoint-dir "$tmp/pr"
[ -f "$tmp/pr/step-2/notes.txt" ] || fail "a user's step-2 folder lost notes.txt"

# --- --checkpoint-dir is checked before the first step
echo x >"$tmp/afile"
expect 1 "--checkpoint-dir: '$tmp/afile' is not a directory" "${gpt[@]}" --steps 2 \
    --checkpoint-dir "$tmp/afile"
expect 1 "--checkpoint-dir: cannot create '$tmp/nope/x': its parent directory does not exist" \
    "${gpt[@]}" --steps 2 --checkpoint-dir "$tmp/nope/x"
# Two ranks create one new --checkpoint-dir at once and the slower one's
# mkdir fails with EEXIST (CI, 2026-11-28: "cannot create ...: File
# exists"): a folder made by a peer is a folder to use. The shim makes the
# race certain: mkdir of *-raced creates it and then reports EEXIST.
if [ -n "${PLEIADES_TEST_MKDIR_RACED:-}" ]; then
    if LD_PRELOAD="$PLEIADES_TEST_MKDIR_RACED" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
        limited "$cli" "${gpt[@]}" --steps 2 --save-every 2 --checkpoint-dir "$tmp/new-raced" \
        >/dev/null 2>"$tmp/err" && [ -f "$tmp/new-raced/step-2/state.json" ]; then
        ok "--checkpoint-dir made by another rank at the same moment is used"
    else
        fail "--checkpoint-dir created by a peer in the race: $(cat "$tmp/err")"
    fi
fi
# A checkpoint that cannot be written mid-run (here a file-size limit
# between the weights' and the optimizer states' sizes: a full disk as
# far as the save knows): with --save still writable the run goes on and
# ends with its weights; without, it stops naming the last good checkpoint.
full_run() { limited bash -c 'trap "" XFSZ; ulimit -f 64; exec "$0" "$@"' "$cli" "$@"; }
rm -rf "$tmp/full" "$tmp/full.safetensors"
if full_run "${gpt[@]}" --steps 4 --save-every 2 --checkpoint-dir "$tmp/full" \
        --save "$tmp/full.safetensors" >"$tmp/out" 2>"$tmp/err" &&
    [ -s "$tmp/full.safetensors" ] && [ "$(grep -c 'failed: .*File too large; training goes on' \
        "$tmp/err")" = 2 ] && [ -z "$(ls "$tmp/full")" ]; then
    ok "a checkpoint that fails mid-run: reported, the run ends with its --save"
else
    fail "a failing checkpoint with --save: $(cat "$tmp/err")"
fi
rm -rf "$tmp/full"
full_run "${gpt[@]}" --steps 4 --save-every 2 --checkpoint-dir "$tmp/full" \
    --metrics "$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err"
got=$?
if [ "$got" = 1 ] && grep -qF "stopping (no --save to keep the weights); this run saved no" \
        "$tmp/err" && [ "$(losses "$tmp/m.jsonl" | wc -l)" = 2 ]; then
    ok "a checkpoint that fails mid-run without --save: stops at once, exit 1, says why"
else
    fail "a failing checkpoint without --save: exit $got"
fi
# a 16-bit checkpoint resumes only in its precision and master-weights mode
limited "$cli" "${gpt[@]}" --precision bf16 --steps 2 --checkpoint-dir "$tmp/h" \
    --save-every 2 >/dev/null 2>"$tmp/err" || fail "a bf16 run with a checkpoint failed"
if [ -f "$tmp/h/step-2/master.safetensors" ]; then
    ok "a bf16 checkpoint holds master.safetensors"
else
    fail "no master.safetensors in $tmp/h/step-2: $(ls "$tmp/h/step-2" | tr '\n' ' ')"
fi
expect 1 "the checkpoint's is bf16, the engine's fp32" "${gpt[@]}" --steps 4 --resume "$tmp/h"
expect 1 "the checkpoint's is bf16, the engine's fp16" "${gpt[@]}" --steps 4 \
    --precision fp16 --resume "$tmp/h"
expect 1 "master_weights" "${gpt[@]}" --steps 4 --precision bf16 --master-weights off \
    --resume "$tmp/h"
expect 2 "--precision" "${gpt[@]}" --steps 4 --precision fp8

# --- the MLP trainer: its data position is (epoch, batch); resumed in the
# middle of an epoch and at the end of the run
mnist=/usr/share/datasets/fashion-mnist
if [ -d "$mnist" ]; then
    mlp=(train --model mlp --data "$mnist" --hidden 16 --batch-size 2000 --seed 3
         --workers 2)
    rm -rf "$tmp/m"
    limited "$cli" "${mlp[@]}" --epochs 2 --metrics "$tmp/ma.jsonl" >/dev/null 2>"$tmp/err" &&
    limited "$cli" "${mlp[@]}" --epochs 1 --checkpoint-dir "$tmp/m" --save-every 20 \
        >/dev/null 2>"$tmp/err" &&
    limited "$cli" "${mlp[@]}" --epochs 2 --resume "$tmp/m/step-20" \
        --metrics "$tmp/mb.jsonl" >"$tmp/out" 2>"$tmp/err" &&
    limited "$cli" "${mlp[@]}" --epochs 2 --resume "$tmp/m" \
        --metrics "$tmp/mc.jsonl" >>"$tmp/out" 2>"$tmp/err" ||
        fail "mlp: a run failed"
    if [ "$(losses "$tmp/ma.jsonl" | tail -40)" = "$(losses "$tmp/mb.jsonl")" ] &&
        [ "$(losses "$tmp/ma.jsonl" | tail -30)" = "$(losses "$tmp/mc.jsonl")" ] &&
        [ "$(losses "$tmp/mb.jsonl" | wc -l)" -eq 40 ] &&
        grep -q "epoch 1, batch 20" "$tmp/out" && grep -q "epoch 2, batch 0" "$tmp/out"; then
        ok "mlp: resumed mid-epoch (batch 20) and after epoch 1, loss for loss"
    else
        fail "mlp: straight $(losses "$tmp/ma.jsonl" | tail -3 | tr '\n' ' ')" \
            "resumed $(losses "$tmp/mb.jsonl" | tail -3 | tr '\n' ' ')"
    fi
    expect 2 "--epochs counts all epochs" "${mlp[@]}" --epochs 1 --resume "$tmp/m"
fi

# --- kill -9 during a run that saves every step: whatever the moment,
# every step-<N> is complete and the newest resumes
big=(train --model gpt --data "$text" --layers 2 --channels 128 --heads 2 --context 32
     --batch-size 4 --eval-every 0 --seed 5 --steps 100000)
killed_ok=0
for delay in 0 0.3 0.7; do
    rm -rf "$tmp/k"
    "$cli" "${big[@]}" --checkpoint-dir "$tmp/k" --save-every 1 --quiet \
        >/dev/null 2>&1 &
    pid=$!
    # The first checkpoint (slow machines and sanitizer builds take a
    # while to get there), then a little more: the kill lands at different
    # points of the following saves.
    for _ in $(seq 1200); do
        [ -d "$tmp/k/step-1" ] && break
        sleep 0.1
    done
    sleep "$delay"
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    complete=1
    for d in "$tmp"/k/step-*; do
        case $d in *.tmp.*) continue ;; esac # the killed save's own temporary
        for f in model.safetensors optimizer.safetensors state.json; do
            [ -s "$d/$f" ] || complete=0
        done
    done
    latest=$(find "$tmp/k" -maxdepth 1 -name 'step-*' ! -name '*.tmp.*' |
             sed 's/.*step-//' | sort -n | tail -1)
    if [ "$complete" = 1 ] && [ -n "$latest" ] &&
        limited "$cli" "${big[@]/100000/$((latest + 1))}" --resume "$tmp/k" \
            >"$tmp/out" 2>"$tmp/err" &&
        grep -q "at step $latest" "$tmp/out"; then
        killed_ok=$((killed_ok + 1))
    else
        fail "kill -9 ${delay}s after the first save: complete=$complete latest='$latest'" \
            "$(ls "$tmp/k" | tr '\n' ' ')"
    fi
done
[ "$killed_ok" = 3 ] &&
    ok "kill -9 0, 0.3 and 0.7 s after the first save: every checkpoint complete, the newest resumes"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
