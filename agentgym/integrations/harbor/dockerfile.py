"""A Harbor task's Dockerfile rebuilt on agentgym's base image: what is kept, ignored and refused, and the layer agentgym adds (see :mod:`agentgym.integrations.harbor`)."""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from pathlib import Path

__all__ = ["UnbuildableError", "is_system_dir", "translate_dockerfile", "with_agentgym_layer"]

BASE_WORKDIR = "/workspace"  # the base image's WORKDIR, the agent's own
SOLUTION_DIR = "/solution"
VERIFIER_DIR = "/logs/verifier"

# Images the base image stands in for: Debian bookworm, and the Python images built on it with its Python (3.11).
_SUBSTITUTABLE = re.compile(
    r"(?:(?:docker\.io/)?(?:library/)?)"
    r"(?:debian:(?:bookworm|12(?:\.\d+)?)(?:-\d{8})?(?:-slim)?"
    r"|python:3\.11(?:\.\d+)?(?:-slim)?(?:-bookworm)?"
    r"|agentgym/base(?::[\w.-]+)?)"
)
# Where handing the working directory to the agent would hand it the system.
_SYSTEM_DIRS = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/logs", "/proc", "/root", "/sbin", "/sys")
_SYSTEM_TREES = ("/usr", "/etc/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/proc/", "/sys/", "/dev/", "/root/", "/logs/")
_KEPT = {"WORKDIR", "ENV", "ARG", "LABEL", "USER", "SHELL", "RUN", "COPY", "ADD"}
_IGNORED = {"CMD", "ENTRYPOINT", "EXPOSE", "HEALTHCHECK", "STOPSIGNAL", "MAINTAINER"}


class UnbuildableError(Exception):
    """Why a Dockerfile cannot be rebuilt on the base image (raised by :func:`translate_dockerfile`)."""


def translate_dockerfile(text: str, context: Path) -> tuple[str, str]:
    """The task's Dockerfile on agentgym's base image (``FROM`` left out: :func:`build_task_image` adds it),
    and the working directory it leaves; :class:`UnbuildableError` says why it cannot be rebuilt here.

    See :mod:`agentgym.integrations.harbor` for what is kept, ignored and refused.
    """
    kept: list[str] = []
    workdir = BASE_WORKDIR
    seen_from = False
    for line_no, keyword, args in _instructions(text):
        where = f"Dockerfile line {line_no}: {keyword}"
        if keyword == "FROM":
            if seen_from:
                raise UnbuildableError(f"{where}: multi-stage builds are not supported")
            seen_from = True
            words = args.split()
            if not words or words[0].startswith("--"):
                raise UnbuildableError(f"{where} {args}: FROM flags are not supported")
            image = words[0].split("@", 1)[0]
            if not _SUBSTITUTABLE.fullmatch(image):
                raise UnbuildableError(
                    f"FROM {words[0]} would have to be pulled from a registry; agentgym builds offline on its base "
                    "image (Debian bookworm, Python 3.11), which stands in only for debian:bookworm, debian:12 and "
                    "python:3.11 images"
                )
            continue
        if not seen_from:
            raise UnbuildableError(f"{where} before FROM is not supported")
        if keyword in _IGNORED:
            continue
        if keyword not in _KEPT:
            raise UnbuildableError(f"{where} is not supported ({_REFUSED.get(keyword, 'unknown instruction')})")
        if "<<" in args and keyword in ("RUN", "COPY", "ADD"):
            raise UnbuildableError(f"{where}: heredocs need BuildKit, which agentgym's offline build does not use")
        flags = re.findall(r"(?:^|\s)(--[\w-]+)", args.split(" ", 1)[0] if keyword == "RUN" else args)
        allowed = {"COPY": {"--chown"}, "ADD": {"--chown"}}.get(keyword, set())
        refused = [flag for flag in flags if flag not in allowed and keyword in ("RUN", "COPY", "ADD")]
        if refused:
            raise UnbuildableError(f"{where} {refused[0]}: not supported ({_FLAG_REASONS.get(refused[0], 'BuildKit')})")
        if keyword in ("COPY", "ADD"):
            _check_sources(where, keyword, args, context)
        if keyword == "WORKDIR":
            if "$" in args:
                raise UnbuildableError(f"{where} {args}: variables in WORKDIR are not supported")
            workdir = posixpath.normpath(posixpath.join(workdir, args.strip().strip('"')))
        kept.append(f"{keyword} {args}")
    if not seen_from:
        raise UnbuildableError("the Dockerfile has no FROM")
    return "\n".join(kept), workdir


_REFUSED = {
    "VOLUME": "a volume is not part of the container's snapshots",
    "ONBUILD": "triggers for other builds",
}
_FLAG_REASONS = {
    "--from": "it copies from another image, which would have to be pulled",
    "--mount": "BuildKit mounts",
    "--network": "the build has no network",
    "--chmod": "BuildKit only",
    "--link": "BuildKit only",
}


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, KEYWORD, arguments) of each instruction; continuation lines joined, comments dropped."""
    result: list[tuple[int, str, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction, which Docker drops too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].rstrip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(part for part in pending if part).partition(" ")
        result.append((start, keyword.upper(), args.strip()))
        pending = []
    if pending:
        keyword, _, args = " ".join(pending).partition(" ")
        result.append((start, keyword.upper(), args.strip()))
    return result


def _check_sources(where: str, keyword: str, args: str, context: Path) -> None:
    words = [w for w in (json.loads(args) if args.startswith("[") else shlex.split(args)) if not w.startswith("--")]
    if len(words) < 2:
        raise UnbuildableError(f"{where} {args}: needs a source and a destination")
    root = context.resolve()
    for source in words[:-1]:
        if re.match(r"^(https?|git|ssh)://|^git@", source):
            raise UnbuildableError(f"{where} {source}: downloading at build time needs the network")
        matches = list(root.glob(source.lstrip("/"))) if any(c in source for c in "*?[") else [root / source]
        if not matches or not all(m.exists() for m in matches):
            raise UnbuildableError(f"{where} {source}: no such file in the task's environment/ directory")
        if not all(m.resolve().is_relative_to(root) for m in matches):
            raise UnbuildableError(f"{where} {source}: outside the task's environment/ directory")


def is_system_dir(path: str) -> bool:
    """Whether handing ``path`` to the agent (as its working directory) would hand it the system."""
    return path in _SYSTEM_DIRS or path.startswith(_SYSTEM_TREES)


def with_agentgym_layer(dockerfile: str, workdir: str) -> str:
    """The task's instructions, then agentgym's layer (see :mod:`agentgym.integrations.harbor`)."""
    setup = " && ".join(
        [
            f"mkdir -p {VERIFIER_DIR} /logs/agent {SOLUTION_DIR} {shlex.quote(workdir)}",
            f"chown root:root /logs {VERIFIER_DIR} && chmod 755 /logs {VERIFIER_DIR}",
            f"chown 1000:1000 /logs/agent {SOLUTION_DIR}",
            f"chown -R 1000:1000 {shlex.quote(workdir)}",
            # Python images have `python`; Debian's python3 package does not.
            "{ command -v python >/dev/null || ln -s /usr/bin/python3 /usr/local/bin/python; }",
        ]
    )
    return f"{dockerfile}\nUSER root\nRUN {setup}\nWORKDIR {workdir}\n".lstrip("\n")
