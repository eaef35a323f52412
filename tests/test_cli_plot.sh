#!/usr/bin/env bash
# `pleiades plot`: loss curves of hand-written --metrics files (GPT style,
# keyed by step, and MLP style, whose evaluations are keyed by epoch).
#   - with gnuplot installed: a PNG of exactly --width x --height (read
#     from its IHDR chunk), for one file and for two on one plot;
#   - with a stand-in gnuplot that keeps the script: the data handed over
#     (null losses skipped, an MLP evaluation at the step that ended its
#     epoch, lr on y2, legends by base name, or by path when two files
#     share one);
#   - malformed data refused with exit 1 and FILE:LINE, a missing file
#     named, usage errors (no file, no --png, bad --width) exit 2;
#   - after any failure, no image and no temporary left, and an existing
#     image untouched; a missing gnuplot named with its Debian package.
#
# Usage: test_cli_plot.sh PATH-TO-PLEIADES
set -u

cli=${1:?usage: test_cli_plot.sh PATH-TO-PLEIADES}
time_limit=60 # seconds per CLI run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# --- metrics files, as `train --metrics` writes them
cat >"$tmp/gpt.jsonl" <<'EOF'
{"step":1,"loss":4.25,"lr":0.0001,"samples_per_s":100,"tokens_per_s":1600}
{"step":2,"loss":3.5,"lr":0.0002,"samples_per_s":100,"tokens_per_s":1600}
{"step":3,"loss":null,"lr":0.0003,"samples_per_s":100,"tokens_per_s":1600}
{"step":4,"loss":3.125,"lr":0.0002,"samples_per_s":100,"tokens_per_s":1600}
{"step":4,"val_loss":3.25}
{"step":5,"loss":2.75,"lr":0.0001,"samples_per_s":100,"tokens_per_s":1600}
{"step":5,"val_loss":null}
EOF
cat >"$tmp/mlp.jsonl" <<'EOF'
{"step":1,"epoch":1,"loss":2.25,"lr":0.01,"samples_per_s":500}
{"step":2,"epoch":1,"loss":1.75,"lr":0.01,"samples_per_s":500}
{"epoch":1,"test_loss":1.5,"test_accuracy":0.55}
{"step":3,"epoch":2,"loss":1.25,"lr":0.005,"samples_per_s":500}
{"step":4,"epoch":2,"loss":0.875,"lr":0.005,"samples_per_s":500}
{"epoch":2,"test_loss":1.125,"test_accuracy":0.7}
EOF

# no_leftovers NAME WHAT: neither NAME nor a temporary beside it exists.
no_leftovers() {
    if [ -e "$tmp/$1" ]; then
        fail "$2: $1 was written"
    elif compgen -G "$tmp/$1.tmp.*" >/dev/null; then
        fail "$2: a temporary was left: $(ls "$tmp/$1".tmp.*)"
    else
        ok "$2: nothing left behind"
    fi
}

# png_size FILE: "WxH" from the IHDR chunk, or nothing when FILE is not a PNG.
png_size() {
    head -c 8 "$1" | od -An -tx1 | grep -q "89 50 4e 47 0d 0a 1a 0a" || return
    [ "$(head -c 16 "$1" | tail -c 4)" = IHDR ] || return
    od -An -tu1 -j16 -N8 "$1" |
        awk '{ printf "%dx%d\n", (($1 * 256 + $2) * 256 + $3) * 256 + $4,
                                 (($5 * 256 + $6) * 256 + $7) * 256 + $8 }'
}

# --- real images (gnuplot)
if command -v gnuplot >/dev/null 2>&1; then
    for set in "one:gpt.jsonl" "two:gpt.jsonl mlp.jsonl"; do
        name=${set%%:*}
        files=()
        for f in ${set#*:}; do files+=("$tmp/$f"); done
        if limited "$cli" plot "${files[@]}" --png "$tmp/$name.png" \
            --width 640 --height 480 --title "test $name" \
            >"$tmp/out" 2>"$tmp/err"; then
            size=$(png_size "$tmp/$name.png")
            if [ "$size" = 640x480 ]; then ok "plot ($name file(s)): 640x480 PNG"
            else fail "plot ($name file(s)): image size '$size', expected 640x480"; fi
        else
            fail "plot ($name file(s)): exit status $?"
        fi
    done
    # A constant learning rate (the default schedule) and a single step
    # leave gnuplot's autoscaled ranges empty: the plot sets them itself
    # instead of letting gnuplot print a warning on every such run.
    printf '%s\n' '{"step":1,"loss":4.5,"lr":0.001}' '{"step":2,"loss":4,"lr":0.001}' \
        >"$tmp/const.jsonl"
    printf '%s\n' '{"step":7,"loss":3,"lr":0.5}' >"$tmp/single.jsonl"
    for f in const single; do
        if limited "$cli" plot "$tmp/$f.jsonl" --png "$tmp/$f.png" >"$tmp/out" 2>"$tmp/err" &&
            [ "$(png_size "$tmp/$f.png")" = 1000x600 ] && ! grep -qi "warning" "$tmp/err"; then
            ok "plot of a $f-valued file: a PNG and no gnuplot warning"
        else
            fail "plot of a $f-valued file: $(cat "$tmp/err")"
        fi
    done
    compgen -G "$tmp/*.tmp.*" >/dev/null && fail "a temporary was left"
else
    echo "note: gnuplot not installed (Debian: gnuplot-nox); PNG checks skipped"
fi

# --- the script handed to gnuplot: a stand-in keeps it and writes a PNG
# header to the `set output` name (and fails on request, leaving a partial
# file there, as a crashing gnuplot would).
mkdir -p "$tmp/bin" "$tmp/a" "$tmp/b"
cat >"$tmp/bin/gnuplot" <<EOF
#!/bin/sh
cat >"$tmp/script.gp"
out=\$(sed -n "s/^set output '\\(.*\\)'\$/\\1/p" "$tmp/script.gp")
[ -n "\$out" ] || exit 3
printf 'PNG data' >"\$out"
[ ! -e "$tmp/gnuplot-fails" ] || exit 1
EOF
chmod +x "$tmp/bin/gnuplot"
fake() { PATH="$tmp/bin:$PATH" limited "$cli" plot "$@" >"$tmp/out" 2>"$tmp/err"; }

# block NAME: the lines of datablock $NAME in the kept script, one a line.
block() { sed -n "/^\\\$$1 << EOD\$/,/^EOD\$/p" "$tmp/script.gp" | sed '1d;$d' | tr '\n' ';'; }

# same GOT WANT WHAT: ok when GOT is WANT.
same() {
    if [ "$1" = "$2" ]; then ok "$3"; else fail "$3: got '$1', expected '$2'"; fi
}

if fake "$tmp/gpt.jsonl" "$tmp/mlp.jsonl" --png "$tmp/fake.png"; then
    same "$(block T0)" "1 4.25;2 3.5;4 3.125;5 2.75;" \
        "GPT train loss: the null at step 3 skipped"
    same "$(block V0)" "4 3.25;" "GPT val_loss: by step, null skipped"
    same "$(block V1)" "2 1.5;4 1.125;" \
        "MLP test_loss: at the step that ended each epoch"
    same "$(block L1)" "1 0.01;2 0.01;3 0.005;4 0.005;" "MLP lr"
    if grep -q "\$L0 using 1:2 axes x1y2 .*'gpt.jsonl: lr'" "$tmp/script.gp" &&
        grep -q "'gpt.jsonl: train loss'" "$tmp/script.gp" &&
        grep -q "'mlp.jsonl: test loss'" "$tmp/script.gp"; then
        ok "lr on y2, legends by base name"
    else
        fail "curves or legends: $(grep -A8 '^plot' "$tmp/script.gp")"
    fi
else
    fail "plot with the stand-in gnuplot: exit status $?"
fi
cp "$tmp/gpt.jsonl" "$tmp/a/run.jsonl"
cp "$tmp/mlp.jsonl" "$tmp/b/run.jsonl"
if fake "$tmp/a/run.jsonl" "$tmp/b/run.jsonl" --png "$tmp/fake.png" &&
    grep -qF "'$tmp/a/run.jsonl: train loss'" "$tmp/script.gp" &&
    grep -qF "'$tmp/b/run.jsonl: train loss'" "$tmp/script.gp"; then
    ok "two files with one base name: legends by path"
else
    fail "two files with one base name: $(grep -A8 '^plot' "$tmp/script.gp")"
fi

# gnuplot failing after writing part of the image: an error, nothing left,
# and the image that was there before is untouched.
touch "$tmp/gnuplot-fails"
echo "old image" >"$tmp/keep.png"
PATH="$tmp/bin:$PATH" expect 1 "gnuplot failed" plot "$tmp/gpt.jsonl" \
    --png "$tmp/failed.png"
no_leftovers failed.png "gnuplot failing"
PATH="$tmp/bin:$PATH" expect 1 "gnuplot failed" plot "$tmp/gpt.jsonl" \
    --png "$tmp/keep.png"
same "$(cat "$tmp/keep.png")" "old image" "existing image untouched"
rm -f "$tmp/gnuplot-fails"

# --- malformed data: exit 1, FILE:LINE, and no image
bad() { # bad NAME LINE NEEDLE CONTENT
    printf '%b' "$4" >"$tmp/$1"
    expect 1 "$1:$2: $3" plot "$tmp/$1" --png "$tmp/bad.png" \
        --width 640 --height 480
    no_leftovers bad.png "$1"
}
bad not-object.jsonl 2 "not a JSON object" '{"step":1,"loss":1}\n[1,2]\n'
bad not-json.jsonl 2 "not valid JSON" '{"step":1,"loss":1}\n{"step":2,"loss":\n{"step":3}\n'
bad no-step.jsonl 3 'neither "step" nor "epoch"' '{"step":1,"loss":1}\n\n{"loss":2}\n'
bad text-step.jsonl 1 '"step" is not a number' '{"step":"1","loss":1}\n'
bad null-epoch.jsonl 1 '"epoch" is not a number' '{"epoch":null,"test_loss":1}\n'
bad text-loss.jsonl 2 '"loss" is not a number' '{"step":1,"loss":1}\n{"step":2,"loss":"nan"}\n'
# A file without a single loss value names the file.
printf '{"step":1,"loss":null,"lr":0.1}\n' >"$tmp/no-loss.jsonl"
expect 1 "no-loss.jsonl: no loss" plot "$tmp/no-loss.jsonl" --png "$tmp/bad.png"
: >"$tmp/empty.jsonl"
expect 1 "empty.jsonl: no loss" plot "$tmp/gpt.jsonl" "$tmp/empty.jsonl" \
    --png "$tmp/bad.png"
no_leftovers bad.png "files without losses"
# A missing file, also after a good one, is named.
expect 1 "$tmp/nonexistent.jsonl" plot "$tmp/gpt.jsonl" \
    "$tmp/nonexistent.jsonl" --png "$tmp/bad.png"
no_leftovers bad.png "missing file"
# A last line cut short is a run still writing it: a warning, not an error.
{ cat "$tmp/gpt.jsonl"; printf '{"step":6,"lo'; } >"$tmp/live.jsonl"
if fake "$tmp/live.jsonl" --png "$tmp/live.png" &&
    grep -q "live.jsonl:8: warning" "$tmp/err"; then
    ok "an incomplete last line: skipped with a warning"
else
    fail "an incomplete last line: exit status $?"
fi

# --- usage errors: exit 2
expect 2 "missing metrics file" plot --png "$tmp/u.png"
expect 2 "missing --png" plot "$tmp/gpt.jsonl"
expect 2 "--png" plot "$tmp/gpt.jsonl" --png ""
expect 2 "--width" plot "$tmp/gpt.jsonl" --png "$tmp/u.png" --width 199
expect 2 "--width" plot "$tmp/gpt.jsonl" --png "$tmp/u.png" --width 20000000000
expect 2 "--height" plot "$tmp/gpt.jsonl" --png "$tmp/u.png" --height abc
expect 2 "--height" plot "$tmp/gpt.jsonl" --png "$tmp/u.png" --height
expect 2 "--no-such" plot "$tmp/gpt.jsonl" --png "$tmp/u.png" --no-such
no_leftovers u.png "usage errors"
# An unwritable --png is found before any work.
expect 1 "$tmp/no-dir" plot "$tmp/gpt.jsonl" --png "$tmp/no-dir/x.png"

# --- no gnuplot: a clear error naming the package
mkdir "$tmp/empty-path"
PATH="$tmp/empty-path" limited "$cli" plot "$tmp/gpt.jsonl" \
    --png "$tmp/x.png" >"$tmp/out" 2>"$tmp/err"
status=$?
if [ "$status" -eq 1 ] && grep -q "gnuplot not found.*gnuplot-nox" "$tmp/err"; then
    ok "without gnuplot: names gnuplot-nox"
else
    fail "without gnuplot: status $status"
fi
no_leftovers x.png "without gnuplot"

if limited "$cli" plot --help >"$tmp/out" 2>"$tmp/err" &&
    grep -qF -- "--width" "$tmp/out"; then
    ok "plot --help"
else
    fail "plot --help"
fi

finish "all plot checks passed"
