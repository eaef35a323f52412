#!/usr/bin/env bash
# scripts/tokenize and `generate --tokenizer`: on the first 10 kB of the
# fortunes corpus (concatenated as pl_dataset_text reads it), a BPE model
# of 512 pieces; decode(encode(text)) == text byte for byte (the token
# files read back here with struct, decoded by spm_decode); the llm.c
# headers; a tiny GPT trained on the files continues a prompt through
# --tokenizer (encoded and decoded), and a tokenizer of another size is
# refused. Skipped (77) without Debian's sentencepiece.
#
# Usage: test_tokenize.sh PATH-TO-PLEIADES SOURCE-DIR
set -u

cli=${1:?usage: test_tokenize.sh PATH-TO-PLEIADES SOURCE-DIR}
src=${2:?usage: test_tokenize.sh PATH-TO-PLEIADES SOURCE-DIR}
time_limit=300
fortunes=/usr/share/games/fortunes
if ! command -v spm_train >/dev/null || [ ! -d "$fortunes" ]; then
    echo "skipped: needs sentencepiece (spm_train) and fortunes (scripts/deps installs both)"
    exit 77
fi
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# The first 10 kB, cut back to a whole UTF-8 character.
python3 - "$fortunes" "$tmp/text.txt" <<'PY'
import os, sys
d = sys.argv[1]
names = sorted(n for n in os.listdir(d) if not n.startswith(".") and not n.endswith(".dat")
               and os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))
data = b"".join(open(os.path.join(d, n), "rb").read() for n in names)[:10240]
while data:
    try:
        data.decode("utf-8")
        break
    except UnicodeDecodeError:
        data = data[:-1]
open(sys.argv[2], "wb").write(data)
PY

tok=$src/scripts/tokenize
if limited "$tok" "$tmp/text.txt" --vocab 512 --out "$tmp/tok" >"$tmp/out" 2>"$tmp/err" &&
    [ -s "$tmp/tok/tokenizer.model" ]; then
    ok "scripts/tokenize: $(head -1 "$tmp/out")"
else
    fail "scripts/tokenize failed: $(cat "$tmp/out")"
fi
if python3 - "$tmp" <<'PY'; then
import struct, subprocess, sys
d = sys.argv[1]
tokens = []
for name in ("train", "val"):
    raw = open("%s/tok/%s.bin" % (d, name), "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[0] == 20240520 and h[1] == 1 and not any(h[3:]), "header %s" % (h[:4],)
    assert len(raw) == 1024 + 2 * h[2], "count %d, %d bytes" % (h[2], len(raw))
    tokens += struct.unpack("<%dH" % h[2], raw[1024:])
assert max(tokens) < 512
ids = (" ".join(map(str, tokens)) + "\n").encode()
out = subprocess.run(["spm_decode", "--model=%s/tok/tokenizer.model" % d, "--input_format=id"],
                     input=ids, capture_output=True, check=True).stdout
text = open(d + "/text.txt", "rb").read()
print("%d bytes, %d tokens" % (len(text), len(tokens)))
sys.exit(0 if out == text + b"\n" else 1)  # spm_decode ends its line
PY
    ok "decode(encode(text)) == text on the corpus' first 10 kB"
else
    fail "the token files do not decode to the text"
fi

if "$tok" "$tmp/text.txt" --vocab x --out "$tmp/bad" >"$tmp/out" 2>"$tmp/err"; then
    fail "scripts/tokenize --vocab x: accepted"
elif grep -qF -- "--vocab" "$tmp/err"; then
    ok "scripts/tokenize --vocab x: refused, naming --vocab"
else
    fail "scripts/tokenize --vocab x: $(cat "$tmp/err")"
fi

# --- a tiny model on the files, continued through the tokenizer
if limited "$cli" train --model gpt --data "$tmp/tok/train.bin" --val-data "$tmp/tok/val.bin" \
    --vocab 512 --vocab-pad 64 --context 16 --channels 32 --layers 1 --heads 2 \
    --batch-size 4 --steps 2 --workers 2 --save "$tmp/m.safetensors" >"$tmp/out" 2>"$tmp/err" &&
    limited "$cli" generate --checkpoint "$tmp/m.safetensors" --workers 1 \
        --tokenizer "$tmp/tok/tokenizer.model" --prompt "The cat" --tokens 8 \
        >"$tmp/gen" 2>"$tmp/err" && head -c 7 "$tmp/gen" | grep -qx "The cat"; then
    ok "generate --tokenizer: the prompt encoded, the output decoded ($(head -c 60 "$tmp/gen" | tr '\n' ' '))"
else
    fail "generate --tokenizer: $(cat "$tmp/gen" 2>/dev/null)"
fi
limited "$tok" "$tmp/text.txt" --vocab 400 --out "$tmp/tok400" >/dev/null 2>&1
expect 1 "has 400 pieces" generate --checkpoint "$tmp/m.safetensors" \
    --tokenizer "$tmp/tok400/tokenizer.model"
expect 2 "--tokenizer" generate --checkpoint "$tmp/m.safetensors" --prompt "The"

finish "test_tokenize: all checks passed"
