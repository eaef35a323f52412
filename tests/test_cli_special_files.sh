#!/usr/bin/env bash
# What the CLI reads may be something other than a regular file: each is
# refused at once (exit 1) with a message naming the file and what it is,
# never a hang and never a message about something else.
#   - a FIFO in place of a checkpoint's state.json, model.safetensors or
#     optimizer.safetensors (`train --resume`, `generate --checkpoint`), of
#     a --save file (`generate --checkpoint FILE`), of a trace
#     (`trace-summary`) or of a metrics file (`plot`): opening one for
#     reading used to wait for a writer, forever;
#   - state.json that is a directory (was "'[' or '{' expected near end of
#     file") or a symlink loop (was "no step-<N> directory" for the step
#     folder itself);
#   - --offload-dir naming a regular file (was "Permission denied").
# Every run is under a time limit, so a hang fails the check instead of
# the whole suite.
#
# Usage: test_cli_special_files.sh PATH-TO-PLEIADES [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_special_files.sh PATH-TO-PLEIADES [TEXT]}
text=${2:-/usr/share/games/fortunes}
time_limit=30 # seconds per CLI run: each should take well under one
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

gpt=(train --model gpt --data "$text" --layers 1 --channels 8 --heads 2 --context 8
     --batch-size 2 --eval-every 0 --seed 5)

limited "$cli" "${gpt[@]}" --steps 2 --checkpoint-dir "$tmp/d" --save-every 2 \
    --save "$tmp/saved.safetensors" >/dev/null 2>"$tmp/err" || fail "the run to read from failed"
[ -f "$tmp/d/step-2/state.json" ] || { fail "no checkpoint in $tmp/d/step-2"; finish ""; }

# damaged NAME: a copy of the checkpoint as $tmp/NAME/step-2, for a test
# to replace one of its files.
damaged() {
    rm -rf "${tmp:?}/$1" && mkdir -p "$tmp/$1" && cp -r "$tmp/d/step-2" "$tmp/$1/"
}

# --- FIFOs
for file in state.json model.safetensors optimizer.safetensors; do
    damaged "fifo-$file"
    rm "$tmp/fifo-$file/step-2/$file" && mkfifo "$tmp/fifo-$file/step-2/$file"
    expect 1 "fifo-$file/step-2/$file: cannot open: a FIFO, not a regular file" \
        "${gpt[@]}" --steps 4 --resume "$tmp/fifo-$file"
done
for file in state.json model.safetensors; do
    expect 1 "fifo-$file/step-2/$file: cannot open: a FIFO" \
        generate --checkpoint "$tmp/fifo-$file" --tokens 4
done
mkfifo "$tmp/fifo"
expect 1 "cannot open '$tmp/fifo': a FIFO" generate --checkpoint "$tmp/fifo" --tokens 4
expect 1 "$tmp/fifo: cannot open: a FIFO" trace-summary "$tmp/fifo"
expect 1 "cannot open '$tmp/fifo': a FIFO" plot "$tmp/fifo" --png "$tmp/out.png"
[ ! -e "$tmp/out.png" ] || fail "plot of a FIFO left $tmp/out.png"

# --- state.json a directory, a symlink loop
damaged dir
rm "$tmp/dir/step-2/state.json" && mkdir "$tmp/dir/step-2/state.json"
expect 1 "dir/step-2/state.json: cannot open: a directory, not a regular file" \
    "${gpt[@]}" --steps 4 --resume "$tmp/dir"
expect 1 "dir/step-2/state.json: cannot open: a directory" \
    generate --checkpoint "$tmp/dir/step-2" --tokens 4
damaged loop
rm "$tmp/loop/step-2/state.json" && ln -s state.json "$tmp/loop/step-2/state.json"
[ -L "$tmp/loop/step-2/state.json" ] || fail "could not make a symlink loop"
expect 1 "loop/step-2/state.json: cannot open: a symbolic link loop" \
    "${gpt[@]}" --steps 4 --resume "$tmp/loop/step-2"
expect 1 "loop/step-2/state.json: cannot open: a symbolic link loop" \
    generate --checkpoint "$tmp/loop/step-2" --tokens 4
# a dangling state.json is a damaged checkpoint too, not a folder of them
damaged dangling
rm "$tmp/dangling/step-2/state.json" &&
    ln -s missing.json "$tmp/dangling/step-2/state.json"
expect 1 "dangling/step-2/state.json: cannot open: No such file or directory" \
    "${gpt[@]}" --steps 4 --resume "$tmp/dangling/step-2"

# --- --offload-dir a file
touch "$tmp/file"
expect 1 "offload directory '$tmp/file': not a directory (a regular file)" \
    "${gpt[@]}" --steps 2 --placement auto --budget-mb 1 --offload-dir "$tmp/file"

finish "special files: refused at once, each named for what it is"
