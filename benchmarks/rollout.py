"""The rollout engine's numbers for docs/results.md: tree vs linear rollouts (env steps, tokens, prefix-sharing saving) and runner throughput.

Runs, with the tiny local model:

1. trees vs the same number of linear episodes, per strategy (uniform, entropy, contrast), on
   the tool-style CounterEnv and the code envs HumanEval and RepoFix (Docker) — see
   ``benchmarks/rollout_tree.py`` — then on CounterEnv with random valid actions, whose
   episodes end at varying depths (the tiny model's all run to the turn cap);
2. runner throughput at concurrency 1, 8 and 32 against a fixed-latency stub policy, in chat
   mode (the runner alone) and token mode (plus the agent's per-turn tokenising) — see
   ``benchmarks/rollout_runner.py``.

    .venv/bin/python benchmarks/rollout.py          # about 4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["counter", "humaneval", "repofix"])
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import rollout_tree

    for strategy in ("uniform", "entropy", "contrast"):
        tree_args = argparse.Namespace(
            env=args.envs,
            strategy=strategy,
            leaves=8,
            roots=2,
            branch_every=2,
            branches=2,
            tasks=2,
            max_turns=6,
            max_tokens=16,
            policy="tiny",
        )
        print(f"## Tree vs linear rollouts: {strategy}\n", flush=True)
        asyncio.run(rollout_tree._main(tree_args))
    for strategy in ("uniform", "contrast"):
        tree_args = argparse.Namespace(
            env=["counter"],
            strategy=strategy,
            leaves=16,
            roots=4,
            branch_every=2,
            branches=2,
            tasks=3,
            max_turns=10,
            max_tokens=64,
            policy="random-valid-actions",
        )
        print(f"## Tree vs linear rollouts with episodes of varying length: {strategy}\n", flush=True)
        asyncio.run(rollout_tree._main(tree_args))
    for mode in ("chat", "tokens"):
        print(f"## Runner throughput, {mode} mode\n", flush=True)
        # A fresh process per mode so that the first run's threads and caches do not colour the second.
        subprocess.run([sys.executable, str(HERE / "rollout_runner.py"), "--mode", mode], check=True)


if __name__ == "__main__":
    main()
