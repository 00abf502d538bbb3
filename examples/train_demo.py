"""The main job on a CPU: a tiny local model warm-started on KeyChain demonstrations, trained with turn-level tree GRPO, success before and after.

KeyChain (``agentgym.envs.tool.keychain``) is a built-in multi-turn tool env: follow key
pointers with ``lookup`` until a number, then ``submit`` it. The run:

1. builds the tiny Qwen2-style model locally (no downloads) and fine-tunes it for a few minutes
   with TRL's SFTTrainer on scripted episodes of train tasks from an imperfect demonstrator: 60%
   of the time it submits the key a pointer names instead of looking it up (``RL_DEMO_START``), the
   premature answer of real agents, so the start has a habit that RL has to unlearn;
2. measures greedy success on held-out tasks;
3. trains it with ``TreeGRPOTrainer`` (examples/configs/keychain-tree_grpo.yaml) for
   ``--minutes`` of wall time, rollouts from forked envs, per-turn advantages;
4. measures held-out success again and saves the learning curve as an SVG.

    .venv/bin/python examples/train_demo.py                  # about 12 minutes on 2 cores
    .venv/bin/python examples/train_demo.py --minutes 20 --out runs/demo
"""

from __future__ import annotations

import argparse
from pathlib import Path

from training_runs import curve_text, train_run, training_curve, write_learning_curve  # examples/training_runs.py

from agentgym.train import load_config
from agentgym.trainers.warm_start import RL_DEMO_START, held_out_success, scripted_warm_start

CONFIG = Path(__file__).resolve().parent / "configs" / "keychain-tree_grpo.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="RL wall time (default: %(default)s)")
    parser.add_argument("--heldout", type=int, default=100, help="held-out tasks (default: %(default)s)")
    parser.add_argument("--out", default="runs/demo", help="where the models, logs and curve go")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    config = load_config(CONFIG)

    print(
        "1/3 SFT warm start on an early-answering KeyChain demonstrator (built once per --out; it checks itself on "
        "unseen train tasks) ...",
        flush=True,
    )
    start = scripted_warm_start(out / "sft", config, seed=args.seed, **RL_DEMO_START)
    before = held_out_success(start, config, args.heldout)
    print(f"    held-out success after SFT: {before:.0%} of {args.heldout} tasks", flush=True)

    print(f"2/3 tree GRPO for {args.minutes:g} min ...", flush=True)
    run = train_run(
        CONFIG,
        [
            f"model={start}",
            f"output_dir={out / 'tree_grpo'}",
            "resume=false",
            f"seed={args.seed}",
            f"time_budget_s={args.minutes * 60}",
            "max_steps=100000",
            "save_steps=100000",
            "report_to=none",
        ],
    )
    after = held_out_success(run["output_dir"], config, args.heldout)

    curve = training_curve(run["log"], window=20)
    svg = write_learning_curve({"tree GRPO": curve}, out / "learning_curve.svg", title="KeyChain, tiny model, CPU")
    print(
        f"3/3 {run['steps']} RL steps in {run['wall_s']:.0f} s; held-out success {before:.0%} -> {after:.0%} "
        f"({100 * (after - before):+.0f} points).\n    training success (20-step mean) by env steps: "
        f"{curve_text(curve)}\n    learning curve: {svg}",
        flush=True,
    )


if __name__ == "__main__":
    main()
