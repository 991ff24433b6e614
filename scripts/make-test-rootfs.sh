#!/bin/sh
# Builds a minimal busybox root filesystem in DIR for container tests
# (toolexec-oci, toolexec-docker): /bin/busybox (Debian's busybox-static)
# with a symlink per applet in /bin, /tmp, /etc/passwd and /etc/group with
# root and nobody. With --tar FILE, also writes DIR as a tarball.
#
#   scripts/make-test-rootfs.sh DIR [--tar FILE]
set -eu

usage() { echo "usage: $0 DIR [--tar FILE]" >&2; exit 2; }
[ $# -ge 1 ] || usage
dir=$1; shift
tar_out=
if [ $# -gt 0 ]; then
  [ "$1" = "--tar" ] && [ $# -eq 2 ] || usage
  tar_out=$2
fi
busybox=${BUSYBOX:-/usr/bin/busybox}
if [ ! -x "$busybox" ]; then
  echo "$0: $busybox not found (apt-get install busybox-static)" >&2
  exit 1
fi
if ! "$busybox" --list >/dev/null 2>&1; then
  echo "$0: $busybox does not run" >&2
  exit 1
fi
# A dynamically linked busybox would need the host's libraries inside.
if command -v ldd >/dev/null 2>&1 && ldd "$busybox" >/dev/null 2>&1; then
  echo "$0: $busybox is dynamically linked; use busybox-static" >&2
  exit 1
fi

mkdir -p "$dir/bin" "$dir/tmp" "$dir/etc" "$dir/proc" "$dir/dev" "$dir/sys" "$dir/root"
chmod 1777 "$dir/tmp"
cp "$busybox" "$dir/bin/busybox"
chmod 0755 "$dir/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] && continue
  ln -sf busybox "$dir/bin/$applet"
done
ln -sfn bin "$dir/sbin" 2>/dev/null || true
mkdir -p "$dir/usr"
ln -sfn ../bin "$dir/usr/bin" 2>/dev/null || true
cat >"$dir/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$dir/etc/group" <<'GROUP'
root:x:0:
nogroup:x:65534:
GROUP
if [ -n "$tar_out" ]; then
  tar -C "$dir" -cf "$tar_out" .
fi
echo "$dir"
