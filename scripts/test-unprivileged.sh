#!/usr/bin/env bash
# Runs the sandbox escape tests again as an unprivileged user (nobody,
# 65534), after `cargo test` ran them as the invoking user (root in CI):
# sandboxes must hold both ways. The test binary and the sandbox init are
# copied to a directory that user can reach (the build cache may sit
# under a home directory only root can enter).
#
# The limit tests (memory, processes, CPU verdicts) need per-run cgroups,
# which an unprivileged user cannot create on this machine, so they run as
# root only; the runtime then serves profile standard at most and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "== already unprivileged: the escape tests ran as $(id -un) in cargo test"
  exit 0
fi
command -v setpriv >/dev/null || { echo "error: setpriv (util-linux) is required" >&2; exit 2; }

bin=$(cargo test -p toolexec-bwrap --test bwrap_hostile --locked --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "bwrap_hostile":
        print(m["executable"])')
init="${CARGO_TARGET_DIR:-target}/debug/toolexec-sandbox-init"
[ -x "$bin" ] && [ -x "$init" ] || { echo "error: build the tests first (cargo test)" >&2; exit 2; }

dir=$(mktemp -d /tmp/toolexec-unpriv.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$bin" "$dir/bwrap_hostile"
cp "$init" "$dir/toolexec-sandbox-init"
chmod 755 "$dir" "$dir/bwrap_hostile" "$dir/toolexec-sandbox-init"
mkdir "$dir/home" && chown 65534:65534 "$dir/home"

tests=(
  root::
  host_secrets_are_invisible
  writes_outside_tmp_fail_and_the_host_is_untouched
  network_is_off
  proc_and_symlink_escapes_stay_inside
  signals_cannot_reach_the_host
  seccomp_denies_namespaces_and_ptrace
  x32_system_calls_are_refused
  dev_is_read_only_and_dev_shm_is_sized
  gateway_budget_and_forgery_end_the_run
  bad_units_are_typed_errors
  normal_units_run_with_a_clean_environment
)
echo "== bubblewrap escape tests as nobody (uid 65534): ${tests[*]}"
cd "$dir"
setpriv --reuid=65534 --regid=65534 --clear-groups \
  env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$dir/home" TMPDIR="$dir/home" CI="${CI:-}" \
  TOOLEXEC_TEST_SANDBOX_INIT="$dir/toolexec-sandbox-init" \
  "$dir/bwrap_hostile" "${tests[@]}"
