#!/usr/bin/env bash
# Usage: scripts/docker-btrfs-engine.sh start|stop [NAME]
# A second Docker engine beside the host's, its data root on btrfs with quotas (scripts/docker-quota-root.sh at
# /var/lib/agentgym-NAME-docker, default NAME btrfs), for the btrfs tests and benchmarks (a hard `storage_opt size`,
# and snapshot diffs read from btrfs subvolumes: agentgym/sandbox/fs_diff.py). Everything of it is its own, so the
# host's engine is never touched: the socket unix:///run/agentgym-NAME/docker.sock, the exec root, containerd and
# pid file under /run/agentgym-NAME, cgroups under /agentgym-NAME, a bridge of its own (ag-NAME, on a 172.31.x.0/24
# chosen by NAME), no iptables rules, no sysctl changes. Not `--bridge none`: dockerd 20.10 then deletes the
# interface docker0 at start (removeDefaultBridgeInterface), which is the host engine's, and its builds and
# bridge-network containers fail until it is restarted or docker0 is made again.
# `start` prints the DOCKER_HOST for clients (idempotent: an engine already answering there is kept). `stop` ends
# only this engine (the pid in its pid file, checked to be a dockerd), unmounts its data root and deletes its loop
# file and run directory. Needs root, a loop device and btrfs; exits non-zero, saying why, where it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?usage: $0 start|stop [NAME]}
name=${2:-btrfs}
run=/run/agentgym-$name
root=/var/lib/agentgym-$name-docker
host=unix://$run/docker.sock
bridge=ag-${name:0:12}  # an interface name has at most 15 characters
subnet=172.31.$(( $(printf %s "$name" | cksum | cut -d' ' -f1) % 200 + 20 )).1/24

answers() { DOCKER_HOST=$host docker info >/dev/null 2>&1; }

engine_pid() {
  local pid
  pid=$(cat "$run/docker.pid" 2>/dev/null) || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && echo "$pid"
}

case $action in
  start)
    [ "$(id -u)" -eq 0 ] || { echo "starting a second dockerd needs root" >&2; exit 1; }
    if answers; then echo "$host"; exit 0; fi
    scripts/docker-quota-root.sh "$root" "${AGENTGYM_BTRFS_SIZE:-}" >&2
    mkdir -p "$run"
    echo '{}' >"$run/daemon.json"  # not the host engine's /etc/docker/daemon.json (its hosts, its bridge)
    if ! ip link show "$bridge" >/dev/null 2>&1; then
      ip link add "$bridge" type bridge && ip addr add "$subnet" dev "$bridge" && ip link set "$bridge" up
    fi
    nohup dockerd --config-file "$run/daemon.json" --data-root "$root" --storage-driver btrfs \
      --exec-root "$run/exec" --pidfile "$run/docker.pid" -H "$host" --cgroup-parent "/agentgym-$name" \
      --bridge "$bridge" --iptables=false --ip-masq=false --ip-forward=false >"$run/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do answers && break; sleep 0.5; done
    answers || { echo "the btrfs dockerd did not start; see $run/dockerd.log" >&2; tail -5 "$run/dockerd.log" >&2; exit 1; }
    echo "$host"
    ;;
  stop)
    if pid=$(engine_pid); then
      kill "$pid"
      for _ in $(seq 1 60); do [ -e "/proc/$pid" ] || break; sleep 0.5; done
      [ ! -e "/proc/$pid" ] || { echo "the btrfs dockerd ($pid) did not stop" >&2; exit 1; }
    fi
    # What the engine mounted under its roots (its data root's private bind, container namespaces), then the root.
    # Deepest first; findmnt escapes odd characters in targets, which these paths do not have.
    findmnt -rn -o TARGET | grep -E "^($run|$root)(/|$)" | sort -r | while read -r target; do umount "$target"; done
    ! ip link show "$bridge" >/dev/null 2>&1 || ip link del "$bridge"
    rm -f "$root.img"
    rmdir "$root" 2>/dev/null || true
    rm -rf "$run"
    ;;
  *)
    echo "usage: $0 start|stop [NAME]" >&2
    exit 2
    ;;
esac
