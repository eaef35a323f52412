#!/usr/bin/env bash
# Error handling of the pleiades CLI: every mistake is reported on stderr,
# naming the offending flag or path, with exit status 2 for command-line
# (usage) errors and 1 for run-time failures such as a missing data set.
#
# Usage: test_cli.sh PATH-TO-PLEIADES
set -u

cli=${1:?usage: test_cli.sh PATH-TO-PLEIADES}
time_limit=60 # seconds per CLI run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

# expect_help ARG...: exit 0 and a usage text on stdout listing the options.
expect_help() {
    limited "$cli" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    what="pleiades $*"
    if [ "$got" -ne 0 ]; then
        fail "$what: exit status $got, expected 0"
    elif ! grep -qF -- "--batch-size" "$tmp/out"; then
        fail "$what: usage on stdout does not mention --batch-size"
    else
        ok "$what"
    fi
}

expect_help --help
expect_help train --help

if limited "$cli" --version >"$tmp/out" 2>"$tmp/err" &&
    grep -q '^pleiades [0-9]' "$tmp/out"; then
    ok "pleiades --version"
else
    fail "pleiades --version: expected exit 0 and 'pleiades <version>'"
fi

# Usage errors: exit 2, message naming the flag (or command).
expect 2 "command"        # no command at all
expect 2 "nosuch-command" nosuch-command
expect 2 "--no-such-flag" train --no-such-flag
expect 2 "--precision"    train --precision fp64
expect 2 "--master-weights/--force-outputs-fp32: only apply" train --master-weights off
expect 2 "--epochs"       train --epochs 0
expect 2 "--epochs"       train --epochs        # value missing
expect 2 "--lr"           train --lr abc
expect 2 "--optimizer"    train --optimizer foo
expect 2 "--hidden"       train --hidden 10,,2
expect 2 "--batch-size"   train --batch-size -3
expect 2 "--workers"      train --workers 1000
expect 2 "STARPU_MAXCPUS" train --workers 100000
expect 2 "STARPU_MAXCPUS" generate --checkpoint x.safetensors --workers 100000
expect 2 "--model"        train --model nosuch
expect 2 "stray"          train stray
expect 2 "--device"       train --device gpu
expect 2 "--schedule"     train --schedule bogus
expect 2 "--stages"       train --schedule 1f1b --stages 0
expect 2 "--workers-per-stage" train --schedule 1f1b --workers-per-stage -1
expect 2 "--workers-per-stage need --schedule" train --workers-per-stage 2
expect 2 "--workers-per-stage 2: 2 stages x 2 workers need 4 CPU workers, and this run has 2" \
    train --schedule 1f1b --workers 2 --workers-per-stage 2
expect 2 "--microbatches" train --schedule 1f1b --microbatches 3 --batch-size 8
expect 2 "--tiles"        train --schedule 1f1b --tiles 4
# Knobs that would do nothing here are refused, not dropped.
expect 2 "--chunks: --schedule 1f1b runs one model chunk per stage" \
    train --schedule 1f1b --stages 2 --chunks 2
expect 2 "--chunks: --schedule none" train --chunks 3
expect 2 "--chunks: --schedule gpipe" train --schedule gpipe --stages 2 --chunks 2
expect 2 "--reduce-bucket-size-in-m/--overlap-communication: only apply with data parallelism" \
    train --reduce-bucket-size-in-m 4
expect 2 "--reduce-bucket-size-in-m/--overlap-communication" train --overlap-communication off
expect 2 "--norm-type: only applies with --max-norm" train --norm-type inf
expect 2 "--norm-type: only applies with --max-norm" train --max-norm 0 --norm-type 2

# Run-time failures: exit 1, message naming the path. Both are detected
# before any training starts, so the tiny settings only bound the damage of
# a regression.
missing="$tmp/nonexistent"
expect 1 "$missing" train --data "$missing" --epochs 1 --batch-size 8 \
    --hidden 8 --workers 1
# A FIFO where an IDX file should be used to block forever in open().
mkdir "$tmp/fifo-data"
mkfifo "$tmp/fifo-data/train-images-idx3-ubyte.gz"
expect 1 "not a regular file" train --data "$tmp/fifo-data" --epochs 1 \
    --batch-size 8 --hidden 8 --workers 1
metrics="$tmp/no-dir/metrics.jsonl"
expect 1 "$metrics" train --metrics "$metrics" \
    --data "$missing" --epochs 1 --batch-size 8 --hidden 8 --workers 1

# Output paths are checked before training (they were found only after it,
# losing the run): exit 1 naming the flag, and not one epoch trained.
long=$(printf 'x%.0s' $(seq 1 300))
for bad in "--trace $missing/t.json" "--paje $tmp" "--trace $tmp/$long.json"; do
    flag=${bad%% *}
    path=${bad#* }
    limited "$cli" train "$flag" "$path" --epochs 1 --batch-size 8 --hidden 8 \
        --workers 1 >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -ne 1 ] || ! grep -qF -- "$flag" "$tmp/err"; then
        fail "train $flag <bad path>: exit $got, expected 1 naming $flag"
    elif grep -q "^epoch" "$tmp/out"; then
        fail "train $flag <bad path>: trained before refusing the path"
    else
        ok "train $flag <bad path> refused before training"
    fi
done

# Pipeline schedules from the command line, with their defaults (2 stages,
# 2 chunks, one block per layer): a short real run and its traces; the
# interleaved one on 4 workers, which serve the 2 stages 2 by 2, and say
# so (the trace keeps the order they started items in).
if [ -d /usr/share/datasets/fashion-mnist ]; then
    for schedule in 1f1b interleaved; do
        what="pleiades train --schedule $schedule"
        workers=2 per="1 worker per stage"
        [ "$schedule" = interleaved ] && workers=4 per="2 workers per stage"
        if limited "$cli" train --schedule "$schedule" --hidden 16,16,16 \
               --epochs 1 --batch-size 2000 --workers "$workers" \
               --trace "$tmp/$schedule.json" >"$tmp/out" 2>"$tmp/err" &&
           grep -q "final test accuracy" "$tmp/out" &&
           grep -q "^pipeline $schedule: .*; $per; " "$tmp/out" &&
           grep -q '"start_order":' "$tmp/$schedule.json" &&
           [ -s "$tmp/$schedule.json" ]; then
            ok "$what --workers $workers ($per)"
        else
            fail "$what --workers $workers: did not train, say '$per' and write its trace"
        fi
    done
fi

# Asking for CUDA from a StarPU without it says how to build one (exit 1).
if "$cli" --version | grep -q "StarPU with CUDA: no" &&
   [ -d /usr/share/datasets/fashion-mnist ]; then
    expect 1 "build-starpu-cuda" train --device cuda --epochs 1 \
        --batch-size 8 --hidden 8 --workers 1
fi

# A bad short option inside a cluster is named as such, not blamed on the
# word before it (argv[optind - 1] is still that word while getopt is
# inside "-xy"); real values are checked as the float the library gets.
expect 2 "unknown option '-x'" train --quiet -xy
expect 2 "unknown option '-x'" train --lr 1 -xy
expect 2 "--quiet: takes no value" train --qu=1
expect 2 "--momentum: expected a number in [0, 1)" train --optimizer sgd \
    --momentum 0.99999999999

finish "all CLI checks passed"
