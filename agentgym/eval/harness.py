"""The evaluation harness: k samples of every task of a suite through the rollout Runner, written as they finish, resumable, then summarized.

``await evaluate(suite, policy, k=..., out_dir=...)`` writes into ``out_dir``:

* ``results.jsonl`` — one line per finished episode, appended (flushed and fsynced) the moment
  it finishes: ``suite, task_id, category, sample, success, reward, turns, tokens_in,
  tokens_out, wall_s, error, trajectory``. Token counts are the turns' prompt and completion
  ids, or against a chat endpoint that returns no ids, the usage it reports (0 without one).
* ``summary.json`` — ``schema_version, suite, model, k, tasks, episodes, metrics, by_category``
  from :mod:`agentgym.eval.metrics`, over the results of the (task, sample) pairs asked for;
* ``report.html`` — :func:`agentgym.eval.report.write_report`.

**Resuming.** A rerun with the same ``out_dir`` skips every (task, sample) already in
``results.jsonl`` and appends the rest; an interrupted run (Ctrl-C, cancellation, a crash)
leaves only whole lines, and a torn last line from a hard kill is cut off on the next run.
Episodes that ended in an env error or a timeout are results (they count as failures and in
``env_error_rate``); delete their lines to run them again.

**Policy failures** (an endpoint down, retries exhausted) are not results: the first one stops
the run with :class:`PolicyUnavailableError`; everything finished before it stays in
``results.jsonl`` for a rerun to resume from. A request the endpoint refuses because the
conversation outgrew the model's context (HTTP 400 "maximum context length") is the episode's
fault, not the endpoint's: it is a failed result with ``error`` ``"context_overflow: ..."``, the
run goes on, and ``summary.json``'s ``errors`` counts it (``errors``: episodes per error kind,
the text before the first colon). When a task's very first request (its prompt plus the reply's
``max_tokens``) does not fit, a warning on stderr says so at once, once per run, since every
episode of such a task fails the same way; the runner's per-episode log line of an overflow is
left out.

Each (task, sample) gets its own reset seed, derived from ``seed``, the task id and the sample
index, so a rerun (or a resumed run) resets every episode exactly as before.

**Memory** (``memory=MemoryConfig(...)``, ``agentgym eval --memory PATH``): every env is wrapped
in a :class:`~agentgym.memory.wrapper.MemoryWrapper`, so retrieved memories and skills go into
each task's first observation; in ``learn`` mode each finished episode is written back (in
finishing order, so later episodes may see earlier ones). The store and mode are part of the
run's identity.

**Screenshots** (``screenshots=True``, ``agentgym eval --screenshots``): every env that renders
images (the web envs, the GUI desktop) is made with ``render_mode="rgb_array"`` and wrapped in a
:class:`~agentgym.wrappers.RecordScreenshots`, so each turn's ``info["screenshot"]`` (a base64
PNG) reaches the report's trajectory viewer; envs that render none are run as they are.

**Images** (``images=ImageConfig(...)``, ``agentgym eval --images``): the policy sees each
observation's screenshot as well as its text (:mod:`agentgym.rollout.images`: the newest
``keep_last`` images, shrunk to ``max_side``, PNG or JPEG). Envs that can take screenshots are made
so: the web envs with Set-of-Marks (``set_of_marks=True``: each element's box and id drawn on the
page), the GUI desktop with ``screenshot=True`` (unless the suite's env kwargs say otherwise); envs
without a screen are run with text only. Each turn records the hashes of the images its prompt
held and the trajectory a small JPEG of each, which the report's viewer shows as "the model saw".
The image settings are part of the run's identity. An endpoint that takes no images stops the
run with an error that says so.

**Agent programs** (``program=``: a callable taking a
:class:`~agentgym.gateway.programs.ProgramContext`, a command's argv, or ``"module:function"``): each
episode runs the user's own agent program through the gateway (:mod:`agentgym.gateway`) instead of
agentgym's agent loop: the policy (token mode) answers its model calls, the env's tools are its MCP
tools and the env grades it. ``timeout`` bounds the program (default 300 s; the episode as a whole,
env reset and grading included, gets :data:`PROGRAM_GRACE_S` more, so that a program that hangs
is stopped as the program's failure, not the env's). A program that crashes, exits non-zero, is
killed or times out is the agent's failure, not the env's: its row's ``error`` is
``"program_error: <why>"`` (reward 0 unless it had submitted; never retried, unlike an env error),
``summary.json``'s ``errors`` counts it as ``program_error`` and the metrics' ``program_error_rate``
beside ``env_error_rate``. The program is part of the run's identity.

**On a Ray cluster** (``ray=RayConfig(...)``, ``agentgym eval --ray ADDRESS``): the episodes run
on the cluster's env workers (an :class:`~agentgym.distributed.env_pool.EnvPool` per env of the
suite, closed when that env's episodes are done), the policy where it is (an endpoint, or a model
in this process). Results, resume and report are those of a local run: the runner, its retries
and the results file are the same, only the envs are remote. An env worker that dies mid-episode
makes that episode an env failure, retried on another worker (its ``failures`` say so). With
``memory``, every worker's envs read and write one bank, the cluster's
(:mod:`agentgym.memory.remote`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agentgym.eval.oracles import EpisodeAgent
from agentgym.eval.suites import Suite
from agentgym.gateway.programs import GatewayJob, Program
from agentgym.rollout.agent import AgentConfig
from agentgym.rollout.images import ImageConfig
from agentgym.rollout.policy import Policy
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
from agentgym.rollout.store import TrajectoryStore
from agentgym.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from agentgym.distributed.config import RayConfig
    from agentgym.memory.config import MemoryConfig

__all__ = [
    "PolicyUnavailableError",
    "SCHEMA_VERSION",
    "episode_seed",
    "error_counts",
    "evaluate",
    "is_context_overflow",
    "load_results",
]

SCHEMA_VERSION = 1
PROGRAM_TIMEOUT_S = 300.0  # an agent program's time per episode when the run sets no timeout
PROGRAM_GRACE_S = 60.0  # an agent program's episode: env reset and grading, beyond the program's own time
RUN_FILE = "run.json"
RESULTS = "results.jsonl"
SUMMARY = "summary.json"

#: ``policy`` may be a factory ``(env_id, env_kwargs) -> Policy``, called once per env of the suite (oracles).
PolicyFactory = Callable[[str, dict], Policy]


class PolicyUnavailableError(RuntimeError):
    """The policy failed (e.g. its endpoint is down); the run stopped, finished episodes are kept."""


class _StopRun(Exception):
    def __init__(self, error: str):
        super().__init__(error)
        self.error = error


# How OpenAI, vLLM, `agentgym serve` and a local HFPolicy word a prompt that does not fit the model's window.
_CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|context_length_exceeded|maximum model length"
    r"|does not fit the model's context",
    re.I,
)


def is_context_overflow(error: str) -> bool:
    """Whether a policy error says the request did not fit the model's context window."""
    return bool(_CONTEXT_OVERFLOW.search(error))


class _QuietOverflows(logging.Filter):
    """Drops the runner's per-episode log line of a context overflow: the harness reports those itself, once."""

    def filter(self, record: logging.LogRecord) -> bool:
        failure = getattr(record, "failure", None)
        return failure is None or not is_context_overflow(failure.error)


def error_counts(results: list[dict]) -> dict[str, int]:
    """Episodes per error kind (the error's text before its first colon), most frequent first."""
    kinds = Counter(str(r["error"]).split(":", 1)[0] for r in results if r.get("error"))
    return dict(kinds.most_common())


def episode_seed(seed: int, task_id: str, sample: int) -> int:
    """The reset seed of one (task, sample): stable across runs and Python processes (unlike ``hash``)."""
    digest = hashlib.sha256(f"{seed}\0{task_id}\0{sample}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def load_results(path: str | Path) -> list[dict]:
    """The rows of a ``results.jsonl`` (a run directory or the file itself), ignoring a torn last line."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # only a hard kill mid-write leaves one, and only as the last line
    return rows


def _cut_torn_line(path: Path) -> None:
    """Drop a partial last line (a hard kill mid-write), so the next append starts on a line of its own."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as file:
            file.truncate(data.rfind(b"\n") + 1)


class _ResultsWriter:
    """Takes the runner's finished records (it is the runner's ``store``) and appends them as result rows."""

    def __init__(self, path: Path, suite: Suite, on_row: Callable[[dict], None]):
        self.path = path
        self.suite = suite.name
        self.categories = {t.task_id: t.category for t in suite.tasks}
        self.on_row = on_row
        self._lock = threading.Lock()  # the runner appends from worker threads
        self._closed = False
        self._warned_overflow = False

    def append(self, record: Trajectory) -> None:
        if record.error and record.error.startswith("policy_error"):
            if not is_context_overflow(record.error):
                raise _StopRun(record.error)
            record.error = "context_overflow: " + record.error.removeprefix("policy_error: ")
            if not record.turns:
                self._warn_first_prompt_overflow(record)
        row = self.row(record)
        with self._lock:
            if self._closed:
                return  # a worker thread finished after the run was cancelled: a rerun redoes the episode
            with open(self.path, "a") as file:
                file.write(json.dumps(row) + "\n")
                file.flush()
                os.fsync(file.fileno())
        self.on_row(row)

    def _warn_first_prompt_overflow(self, record: Trajectory) -> None:
        """Say at once, not only in the summary, that a task's very first prompt is too long: every episode of
        such a task will fail the same way, which usually means the wrong model or context setting."""
        with self._lock:
            if self._warned_overflow:
                return
            self._warned_overflow = True
        print(
            f"agentgym eval: warning: the first request of task {record.metadata['group']} (its prompt plus the "
            "reply's max tokens) does not fit the model's context window, so its episodes fail before the model "
            "answers (counted as context_overflow; other tasks like it are not reported one by one). "
            f"The endpoint said: {record.error.removeprefix('context_overflow: ')[:300]}",
            file=sys.stderr,
        )

    def close(self) -> None:
        """No row is written after this returns (a cancelled run's threads may still be finishing)."""
        with self._lock:
            self._closed = True

    def row(self, record: Trajectory) -> dict:
        task_id = record.metadata["group"]  # the suite's task id (the harness sets it as the group)
        return {
            "suite": self.suite,
            "task_id": task_id,
            "category": self.categories[task_id],
            "sample": int(record.metadata["repeat"]),
            "success": bool(record.success),
            "reward": float(record.reward),
            "turns": len(record.turns),
            "tokens_in": sum(_tokens(t, t.prompt_ids, "prompt_tokens") for t in record.turns),
            "tokens_out": sum(_tokens(t, t.completion_ids, "completion_tokens") for t in record.turns),
            "wall_s": float(record.metadata.get("elapsed_s", 0.0)),
            "error": record.error or _program_error(record),
            "trajectory": record.to_dict(),
        }


def _program_error(record: Trajectory) -> str | None:
    """An agent program's failure as a row's error (kind ``program_error``), or None."""
    error = record.metadata.get("program_error")
    return None if error is None else f"program_error: {error}"


def _tokens(turn, ids: list[int], usage_key: str) -> int:
    """A turn's token count: its ids, or in chat mode (no ids) what the endpoint reported."""
    return len(ids) if ids else int((turn.usage or {}).get(usage_key) or 0)


def _progress(suite: Suite, total: int, already: list[dict]):
    """A rich progress line (done, success so far, ETA) and its per-row update, or ``(None, no-op)`` off a terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        return None, lambda row: None
    counts = {"done": len(already), "success": sum(bool(r["success"]) for r in already)}

    def status() -> str:
        rate = counts["success"] / counts["done"] if counts["done"] else 0.0
        return f"success {counts['success']}/{counts['done']} ({rate:.0%})"

    progress = Progress(
        TextColumn(f"eval {suite.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )
    bar = progress.add_task("eval", total=total, completed=len(already), status=status())

    def update(row: dict) -> None:
        counts["done"] += 1
        counts["success"] += bool(row["success"])
        progress.update(bar, completed=counts["done"], status=status())

    return progress, update


async def evaluate(
    suite: Suite,
    policy: Policy | PolicyFactory,
    *,
    k: int = 1,
    concurrency: int = 8,
    out_dir: str | Path,
    max_turns: int | None = None,
    timeout: float | None = None,
    seed: int = 0,
    agent_config: AgentConfig | None = None,
    model: str | None = None,
    progress: bool = True,
    memory: MemoryConfig | None = None,
    screenshots: bool = False,
    images: ImageConfig | None = None,
    ray: RayConfig | None = None,
    program: Program | str | None = None,
) -> dict:
    """Run ``k`` samples of every task of ``suite`` with ``policy`` and return the summary (also written to ``out_dir``).

    Args:
        policy: a Policy, or a factory ``(env_id, env_kwargs) -> Policy`` called once per env
            (how oracles, which know their env's tasks, are passed).
        concurrency: episodes in flight at once (per env of the suite; envs run one after another).
        max_turns: the agent's turn limit (the env's own limit applies too).
        timeout: seconds one episode may run; a timed-out episode is a failed result.
        seed: the base of every episode's reset seed (:func:`episode_seed`).
        model: the name recorded in ``summary.json`` (default: the policy's name).
        progress: show a progress line when stderr is a terminal.
        memory: wrap every env in a MemoryWrapper over this bank (see the module docstring).
        screenshots: record a screenshot of every turn for the report, in the envs that render
            images (see the module docstring).
        images: send the policy each observation's screenshot too (see the module docstring);
            it overrides ``agent_config.images``.
        ray: run the episodes on this Ray cluster's env workers (see the module docstring).
        program: evaluate this agent program instead of agentgym's agent loop (see the module docstring).

    Raises:
        PolicyUnavailableError: the policy failed; the run stopped with its results so far kept.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    import agentgym  # noqa: F401  (registers the envs)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model or (policy.name if isinstance(policy, Policy) else getattr(policy, "__name__", "policy"))
    config = agent_config or AgentConfig()
    identity = {
        "suite": suite.name,
        "tasks": sorted(t.task_id for t in suite.tasks),
        "model": model,
        "seed": seed,
        "max_turns": max_turns,
        "sampling": dataclasses.asdict(config.sampling),
    }
    if memory is not None:
        identity["memory"] = {"path": str(memory.path), "mode": memory.mode}
    job = None
    episode_timeout = timeout
    if program is not None:
        identity["program"] = program if isinstance(program, (str, list)) else _qualified_name(program)
        # The program's own sampling settings are part of the program under evaluation.
        job = GatewayJob(program, timeout=timeout or PROGRAM_TIMEOUT_S, override_sampling=False)
        # The program's own timeout must fire first: a hung program is its failure, not an env timeout to retry.
        episode_timeout = None if timeout is None else timeout + PROGRAM_GRACE_S
    if images is not None:
        config = dataclasses.replace(config, images=images)
    if config.images is not None:
        identity["images"] = config.images.to_dict()
    _claim_run_dir(out, identity)
    results_path = out / RESULTS
    _cut_torn_line(results_path)
    wanted = {(t.task_id, s) for t in suite.tasks for s in range(k)}
    already = [r for r in load_results(results_path) if (r["task_id"], r["sample"]) in wanted]
    done = {(r["task_id"], r["sample"]) for r in already}
    if max_turns is not None:
        config = dataclasses.replace(config, max_turns=max_turns)

    display, on_row = _progress(suite, len(wanted), already) if progress else (None, lambda row: None)
    writer = _ResultsWriter(results_path, suite, on_row)
    quiet = _QuietOverflows()
    logging.getLogger("agentgym.rollout.runner").addFilter(quiet)
    if display is not None:
        display.start()
    try:
        for (env_id, kwargs_json), tasks in suite.by_env().items():
            env_kwargs = json.loads(kwargs_json)
            if config.images is not None:
                env_kwargs = _screen_kwargs(env_id, env_kwargs)
            todo = [
                EpisodeRequest(t.task_id, episode_seed(seed, t.task_id, s), repeat=s, group=t.task_id)
                for t in tasks
                for s in range(k)
                if (t.task_id, s) not in done
            ]
            if not todo:
                continue
            env_policy = policy if isinstance(policy, Policy) else policy(env_id, env_kwargs)
            with contextlib.ExitStack() as resources:
                if ray is None:
                    factory = _env_factory(env_id, env_kwargs, screenshots)
                    factory = factory if memory is None else memory.wrap(factory)
                else:
                    factory = resources.enter_context(
                        _cluster_env_factory(ray, env_id, env_kwargs, screenshots, memory)
                    )
                runner = Runner(
                    EpisodeAgent(env_policy, config),
                    factory,
                    # The runner only calls store.append, and without a job every record is a Trajectory.
                    RunnerConfig(
                        concurrency=concurrency,
                        episode_timeout=episode_timeout,
                        progress=False,
                        store=cast(TrajectoryStore, writer),
                    ),
                    job=job,
                )
                try:
                    await runner.run(todo)
                except* _StopRun as stopped:
                    error = cast(
                        _StopRun, stopped.exceptions[0]
                    ).error  # raised directly in the runner's one task group
                    raise PolicyUnavailableError(
                        f"the policy failed, so the run stopped ({error}). Finished episodes are kept in "
                        f"{results_path}; rerun the same command to resume."
                    ) from None
    finally:
        # Without this, a late write from a cancelled run could land after a rerun read the file,
        # and the rerun would run that (task, sample) again: a duplicate row.
        writer.close()
        logging.getLogger("agentgym.rollout.runner").removeFilter(quiet)
        if display is not None:
            display.stop()

    rows: dict[tuple[str, int], dict] = {}
    for row in load_results(results_path):
        rows.setdefault((row["task_id"], row["sample"]), row)  # a duplicate could only come from a hand edit
    results = [row for key, row in rows.items() if key in wanted]
    return _write_summary(out, suite, results, k, model)


def _qualified_name(program: Any) -> str:
    return f"{getattr(program, '__module__', '?')}:{getattr(program, '__qualname__', type(program).__name__)}"


def _screenshot_recording(env_id: str, env_kwargs: dict, screenshots: bool) -> tuple[dict, Callable[[Any], Any] | None]:
    """The env kwargs and the wrapper that record screenshots when asked and the env renders images (else none)."""
    if not (screenshots and _renders_rgb_array(env_id)):
        return env_kwargs, None
    from agentgym.wrappers import RecordScreenshots

    return {**env_kwargs, "render_mode": "rgb_array"}, RecordScreenshots


def _env_factory(env_id: str, env_kwargs: dict, screenshots: bool) -> Callable[[], Any]:
    """``gymnasium.make(env_id, **env_kwargs)``, wrapped in RecordScreenshots when asked and the env renders images."""
    import gymnasium

    kwargs, record = _screenshot_recording(env_id, env_kwargs, screenshots)
    if record is None:
        return lambda: gymnasium.make(env_id, **kwargs)
    return lambda: record(gymnasium.make(env_id, **kwargs))


@contextlib.contextmanager
def _cluster_env_factory(
    ray: RayConfig, env_id: str, env_kwargs: dict, screenshots: bool, memory: MemoryConfig | None
) -> Iterator[Callable[[], Any]]:
    """An env factory over an EnvPool of ``env_id`` on the cluster (closed on exit), as :func:`_env_factory` locally.

    The memory wrapper runs on the workers, over the cluster's one bank; screenshots are recorded
    here, from the remote env's ``render()``.
    """
    from agentgym.distributed.cluster import connect
    from agentgym.distributed.env_pool import EnvPool

    connect(ray.address)
    kwargs, record = _screenshot_recording(env_id, env_kwargs, screenshots)
    with EnvPool(
        env_id,
        kwargs,
        workers=ray.env_workers,
        envs_per_worker=ray.envs_per_worker,
        wrap=None if memory is None else memory.on_cluster().wrap,
    ) as pool:
        yield pool if record is None else (lambda: record(pool()))


def _screen_kwargs(env_id: str, env_kwargs: dict) -> dict:
    """``env_kwargs`` with the env's screenshots on when it can take them: Set-of-Marks where offered, else plain.

    What the suite's kwargs set is kept; an env with neither option is left as it is (text only).
    """
    creator = _env_creator(env_id)
    for option in ("set_of_marks", "screenshot"):
        if _takes_option(creator, option):
            return env_kwargs if option in env_kwargs else {**env_kwargs, option: True}
    return env_kwargs


def _takes_option(creator: Any, name: str) -> bool:
    """Whether ``creator(name=...)`` is accepted: its ``__init__`` or, through ``**kwargs``, a base class's names it."""
    import inspect

    if not isinstance(creator, type):
        return False
    for klass in creator.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters
        if name in parameters:
            return True
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return False
    return False


def _env_creator(env_id: str) -> Any:
    """The class (or function) registered as ``env_id``, found without making an env."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    entry_point = gymnasium.spec(env_id).entry_point
    return load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point


def _renders_rgb_array(env_id: str) -> bool:
    """Whether the env registered as ``env_id`` declares the ``rgb_array`` render mode (read without making one)."""
    return "rgb_array" in getattr(_env_creator(env_id), "metadata", {}).get("render_modes", ())


def _claim_run_dir(out: Path, identity: dict) -> None:
    """Record what this run directory holds; refuse to resume it with another suite, task set, model, seed,
    turn limit, sampling settings, memory or image settings.

    Resuming skips the (task, sample) pairs already in results.jsonl, so results of a
    different configuration would otherwise be silently counted as this one's; and with one task
    set per directory, its summary, report and ``eval compare`` all describe the same tasks.
    (k may grow: the summary and report cover the samples asked for.)
    """
    path = out / RUN_FILE
    identity = json.loads(json.dumps(identity))  # as it reads back: tuples are lists
    if path.exists():
        recorded = json.loads(path.read_text())
        if recorded != identity:
            changed = ", ".join(_changes(recorded, identity))
            raise ValueError(f"{out} holds a run with other settings ({changed}); use another --out")
        return
    path.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n")


def _changes(recorded: dict, identity: dict, prefix: str = "") -> Iterator[str]:
    """``key: old → new`` for each setting that differs; a group (sampling) by its changed keys, a task list by its size."""
    for key in sorted(set(recorded) | set(identity)):
        old, new = recorded.get(key), identity.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            yield from _changes(old, new, f"{prefix}{key}.")
        elif key == "tasks" and isinstance(old, list) and isinstance(new, list):
            added = len(set(new) - set(old))
            yield f"{prefix}tasks: {len(old)} → {len(new)}, {added} new (another --tasks or suite file)"
        else:
            yield f"{prefix}{key}: {old!r} → {new!r}"


def _write_summary(out: Path, suite: Suite, results: list[dict], k: int, model: str) -> dict:
    from agentgym.eval.metrics import summarize, summarize_by

    summary = {
        "schema_version": SCHEMA_VERSION,
        "suite": suite.name,
        "model": model,
        "k": k,
        "tasks": len(suite.tasks),
        "episodes": len(results),
        "errors": error_counts(results),
        "metrics": summarize(results, k),
        "by_category": summarize_by(results, "category", k),
    }
    # Written whole, then renamed: a reader never sees half a summary.
    partial = out / f".{SUMMARY}.tmp"
    partial.write_text(json.dumps(summary, indent=2) + "\n")
    partial.replace(out / SUMMARY)
    _write_report(out)
    return summary


def _write_report(out: Path) -> None:
    from agentgym.eval.report import write_report

    write_report(out)
