#!/usr/bin/env bash
# Starts a private dockerd for toolexec's tests (idempotent), and imports the
# test image `toolexec-test/busybox:1` (a busybox-static rootfs) if absent.
#
#   bash scripts/start-dockerd.sh          # start (or reuse), print DOCKER_HOST
#   bash scripts/start-dockerd.sh --stop   # stop the private daemon
#
# The daemon has no bridge, no iptables rules and its own data/exec roots,
# so it does not touch a system docker installation. Logs:
# ~/.cache/toolexec/docker/dockerd.log.
set -euo pipefail

SOCK=/run/toolexec-docker.sock
PIDFILE=/run/toolexec-docker.pid
EXEC_ROOT=/run/toolexec-docker
CACHE="${HOME:-/root}/.cache/toolexec/docker"
DATA_ROOT="$CACHE/data"
LOG="$CACHE/dockerd.log"
IMAGE=toolexec-test/busybox:1
ROOT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() { echo "start-dockerd: $*" >&2; exit 1; }

docker_cli() {
    local bin
    for bin in /usr/bin/docker /usr/local/bin/docker docker; do
        if command -v "$bin" >/dev/null 2>&1; then
            DOCKER_HOST="unix://$SOCK" "$bin" "$@"
            return
        fi
    done
    die "no docker client found"
}

ping() {
    curl -fsS --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1 ||
        docker_cli version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
    [[ -f $PIDFILE ]] || return 1
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

if [[ ${1:-} == --stop ]]; then
    if pid=$(running_pid); then
        kill "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        echo "start-dockerd: stopped dockerd (pid $pid)"
    else
        echo "start-dockerd: not running"
    fi
    exit 0
fi

command -v dockerd >/dev/null 2>&1 || die "dockerd is not installed (apt-get install docker.io)"
[ "$(id -u)" = 0 ] || die "dockerd needs root (run this script as root or with sudo)"
mkdir -p "$DATA_ROOT" "$EXEC_ROOT"

start_daemon() {
    local driver=$1
    echo "start-dockerd: starting dockerd (storage driver $driver), log $LOG" >&2
    # setsid: the daemon outlives this script and the test that called it.
    setsid dockerd \
        --bridge=none --iptables=false --ip-masq=false \
        --storage-driver="$driver" \
        --data-root "$DATA_ROOT" \
        --exec-root "$EXEC_ROOT" \
        --pidfile "$PIDFILE" \
        --host "unix://$SOCK" \
        >>"$LOG" 2>&1 </dev/null &
    local pid=$!
    for _ in $(seq 1 300); do
        if ping; then return 0; fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    return 1
}

if ! ping; then
    if pid=$(running_pid); then
        # Starting up (another caller raced us): wait for it.
        for _ in $(seq 1 300); do ping && break; sleep 0.1; done
        ping || die "dockerd (pid $pid) does not answer on $SOCK; see $LOG"
    else
        rm -f "$SOCK" "$PIDFILE"
        # A data root already initialised by one driver must keep it.
        if [[ -d $DATA_ROOT/vfs && ! -d $DATA_ROOT/overlay2 ]]; then
            drivers=(vfs)
        else
            drivers=(overlay2 vfs)
        fi
        started=
        for driver in "${drivers[@]}"; do
            if start_daemon "$driver"; then started=$driver; break; fi
            echo "start-dockerd: storage driver $driver failed; tail of $LOG:" >&2
            tail -n 5 "$LOG" >&2 || true
            rm -f "$SOCK" "$PIDFILE"
        done
        [[ -n $started ]] || die "dockerd did not start; see $LOG"
    fi
fi

if ! docker_cli image inspect "$IMAGE" >/dev/null 2>&1; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    rootfs="$work/rootfs"
    if [[ -x $ROOT_DIR/scripts/make-test-rootfs.sh ]]; then
        bash "$ROOT_DIR/scripts/make-test-rootfs.sh" "$rootfs" >&2
    else
        # The same minimal rootfs as make-test-rootfs.sh: busybox-static,
        # its applets as symlinks, /tmp and a passwd with nobody.
        [[ -x /bin/busybox || -x /usr/bin/busybox ]] || die "busybox-static is not installed"
        busybox=$(command -v busybox || echo /usr/bin/busybox)
        mkdir -p "$rootfs"/{bin,tmp,etc,proc,sys,dev,run}
        cp "$busybox" "$rootfs/bin/busybox"
        for applet in $("$rootfs/bin/busybox" --list); do
            [[ $applet == busybox ]] || ln -sf busybox "$rootfs/bin/$applet"
        done
        chmod 1777 "$rootfs/tmp"
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$rootfs/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
    fi
    tar -C "$rootfs" -c . | docker_cli import \
        --change 'ENV PATH=/bin:/usr/bin:/sbin:/usr/sbin' - "$IMAGE" >/dev/null
    echo "start-dockerd: imported $IMAGE" >&2
fi

echo "export DOCKER_HOST=unix://$SOCK"
