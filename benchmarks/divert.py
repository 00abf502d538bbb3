"""Measures branching evaluation (DIVERT) against linear Monte Carlo at equal token budgets on τ²-bench retail and airline.

    PYTHONPATH=. .venv/bin/python benchmarks/divert.py [--tasks 8] [--budget 60000] [--seeds 3] [--chance 0.3]

The agent is the scripted imperfect agent (:data:`agentgym.eval.scripted.IMPERFECT`: it fails
under particular user behaviours) and the user the scripted diverse user
(:class:`agentgym.envs.diverse_user.DiverseScriptedUser`): plain and steered at junctions for
branching, drawing a behaviour with probability ``--chance`` per turn for Monte Carlo. Both get
``--budget`` agent + user tokens per task (counted as :mod:`agentgym.eval.branching` says), on
the first ``--tasks`` tasks of each domain, for each seed. Targets (issue 33, as DIVERT reports):
branching finds ≥ 1.5× the failures per token, and at least as many tasks with a failure.

Prints a Markdown table per domain (mean and 95% bootstrap interval over seeds) and a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.envs.conversation.tau2 import tau2_tasks  # noqa: E402
from agentgym.envs.diverse_user import DiverseScriptedUser  # noqa: E402
from agentgym.eval.branching import BranchingConfig, run_branching, run_monte_carlo, summarize_run  # noqa: E402
from agentgym.eval.scripted import IMPERFECT, scripted_agent_for  # noqa: E402
from agentgym.eval.suites import Suite, SuiteTask  # noqa: E402

METRICS = ("failures_per_1k_tokens", "failures", "distinct_failures", "tasks_with_failure", "episodes", "tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="the first N tasks of each domain")
    parser.add_argument("--budget", type=int, default=60_000, help="agent + user tokens per task and mode")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--chance", type=float, default=0.3, help="the Monte Carlo user's behaviour chance per turn")
    parser.add_argument("--domains", default="retail,airline")
    parser.add_argument("--out", help="keep the run directories here (default: a temporary directory)")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="divert-"))
    config = BranchingConfig(token_budget=args.budget)
    results = {}
    for domain in args.domains.split(","):
        env_id = f"agentgym/conversation.tau2-{domain}-v0"
        ids = list(tau2_tasks(domain))[: args.tasks]
        suite = Suite(f"tau2-{domain}", tuple(SuiteTask(env_id, i, domain, {"tasks": ids}) for i in ids))
        out = root / domain
        started = time.perf_counter()
        for seed in range(args.seeds):
            common = dict(config=config, out_dir=out, seed=seed, user_name="diverse-scripted")
            asyncio.run(run_branching(suite, scripted_agent_for(IMPERFECT), lambda s: DiverseScriptedUser(), **common))
            asyncio.run(
                run_monte_carlo(
                    suite, scripted_agent_for(IMPERFECT), lambda s: DiverseScriptedUser(args.chance, s), **common
                )
            )
        summary = summarize_run(out)
        results[domain] = summary
        print(f"\n### {domain}: {len(ids)} tasks, {args.budget} tokens per task, {args.seeds} seeds "
              f"({time.perf_counter() - started:.0f} s; runs in {out})\n")  # fmt: skip
        print("| metric | branching | Monte Carlo |\n|---|---|---|")
        for metric in METRICS:
            cells = []
            for mode in ("branching", "monte_carlo"):
                value = summary[mode]["over_seeds"].get(metric)
                cells.append(f"{value['mean']:.4g} [{value['ci95'][0]:.4g}, {value['ci95'][1]:.4g}]" if value else "-")
            print(f"| {metric} | {cells[0]} | {cells[1]} |")
        ratio = summary.get("ratio", {})
        print(
            f"\nbranching / Monte Carlo failures per 1k tokens: {ratio.get('failures_per_1k_tokens'):.2f} "
            f"(target >= 1.5); tasks with a failure, difference of means: "
            f"{ratio.get('tasks_with_failure_difference'):+.2f} (target >= 0)"
        )
    print(json.dumps({domain: {k: s[k] for k in ("ratio",)} for domain, s in results.items()}))


if __name__ == "__main__":
    main()
