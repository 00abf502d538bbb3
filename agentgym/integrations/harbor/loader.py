"""Reading a Harbor task directory: task.toml's fields with Harbor's defaults, the caps on what a task may ask for, and the refusal of links and files that reach past the directory.

A task directory may come from anyone (see :mod:`agentgym.integrations.harbor`): what is read from it
on the host, or copied from it into a container, must be the directory's own, and what its
``task.toml`` asks of the sandbox is bounded by :class:`HarborLimits`.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agentgym.integrations.harbor.dockerfile import (
    BASE_WORKDIR,
    UnbuildableError,
    is_system_dir,
    translate_dockerfile,
    with_agentgym_layer,
)

__all__ = ["HarborLimits", "HarborTask", "HarborTaskError", "load_harbor_tasks", "read_task", "read_text"]

# Harbor's defaults (harbor.models.task.config).
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0
# task.toml, instruction.md, the Dockerfile and each file of the oracle are read whole on the host.
MAX_TEXT_BYTES = 1024 * 1024


class HarborTaskError(ValueError):
    """A directory is not a Harbor task agentgym can load (the message names the file and the problem)."""


@dataclass(frozen=True)
class HarborLimits:
    """The most a task's ``task.toml`` may ask for; a task that asks for more is refused when it is loaded.

    Each field is named after the task.toml key it caps (``[environment].cpus``, ``memory_mb``,
    ``storage_mb``, ``build_timeout_sec``; ``[verifier].timeout_sec``; ``[agent].timeout_sec``).
    """

    cpus: float = 4.0
    memory_mb: int = 8192
    storage_mb: int = 10240
    build_timeout_sec: float = 1800.0
    verifier_timeout_sec: float = 1800.0
    agent_timeout_sec: float = 3600.0

    def __post_init__(self):
        for limit in fields(self):
            value = getattr(self, limit.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"HarborLimits.{limit.name} must be a positive number, got {value!r}")


# (task.toml table, key, the HarborLimits field that caps it, whether it is a whole number)
_LIMITED = (
    ("environment", "cpus", "cpus", False),
    ("environment", "memory_mb", "memory_mb", True),
    ("environment", "storage_mb", "storage_mb", True),
    ("environment", "build_timeout_sec", "build_timeout_sec", False),
    ("verifier", "timeout_sec", "verifier_timeout_sec", False),
    ("agent", "timeout_sec", "agent_timeout_sec", False),
)


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task directory, read and checked (see :mod:`agentgym.integrations.harbor`).

    The resources and timeouts are task.toml's (within the loader's :class:`HarborLimits`), or
    Harbor's defaults; None where a task sets none and the sandbox's own default applies.
    """

    id: str
    path: Path
    instruction: str
    config: dict = field(repr=False)
    # The Dockerfile as agentgym builds it, or why it cannot be built here.
    dockerfile: str | None = field(repr=False)
    workdir: str
    unbuildable: str | None = None
    verifier_timeout: float = DEFAULT_VERIFIER_TIMEOUT_S
    build_timeout: float = DEFAULT_BUILD_TIMEOUT_S
    agent_timeout: float | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None

    def metadata(self) -> dict[str, Any]:
        section = self.config.get("task") or {}
        return {
            "path": str(self.path),
            "name": section.get("name", ""),
            "description": section.get("description", ""),
            "workdir": self.workdir,
            "verifier_timeout_sec": self.verifier_timeout,
            "agent_timeout_sec": self.agent_timeout,
            "unbuildable": self.unbuildable,
            **{k: v for k, v in self.config.get("metadata", {}).items() if isinstance(v, (str, int, float, bool))},
        }


def load_harbor_tasks(path: str | Path, limits: HarborLimits | None = None) -> dict[str, HarborTask]:
    """The Harbor tasks at ``path``: the task there (a directory with ``task.toml``) or each subdirectory that is one.

    Each is read by :func:`read_task` within ``limits`` (default: :class:`HarborLimits`'s defaults).
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise HarborTaskError(f"{root} is not a directory of Harbor tasks")
    if (root / "task.toml").is_file():
        task_dirs = [root]
    else:
        task_dirs = sorted(child for child in root.iterdir() if (child / "task.toml").is_file())
        for child in task_dirs:
            # The folder is the caller's; a task in it that is a link to elsewhere is not the folder's.
            if child.is_symlink() and not child.resolve().is_relative_to(root.resolve()):
                raise HarborTaskError(f"Harbor task {child.name}: the task directory is a link that leaves {root}")
    if not task_dirs:
        raise HarborTaskError(f"{root} holds no Harbor task (a directory with a task.toml)")
    return {task.id: task for task in (read_task(task_dir, limits) for task_dir in task_dirs)}


def read_task(task_dir: Path, limits: HarborLimits | None = None) -> HarborTask:
    """Read one task directory; :class:`HarborTaskError` when it is malformed, reaches past itself, asks for more
    than ``limits`` or is of a kind agentgym does not run."""
    task_dir = task_dir.resolve()
    limits = limits or HarborLimits()
    problem = _outside_links(task_dir)
    if problem:
        raise HarborTaskError(f"Harbor task {task_dir.name}: {problem}")
    try:
        config = tomllib.loads(read_text(task_dir / "task.toml"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, HarborTaskError) as exc:
        raise HarborTaskError(f"{task_dir / 'task.toml'}: {exc}") from None
    problem = _unsupported(task_dir, config)
    if problem:
        raise HarborTaskError(f"Harbor task {task_dir.name}: {problem}")
    settings = _limited_settings(task_dir.name, config, limits)
    environment = config.get("environment", {})
    try:
        dockerfile, workdir = translate_dockerfile(
            read_text(task_dir / "environment" / "Dockerfile"), task_dir / "environment"
        )
        unbuildable = None
    except UnbuildableError as exc:
        dockerfile, workdir, unbuildable = None, BASE_WORKDIR, str(exc)
    workdir = environment.get("workdir") or workdir
    if dockerfile is not None and is_system_dir(workdir):
        dockerfile, unbuildable = None, f"the working directory {workdir} is a system directory"
    return HarborTask(
        id=task_dir.name,
        path=task_dir,
        instruction=read_text(task_dir / "instruction.md"),
        config=config,
        dockerfile=dockerfile and with_agentgym_layer(dockerfile, workdir),
        workdir=workdir,
        unbuildable=unbuildable,
        verifier_timeout=settings.get("verifier_timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S),
        build_timeout=settings.get("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S),
        agent_timeout=settings.get("agent_timeout_sec"),
        cpus=settings.get("cpus"),
        memory_mb=settings.get("memory_mb"),
        storage_mb=settings.get("storage_mb"),
    )


def read_text(path: Path, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A task file's text, at most ``max_bytes`` of it (:class:`HarborTaskError` past that)."""
    with path.open("rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise HarborTaskError(f"{path.name} is larger than {max_bytes} bytes")
    return data.decode("utf-8")


def _outside_links(task_dir: Path) -> str | None:
    """Why the directory reaches past itself (None: it does not): a link whose target leaves it, or a special file.

    Every entry counts, not only the files read today: the whole of tests/, solution/ and
    environment/ is copied into containers, and a link there would copy the host's files.
    """
    for parent, dirs, files in os.walk(task_dir):
        for name in dirs + files:
            entry = Path(parent, name)
            relative = entry.relative_to(task_dir).as_posix()
            mode = entry.lstat().st_mode
            if stat.S_ISLNK(mode):
                if not entry.resolve().is_relative_to(task_dir):
                    return f"{relative} is a link that leaves the task directory ({os.readlink(entry)})"
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"{relative} is not a regular file, a directory or a link"
    return None


def _unsupported(task_dir: Path, config: dict) -> str | None:
    for required in ("instruction.md", "tests/test.sh"):
        if not (task_dir / required).is_file():
            return f"{required} is missing"
    if config.get("steps"):
        return "multi-step tasks ([[steps]]) are not supported"
    environment = config.get("environment", {})
    if str(environment.get("os", "linux")).lower() != "linux":
        return f"the task targets {environment['os']}; agentgym runs Linux containers"
    if (task_dir / "environment" / "docker-compose.yaml").exists():
        return "docker-compose environments are not supported (one container per task)"
    if not (task_dir / "environment" / "Dockerfile").is_file():
        if environment.get("docker_image"):
            return f"prebuilt images ([environment].docker_image = {environment['docker_image']!r}) are not supported"
        return "environment/Dockerfile is missing"
    return None


def _limited_settings(task_id: str, config: dict, limits: HarborLimits) -> dict[str, Any]:
    """The resources and timeouts task.toml sets, by HarborLimits field, each checked against its cap."""
    settings: dict[str, Any] = {}
    for table, key, limit, whole in _LIMITED:
        section = config.get(table) or {}
        value = section.get(key) if isinstance(section, dict) else None
        if value is None:
            continue
        where = f"Harbor task {task_id}: task.toml [{table}].{key} = {value!r}"
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) or not 0 < value < math.inf:
            kind = "a positive whole number" if whole else "a positive number"
            raise HarborTaskError(f"{where} is not {kind}")
        cap = getattr(limits, limit)
        if value > cap:
            raise HarborTaskError(
                f"{where} is above agentgym's cap of {cap:g} (a task directory may come from anyone; "
                f"HarborEnv(limits={{'{limit}': ...}}) raises the cap)"
            )
        settings[limit] = int(value) if whole else float(value)
    return settings
