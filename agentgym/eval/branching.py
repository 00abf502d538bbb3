"""Branching evaluation (DIVERT): find an agent's failures by branching conversations at user turns, against linear Monte Carlo at the same token budget.

Evaluating a conversational agent by linear Monte Carlo (whole episodes from reset, again and
again) pays for the same opening turns every time and rarely meets the rare user behaviours
agents fail on. :func:`run_branching` instead, for each task of a suite whose env has a
simulated user (``steer_user``: :mod:`agentgym.envs.user`):

1. plays one episode from reset (the user plain) and keeps a **junction** at every user turn:
   a checkpoint of the episode (the env's snapshot and the conversation) taken just before the
   agent's message that the user answers, plus the task's opening (the user's first message,
   reached by a reset);
2. ranks junctions by how much may hinge on them: the calls that change state (names without a
   read verb: :data:`~agentgym.eval.scripted.READ_PREFIXES`) that followed the user's reply in
   the path it was found on, the agent's uncertainty at its next turn
   (sampling entropy, or −mean logprob, where the policy gives them), and the shared
   :class:`~agentgym.rollout.tree.SuccessPredictor`'s p(1−p) of the prefix; divided by
   1 + the branches already grown there and 1 + the branches there that repeated a signature
   (a junction whose two or more branches all repeated one is saturated and left; an episode
   that repeats a known one adds no junctions);
3. branches from the best junction with a **user behaviour** not yet tried there
   (:data:`~agentgym.envs.diverse_user.BEHAVIOURS`: rephrasing, another order, an omission
   corrected later, impatience, ambiguity, pressure to break policy; one never tried on the task
   first): forks the checkpoint, steers the fork's user (``steer_user(directive=...)``), sends
   the same agent message, and plays on to the end, keeping the new junctions it passes;
4. until the task's token budget is spent: agent tokens (prompt + completion of every turn
   played: the ids, else the endpoint's usage, else 4 characters per token) plus user tokens
   (a policy user's counts, :attr:`~agentgym.envs.user.UserTurn.tokens`; for a scripted user,
   which has no model, its instructions, the conversation and its reply at 4 characters per
   token). A branch pays only for its own turns: the prefix is reused, not replayed.
   A task stops early when an episode ends before the agent's first reply (its prompt
   overflows the model's context window, the env fails at reset): every further one would too.

:func:`run_monte_carlo` is the baseline: whole episodes from reset with a stochastic user
(e.g. :class:`~agentgym.envs.diverse_user.DiverseScriptedUser` with ``chance > 0``, or a policy
user at a temperature) until the same budget is spent. Both count the same things: failures
(episodes that did not succeed), failures per 1,000 tokens, distinct failure signatures (a
failure's tool calls and how it ended) and tasks with at least one failure
(:func:`failure_metrics`; :func:`over_seeds` gives intervals over seeds).

**The run directory** (``out_dir``): ``run.json`` (the settings), ``results.jsonl`` (one row
per episode, a *leaf*: its task, mode, seed, the junction and behaviour it branched from, the
behaviours on its path, tokens, signatures and the trajectory), ``junctions.jsonl`` (every
junction branched from: the turn, the agent's message, the scores) with
``junctions/<n>.snapshot`` (the env snapshot, :meth:`~agentgym.core.AgentEnv.export_snapshot`
bytes), ``summary.json`` and ``report.html`` (each task's branch tree). :func:`replay` plays a
leaf again from its junction's snapshot and returns the env's last step (a failure found is a
failure reproduced, with the scripted user). A rerun resumes: finished tasks are skipped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from agentgym.envs.diverse_user import BEHAVIOURS
from agentgym.envs.user import UserSimulator, UserState, UserTurn
from agentgym.eval.harness import RESULTS, _claim_run_dir, _env_creator, _takes_option, episode_seed, load_results
from agentgym.eval.oracles import EpisodeAgent
from agentgym.eval.scripted import READ_PREFIXES
from agentgym.eval.suites import Suite
from agentgym.rollout.agent import CHARS_PER_TOKEN, AgentConfig, Episode, EpisodeCheckpoint
from agentgym.rollout.policy import Completion, Policy
from agentgym.rollout.trajectory import Turn
from agentgym.rollout.tree import SuccessPredictor, turn_entropy

__all__ = [
    "BranchingConfig",
    "check_user_side",
    "failure_metrics",
    "over_seeds",
    "policy_users",
    "replay",
    "run_branching",
    "run_monte_carlo",
    "summarize_run",
]

JUNCTIONS = "junctions.jsonl"
DONE = "done.jsonl"
SUMMARY = "summary.json"
MODES = ("branching", "monte_carlo")

#: ``policy`` may be a factory ``(env_id, env_kwargs) -> Policy`` (the scripted agents, oracles).
PolicyFactory = Callable[[str, dict], Policy]


@dataclass(frozen=True)
class BranchingConfig:
    """How a branching (or Monte Carlo) evaluation spends its budget.

    Attributes:
        token_budget: agent + user tokens per task (each mode stops a task once it has spent them;
            the episode under way is finished and counted).
        behaviours: the user behaviours branches use (names of :data:`BEHAVIOURS`).
        state_weight: weight of the state-changing calls that followed a junction's user turn (up to 3, scaled to 1).
        entropy_weight: weight of the agent's sampling entropy at its next turn.
        predictor_weight: weight of the success predictor's p(1−p) (4·p(1−p), at most 1).
        max_turns: the agent's turn limit per episode (the env's own applies too).
    """

    token_budget: int = 200_000
    behaviours: tuple[str, ...] = tuple(BEHAVIOURS)
    state_weight: float = 2.0
    entropy_weight: float = 1.0
    predictor_weight: float = 1.0
    max_turns: int | None = 40

    def __post_init__(self):
        if self.token_budget < 1:
            raise ValueError(f"token_budget must be at least 1, got {self.token_budget}")
        unknown = sorted(set(self.behaviours) - set(BEHAVIOURS))
        if unknown or not self.behaviours:
            raise ValueError(f"behaviours must be some of {list(BEHAVIOURS)}, got {list(self.behaviours)}")


# ---------------------------------------------------------------------- metering
def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        return sum(_chars(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_chars(v) for v in value)
    return 0


class _MeteredUser(UserSimulator):
    """The env's user, counting the tokens of every user turn and steering the opening of the next reset."""

    def __init__(self, inner: UserSimulator):
        self.inner = inner
        self.name = inner.name
        self.tokens = 0
        self.opening: list[str] = []  # directives the next episode's user starts with

    def start(self, system_prompt, tools=(), script=()) -> UserState:
        state = self.inner.start(system_prompt, tools, script)
        for directive in self.opening:
            state.steer(directive=directive)
        return state

    def reply(self, state: UserState, conversation) -> tuple[UserTurn, UserState]:
        turn, next_state = self.inner.reply(state, conversation)
        if turn.tokens is not None:  # a model's own count
            self.tokens += turn.tokens
        else:
            chars = len(state.instructions()) + _chars(list(conversation)) + len(turn.text) + _chars(turn.tool_calls)
            self.tokens += math.ceil(chars / CHARS_PER_TOKEN)
        return turn, next_state

    def _respond(self, state, conversation) -> UserTurn:  # reply() delegates whole
        raise NotImplementedError


def _agent_tokens(turn: Turn, prompt_estimate: int) -> int:
    """A turn's prompt + completion tokens: its ids, else the endpoint's usage, else 4 characters per token."""
    usage = turn.usage or {}
    prompt = len(turn.prompt_ids) or int(usage.get("prompt_tokens") or 0) or prompt_estimate
    completion = len(turn.completion_ids) or int(usage.get("completion_tokens") or 0)
    return prompt + (completion or math.ceil(len(turn.action) / CHARS_PER_TOKEN))


# ---------------------------------------------------------------------- the tree
@dataclass
class _Junction:
    id: int
    task_id: str
    leaf: int  # the leaf whose path it was found on
    turn: int  # turns before it (0: the opening)
    kind: str  # "opening" or "answer"
    checkpoint: EpisodeCheckpoint | None = None
    completion: Completion | None = None  # the agent's message the user answers there
    directives: list[str] = field(default_factory=list)  # behaviours already on the path to it
    after_calls: int = 0
    entropy: float = 0.0
    prefix: list[Turn] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    repeats: int = 0
    saved: bool = False
    saved_as: int = -1


@dataclass
class _Leaf:
    episode: Episode
    tokens_agent: int = 0
    tokens_user: int = 0
    junctions: list[_Junction] = field(default_factory=list)


class _TaskRun:
    """One task's episodes in one mode and seed: plays them, keeps their junctions, writes their rows."""

    def __init__(
        self, ctx: _Context, env: tuple[str, dict], task_id: str, env_factory: Callable[[], Any], user: _MeteredUser
    ):
        self.ctx = ctx
        self.env_id, self.env_kwargs = env
        self.task_id = task_id
        self.env_factory = env_factory
        self.user = user
        self.spent = 0
        self.leaves = 0
        self.user_counted = 0  # the user's tokens charged to leaves so far
        # Why the task stopped early: an episode that ended before the agent's first reply (its prompt
        # overflows the model's window, the env failed at reset) ends every further one the same way.
        self.stalled: str | None = None
        self.junctions: list[_Junction] = []
        self.signatures: Counter[str] = Counter()

    async def play(
        self, episode: Episode, parent: _Junction | None, behaviour: str | None, first: Completion | None
    ) -> _Leaf:
        """Play ``episode`` to its end (first sending ``first``, the junction's message), keeping its junctions."""
        agent, leaf_id = self.ctx.agent, self.leaves
        self.leaves += 1
        leaf = _Leaf(episode)
        directives = [*(parent.directives if parent else []), *([behaviour] if behaviour else [])]
        if parent is None and self.ctx.mode == "branching":
            leaf.junctions.append(
                _Junction(len(self.junctions), self.task_id, leaf_id, 0, "opening", directives=directives)
            )
            self.junctions.append(leaf.junctions[-1])
        completion = first
        while not episode.done:
            prompt_estimate = math.ceil(_chars(episode.messages) / CHARS_PER_TOKEN)
            if completion is None:
                completion = await agent.sample(episode)
                charged = True
            else:
                charged = False  # the junction's message was paid for on the parent's path
            env = episode.env.unwrapped
            action: Any = completion.text
            if completion.tool_calls:
                action = {"content": completion.text, "tool_calls": completion.tool_calls}
            if self.ctx.mode == "branching" and completion is not first and not env.parse(action).calls:
                junction = _Junction(
                    len(self.junctions), self.task_id, leaf_id, episode.turn, "answer",
                    checkpoint=await episode.checkpoint(), completion=completion, directives=_directives(episode, directives),
                    prefix=list(episode.turns),
                )  # fmt: skip
                self.junctions.append(junction)
                leaf.junctions.append(junction)
            turn = await agent.apply(episode, completion)
            if charged:
                leaf.tokens_agent += _agent_tokens(turn, prompt_estimate)
            completion = None
            if self.ctx.config.max_turns is not None and episode.turn >= self.ctx.config.max_turns:
                episode.done = True
        # Everything the user said since the last leaf: this episode's reset (its opening turn) and its turns.
        leaf.tokens_user, self.user_counted = self.user.tokens - self.user_counted, self.user.tokens
        self.spent += leaf.tokens_agent + leaf.tokens_user
        if not episode.turns and episode.error:
            self.stalled = episode.error
        for junction in leaf.junctions:  # what followed each junction on this path
            rest = episode.turns[junction.turn + 1 :]
            writes = 0
            for t in rest:
                names = [name for name, _ in _calls(episode, t)]
                if not names:
                    break  # the next user turn: what follows hinges on that junction instead
                writes += sum(not name.startswith(READ_PREFIXES) for name in names)
            junction.after_calls = writes
            junction.entropy = turn_entropy(rest[0]) if rest else 0.0
        self.ctx.learn(episode)
        self._record(leaf_id, leaf, parent, behaviour, directives)
        return leaf

    def _record(
        self, leaf_id: int, leaf: _Leaf, parent: _Junction | None, behaviour: str | None, directives: list[str]
    ) -> None:
        episode = leaf.episode
        calls = [c for t in episode.turns for c in _calls(episode, t)]
        users = [t.observation for t in episode.turns if not _calls(episode, t)]
        last = episode.turns[-1] if episode.turns else None
        ending = str(((last.info or {}).get("grade") or {}).get("termination", "")) if last else ""
        signature = _digest([calls, users])
        failure = None if episode.success else _digest([calls, ending])
        self.signatures[signature] += 1
        if parent is not None and self.signatures[signature] > 1:
            parent.repeats += 1
            for junction in leaf.junctions:  # a known episode again: its junctions are known ones too
                if junction in self.junctions:
                    self.junctions.remove(junction)
                if junction.checkpoint is not None:
                    junction.checkpoint.release()
        if parent is not None and not parent.saved and parent.checkpoint is not None:
            self.ctx.save_junction(parent, episode)
        row = {
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "task_id": self.task_id,
            "mode": self.ctx.mode,
            "seed": self.ctx.seed,
            "leaf": leaf_id,
            "junction": None if parent is None else parent.id,
            "parent_leaf": None if parent is None else parent.leaf,
            "junction_file": None
            if parent is None or not parent.saved
            else f"junctions/{self.ctx.junction_name(parent)}.snapshot",
            "junction_turn": None if parent is None else parent.turn,
            "behaviour": behaviour,
            "behaviours": [_name_of(d) for d in _directives(episode, directives)],
            "success": bool(episode.success),
            "reward": float(sum(t.reward for t in episode.turns)),
            "turns": len(episode.turns),
            "tokens_agent": leaf.tokens_agent,
            "tokens_user": leaf.tokens_user,
            "tokens": leaf.tokens_agent + leaf.tokens_user,
            "signature": signature,
            "failure_signature": failure,
            "ending": ending,
            "error": episode.error,
            "trajectory": episode.trajectory().to_dict(),
        }
        self.ctx.write(RESULTS, row)


def _directives(episode: Episode, steered: list[str]) -> list[str]:
    """The behaviours the episode's user took on: its final state's directives (a stochastic user's draws too)."""
    state = getattr(episode.env.unwrapped, "user_state", None)
    return list(state.directives) if isinstance(state, UserState) else steered


def _name_of(directive: str) -> str:
    return next((name for name, b in BEHAVIOURS.items() if b.directive == directive), directive)


def _calls(episode: Episode, turn: Turn) -> list[list]:
    parsed = episode.env.unwrapped.parse(turn.action)
    return [[c.name, c.arguments] for c in parsed.calls]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


class _Context:
    """What every task of one (mode, seed) run shares: the agent, the predictor, the run directory."""

    def __init__(
        self, mode: str, seed: int, config: BranchingConfig, agent: EpisodeAgent, out: Path, numbering: Iterator[int]
    ):
        self.mode, self.seed, self.config, self.agent, self.out = mode, seed, config, agent, out
        self.predictor = SuccessPredictor()
        self.numbering = numbering  # junction file numbers, shared by the run's contexts (their tasks run at once)

    def learn(self, episode: Episode) -> None:
        for i in range(1, len(episode.turns) + 1):
            self.predictor.update(episode.turns[:i], episode.success)

    def junction_name(self, junction: _Junction) -> str:
        return f"{self.mode}-{self.seed}-{junction.saved_as}"

    def save_junction(self, junction: _Junction, episode: Episode) -> None:
        env = episode.env.unwrapped
        junction.saved_as = next(self.numbering)
        (self.out / "junctions").mkdir(exist_ok=True)
        assert junction.checkpoint is not None and junction.checkpoint.snapshot is not None
        data = env.export_snapshot(junction.checkpoint.snapshot)
        (self.out / "junctions" / f"{self.junction_name(junction)}.snapshot").write_bytes(data)
        junction.saved = True
        completion = junction.completion
        self.write(
            JUNCTIONS,
            {
                "mode": self.mode,
                "seed": self.seed,
                "task_id": junction.task_id,
                "junction": junction.id,
                "leaf": junction.leaf,
                "turn": junction.turn,
                "file": f"junctions/{self.junction_name(junction)}.snapshot",
                "message": None
                if completion is None
                else {"text": completion.text, "tool_calls": completion.tool_calls},
                "directives": junction.directives,
                "messages": junction.checkpoint._episode.messages,  # the conversation as the agent saw it
            },
        )

    def write(self, name: str, row: dict) -> None:
        with open(self.out / name, "a") as file:
            file.write(json.dumps(row, default=str) + "\n")


def _score(ctx: _Context, junction: _Junction, novel: set[str], order: Sequence[str]) -> tuple[float, str | None]:
    """The junction's score and the behaviour to branch with next (``None``: nothing left to try there)."""
    choices = [
        name
        for name in order
        if name not in junction.tried
        and BEHAVIOURS[name].directive not in junction.directives
        and BEHAVIOURS[name].applies_to(junction.kind)
    ]
    if not choices or (len(junction.tried) >= 2 and junction.repeats == len(junction.tried)):
        return 0.0, None  # nothing left, or saturated: every branch from here repeated a known episode
    fresh = [name for name in choices if name not in novel]
    behaviour = (fresh or choices)[0]
    config = ctx.config
    p = ctx.predictor.predict(junction.prefix) if ctx.predictor.ready else 0.5
    score = (
        1.0
        + config.state_weight * min(junction.after_calls, 3) / 3
        + config.entropy_weight * junction.entropy
        + config.predictor_weight * 4 * p * (1 - p)
    )
    score *= 1.5 if fresh else 1.0
    return score / (1 + len(junction.tried)) / (1 + junction.repeats), behaviour


# ---------------------------------------------------------------------- the runs
async def _branch_task(run: _TaskRun) -> None:
    env = run.env_factory()
    try:
        episode = await run.ctx.agent.start(env, run.task_id, seed=run.ctx.seed)
    except BaseException:
        env.close()
        raise
    await run.play(episode, None, None, None)
    leaves = [episode]
    # Which untried behaviour a junction gets first: an order drawn per seed and task (ties between junctions
    # go to the first found), so seeds explore differently.
    order = list(run.ctx.config.behaviours)
    random.Random(episode_seed(run.ctx.seed, run.task_id, 1)).shuffle(order)
    used: set[str] = set()
    while run.spent < run.ctx.config.token_budget and not run.stalled:
        best = max(((j, *_score(run.ctx, j, used, order)) for j in run.junctions), key=lambda x: x[1], default=None)
        if best is None or best[2] is None:
            break
        junction, _, behaviour = best
        junction.tried.append(behaviour)
        used.add(behaviour)
        directive = BEHAVIOURS[behaviour].directive
        if junction.kind == "opening":
            run.user.opening = [*junction.directives, directive]
            env = run.env_factory()
            try:
                branch = await run.ctx.agent.start(env, run.task_id, seed=run.ctx.seed)
            finally:
                run.user.opening = []
            await run.play(branch, junction, behaviour, None)
        else:
            assert junction.checkpoint is not None
            branch = await junction.checkpoint.fork()
            cast(Any, branch.env.unwrapped).steer_user(directive=directive)
            await run.play(branch, junction, behaviour, junction.completion)
        leaves.append(branch)
    for junction in run.junctions:
        if junction.checkpoint is not None:
            junction.checkpoint.release()
    for leaf in leaves:
        await leaf.aclose()


async def _linear_task(run: _TaskRun) -> None:
    while run.spent < run.ctx.config.token_budget and not run.stalled:
        env = run.env_factory()
        try:
            episode = await run.ctx.agent.start(env, run.task_id, seed=run.ctx.seed + run.leaves)
            await run.play(episode, None, None, None)
        finally:
            env.close()
        for junction in run.junctions:
            if junction.checkpoint is not None:
                junction.checkpoint.release()
        run.junctions.clear()


async def _run(
    mode: str,
    suite: Suite,
    policy: Policy | PolicyFactory,
    user: Callable[[int], UserSimulator],
    *,
    config: BranchingConfig = BranchingConfig(),
    out_dir: str | Path,
    seed: int = 0,
    agent_config: AgentConfig | None = None,
    model: str | None = None,
    user_name: str = "user",
    concurrency: int = 1,
) -> dict:
    """A run in ``mode`` (``branching`` or ``monte_carlo``): the options :func:`run_branching` and :func:`run_monte_carlo` take."""
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)

    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model or (policy.name if isinstance(policy, Policy) else getattr(policy, "__name__", "policy"))
    _claim_run_dir(
        out,
        {
            "suite": suite.name,
            "tasks": sorted(t.task_id for t in suite.tasks),
            "model": model,
            "user": user_name,
            "config": dataclasses.asdict(config),
        },
    )
    done = {(r["mode"], r["seed"], r["task_id"]) for r in load_results(out / DONE)}
    _drop_unfinished(out, done)
    agent_config = agent_config or AgentConfig(system_prompt=None)
    check_user_side(suite)
    gate = asyncio.Semaphore(concurrency)
    numbering = itertools.count(len(load_results(out / JUNCTIONS)))

    async def play_task(ctx: _Context, env_id: str, env_kwargs: dict, task_id: str) -> None:
        async with gate:
            metered = _MeteredUser(user(episode_seed(seed, task_id, 0)))

            def factory():
                return gymnasium.make(env_id, **env_kwargs, user=metered)

            run = _TaskRun(ctx, (env_id, env_kwargs), task_id, factory, metered)
            await (_branch_task(run) if mode == "branching" else _linear_task(run))
            ctx.write(DONE, {"mode": mode, "seed": seed, "task_id": task_id})

    plays = []
    for (env_id, kwargs_json), tasks in suite.by_env().items():
        env_kwargs = json.loads(kwargs_json)
        env_policy = policy if isinstance(policy, Policy) else policy(env_id, env_kwargs)
        ctx = _Context(mode, seed, config, EpisodeAgent(env_policy, agent_config), out, numbering)
        plays += [
            asyncio.ensure_future(play_task(ctx, env_id, env_kwargs, task.task_id))
            for task in tasks
            if (mode, seed, task.task_id) not in done
        ]
    try:
        await asyncio.gather(*plays)
    except BaseException:  # the first failure is raised as it is; the tasks still playing are stopped first
        for play in plays:
            play.cancel()
        await asyncio.gather(*plays, return_exceptions=True)
        raise
    rows = [r for r in load_results(out / RESULTS) if r["mode"] == mode and r["seed"] == seed]
    return failure_metrics(rows)


def policy_users(policy: Policy, max_tokens: int) -> Callable[[str], Callable[[int], UserSimulator]]:
    """``policy`` as the simulated user of both modes: ``mode -> (seed -> PolicyUser)`` (the ``user`` argument of the runs).

    Branches are steered, so their user is greedy; Monte Carlo's samples at temperature 1 (its
    only source of diversity). Each turn is capped at ``max_tokens``. The users answer from the
    env's thread on the loop that makes them (:class:`~agentgym.rollout.user.PolicyUser`'s
    ``loop=``): call the factory inside the running loop.
    """
    from agentgym.rollout.policy import SamplingParams
    from agentgym.rollout.user import PolicyUser

    def for_mode(mode: str) -> Callable[[int], UserSimulator]:
        temperature = 0.0 if mode == "branching" else 1.0
        return lambda seed: PolicyUser(
            policy,
            SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
            loop=asyncio.get_running_loop(),
        )

    return for_mode


def check_user_side(suite: Suite) -> None:
    """Every env of ``suite`` has a simulated user to steer (a ``user=`` option and ``steer_user``); else :class:`ValueError`."""
    for env_id, _ in suite.by_env():
        creator = _env_creator(env_id)
        if not (_takes_option(creator, "user") and hasattr(creator, "steer_user")):
            raise ValueError(
                f"{env_id} has no simulated user (no user= option and steer_user), so it cannot branch at user turns"
            )


def _drop_unfinished(out: Path, done: set) -> None:
    """Rows of tasks a stopped run did not finish: removed, so the rerun plays those tasks whole."""
    for name in (RESULTS, JUNCTIONS):
        path = out / name
        if path.exists():
            rows = [r for r in load_results(path) if (r["mode"], r["seed"], r["task_id"]) in done]
            path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))


async def run_branching(
    suite: Suite, policy: Policy | PolicyFactory, user: Callable[[int], UserSimulator], **options: Any
) -> dict:
    """Branching evaluation of every task of ``suite`` (see the module docstring); returns :func:`failure_metrics` of its episodes.

    ``user(seed)`` makes the user simulator of each task's envs (it must follow directives: a
    :class:`~agentgym.envs.diverse_user.DiverseScriptedUser` or a policy user); the envs take it
    as ``user=``. The ``options``: ``out_dir`` (the run directory; required), ``config``
    (a :class:`BranchingConfig`), ``seed`` (0), ``agent_config`` (default: no system prompt of the
    agent loop's own: the env's first observation has the agent's instructions), ``model`` (the
    name recorded; default the policy's), ``user_name`` (``"user"``) and ``concurrency`` (1: tasks
    played at once, each task's episodes one after another since a branch's choice needs the outcomes
    before it; above 1 the shared success predictor learns in the order episodes finish, so junction
    rankings, and so the results, can differ from a sequential run's).
    """
    return await _run("branching", suite, policy, user, **options)


async def run_monte_carlo(
    suite: Suite, policy: Policy | PolicyFactory, user: Callable[[int], UserSimulator], **options: Any
) -> dict:
    """Linear Monte Carlo at ``config.token_budget`` per task, into the same kind of run directory (rows with mode ``monte_carlo``); ``options`` as :func:`run_branching`'s."""
    return await _run("monte_carlo", suite, policy, user, **options)


# ---------------------------------------------------------------------- metrics (pure)
def failure_metrics(rows: Sequence[Mapping]) -> dict:
    """Failures found by one run's episodes: counts, failures per 1,000 tokens, distinct failure signatures, tasks with a failure."""
    tokens = sum(int(r["tokens"]) for r in rows)
    failures = [r for r in rows if not r["success"]]
    return {
        "episodes": len(rows),
        "tokens": tokens,
        "failures": len(failures),
        "failures_per_1k_tokens": 1000 * len(failures) / tokens if tokens else None,
        "distinct_failures": len({(r["task_id"], r["failure_signature"]) for r in failures}),
        "tasks": len({r["task_id"] for r in rows}),
        "tasks_with_failure": len({r["task_id"] for r in failures}),
    }


def over_seeds(runs: Sequence[Mapping], resamples: int = 10_000) -> dict:
    """Each numeric metric of several seeds' :func:`failure_metrics`: its mean and a 95% bootstrap interval over the seeds."""
    from agentgym.eval.metrics import bootstrap_ci

    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        if values:
            out[key] = {"mean": sum(values) / len(values), "ci95": list(bootstrap_ci(values, resamples=resamples))}
    return out


def summarize_run(out_dir: str | Path) -> dict:
    """Write ``summary.json`` and ``report.html`` of a branching run directory, from its rows; return the summary.

    Per mode: each seed's :func:`failure_metrics`, and :func:`over_seeds` of them; with both modes,
    ``ratio``: branching's mean failures per 1,000 tokens over Monte Carlo's, and the difference
    in mean tasks with a failure.
    """
    from agentgym.eval.report import write_branching_report

    out = Path(out_dir)
    rows = load_results(out / RESULTS)
    run = json.loads((out / "run.json").read_text())
    summary: dict[str, Any] = {
        "suite": run["suite"],
        "model": run["model"],
        "user": run["user"],
        "config": run["config"],
    }
    for mode in MODES:
        seeds = sorted({r["seed"] for r in rows if r["mode"] == mode})
        if seeds:
            by_seed = {
                str(seed): failure_metrics([r for r in rows if r["mode"] == mode and r["seed"] == seed])
                for seed in seeds
            }
            summary[mode] = {"seeds": by_seed, "over_seeds": over_seeds(list(by_seed.values()))}
    if all(mode in summary for mode in MODES):
        b, m = (summary[mode]["over_seeds"] for mode in MODES)
        rate_b, rate_m = (x.get("failures_per_1k_tokens", {}).get("mean") for x in (b, m))
        summary["ratio"] = {
            "failures_per_1k_tokens": rate_b / rate_m if rate_b is not None and rate_m else None,
            "tasks_with_failure_difference": b["tasks_with_failure"]["mean"] - m["tasks_with_failure"]["mean"],
        }
    partial = out / f".{SUMMARY}.tmp"
    partial.write_text(json.dumps(summary, indent=2) + "\n")
    partial.replace(out / SUMMARY)
    write_branching_report(out)
    return summary


# ---------------------------------------------------------------------- replay
def replay(run_dir: str | Path, row: Mapping, user: UserSimulator) -> tuple[bool, dict]:
    """Play a recorded episode (a ``results.jsonl`` row) again: from its junction's snapshot, steered as recorded, with its recorded agent replies.

    ``user`` is the run's kind of user simulator (a deterministic one reproduces the episode; a
    policy user answers afresh). Returns the episode's success and the last step's info
    (``info["grade"]`` says why). A root episode (no junction) is replayed from reset with the
    behaviours its user took on, all from the start (exact for branching's roots, whose only
    behaviours are the opening's).
    """
    import gymnasium

    import agentgym  # noqa: F401

    metered = _MeteredUser(user)
    env = gymnasium.make(row["env_id"], **row["env_kwargs"], user=metered)
    base = cast(Any, env.unwrapped)
    turns = row["trajectory"]["turns"]
    try:
        if row["junction_file"]:
            snapshot = base.import_snapshot((Path(run_dir) / row["junction_file"]).read_bytes())
            base.restore(snapshot)
            snapshot.release()
            base.steer_user(directive=BEHAVIOURS[row["behaviour"]].directive)
            actions = [t["action"] for t in turns[row["junction_turn"] :]]
        else:
            metered.opening = [BEHAVIOURS[name].directive for name in row["behaviours"]]
            base.reset(options={"task_id": row["task_id"]})
            actions = [t["action"] for t in turns]
        info: dict = {}
        for action in actions:
            _, _, terminated, truncated, info = base.step(action)  # a restored env has no reset for the wrappers to see
            if terminated or truncated:
                break
        return bool(info.get("success")), info
    finally:
        env.close()
