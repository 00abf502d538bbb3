"""Tree rollouts: grow a RolloutTree of one task by forking episodes at turn boundaries, within a leaf / env-step budget.

A node is one turn; its children are continuations from the env state after it (forked from
the env's own snapshot, nothing is replayed); a node whose parent is ``None`` is a first turn
taken from the reset state. Shared prefixes are paid for once, and siblings give per-turn
contrast for outcome-only rewards (see :mod:`agentgym.rollout.tree_values`).

Strategies (:class:`TreeConfig`):

* ``"uniform"``: the roots advance in lockstep, one turn per wave; after every ``branch_every``
  turns each live path forks into ``branches`` continuations (itself + forks), paths in order,
  as long as the budget allows.
* ``"entropy"`` / ``"contrast"``: the roots run to the end, keeping a checkpoint at every turn
  boundary; then, again and again until the budget is spent, the best-scoring boundary gets one
  more continuation, run to the end (up to ``concurrency`` at once). A boundary is the state
  after a node whose path already took its next turn; its score is divided by the number of
  continuations already grown from it. ``entropy`` scores it by the mean sampling entropy of
  the turns taken there (its children: where the policy was least sure); ``contrast`` (TRACE)
  by p(1−p), p = P(success | the prefix up to the node) from a shared :class:`SuccessPredictor`
  (or, until it is ready, the Beta(1, 1)-smoothed success rate of the leaves seen below the
  node), so budget goes to prefixes likely to end in mixed outcomes.

At every branch point the new continuation's first completion must differ from its siblings'
(token ids, or text in chat mode); a duplicate is resampled up to ``max_resample`` times.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from agentgym.core import AgentEnv
from agentgym.rollout.agent import Agent, Episode, EpisodeCheckpoint
from agentgym.rollout.policy import Completion, SamplingParams
from agentgym.rollout.trajectory import RolloutTree, Turn

__all__ = ["STRATEGIES", "SuccessPredictor", "TreeConfig", "TreeRollout"]

STRATEGIES = ("uniform", "entropy", "contrast")
BUDGET_CUT = "budget_exhausted: the tree's env-step budget ran out before this episode ended"


@dataclass(frozen=True)
class TreeConfig:
    """How a :class:`TreeRollout` grows one task's tree.

    Attributes:
        strategy: ``"uniform"``, ``"entropy"`` or ``"contrast"`` (see the module docstring).
        roots: independent first episodes from the reset state (at least 1).
        max_leaves: stop growing at this many leaves (``None``: no leaf limit).
        max_env_steps: the most env steps (= tree nodes) the whole tree may take; a path that
            would exceed it is cut and its leaf is marked in ``tree.leaf_errors`` (``None``: no
            limit). At least one of the two budgets must be set.
        branch_every: ``uniform`` only: branch after every k-th turn of a path (k, 2k, ...).
        branches: ``uniform`` only: continuations per branch point (m, the path itself included).
        max_resample: resamples allowed at a branch point to get a first completion that differs
            from its siblings'; after that a duplicate is kept (and counted).
        concurrency: episodes sampling or stepping at once; these LLM calls batch in the policy.

    The depth of a path is capped by the agent (``AgentConfig.max_turns``) and the env's own
    ``max_turns``, as for linear episodes.
    """

    strategy: str = "uniform"
    roots: int = 1
    max_leaves: int | None = 8
    max_env_steps: int | None = None
    branch_every: int = 2
    branches: int = 2
    max_resample: int = 3
    concurrency: int = 8

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.max_leaves is None and self.max_env_steps is None:
            raise ValueError("set a budget: max_leaves and/or max_env_steps")
        for name in ("roots", "branch_every", "branches", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_resample < 0:
            raise ValueError(f"max_resample must be >= 0, got {self.max_resample}")
        for name in ("max_leaves", "max_env_steps"):
            limit = getattr(self, name)
            if limit is not None and limit < self.roots:
                raise ValueError(f"{name}={limit} leaves no room for {self.roots} roots")


class SuccessPredictor:
    """P(success | prefix of turns): an online logistic regression in numpy, shared across tasks and trees.

    Features of a prefix: its depth (log), the fraction of turns whose step reported an error,
    the mean completion logprob, the mean sampling entropy, the reward so far, the fraction of
    completions cut at ``max_tokens``, and a hashed bag of words (``buckets`` bins, L2-normalised)
    of the last action and observation. One SGD step per :meth:`update`; everything is
    deterministic (CRC32 hashing, zero initial weights).

    Until it has seen ``min_examples`` updates with both outcomes (:attr:`ready`) its output says
    nothing useful, so the tree falls back to the Beta(1, 1)-smoothed success rate of the leaves
    observed below a node.
    """

    NUMERIC = ("log_depth", "error_rate", "mean_logprob", "mean_entropy", "reward", "length_rate")

    def __init__(self, buckets: int = 128, lr: float = 0.5, l2: float = 1e-4, min_examples: int = 8):
        self.buckets = buckets
        self.lr = lr
        self.l2 = l2
        self.min_examples = min_examples
        self.weights = np.zeros(len(self.NUMERIC) + buckets + 1)  # the last weight is the bias
        self.updates = 0
        self.successes = 0

    @property
    def ready(self) -> bool:
        return self.updates >= self.min_examples and 0 < self.successes < self.updates

    def features(self, turns: Sequence[Turn]) -> np.ndarray:
        x = np.zeros(len(self.weights))
        x[-1] = 1.0
        if not turns:
            return x
        n = len(turns)
        logprobs = [lp for t in turns for lp in t.logprobs]
        entropies = [t.entropy for t in turns if t.entropy is not None]
        x[0] = math.log1p(n)
        x[1] = sum(bool(t.info.get("error")) for t in turns) / n
        x[2] = math.fsum(logprobs) / len(logprobs) if logprobs else 0.0
        x[3] = math.fsum(entropies) / len(entropies) if entropies else 0.0
        x[4] = math.fsum(t.reward for t in turns)
        x[5] = sum(t.finish_reason == "length" for t in turns) / n
        bag = x[len(self.NUMERIC) : -1]
        for word in re.findall(r"\w+", f"{turns[-1].action} {turns[-1].observation}".lower()):
            bag[zlib.crc32(word.encode()) % self.buckets] += 1.0
        norm = np.linalg.norm(bag)
        if norm:
            bag /= norm
        return x

    def predict(self, turns: Sequence[Turn]) -> float:
        return _sigmoid(float(self.weights @ self.features(turns)))

    def update(self, turns: Sequence[Turn], success: bool) -> None:
        x = self.features(turns)
        error = float(success) - _sigmoid(float(self.weights @ x))
        self.weights += self.lr * (error * x - self.l2 * self.weights)
        self.updates += 1
        self.successes += bool(success)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def completion_key(completion: Completion) -> tuple:
    """What makes two completions the same action: their token ids, or (chat mode) text and tool calls."""
    if completion.token_ids:
        return tuple(completion.token_ids)
    calls = json.dumps(completion.tool_calls, sort_keys=True) if completion.tool_calls else None
    return (completion.text, calls)


def turn_entropy(turn: Turn) -> float:
    """The turn's sampling entropy, or −mean logprob (its Monte Carlo estimate) when the policy gave none."""
    if turn.entropy is not None:
        return turn.entropy
    return -math.fsum(turn.logprobs) / len(turn.logprobs) if turn.logprobs else 0.0


class TreeRollout:
    """Grows rollout trees with an :class:`~agentgym.rollout.agent.Agent`: ``tree = await TreeRollout(agent, config).run(env, task_id)``.

    ``predictor`` is shared by every tree this object grows (and may be shared between objects):
    each finished, error-free path updates it with all its prefixes. ``contrast`` creates one
    when none is given.
    """

    def __init__(self, agent: Agent, config: TreeConfig = TreeConfig(), predictor: SuccessPredictor | None = None):
        self.agent = agent
        self.config = config
        self.predictor = predictor if predictor is not None or config.strategy != "contrast" else SuccessPredictor()

    async def run(self, env: AgentEnv, task_id: str | None = None, seed: int | None = None) -> RolloutTree:
        """Grow one tree from ``env`` reset to ``task_id``.

        ``env`` stays the caller's (it is stepped as the first root's env, never closed). Every
        env forked here is closed and every snapshot released before this returns, also when
        it raises or is cancelled.
        """
        started = time.perf_counter()
        state = _RunState(self, env)
        try:
            first = await self.agent.start(env, task_id, seed)
            state.tree = RolloutTree(
                task_id=first.task_id, env_id=env.unwrapped.kind, initial_observation=first.initial_observation
            )
            roots = [first]
            if self.config.roots > 1:
                # Forking the reset state gives independent episodes without a way to build envs.
                checkpoint = await state.checkpoint(first)
                try:
                    roots += await _all(state.fork(checkpoint) for _ in range(self.config.roots - 1))
                finally:
                    checkpoint.release()
            # Each root is one leaf and is owed its first step (validated to fit the budget).
            state.leaves = state.steps = len(roots)
            if self.config.strategy == "uniform":
                await self._uniform(state, roots)
            else:
                await self._adaptive(state, roots)
        finally:
            # Shielded: a second cancellation must not stop envs from being closed.
            await asyncio.shield(asyncio.ensure_future(state.aclose()))
        tree = state.tree
        tree.metadata.update(
            {
                "strategy": self.config.strategy,
                "roots": self.config.roots,
                "budget": {"max_leaves": self.config.max_leaves, "max_env_steps": self.config.max_env_steps},
                "leaves": len(tree.leaves),
                "env_steps": tree.num_env_steps,
                "generated_tokens": tree.num_generated_tokens + state.discarded_tokens,
                "discarded_tokens": state.discarded_tokens,
                "branch_points": sum(n.branched for n in tree.nodes),
                "resamples": state.resamples,
                "unresolved_duplicates": state.unresolved,
                "budget_cuts": state.cuts,
                "wall_time_s": round(time.perf_counter() - started, 4),
            }
        )
        return tree

    # ------------------------------------------------------------------ uniform
    async def _uniform(self, state: _RunState, roots: list[Episode]) -> None:
        k, m = self.config.branch_every, self.config.branches
        live: list[tuple[Episode, int | None]] = []
        for episode in roots:  # an episode can end at reset (a prompt that cannot fit)
            if episode.done:
                await state.close(episode)
            else:
                live.append((episode, None))
        paid = True  # the roots' first steps were reserved by run()
        while live:
            # Budget is handed out here, in path order, so the tree's shape does not depend on
            # which env happens to answer first.
            # Live paths' own next turns come first, so branching never cuts a path short.
            going = []
            for episode, node in live:
                if paid or state.take_steps(1):
                    going.append((episode, node))
                else:
                    state.cut(node)
                    await state.close(episode)
            paid = False
            groups = []
            for episode, node in going:
                extra = 0
                if episode.turn % k == 0 and episode.turn:
                    extra = int(min(m - 1, state.leaves_left(), state.steps_left()))
                    state.leaves += extra
                    state.steps += extra
                groups.append((episode, node, extra))
            waves = await _all(self._uniform_turn(state, *group) for group in groups)
            live = [path for wave in waves for path in wave]

    async def _uniform_turn(
        self, state: _RunState, episode: Episode, node: int | None, extra: int
    ) -> list[tuple[Episode, int]]:
        """One turn of one path, forked into ``1 + extra`` continuations first; returns the live ones."""
        episodes = [episode]
        if extra:
            checkpoint = await state.checkpoint(episode)
            try:
                episodes += await _all(state.fork(checkpoint) for _ in range(extra))
            finally:
                checkpoint.release()
            state.tree.nodes[node].branched = True
        completions = await _all(self._sample(state, e) for e in episodes)
        if extra:
            taken: set[tuple] = set()
            for i, e in enumerate(episodes):
                completions[i] = await self._distinct(state, e, completions[i], taken)
        nodes = await _all(self._apply(state, e, node, c) for e, c in zip(episodes, completions))
        live = []
        for e, child in zip(episodes, nodes):
            if e.done:
                state.finish(child, e)
                await state.close(e)
            else:
                live.append((e, child))
        return live

    # ------------------------------------------------------------------ entropy / contrast
    async def _adaptive(self, state: _RunState, roots: list[Episode]) -> None:
        await _all(self._run_path(state, episode, None) for episode in roots)
        tasks: set[asyncio.Task] = set()
        try:
            while True:
                while len(tasks) < self.config.concurrency and state.leaves_left() > 0 and state.steps_left() > 0:
                    node = self._pick(state)
                    if node is None:
                        break
                    # The continuation's leaf and first step are paid now, so it always adds a node.
                    state.leaves += 1
                    state.steps += 1
                    state.continuations[node] += 1
                    tasks.add(asyncio.ensure_future(self._grow(state, node)))
                if not tasks:
                    return
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                # A failed continuation fails the tree. Every finished one's outcome is read first: one left unread
                # is logged with its traceback when it is collected, at any moment and in any thread.
                errors = [error for error in (task.exception() for task in done) if error is not None]
                if errors:
                    raise errors[0]
        finally:
            await _cancel(tasks)

    def _pick(self, state: _RunState) -> int | None:
        """The node whose state gets the next continuation: the best score ÷ continuations grown from it (ties: the lowest id)."""
        # Only nodes whose own continuation already took its next turn: that turn's action is
        # then known, so the new sibling can be made to differ from it.
        candidates = [n for n in state.checkpoints if state.tree.nodes[n].children]
        if not candidates:
            return None
        score = self._scorer(state)
        return max(candidates, key=lambda n: (score(n) / state.continuations[n], -n))

    def _scorer(self, state: _RunState) -> Callable[[int], float]:
        if self.config.strategy == "entropy":
            # A node's children are the decisions sampled at the state after it: their entropy says
            # how unsure the policy was there.
            def entropy(node: int) -> float:
                children = state.tree.nodes[node].children
                return math.fsum(turn_entropy(state.tree.nodes[c].turn) for c in children) / len(children)

            return entropy
        if self.predictor.ready:
            p = state.prediction
        else:
            successes, counts = state.outcomes_below()

            def p(node: int) -> float:
                return (successes[node] + 1) / (counts[node] + 2)

        def contrast(node: int) -> float:
            q = p(node)
            return q * (1.0 - q)

        return contrast

    async def _grow(self, state: _RunState, node: int) -> None:
        episode = await state.fork(state.checkpoints[node])
        state.tree.nodes[node].branched = True
        await self._run_path(state, episode, node, siblings=state.sibling_keys(node))

    async def _run_path(
        self, state: _RunState, episode: Episode, node: int | None, siblings: set[tuple] | None = None
    ) -> None:
        """Run ``episode`` (at the state after ``node``) to its end, checkpointing every turn boundary.

        Its first step was paid for by the caller; ``siblings`` holds the first-completion keys
        it must differ from when it starts at a branch point.
        """
        try:
            paid = True
            while not episode.done:
                if not paid and not state.take_steps(1):
                    state.cut(node)
                    return
                paid = False
                completion = await self._sample(state, episode)
                if siblings is not None:
                    completion = await self._distinct(state, episode, completion, siblings)
                    siblings = None
                node = await self._apply(state, episode, node, completion)
                if not episode.done:
                    state.checkpoints[node] = await state.checkpoint(episode)
                    state.continuations[node] = 1  # this path itself
            state.finish(node, episode)
        finally:
            await state.close(episode)

    # ------------------------------------------------------------------ turns
    async def _sample(self, state: _RunState, episode: Episode, sampling: SamplingParams | None = None) -> Completion:
        async with state.slots:
            return await self.agent.sample(episode, sampling)

    async def _distinct(
        self, state: _RunState, episode: Episode, completion: Completion, taken: set[tuple]
    ) -> Completion:
        """``completion``, or a resample of it, whose key is not in ``taken`` (then added to it)."""
        tries = 0
        while completion_key(completion) in taken and tries < self.config.max_resample:
            tries += 1
            state.discarded_tokens += len(completion.token_ids)
            completion = await self._sample(state, episode, self._resampling(tries))
        state.resamples += tries
        key = completion_key(completion)
        if key in taken:
            state.unresolved += 1
        taken.add(key)
        return completion

    def _resampling(self, attempt: int) -> SamplingParams | None:
        # A seeded policy would repeat itself exactly; shift the seed per attempt instead.
        sampling = self.agent.config.sampling
        return None if sampling.seed is None else replace(sampling, seed=sampling.seed + attempt)

    async def _apply(self, state: _RunState, episode: Episode, parent: int | None, completion: Completion) -> int:
        async with state.slots:
            turn = await self.agent.apply(episode, completion)
        node = state.tree.add(parent, turn)
        # the bytes of the images this turn's prompt held, kept once per tree for its paths and the store
        state.tree.images.update({h: episode.images[h] for h in turn.image_hashes if h in episode.images})
        state.keys[node.id] = completion_key(completion)
        return node.id


class _RunState:
    """One tree's bookkeeping: budget counters, checkpoints, and every env and snapshot it must free."""

    def __init__(self, rollout: TreeRollout, root_env: AgentEnv):
        self.rollout = rollout
        self.config = rollout.config
        self.root_env = root_env
        self.tree: RolloutTree | None = None
        self.leaves = 0
        self.steps = 0
        self.resamples = 0
        self.discarded_tokens = 0  # sampled, then resampled away as a duplicate sibling
        self.unresolved = 0
        self.cuts = 0
        self.slots = asyncio.Semaphore(self.config.concurrency)
        self.keys: dict[int, tuple] = {}  # node -> its completion's key
        self.taken: dict[int, set[tuple]] = {}  # node -> its children's first-completion keys
        self.checkpoints: dict[int, EpisodeCheckpoint] = {}  # node -> the boundary after it
        self.continuations: Counter[int] = Counter()  # node -> continuations grown from it
        self._held: list[EpisodeCheckpoint] = []
        self._envs: set[AgentEnv] = set()
        self._inflight: set[asyncio.Future] = set()
        self._predictions: dict[int, float] = {}
        self._predictions_at = -1

    # budget
    def leaves_left(self) -> float:
        return math.inf if self.config.max_leaves is None else self.config.max_leaves - self.leaves

    def steps_left(self) -> float:
        return math.inf if self.config.max_env_steps is None else self.config.max_env_steps - self.steps

    def take_steps(self, n: int) -> bool:
        if self.steps_left() < n:
            return False
        self.steps += n
        return True

    def cut(self, node: int | None) -> None:
        self.cuts += 1
        if node is not None and self.tree.nodes[node].is_leaf:
            self.tree.leaf_errors[node] = BUDGET_CUT

    # outcomes
    def finish(self, node: int | None, episode: Episode) -> None:
        """Record a path that ended by itself, and teach the predictor every prefix of it."""
        if node is None:  # ended at reset: no turn, no leaf
            return
        tree = self.tree
        tree.leaf_success[node] = episode.success
        if episode.error:
            tree.leaf_errors[node] = episode.error
            return  # a broken episode says nothing about the prefixes' chances
        predictor = self.rollout.predictor
        if predictor is not None:
            turns = [n.turn for n in tree.path(node)]
            for i in range(1, len(turns) + 1):
                predictor.update(turns[:i], episode.success)

    def outcomes_below(self) -> tuple[list[int], list[int]]:
        """Per node: successes and count of the finished, error-free leaves below it."""
        tree = self.tree
        successes, counts = [0] * len(tree.nodes), [0] * len(tree.nodes)
        for node in reversed(tree.nodes):  # children have higher ids than their parents
            if node.id in tree.leaf_success and node.id not in tree.leaf_errors:
                successes[node.id] += tree.leaf_success[node.id]
                counts[node.id] += 1
            if node.parent is not None:
                successes[node.parent] += successes[node.id]
                counts[node.parent] += counts[node.id]
        return successes, counts

    def prediction(self, node: int) -> float:
        predictor = self.rollout.predictor
        if self._predictions_at != predictor.updates:  # cached until the predictor learns more
            self._predictions, self._predictions_at = {}, predictor.updates
        if node not in self._predictions:
            self._predictions[node] = predictor.predict([n.turn for n in self.tree.path(node)])
        return self._predictions[node]

    def sibling_keys(self, node: int) -> set[tuple]:
        if node not in self.taken:
            self.taken[node] = {self.keys[c] for c in self.tree.nodes[node].children}
        return self.taken[node]

    # resources
    async def checkpoint(self, episode: Episode) -> EpisodeCheckpoint:
        return await self._owned(episode.checkpoint(), self._held.append)

    async def fork(self, checkpoint: EpisodeCheckpoint) -> Episode:
        return await self._owned(checkpoint.fork(), lambda episode: self._envs.add(episode.env))

    async def _owned(self, work: Awaitable[Any], keep: Callable[[Any], None]) -> Any:
        # Forks and snapshots run in worker threads that cancellation cannot stop: whatever they
        # produce is registered when they finish, even if nobody awaits them any more, and
        # aclose() waits for them before freeing everything.
        task = asyncio.ensure_future(work)
        self._inflight.add(task)

        def register(done: asyncio.Future) -> None:
            self._inflight.discard(done)
            if not done.cancelled() and done.exception() is None:
                keep(done.result())

        task.add_done_callback(register)
        return await asyncio.shield(task)

    async def close(self, episode: Episode) -> None:
        if episode.env is not self.root_env:
            await episode.aclose()
            self._envs.discard(episode.env)

    async def aclose(self) -> None:
        await asyncio.gather(*self._inflight, return_exceptions=True)
        # Errors closing one env must not keep the others open or hide the run's own error.
        await asyncio.gather(*(env.aclose() for env in self._envs), return_exceptions=True)
        self._envs.clear()
        for checkpoint in self._held:
            checkpoint.release()


async def _all(work: Iterable[Awaitable[Any]]) -> list[Any]:
    """Await all concurrently; on the first failure (or cancellation) cancel and await the rest, then raise."""
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        await _cancel(tasks)


async def _cancel(tasks: Iterable[asyncio.Future]) -> None:
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
