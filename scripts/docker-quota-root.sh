#!/usr/bin/env bash
# Usage: scripts/docker-quota-root.sh DIR [SIZE]
# Mounts a btrfs filesystem with quotas (qgroups) on at DIR, kept in the sparse file DIR.img (SIZE, default 80%
# of the free space under DIR's parent: the file takes only what is written), for `dockerd --storage-driver btrfs
# --data-root DIR` (scripts/setup.sh with AGENTGYM_DOCKER_QUOTA=btrfs). The btrfs driver enforces a container's `storage_opt size` (overlay2 does only on XFS with
# project quotas, which kernels built without CONFIG_XFS_QUOTA lack): with this data root every sandbox's disk
# limit (SandboxConfig.disk_limit) is the engine's hard quota, not agentgym's meter (agentgym/sandbox/disk.py).
# Idempotent (a mounted DIR is checked and left as it is); needs root, a loop device and btrfs-progs. Exits
# non-zero, saying why, where it cannot (no loop devices in a container, no btrfs in the kernel).
set -euo pipefail
dir=${1:?usage: $0 DIR [SIZE]}
image="$dir.img"
if ! mountpoint -q "$dir"; then
  command -v mkfs.btrfs >/dev/null || { echo "mkfs.btrfs is missing (Debian: btrfs-progs)" >&2; exit 1; }
  mkdir -p "$dir"
  if [ ! -e "$image" ]; then
    size=${2:-$(( $(df --output=avail -k "$(dirname "$dir")" | tail -1) * 8 / 10 ))K}
    truncate -s "$size" "$image"
    mkfs.btrfs -q "$image" >/dev/null || { rm -f "$image"; echo "mkfs.btrfs failed on $image" >&2; exit 1; }
  fi
  mount -o loop "$image" "$dir" || { echo "cannot mount $image at $dir (loop devices, btrfs support)" >&2; exit 1; }
fi
[ "$(stat -f -c %T "$dir")" = btrfs ] || { echo "$dir is mounted, but not as btrfs" >&2; exit 1; }
btrfs quota enable "$dir" || { echo "cannot enable btrfs quotas on $dir" >&2; exit 1; }
