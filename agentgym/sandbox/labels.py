"""Labels that mark what agentgym made in the Docker engine and which process owns it, so leftovers can be reaped."""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass

MANAGED = "agentgym.managed"
KIND = "agentgym.kind"
OWNER_PID = "agentgym.owner-pid"
OWNER_HOST = "agentgym.owner-host"
# The owner's start time tells a dead owner from a new process that reuses its pid.
OWNER_START = "agentgym.owner-start"
SESSION = "agentgym.session"
CONTENT_HASH = "agentgym.content-hash"
# A run that spans processes (a Ray cluster's env workers) names itself in $AGENTGYM_RUN_ID, which
# the processes it starts inherit: their containers carry it, so the run can find what it left.
RUN = "agentgym.run"
RUN_ENV = "AGENTGYM_RUN_ID"
# An imported snapshot image has no parent on its new engine; this names the image its commits started from.
SNAPSHOT_START = "agentgym.snapshot-start"

KIND_BASE = "base"
KIND_SANDBOX = "sandbox"
KIND_SNAPSHOT = "snapshot"
KIND_POOL = "pool"

MANAGED_FILTER = {"label": [f"{MANAGED}=true"]}


@dataclass(frozen=True)
class Owner:
    """The process that owns containers and images: pid, host, start time and a per-process session id."""

    pid: int
    host: str
    start: str
    session: str


def process_start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot, or None where the process (or /proc) is absent."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name (field 2) may contain spaces; the fields after its closing paren do not.
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


_owner: Owner | None = None


def current_owner() -> Owner:
    """This process as an owner; a forked child has another pid, so it gets an owner (and session) of its own."""
    global _owner
    if _owner is None or _owner.pid != os.getpid():
        pid = os.getpid()
        _owner = Owner(pid, socket.gethostname(), process_start_time(pid) or "", uuid.uuid4().hex)
    return _owner


def owner_labels(kind: str) -> dict[str, str]:
    owner = current_owner()
    labels = {
        MANAGED: "true",
        KIND: kind,
        OWNER_PID: str(owner.pid),
        OWNER_HOST: owner.host,
        OWNER_START: owner.start,
        SESSION: owner.session,
    }
    if run := os.environ.get(RUN_ENV):
        labels[RUN] = run
    return labels


def run_filter(run: str) -> dict[str, list[str]]:
    """Everything made by the processes of run ``run`` (see :data:`RUN_ENV`)."""
    return {"label": [f"{MANAGED}=true", f"{RUN}={run}"]}


def session_filter() -> dict[str, list[str]]:
    return {"label": [f"{MANAGED}=true", f"{SESSION}={current_owner().session}"]}


def owner_is_dead(labels: dict[str, str] | None) -> bool:
    """True only when the labels name an owner on this host that no longer runs; unknown owners count as alive."""
    labels = labels or {}
    if labels.get(OWNER_HOST) != socket.gethostname() or not labels.get(OWNER_PID, "").isdigit():
        return False
    pid = int(labels[OWNER_PID])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, owned by another user
    start = process_start_time(pid)
    return bool(labels.get(OWNER_START)) and start is not None and start != labels[OWNER_START]


# Chromium profiles live in temporary directories named after their owner, so that `agentgym sandbox gc`
# can remove those a killed process left behind (a browser's profile holds hundreds of megabytes).
BROWSER_DIR_PREFIX = "agentgym-chromium-"
_BROWSER_DIR = re.compile(re.escape(BROWSER_DIR_PREFIX) + r"(\d+)-(\d+)-")


def browser_dir_prefix() -> str:
    """The ``tempfile.mkdtemp`` prefix of a browser profile directory owned by this process."""
    owner = current_owner()
    return f"{BROWSER_DIR_PREFIX}{owner.pid}-{owner.start}-"


def browser_dir_owner_is_dead(name: str) -> bool:
    """True when ``name`` is a browser profile directory whose owning process no longer runs (see :func:`owner_is_dead`)."""
    match = _BROWSER_DIR.match(name)
    if match is None:
        return False
    pid, start = match.groups()
    return owner_is_dead({OWNER_HOST: socket.gethostname(), OWNER_PID: pid, OWNER_START: start})
