"""Measures branching evaluation (DIVERT) against linear Monte Carlo at equal token budgets on τ²-bench retail and airline.

    PYTHONPATH=. .venv/bin/python benchmarks/divert.py [--tasks 8] [--budget 60000] [--seeds 3] [--chance 0.3]
    PYTHONPATH=. .venv/bin/python benchmarks/divert.py --model tiny [--max-tokens 64] [--max-turns 4] ...

By default the agent is the scripted imperfect agent (:data:`agentgym.eval.scripted.IMPERFECT`:
it fails under particular user behaviours) and the user the scripted diverse user
(:class:`agentgym.envs.diverse_user.DiverseScriptedUser`): plain and steered at junctions for
branching, drawing a behaviour with probability ``--chance`` per turn for Monte Carlo. With
``--model`` (a local model directory, or ``tiny``: the tiny model built with a 16,384-position
window, since τ²'s agent prompt is 7-8k tokens in its tokenizer) one local model is both the
agent and the user (:func:`agentgym.eval.branching.policy_users`: greedy and steered for
branching, temperature 1 for Monte Carlo), and every token is counted by its tokenizer. Both
modes get ``--budget`` agent + user tokens per task (counted as :mod:`agentgym.eval.branching`
says), on the first ``--tasks`` tasks of each domain (or ``--task-ids``), for each seed. Targets (issue 33, as DIVERT reports):
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.envs.conversation.tau2 import tau2_tasks  # noqa: E402
from agentgym.envs.diverse_user import DiverseScriptedUser  # noqa: E402
from agentgym.eval.branching import (  # noqa: E402
    BranchingConfig,
    policy_users,
    run_branching,
    run_monte_carlo,
    summarize_run,
)
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
    parser.add_argument("--model", help="a local model as agent and user: a model directory or 'tiny'")
    parser.add_argument("--max-tokens", type=int, default=64, help="with --model: the most tokens of one turn")
    parser.add_argument("--max-turns", type=int, help="the agent's turn limit per episode (default: the config's)")
    parser.add_argument("--task-ids", help="comma-separated task ids (the same in every domain) instead of --tasks")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="divert-"))
    config = BranchingConfig(token_budget=args.budget, max_turns=args.max_turns or BranchingConfig.max_turns)
    if args.model:
        from agentgym.models import resolve_model, tiny_model_path
        from agentgym.rollout.agent import AgentConfig
        from agentgym.rollout.hf_policy import HFPolicy
        from agentgym.rollout.policy import SamplingParams

        model = HFPolicy(
            str(tiny_model_path(max_positions=16384) if args.model == "tiny" else resolve_model(args.model))
        )
        agent: Any = model
        users = policy_users(model, args.max_tokens)
        extra = dict(agent_config=AgentConfig(sampling=SamplingParams(max_tokens=args.max_tokens), system_prompt=None))
        user_name = f"policy:{args.model}"
    else:
        agent = scripted_agent_for(IMPERFECT)
        users = lambda mode: (  # noqa: E731
            (lambda s: DiverseScriptedUser())
            if mode == "branching"
            else (lambda s: DiverseScriptedUser(args.chance, s))
        )
        extra = {}
        user_name = "diverse-scripted"
    domains = args.domains.split(",")
    suites, elapsed = {}, {}
    for domain in domains:
        env_id = f"agentgym/conversation.tau2-{domain}-v0"
        ids = args.task_ids.split(",") if args.task_ids else list(tau2_tasks(domain))[: args.tasks]
        suites[domain] = Suite(f"tau2-{domain}", tuple(SuiteTask(env_id, i, domain, {"tasks": ids}) for i in ids))

    async def run_all() -> None:  # one loop for every run: a local model's batching lives on it
        for domain in domains:
            started = time.perf_counter()
            for seed in range(args.seeds):
                common = dict(config=config, out_dir=root / domain, seed=seed, user_name=user_name, **extra)
                await run_branching(suites[domain], agent, users("branching"), **common)
                await run_monte_carlo(suites[domain], agent, users("monte_carlo"), **common)
            elapsed[domain] = time.perf_counter() - started

    asyncio.run(run_all())
    results = {}
    for domain in domains:
        out, ids = root / domain, suites[domain].tasks
        summary = summarize_run(out)
        results[domain] = summary
        print(f"\n### {domain}: {len(ids)} tasks, {args.budget} tokens per task, {args.seeds} seeds, "
              f"agent and user: {args.model or 'scripted'} "
              f"({elapsed[domain]:.0f} s; runs in {out})\n")  # fmt: skip
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
