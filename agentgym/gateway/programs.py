"""Agent programs as episodes: launch a command or a Python callable per task against the gateway, grade with the env.

An episode (:func:`run_episode`): the env is reset to the task; a gateway session is opened with
the env as its tools (MCP) and grader; the program runs with a :class:`ProgramContext` (for a
command, the same in environment variables: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``AGENTGYM_MCP_URL``, ``AGENTGYM_MODEL``, ``AGENTGYM_TASK_ID``, ``AGENTGYM_GOAL``); the session is
closed (its key refused from then on) and returned as a :class:`~agentgym.rollout.trajectory.Trajectory`.

**How it ends and who grades.** The episode ends when the program submits (a tool call that ends
the env's episode grades it there) or exits. A program that exits without submitting has its
answer — a callable's return value, a command's last line of output — submitted for it: through
the env's ``submit`` tool (the answer as its first argument, or no argument when it takes
none: the grader then judges the state the program left, e.g. a repository's tests), or as the
final reply of an env that takes text answers. Without an answer nothing is graded: reward 0.
``metadata["graded_by"]`` says which: ``"program"``, ``"gateway"`` or ``None``.

**Failures of the program are its own.** A program that raises, exits non-zero, is killed by a signal or runs past
``timeout`` seconds (a command's whole process group is killed; a callable is cancelled, or for a
sync one, its session closed so that its next call fails) is recorded in
``metadata["program_error"]`` and scores reward 0 unless it had already submitted; the episode is
a sample like any other (``error`` stays None; the eval harness's rows give it the error kind
``program_error``, counted beside env errors). An env that breaks is an env failure as in the
runner (the exception propagates, and the runner retries the task on another env), including an
env that breaks inside a tool call of the program (its ``info["env_error"]``: the episode raises
once the program is done); so is a
backend that fails a model call of the program (an upstream that is down or returns no token ids)
when the program then fails: the episode raises :class:`~agentgym.rollout.policy.PolicyError`, a
policy failure, not the program's (a program that got past the failed call is a sample as usual).

:class:`GatewayJob` is the runner's job for all of this (``Runner(agent, envs, job=GatewayJob(program))``):
the backend is the runner's policy (a trainer's learner, whose weight pushes the gateway therefore
serves at once), and one gateway per event loop runs while episodes are in flight.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.gateway.server import Gateway
from agentgym.gateway.session import Session, SessionLimits
from agentgym.rollout.policy import PolicyError
from agentgym.rollout.trajectory import Trajectory

__all__ = ["GatewayJob", "Program", "ProgramConfig", "ProgramContext", "load_program", "run_episode"]

_OUTPUT_TAIL = 64 * 1024  # bytes of a command's stdout and stderr kept (the answer is its last line)


@dataclass(frozen=True)
class ProgramContext:
    """What a program needs to run one episode: where the model and the tools are, and the task."""

    base_url: str
    api_key: str
    mcp_url: str
    model: str
    task_id: str
    goal: str
    tools: list[dict]  # the env's tools in OpenAI function-calling form (callable over MCP)

    def environ(self) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": self.base_url,
            "OPENAI_API_KEY": self.api_key,
            "AGENTGYM_MCP_URL": self.mcp_url,
            "AGENTGYM_MODEL": self.model,
            "AGENTGYM_TASK_ID": self.task_id,
            "AGENTGYM_GOAL": self.goal,
        }


#: A callable ``(ProgramContext) -> answer | None`` (sync or async), or a command's argv.
Program = Callable[[ProgramContext], Any] | Sequence[str]


def load_program(spec: str | Sequence[str] | Callable) -> Program:
    """A program from a config: ``"module:function"``, a command line (a list of argv), or a callable."""
    if callable(spec):
        return spec
    if isinstance(spec, str):
        module, _, name = spec.partition(":")
        if not name:
            raise ValueError(f"program must be 'module:function' or a command (a list), got {spec!r}")
        import importlib

        return getattr(importlib.import_module(module), name)
    argv = list(spec)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"a command program must be a non-empty list of strings, got {spec!r}")
    return argv


async def run_episode(
    gateway: Gateway,
    env: Any,
    program: Program,
    *,
    task_id: str | None,
    seed: int | None = None,
    timeout: float = 300.0,
    limits: SessionLimits | None = None,
) -> Trajectory:
    """One episode of ``program`` on ``env``'s task through ``gateway`` (see the module docstring)."""
    trajectory, _ = await reset_and_run(
        gateway, env, program, task_id=task_id, seed=seed, timeout=timeout, limits=limits
    )
    return trajectory


async def reset_and_run(
    gateway: Gateway,
    env: Any,
    program: Program,
    *,
    task_id: str | None,
    seed: int | None = None,
    timeout: float = 300.0,
    limits: SessionLimits | None = None,
    branching: bool = False,
) -> tuple[Trajectory, Session]:
    """:func:`run_episode`, returning its session too (with ``branching``, the one to fork from)."""
    observation, info = await env.areset(seed=seed, options={"task_id": task_id} if task_id else None)
    goal = observation["text"] if isinstance(observation, dict) else str(observation)
    return await run_program_episode(
        gateway, env, program, info.get("task_id", task_id), goal, timeout=timeout, limits=limits, branching=branching
    )


async def run_program_episode(
    gateway: Gateway,
    env: Any,
    program: Program,
    task_id: str | None,
    goal: str,
    *,
    timeout: float = 300.0,
    limits: SessionLimits | None = None,
    branching: bool = False,
    replay: Any = None,
) -> tuple[Trajectory, Session]:
    """The program's part of an episode on ``env`` as it stands (reset, or a fork being replayed)."""
    session = gateway.open_session(
        task_id,
        env=env,
        env_id=getattr(env.unwrapped, "kind", ""),
        initial_observation=goal,
        limits=limits,
        branching=branching,
        replay=replay,
    )
    tools = [t.to_openai() for t in env.unwrapped.tools()]
    context = ProgramContext(
        gateway.base_url, session.key, gateway.mcp_url, gateway.model_name, task_id or "", goal, tools
    )
    graded_by = answer = error = None
    try:
        answer, error = await _run(program, context, timeout, lambda: gateway.close_session(session))
        if session.env_done:
            graded_by = "program"
        elif error is None and answer is not None:
            graded_by = await _submit_for(gateway, session, answer)
    finally:
        gateway.close_session(session)
    if session.env_error is not None:  # as the agent loop's env errors: the runner retries on another env
        session.release_snapshots()
        raise RuntimeError(f"the env broke during a tool call of the program: {session.env_error}")
    if error is not None and session.backend_error is not None:  # the model failed the program: a policy failure
        session.release_snapshots()
        raise PolicyError(f"the gateway's backend failed during the episode: {session.backend_error}")
    metadata = {"program_error": error, "graded_by": graded_by, "answer": answer}
    return session.trajectory(metadata=metadata), session


async def _submit_for(gateway: Gateway, session, answer: str) -> str | None:
    """Submit the program's answer to its env (see the module docstring); the grader's verdict is the session's."""
    env = session.env
    tools = {t.name: t for t in env.unwrapped.tools()}
    if "submit" in tools:
        spec = tools["submit"]
        names = list(spec.required) or list(spec.properties)  # its one argument, required or not (KeyChain's answer)
        action: Any = {"name": "submit", "arguments": {names[0]: answer} if names else {}}
    elif getattr(env.unwrapped, "allow_text_replies", False):
        action = answer
    else:
        return None
    async with gateway.env_lock(session):
        _, reward, terminated, truncated, info = await env.astep(action)
    done = terminated or truncated
    session.add_step("", float(reward), done, info.get("success") if done else None)
    return "gateway"


async def _run(program: Program, context: ProgramContext, timeout: float, revoke: Callable[[], Any]):
    """(answer, error) of one run; the error says why the program failed (None when it did not)."""
    if callable(program):
        if inspect.iscoroutinefunction(program):
            work = program(context)
        else:
            work = asyncio.to_thread(program, context)
        try:
            async with asyncio.timeout(timeout):
                answer = await work
        except TimeoutError:
            revoke()  # a sync program's thread cannot be stopped: its next call is refused instead
            return None, f"timeout: the program ran past {timeout} s"
        except Exception as exc:  # the program's own failure, recorded
            while isinstance(exc, ExceptionGroup) and exc.exceptions:  # a task group's: name the cause
                exc = exc.exceptions[0]
            return None, f"program raised {type(exc).__name__}: {exc}"
        return (None if answer is None else str(answer)), None
    return await _run_command(list(program), context, timeout)


async def _run_command(argv: list[str], context: ProgramContext, timeout: float) -> tuple[str | None, str | None]:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **context.environ()},
        start_new_session=True,  # its own process group: a timeout kills everything it started
    )
    assert process.stdout is not None and process.stderr is not None
    readers = asyncio.gather(_tail(process.stdout), _tail(process.stderr))
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await readers
            code = await process.wait()
    except TimeoutError:
        return None, f"timeout: the program ran past {timeout} s"
    finally:
        if process.returncode is None:
            _kill_group(process.pid)
            await process.wait()
        readers.cancel()
    if code != 0:
        tail = " | ".join(stderr.decode(errors="replace").strip().splitlines()[-3:])
        if code < 0:  # the OOM killer, a user's kill: the program died, it did not exit
            return None, f"program killed by signal {_signal_name(-code)}: {tail}"
        return None, f"program exited with status {code}: {tail}"
    lines = [line for line in stdout.decode(errors="replace").splitlines() if line.strip()]
    return (lines[-1].strip() if lines else None), None


async def _tail(stream: asyncio.StreamReader) -> bytes:
    kept = b""
    while chunk := await stream.read(65536):
        kept = (kept + chunk)[-_OUTPUT_TAIL:]
    return kept


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class GatewayJob:
    """The runner job that runs ``program`` through a gateway over the runner's policy (see the module docstring).

    Args:
        program: a callable, a command's argv, or ``"module:function"`` (:func:`load_program`).
        timeout: seconds a program may run per episode.
        limits: each session's bounds.
        override_sampling: sample with the runner's agent settings (a trainer's temperature and
            max tokens), not the program's.
        model_name: the model name programs pass.
    """

    def __init__(
        self,
        program: Program | str,
        *,
        timeout: float = 300.0,
        limits: SessionLimits | None = None,
        override_sampling: bool = True,
        model_name: str = "policy",
    ):
        self.program = load_program(program)
        self.timeout = timeout
        self.limits = limits
        self.override_sampling = override_sampling
        self.model_name = model_name
        # One gateway per event loop (a trainer runs each step's rollouts in a new one), with its episodes in flight.
        self._gateways: dict[asyncio.AbstractEventLoop, tuple[Gateway, int]] = {}

    async def __call__(self, agent, env, request) -> Trajectory:
        gateway = await self._acquire(agent)
        try:
            return await run_episode(
                gateway,
                env,
                self.program,
                task_id=request.task_id,
                seed=request.seed,
                timeout=self.timeout,
                limits=self.limits,
            )
        finally:
            await self._release()

    async def _acquire(self, agent) -> Gateway:
        loop = asyncio.get_running_loop()
        if loop not in self._gateways:
            sampling = agent.config.sampling if self.override_sampling else None
            self._gateways[loop] = (Gateway(agent.policy, self.model_name, limits=self.limits, sampling=sampling), 0)
        gateway, users = self._gateways[loop]
        self._gateways[loop] = (gateway, users + 1)
        await gateway.start()  # the first episode starts it; the others wait for that
        return gateway

    async def _release(self) -> None:
        loop = asyncio.get_running_loop()
        gateway, users = self._gateways[loop]
        if users > 1:
            self._gateways[loop] = (gateway, users - 1)
            return
        del self._gateways[loop]
        await gateway.aclose()


@dataclass(frozen=True)
class ProgramConfig:
    """A config's ``gateway`` section (trainers with ``rollout_backend: gateway``): the program and its bounds.

    Attributes:
        program: ``"module:function"`` (a callable taking a :class:`ProgramContext`) or a command (argv list).
        timeout: seconds a program may run per episode.
        max_calls: model calls per episode.
        max_concurrent: model calls of one episode in flight at once.
    """

    program: str | list[str]
    timeout: float = 300.0
    max_calls: int = 64
    max_concurrent: int = 4

    def __post_init__(self):
        load_program(self.program)  # a bad program fails at config time, not at the first rollout
        if self.timeout <= 0:
            raise ValueError(f"gateway.timeout must be positive, got {self.timeout}")
        SessionLimits(self.max_calls, self.max_concurrent)

    def job(self, *, override_sampling: bool = True) -> GatewayJob:
        return GatewayJob(
            self.program,
            timeout=self.timeout,
            limits=SessionLimits(self.max_calls, self.max_concurrent),
            override_sampling=override_sampling,
        )
