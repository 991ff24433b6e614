#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and doc tests,
# the search-quality evaluation, and the MCP suites against real servers and
# clients. Everything comes from the package registries: crates through
# cargo, the MCP reference server, Inspector, conformance suite and Node 22
# from npm, the Python MCP SDK from PyPI, bubblewrap, runc, runsc, docker.io
# and busybox-static from Debian (scripts/install-test-deps.sh); a private
# dockerd is started for the Docker runtime tests (scripts/start-dockerd.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase's wall time is printed at the end (also when a phase fails),
# so a cold run shows where its time goes.
phases=()
phase_name=""
phase_start=$(date +%s)
phase() {
  local now
  now=$(date +%s)
  if [ -n "$phase_name" ]; then
    phases+=("$(printf '%6ds  %s' $((now - phase_start)) "$phase_name")")
  fi
  phase_name="$1"
  phase_start=$now
  [ -z "$1" ] || echo "== $1"
}
report_phases() {
  local status=$?
  phase ""
  echo "== phases (wall time)"
  printf '%s\n' "${phases[@]}"
  exit "$status"
}
trap report_phases EXIT

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 is required ($2)" >&2; exit 2; }; }
need cargo "the Rust toolchain, 1.95"
need python3 "the Python MCP SDK tests"
need npm "the MCP reference server, Inspector and conformance suite"

phase "test dependencies"
bash scripts/install-test-deps.sh
# shellcheck disable=SC1091
source "${TOOLEXEC_DEPS:-$HOME/.cache/toolexec/deps}/env.sh"

phase "private dockerd for the Docker runtime tests"
eval "$(bash scripts/start-dockerd.sh)"

phase "toolchain: $(cargo --version), $(rustc --version)"
for component in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component"
done

phase "cargo fmt --check"
cargo fmt --all --check

phase "cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

phase "toolexec-mcp feature subsets: upstream alone (no QuickJS), gateway without code mode, with OAuth"
for features in upstream gateway gateway,oauth; do
  cargo clippy -p toolexec-mcp --no-default-features --features "$features" --locked -- -D warnings
  if cargo tree -p toolexec-mcp --no-default-features --features "$features" -e normal --locked | grep -q quickjs; then
    echo "error: toolexec-mcp with only '$features' depends on QuickJS" >&2
    exit 1
  fi
done

phase "cargo test: build"
# The runtime conformance suite (crates/toolexec-conformance) skips a
# runtime it cannot use; as root (as CI runs) every one must be there.
if [ "$(id -u)" = 0 ]; then
  export TOOLEXEC_REQUIRE_RUNTIMES=bubblewrap,runc,runsc,docker
fi
cargo test --workspace --locked --no-run
phase "cargo test: run"
cargo test --workspace --locked

phase "runtime conformance and sandbox escape tests as an unprivileged user"
bash scripts/test-unprivileged.sh
