#!/usr/bin/env bash
# --offload-dir on a small or filling filesystem (a tmpfs of known size):
#   - under 32 MiB free: refused before training, naming the directory and
#     the free space (was StarPU's assertion, exit 134);
#   - a plan that needs more than the disk tier may use: refused before
#     training with both figures (was a silent 100 % CPU spin while the
#     chunks were allocated);
#   - a plan that fits: the placement line prints both figures;
#   - the disk filling up while training: the run ends with exit 1 and a
#     message naming the directory and the bytes (was StarPU's "aio_error
#     returned 28" abort, exit 134), its offload files removed and its
#     last checkpoint complete.
# The tmpfs is mounted in a mount namespace of the test's own (unshare -m),
# so nothing is left mounted whatever happens; where that is not allowed
# (not root, no unshare) the test is skipped (exit 77). Every run is under
# a time limit.
#
# Usage: test_cli_offload_space.sh PATH-TO-PLEIADES [TEXT-FILE-OR-DIR]
set -u

cli=${1:?usage: test_cli_offload_space.sh PATH-TO-PLEIADES [TEXT]}
text=${2:-/usr/share/games/fortunes}
if [ -z "${PL_OFFLOAD_SPACE_NS:-}" ]; then
    if ! command -v unshare >/dev/null 2>&1 ||
        ! unshare --mount --propagation private true 2>/dev/null; then
        echo "SKIP: cannot make a mount namespace (unshare -m): needs root"
        exit 77
    fi
    PL_OFFLOAD_SPACE_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
time_limit=60
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
# The tmpfs mounts go before the folder they lie in (the namespace's end
# would unmount them too, but after rm -rf had failed on them).
trap 'for m in "$tmp"/small "$tmp"/mid "$tmp"/fill; do umount "$m" 2>/dev/null; done
      rm -rf "$tmp"' EXIT

if [ ! -e "$text" ]; then
    echo "SKIP: no text at $text"
    exit 77
fi

# mount_tmpfs DIR SIZE: a fresh tmpfs of SIZE at DIR (exit 77 if refused).
mount_tmpfs() {
    mkdir -p "$1"
    if ! mount -t tmpfs -o "size=$2" tmpfs "$1" 2>"$tmp/mount.err"; then
        echo "SKIP: cannot mount a tmpfs: $(cat "$tmp/mount.err")"
        exit 77
    fi
}

# A GPT under a 4 MiB budget: with 128 channels its plan needs ~16 MiB on
# the disk tier, with 192 channels ~33 MiB.
gpt=(train --model gpt --data "$text" --layers 2 --heads 4 --context 32 --batch-size 8
     --eval-every 0 --workers 2 --placement auto --budget-mb 4)

# --- under 32 MiB free
mount_tmpfs "$tmp/small" 20m
expect 1 "offload directory '$tmp/small': 20971520 bytes free" \
    "${gpt[@]}" --channels 128 --steps 1 --offload-dir "$tmp/small"
grep -q "at least 32 MiB must be free" "$tmp/err" || fail "no 'at least 32 MiB must be free'"

# --- a plan larger than the disk tier may use (half of 40 MiB)
mount_tmpfs "$tmp/mid" 40m
expect 1 "offload directory '$tmp/mid': the plan needs up to" \
    "${gpt[@]}" --channels 192 --steps 1 --offload-dir "$tmp/mid"
grep -q "the disk tier may use 20971520 bytes" "$tmp/err" ||
    fail "the refusal does not say what the disk tier may use"

# --- a plan that fits: both figures printed
if limited "$cli" "${gpt[@]}" --channels 128 --steps 1 --offload-dir "$tmp/mid" \
    >"$tmp/out" 2>"$tmp/err" &&
    grep -q "offload $tmp/mid (the plan needs up to [0-9.]* MiB there; [0-9.]* MiB free, of which the disk tier may use 20.0 MiB)" "$tmp/out"; then
    ok "a plan that fits 40 MiB runs, printing what it needs and what is free"
else
    fail "a plan that fits: $(grep '^placement' "$tmp/out")"
fi

# --- the disk filling while training
mount_tmpfs "$tmp/fill" 100m
"$cli" "${gpt[@]}" --channels 128 --steps 100000 --offload-dir "$tmp/fill" \
    --checkpoint-dir "$tmp/ck" --save-every 2 --keep-last 1 >"$tmp/out" 2>"$tmp/err" &
pid=$!
# wait for evictions (data files in the run folder) and a checkpoint
for _ in $(seq 600); do
    [ -n "$(find "$tmp/fill" -name '*.offload' 2>/dev/null)" ] &&
        [ -n "$(find "$tmp/ck" -name state.json 2>/dev/null)" ] && break
    sleep 0.1
done
dd if=/dev/zero of="$tmp/fill/filler" bs=1M 2>/dev/null
( sleep "$time_limit"; kill -KILL "$pid" 2>/dev/null ) &
watchdog=$!
wait "$pid"
status=$?
kill "$watchdog" 2>/dev/null
wait "$watchdog" 2>/dev/null
if [ "$status" -eq 1 ] &&
    grep -q "offload directory '$tmp/fill': cannot allocate [0-9]* bytes: No space left on device" "$tmp/err"; then
    ok "a full disk while training: exit 1, naming the directory and the bytes"
else
    fail "a full disk while training: exit status $status (expected 1)"
fi
for _ in $(seq 100); do
    [ -z "$(find "$tmp/fill" -name '*.offload' 2>/dev/null)" ] && break
    sleep 0.1
done
if [ -z "$(find "$tmp/fill" -type f ! -name filler 2>/dev/null)" ]; then
    ok "a full disk while training: the run's offload files are removed"
else
    fail "left in $tmp/fill: $(find "$tmp/fill" -type f ! -name filler | head -3 | tr '\n' ' ')"
fi
last=$(find "$tmp/ck" -maxdepth 1 -name 'step-*' -type d | sort | tail -1)
if [ -n "$last" ] && [ -f "$last/state.json" ] &&
    limited "$cli" "${gpt[@]}" --channels 128 --steps $(( ${last##*-} + 1 )) \
        --offload-dir "$tmp" --resume "$last" >/dev/null 2>"$tmp/err"; then
    ok "a full disk while training: the last checkpoint ($(basename "$last")) resumes"
else
    fail "a full disk while training: no resumable checkpoint in $tmp/ck ($last)"
fi

finish "offload space: checked before training, a full disk ends the run cleanly"
