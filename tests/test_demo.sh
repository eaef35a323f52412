#!/usr/bin/env bash
# ./scripts/demo's GPT configuration, reduced to a few steps: every output
# it promises exists and is well-formed — the Chrome trace parses as JSON
# with the pipeline's stages, the Paje trace has its header and events,
# the Gantt chart and loss curve are PNGs of non-trivial size, every
# metrics line is a JSON object with a loss, the sample has the requested
# length — and its checkpoint resumes: 2 more steps from it log exactly
# the losses a straight run of 8 steps logs at steps 7 and 8. Also
# `--help` and a bad variant.
#
# Usage: test_demo.sh PATH-TO-PLEIADES
set -u

cli=${1:?usage: test_demo.sh PATH-TO-PLEIADES}
repo=$(cd "$(dirname "$0")/.." && pwd)
time_limit=300 # seconds per run (read by cli_lib.sh)
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

demo() { # OUT STEPS [train flags...]
    local out=$1 steps=$2
    shift 2
    PLEIADES_DEMO_CLI=$cli PLEIADES_DEMO_OUT=$out PLEIADES_DEMO_STEPS=$steps \
        timeout "$time_limit" "$repo/scripts/demo" gpt "$@"
}

# --- usage
if "$repo/scripts/demo" --help >"$tmp/out" 2>&1 && grep -q "^  gpt" "$tmp/out" &&
    grep -q "^  mlp" "$tmp/out" && grep -q "mpirun -np 2" "$tmp/out"; then
    ok "demo --help lists gpt, mlp and the mpirun variant"
else
    fail "demo --help: $(cat "$tmp/out")"
fi
if "$repo/scripts/demo" gtp >"$tmp/out" 2>&1; then
    fail "demo gtp: accepted"
elif grep -q "unknown variant 'gtp'" "$tmp/out"; then
    ok "demo gtp: refused, naming the variant"
else
    fail "demo gtp: $(cat "$tmp/out")"
fi

# --- a reduced run: 6 steps
out=$tmp/run
# --total-steps 8 throughout: the cosine schedule of an 8-step run, so
# that 6 steps and a resume to 8 follow the straight 8-step run's rates.
if ! demo "$out" 6 --total-steps 8 >"$tmp/demo.out" 2>"$tmp/demo.err"; then
    fail "demo (6 steps): $(tail -5 "$tmp/demo.err")"
    finish "demo checks done"
    exit 1
fi
grep -q "^validation loss (nats/byte): [0-9.]* (unigram entropy [0-9.]*)" "$tmp/demo.out" &&
    grep -q "^memory (auto, budget 14 MiB)" "$tmp/demo.out" &&
    grep -q "^precision bf16: " "$tmp/demo.out" &&
    grep -q "^  stage 1: bubble [0-9.]* measured, 0.0625 theoretical" "$tmp/demo.out" &&
    ok "demo: prints the loss against the baseline, memory and trace summaries" ||
    fail "demo: summary lines missing: $(cat "$tmp/demo.out")"

if python3 - "$out" <<'PY'
import json, os, re, sys
out = sys.argv[1]
trace = json.load(open(os.path.join(out, "trace.json")))
other = trace["otherData"]
assert other["schedule"] == "interleaved" and other["stages"] == 2 and other["chunks"] == 2, other
stages = {e["args"]["stage"] for e in trace["traceEvents"]
          if e.get("ph") == "X" and e.get("args", {}).get("phase") in ("F", "B")}
assert stages == {0, 1}, stages
lines = open(os.path.join(out, "metrics.jsonl")).read().splitlines()
steps = [json.loads(l) for l in lines]
assert len([s for s in steps if "loss" in s]) >= 6, lines
paje = open(os.path.join(out, "trace.paje")).read()
ids = re.findall(r"^%EventDef Paje(?:Set|Push)State (\d+)$", paje, re.M)
states = [l for l in paje.splitlines() if l.split(" ", 1)[0] in ids]
assert paje.startswith("%EventDef") and ids and len(states) > 100, (ids, len(states))
for png in ("gantt.png", "loss.png"):
    data = open(os.path.join(out, png), "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, (png, len(data))
assert len(open(os.path.join(out, "sample.txt"), "rb").read()) == len("The ") + 160
assert os.path.isfile(os.path.join(out, "model.safetensors"))
assert os.path.isfile(os.path.join(out, "checkpoints", "step-6", "state.json"))
PY
then
    ok "demo: trace (JSON, Paje), Gantt and loss PNGs, metrics, sample, weights, checkpoint"
else
    fail "demo: an output is missing or malformed"
fi

# --- the checkpoint resumes exactly: 6 + 2 steps log the last 2 losses of 8
losses() { grep -o '"loss":[^,}]*' "$1" | tail -2; }
if demo "$out" 8 --total-steps 8 --resume "$out/checkpoints" >"$tmp/resume.out" \
    2>"$tmp/resume.err" &&
    losses "$out/metrics.jsonl" >"$tmp/resumed" &&
    demo "$tmp/straight" 8 --total-steps 8 >"$tmp/straight.out" 2>"$tmp/straight.err" &&
    losses "$tmp/straight/metrics.jsonl" >"$tmp/direct" &&
    [ -s "$tmp/direct" ] && cmp -s "$tmp/resumed" "$tmp/direct"; then
    ok "demo: the checkpoint resumes; steps 7-8 match a straight 8-step run"
else
    fail "demo resume: $(tail -3 "$tmp/resume.err") losses $(cat "$tmp/resumed" 2>/dev/null | tr '\n' ' ') vs $(cat "$tmp/direct" 2>/dev/null | tr '\n' ' ')"
fi

finish "all demo checks passed"
