#!/usr/bin/env bash
# What telemetry adds to a validated local call, measured so that host
# noise cancels: the telemetry criterion bench run RUNS times (default 10),
# each run a fresh process measuring every variant within seconds, and
# each variant's overhead taken within its own run (variant minus `off`).
# Prints the per-run figures and the median of each.
#
#   bash scripts/bench-telemetry.sh        # 10 runs, about 2 minutes after the build
#   RUNS=20 bash scripts/bench-telemetry.sh
#
# The variants run in one order in each run (the subscriber is
# process-wide and cannot be removed): off, observer (a no-op observer),
# metrics, spans, spans_and_metrics. See benches/telemetry.rs in toolexec-telemetry.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-10}"
cargo bench --locked -p toolexec-telemetry --bench telemetry --no-run >&2
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for i in $(seq "$runs"); do
  cargo bench --locked -p toolexec-telemetry --bench telemetry -- \
    --warm-up-time 1 --measurement-time 2 --noplot 2>/dev/null |
    python3 -c '
import re, sys
text = sys.stdin.read()
found = re.findall(r"telemetry/(\w+)\s+time:\s+\[\S+ \S+ (\S+) (\S+)", text)
scale = {"ns": 1, "µs": 1e3, "ms": 1e6}
print(" ".join(f"{name}={float(v) * scale[unit]:.0f}" for name, v, unit in found))
' >>"$out"
  echo "run $i: $(tail -1 "$out")" >&2
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [dict(kv.split("=") for kv in line.split()) for line in open(sys.argv[1]) if line.strip()]
names = ["off", "observer", "metrics", "spans", "spans_and_metrics"]
print("| variant | median time | median above `off` (same run) |")
print("|---|---|---|")
for n in names:
    times = [float(r[n]) for r in rows]
    above = [float(r[n]) - float(r["off"]) for r in rows]
    extra = "" if n == "off" else f"{statistics.median(above):+.0f} ns"
    print(f"| `{n}` | {statistics.median(times):.0f} ns | {extra} |")
print(f"\n{len(rows)} runs")
PY
