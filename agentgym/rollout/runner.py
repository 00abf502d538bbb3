"""The rollout runner: many episodes against one policy on asyncio, with bounded concurrency, timeouts, env retries and partial rollouts.

:class:`Runner` takes a list of :class:`EpisodeRequest` s (or task ids) and an env factory, and runs ``concurrency``
workers. Each worker takes the next task, borrows an env from the runner's pool (made by the
factory on demand, reset rather than re-created between episodes) and runs a **job** on it: by
default one linear episode, driven turn by turn with :meth:`Agent.start`/``sample``/``apply``;
any ``job(agent, env, request) -> Trajectory | RolloutTree`` (e.g. a tree rollout) plugs in the same
way. The policy sees up to ``concurrency`` requests at once and batches them.

Failures are records, never silent drops:

* **episode timeout** — the episode ends as a Trajectory whose ``error`` starts with
  ``"timeout"`` (its turns so far kept); the env, which may be wedged, is closed and replaced;
* **env failure** — an exception from the env or a step with ``info["env_error"]``: the env is
  closed and the task retried from scratch on another env, up to ``max_env_retries`` times;
* **policy failure** — an exception from sampling (:class:`PolicyError`): not retried unless
  ``max_policy_retries`` says so (a linear episode then re-samples the same turn).

Every failed attempt is listed in :attr:`RunResult.failures` and in the final record's
``metadata["failures"]``. Any other exception from a job counts as an env failure.

**Partial rollouts** (APRIL): ``run(requests, target=N)`` over-provisions — it works on all tasks —
and returns as soon as N records are finished. Linear episodes still running are paused at a
turn boundary: a sample in flight is abandoned (its tokens are re-sampled later; the env never
saw it), an env step in flight is allowed to finish (abandoning it would leave the env ahead of
the episode). They come back in :attr:`RunResult.pending` with their env kept open, together
with the tasks not yet started; ``await runner.resume(pending)`` continues them (their earlier
turns keep the policy version that sampled them, so staleness is visible per turn) and
``await runner.discard(pending)`` closes them. Custom jobs are all-or-nothing: one in flight at
the target is cancelled, its env closed, and its task returned to be run again from scratch.

All envs the runner opened are closed when a call returns (except those held by pending
episodes) and, on an exception or cancellation, all of them. With ``keep_envs`` the idle ones
stay open instead, for the runner's next calls (a trainer's next step resets them with its
tasks rather than building new envs); :meth:`Runner.aclose` closes them. An env that failed,
timed out or was abandoned is never kept.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agentgym.core import AgentEnv
from agentgym.rollout.agent import Agent, Episode
from agentgym.rollout.policy import PolicyError
from agentgym.rollout.store import Record, TrajectoryStore
from agentgym.rollout.trajectory import RolloutTree, Trajectory

__all__ = ["Failure", "Job", "PendingEpisode", "RunResult", "RunStats", "Runner", "RunnerConfig", "EpisodeRequest"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeRequest:
    """One episode to run: which task, with which seed, as which repeat of which group.

    Not a task definition (that is :class:`agentgym.Task`, what ``env.tasks()`` lists): a request
    names a task by its id, and many requests may name the same task.

    Attributes:
        task_id: the env task (``None``: the env draws one with ``seed``).
        seed: the reset seed.
        repeat: which repeat of this task this is (several samples per task for group baselines).
        group: the group the record belongs to; copied with ``repeat`` into the record's metadata.
    """

    task_id: str | None
    seed: int | None = None
    repeat: int = 0
    group: str | None = None


Job = Callable[[Agent, AgentEnv, EpisodeRequest], Awaitable[Record]]


@dataclass(frozen=True)
class RunnerConfig:
    """Settings of a :class:`Runner`.

    Attributes:
        concurrency: the most episodes in flight at once (and the most envs open, wedged ones
            being closed aside); fewer where the env bounds it (:meth:`AgentEnv.concurrency_bound`:
            the desktops, by the machine's cores and memory).
        episode_timeout: seconds an episode may run, summed over the calls it is worked on in
            (``None``: no limit).
        max_env_retries: how many times a task is retried on another env after an env failure.
        max_policy_retries: how many times a failed sample is retried (0: a policy failure ends
            the episode).
        progress: show a live progress line (only when stderr is a terminal).
        store: where each finished record is appended as soon as it finishes.
        keep_envs: keep the envs idle at the end of a call open for the next calls (reset with
            their tasks), until :meth:`Runner.aclose`; concurrent calls share them.
    """

    concurrency: int = 8
    episode_timeout: float | None = None
    max_env_retries: int = 2
    max_policy_retries: int = 0
    progress: bool = True
    store: TrajectoryStore | None = None
    keep_envs: bool = False

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.episode_timeout is not None and self.episode_timeout <= 0:
            raise ValueError(f"episode_timeout must be positive, got {self.episode_timeout}")
        if self.max_env_retries < 0 or self.max_policy_retries < 0:
            raise ValueError("retry counts cannot be negative")


@dataclass(frozen=True)
class Failure:
    """One failed attempt at a request: ``kind`` is ``"env"``, ``"policy"`` or ``"timeout"``; ``attempt`` counts from 1."""

    request: EpisodeRequest
    attempt: int
    kind: str
    error: str

    def to_dict(self) -> dict:
        return {"attempt": self.attempt, "kind": self.kind, "error": self.error}


@dataclass
class PendingEpisode:
    """A request not finished when a call returned: paused at a turn boundary (``episode`` set, its env open) or not started."""

    request: EpisodeRequest
    episode: Episode | None = None
    failures: list[Failure] = field(default_factory=list)
    elapsed: float = 0.0  # seconds this attempt has run so far (counts against episode_timeout)

    @property
    def attempt(self) -> int:
        return 1 + sum(f.kind == "env" for f in self.failures)

    @property
    def turn(self) -> int:
        return self.episode.turn if self.episode is not None else 0


@dataclass
class RunStats:
    """What one call did: records finished, env steps taken, tokens sampled, failed attempts, wall time."""

    episodes: int = 0
    env_steps: int = 0
    generated_tokens: int = 0
    failed_attempts: int = 0
    wall_time: float = 0.0

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_time if self.wall_time > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_time if self.wall_time > 0 else 0.0


@dataclass
class RunResult:
    """Finished records (in finishing order), failed attempts, unfinished work, and stats."""

    records: list[Record]
    failures: list[Failure]
    pending: list[PendingEpisode]
    stats: RunStats


class _Failed(Exception):
    """An attempt failed in a classified way (raised inside a job, handled by the worker)."""

    def __init__(self, kind: str, error: str):
        super().__init__(error)
        self.kind = kind
        self.error = error


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _concurrency_bound(env: AgentEnv) -> int | None:
    """The env's own bound on how many run at once (:meth:`AgentEnv.concurrency_bound`), through any wrappers; None
    for an env without one (a remote env's proxy: its envs run elsewhere)."""
    bound = getattr(getattr(env, "unwrapped", env), "concurrency_bound", None)
    return bound() if callable(bound) else None


class _Call:
    """The state of one run/resume call: the work queue, the env pool, counters and the stop signal."""

    def __init__(self, runner: Runner, items: list[PendingEpisode], target: int | None):
        self.runner = runner
        self.queue = collections.deque(items)
        self.target = target
        self.records: list[Record] = []
        self.failures: list[Failure] = []
        self.paused: list[PendingEpisode] = []
        self.stats = RunStats()
        self.running = 0
        self.stopping = False
        self.started = time.perf_counter()
        self.idle: list[AgentEnv] = []
        # Every env this call is responsible for: pooled, in use, or held by a paused episode.
        self.owned: set[AgentEnv] = {item.episode.env for item in items if item.episode is not None}
        self.closing: set[asyncio.Task] = set()
        self.interruptible: set[asyncio.Future] = set()  # samples and custom jobs to cancel on stop
        self.on_change: Callable[[], None] = lambda: None

    async def acquire(self) -> AgentEnv:
        """An idle env, or a new one from the factory (whose exceptions propagate: they are not episode failures)."""
        if self.idle:
            return self.idle.pop()
        if self.runner.kept:
            env = self.runner.kept.pop()
            self.owned.add(env)
            return env
        making = asyncio.ensure_future(asyncio.to_thread(self.runner.env_factory))
        try:
            env = await asyncio.shield(making)
        except asyncio.CancelledError:
            # The factory runs on in its thread; close what it makes rather than leak it.
            self._in_background(_close_when_made(making))
            raise
        self.owned.add(env)
        return env

    def release(self, env: AgentEnv) -> None:
        self.idle.append(env)

    def discard(self, env: AgentEnv) -> None:
        """Close an env in the background (it may be wedged mid-step); the call awaits it before returning."""
        if env not in self.owned:
            return
        self.owned.discard(env)
        self._in_background(_close(env))

    def _in_background(self, closing: Awaitable[None]) -> None:
        task = asyncio.ensure_future(closing)
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)

    def stop(self) -> None:
        self.stopping = True
        for future in self.interruptible:
            future.cancel()

    async def interruptible_call(self, awaitable: Awaitable):
        """Await ``awaitable``; returns ``(False, None)`` if :meth:`stop` abandoned it, else ``(True, result)``."""
        future = asyncio.ensure_future(awaitable)
        self.interruptible.add(future)
        try:
            return True, await future
        except asyncio.CancelledError:
            # Only our own stop() counts; a cancellation of this task (a timeout, the caller) propagates.
            if future.cancelled() and self.stopping and not asyncio.current_task().cancelling():
                return False, None
            raise
        finally:
            self.interruptible.discard(future)

    def status(self) -> str:
        elapsed = time.perf_counter() - self.started
        pending = len(self.queue) + len(self.paused)
        rate = len(self.records) / elapsed if elapsed > 0 else 0.0
        tokens = self.stats.generated_tokens / elapsed if elapsed > 0 else 0.0
        return (
            f"done {len(self.records)} · running {self.running} · failed {len(self.failures)} · "
            f"pending {pending} · {rate:.2f} episodes/s · {tokens:.0f} tokens/s"
        )


async def _close(env: AgentEnv) -> None:
    try:
        await env.aclose()
    except Exception as exc:  # noqa: BLE001 - a failing close must not hide the run's result
        logger.warning("closing %s failed: %s", type(env).__name__, _describe(exc))


async def _close_when_made(making: asyncio.Future) -> None:
    try:
        env = await making
    except Exception:  # noqa: BLE001 - nothing was made, nothing to close
        return
    await _close(env)


class Runner:
    """Runs tasks with ``agent`` on envs from ``env_factory`` (a zero-argument callable returning a fresh :class:`AgentEnv`).

    ``job`` replaces the default linear episode with ``job(agent, env, request)`` returning a
    Trajectory or RolloutTree (see the module docstring for what changes). An exception from
    ``env_factory`` itself is not an episode failure: it ends the call (everything closed).
    """

    def __init__(
        self,
        agent: Agent,
        env_factory: Callable[[], AgentEnv],
        config: RunnerConfig = RunnerConfig(),
        *,
        job: Job | None = None,
    ):
        self.agent = agent
        self.env_factory = env_factory
        self.config = config
        self.job = job
        self.kept: list[AgentEnv] = []  # idle envs kept open between calls (keep_envs)

    async def run(self, requests: Sequence[EpisodeRequest | str], *, target: int | None = None) -> RunResult:
        """Run every request (a task id: a request with the defaults); with ``target``, return once that many records are finished."""
        return await self._drive(
            [PendingEpisode(r if isinstance(r, EpisodeRequest) else EpisodeRequest(r)) for r in requests], target
        )

    async def resume(self, pending: Sequence[PendingEpisode], *, target: int | None = None) -> RunResult:
        """Continue pending episodes from where they paused (and start the tasks that never started)."""
        return await self._drive(list(pending), target)

    async def aclose(self) -> None:
        """Close the envs kept between calls (``keep_envs``); a later call makes new ones."""
        kept, self.kept = self.kept, []
        await asyncio.gather(*(_close(env) for env in kept))

    async def discard(self, pending: Sequence[PendingEpisode]) -> None:
        """Close the envs of pending episodes that will not be resumed."""
        envs = [item.episode.env for item in pending if item.episode is not None]
        for item in pending:
            item.episode = None
        await asyncio.gather(*(_close(env) for env in envs))

    # ------------------------------------------------------------------ the call
    async def _drive(self, items: list[PendingEpisode], target: int | None) -> RunResult:
        if target is not None and target < 1:
            raise ValueError(f"target must be at least 1, got {target}")
        call = _Call(self, items, target)
        progress = _progress_display(call, target or len(items)) if self.config.progress else None
        try:
            if progress is not None:
                progress.start()
            workers = min(self.config.concurrency, len(items))
            if workers > 1:  # no more at once than the env allows (its concurrency_bound), learned from the first
                # env: a paused episode's where one holds an env (a new one beside them could pass the bound)
                env = next((item.episode.env for item in items if item.episode is not None), None)
                if env is None:
                    env = await call.acquire()
                    call.release(env)
                workers = min(workers, _concurrency_bound(env) or workers)
            async with asyncio.TaskGroup() as group:
                for _ in range(workers):
                    group.create_task(self._worker(call))
        except BaseException:
            for item in items:
                item.episode = None
            for env in list(call.owned):
                call.discard(env)
            raise
        finally:
            for env in call.idle:
                if self.config.keep_envs and env in call.owned:  # not closed by a failure above
                    call.owned.discard(env)
                    self.kept.append(env)
                else:
                    call.discard(env)
            if call.closing:
                await asyncio.gather(*call.closing, return_exceptions=True)
            if progress is not None:
                progress.stop()
        call.stats.episodes = len(call.records)
        call.stats.failed_attempts = len(call.failures)
        call.stats.wall_time = time.perf_counter() - call.started
        return RunResult(call.records, call.failures, call.paused + list(call.queue), call.stats)

    async def _worker(self, call: _Call) -> None:
        while call.queue and not call.stopping:
            item = call.queue.popleft()
            call.running += 1
            call.on_change()
            try:
                await self._process(item, call)
            finally:
                call.running -= 1
                call.on_change()

    async def _process(self, item: PendingEpisode, call: _Call) -> None:
        """Run attempts of one task until it yields a record or is paused."""
        timeout = self.config.episode_timeout
        while True:
            env = item.episode.env if item.episode is not None else await call.acquire()
            begun = time.monotonic()
            record: Record | None
            deadline = asyncio.timeout(None if timeout is None else max(0.0, timeout - item.elapsed))
            try:
                async with deadline:
                    if self.job is None:
                        record = await self._linear(item, env, call)
                    else:
                        record = await self._custom(item, env, call)
            except TimeoutError:
                if not deadline.expired():
                    raise
                error = f"timeout: the episode ran longer than {timeout:g}s"
                self._fail(item, call, "timeout", error)
                record = self._failed_record(item, env, error)
                call.discard(env)
                await self._finish(item, record, call)
                return
            except _Failed as failed:
                self._fail(item, call, failed.kind, failed.error)
                limit = self.config.max_policy_retries if failed.kind == "policy" else self.config.max_env_retries
                retry = sum(f.kind == failed.kind for f in item.failures) <= limit
                if failed.kind == "policy" and self.job is None:
                    # A linear episode is at a turn boundary with its env untouched: re-sample the same turn.
                    if retry:
                        continue
                    call.release(env)
                else:
                    call.discard(env)
                    if retry:
                        item.episode, item.elapsed = None, 0.0
                        if call.stopping:  # retried from scratch by a later resume
                            call.paused.append(item)
                            return
                        continue
                error = failed.error if failed.kind != "policy" else f"policy_error: {failed.error}"
                await self._finish(item, self._failed_record(item, env, error), call)
                return
            finally:
                item.elapsed += time.monotonic() - begun
            if record is None:  # paused at the target
                if item.episode is None:
                    call.discard(env)  # a custom job was cancelled mid-way; its env state is unknown
                call.paused.append(item)
                return
            call.release(env)
            await self._finish(item, record, call)
            return

    async def _linear(self, item: PendingEpisode, env: AgentEnv, call: _Call) -> Trajectory | None:
        episode = item.episode
        if episode is None:
            try:
                episode = await self.agent.start(env, item.request.task_id, item.request.seed)
            except Exception as exc:
                raise _Failed("env", f"env_error: reset failed: {_describe(exc)}") from exc
            item.episode = episode
        while not episode.done:
            if call.stopping:
                return None
            try:
                sampled, completion = await call.interruptible_call(self.agent.sample(episode))
            except Exception as exc:
                raise _Failed("policy", _describe(exc)) from exc
            if not sampled:
                return None
            try:
                turn = await self.agent.apply(episode, completion)
            except Exception as exc:
                raise _Failed("env", f"env_error: step failed: {_describe(exc)}") from exc
            call.stats.env_steps += 1
            call.stats.generated_tokens += len(completion.token_ids)
            if turn.info.get("env_error"):
                raise _Failed("env", episode.error or f"env_error: {turn.info['env_error']}")
        return episode.trajectory()

    async def _custom(self, item: PendingEpisode, env: AgentEnv, call: _Call) -> Record | None:
        try:
            finished, record = await call.interruptible_call(self.job(self.agent, env, item.request))
        except PolicyError as exc:
            raise _Failed("policy", _describe(exc)) from exc
        except Exception as exc:
            raise _Failed("env", f"env_error: {_describe(exc)}") from exc
        if not finished:
            return None
        if not isinstance(record, (Trajectory, RolloutTree)):
            raise TypeError(f"a job must return a Trajectory or RolloutTree, not {type(record).__name__}")
        call.stats.env_steps += record.num_env_steps
        call.stats.generated_tokens += record.num_generated_tokens
        return record

    # ------------------------------------------------------------------ bookkeeping
    @staticmethod
    def _fail(item: PendingEpisode, call: _Call, kind: str, error: str) -> None:
        failure = Failure(item.request, item.attempt, kind, error)
        item.failures.append(failure)
        call.failures.append(failure)
        logger.warning(
            "task %r attempt %d: %s failure: %s",
            item.request.task_id,
            failure.attempt,
            kind,
            error,
            extra={"failure": failure},  # for callers that report some failures their own way (eval's overflows)
        )
        call.on_change()

    @staticmethod
    def _failed_record(item: PendingEpisode, env: AgentEnv, error: str) -> Trajectory:
        """The record of an attempt that failed: its turns so far, or none if it never started."""
        if item.episode is not None:
            record = item.episode.trajectory()
        else:
            record = Trajectory(
                task_id=item.request.task_id or "", env_id=env.unwrapped.kind, metadata={"seed": item.request.seed}
            )
        record.error, record.truncated = error, True
        return record

    async def _finish(self, item: PendingEpisode, record: Record, call: _Call) -> None:
        item.episode = None
        record.metadata.update(repeat=item.request.repeat, group=item.request.group, elapsed_s=round(item.elapsed, 3))
        if item.failures:
            record.metadata["failures"] = [f.to_dict() for f in item.failures]
        call.records.append(record)
        if call.target is not None and len(call.records) >= call.target and not call.stopping:
            call.stop()
        call.on_change()
        if self.config.store is not None:
            await asyncio.to_thread(self.config.store.append, record)


def _progress_display(call: _Call, total: int):
    """A rich progress line fed by the call's counters, or ``None`` when stderr is not a terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        return None
    progress = Progress(
        TextColumn("rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    bar = progress.add_task("rollouts", total=total, status=call.status())
    call.on_change = lambda: progress.update(bar, completed=len(call.records), status=call.status())
    return progress
