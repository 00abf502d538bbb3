"""The runner on CounterEnv: bounded concurrency with env reuse, retries, timeouts, partial rollouts, stores, trees, and no leaked envs."""

import asyncio
import copy
import re
import threading
import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgym.models import tiny_model_path
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.chat import ChatFormat
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
from agentgym.rollout.store import TrajectoryStore
from agentgym.rollout.trajectory import RolloutTree, Trajectory
from agentgym.rollout.tree import TreeConfig, TreeRollout
from tests.helpers.counter import CounterEnv
from tests.helpers.tool_calls import call

_tokenizer = None


def tiny_tokenizer():
    global _tokenizer
    if _tokenizer is None:
        _tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    return _tokenizer


class CounterSolver(Policy):
    """A scripted token-mode policy that solves CounterEnv: it reads the target and counter from its prompt.

    Each call sleeps ``latency`` seconds like a server would; ``fail_calls`` lists call numbers
    (from 1) that raise :class:`PolicyError`. It tracks the most calls in flight at once.
    """

    name = "counter-solver"

    def __init__(self, latency: float = 0.0, fail_calls: tuple[int, ...] = ()):
        self.chat_format = ChatFormat(tiny_tokenizer())
        self.latency = latency
        self.fail_calls = set(fail_calls)
        self.calls = 0
        self.in_flight = self.max_in_flight = 0

    async def generate(self, prompt_ids, sampling):
        self.calls += 1
        number = self.calls
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        if number in self.fail_calls:
            raise PolicyError(f"scripted failure of call {number}")
        text = self.chat_format.tokenizer.decode(prompt_ids)
        target = int(re.search(r"Reach (\d+)", text).group(1))
        counter = int(re.findall(r"Counter: (\d+)", text)[-1])
        reply = call("submit") if counter >= target else call("add", n=min(10, target - counter))
        ids = self.chat_format.encode(reply) + [self.chat_format.eos_token_id]
        return Completion(
            text=reply, token_ids=ids, logprobs=[-0.25] * len(ids), policy_version=self.version, entropy=0.5
        )


class Tracked(CounterEnv):
    """CounterEnv that keeps a registry of its instances and of episodes in progress (class-wide).

    An episode counts as in progress from reset until the env ends it or the env is reset again,
    so ``max_active`` can only over-count the episodes in flight.
    """

    instances: list = []
    active = max_active = 0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.in_episode = False
        self.episodes = 0
        type(self).instances.append(self)

    @classmethod
    def reset_registry(cls):
        cls.instances, cls.active, cls.max_active = [], 0, 0

    def _setup(self, task_id):
        if not self.in_episode:  # else the last episode was ended by the runner, not the env, and still counts
            Tracked.active += 1
        self.in_episode, self.episodes = True, self.episodes + 1
        Tracked.max_active = max(Tracked.max_active, Tracked.active)
        return super()._setup(task_id)

    def step(self, action):
        result = super().step(action)
        if (result[2] or result[3]) and self.in_episode:
            self.in_episode = False
            Tracked.active -= 1
        return result


@pytest.fixture(autouse=True)
def registry():
    Tracked.reset_registry()
    yield
    assert all(env._closed for env in Tracked.instances), "an env was left open"


@pytest.fixture(scope="module")
def tiny():
    path = tiny_model_path()
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def tasks(n, ids=("reach-7", "reach-12", "reach-30")):
    return [EpisodeRequest(ids[i % len(ids)], seed=i, repeat=i, group=ids[i % len(ids)]) for i in range(n)]


QUIET = RunnerConfig(concurrency=4, progress=False)


async def test_all_tasks_finish_with_bounded_concurrency_and_reused_envs(tiny):
    async with HFPolicy.from_model(*tiny, batch_wait_ms=20) as policy:
        agent = Agent(policy, AgentConfig(sampling=SamplingParams(max_tokens=6, temperature=0.0)))
        result = await Runner(agent, lambda: Tracked(max_turns=2), QUIET).run(tasks(10))
    assert len(result.records) == 10 and not result.pending
    assert sorted(r.metadata["repeat"] for r in result.records) == list(range(10))
    assert all(len(r.turns) == 2 and r.truncated and r.turns[0].policy_version == 0 for r in result.records)
    assert 1 < Tracked.max_active <= 4 and len(Tracked.instances) <= 4
    assert sum(env.episodes for env in Tracked.instances) == 10  # envs were reset, not re-created
    assert policy.stats.max_batch_seen > 1  # concurrent episodes shared the policy's batches
    stats = result.stats
    assert stats.episodes == 10 and stats.env_steps == 20
    assert stats.generated_tokens == sum(r.num_generated_tokens for r in result.records) > 0
    assert stats.episodes_per_s > 0 and stats.tokens_per_s > 0 and not result.failures


class Bounded(Tracked):
    """An env that allows two of its kind at once (as a desktop does on a two-core machine)."""

    def concurrency_bound(self):
        return 2


async def test_no_more_envs_run_at_once_than_the_env_allows():
    agent = Agent(CounterSolver(latency=0.01), AgentConfig(sampling=SamplingParams(max_tokens=6)))
    result = await Runner(agent, lambda: Bounded(max_turns=3), RunnerConfig(concurrency=8, progress=False)).run(
        tasks(9)
    )
    assert len(result.records) == 9 and not result.failures
    assert len(Tracked.instances) == Tracked.max_active == 2  # the probe env is one of the two, reused
    result = await Runner(agent, lambda: Tracked(max_turns=3), RunnerConfig(concurrency=8, progress=False)).run(
        tasks(9)
    )
    assert len(result.records) == 9 and Tracked.max_active > 2  # without a bound: the config's concurrency


async def test_a_resume_learns_the_bound_from_a_paused_episodes_env_without_making_one():
    """Paused episodes holding their envs: the runner asks one of them for the bound. A probe env made beside them
    would be started for nothing (a desktop: a minute of LibreOffice) and for a moment one over the bound."""
    runner = Runner(Agent(CounterSolver(latency=0.01)), Tracked, RunnerConfig(concurrency=3, progress=False))
    first = await runner.run(
        [EpisodeRequest("reach-7"), EpisodeRequest("reach-30"), EpisodeRequest("reach-30")], target=1
    )
    assert [p.episode is not None for p in first.pending] == [True, True] and len(Tracked.instances) == 3
    second = await runner.resume(first.pending)
    assert len(second.records) == 2 and not second.failures
    assert len(Tracked.instances) == 3  # the two paused episodes' envs and the finished one's (closed): none new


async def test_store_gets_every_record_and_progress_is_off_without_a_terminal(tmp_path):
    store = TrajectoryStore(tmp_path / "runs.jsonl")
    config = RunnerConfig(concurrency=3, store=store, progress=True)
    result = await Runner(Agent(CounterSolver(latency=0.001)), Tracked, config).run(tasks(7))
    store.close()
    assert all(r.success and r.reward == 1.0 and not r.error for r in result.records)
    stored = {r.id: r for r in store.read()}
    assert stored == {r.id: r for r in result.records}
    assert stored[result.records[0].id].metadata["group"] == result.records[0].task_id


class Flaky(Tracked):
    """The first step of each of the first ``budget`` instances fails (by raising, or as ``info["env_error"]``)."""

    budget = 0
    mode = "raise"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.broken = Flaky.budget > 0
        Flaky.budget -= 1

    def step(self, action):
        if self.broken and Flaky.mode == "raise":
            self.broken = False
            raise ConnectionError("sandbox went away")
        return super().step(action)

    def _call_tool(self, tool_call):
        if self.broken:
            self.broken = False
            raise OSError("disk vanished")  # AgentEnv.step turns this into info["env_error"]
        return super()._call_tool(tool_call)


@pytest.mark.parametrize("mode", ["raise", "env_error"])
async def test_env_failures_are_retried_on_a_fresh_env_and_recorded(mode):
    Flaky.budget, Flaky.mode = 2, mode
    runner = Runner(Agent(CounterSolver()), Flaky, RunnerConfig(concurrency=2, max_env_retries=2, progress=False))
    result = await runner.run(tasks(4))
    assert len(result.records) == 4 and all(r.success and not r.error for r in result.records)
    assert len(result.failures) == 2 and {f.kind for f in result.failures} == {"env"}
    message = "ConnectionError: sandbox went away" if mode == "raise" else "OSError: disk vanished"
    assert all(message in f.error and f.attempt == 1 for f in result.failures)
    retried = [r for r in result.records if "failures" in r.metadata]
    assert sorted(r.metadata["repeat"] for r in retried) == sorted(f.request.repeat for f in result.failures)
    assert all(
        r.metadata["failures"] == [{"attempt": 1, "kind": "env", "error": result.failures[0].error}] for r in retried
    )
    # A broken env is discarded after its failed episode, never reused.
    assert [env.episodes for env in Flaky.instances[:2]] == [1, 1] and len(Flaky.instances) > 2


async def test_exhausted_env_retries_leave_an_error_record():
    Flaky.budget, Flaky.mode = 100, "raise"
    runner = Runner(Agent(CounterSolver()), Flaky, RunnerConfig(concurrency=1, max_env_retries=1, progress=False))
    result = await runner.run([EpisodeRequest("reach-7")])
    (record,) = result.records
    assert record.error.startswith("env_error: step failed: ConnectionError") and record.truncated
    assert [f.attempt for f in result.failures] == [1, 2] and len(Flaky.instances) == 2
    assert [f["attempt"] for f in record.metadata["failures"]] == [1, 2]


async def test_policy_errors_are_recorded_and_retried_only_when_asked():
    result = await Runner(
        Agent(CounterSolver(fail_calls=(2,))), Tracked, RunnerConfig(concurrency=1, progress=False)
    ).run([EpisodeRequest("reach-12"), EpisodeRequest("reach-7")])
    failed, fine = result.records
    assert failed.error.startswith("policy_error: PolicyError: scripted failure") and len(failed.turns) == 1
    assert fine.success and [f.kind for f in result.failures] == ["policy"]
    assert len(Tracked.instances) == 1  # the env was at a turn boundary, so it was kept

    config = RunnerConfig(concurrency=1, max_policy_retries=1, progress=False)
    result = await Runner(Agent(CounterSolver(fail_calls=(2,))), Tracked, config).run([EpisodeRequest("reach-12")])
    (record,) = result.records
    assert record.success and not record.error and len(record.turns) == 3
    assert record.metadata["failures"][0]["kind"] == "policy"


class Hanging(Tracked):
    """The very first step of the first instance hangs until ``release`` is set (a wedged sandbox), at most ``hang`` seconds."""

    hang = 30.0
    release = threading.Event()
    done = threading.Event()

    def _call_tool(self, tool_call):
        if self is Hanging.instances[0] and self.turn == 1:
            Hanging.release.wait(Hanging.hang)
            Hanging.done.set()
        return super()._call_tool(tool_call)


async def test_a_hanging_episode_times_out_and_its_env_is_replaced():
    Hanging.done.clear()
    Hanging.release.clear()
    threads_before = set(threading.enumerate())
    config = RunnerConfig(concurrency=1, episode_timeout=0.3, progress=False)
    result = await Runner(Agent(CounterSolver()), Hanging, config).run(
        [EpisodeRequest("reach-7"), EpisodeRequest("reach-12")]
    )
    # The run returned while the wedged step still hung (a condition, not a time: under load a run may be slow).
    assert not Hanging.done.is_set()
    Hanging.release.set()
    timed_out, fine = result.records
    assert timed_out.error == "timeout: the episode ran longer than 0.3s" and timed_out.truncated
    assert timed_out.turns == [] and [f.kind for f in result.failures] == ["timeout"]
    assert timed_out.metadata["failures"][0]["kind"] == "timeout" and fine.success
    wedged, replacement = Hanging.instances
    assert wedged._closed and replacement.episodes == 1
    # The only thread still busy is the wedged step; once it returns, nothing is left but idle pool workers:
    # the loop's default pool's and the shared env pool's (agentgym.core), which the first env call in a
    # process creates and which adds a worker whenever none is idle.
    assert await asyncio.to_thread(Hanging.done.wait, 5)
    extra = set(threading.enumerate()) - threads_before
    assert all(t.name.startswith(("asyncio_", "agentgym-env_")) for t in extra), extra


async def test_partial_rollouts_return_at_the_target_and_resume_with_identical_prefixes():
    policy = CounterSolver(latency=0.01)
    runner = Runner(Agent(policy), Tracked, QUIET)
    work = [
        EpisodeRequest("reach-7", repeat=i) if i % 2 == 0 else EpisodeRequest("reach-30", repeat=i) for i in range(10)
    ]
    first = await runner.run(work, target=2)

    assert 2 <= len(first.records) < 10 and len(first.records) + len(first.pending) == 10
    paused = [p for p in first.pending if p.episode is not None]
    assert paused and any(p.turn > 0 for p in paused) and len(paused) <= 4
    assert all(not p.episode.env._closed for p in paused)
    assert any(p.episode is None for p in first.pending)  # over-provisioned tasks never started
    prefixes = {p.request.repeat: copy.deepcopy(p.episode.turns) for p in paused}

    policy.version = 1  # the trainer updated the weights in between
    second = await runner.resume(first.pending)
    assert not second.pending and len(first.records) + len(second.records) == 10
    records = {r.metadata["repeat"]: r for r in first.records + second.records}
    assert sorted(records) == list(range(10)) and all(r.success for r in records.values())
    for repeat, prefix in prefixes.items():
        turns = records[repeat].turns
        assert turns[: len(prefix)] == prefix and len(turns) > len(prefix)
        assert [t.policy_version for t in turns] == [0] * len(prefix) + [1] * (len(turns) - len(prefix))
    assert all(env._closed for env in Tracked.instances)


async def test_discarding_pending_episodes_closes_their_envs():
    runner = Runner(Agent(CounterSolver(latency=0.01)), Tracked, QUIET)
    result = await runner.run(tasks(8), target=1)
    held = [p.episode.env for p in result.pending if p.episode is not None]
    assert held and not any(env._closed for env in held)
    await runner.discard(result.pending)
    assert all(env._closed for env in held) and all(p.episode is None for p in result.pending)


@pytest.mark.parametrize("factory_delay", [0.0, 0.2])
async def test_cancelling_a_run_closes_every_env(factory_delay):
    def factory():  # with a delay, the run is cancelled while its first env (made alone: its bound) is being made
        time.sleep(factory_delay)
        return Tracked()

    runner = Runner(Agent(CounterSolver(latency=0.05)), factory, QUIET)
    run = asyncio.ensure_future(runner.run(tasks(12)))
    await asyncio.sleep(0.12)
    assert not run.done() and bool(Tracked.instances) == (factory_delay == 0)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert len(Tracked.instances) == (4 if factory_delay == 0 else 1)
    assert all(env._closed for env in Tracked.instances)


async def test_tree_jobs_run_through_the_same_runner():
    agent = Agent(CounterSolver())
    job = lambda agent, env, request: TreeRollout(agent, TreeConfig(max_leaves=3, branch_every=1)).run(  # noqa: E731
        env, request.task_id, request.seed
    )
    result = await Runner(agent, Tracked, QUIET, job=job).run(tasks(3))
    assert all(isinstance(r, RolloutTree) for r in result.records) and len(result.records) == 3
    assert all(len(r.leaves) >= 1 and r.metadata["repeat"] in (0, 1, 2) for r in result.records)
    assert result.stats.env_steps == sum(r.num_env_steps for r in result.records)


async def test_custom_jobs_at_the_target_are_returned_to_run_again():
    async def slow_job(agent, env, request):
        if request.task_id == "reach-30":
            await asyncio.sleep(10)
        return await agent.run(env, request.task_id, request.seed)

    runner = Runner(Agent(CounterSolver()), Tracked, RunnerConfig(concurrency=2, progress=False), job=slow_job)
    started = time.monotonic()
    result = await runner.run(
        [EpisodeRequest("reach-30"), EpisodeRequest("reach-7"), EpisodeRequest("reach-12")], target=2
    )
    assert time.monotonic() - started < 5
    assert {r.task_id for r in result.records} == {"reach-7", "reach-12"}
    assert all(isinstance(r, Trajectory) for r in result.records)
    (pending,) = result.pending
    assert pending.request.task_id == "reach-30" and pending.episode is None


KEEP = RunnerConfig(concurrency=4, progress=False, keep_envs=True)


async def test_kept_envs_serve_the_next_calls_until_aclose():
    runner = Runner(Agent(CounterSolver(latency=0.005)), Tracked, KEEP)
    first = await runner.run(tasks(8))
    made = list(Tracked.instances)
    assert len(made) == 4 and runner.kept and not any(env._closed for env in made)
    second = await runner.run(tasks(8))
    assert Tracked.instances == made  # reset with the next tasks, none built
    assert sum(env.episodes for env in made) == 16
    assert all(r.success for r in first.records + second.records)
    await runner.aclose()
    assert all(env._closed for env in made) and not runner.kept
    await runner.run(tasks(1))  # a closed runner builds new envs
    assert len(Tracked.instances) == 5
    await runner.aclose()


async def test_concurrent_calls_share_the_kept_envs():
    runner = Runner(Agent(CounterSolver(latency=0.005)), Tracked, KEEP)
    for _ in range(3):  # four one-task calls at once, as SAO's producer workers make them
        await asyncio.gather(*(runner.run(tasks(1)) for _ in range(4)))
    assert len(Tracked.instances) == 4 and sum(env.episodes for env in Tracked.instances) == 12
    await runner.aclose()


@pytest.mark.parametrize("mode", ["raise", "env_error"])
async def test_a_failed_env_is_not_kept_and_is_replaced(mode):
    Flaky.budget, Flaky.mode = 1, mode
    runner = Runner(Agent(CounterSolver()), Flaky, RunnerConfig(concurrency=2, progress=False, keep_envs=True))
    result = await runner.run(tasks(4))
    broken = Flaky.instances[0]
    assert len(result.failures) == 1 and all(r.success for r in result.records)
    assert broken._closed and broken not in runner.kept and len(runner.kept) == 2
    await runner.run(tasks(4))
    assert all(not env._closed for env in runner.kept) and broken not in runner.kept
    await runner.aclose()


async def test_a_cancelled_call_closes_its_kept_envs_too():
    runner = Runner(Agent(CounterSolver(latency=0.05)), Tracked, KEEP)
    await runner.run(tasks(4))
    run = asyncio.ensure_future(runner.run(tasks(12)))
    await asyncio.sleep(0.08)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert not runner.kept and all(env._closed for env in Tracked.instances)


async def test_tree_jobs_keep_their_root_envs_and_close_their_forks():
    job = lambda agent, env, request: TreeRollout(agent, TreeConfig(roots=2, max_leaves=4, branch_every=1)).run(  # noqa: E731
        env, request.task_id, request.seed
    )
    runner = Runner(
        Agent(CounterSolver()), Tracked, RunnerConfig(concurrency=2, progress=False, keep_envs=True), job=job
    )
    first = await runner.run(tasks(2))
    roots = list(runner.kept)
    assert len(roots) == 2 and all(not env._closed for env in roots)
    assert all(env._closed for env in Tracked.instances if env not in roots)  # the forks
    second = await runner.run(tasks(2))
    assert sorted(map(id, runner.kept)) == sorted(map(id, roots))
    assert all(isinstance(r, RolloutTree) and len(r.leaves) >= 2 for r in first.records + second.records)
    await runner.aclose()
