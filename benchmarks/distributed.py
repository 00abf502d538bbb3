"""Measures env workers on a Ray cluster: (a) per-step overhead of a remote env, (b) episodes/s with 1, 2 and 4 worker processes, (c) cross-node fork vs local fork vs replay.

It starts its own two-node cluster on this machine (``ray.cluster_utils.Cluster``), so it must
run in a network namespace with only loopback (Ray binds the machine's address otherwise)::

    scripts/netns .venv/bin/python benchmarks/distributed.py [--quick]

(a) KeyChain steps, local (in this process) and remote (on a worker, ``ray.get`` per step),
    interleaved step by step; target: p50 added ≤ 5 ms.
(b) A latency-bound ToolEnv (:class:`SleepEnv`: every tool call sleeps 200 ms) under the Runner
    with the reference policy, ``envs_per_worker`` envs per worker and that many episodes in
    flight per worker; the three pool sizes are measured in turn, round after round, and each
    rate is compared with ``workers × `` the one-worker rate; target: ≥ 85% of linear at 4.
(c) Forks of a snapshot taken after a few steps: in this process (local fork), on the env's own
    worker, and moved to a worker on the other node (the snapshot exported, carried by the object
    store, imported), against replay (a new remote env, reset and the same steps again); each
    timed until the new env has taken one more step (a code env starts its container lazily);
    for KeyChain and for HumanEval (Docker; skipped without it). Interleaved per repetition.

Prints Markdown tables and a JSON line. ``--quick`` runs fewer samples.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.envs.tool.env import ToolEnv  # noqa: E402
from benchmarks.timing import summary, timed  # noqa: E402

KEYCHAIN = "agentgym/tool.keychain-v0"
HUMANEVAL = "agentgym/code.humaneval-v0"
SLEEP_ENV = "benchmarks.distributed:SleepEnv"
TOOL_SLEEP = 0.2
WAITS = 3  # tool calls per SleepEnv episode
NODE_RESOURCES = {"agentgym_docker": 4, "agentgym_browser": 4}


def wait(state: dict) -> str:
    """Wait for the (simulated) slow service to answer."""
    time.sleep(TOOL_SLEEP)
    state["waited"] += 1
    return f"waited {state['waited']}×"


class SleepEnv(ToolEnv):
    """A latency-bound ToolEnv: each task asks for ``waits`` calls of ``wait()`` (200 ms each), then submit."""

    def __init__(self, waits: int = WAITS, **kwargs):
        solution = ["wait()"] * waits + ["submit()"]
        tasks = {
            f"wait-{i}": {"prompt": f"Call wait() {waits} times, then submit.", "solution": solution} for i in range(64)
        }
        super().__init__(
            [wait],
            tasks,
            state_factory=lambda task: {"waited": 0},
            check=lambda task, state, transcript: (float(ok := state["waited"] == waits), ok),
            max_turns=waits + 2,
            call_timeout=None,
            allow_text_replies=False,
            variant=f"sleep-{waits}",
            **kwargs,
        )


def start_cluster():
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("AGENTGYM_RUN_ID", f"bench-{uuid.uuid4().hex[:12]}")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": dict(NODE_RESOURCES)})
    cluster.add_node(num_cpus=2, resources=dict(NODE_RESOURCES))
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


# ---------------------------------------------------------------------- (a) per-step overhead
def step_overhead(steps: int) -> dict:
    from agentgym.distributed.env_pool import EnvPool
    from agentgym.registration import make_env_factory

    local = make_env_factory(KEYCHAIN)()
    action = 'lookup("amber")'
    samples: dict[str, list[float]] = {"local": [], "remote": []}
    with EnvPool(KEYCHAIN, workers=1) as pool:
        remote = pool()
        for env in (local, remote):
            env.reset(seed=0, options={"task_id": "train-0"})
            env.step(action)  # warm: first-call costs (imports, the worker's thread pool)
        for _ in range(steps):
            for name, env in (("local", local), ("remote", remote)):
                if env.unwrapped.turn >= 5:  # KeyChain ends at 6 turns; resets are not steps
                    env.reset(seed=0, options={"task_id": "train-0"})
                ms, _ = timed(lambda env=env: env.step(action))
                samples[name].append(ms)
        remote.close()
    local.close()
    added = [r - loc for r, loc in zip(samples["remote"], samples["local"])]
    return {"local": summary(samples["local"]), "remote": summary(samples["remote"]), "added": summary(added)}


# ---------------------------------------------------------------------- (b) scaling with workers
async def _rate(pool, agent, episodes: int, concurrency: int) -> float:
    from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig

    runner = Runner(agent, pool, RunnerConfig(concurrency=concurrency, progress=False))
    tasks = [EpisodeRequest(f"wait-{i % 64}", seed=i, repeat=i) for i in range(episodes)]
    started = time.perf_counter()
    result = await runner.run(tasks)
    elapsed = time.perf_counter() - started
    if len(result.records) != episodes or result.failures or not all(r.success for r in result.records):
        raise RuntimeError(f"the benchmark run went wrong: {len(result.records)} records, {result.failures[:3]}")
    return episodes / elapsed


def scaling(worker_counts: tuple[int, ...], envs_per_worker: int, waves: int, rounds: int) -> dict:
    from agentgym.distributed.env_pool import EnvPool
    from agentgym.eval.oracles import EpisodeAgent, ReferencePolicy
    from agentgym.rollout.agent import AgentConfig

    probe = SleepEnv()
    agent = EpisodeAgent(ReferencePolicy(probe.tasks()), AgentConfig(max_turns=8))
    probe.close()
    pools = {w: EnvPool(SLEEP_ENV, workers=w, envs_per_worker=envs_per_worker) for w in worker_counts}
    rates: dict[int, list[float]] = {w: [] for w in worker_counts}
    try:

        async def measure():
            for w, pool in pools.items():  # warm every pool's workers and envs once
                await _rate(pool, agent, w * envs_per_worker, w * envs_per_worker)
            for _ in range(rounds):
                for w, pool in pools.items():
                    slots = w * envs_per_worker
                    rates[w].append(await _rate(pool, agent, slots * waves, slots))

        asyncio.run(measure())
    finally:
        for pool in pools.values():
            pool.close()
    base = statistics.median(rates[worker_counts[0]]) / worker_counts[0]
    episode_s = WAITS * TOOL_SLEEP
    levels = []
    for w in worker_counts:
        rate = statistics.median(rates[w])
        levels.append(
            {
                "workers": w,
                "episodes_per_s": rate,
                "linear_episodes_per_s": base * w,
                "pct_of_linear": 100 * rate / (base * w),
                "env_bound_episodes_per_s": w * envs_per_worker / episode_s,
                "rounds": rates[w],
            }
        )
    return {
        "settings": {
            "tool_sleep_s": TOOL_SLEEP,
            "waits_per_episode": WAITS,
            "envs_per_worker": envs_per_worker,
            "waves": waves,
            "rounds": rounds,
        },
        "levels": levels,
    }


# ---------------------------------------------------------------------- (c) forks
def forks(env_id: str, env_kwargs: dict, task_id: str, prefix: list[str], probe: str, reps: int) -> dict:
    """p50/p95 ms of each way to an env at the prefix's state, each timed until its next step (``probe``) is done."""
    from agentgym.distributed.env_pool import EnvPool
    from agentgym.registration import make_env_factory

    samples: dict[str, list[float]] = {"local fork": [], "same-worker fork": [], "cross-node fork": [], "replay": []}
    local = make_env_factory(env_id, env_kwargs)()
    with (
        EnvPool(env_id, env_kwargs, workers=1, envs_per_worker=4) as same,
        EnvPool(env_id, env_kwargs, workers=2, envs_per_worker=1) as cross,
    ):
        sources = {"local fork": local, "same-worker fork": same(), "cross-node fork": cross()}
        for env in sources.values():
            env.reset(seed=0, options={"task_id": task_id})
            for action in prefix:
                env.step(action)
        snapshots = {name: env.snapshot() for name, env in sources.items()}

        def replay():
            env = same()
            env.reset(seed=0, options={"task_id": task_id})
            for action in prefix:
                env.step(action)
            return env

        moved_nodes = set()
        for _ in range(reps):
            for name in samples:
                make = replay if name == "replay" else lambda name=name: sources[name].fork(snapshots[name])
                ms, child = timed(lambda make=make: _stepped(make(), probe))
                if name == "cross-node fork":
                    moved_nodes.add(child.slot.node_id != sources[name].slot.node_id)
                samples[name].append(ms)
                child.close()
        if moved_nodes != {True}:
            raise RuntimeError("a cross-node fork stayed on its node")
        for name, snap in snapshots.items():
            snap.release()
            if name != "local fork":
                sources[name].close()
    local.close()
    result = {name: summary(values) for name, values in samples.items()}
    local_p50 = result["same-worker fork"]["p50"]
    for name in result:
        result[name]["vs_same_worker"] = result[name]["p50"] / local_p50
    return result


def _stepped(env, action: str):
    env.step(action)
    return env


def _docker_available() -> bool:
    try:
        from agentgym.sandbox.images import build_base_image

        build_base_image()
        return True
    except Exception as exc:  # no engine, no sandbox extra
        print(f"(HumanEval forks skipped: Docker unavailable: {exc})")
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (a short run)")
    args = parser.parse_args()
    if os.environ.get("AGENTGYM_NETNS") != "1":
        sys.exit("run it in a network namespace: scripts/netns .venv/bin/python benchmarks/distributed.py")
    steps, rounds, reps, code_reps = (100, 1, 5, 2) if args.quick else (400, 3, 20, 5)
    cluster = start_cluster()
    try:
        results = {"quick": args.quick, "step_overhead_ms": step_overhead(steps)}
        results["scaling"] = scaling((1, 2, 4), envs_per_worker=4, waves=3, rounds=rounds)
        from agentgym.task import call_text

        prefix = ['lookup("cloud")', 'lookup("amber")']
        results["forks_ms"] = {"keychain": forks(KEYCHAIN, {}, "train-3", prefix, 'lookup("brick")', reps)}
        if _docker_available():
            write = call_text("bash", {"command": "seq 1 1000 > /tmp/numbers.txt && echo done"})
            probe = call_text("bash", {"command": "wc -l /tmp/numbers.txt"})
            results["forks_ms"]["humaneval"] = forks(
                HUMANEVAL, {"tasks": "HumanEval/0"}, "HumanEval/0", [write, write], probe, code_reps
            )
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    _print(results)


def _print(results: dict) -> None:
    overhead = results["step_overhead_ms"]
    print("(a) per-step time, KeyChain, ms (interleaved)\n")
    print("| | p50 | p95 | n |")
    print("|---|---:|---:|---:|")
    for name in ("local", "remote", "added"):
        row = overhead[name]
        print(f"| {name} | {row['p50']:.2f} | {row['p95']:.2f} | {row['n']} |")
    verdict = "met" if overhead["added"]["p50"] <= 5 else "missed"
    print(f"\ntarget p50 added ≤ 5 ms: {verdict}\n")
    scaling = results["scaling"]
    settings = scaling["settings"]
    print(
        f"(b) episodes/s, SleepEnv ({settings['waits_per_episode']} tool calls × {settings['tool_sleep_s'] * 1000:g} ms), "
        f"{settings['envs_per_worker']} envs per worker, median of {settings['rounds']} round(s)\n"
    )
    print("| workers | episodes/s | linear | % of linear | env-bound ideal |")
    print("|---:|---:|---:|---:|---:|")
    for level in scaling["levels"]:
        print(
            f"| {level['workers']} | {level['episodes_per_s']:.2f} | {level['linear_episodes_per_s']:.2f} | "
            f"{level['pct_of_linear']:.0f}% | {level['env_bound_episodes_per_s']:.2f} |"
        )
    at4 = scaling["levels"][-1]["pct_of_linear"]
    print(f"\ntarget ≥ 85% of linear at 4 workers: {'met' if at4 >= 85 else 'missed'} ({at4:.0f}%)\n")
    for env, table in results["forks_ms"].items():
        print(f"(c) forks, {env}, ms (interleaved)\n")
        print("| | p50 | p95 | n | p50 vs same-worker fork |")
        print("|---|---:|---:|---:|---:|")
        for name, row in table.items():
            print(f"| {name} | {row['p50']:.1f} | {row['p95']:.1f} | {row['n']} | {row['vs_same_worker']:.2f}× |")
        print()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
