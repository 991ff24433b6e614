#!/usr/bin/env bash
# The MCP benchmarks (crates/toolexec-mcp/benches/gateway_stdio.rs), side by
# side in one run: tools/call latency and throughput of `toolexec serve` vs a
# Python SDK server, the gateway's overhead in front of upstream stdio
# servers, and importing + searching 10,000 upstream tools. Prints Markdown
# tables (also saved to bench-mcp.md in cargo's target directory).
#
#   bash scripts/bench-mcp.sh                 # everything (about 2 minutes after the build)
#   bash scripts/bench-mcp.sh throughput      # only some sections: throughput, proxy, import
#
# Knobs (environment): TOOLEXEC_BENCH_CALLS (sequential calls per row, 5000),
# TOOLEXEC_BENCH_SECS (seconds per concurrency level, 2),
# TOOLEXEC_BENCH_IMPORT_RUNS (3).
#
# External servers come from scripts/install-test-deps.sh (Node 22 with
# server-everything, a venv with mcp==1.30.0); rows whose server is missing
# are skipped with a message. Run on an otherwise idle machine: the numbers
# are round trips through pipes between processes on few cores.
set -euo pipefail
cd "$(dirname "$0")/.."

env_file="${TOOLEXEC_DEPS:-$HOME/.cache/toolexec/deps}/env.sh"
if [ -f "$env_file" ]; then
  # shellcheck disable=SC1090
  source "$env_file"
else
  echo "note: $env_file not found (scripts/install-test-deps.sh writes it); Python and server-everything rows will be skipped" >&2
fi

echo "== building release binaries (toolexec, the bench)" >&2
cargo build --release -q -p toolexec-cli
cargo bench -q -p toolexec-mcp --bench gateway_stdio --no-run
# Cargo's target directory (CI keeps it outside the clone).
target="${CARGO_TARGET_DIR:-$PWD/target}"
mkdir -p "$target"
export TOOLEXEC_BIN="$target/release/toolexec"

{
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(free -g | awk '/^Mem:/{print $2}') GiB, $(uname -sr); $(rustc --version)"
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ); commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (working tree has changes)'); load: $(uptime | sed 's/.*load average: //')"
  echo "python: ${TOOLEXEC_PYTHON:-none}; node: $("${TOOLEXEC_NODE22:-false}" --version 2>/dev/null || echo none)"
} | tee "$target/bench-mcp.md"

start=$(date +%s)
cargo bench -q -p toolexec-mcp --bench gateway_stdio -- "$@" | tee -a "$target/bench-mcp.md"
echo "bench time: $(( $(date +%s) - start )) s; load after: $(uptime | sed 's/.*load average: //')" | tee -a "$target/bench-mcp.md" >&2
