"""Measures web envs on real Chromium: reset/step/screenshot/snapshot/fork latency, fork vs. replay at turn 10, steps/s with 1, 4 and 8 concurrent envs, memory per env, and leaks over many episodes.

The workload is a self-hosted app (``--app``, default the shop) driven by a deterministic
browsing policy: each turn clicks the ``(turn * 7) mod n``-th link of the page, so every run
visits the same pages. Definitions:

* reset — ``reset()`` (database copy, fresh context, start page, observation);
* step — one click and the observation (text only);
* screenshot — one PNG screenshot of the viewport, decoded to an array;
* snapshot — ``snapshot()`` + ``release()``; fork — ``fork()`` of the current state + ``close()``
  (the fork takes the browser host's spare context and loads only each tab's current page);
* fork vs. replay at turn 10 — ``fork()`` after 10 steps against what a fork costs without
  snapshots: a fresh env's ``reset()`` plus the same 10 steps (the ratio is replay / fork);
* throughput — steps/s over all envs, with 1, 4 and 8 envs sharing the process's one browser
  and stepping concurrently through the async twins, and the CPU time per step of each process
  group (this Python process, Playwright's driver, Chromium's browser, renderer and GPU processes);
* MiniWoB++ scaling — ``--rounds`` rounds of one ``login-user`` env against ``--concurrency`` (8)
  envs at once, each episode solved (reset, two fills, a click; the tests' scripted solution):
  episodes/s of each, their ratio per round and the median, CPU seconds per episode by process
  kind and by thread, how busy our processes and the whole machine were, and the bound that
  cores put on the ratio (cores ÷ CPU per episode, and the busiest thread that every env shares);
* MiniWoB++ fork — ``fork()`` of a ``login-user`` episode after two fills: by state (the same
  instance started, its fields put back) against by replay, interleaved;
* memory per env — the growth in proportional set size (PSS) of Chromium's processes and of
  this process between 1 and 8 open envs, divided by 7;
* leaks — browser contexts and Chromium processes before and after ``--episodes`` episodes
  (reset, two steps, every tenth episode a fork).

    .venv/bin/python benchmarks/web.py [--app shop] [--repeats 30] [--episodes 1000] [--parts latency,fork,...]
    .venv/bin/python benchmarks/web.py --parts scaling --rounds 3 --concurrency 8 --episodes-per-round 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import percentiles, timed  # noqa: E402

from agentgym.envs.web.app_env import WebAppEnv  # noqa: E402
from agentgym.envs.web.observation import element_id, elements  # noqa: E402
from agentgym.sandbox.browser import BrowserHost  # noqa: E402

MINIWOB_TASK = "login-user"


def browse(text: str, turn: int) -> str:
    """The benchmark's policy: a deterministic link click (or a no-op on a page without links)."""
    links = [element["id"] for element in elements(text) if element["role"] == "link"]
    return f"click({links[(turn * 7) % len(links)]})" if links else "noop()"


def walk(env: WebAppEnv, task_id: str, turns: int) -> dict:
    observation, _ = env.reset(options={"task_id": task_id})
    for turn in range(turns):
        observation, *_ = env.step(browse(observation["text"], turn))
    return observation


def latencies(app: str, repeats: int) -> dict:
    env = WebAppEnv(app, max_turns=10**6)
    task_id = env.task_ids()[0]
    samples: dict[str, list[float]] = {name: [] for name in ("reset", "step", "screenshot", "snapshot", "fork")}
    walk(env, task_id, 3)  # warm-up: browser launch, first page loads
    for _ in range(repeats):
        elapsed, observation = timed(lambda: env.reset(options={"task_id": task_id})[0])
        samples["reset"].append(elapsed)
        for turn in range(3):
            elapsed, result = timed(lambda: env.step(browse(observation["text"], turn)))
            observation = result[0]
            samples["step"].append(elapsed)
        samples["screenshot"].append(timed(lambda: env._run(env._screenshot()))[0])
        samples["snapshot"].append(timed(lambda: env.snapshot().release())[0])
        elapsed, child = timed(env.fork)
        child.close()
        samples["fork"].append(elapsed)
    env.close()
    return {name: percentiles(values) for name, values in samples.items()}


def fork_vs_replay(app: str, repeats: int, turns: int = 10) -> dict:
    env = WebAppEnv(app, max_turns=10**6)
    task_id = env.task_ids()[0]
    forks, replays, modes = [], [], []
    for _ in range(repeats):
        walk(env, task_id, turns)
        elapsed, child = timed(env.fork)
        forks.append(elapsed)
        modes.append(child.fork_mode)
        child.close()
        fresh = WebAppEnv(app, max_turns=10**6)
        replays.append(timed(lambda: walk(fresh, task_id, turns))[0])
        fresh.close()
    env.close()
    fork_p50, replay_p50 = statistics.median(forks), statistics.median(replays)
    return {
        "fork_p50_ms": fork_p50,
        "replay_p50_ms": replay_p50,
        "ratio": replay_p50 / fork_p50,
        "restored": modes.count("restore"),
        "replayed": modes.count("replay"),
    }


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _group(pid: int, command: str) -> str | None:
    """The kind of process ``pid`` is (this Python process, Playwright's driver, a kind of Chromium process), or None."""
    if pid == os.getpid():
        return "python (env, gate, app servers)"
    if "--type=" in command:
        return "chromium " + command.split("--type=", 1)[1].split(" ", 1)[0]
    if "chrom" in command.split(" ", 1)[0]:
        return "chromium browser"
    if "playwright" in command:
        return "playwright driver (node)"
    return None


def _ticks(stat: str) -> int:
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def cpu_seconds(*, by_thread: bool = False) -> dict:
    """CPU seconds used so far by this process and its descendants (Playwright's driver, Chromium's
    processes), by kind of process, or with ``by_thread`` by (kind, pid, thread name) (threads of
    one process that share a name are summed)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    used: dict = {}
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            group = _group(pid, command)
            if group is None:
                continue
            if not by_thread:
                used[group] = used.get(group, 0.0) + _ticks(Path(f"/proc/{pid}/stat").read_text()) / _CLOCK_TICKS
                continue
            for task in Path(f"/proc/{pid}/task").iterdir():
                key = (group, pid, (task / "comm").read_text().strip())
                used[key] = used.get(key, 0.0) + _ticks((task / "stat").read_text()) / _CLOCK_TICKS
        except OSError:
            continue
    return used


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores (/proc/stat)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / _CLOCK_TICKS, sum(fields[:8]) / _CLOCK_TICKS


def throughput(app: str, concurrency: int, steps_per_env: int) -> tuple[float, dict[str, float]]:
    """Steps/s of ``concurrency`` envs stepping at once, and CPU ms per step by process group."""

    async def run(env: WebAppEnv) -> int:
        observation, _ = await env.areset(options={"task_id": env.task_ids()[0]})
        for turn in range(steps_per_env):
            observation, *_ = await env.astep(browse(observation["text"], turn))
        return steps_per_env

    async def main() -> tuple[float, dict[str, float]]:
        envs = [WebAppEnv(app, max_turns=10**6) for _ in range(concurrency)]
        await asyncio.gather(*(env.areset(options={"task_id": env.task_ids()[0]}) for env in envs))
        cpu_before, started = cpu_seconds(), time.perf_counter()
        steps = sum(await asyncio.gather(*(run(env) for env in envs)))
        elapsed, cpu_after = time.perf_counter() - started, cpu_seconds()
        await asyncio.gather(*(env.aclose() for env in envs))
        cpu = {group: 1000 * (used - cpu_before.get(group, 0.0)) / steps for group, used in cpu_after.items()}
        return steps / elapsed, cpu

    return asyncio.run(main())


# Processes (or threads) one for all envs: their CPU per episode bounds episodes/s however many
# cores there are. Renderers are one per env (context), so they scale with cores.
_SHARED_GROUPS = (
    "python (env, gate, app servers)",
    "playwright driver (node)",
    "chromium browser",
    "chromium gpu-process",
)


def miniwob_episodes(concurrency: int, episodes_per_env: int, seed: int) -> dict:
    """``concurrency`` MiniWoB++ login-user envs, each playing ``episodes_per_env`` solved
    episodes (reset, fill, fill, click) through the async twins at once: episodes/s, rewards,
    CPU seconds per episode by process kind and by thread, and the machine's utilisation."""
    from agentgym.envs.web.miniwob import MiniWoBEnv
    from tests.helpers.miniwob import SOLUTIONS

    solve = SOLUTIONS[MINIWOB_TASK]

    async def play(env: MiniWoBEnv, first_seed: int) -> list[float]:
        rewards = []
        for episode in range(episodes_per_env):
            observation, _ = await env.areset(seed=first_seed + episode)
            reward = 0.0
            for action in solve(observation["text"]):
                observation, reward, *_ = await env.astep(action)
            rewards.append(float(reward))
        return rewards

    async def main() -> dict:
        envs = [MiniWoBEnv(MINIWOB_TASK) for _ in range(concurrency)]
        await asyncio.gather(*(env.areset(seed=0) for env in envs))  # sessions open, pages warm
        busy_before, cpu_before, started = machine_busy(), cpu_seconds(by_thread=True), time.perf_counter()
        rewards = await asyncio.gather(*(play(env, seed + 1000 * i) for i, env in enumerate(envs)))
        elapsed, cpu_after, busy_after = time.perf_counter() - started, cpu_seconds(by_thread=True), machine_busy()
        await asyncio.gather(*(env.aclose() for env in envs))
        episodes = concurrency * episodes_per_env
        threads = {key: (used - cpu_before.get(key, 0.0)) / episodes for key, used in cpu_after.items()}
        groups: dict[str, float] = {}
        for (group, _, _), used in threads.items():
            groups[group] = groups.get(group, 0.0) + used
        return {
            "episodes": episodes,
            "seconds": elapsed,
            "episodes_per_s": episodes / elapsed,
            "solved": sum(r == 1.0 for env_rewards in rewards for r in env_rewards),
            "cpu_s_per_episode": groups,
            "thread_cpu_s_per_episode": threads,
            "ours_utilisation": sum(groups.values()) * episodes / elapsed / (os.cpu_count() or 1),
            "machine_utilisation": (busy_after[0] - busy_before[0]) / (busy_after[1] - busy_before[1]),
        }

    return asyncio.run(main())


def miniwob_scaling(concurrency: int, rounds: int, episodes: int) -> dict:
    """Rounds of one env against ``concurrency`` envs (alternating which runs first), each round
    printed; the median ratio, CPU per episode, and the bound on the ratio by the number of cores."""
    results: dict[str, list] = {"1": [], str(concurrency): []}
    print(
        f"\n| round | 1 env: episodes/s | {concurrency} envs: episodes/s | ratio | CPU s/episode (1 / {concurrency}) | "
        f"our processes' share of the {os.cpu_count()} cores (1 / {concurrency}) | whole machine busy (1 / {concurrency}) | load |"
        "\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for round_ in range(rounds):
        order = [1, concurrency] if round_ % 2 == 0 else [concurrency, 1]
        got = {
            n: miniwob_episodes(n, episodes if n == 1 else max(1, episodes // 2), seed=round_ * 100_000) for n in order
        }
        one, many = got[1], got[concurrency]
        results["1"].append(one)
        results[str(concurrency)].append(many)
        print(
            f"| {round_ + 1} | {one['episodes_per_s']:.2f} ({one['solved']}/{one['episodes']} solved) | "
            f"{many['episodes_per_s']:.2f} ({many['solved']}/{many['episodes']} solved) | "
            f"{many['episodes_per_s'] / one['episodes_per_s']:.2f}x | "
            f"{sum(one['cpu_s_per_episode'].values()):.2f} / {sum(many['cpu_s_per_episode'].values()):.2f} | "
            f"{one['ours_utilisation']:.0%} / {many['ours_utilisation']:.0%} | "
            f"{one['machine_utilisation']:.0%} / {many['machine_utilisation']:.0%} | {os.getloadavg()[0]:.1f} |",
            flush=True,
        )
    ratios = [m["episodes_per_s"] / o["episodes_per_s"] for o, m in zip(results["1"], results[str(concurrency)])]
    print(
        f"\nmedian ratio {concurrency} envs / 1 env: {statistics.median(ratios):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
    )

    def median_cpu(runs: list[dict], key: str) -> dict:
        keys = {k for run in runs for k in run[key]}
        return {k: statistics.median(run[key].get(k, 0.0) for run in runs) for k in keys}

    cpu = {n: median_cpu(runs, "cpu_s_per_episode") for n, runs in results.items()}
    threads = {n: median_cpu(runs, "thread_cpu_s_per_episode") for n, runs in results.items()}
    print(f"\n| CPU ms per episode (median of rounds) | 1 env | {concurrency} envs |\n|---|---:|---:|")
    for group in sorted(cpu[str(concurrency)], key=lambda g: -cpu[str(concurrency)][g]):
        print(f"| {group} | {1000 * cpu['1'].get(group, 0.0):.0f} | {1000 * cpu[str(concurrency)][group]:.0f} |")
    print(f"| all | {1000 * sum(cpu['1'].values()):.0f} | {1000 * sum(cpu[str(concurrency)].values()):.0f} |")
    busiest = sorted(threads[str(concurrency)].items(), key=lambda item: -item[1])[:8]
    print(f"\n| busiest threads, {concurrency} envs (process kind, thread) | CPU ms per episode |\n|---|---:|")
    for (group, _, name), used in busiest:
        print(f"| {group}: {name} | {1000 * used:.0f} |")

    # The bound: P cores run at most P CPU-seconds per second, and a process or thread that every
    # env shares runs on one core at a time (the Python process counts whole: the GIL).
    rate_1 = statistics.median(run["episodes_per_s"] for run in results["1"])
    per_episode = sum(cpu[str(concurrency)].values())
    shared = {group: used for group, used in cpu[str(concurrency)].items() if group.startswith("python")}
    shared |= {
        f"{group}: {name}": used
        for (group, _, name), used in threads[str(concurrency)].items()
        if group in _SHARED_GROUPS and not group.startswith("python")
    }
    serial_name, serial = max(shared.items(), key=lambda item: item[1])
    bounds = {cores: min(cores / per_episode, 1 / serial) for cores in (2, 4, 8, 16)}
    print(
        f"\nbound on {concurrency} envs: min(cores / {per_episode:.2f} CPU-s per episode, 1 / {serial:.3f} s of the busiest "
        f"shared thread ({serial_name})); one env {rate_1:.2f} episodes/s"
    )
    for cores, bound in bounds.items():
        print(f"  {cores:2d} cores: {bound:.2f} episodes/s = {bound / rate_1:.2f}x one env")
    return {
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "cpu_s_per_episode": cpu,
        "busiest_threads": [[group, name, used] for (group, _, name), used in busiest],
        "bound_by_cores": {cores: bound / rate_1 for cores, bound in bounds.items()},
    }


def miniwob_forks(repeats: int) -> dict:
    """Fork p50 of a MiniWoB++ login-user episode at turn 2: by state against by replay (interleaved)."""
    from agentgym.envs.web.miniwob import MiniWoBEnv

    env = MiniWoBEnv("login-user")
    state_tasks = MiniWoBEnv.state_fork_tasks
    samples: dict[str, list[float]] = {"restore": [], "replay": []}
    try:
        for seed in range(repeats):
            for mode in samples:
                observation, _ = env.reset(seed=seed)
                env.step(f'fill({element_id(observation["text"], "textbox", nth=0)}, "someone")')
                env.step(f'fill({element_id(observation["text"], "textbox", nth=1)}, "secret")')
                MiniWoBEnv.state_fork_tasks = state_tasks if mode == "restore" else frozenset()
                elapsed, child = timed(env.fork)
                assert child.fork_mode == mode, child.fork_mode
                child.close()
                samples[mode].append(elapsed)
    finally:
        MiniWoBEnv.state_fork_tasks = state_tasks
        env.close()
    return {mode: percentiles(values) for mode, values in samples.items()}


def pss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def memory_per_env(app: str) -> dict:
    host = BrowserHost.shared()

    def measure(count: int) -> tuple[float, float, list]:
        envs = [WebAppEnv(app) for _ in range(count)]
        for env in envs:
            walk(env, env.task_ids()[0], 2)
        time.sleep(0.5)
        return pss_mb(host.chromium_pids()), pss_mb([os.getpid()]), envs

    chromium_1, python_1, envs_1 = measure(1)
    chromium_8, python_8, envs_8 = measure(8)
    for env in envs_1 + envs_8:
        env.close()
    return {"chromium_mb": (chromium_8 - chromium_1) / 7, "python_mb": (python_8 - python_1) / 7}


def leaks(app: str, episodes: int) -> dict:
    host = BrowserHost.shared()
    env = WebAppEnv(app, max_turns=10**6)
    task_id = env.task_ids()[0]
    walk(env, task_id, 2)
    before = (host.run(host.context_count()), len(host.chromium_pids()))
    started = time.perf_counter()
    for episode in range(episodes):
        walk(env, task_id, 2)
        if episode % 10 == 0:
            env.fork().close()
    elapsed = time.perf_counter() - started
    time.sleep(1.0)  # renderers of closed contexts exit asynchronously
    after = (host.run(host.context_count()), len(host.chromium_pids()))
    env.close()
    return {
        "episodes": episodes,
        "seconds": elapsed,
        "contexts_before": before[0],
        "contexts_after": after[0],
        "chromium_processes_before": before[1],
        "chromium_processes_after": after[1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--app", default="shop")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=30, help="steps per env in the throughput runs")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the MiniWoB++ scaling measurement")
    parser.add_argument("--concurrency", type=int, default=8, help="envs at once in the MiniWoB++ scaling rounds")
    parser.add_argument(
        "--episodes-per-round",
        type=int,
        default=8,
        help="episodes of the single env per round (each of the many plays half)",
    )
    parser.add_argument(
        "--parts",
        default="latency,fork,throughput,scaling,miniwob,memory,leaks",
        help="comma-separated subset of the measurements to run",
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    results: dict = {"app": args.app, "load_average_at_start": os.getloadavg()}
    print(
        f"Web env on '{args.app}' (Chromium {BrowserHost.shared().executable}); "
        f"load average at start {os.getloadavg()[0]:.1f}\n"
    )
    if "latency" in parts:
        results["latency_ms"] = latencies(args.app, args.repeats)
        print("| operation | p50 ms | p95 ms |\n|---|---:|---:|")
        for name, (p50, p95) in results["latency_ms"].items():
            print(f"| {name} | {p50:.1f} | {p95:.1f} |")
    if "fork" in parts:
        fvr = results["fork_vs_replay_turn10"] = fork_vs_replay(args.app, max(5, args.repeats // 3))
        print(
            f"\nfork at turn 10: {fvr['fork_p50_ms']:.0f} ms (restored {fvr['restored']}, replayed {fvr['replayed']}); "
            f"replay from reset: {fvr['replay_p50_ms']:.0f} ms; replay/fork = {fvr['ratio']:.1f}x"
        )
    if "throughput" in parts:
        runs = {n: throughput(args.app, n, args.steps) for n in (1, 4, 8)}
        rates = results["steps_per_s"] = {n: rate for n, (rate, _) in runs.items()}
        results["cpu_ms_per_step"] = {n: cpu for n, (_, cpu) in runs.items()}
        print("\n| concurrent envs | steps/s | vs 1 env | CPU ms per step (all processes) |\n|---:|---:|---:|---:|")
        for n, rate in rates.items():
            print(f"| {n} | {rate:.1f} | {rate / rates[1]:.2f}x | {sum(runs[n][1].values()):.0f} |")
        print("\n| CPU ms per step | " + " | ".join(f"{n} env(s)" for n in runs) + " |\n|---|" + "---:|" * len(runs))
        for group in sorted(runs[1][1], key=lambda g: -runs[1][1][g]):
            print(f"| {group} | " + " | ".join(f"{runs[n][1].get(group, 0.0):.1f}" for n in runs) + " |")
    if "scaling" in parts:
        results["miniwob_scaling"] = miniwob_scaling(args.concurrency, args.rounds, args.episodes_per_round)
    if "miniwob" in parts:
        forks = results["miniwob_fork_ms"] = miniwob_forks(max(5, args.repeats // 2))
        print("\n| MiniWoB++ login-user fork at turn 2 | p50 ms | p95 ms |\n|---|---:|---:|")
        for mode, (p50, p95) in forks.items():
            print(f"| by {'state' if mode == 'restore' else 'replay'} | {p50:.1f} | {p95:.1f} |")
    if "memory" in parts:
        memory = results["memory_per_env_mb"] = memory_per_env(args.app)
        print(f"\nmemory per env: Chromium {memory['chromium_mb']:.1f} MB PSS, Python {memory['python_mb']:.1f} MB")
    if "leaks" in parts:
        leak = results["leaks"] = leaks(args.app, args.episodes)
        print(
            f"leaks after {leak['episodes']} episodes ({leak['seconds']:.0f} s): contexts {leak['contexts_before']} -> "
            f"{leak['contexts_after']}, Chromium processes {leak['chromium_processes_before']} -> "
            f"{leak['chromium_processes_after']}"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
