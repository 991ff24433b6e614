#!/usr/bin/env bash
# Every benchmark of the workspace in one run, for before/after comparisons:
# each criterion bench with the settings BENCHMARKS.md quotes, then the
# process-level MCP and bubblewrap scripts. Extra arguments go to criterion,
# so two commits compare side by side:
#
#   git checkout OLD && bash scripts/bench-all.sh --save-baseline before
#   git checkout NEW && bash scripts/bench-all.sh --baseline before
#
# The criterion results live in $CRITERION_HOME (default: the target
# directory's criterion/), so both runs may use different target
# directories. Output is also saved to target/bench-all-<time>.log. Run on
# an otherwise idle machine; benches of a runtime missing here report it and
# are skipped by the bench itself.
set -euo pipefail
cd "$(dirname "$0")/.."

env_file="${TOOLEXEC_DEPS:-$HOME/.cache/toolexec/deps}/env.sh"
# shellcheck disable=SC1090
[ -f "$env_file" ] && source "$env_file"
# The Docker bench needs a daemon: the same private one the tests use.
[ -n "${DOCKER_HOST:-}" ] || eval "$(bash scripts/start-dockerd.sh)"

target="${CARGO_TARGET_DIR:-target}"
export CRITERION_HOME="${CRITERION_HOME:-$target/criterion}"
mkdir -p "$target"
log="$target/bench-all-$(date +%Y%m%d-%H%M%S).log"

{
  echo "== $(git rev-parse --short HEAD) on $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
  cargo bench --workspace --locked --no-run
  # One bench target at a time (cargo bench --workspace would also run the
  # MCP bench, which has its own script and knobs), selected in the whole
  # workspace so features unify as in the build above (`-p PACKAGE` would
  # rebuild dependencies with that package's features alone).
  cargo metadata --no-deps --format-version 1 |
    python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "bench" in t["kind"] and t["name"] != "gateway_stdio":
            print(p["name"], t["name"])' |
    while read -r package bench; do
      echo "== cargo bench --bench $bench ($package)"
      cargo bench --locked --workspace --bench "$bench" -- \
        --warm-up-time 1 --measurement-time 3 "$@"
    done
  echo "== scripts/bench-mcp.sh"
  bash scripts/bench-mcp.sh
  echo "== scripts/bench-bwrap.sh"
  bash scripts/bench-bwrap.sh
} 2>&1 | tee "$log"
echo "saved: $log" >&2
