"""Harbor task directories as code envs: agentgym/code.harbor-v0 (the instruction is the task, tests/ the hidden grader, solution/ the reference).

A Harbor task (https://harborframework.com/docs/tasks) is a directory::

    task.toml          timeouts, resources, metadata
    instruction.md     what the agent is asked to do
    environment/       Dockerfile and its build context: the agent's container
    tests/test.sh      the verifier, copied to /tests after the agent is done; writes
                       /logs/verifier/reward.json ({"reward": x, ...}) or /logs/verifier/reward.txt (x)
    solution/solve.sh  the oracle, copied to /solution and run instead of an agent

``HarborEnv(path=...)`` loads one such directory or a directory of them (task ids are the
directory names). ``task.toml`` is read with :mod:`tomllib`: Harbor's own models
(``harbor.models.task.config.TaskConfig``) need Python 3.12 and pull in litellm, supabase and
fastapi, so agentgym reads the fields it uses itself, with Harbor's defaults.

**Images.** The task's Dockerfile is rebuilt offline on agentgym's base image (Debian bookworm,
Python 3.11, :mod:`agentgym.sandbox.images`) where it allows that (:func:`translate_dockerfile`):

* ``FROM`` ``debian:bookworm[-slim]``, ``debian:12[...]``, ``python:3.11[-slim][-bookworm]`` or
  ``agentgym/base`` is replaced by the base image; any other image would have to come from a
  registry, and the task says so;
* ``COPY``/``ADD`` of the task's own files, ``WORKDIR``, ``ENV``, ``ARG``, ``LABEL``, ``USER``,
  ``SHELL`` are kept; ``RUN`` is kept and runs with the network disabled, so a step that downloads
  fails, and the task's error names the step and quotes its output; ``CMD``, ``ENTRYPOINT``,
  ``EXPOSE``, ``HEALTHCHECK`` and ``STOPSIGNAL`` are ignored (the sandbox runs its own process);
* multi-stage builds, ``COPY --from``, ``ADD`` of a URL, BuildKit-only flags, heredocs,
  ``VOLUME`` (a volume would escape snapshots) and ``ONBUILD`` are refused, with the reason.

agentgym then adds one layer: the working directory (the last ``WORKDIR``, or
``[environment].workdir``) is handed to the sandbox user (uid 1000, who runs every tool), and
``/logs/verifier`` (root's) and ``/logs/agent``, ``/solution`` (the agent's) are made. Images are
tagged ``agentgym/harbor:<content hash>`` (the base image, the Dockerfile and every file of the
build context), so a task is built once. :class:`HarborImageError` says why a task cannot be built.

**Grading** (``submit()``) follows Harbor's verifier, in a *fresh* container started from a commit of
the agent's (so nothing the agent started is still running), as root: ``/tests`` and
``/logs/verifier`` are emptied, the task's ``tests/`` are copied in (the agent never sees them),
``/tests/test.sh`` runs from the working directory with its output in
``/logs/verifier/test-stdout.txt``, within ``[verifier].timeout_sec``, and the reward is what the
script wrote to ``reward.json`` (its ``"reward"`` key, or its only value) or ``reward.txt``: a finite
number, as Harbor parses it. A run that times out, or writes no reward file or an unreadable
one, scores 0 with ``grade["error"]`` saying why. Success is a reward of at least 1.

What the agent cannot do (each has a hack in ``tests/integrations/test_harbor.py``): write the
reward file (``/logs/verifier`` is root's, and it is emptied before the tests run anyway); leave a
process that writes it later (the verifier's container has none of the agent's processes); put a
program of its own in the verifier's way (test.sh runs with ``PATH`` cut to the image's directories
that root owns and nobody else can write, so ``~/.local/bin`` is dropped); read the tests. What it
can do: anything test.sh itself lets the agent's code do while it runs as root (test.sh that runs
the agent's program can be told anything by it; ``python -m`` from the working directory imports
the agent's modules of the same name first). Harbor's own verifier has the same limits.

Not supported: multi-step tasks (``[[steps]]``), docker-compose environments, Windows tasks,
prebuilt ``docker_image`` environments. The sandbox has no network whatever
``[environment].network_mode`` asks for; ``[agent].timeout_sec`` is not enforced (``max_turns`` and
the per-command timeouts are); ``cpus``, ``memory_mb`` and ``storage_mb`` set the sandbox's limits.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import posixpath
import re
import shlex
import tarfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.envs.code.env import CodeEnv
from agentgym.extras import requires
from agentgym.sandbox.base import SandboxError, SandboxUnavailableError
from agentgym.task import Task, call_text

with requires("code"):
    from agentgym.sandbox import engine, images, labels
    from agentgym.sandbox.docker import DockerSandbox, SandboxConfig, tar_directory
    from agentgym.sandbox.shell import SYSTEM_PATH

__all__ = [
    "HarborEnv",
    "HarborImageError",
    "HarborTask",
    "HarborTaskError",
    "UnbuildableError",
    "build_task_image",
    "load_harbor_tasks",
    "read_task",
    "reference_solution",
    "run_verifier",
    "translate_dockerfile",
]

# Bump when the generated Dockerfile or the build changes in a way the hashed inputs do not show.
IMAGE_RECIPE_VERSION = 1
IMAGE_REPOSITORY = "agentgym/harbor"
IMAGE_KIND = "harbor-task"
GENERATED_DOCKERFILE = ".agentgym-harbor.Dockerfile"
BASE_WORKDIR = "/workspace"  # the base image's WORKDIR, the agent's own
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
VERIFIER_DIR = "/logs/verifier"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
REWARD_TEXT = f"{VERIFIER_DIR}/reward.txt"
TEST_STDOUT = f"{VERIFIER_DIR}/test-stdout.txt"
MAX_REWARD_BYTES = 64 * 1024  # a reward file is a number or a small JSON object
LOG_TAIL_CHARS = 2000
# Harbor's defaults (harbor.models.task.config).
DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_BUILD_TIMEOUT_S = 600.0

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


class HarborTaskError(ValueError):
    """A directory is not a Harbor task agentgym can load (the message names the file and the problem)."""


class HarborImageError(SandboxUnavailableError):
    """A task's image cannot be built here; the message says why."""


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task directory, read (see the module docstring)."""

    id: str
    path: Path
    instruction: str
    config: dict = field(repr=False)
    # The Dockerfile as agentgym builds it, or why it cannot be built here.
    dockerfile: str | None = field(repr=False)
    workdir: str
    unbuildable: str | None = None

    @property
    def verifier_timeout(self) -> float:
        return float(self.config.get("verifier", {}).get("timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S))

    @property
    def agent_timeout(self) -> float | None:
        value = self.config.get("agent", {}).get("timeout_sec")
        return None if value is None else float(value)

    @property
    def build_timeout(self) -> float:
        return float(self.config.get("environment", {}).get("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_S))

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


def load_harbor_tasks(path: str | Path) -> dict[str, HarborTask]:
    """The Harbor tasks at ``path``: the task there (a directory with ``task.toml``) or each subdirectory that is one."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise HarborTaskError(f"{root} is not a directory of Harbor tasks")
    if (root / "task.toml").is_file():
        task_dirs = [root]
    else:
        task_dirs = sorted(child for child in root.iterdir() if (child / "task.toml").is_file())
    if not task_dirs:
        raise HarborTaskError(f"{root} holds no Harbor task (a directory with a task.toml)")
    return {task.id: task for task in map(read_task, task_dirs)}


def read_task(task_dir: Path) -> HarborTask:
    """Read one task directory; :class:`HarborTaskError` when it is malformed or of a kind agentgym does not run."""
    task_dir = task_dir.resolve()
    try:
        config = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise HarborTaskError(f"{task_dir / 'task.toml'}: {exc}") from None
    problem = _unsupported(task_dir, config)
    if problem:
        raise HarborTaskError(f"Harbor task {task_dir.name}: {problem}")
    environment = config.get("environment", {})
    try:
        dockerfile, workdir = translate_dockerfile(
            (task_dir / "environment" / "Dockerfile").read_text(encoding="utf-8"), task_dir / "environment"
        )
        unbuildable = None
    except UnbuildableError as exc:
        dockerfile, workdir, unbuildable = None, BASE_WORKDIR, str(exc)
    workdir = environment.get("workdir") or workdir
    if dockerfile is not None and _is_system_dir(workdir):
        dockerfile, unbuildable = None, f"the working directory {workdir} is a system directory"
    return HarborTask(
        id=task_dir.name,
        path=task_dir,
        instruction=(task_dir / "instruction.md").read_text(encoding="utf-8"),
        config=config,
        dockerfile=dockerfile and _with_agentgym_layer(dockerfile, workdir),
        workdir=workdir,
        unbuildable=unbuildable,
    )


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


# ---------------------------------------------------------------------------------- images


class UnbuildableError(Exception):
    """Why a Dockerfile cannot be rebuilt on the base image (raised by :func:`translate_dockerfile`)."""


def translate_dockerfile(text: str, context: Path) -> tuple[str, str]:
    """The task's Dockerfile on agentgym's base image (``FROM`` left out: :func:`build_task_image` adds it),
    and the working directory it leaves; :class:`UnbuildableError` says why it cannot be rebuilt here.

    See the module docstring for what is kept, ignored and refused.
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


def _is_system_dir(path: str) -> bool:
    return path in _SYSTEM_DIRS or path.startswith(_SYSTEM_TREES)


def _with_agentgym_layer(dockerfile: str, workdir: str) -> str:
    """The task's instructions, then agentgym's layer (see the module docstring)."""
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


def _context_digest(context: Path) -> list[tuple[str, int, str]]:
    entries = []
    for item in sorted(context.rglob("*")):
        relative = item.relative_to(context).as_posix()
        if item.is_symlink():
            entries.append((relative, 0, "link:" + str(item.readlink())))
        elif item.is_file():
            entries.append((relative, item.stat().st_mode & 0o7777, hashlib.sha256(item.read_bytes()).hexdigest()))
    return entries


def image_tag(task: HarborTask, base_image_id: str) -> str:
    """``agentgym/harbor:<hash>`` of the base image, the generated Dockerfile and the build context's files."""
    recipe = {
        "version": IMAGE_RECIPE_VERSION,
        "base": base_image_id,
        "dockerfile": task.dockerfile,
        "context": _context_digest(task.path / "environment"),
    }
    return f"{IMAGE_REPOSITORY}:{hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]}"


def build_task_image(task: HarborTask, *, progress=None) -> str:
    """The task's image (built offline unless an image of the same content exists); :class:`HarborImageError` says why not."""
    if task.dockerfile is None:
        raise HarborImageError(f"Harbor task {task.id} cannot be built here: {task.unbuildable}")
    base = images.require_base_image()
    with engine.engine_errors("inspecting the base image"):
        base_id = engine.api().inspect_image(base)["Id"]
    tag = image_tag(task, base_id)
    if images.image_exists(tag):
        return tag
    context = task.path / "environment"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for child in sorted(context.iterdir()):
            tar.add(child, arcname=child.name)
        data = f"FROM {base_id}\n{task.dockerfile}".encode()
        info = tarfile.TarInfo(GENERATED_DOCKERFILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    output: list[str] = []
    step = ""
    with engine.engine_errors(f"building the image of Harbor task {task.id}"):
        for event in engine.api().build(
            fileobj=buffer,
            custom_context=True,
            dockerfile=GENERATED_DOCKERFILE,
            tag=tag,
            labels={labels.MANAGED: "true", labels.KIND: IMAGE_KIND, labels.CONTENT_HASH: tag.rpartition(":")[2]},
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
            decode=True,
            timeout=task.build_timeout,
        ):
            text = _ANSI.sub("", event.get("stream", ""))
            if text.startswith("Step "):
                step, output = text.split(" : ", 1)[-1].strip(), []
            else:
                output.append(text)
            if progress is not None and text.strip():
                progress(text.rstrip())
            if "error" in event:
                lines = [
                    line for line in "".join(output).splitlines() if line.strip() and not _BUILDER_NOISE.match(line)
                ]
                tail = "\n".join(lines[-12:])
                raise HarborImageError(
                    f"Harbor task {task.id} cannot be built here: `{step[:200]}` failed with the network disabled "
                    f"({event['error'].strip()})" + (f":\n{tail}" if tail else "")
                )
    if not images.image_exists(tag):
        raise HarborImageError(f"Harbor task {task.id}: the build reported success but made no image {tag}")
    return tag


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BUILDER_NOISE = re.compile(r"^( ---> |Removing intermediate container |Successfully )")


def image_path(tag: str) -> str:
    """The PATH an image's configuration sets."""
    with engine.engine_errors(f"inspecting {tag}"):
        variables = engine.api().inspect_image(tag)["Config"].get("Env") or []
    return next((v.partition("=")[2] for v in variables if v.startswith("PATH=")), SYSTEM_PATH)


# ---------------------------------------------------------------------------------- grading

# Keeps the PATH entries (of $1) that root owns and nobody else can write, up to /: the agent's
# ~/.local/bin (first on the base image's PATH) and whatever the agent could have made are dropped.
_TRUSTED_PATH = r"""
__ag_trusted() {
  local p=$1 s
  while :; do
    [ -L "$p" ] && return 1
    s=$(/usr/bin/stat -c '%u %a' -- "$p" 2>/dev/null) || return 1
    [ "${s%% *}" = 0 ] && (( (8#${s##* } & 8#022) == 0 )) || return 1
    [ "$p" = / ] && return 0
    p=${p%/*}; p=${p:-/}
  done
}
__ag_path=
IFS=: read -ra __ag_dirs <<< "$1"
for __ag_dir in "${__ag_dirs[@]}"; do
  case $__ag_dir in /*) __ag_trusted "$__ag_dir" && __ag_path=${__ag_path:+$__ag_path:}$__ag_dir ;; esac
done
echo "$__ag_path"
"""


def run_verifier(
    task: HarborTask, sandbox: DockerSandbox, *, image: str, max_timeout: float = DEFAULT_VERIFIER_TIMEOUT_S
) -> dict:
    """Run the task's tests in ``sandbox`` (a fresh root sandbox of the agent's committed work) and read the reward.

    Returns the grade: ``reward``, ``rewards`` (what the reward file held), ``source`` (the file),
    ``exit_code`` and ``timed_out`` of test.sh, ``log`` (the tail of its output), ``error``.
    """
    grade: dict[str, Any] = {"reward": 0.0, "rewards": {}, "source": None, "exit_code": None, "timed_out": False}
    grade["error"] = None
    prepared = sandbox.exec(
        f"rm -rf {TESTS_DIR} {VERIFIER_DIR} && mkdir -p {TESTS_DIR} {VERIFIER_DIR}", env={"PATH": SYSTEM_PATH}
    )
    if prepared.exit_code != 0:
        grade["error"] = f"could not prepare {TESTS_DIR} and {VERIFIER_DIR}: {prepared.output.strip()[-300:]}"
        return grade
    sandbox.put_tree(TESTS_DIR, tar_directory(task.path / "tests", sandbox.config))
    trusted = sandbox.exec(
        f"/bin/bash -c {shlex.quote(_TRUSTED_PATH)} agentgym {shlex.quote(image_path(image))}",
        env={"PATH": SYSTEM_PATH},
    )
    path = trusted.stdout.strip() or SYSTEM_PATH
    timeout = min(task.verifier_timeout, max_timeout)
    variables = {str(k): str(v) for k, v in task.config.get("verifier", {}).get("env", {}).items()}
    run = sandbox.exec(
        f"chmod +x {TESTS_DIR}/test.sh && ({TESTS_DIR}/test.sh) > {TEST_STDOUT} 2>&1",
        workdir=task.workdir,
        env={**variables, "PATH": path, "HOME": "/root"},
        timeout=timeout,
    )
    grade.update(exit_code=run.exit_code, timed_out=run.timed_out)
    grade["log"] = sandbox.exec(f"tail -c {LOG_TAIL_CHARS} {TEST_STDOUT}", env={"PATH": SYSTEM_PATH}).stdout
    if run.timed_out:
        grade["error"] = f"the tests did not finish within {timeout:g} s"
        return grade
    for source, parse in ((REWARD_JSON, _parse_reward_json), (REWARD_TEXT, _parse_reward_text)):
        try:
            data = sandbox.read_file(source, max_bytes=MAX_REWARD_BYTES)
        except FileNotFoundError:
            continue
        except OSError as exc:
            grade["error"] = f"cannot read {source}: {exc}"
            return grade
        grade["source"] = source
        try:
            grade["rewards"] = parse(data)
            grade["reward"] = _main_reward(grade["rewards"])
        except ValueError as exc:
            grade["error"] = f"{source}: {exc}"
        return grade
    grade["error"] = f"the tests wrote no reward ({REWARD_JSON} or {REWARD_TEXT}); test.sh exit code {run.exit_code}"
    return grade


def _parse_reward_text(data: bytes) -> dict[str, float]:
    try:
        value = float(data.decode("utf-8").strip())
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"not a number: {data[:80]!r}") from None
    return {"reward": value}


def _parse_reward_json(data: bytes) -> dict[str, float]:
    try:
        rewards = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"not JSON: {data[:80]!r}") from None
    if not isinstance(rewards, dict) or not rewards:
        raise ValueError("not a JSON object of rewards")
    for key, value in rewards.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"reward {key!r} is not a number: {value!r}")
    return {str(k): float(v) for k, v in rewards.items()}


def _main_reward(rewards: dict[str, float]) -> float:
    if "reward" in rewards:
        value = rewards["reward"]
    elif len(rewards) == 1:
        value = next(iter(rewards.values()))
    else:
        raise ValueError(f"several rewards and none named 'reward': {sorted(rewards)[:5]}")
    if not math.isfinite(value):
        raise ValueError(f"the reward is not finite: {value}")
    return value


# ---------------------------------------------------------------------------------- env


def reference_solution(task: HarborTask) -> list[str]:
    """The oracle as tool calls: write ``solution/`` to ``/solution``, run ``solve.sh`` from the working directory, submit."""
    solution = task.path / "solution"
    if not (solution / "solve.sh").is_file():
        raise HarborTaskError(f"Harbor task {task.id} has no solution/solve.sh")
    steps = []
    for item in sorted(p for p in solution.rglob("*") if p.is_file()):
        try:
            content = item.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise HarborTaskError(f"{item}: the oracle's files must be text (write_file writes text)") from None
        steps.append(
            call_text(
                "write_file", {"path": f"{SOLUTION_DIR}/{item.relative_to(solution).as_posix()}", "content": content}
            )
        )
    variables = {"DEBIAN_FRONTEND": "noninteractive", **task.config.get("solution", {}).get("env", {})}
    assignments = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in variables.items())
    command = f"cd {shlex.quote(task.workdir)} && {assignments} bash {SOLUTION_DIR}/solve.sh"
    steps.append(call_text("bash", {"command": command, "timeout": int(task.agent_timeout or 120)}))
    steps.append(call_text("submit"))
    return steps


class HarborEnv(CodeEnv):
    """Harbor task directories as code tasks: do what instruction.md asks in the task's container; graded by its hidden tests (see the module docstring).

    ``path=`` (or ``tasks_dir=``) is a task directory or a directory of them; ``tasks=`` selects task
    ids (directory names) or a pattern. ``max_verifier_timeout`` caps ``[verifier].timeout_sec``.
    """

    kind = "agentgym/Harbor"

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        tasks_dir: str | Path | None = None,
        tasks: str | Sequence[str] | None = None,
        max_verifier_timeout: float = DEFAULT_VERIFIER_TIMEOUT_S,
        **kwargs: Any,
    ):
        if (path is None) == (tasks_dir is None):
            raise ValueError(
                "HarborEnv needs path= (a Harbor task directory, or a directory of them); tasks_dir= is its alias"
            )
        super().__init__(**kwargs)
        loaded = load_harbor_tasks(path if path is not None else tasks_dir)
        self._tasks = {task_id: loaded[task_id] for task_id in select_tasks(loaded, tasks)}
        self.max_verifier_timeout = max_verifier_timeout
        self._images: dict[str, str] = {}

    def task_ids(self):
        return list(self._tasks)

    def task(self, task_id: str | None = None) -> HarborTask:
        return self._tasks[task_id or self.task_id]

    def tasks(self) -> list[Task]:
        """The tasks: goal the instruction, category ``[metadata].category``, reference the oracle (solution/solve.sh)."""
        return [
            Task(
                task.id,
                task.instruction.strip(),
                str(task.config.get("metadata", {}).get("category", "harbor")),
                task.metadata(),
                functools.partial(reference_solution, task)
                if (task.path / "solution" / "solve.sh").is_file()
                else None,
            )
            for task in self._tasks.values()
        ]

    def task_image(self, task_id: str) -> str:
        if task_id not in self._images:
            self._images[task_id] = build_task_image(self._tasks[task_id])
        return self._images[task_id]

    def task_sandbox_config(self, task_id: str) -> SandboxConfig:
        task = self._tasks[task_id]
        environment = task.config.get("environment", {})
        limits: dict[str, Any] = {"working_dir": task.workdir}
        if environment.get("cpus"):
            limits["cpus"] = float(environment["cpus"])
        if environment.get("memory_mb"):
            limits["mem_limit"] = f"{int(environment['memory_mb'])}m"
        if environment.get("storage_mb"):
            limits["disk_limit"] = int(environment["storage_mb"]) * 1024 * 1024
        return dataclasses.replace(self.sandbox_config or SandboxConfig(), **limits)

    def _setup(self, task_id: str) -> str:
        task = self.task(task_id)
        return (
            f"{task.instruction.strip()}\n\n"
            f"(You are in {task.workdir}. Use the tools to do the task, then call submit(): "
            "hidden tests then check the result.)"
        )

    def _grade(self, answer: str | None) -> Verdict:
        task = self.task()
        agent = self._live_sandbox()
        snapshot = agent.snapshot()
        # Root, as Harbor's verifier; the container's own commands see only system directories on PATH
        # (the image's puts the agent's ~/.local/bin first).
        config = dataclasses.replace(
            agent.config,
            user="0:0",
            state_file="/root/.agentgym_shell",
            environment={"PATH": SYSTEM_PATH, "HOME": "/root"},
        )
        try:
            verifier = DockerSandbox.create(image=snapshot.ref, config=config, warm=False)
            try:
                grade = run_verifier(
                    task, verifier, image=self.task_image(task.id), max_timeout=self.max_verifier_timeout
                )
            except SandboxError as exc:
                # Only the tests and the agent's work run in this container: a failure of it is the work's doing.
                grade = {"reward": 0.0, "rewards": {}, "source": None, "error": f"the verifier's sandbox failed: {exc}"}
            finally:
                verifier.close()
        finally:
            snapshot.release()
        if grade["error"]:
            grade["reward"] = 0.0
        reward = float(grade["reward"])
        success = grade["error"] is None and reward >= 1.0
        text = f"Submitted. The tests gave reward {reward:g}."
        if grade["error"]:
            text = f"Submitted. The tests gave no reward: {grade['error']}"
        return Verdict(reward, success, details=grade, message=text)
