"""agentgym/code.agentbench-os-v0: AgentBench's OS-interaction tasks (inspect-evals' dev and test splits) in a hardened sandbox where the agent is root, graded as inspect-evals' scorer grades them.

The tasks, their set-up, example solutions and check scripts are the files ``inspect-evals``
ships (``inspect_evals/agent_bench/data``: 26 dev and 119 test tasks), read without importing
the package (it needs inspect_ai). Task ids are ``dev/<n>`` and ``test/<n>``, reported per split.
inspect-evals builds one image per task from a Python image and snapshot.debian.org (neither
reachable offline); here every task starts from agentgym's offline Debian base image, and its
Dockerfile's steps run in the task's fresh sandbox at reset, in the same order: the ``bin/find``
copy, the ``init`` commands or script, then the programs the container runs from its start (the
``start`` program, an ``init_at_start`` script). inspect-evals' rewrite of ``/root`` and ``/usr``
to the agent's home ``/home/agent`` applies to every string of a task, as there.

**The agent** is root (uid 0) in the container, as in AgentBench and inspect-evals (tasks add
users, change owners, set SUID bits), with the sandbox's limits and confinement: no network,
no-new-privileges, every capability dropped but :data:`ROOT_CAPABILITIES`, the process, memory,
CPU and disk limits, capped timeouts. Its tools: ``bash``, ``python``, ``answer(answer)`` (ends the
episode with an answer: inspect-evals' ``submit``, AgentBench's ``answer``) and ``finish()`` (ends it
without one, for tasks that ask for a change: AgentBench's ``finish``).

**Grading** follows inspect-evals' ``agent_bench_os_scorer`` (its ``is_answer_correct``), with the
places where a root agent could forge the result moved out of its reach:

* ``match``: the answer must equal ``str(match)`` exactly (no stripping), as there;
* a comparison script (``[null, {"file": "check/integer-match.py"}]``): the benchmark's own script runs
  on the host as ``python <script> <answer> <expected>`` (exit status 0 passes), not in the agent's
  container, where a root agent owns the ``python`` it would run. ``expected`` is ``match`` where the
  task has one (dev); else (test) the output of the task's example solution, which inspect-evals runs in
  the agent's container at scoring time and this env runs at reset in a twin of the task's start (a
  fresh container from the committed set-up, its start programs running), so that no change the agent
  makes (a shim first in ``PATH``, an edited log) can move the ground truth;
* a check (``{"file": ...}``, ``{"code": ...}``, ``["<command>"]``): it must inspect the agent's system,
  so it runs on the agent's files, as root in ``/home/agent``, as there; but through a path the agent
  cannot bend: in a twin container started from a commit of the agent's, taken while its processes are
  frozen (the engine's pause), so that none of them runs beside the check (a root agent's processes under
  another uid would outlive a kill by a root without ``CAP_KILL``); the check fails when the agent changed
  the programs it runs on (anything under ``/usr`` but new commands in ``/usr/local/{bin,sbin}``, the
  top-level ``/bin``, ``/lib*`` links, the loader's and login's configuration in ``/etc``:
  :func:`tampered`), which the engine's own diff of the container shows at the same frozen moment (and,
  for changes made before a snapshot, the branch state carries); it runs in a clean environment
  (``env -i``: no variable, ``BASH_ENV`` or login file of the agent's; the system directories first in
  ``PATH``; Python without user site-packages or the working directory on its path); the script travels
  as an argument (never a file the agent's programs could edit while bash reads it); and only the
  runner's nonce-tagged status line (the nonce on its stdin) counts, not an exit status.

Where this differs from inspect-evals: expected answers of the test split come from the task's start
(above); checks and examples run in that clean non-login shell (inspect-evals: ``bash --login``), which
is the environment the agent's own tool sees; the image is Debian bookworm with the base image's
packages. Tasks whose set-up, example or answer cannot hold here are left out, each with its reason
(:func:`left_out_tasks`).

Forks: the code family's (a committed container). Processes are not part of a snapshot, so a fork or a
restore starts the task's start programs again, as a replay's reset does.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import secrets
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym.actions import ToolSpec
from agentgym.core import Outcome, Verdict, select_tasks
from agentgym.envs.code.env import BASH, PYTHON, CodeEnv
from agentgym.extras import MissingDependencyError, install_advice, requires
from agentgym.sandbox.base import SandboxError
from agentgym.snapshot import Snapshot
from agentgym.task import Task, call_text

with requires("code"):
    from agentgym.sandbox import engine
    from agentgym.sandbox.docker import DockerSandbox, DockerSnapshot, SandboxConfig

__all__ = ["AgentBenchOSEnv", "OSTask", "left_out_tasks", "load_tasks", "tampered"]

#: The agent's home and working directory, as inspect-evals' AGENT_HOME_DIR.
HOME = "/home/agent"
SPLITS = {"dev": "agent_bench_os.json", "test": "agent_bench_os_test.json"}
#: What a root agent needs back after the sandbox drops every capability: owners and modes of others'
#: files (useradd -m, chown, chmod, setgid directories) and switching users (su, runuser). Not KILL,
#: NET_*, SYS_* (ptrace, admin, time), MKNOD: nothing that reaches past the container.
ROOT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "AUDIT_WRITE")
#: The agent's PATH (a Debian root's); the trusted runner puts the system's own directories first.
AGENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CLEAN_ENV = (
    "PATH=/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/sbin:/usr/local/bin",
    f"HOME={HOME}",
    "LANG=C.UTF-8",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONNOUSERSITE=1",
    "PYTHONSAFEPATH=1",
)
#: inspect-evals runs checks with a 600 s limit; one check here is a few commands.
CHECK_TIMEOUT_S = 120.0
#: Set-up commands and example solutions.
SETUP_TIMEOUT_S = 120.0
#: The benchmark's comparison scripts on the host (integer, string or size match of two strings).
COMPARE_TIMEOUT_S = 30.0

SANDBOX_CONFIG = SandboxConfig(
    user="0:0",
    working_dir=HOME,
    cap_add=ROOT_CAPABILITIES,
    environment={"HOME": HOME, "PATH": AGENT_PATH},
    # Not in /home/agent, whose files tasks count.
    state_file="/run/.agentgym_shell",
)

ANSWER = ToolSpec(
    "answer",
    "Give your final answer (the answer only: a bare number for counts, the exact string asked for). "
    "This ends the episode.",
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
)
FINISH = ToolSpec(
    "finish",
    "Say that you made the change the task asks for; the system is then checked. This ends the episode.",
    {"type": "object", "properties": {}, "required": []},
)

#: Top-level names whose change changes which programs run (merged /usr: links into /usr).
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Files that decide what a program loads or a login shell runs.
_SYSTEM_FILES = (
    "/etc/ld.so.preload",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/environment",
    "/etc/security",
    "/etc/pam.d",
    "/etc/pam.conf",
    "/etc/profile",
    "/etc/profile.d",
    "/etc/bash.bashrc",
)
_NEW_COMMAND_DIRS = ("/usr/local/bin", "/usr/local/sbin")


def tampered(path: str, kind: int) -> bool:
    """Whether a change the engine reports (``docker diff``: kind 0 changed, 1 added, 2 deleted) is to the programs
    a check runs on; new commands in /usr/local/{bin,sbin} are the tasks' (``calc``), and a directory above one
    shows as changed."""
    if path == "/usr" or path.startswith("/usr/"):
        if path in ("/usr", "/usr/local", *_NEW_COMMAND_DIRS):
            return kind != 0
        return not any(path.startswith(folder + "/") for folder in _NEW_COMMAND_DIRS)
    if any(path == link or path.startswith(link + "/") for link in _SYSTEM_LINKS):
        return True
    return any(path == name or path.startswith(name + "/") for name in _SYSTEM_FILES)


# ---------------------------------------------------------------------------------------------- the data


def data_dir() -> Path:
    """inspect-evals' AgentBench data folder (found without importing the package, which needs inspect_ai)."""
    spec = importlib.util.find_spec("inspect_evals")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"No module named 'inspect_evals': {install_advice('agentbench')}", name="inspect_evals"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "agent_bench" / "data"


def agent_home_paths(value: Any) -> Any:
    """inspect-evals' ``recursively_set_agent_home``: ``/root`` and ``/usr`` become the agent's home in every string."""
    if isinstance(value, dict):
        return {key: agent_home_paths(item) for key, item in value.items()}
    if isinstance(value, str):
        return value.replace("/root", HOME).replace("/usr", HOME)
    return value


@dataclass(frozen=True)
class OSTask:
    """One AgentBench OS task as this env runs it (``record``: inspect-evals' record, paths rewritten)."""

    id: str
    record: dict

    @property
    def description(self) -> str:
        return self.record["description"]

    @property
    def evaluation(self) -> dict:
        return self.record["evaluation"]

    @property
    def kind(self) -> str:
        """``match``, ``compare`` (a comparison script on the answer) or ``check`` (a check of the system)."""
        check = self.evaluation.get("check")
        if check is None:
            return "match"
        if isinstance(check, list) and len(check) >= 2 and isinstance(check[1], dict):
            return "compare"
        return "check"

    @property
    def example(self) -> str | None:
        """The evaluation's example solution as a shell command (a script file's text for ``{"file": ...}``)."""
        example = self.evaluation.get("example")
        if isinstance(example, str):
            return example
        if isinstance(example, dict) and "code" in example:
            return example["code"]
        if isinstance(example, dict) and "file" in example:
            return (data_dir() / "scripts" / example["file"]).read_text()
        return None

    @property
    def _init(self) -> Any:
        create = self.record.get("create")
        return create.get("init") if isinstance(create, dict) else None

    @property
    def init_at_start(self) -> bool:
        create = self.record.get("create")
        return isinstance(create, dict) and bool(create.get("init_at_start"))

    def setup_steps(self, random_string: str) -> list[str]:
        """The Dockerfile's build steps, as commands run as root in /home/agent (inspect-evals' template order)."""
        steps = []
        if "bin/find" in str(self.record):
            steps += [f"mkdir -p {HOME}/bin", f"cp /usr/bin/find {HOME}/bin/find"]
        init = self._init
        for step in init if isinstance(init, list) else [init]:
            if isinstance(step, dict) and "code" in step:
                code = step["code"].replace("<random-string>", random_string)
                steps += [line for line in code.split("\n") if line.strip()]
            elif isinstance(step, str):
                if step.strip().startswith("#!/bin/bash") or "\n" in step.strip():
                    steps.append(_write_command("/tmp/init_script.sh", step + "\n"))
                    if not self.init_at_start:
                        steps.append("bash /tmp/init_script.sh && rm /tmp/init_script.sh")
                else:
                    steps.append(step.strip())
        start = self.start_program
        if start is not None:
            steps.append(_write_command("/script.py", start))
        return steps

    @property
    def start_program(self) -> str | None:
        """The ``start`` program's Python source (inspect-evals runs it as the container's entry point)."""
        if "start" not in self.record:
            return None
        return self.record["start"].split("python3 -c '")[1].split("'")[0]

    def runtime_steps(self) -> list[str]:
        """What the container runs from its start, before the agent's first command: an ``init_at_start``
        script, then the ``start`` program (in the background, as the entry point it is there)."""
        steps = []
        if self.init_at_start:
            steps.append("bash /tmp/init_script.sh")
        if self.start_program is not None:
            steps.append("setsid python3 /script.py >/dev/null 2>&1 &")
        return steps

    def left_out(self) -> str | None:
        """Why this env does not run the task, or None."""
        init = self._init
        steps = init if isinstance(init, list) else [init]
        files = [step["file"] for step in steps if isinstance(step, dict) and "file" in step]
        if files:
            return (
                f"its set-up runs AgentBench's {files[0]}, which inspect-evals' image clones from GitHub "
                "(unreachable offline; the package does not ship it)"
            )
        if any(isinstance(step, dict) and "apt install" in step.get("code", "") for step in steps):
            return "its set-up installs a package with apt, a download (the sandbox has no network)"
        if any(isinstance(step, dict) and "user" in step for step in steps):
            return "the agent acts as a user its set-up creates; a sandbox's user is fixed when its container starts"
        return _LEFT_OUT_HERE.get(self.id)

    def reference_solution(self) -> list:
        """Run the example solution and answer its output (``finish()`` for a check); or answer ``match``."""
        example = self.example
        if example is None:
            return [call_text("answer", {"answer": str(self.evaluation["match"])})]
        if self.kind == "check":
            return [call_text("bash", {"command": example}), call_text("finish")]
        # The answer is the example's stdout, as inspect-evals takes it (the tool shows stderr too: tr's warnings).
        return [call_text("bash", {"command": f"{{ {example}\n}} 2>/dev/null"}), _answer_output]


def _answer_output(observation: str) -> str:
    """The answer step of a reference solution: the example's output, as inspect-evals strips it."""
    return call_text("answer", {"answer": observation.strip()})


def _write_command(path: str, text: str) -> str:
    """A command that writes ``text`` to ``path`` (a here-document that cannot end early)."""
    marker = "AGENTGYM_EOF_" + secrets.token_hex(8)
    return f"cat > {path} <<'{marker}'\n{text}\n{marker}"


#: Tasks left out for what they need of inspect-evals' own image (found by the whole-set sweep,
#: tests/envs/code/test_agentbench_os.py::test_sweep): id -> why.
_IMAGE_FACT = "its expected answer ({}) is a fact of inspect-evals' image (a Python image with AgentBench's clone) or machine; here {}"
_LEFT_OUT_HERE: dict[str, str] = {
    "dev/8": _IMAGE_FACT.format("35M used by /home", "/home holds 24K"),
    "dev/9": _IMAGE_FACT.format("14 empty files in /home", "there are 2"),
    "dev/10": _IMAGE_FACT.format("15 directories in /", "there are 16"),
    "dev/11": _IMAGE_FACT.format("126 directories in /home", "there are 3"),
    "dev/13": _IMAGE_FACT.format("4 CPU cores", "nproc gives the host's count"),
    "dev/14": _IMAGE_FACT.format("43 groups", "there are 39"),
    "dev/15": _IMAGE_FACT.format("8 groups above gid 50", "there are 4"),
    "dev/17": _IMAGE_FACT.format("21 users", "there are 19"),
    "dev/18": _IMAGE_FACT.format("23 users after the set-up", "there are 21"),
    "dev/23": _IMAGE_FACT.format("a process limit of 30000", "ulimit -u gives the host's"),
    "test/37": "it counts the container's processes, which here include the sandbox's own (its keep-alive's sleep, "
    "started anew every few seconds, and the command server), so no count holds from the start to the answer",
    "test/112": "it counts the container's processes, which here include the sandbox's own (its keep-alive's sleep, "
    "started anew every few seconds, and the command server), so no count holds from the start to the answer",
}


@functools.cache
def _all_tasks() -> dict[str, OSTask]:
    tasks = {}
    for split, filename in SPLITS.items():
        for record in json.loads((data_dir() / filename).read_text()):
            task = OSTask(f"{split}/{record['id']}", agent_home_paths(record))
            tasks[task.id] = task
    return tasks


def load_tasks() -> dict[str, OSTask]:
    """Every task this env runs, by id (``dev/3``, ``test/17``); :func:`left_out_tasks` has the others."""
    return {task_id: task for task_id, task in _all_tasks().items() if task.left_out() is None}


def left_out_tasks() -> dict[str, str]:
    """The tasks this env leaves out: id -> why."""
    return {task_id: reason for task_id, task in _all_tasks().items() if (reason := task.left_out()) is not None}


# ---------------------------------------------------------------------------------------------- running


def clean_command(command: str, *, stdin: bool = False) -> str:
    """``command`` as root's trusted runner runs it: a clean environment, no login files, in /home/agent
    (reading the exec's stdin only where ``stdin``)."""
    return (
        "exec /usr/bin/env -i "
        + " ".join(shlex.quote(item) for item in CLEAN_ENV)
        + " /usr/bin/bash -c "
        # A newline, not &&: a set-up step may be a bare comment (test 92, 111).
        + shlex.quote(f"cd {HOME} || exit 1\n{command}")
        + ("" if stdin else " </dev/null")
    )


def run_setup(sandbox: DockerSandbox, steps: Sequence[str]) -> None:
    """Run set-up steps in order; a failing one is a broken task (an env error, never the agent's)."""
    for step in steps:
        result = sandbox.exec(clean_command(step), timeout=SETUP_TIMEOUT_S)
        if result.exit_code != 0:
            raise RuntimeError(f"set-up step {step[:80]!r} failed ({result.exit_code}): {result.output[-300:]}")


@contextlib.contextmanager
def _twin(snapshot: DockerSnapshot, task: OSTask, config: SandboxConfig) -> Iterator[DockerSandbox]:
    """A new sandbox at ``snapshot`` with the task's start programs running (as a fork's), closed after the block."""
    twin = DockerSandbox.from_snapshot(snapshot, config=config)
    try:
        run_setup(twin, task.runtime_steps())
        yield twin
    finally:
        twin.close()


def compare(script: str, answer: str, expected: str) -> bool:
    """The benchmark's comparison script on two strings, on the host (inspect-evals: ``python script a b``, exit 0)."""
    path = data_dir() / "scripts" / script
    try:
        result = subprocess.run(
            [sys.executable, "-I", str(path), answer, expected],
            capture_output=True,
            timeout=COMPARE_TIMEOUT_S,
            check=False,
        )
    except (ValueError, subprocess.TimeoutExpired):  # a NUL byte in the answer; a pathological one
        return False
    return result.returncode == 0


class AgentBenchOSEnv(CodeEnv):
    """Answer questions about and make changes to a Linux system as root; graded as AgentBench OS (see the module)."""

    kind = "agentgym/AgentBenchOS"
    branch_attributes = ("_os_task", "_expected", "_tampered", "_random_string", "_commands")

    def __init__(
        self,
        *,
        tasks: str | Sequence[str] | None = None,
        exec_timeout: float = 60.0,
        max_exec_timeout: float = 180.0,
        **kwargs: Any,
    ):
        kwargs.setdefault("sandbox_config", SANDBOX_CONFIG)
        super().__init__(exec_timeout=exec_timeout, max_exec_timeout=max_exec_timeout, **kwargs)
        self._task_ids = select_tasks(load_tasks(), tasks)
        self._expected: str | None = None  # the example's answer, taken at reset (test split)
        self._tampered: tuple[str, ...] = ()  # changes to the system's programs in this episode's earlier snapshots
        self._random_string = ""
        self._commands: frozenset[str] = frozenset()  # the base image's commands in /usr/bin and /usr/sbin
        self._os_task = ""  # the episode's task, for restores (they load the branch state before the episode's)
        self._handlers.update(answer=self._answer, finish=self._finish_tool)

    def task_ids(self):
        return self._task_ids

    def tasks(self) -> list[Task]:
        """The selected tasks (category: the split), each solved by its example solution or its ``match``."""
        tasks = load_tasks()
        return [
            Task(
                task_id,
                tasks[task_id].description,
                task_id.split("/")[0],
                {"kind": tasks[task_id].kind, "labels": list(tasks[task_id].record.get("labels", []))},
                tasks[task_id].reference_solution,
            )
            for task_id in self._task_ids
        ]

    def tools(self) -> list[ToolSpec]:
        return [self._with_limits(BASH), self._with_limits(PYTHON), ANSWER, FINISH]

    # ------------------------------------------------------------------ hooks
    def _setup(self, task_id: str) -> str:
        task = load_tasks()[task_id]
        sandbox = self._live_sandbox()
        self._os_task, self._tampered = task_id, ()
        # inspect-evals draws a uuid4 per image build; from the env's RNG, a seeded reset draws the same one.
        self._random_string = str(uuid.UUID(bytes=self.np_random.bytes(16), version=4))
        run_setup(sandbox, task.setup_steps(self._random_string))
        if task.kind == "check" and not self._commands:
            # The image's commands, listed before the agent's first command (so by the image's own ls).
            listing = sandbox.exec(clean_command("ls /usr/bin /usr/sbin"), timeout=30).stdout.splitlines()
            self._commands = frozenset(name for name in listing if name and not name.endswith(":"))
        self._expected = None
        if task.kind == "compare" and "match" not in task.evaluation:
            self._expected = self._example_answer(task, sandbox)
        run_setup(sandbox, task.runtime_steps())
        return (
            f"{task.description}\n\n"
            f"You are root on a Linux (Debian) machine; your home and working directory is {HOME}. Use the bash "
            "tool to act, one command per call. When the task asks a question, call answer() with the answer "
            "only: a bare integer for counts and numbers, or the exact string asked for, with no explanation, "
            "units or formatting. When it asks you to change the system, make the change and call finish()."
        )

    def _example_answer(self, task: OSTask, sandbox: DockerSandbox) -> str | None:
        """The example solution's output at the task's start, in a twin of the set-up sandbox (None: it failed)."""
        example = task.example
        if example is None:
            return None
        start = sandbox.snapshot()
        try:
            with _twin(start, task, sandbox.config) as twin:
                result = twin.exec(clean_command(example), timeout=SETUP_TIMEOUT_S)
        finally:
            start.release()
        return result.stdout.strip() if result.exit_code == 0 and not result.timed_out else None

    def _load_branch_state(self, state: Any) -> None:
        super()._load_branch_state(state)
        # A snapshot holds files, not processes: the task's start programs start again, as at reset.
        if self.sandbox is not None and self._os_task:
            run_setup(self.sandbox, load_tasks()[self._os_task].runtime_steps())

    def snapshot(self) -> Snapshot:
        """The env's snapshot, its commit and the engine's diff taken while the container is frozen: a fork's own
        diff starts at the commit, so the changes to the system's programs so far travel in the branch state, and
        no process of the agent's can make a change between the two that one sees and the other does not."""
        if self.sandbox is None:
            return super().snapshot()
        with self.sandbox.frozen():
            self._tampered = tuple(sorted({*self._tampered, *self._system_changes()}))
            return super().snapshot()

    def _answer(self, args: dict) -> Outcome:
        return self._finish(str(args["answer"]))

    def _finish_tool(self, args: dict) -> Outcome:
        return self._finish("")

    def _grade(self, answer: str | None) -> Verdict:
        task = load_tasks()[self.task_id]
        answer = answer or ""
        if task.kind == "match":
            passed, detail = answer == str(task.evaluation["match"]), "the answer must equal the expected string"
        elif task.kind == "compare":
            passed, detail = self._grade_compare(task, answer)
        else:
            passed, detail = self._grade_check(task)
        said = "correct" if passed else f"not correct ({detail})"
        return Verdict(
            float(passed),
            passed,
            details={"passed": passed, "kind": task.kind, "detail": detail},
            message=f"Done. The task was {said}.",
        )

    # ------------------------------------------------------------------ grading
    def _grade_compare(self, task: OSTask, answer: str) -> tuple[bool, str]:
        script = task.evaluation["check"][1]["file"]
        expected = str(task.evaluation["match"]) if "match" in task.evaluation else self._expected
        if expected is None:
            return False, "the example solution failed at the task's start, so no answer can be checked"
        passed = compare(script, answer, expected)
        return passed, f"{script} on the answer and the expected one"

    def _grade_check(self, task: OSTask) -> tuple[bool, str]:
        check = task.evaluation["check"]
        if isinstance(check, dict) and "file" in check:
            script = (data_dir() / "scripts" / check["file"]).read_text()
        elif isinstance(check, dict):
            script = check["code"]
        else:
            script = check[0]
        sandbox = self._live_sandbox()
        try:
            # The system as the agent left it, in one frozen moment: the engine's diff, and a commit that a twin
            # container starts from. The check runs in the twin, where no process of the agent's runs (a root
            # agent's processes under another uid would survive a kill by root without CAP_KILL).
            with sandbox.frozen():
                changed = sorted({*self._tampered, *self._system_changes()})
                if changed:
                    return (
                        False,
                        f"the system's programs were changed ({', '.join(changed[:3])}), so no check can trust them",
                    )
                left = sandbox.snapshot()
            try:
                with _twin(left, task, sandbox.config) as twin:
                    shadows = self._home_shadows(twin, script)
                    if shadows:
                        return False, f"{HOME} holds files named as system commands ({', '.join(shadows[:3])}), " + (
                            "and the check runs with it first in PATH"
                        )
                    nonce = secrets.token_hex(16)
                    # The status line carries the nonce, which only this runner holds (its stdin); the check's own
                    # programs (the agent's, for some tasks) run with no stdin and cannot print it.
                    runner = (
                        f"read -r __n; /usr/bin/bash -c {shlex.quote(script)} check </dev/null; "
                        + 'printf \'\\n%s:%s\\n\' "$__n" "$?"'
                    )
                    result = twin.exec(clean_command(runner, stdin=True), stdin=nonce + "\n", timeout=CHECK_TIMEOUT_S)
            finally:
                left.release()
        except SandboxError as exc:  # the agent's root processes filled or broke its sandbox
            return False, f"the sandbox failed during the check ({exc})"[:300]
        lines = result.stdout.splitlines()
        passed = result.exit_code == 0 and not result.timed_out and bool(lines) and lines[-1] == f"{nonce}:0"
        return passed, "the task's check of the system"

    def _home_shadows(self, sandbox: DockerSandbox, script: str) -> list[str]:
        """For a check that puts the home directory first in PATH (inspect-evals' calculator check, so that ``~/calc``
        counts), the files there named as the start image's commands (a ``python3`` that prints "True"). Run after
        the system's programs were found unchanged, so ``ls`` is the system's."""
        if 'PATH="$HOME:' not in script:
            return []
        names = sandbox.exec(clean_command("ls -A"), timeout=30).stdout.splitlines()
        return sorted(set(names) & self._commands)

    def _system_changes(self) -> list[str]:
        """The changes the engine sees in this episode's container that touch the programs a check runs on."""
        if self.sandbox is None:
            return []
        changes = engine.api().diff(self.sandbox.id) or []
        return [change["Path"] for change in changes if tampered(change["Path"], change["Kind"])]
