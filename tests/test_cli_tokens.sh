#!/usr/bin/env bash
# `pleiades train --model gpt` on token files and `generate` on what it
# saves: GPT-2's real vocabulary (50257, padded to 50304 by --vocab-pad 64)
# from llm.c-format files written here with Python's struct. Checks: the
# first loss at initialisation within 0.05 of ln 50257 (the padded logits
# are out of the softmax, else it would be ln 50304 + noise); the
# checkpoint's metadata and state.json record vocab and padded vocab;
# generate round-trips both checkpoint kinds and never samples a padded
# logit, even from weights edited so that padded logits dominate; the
# command line's and the files' errors (exit 2 / 1, naming flag, file,
# offset and token); --eval-batches and its default; the steady-state
# throughput past the warm-up steps in the step lines and the metrics.
#
# Usage: test_cli_tokens.sh PATH-TO-PLEIADES
set -u

cli=${1:?usage: test_cli_tokens.sh PATH-TO-PLEIADES}
time_limit=300
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# --- token files: random GPT-2 tokens (uniform: the unigram entropy is
# close to ln 50257), plus damaged copies
python3 - "$tmp" <<'PY'
import random, struct, sys
d = sys.argv[1]
random.seed(5)
def llmc(path, toks, count=None, magic=20240520):
    h = [0] * 256
    h[0], h[1], h[2] = magic, 1, len(toks) if count is None else count
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(toks), *toks))
train = [random.randrange(50257) for _ in range(30000)]
val = [random.randrange(50257) for _ in range(3000)]
llmc(d + "/train.bin", train)
llmc(d + "/val.bin", val)
with open(d + "/train_raw.bin", "wb") as f:
    f.write(struct.pack("<%dH" % len(train), *train))
bad = list(val); bad[10] = 60000
llmc(d + "/bad_token.bin", bad)
llmc(d + "/bad_count.bin", val, count=len(val) + 1)
with open(d + "/text.txt", "w") as f:
    f.write("byte-level text, not tokens\n" * 200)
PY

gpt=(train --model gpt --context 16 --channels 32 --layers 1 --heads 2 --batch-size 4
    --workers 2 --eval-every 0)
tok=(--data "$tmp/train.bin" --val-data "$tmp/val.bin" --vocab 50257)

# --- usage and file errors
expect 2 "--val-data"   "${gpt[@]}" --data "$tmp/train.bin" --vocab 50257 --steps 1
expect 2 "--vocab"      "${gpt[@]}" --data "$tmp/train.bin" --val-data "$tmp/val.bin" --steps 1
expect 2 "--val-data"   "${gpt[@]}" --data "$tmp/text.txt" --val-data "$tmp/val.bin"
expect 2 "--val-data"   "${gpt[@]}" --data-format text --data "$tmp/text.txt" \
    --val-data "$tmp/val.bin"
expect 2 "--vocab"      "${gpt[@]}" --data "$tmp/text.txt" --vocab 50257 --steps 1
expect 2 "--vocab-pad"  "${gpt[@]}" "${tok[@]}" --vocab-pad 0
expect 2 "--vocab"      "${gpt[@]}" "${tok[@]}" --vocab 0
expect 2 "--data-format" "${gpt[@]}" "${tok[@]}" --data-format llama
expect 2 "--vocab"      train --model mlp --vocab 300
expect 1 "byte offset 1044 (token index 10): token 60000" "${gpt[@]}" --steps 1 \
    --data "$tmp/train.bin" --val-data "$tmp/bad_token.bin" --vocab 50257
expect 1 "$tmp/bad_count.bin: byte offset 8" "${gpt[@]}" --steps 1 \
    --data "$tmp/train.bin" --val-data "$tmp/bad_count.bin" --vocab 50257
expect 1 "outside the vocabulary [0, 1000)" "${gpt[@]}" --steps 1 \
    --data "$tmp/train.bin" --val-data "$tmp/val.bin" --vocab 1000
expect 1 "not an llm.c token file" "${gpt[@]}" --steps 1 --data-format llmc \
    --data "$tmp/text.txt" --val-data "$tmp/val.bin" --vocab 50257

# --- the first loss at initialisation: ln 50257 = 10.8249
if limited "$cli" "${gpt[@]}" "${tok[@]}" --vocab-pad 64 --steps 2 \
    --metrics "$tmp/m.jsonl" --save "$tmp/m.safetensors" \
    --checkpoint-dir "$tmp/ckpt" >"$tmp/out" 2>"$tmp/err" &&
    grep -qF "vocabulary 50257 (padded to 50304)" "$tmp/out"; then
    ok "trains GPT-2's vocabulary padded to 50304 from llm.c token files"
else
    fail "the token run: exit or header wrong: $(head -3 "$tmp/out")"
fi
if python3 - "$tmp/m.jsonl" <<'PY'; then
import json, math, sys
first = next(json.loads(l) for l in open(sys.argv[1]) if '"step"' in l)
loss = first["loss"]
print("first loss %.4f, ln 50257 = %.4f" % (loss, math.log(50257)))
sys.exit(0 if abs(loss - math.log(50257)) < 0.05 else 1)
PY
    ok "the first loss is within 0.05 of ln 50257"
else
    fail "the first loss is not within 0.05 of ln 50257"
fi
if grep -q '"gpt.vocab": *50257' "$tmp"/ckpt/step-*/state.json &&
    grep -q '"gpt.padded_vocab": *50304' "$tmp"/ckpt/step-*/state.json; then
    ok "state.json records vocab 50257 and padded vocab 50304"
else
    fail "state.json lacks gpt.vocab / gpt.padded_vocab: $(cat "$tmp"/ckpt/step-*/state.json)"
fi

# --- generate: ids on one line, all below 50257, the same from both
# checkpoint kinds and for the same seed
gen=(generate --tokens 12 --workers 1 --temperature 1)
check_ids() { # FILE COUNT: COUNT ids, each in [0, 50257)
    python3 -c '
import sys
ids = [int(v) for v in open(sys.argv[1]).read().split()]
sys.exit(0 if len(ids) == int(sys.argv[2]) and all(0 <= i < 50257 for i in ids) else 1)
' "$1" "$2"
}
if limited "$cli" "${gen[@]}" --checkpoint "$tmp/m.safetensors" >"$tmp/a" 2>"$tmp/err" &&
    limited "$cli" "${gen[@]}" --checkpoint "$tmp/ckpt" >"$tmp/b" 2>"$tmp/err" &&
    check_ids "$tmp/a" 13 && cmp -s "$tmp/a" "$tmp/b"; then
    ok "generate: 12 token ids below 50257 after token 0, the same from --save and the checkpoint dir"
else
    fail "generate from the token model: $(cat "$tmp/a") / $(cat "$tmp/b" 2>/dev/null)"
fi
expect 2 "--prompt-ids" generate --checkpoint "$tmp/m.safetensors" --prompt-ids 50257
expect 2 "--prompt"     generate --checkpoint "$tmp/m.safetensors" --prompt "text"

# Padded logits made the largest: rows 50257.. of wte become ±1000 x row 0
# (one sign wins whatever the hidden state), so an unmasked arg-max, or
# sampling, would pick them.
python3 - "$tmp/m.safetensors" "$tmp/hot.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
t = head["embedding.wte"]
rows, C = t["shape"]
base = 8 + n + t["data_offsets"][0]
data = bytearray(raw)
row0 = struct.unpack("<%df" % C, raw[base:base + 4 * C])
for r in range(50257, rows):
    sign = 1000.0 if r % 2 else -1000.0
    data[base + 4 * C * r: base + 4 * C * (r + 1)] = struct.pack("<%df" % C, *(sign * v for v in row0))
open(sys.argv[2], "wb").write(bytes(data))
PY
if limited "$cli" "${gen[@]}" --temperature 0 --checkpoint "$tmp/hot.safetensors" \
    >"$tmp/a" 2>"$tmp/err" && check_ids "$tmp/a" 13 &&
    limited "$cli" "${gen[@]}" --temperature 2 --tokens 40 \
        --checkpoint "$tmp/hot.safetensors" >"$tmp/b" 2>"$tmp/err" && check_ids "$tmp/b" 41; then
    ok "generate never samples a padded logit, even the largest ones"
else
    fail "generate sampled a padded logit: $(cat "$tmp/a") / $(cat "$tmp/b")"
fi

# --- checkpoints that disagree: a padded vocabulary below the vocabulary,
# and a resume with another --vocab-pad
python3 - "$tmp/m.safetensors" "$tmp/lying.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head["__metadata__"]["padded_vocab"] = "50000"
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + raw[8 + n:])
PY
expect 1 "'padded_vocab' 50000 is below 'vocab' 50257" generate --checkpoint "$tmp/lying.safetensors"
expect 2 "--vocab-pad" "${gpt[@]}" "${tok[@]}" --vocab-pad 1000 --steps 3 --resume "$tmp/ckpt"

# --- nanoGPT's raw uint16, and auto taking an llm.c file without being told
if limited "$cli" "${gpt[@]}" --data-format raw-u16 --data "$tmp/train_raw.bin" \
    --val-data "$tmp/val.bin" --vocab 50257 --steps 1 >"$tmp/out" 2>"$tmp/err"; then
    fail "raw-u16 --val-data of an llm.c file: expected its header to be refused as tokens"
else
    ok "an llm.c file read as raw-u16 is refused (its header is not tokens)"
fi
head -c 6000 "$tmp/train_raw.bin" >"$tmp/val_raw.bin"
if limited "$cli" "${gpt[@]}" --data-format raw-u16 --data "$tmp/train_raw.bin" \
    --val-data "$tmp/val_raw.bin" --vocab 50257 --steps 1 >"$tmp/out" 2>"$tmp/err" &&
    grep -qF "(raw-u16 tokens): 30000 training tokens, 3000 validation tokens" "$tmp/out"; then
    ok "nanoGPT's raw uint16 files"
else
    fail "raw-u16 run: $(head -3 "$tmp/out")"
fi

# --- --eval-batches, and the throughput past the warm-up steps
if limited "$cli" "${gpt[@]}" "${tok[@]}" --steps 4 --eval-every 2 --eval-batches 3 \
    --metrics "$tmp/e.jsonl" >"$tmp/out" 2>"$tmp/err" &&
    grep -qF "3 validation batches per evaluation" "$tmp/out" &&
    grep -qE '^step 2/4 .* tokens/s \(warm-up\)' "$tmp/out" &&
    grep -qE '^step 4/4 .* tokens/s \(steady\)' "$tmp/out" &&
    python3 - "$tmp/e.jsonl" <<'PY'; then
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
ok = [("steady_tokens_per_s" in s) == (s["step"] > 2) for s in steps]
sys.exit(0 if len(steps) == 4 and all(ok) else 1)
PY
    ok "--eval-batches 3; steady tokens/s from step 3 on (2 warm-up steps), the line says which"
else
    fail "--eval-batches / steady throughput: $(grep -E '^(step|optimizer)' "$tmp/out")"
fi
if limited "$cli" "${gpt[@]}" "${tok[@]}" --steps 4 >"$tmp/out" 2>"$tmp/err" &&
    grep -qF "4 steps, 1 validation batch per evaluation" "$tmp/out"; then
    ok "the default --eval-batches of a 4-step run is 1 (0.3 x steps / evaluations)"
else
    fail "default --eval-batches: $(grep -E '^optimizer' "$tmp/out")"
fi
expect 2 "--eval-batches" "${gpt[@]}" "${tok[@]}" --eval-batches 0

finish "test_cli_tokens: all checks passed"
