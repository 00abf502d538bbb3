"""CodeEnv: the base of the code environments — an agent with shell, Python and file tools in a hardened Docker sandbox.

A code env owns one :class:`~agentgym.sandbox.docker.DockerSandbox` per episode. ``reset``
takes a pre-started container from the warm pool and lays the task's workspace into it;
``snapshot`` commits the container (the filesystem plus the tracked shell cwd/env) and
``fork`` starts an independent container from that commit; ``export_snapshot`` carries the
commit's own layers as bytes (:class:`~agentgym.sandbox.portable.PortableSnapshot`) and
``import_snapshot`` loads them into this engine, which must have the image the task started
from. Grading never trusts the agent's container: subclasses re-run the hidden tests in a fresh sandbox.

Tools (subclasses add to or trim :meth:`tools`):

* ``bash(command, timeout?)`` — run a shell command; ``cd``/``export`` persist between calls;
* ``python(code, timeout?)`` — run a Python program;
* ``read_file(path, start_line?, end_line?)``, ``write_file(path, content)``,
  ``str_replace(path, old, new)`` — file editing, with errors the model can act on;
* ``submit()`` — stop every process the agent left running, then grade (the episode ends).

A subclass implements the author's hooks (see :class:`agentgym.core.AgentEnv`):
``_setup(task_id)`` lays the task's files into :attr:`sandbox` (fresh from the warm pool) and
returns the task description; ``_grade(answer)`` (``answer`` is ``""``: ``submit`` takes none)
re-runs the hidden tests in a fresh sandbox and returns a :class:`~agentgym.core.Verdict` (its
``message`` is the submit call's result, its ``details`` the step's ``info["grade"]``);
``branch_attributes`` (or ``_branch_state()`` / ``_load_branch_state()``) name env fields that
are not on the sandbox's disk.

The tools act with the agent's own permissions: the file tools run as the sandbox user, like
``bash``, so they cannot write where a shell could not (``/etc``, the sandbox's own programs).
An agent-chosen ``timeout`` is capped at ``max_exec_timeout`` (default 120 s; the schema and the
observation say so). read_file pages a file of any size in the container and shows at most
:data:`MAX_READ_BYTES` per call; str_replace edits files up to :data:`MAX_EDIT_BYTES`.

Fenced ```` ```python ```` and ```` ```bash ```` blocks in a reply run as ``python``/``bash`` calls.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, final

from agentgym.actions import ToolCall, ToolSpec
from agentgym.core import AgentEnv, Outcome, Verdict
from agentgym.extras import requires
from agentgym.sandbox.base import ExecResult, FileTooLargeError
from agentgym.snapshot import SnapshotError

with requires("code"):  # the Docker SDK
    from agentgym.sandbox.docker import DockerSandbox, SandboxConfig
    from agentgym.sandbox.portable import PortableSnapshot


def _tool(name: str, description: str, required: list[str], **properties: dict) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": properties, "required": required})


#: How much of a file read_file shows at most, so one call cannot flood the context.
MAX_READ_BYTES = 20_000
#: The largest file str_replace edits (it brings the whole file to the host and back).
MAX_EDIT_BYTES = 1024 * 1024

_TIMEOUT = {
    "type": "integer",
    "description": "seconds before the command is killed (default: the env's exec timeout; "
    "capped at its max_exec_timeout)",
}

BASH = _tool(
    "bash",
    "Run a bash command in the sandbox. The working directory and exported variables persist.",
    ["command"],
    command={"type": "string"},
    timeout=_TIMEOUT,
)
PYTHON = _tool(
    "python",
    "Run a Python 3 program in the sandbox and show its output.",
    ["code"],
    code={"type": "string"},
    timeout=_TIMEOUT,
)
READ_FILE = _tool(
    "read_file",
    "Show a text file with line numbers (optionally a 1-based inclusive line range); "
    f"at most {MAX_READ_BYTES} bytes per call, so page through long files with the range.",
    ["path"],
    path={"type": "string"},
    start_line={"type": "integer"},
    end_line={"type": "integer"},
)
WRITE_FILE = _tool(
    "write_file",
    "Create or overwrite a file with the given content.",
    ["path", "content"],
    path={"type": "string"},
    content={"type": "string"},
)
STR_REPLACE = _tool(
    "str_replace",
    "Replace the exactly-once occurrence of `old` in a file with `new`.",
    ["path", "old", "new"],
    path={"type": "string"},
    old={"type": "string"},
    new={"type": "string"},
)
SUBMIT = _tool("submit", "Finish the task and have your work graded. This ends the episode.", [])


@dataclass
class CodePayload:
    """A code env's part of a snapshot: the committed sandbox and the env fields that are not on disk."""

    sandbox_snapshot: Any
    config: SandboxConfig
    branch_state: Any


class CodeEnv(AgentEnv):
    """Base class of sandboxed code environments (see the module docstring)."""

    code_block_tools = {
        "python": ("python", "code"),
        "py": ("python", "code"),
        "bash": ("bash", "command"),
        "sh": ("bash", "command"),
        "shell": ("bash", "command"),
    }

    def __init__(
        self,
        *,
        image: str | None = None,
        exec_timeout: float = 30.0,
        max_exec_timeout: float = 120.0,
        max_turns: int = 30,
        sandbox_config: SandboxConfig | None = None,
        warm_pool: bool = True,
        render_mode: str | None = None,
    ):
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        if not 0 < exec_timeout <= max_exec_timeout:
            raise ValueError(f"need 0 < exec_timeout ({exec_timeout}) <= max_exec_timeout ({max_exec_timeout})")
        self.image = image
        self.exec_timeout = exec_timeout
        self.max_exec_timeout = max_exec_timeout
        self.sandbox_config = sandbox_config
        self.warm_pool = warm_pool
        self.sandbox: DockerSandbox | None = None
        self._handlers: dict[str, Callable[[dict], Outcome]] = {
            "bash": self._bash,
            "python": self._python,
            "read_file": self._read_file,
            "write_file": self._write_file,
            "str_replace": self._str_replace,
            "submit": self._submit,
        }

    # ------------------------------------------------------------------ the author's hooks
    @abc.abstractmethod
    def _setup(self, task_id: str) -> str:
        """Lay the task's files into :attr:`sandbox` (a fresh one) and return the task description."""

    @abc.abstractmethod
    def _grade(self, answer: str | None) -> Verdict:
        """Grade the current work in a fresh sandbox, never the agent's (see the module docstring)."""

    def task_image(self, task_id: str) -> str | None:
        """The image a task's sandbox starts from (default: the env's image, else the base image)."""
        return self.image

    def task_sandbox_config(self, task_id: str) -> SandboxConfig | None:
        """How a task's sandbox is confined (default: the env's config, else the hardened defaults)."""
        return self.sandbox_config

    # ------------------------------------------------------------------ AgentEnv and backend hooks
    def tools(self) -> list[ToolSpec]:
        return [self._with_limits(BASH), self._with_limits(PYTHON), READ_FILE, WRITE_FILE, STR_REPLACE, SUBMIT]

    def _with_limits(self, tool: ToolSpec, default: float | None = None) -> ToolSpec:
        """``tool`` with its timeout argument described by this env's numbers (``default``: exec_timeout)."""
        timeout = {
            "type": "integer",
            "description": f"seconds before the command is killed (default "
            f"{default or self.exec_timeout:g}, at most {self.max_exec_timeout:g})",
        }
        parameters = {**tool.parameters, "properties": {**tool.properties, "timeout": timeout}}
        return ToolSpec(tool.name, tool.description, parameters)

    @final
    def _backend_start(self, task_id: str) -> str:
        self._close_sandbox(wait=False)  # the old container goes away in the background
        self.sandbox = DockerSandbox.create(
            image=self.task_image(task_id), config=self.task_sandbox_config(task_id), warm=self.warm_pool
        )
        return self._setup(task_id)

    def _call_tool(self, call: ToolCall) -> Outcome:
        # Every agent-chosen timeout, the subclasses' tools' included, is capped here.
        arguments, note = self._capped(call.arguments)
        outcome = self._handlers[call.name](arguments)
        outcome.text += note
        return outcome

    @final
    def _backend_capture(self) -> tuple[CodePayload, Callable[[], None]]:
        sandbox = self._live_sandbox()
        sandbox_snapshot = sandbox.snapshot()
        return CodePayload(sandbox_snapshot, sandbox.config, self._branch_state()), sandbox_snapshot.release

    @final
    def _backend_load(self, payload: CodePayload) -> None:
        if self.sandbox is None:
            self.sandbox = DockerSandbox.from_snapshot(payload.sandbox_snapshot, config=payload.config)
        else:
            self.sandbox.restore(payload.sandbox_snapshot)
        self._load_branch_state(payload.branch_state)

    @final
    def _backend_export(self, payload: CodePayload) -> CodePayload:
        return dataclasses.replace(payload, sandbox_snapshot=PortableSnapshot.of(payload.sandbox_snapshot))

    @final
    def _backend_import(self, exported: Any) -> tuple[CodePayload, Callable[[], None]]:
        if not isinstance(exported, CodePayload) or not isinstance(exported.sandbox_snapshot, PortableSnapshot):
            raise SnapshotError(f"snapshot data of a {self.kind} holds no exported sandbox")
        sandbox_snapshot = exported.sandbox_snapshot.load()
        return dataclasses.replace(exported, sandbox_snapshot=sandbox_snapshot), sandbox_snapshot.release

    @final
    def _backend_metadata(self, payload: CodePayload) -> dict:
        return {"image": payload.sandbox_snapshot.ref}

    @final
    def _backend_close(self) -> None:
        self._close_sandbox()

    # ------------------------------------------------------------------ tools
    def _bash(self, args: dict) -> Outcome:
        return self._exec_outcome(self._live_sandbox().exec(args["command"], timeout=self._timeout(args)))

    def _python(self, args: dict) -> Outcome:
        sandbox = self._live_sandbox()
        return self._exec_outcome(sandbox.exec("python3 -", stdin=args["code"], timeout=self._timeout(args)))

    def _read_file(self, args: dict) -> Outcome:
        path = self._resolve(args["path"])
        start, end = max(1, args.get("start_line") or 1), args.get("end_line")
        if end is not None and end < start:
            return _error(f"empty line range {start}..{end}")
        try:
            data, total, cut = self._live_sandbox().read_lines(path, start, end, max_bytes=MAX_READ_BYTES)
        except OSError as exc:
            return _error(_file_error(path, exc))
        if total == 0:
            return Outcome("(empty file)")
        if start > total:
            return _error(f"empty line range {start}..{end or total}; the file has {total} lines")
        lines = [line.removesuffix("\r") for line in data.decode("utf-8", errors="replace").split("\n")]
        if not cut and data.endswith(b"\n"):
            lines.pop()
        shown = "\n".join(f"{start + i:6}\t{line}" for i, line in enumerate(lines))
        if cut:
            last = start + len(lines) - 1
            shown += (
                f"\n[... truncated after {MAX_READ_BYTES} bytes, within line {last} of {total}; "
                "use start_line/end_line to read the rest ...]"
            )
        return Outcome(shown)

    def _write_file(self, args: dict) -> Outcome:
        path = self._resolve(args["path"])
        try:
            self._live_sandbox().write_file(path, args["content"])
        except OSError as exc:
            return _error(f"cannot write {_file_error(path, exc)}")
        return Outcome(f"Wrote {len(args['content'])} characters to {path}.")

    def _str_replace(self, args: dict) -> Outcome:
        path = self._resolve(args["path"])
        sandbox = self._live_sandbox()
        try:
            data = sandbox.read_file(path, max_bytes=MAX_EDIT_BYTES)
        except FileTooLargeError as exc:
            return _error(
                f"{path} is {exc.size} bytes; str_replace edits files of up to {MAX_EDIT_BYTES} bytes "
                "(use bash, e.g. sed -i or python, for larger ones)"
            )
        except OSError as exc:
            return _error(_file_error(path, exc))
        # On bytes, so that whatever is not valid UTF-8 elsewhere in the file stays as it was.
        old, new = args["old"].encode(), args["new"].encode()
        count = data.count(old) if old else 0
        if count != 1:
            return _error(
                f"`old` must occur exactly once in {path}; it occurs {count} times"
                + (" (it is empty)" if not old else "")
            )
        try:
            sandbox.write_file(path, data.replace(old, new, 1))
        except OSError as exc:
            return _error(f"cannot write {_file_error(path, exc)}")
        return Outcome(f"Replaced 1 occurrence in {path}.")

    def _submit(self, args: dict) -> Outcome:
        # Nothing the agent started may change the work while (or after) it is graded.
        self._live_sandbox().stop_processes()
        return self._finish("")

    # ------------------------------------------------------------------ helpers
    def _live_sandbox(self) -> DockerSandbox:
        if self.sandbox is None:
            raise RuntimeError("no sandbox: call reset() first")
        return self.sandbox

    def _close_sandbox(self, wait: bool = True) -> None:
        if self.sandbox is not None:
            self.sandbox.close(wait=wait)
            self.sandbox = None

    def _capped(self, arguments: dict) -> tuple[dict, str]:
        """The call's arguments with an agent-chosen timeout cut to ``max_exec_timeout``, and the note saying so."""
        requested = arguments.get("timeout")
        if not isinstance(requested, (int, float)) or requested <= self.max_exec_timeout:
            return arguments, ""
        note = (
            f"\n[timeout capped at {self.max_exec_timeout:g} s, this environment's maximum ({requested:g} s was asked)]"
        )
        return {**arguments, "timeout": self.max_exec_timeout}, note

    def _timeout(self, args: dict) -> float:
        requested = args.get("timeout")
        return float(requested) if requested and requested > 0 else self.exec_timeout

    def _resolve(self, path: str) -> str:
        if path.startswith("/"):
            return path
        return f"{self._live_sandbox().cwd.rstrip('/')}/{path}"

    @staticmethod
    def _exec_outcome(result: ExecResult) -> Outcome:
        text = result.output.rstrip("\n") or "(no output)"
        notes = []
        if result.timed_out:
            notes.append(f"[the command was killed after its timeout; exit code {result.exit_code}]")
        elif result.exit_code != 0:
            notes.append(f"[exit code {result.exit_code}]")
        return Outcome("\n".join([text, *notes]), info={"exit_code": result.exit_code})


def _error(message: str) -> Outcome:
    return Outcome(f"Error: {message}", error=message)


def _file_error(path: str, exc: OSError) -> str:
    """What a file tool tells the model about a failed access, in the words of the shell it also has."""
    if isinstance(exc, FileTooLargeError):
        return f"{path} is too large to show whole (over {exc.limit} bytes); read it in parts with start_line/end_line"
    reasons = {
        FileNotFoundError: "no such file",
        IsADirectoryError: "is a directory",
        NotADirectoryError: "a component of the path is not a directory",
        PermissionError: "permission denied (the tools run as the sandbox user, like bash)",
    }
    reason = next((text for kind, text in reasons.items() if isinstance(exc, kind)), None)
    return f"{path}: {reason or exc.strerror or exc}"
