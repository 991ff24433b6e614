#!/usr/bin/env bash
# Runs the runtime conformance suite again as an unprivileged user (nobody,
# 65534), after `cargo test` ran it as the invoking user (root in CI):
# sandboxes must hold both ways. As nobody, runc, runsc and Docker are
# unavailable (no rootless setup, no access to the daemon's socket) and
# report SKIP with the reason; bubblewrap is required and must pass every
# case its mechanisms make applicable (without per-run cgroups it serves
# profile standard at most and gives no memory or process verdicts).
# The bubblewrap tests that stay specific to it (host-root escapes, /dev)
# run too. Test binaries and helpers are copied to a directory that user
# can reach (the build cache may sit under a home directory only root can
# enter).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "== already unprivileged: the conformance suite ran as $(id -un) in cargo test"
  exit 0
fi
command -v setpriv >/dev/null || { echo "error: setpriv (util-linux) is required" >&2; exit 2; }

# The path of test binary $2 of package $1, built if needed.
test_binary() {
  cargo test -p "$1" --test "$2" --locked --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2"
}

conformance=$(test_binary toolexec-conformance conformance)
bwrap_hostile=$(test_binary toolexec-bwrap bwrap_hostile)
cli_it=$(test_binary toolexec-cli it)
target="${CARGO_TARGET_DIR:-target}/debug"
for f in "$conformance" "$bwrap_hostile" "$cli_it" "$target/conformance-sandbox-init" \
  "$target/conformance-script-worker" "$target/toolexec-sandbox-init" "$target/toolexec"; do
  [ -x "$f" ] || { echo "error: $f is missing: build the tests first (cargo test)" >&2; exit 2; }
done

dir=$(mktemp -d /tmp/toolexec-unpriv.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$conformance" "$dir/conformance"
cp "$bwrap_hostile" "$dir/bwrap_hostile"
cp "$target/conformance-sandbox-init" "$dir/conformance-sandbox-init"
cp "$target/conformance-script-worker" "$dir/conformance-script-worker"
cp "$target/toolexec-sandbox-init" "$dir/toolexec-sandbox-init"
cp "$cli_it" "$dir/it"
cp "$target/toolexec" "$dir/toolexec"
if [ -n "${TOOLEXEC_NATS_SERVER:-}" ] && [ -x "$TOOLEXEC_NATS_SERVER" ]; then
  cp "$TOOLEXEC_NATS_SERVER" "$dir/nats-server"
fi
chmod 755 "$dir" "$dir"/*
mkdir "$dir/home" && chown 65534:65534 "$dir/home"

as_nobody() {
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$dir/home" TMPDIR="$dir/home" CI="${CI:-}" "$@"
}

cd "$dir"
echo "== runtime conformance suite as nobody (uid 65534); bubblewrap required"
as_nobody TOOLEXEC_REQUIRE_RUNTIMES=bubblewrap \
  TOOLEXEC_TEST_SANDBOX_INIT="$dir/conformance-sandbox-init" \
  TOOLEXEC_TEST_SCRIPT_WORKER="$dir/conformance-script-worker" \
  "$dir/conformance" --nocapture

# A fleet worker as nobody takes units only of the profiles its bubblewrap
# enforces there (standard), and refuses hardened ones, saying why.
if [ -n "${TOOLEXEC_NATS_SERVER:-}" ] && [ -x "$TOOLEXEC_NATS_SERVER" ]; then
  echo "== fleet unit profiles as nobody"
  as_nobody TOOLEXEC_TEST_BIN="$dir/toolexec" TOOLEXEC_NATS_SERVER="$dir/nats-server" \
    "$dir/it" --exact fleet::units::unit_profiles_follow_what_the_worker_enforces
else
  echo "== SKIPPED fleet unit profiles as nobody: TOOLEXEC_NATS_SERVER is not set (source the test deps' env.sh)"
fi

tests=(
  root::
  dev_is_read_only_and_dev_shm_is_sized
  normal_units_run_with_a_clean_environment
)
echo "== bubblewrap-specific escape tests as nobody: ${tests[*]}"
as_nobody TOOLEXEC_TEST_SANDBOX_INIT="$dir/toolexec-sandbox-init" \
  "$dir/bwrap_hostile" "${tests[@]}"
