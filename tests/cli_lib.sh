# shellcheck shell=bash
# cli and time_limit are set by the sourcing test.
# shellcheck disable=SC2154
# Harness shared by the CLI tests (test_cli.sh, test_cli_gpt.sh); sourced,
# not run. Before sourcing, a test sets
#   cli        the pleiades executable
#   time_limit seconds one CLI run may take
# The library checks $cli, makes a temporary directory $tmp (removed on
# exit), sets failures=0 and defines limited, fail, ok, expect and finish.

if [ ! -x "$cli" ]; then
    echo "$(basename "$0"): '$cli' is not an executable" >&2
    exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0

# A CLI that wrongly accepted its arguments would start training on the real
# data set; a time limit turns that into a failure instead of a long hang.
limited() {
    if command -v timeout >/dev/null 2>&1; then
        timeout "$time_limit" "$@"
    else
        "$@"
    fi
}

# fail MESSAGE: counts a failure; the last run's stderr ($tmp/err) is shown
# under the message, since it usually says why.
fail() {
    echo "FAIL: $*" >&2
    if [ -s "$tmp/err" ]; then sed 's/^/    stderr: /' "$tmp/err" >&2; fi
    failures=$((failures + 1))
}

ok() { echo "ok: $*"; }

# expect STATUS NEEDLE ARG...: runs the CLI with ARG... and checks its exit
# status and that stderr mentions NEEDLE; usage errors (2) must also point
# the user at --help.
expect() {
    want=$1
    needle=$2
    shift 2
    limited "$cli" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    what="pleiades $*"
    if [ "$got" -ne "$want" ]; then
        fail "$what: exit status $got, expected $want"
    elif ! grep -qF -- "$needle" "$tmp/err"; then
        fail "$what: stderr does not mention '$needle'"
    elif [ "$want" -eq 2 ] && ! grep -qF -- "--help" "$tmp/err"; then
        fail "$what: no hint to --help on stderr"
    else
        ok "$what"
    fi
}

# finish SUCCESS-MESSAGE: the exit status of the whole test.
finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures check(s) failed" >&2
        exit 1
    fi
    echo "$1"
}
