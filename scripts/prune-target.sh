#!/usr/bin/env bash
# Removes the workspace's own build outputs that a CI run superseded.
#
# Every CI run builds a fresh clone at a new path, so each workspace crate,
# test and example gets a new hash and a new file in the shared target
# directory, and the previous run's copies (hundreds of MB each for the test
# binaries) are never used again: without pruning the cache grows by several
# GB per run until the disk is full. Dependencies from the registries keep
# their hashes across clones and are left alone.
#
# usage: prune-target.sh MARKER   (a file touched before the run's build)
set -euo pipefail
cd "$(dirname "$0")/.."
marker="$1"
target="${CARGO_TARGET_DIR:-target}"
[ -f "$marker" ] || { echo "prune-target: no marker $marker" >&2; exit 2; }
metadata=$(mktemp)
trap 'rm -f "$metadata"' EXIT
cargo metadata --no-deps --format-version 1 --locked >"$metadata"
python3 - "$target" "$marker" "$metadata" <<'EOF'
import json, os, re, sys

target, marker, metadata = sys.argv[1:4]
since = os.path.getmtime(marker)
with open(metadata) as f:
    packages = json.load(f)["packages"]
names = {t["name"].replace("-", "_") for p in packages for t in p["targets"]}
pattern = re.compile(r"^(?:lib)?(.+)-([0-9a-f]{16})(\..+)?$")
removed = size = 0
for kind in ("debug", "release"):
    for sub in ("deps", "examples"):
        folder = os.path.join(target, kind, sub)
        if not os.path.isdir(folder):
            continue
        groups = {}
        for entry in os.scandir(folder):
            m = pattern.match(entry.name)
            if m and m.group(1) in names and entry.is_file(follow_symlinks=False):
                groups.setdefault((m.group(1), m.group(3)), []).append(entry)
        for entries in groups.values():
            if not any(e.stat().st_mtime >= since for e in entries):
                continue  # not rebuilt by this run: maybe still current
            for e in entries:
                st = e.stat()
                if st.st_mtime < since:
                    size += st.st_size
                    removed += 1
                    os.remove(e.path)
print(f"prune-target: removed {removed} superseded workspace outputs ({size / 1e9:.1f} GB)")
EOF
