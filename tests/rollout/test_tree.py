"""Tree rollouts on real envs: budgets, independent branches, distinct siblings, exact tokens per path, and nothing left open."""

import asyncio
import gc
import random
import re
import statistics

import pytest

from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.policy import Completion, PolicyError, SamplingParams
from agentgym.rollout.trajectory import Turn
from agentgym.rollout.tree import BUDGET_CUT, STRATEGIES, SuccessPredictor, TreeConfig, TreeRollout
from agentgym.snapshot import SnapshotReleasedError
from tests.helpers.counter import CounterEnv
from tests.helpers.scripted import ScriptedPolicy
from tests.helpers.tool_calls import call


class ChoicePolicy(ScriptedPolicy):
    """Stands in for sampling: ``choose(rng, asked)`` picks each reply, with ``rng`` seeded by the prompt and
    ``asked`` = how often this exact prompt was asked before, so a tree comes out the same whatever order the
    concurrent calls arrive in (identical prompts are what forks at one state send)."""

    def __init__(self, choose):
        super().__init__([])
        self.choose = choose
        self.asked: dict[tuple, int] = {}

    async def generate(self, prompt_ids, sampling):
        self.prompts.append(list(prompt_ids))
        key = tuple(prompt_ids)
        asked = self.asked.get(key, 0)
        self.asked[key] = asked + 1
        rng = random.Random(repr((len(key), key[-64:], asked)))
        ids = self.chat_format.encode(self.choose(rng, asked)) + [self.chat_format.eos_token_id]
        return Completion(
            text=self.chat_format.decode(ids),
            token_ids=ids,
            logprobs=[-rng.random()] * len(ids),
            policy_version=self.version,
            entropy=2 * rng.random(),
        )


def counter_moves(rng, asked):
    return call("submit") if rng.random() < 0.15 else call("add", n=rng.randint(1, 6))


class Tracked:
    """Env mixin: keeps every env built (forks get the same ``registry`` through their constructor
    arguments), which were torn down, and every snapshot taken. Holding them here keeps garbage
    collection from closing or releasing anything on the tree's behalf."""

    def __init__(self, *, registry: dict, **kwargs):
        super().__init__(**kwargs)
        self.registry = registry
        registry.setdefault("envs", []).append(self)
        registry.setdefault("snapshots", [])
        registry.setdefault("closed", set())

    def snapshot(self):
        snapshot = super().snapshot()
        self.registry["snapshots"].append(snapshot)
        return snapshot

    def _teardown(self):
        self.registry["closed"].add(id(self))
        super()._teardown()


class TrackedCounter(Tracked, CounterEnv):
    pass


def assert_all_freed(root):
    """Every env forked from ``root`` is closed, ``root`` itself is not, every snapshot is released."""
    envs, closed = root.registry["envs"], root.registry["closed"]
    assert envs[0] is root and id(root) not in closed
    assert all(id(env) in closed for env in envs[1:]), f"{sum(id(e) not in closed for e in envs[1:])} forks left open"
    assert all(s.released for s in root.registry["snapshots"])
    if isinstance(root, CounterEnv):
        assert len(root.release_log) == len(root.registry["snapshots"])


def assert_valid_tree(tree):
    for node in tree.nodes:
        assert all(tree.nodes[c].parent == node.id and c > node.id for c in node.children)
        if node.parent is not None:
            assert node.id in tree.nodes[node.parent].children
            assert not tree.nodes[node.parent].turn.done  # nothing continues past the end of an episode
    for leaf in tree.leaves:
        assert leaf.turn.done or tree.leaf_errors.get(leaf.id) == BUDGET_CUT
    assert tree.metadata["leaves"] == len(tree.leaves) and tree.metadata["env_steps"] == len(tree.nodes)


def counter_total(observation: str) -> int | None:
    match = re.match(r"(?:Counter:|Submitted) (\d+)", observation)
    return int(match.group(1)) if match else None


def added(action: str) -> int:
    match = re.search(r'"n": (\d+)', action)
    return int(match.group(1)) if match else 0


@pytest.fixture
def registry():
    return {}


@pytest.fixture
def env(registry):
    env = TrackedCounter(registry=registry, release_log=[])
    yield env
    env.close()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("max_leaves,max_env_steps", [(7, None), (None, 23), (10, 30)])
async def test_every_strategy_grows_a_valid_tree_within_its_budget(env, strategy, max_leaves, max_env_steps):
    config = TreeConfig(
        strategy=strategy, roots=2, max_leaves=max_leaves, max_env_steps=max_env_steps, branch_every=2, branches=3
    )
    tree = await TreeRollout(Agent(ChoicePolicy(counter_moves)), config).run(env, "reach-12")
    assert_valid_tree(tree)
    assert len(tree.roots) == 2 and tree.metadata["strategy"] == strategy
    assert tree.metadata["budget"] == {"max_leaves": max_leaves, "max_env_steps": max_env_steps}
    assert max_leaves is None or len(tree.leaves) <= max_leaves
    assert max_env_steps is None or tree.num_env_steps <= max_env_steps
    assert any(n.branched for n in tree.nodes) and tree.metadata["wall_time_s"] > 0
    if max_env_steps is None and strategy != "uniform":
        assert len(tree.leaves) == max_leaves  # the adaptive strategies spend the whole leaf budget
    if max_leaves is None:
        # A step budget alone is spent to the last step, the paths it cut marked as such.
        assert tree.num_env_steps == max_env_steps
        assert all(t.error == BUDGET_CUT for t in tree.paths() if not t.turns[-1].done)
    assert_all_freed(env)


async def test_branches_run_on_independent_envs(env):
    config = TreeConfig(strategy="uniform", roots=2, max_leaves=12, branch_every=1, branches=3)
    tree = await TreeRollout(Agent(ChoicePolicy(counter_moves)), config).run(env, "reach-30")
    assert tree.metadata["unresolved_duplicates"] == 0
    for path in tree.paths():
        total = 0
        for turn in path.turns:
            total += added(turn.action)
            assert counter_total(turn.observation) == total  # each branch's env saw its own path only
    for node in tree.nodes:
        if node.branched:
            totals = [counter_total(tree.nodes[c].turn.observation) for c in node.children]
            observations = {tree.nodes[c].turn.observation for c in node.children}
            assert len(node.children) == 3 and len(observations) == 3, totals
    assert_all_freed(env)


async def test_a_checkpoint_forks_the_env_state_of_an_earlier_turn(env):
    policy = ScriptedPolicy([call("add", n=5), call("add", n=3), call("submit")])
    agent = Agent(policy)
    episode = await agent.start(env, "reach-7")
    await agent.step(episode)
    checkpoint = await episode.checkpoint()
    while not episode.done:  # the episode goes on past the checkpoint
        await agent.step(episode)
    assert env.total == 8 and episode.turn == 3
    first, second = await checkpoint.fork(), await checkpoint.fork()
    assert (first.env.total, second.env.total, first.turn) == (5, 5, 1) and not first.done
    policy.replies = [call("add", n=2), call("submit")]
    policy.prompts.clear()
    while not first.done:
        await agent.step(first)
    assert first.success and second.env.total == 5 and env.total == 8
    assert first.turns[1].extends(first.turns[0])  # the conversation continued from the checkpoint
    checkpoint.release()
    checkpoint.release()  # idempotent
    with pytest.raises(SnapshotReleasedError):
        await checkpoint.fork()
    await first.aclose()
    await second.aclose()
    assert_all_freed(env)


def stubborn(rng, asked):
    """Repeats itself: the first three draws at any state are the same action."""
    return call("add", n=1 if asked < 3 else min(asked, 10))


@pytest.mark.parametrize("strategy", ["uniform", "entropy"])
async def test_duplicate_siblings_are_resampled(env, strategy):
    agent = Agent(ChoicePolicy(stubborn), AgentConfig(max_turns=4))
    config = TreeConfig(strategy=strategy, max_leaves=6, branch_every=1, branches=3, max_resample=3)
    tree = await TreeRollout(agent, config).run(env, "reach-30")
    branched = [n for n in tree.nodes if n.branched]
    assert branched and tree.metadata["branch_points"] == len(branched)
    for node in branched:
        firsts = [tuple(tree.nodes[c].turn.completion_ids) for c in node.children]
        assert len(set(firsts)) == len(firsts) >= 2
    # Two resamples per branch point either way. uniform, 3 copies: draws 0-2 are add(1); the 2nd
    # copy redraws once (draw 3), the 3rd once (draw 4); 2 copies: draws 0-1, then the 2nd copy
    # redraws draw 2 (a repeat) and draw 3. entropy: the original path took draw 0, the first new
    # sibling redraws draws 1 and 2 (repeats) up to draw 3; a later sibling's first draw is new.
    assert tree.metadata["resamples"] == 2 * len(branched)
    assert tree.metadata["unresolved_duplicates"] == 0
    # Every resample threw away one duplicate completion: its tokens count as generated.
    assert tree.metadata["discarded_tokens"] > 0
    assert tree.metadata["generated_tokens"] == tree.num_generated_tokens + tree.metadata["discarded_tokens"]
    assert_all_freed(env)


async def test_duplicates_are_kept_and_counted_when_resampling_cannot_fix_them(env):
    agent = Agent(ChoicePolicy(lambda rng, asked: call("add", n=1)), AgentConfig(max_turns=3))
    config = TreeConfig(strategy="uniform", max_leaves=4, branch_every=1, branches=2, max_resample=1)
    tree = await TreeRollout(agent, config).run(env, "reach-30")
    copies = sum(len(n.children) - 1 for n in tree.nodes if n.branched)
    assert copies == 3  # 1 → 2 → 4 leaves
    assert tree.metadata["resamples"] == tree.metadata["unresolved_duplicates"] == copies
    assert_all_freed(env)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_token_accounting_holds_along_every_path(env, strategy):
    policy = ChoicePolicy(counter_moves)
    config = TreeConfig(strategy=strategy, roots=2, max_leaves=6, branch_every=2, branches=2)
    tree = await TreeRollout(Agent(policy), config).run(env, "reach-12")
    prompts = {tuple(p) for p in policy.prompts}
    paths = list(tree.paths())
    assert len(paths) == len(tree.leaves) >= 3
    for path in paths:
        (sequence,) = path.sequences()
        assert sequence.input_ids == path.turns[-1].prompt_ids + path.turns[-1].completion_ids
        assert sum(sequence.mask) == path.num_generated_tokens
        for before, after in zip(path.turns, path.turns[1:]):
            assert after.extends(before)
            assert after.prompt_mask == before.mask + [0] * (len(after.prompt_ids) - len(before.input_ids))
        assert all(tuple(t.prompt_ids) in prompts for t in path.turns)
    assert_all_freed(env)


async def test_contrast_teaches_the_shared_predictor_every_prefix_of_every_finished_path(env):
    predictor = SuccessPredictor()
    rollout = TreeRollout(
        Agent(ChoicePolicy(counter_moves)), TreeConfig(strategy="contrast", roots=2, max_leaves=6), predictor=predictor
    )
    tree = await rollout.run(env, "reach-7")
    finished = [leaf for leaf in tree.leaves if leaf.id not in tree.leaf_errors]
    assert predictor.updates == sum(len(tree.path(leaf.id)) for leaf in finished) > 0
    second = await rollout.run(env, "reach-12")  # shared across trees and tasks
    assert predictor.updates > sum(len(tree.path(leaf.id)) for leaf in finished) and second.nodes
    assert_all_freed(env)


def toy_prefix(rng, good: bool) -> list[Turn]:
    noise = " ".join(rng.choice(["ls", "cat", "grep", "edit", "run", "tests"]) for _ in range(4))
    action = f"{noise} {'correct' if good else 'wrong'} approach"
    turns = [
        Turn(
            prompt_ids=[],
            completion_ids=[1, 2],
            logprobs=[-rng.random()] * 2,
            prompt_mask=[],
            action=action,
            observation=rng.choice(["ok", "done"]),
            entropy=rng.random(),
        )
    ]
    return turns * rng.randint(1, 4)


def test_the_predictor_learns_a_separable_signal_deterministically():
    rng = random.Random(0)
    data = [(toy_prefix(rng, good), good) for good in [rng.random() < 0.5 for _ in range(600)]]
    first, second = SuccessPredictor(), SuccessPredictor()
    assert not first.ready and first.predict(data[0][0]) == 0.5
    for turns, good in data:
        first.update(turns, good)
        second.update(turns, good)
    assert first.ready and (first.weights == second.weights).all()
    tests = [(toy_prefix(rng, good), good) for good in [True, False] * 50]
    assert all((first.predict(turns) > 0.5) == good for turns, good in tests)
    assert statistics.mean(first.predict(t) for t, g in tests if g) > 0.75
    assert statistics.mean(first.predict(t) for t, g in tests if not g) < 0.25


class FailingPolicy(ChoicePolicy):
    """Stands in for a policy whose endpoint dies after ``calls`` replies."""

    def __init__(self, calls: int):
        super().__init__(counter_moves)
        self.calls = calls

    async def generate(self, prompt_ids, sampling):
        if len(self.prompts) >= self.calls:
            raise PolicyError("endpoint went away")
        return await super().generate(prompt_ids, sampling)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_a_failing_policy_leaves_nothing_open(env, strategy, caplog):
    config = TreeConfig(strategy=strategy, roots=3, max_leaves=9, branch_every=1, branches=3)
    # The same tree grown whole first, to fail the policy two thirds of the way through it.
    whole = ChoicePolicy(counter_moves)
    await TreeRollout(Agent(whole), config).run(env, "reach-30")
    with pytest.raises(PolicyError):
        await TreeRollout(Agent(FailingPolicy(calls=2 * len(whole.prompts) // 3)), config).run(env, "reach-30")
    assert len(env.registry["envs"]) > 3 and env.registry["snapshots"]
    assert_all_freed(env)
    # Nor a task whose failure nobody read: asyncio logs it, with its traceback, whenever the task is collected
    # (a traceback parses source on CPython 3.11, which raced with reply parsing in another test's threads).
    gc.collect()
    assert "never retrieved" not in caplog.text


class StallingPolicy(ChoicePolicy):
    """Stands in for a policy that stops answering after ``calls`` replies (a hung endpoint)."""

    def __init__(self, calls: int):
        super().__init__(counter_moves)
        self.calls = calls
        self.stalled = asyncio.Event()

    async def generate(self, prompt_ids, sampling):
        if len(self.prompts) >= self.calls:
            self.stalled.set()
            await asyncio.Event().wait()
        return await super().generate(prompt_ids, sampling)


@pytest.mark.parametrize("strategy", ["uniform", "contrast"])
async def test_cancelling_a_run_leaves_nothing_open(env, strategy):
    policy = StallingPolicy(calls=15)
    config = TreeConfig(strategy=strategy, roots=2, max_leaves=8, branch_every=1, branches=2)
    run = asyncio.ensure_future(TreeRollout(Agent(policy), config).run(env, "reach-30"))
    await asyncio.wait_for(policy.stalled.wait(), 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert len(env.registry["envs"]) > 2
    assert_all_freed(env)


def test_config_is_checked():
    with pytest.raises(ValueError, match="strategy"):
        TreeConfig(strategy="greedy")
    with pytest.raises(ValueError, match="budget"):
        TreeConfig(max_leaves=None)
    with pytest.raises(ValueError, match="roots"):
        TreeConfig(roots=3, max_leaves=2)


async def test_a_tree_with_the_tiny_model_samples_for_real(env):
    from agentgym.models import tiny_model_path
    from agentgym.rollout.hf_policy import HFPolicy

    # A generous batching window, so that concurrent branches share batches even on a loaded machine.
    async with HFPolicy(tiny_model_path(), device="cpu", batch_wait_ms=50) as policy:
        # Seeded, so the test is reproducible: a continuation's first draw then repeats its
        # sibling's exactly, and only the seed shift of a resample tells them apart.
        agent = Agent(policy, AgentConfig(max_turns=3, sampling=SamplingParams(max_tokens=8, seed=0)))
        config = TreeConfig(strategy="contrast", max_leaves=5)
        tree = await TreeRollout(agent, config).run(env, "reach-7")
        assert policy.stats.max_batch_seen >= 2  # concurrent branches were batched
    assert_valid_tree(tree)
    assert len(tree.leaves) == 5 and all(n.turn.entropy is not None for n in tree.nodes)
    assert tree.metadata["resamples"] >= 4 and tree.metadata["unresolved_duplicates"] == 0
    for node in tree.nodes:
        if node.branched:
            firsts = [tuple(tree.nodes[c].turn.completion_ids) for c in node.children]
            assert len(set(firsts)) == len(firsts)
    for path in tree.paths():
        (sequence,) = path.sequences()
        assert sequence.input_ids == path.turns[-1].input_ids
        assert all(b.extends(a) for a, b in zip(path.turns, path.turns[1:]))
    assert_all_freed(env)


@pytest.mark.docker
async def test_humaneval_tree_branches_containers_and_removes_them(docker_ready):
    from agentgym.envs.code.humaneval import SOLUTION_PATH, HumanEvalEnv, load_problems

    class TrackedHumanEval(Tracked, HumanEvalEnv):
        pass

    problem = load_problems()["HumanEval/0"]
    right = call("write_file", path=SOLUTION_PATH, content=problem["prompt"] + problem["canonical_solution"])
    wrong = call("write_file", path=SOLUTION_PATH, content=problem["prompt"] + "    return False\n")

    def moves(rng, asked):
        return rng.choice([right, wrong, call("submit")])

    env = TrackedHumanEval(registry={})
    try:
        agent = Agent(ChoicePolicy(moves), AgentConfig(max_turns=3))
        config = TreeConfig(strategy="uniform", max_leaves=4, branch_every=1, branches=2, concurrency=4)
        tree = await TreeRollout(agent, config).run(env, "HumanEval/0")
    finally:
        env.close()
    assert_valid_tree(tree)
    assert 2 <= len(tree.leaves) <= 4 and any(n.branched for n in tree.nodes)
    verdicts = []
    for path in tree.paths():
        # Each branch graded its own file: the verdict follows the last write on its own path.
        if path.turns[-1].action == call("submit"):
            writes = [t.action for t in path.turns if t.action in (right, wrong)]
            verdicts.append(path.success)
            assert path.success == (bool(writes) and writes[-1] == right), [t.action[:40] for t in path.turns]
    assert verdicts, "no path submitted, so no branch was graded"
    registry = env.registry
    assert all(id(e) in registry["closed"] for e in registry["envs"]) and all(s.released for s in registry["snapshots"])
