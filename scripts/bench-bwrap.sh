#!/usr/bin/env bash
# Raw bubblewrap start-to-exit of /bin/true, the reference for
# `cargo bench -p toolexec-bwrap --bench bwrap`. Uses hyperfine when
# installed, else a timed loop.
set -euo pipefail
N="${N:-200}"
CMD=(bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr
     --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/bin /bin
     --proc /proc --dev /dev --tmpfs /tmp /bin/true)
if command -v hyperfine >/dev/null; then
  hyperfine --warmup 10 -N --runs "$N" "${CMD[*]}"
else
  "${CMD[@]}"
  start=$(date +%s%N)
  for _ in $(seq "$N"); do "${CMD[@]}"; done
  end=$(date +%s%N)
  echo "raw bwrap /bin/true: $(( (end - start) / N / 1000 )) us mean over $N runs (loop; hyperfine not installed)"
fi
