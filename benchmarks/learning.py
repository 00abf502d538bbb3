"""Proof that the trainers learn, and what asynchrony buys: KeyChain (or Calculator) on CPU with the tiny local model.

Learning (``--part learning``):

1. SFT warm start: the tiny model is fine-tuned with TRL's SFTTrainer on scripted demonstrations
   of the train split (token-exact multi-turn sequences through the real agent loop); by default
   ``RL_DEMO_START``, an early-answering demonstrator whose habit RL has to unlearn (``--sft-*``).
2. RL from that start with tree GRPO, linear GRPO and SAO (examples/configs/<env>-*.yaml, ``--env``),
   each for ``--minutes`` of wall time (SAO makes well over 300 updates in that time).
3. Measured: held-out success (``--heldout`` tasks of the heldout split; greedy, and sampled at
   the training temperature) of the SFT start and of each trained model; the training-success
   curve against env steps (tree GRPO's env steps to reach linear GRPO's final success, as a
   fraction of linear's); SAO's reward curve and KL to its start over its updates. Targets:
   +30 points held-out for both trainers; tree ≤ 70% of linear's env steps; SAO
   without collapse over 300 updates.

Throughput (``--part throughput``): KeyChain with long-tailed lookup latency
(``step_latency``), SAO's asynchronous producer/learner against the synchronous group pipeline
(linear GRPO: generate a batch, wait for its slowest episode, then train) with the same batch of
trajectories per step and the same rollout concurrency (``--concurrency`` env slots; by default
one per trajectory of the batch, as a synchronous pipeline generates its batch at once):
trajectories/s and the learner's idle fraction. Target: ≥ 2.5× trajectories/s.

Everything goes to ``--out``: results.json, learning_curve.svg, and each run's directory
(TensorBoard events, trajectory store, trainer_state.json). Seeds: ``--seed`` for SFT, the
trainers and the task order; sampling during rollouts is not seeded (HFPolicy draws fresh seeds).

    .venv/bin/python benchmarks/learning.py                      # everything, about 1.5 h on 2 cores
    .venv/bin/python benchmarks/learning.py --part learning --seeds 0,1,2   # means and 95% intervals, ~3 h
    .venv/bin/python benchmarks/learning.py --part throughput --steps 20
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # the demo's helpers, so both measure the same way

from training_runs import (  # noqa: E402
    log_series,
    mean_interval,
    smooth,
    train_run,
    training_curve,
    write_learning_curve,
)

from agentgym.train import load_config  # noqa: E402
from agentgym.trainers.warm_start import (  # noqa: E402
    RL_DEMO_START,
    WARM_START_RECORD,
    WarmStartFailed,
    held_out_success,
    scripted_warm_start,
)

CONFIGS = ROOT / "examples" / "configs"
BATCH = 16  # throughput: trained trajectories per learner step in both pipelines
# Logged steps averaged for tree vs linear: one step's training success (8 tasks at T 0.7) is noise.
COMPARISON_WINDOW = 20
RUNS = ("tree_grpo", "linear_grpo", "sao")
#: Envs with scripted demonstrations and a config per run: examples/configs/<env>-<run>.yaml.
ENVS = ("keychain", "calculator")
ENV_TITLES = {"keychain": "KeyChain", "calculator": "Calculator"}


def config_path(env: str, run: str) -> Path:
    return CONFIGS / f"{env}-{run}.yaml"


def steps_to_reach(log: list[dict], target: float, window: int = COMPARISON_WINDOW) -> float | None:
    """Env steps at which the training success's ``window``-step mean first reaches ``target`` (full windows only)."""
    for steps, value in training_curve(log, window)[window - 1 :]:
        if value >= target:
            return steps
    return None


def sft_start(args, config: dict, out: Path) -> Path:
    """The SFT start the ``--sft-*`` options and ``--seed`` describe, built once into ``out/sft``."""
    return scripted_warm_start(
        out / "sft",
        config,
        tasks=args.sft_tasks,
        epochs=args.sft_epochs,
        learning_rate=args.sft_lr,
        seed=args.seed,
        mistake_rate=args.sft_mistake_rate,
        min_start_success=args.sft_min_start_success,
        max_rounds=args.sft_max_rounds,
    )


def learning(args, out: Path) -> dict:
    config = load_config(config_path(args.env, "tree_grpo"))
    sft = sft_start(args, config, out)
    results = {
        "seed": args.seed,
        "minutes": args.minutes,
        "heldout_tasks": args.heldout,
        "sft": {
            "heldout_success": held_out_success(sft, config, args.heldout),
            "heldout_success_sampled": held_out_success(sft, config, args.heldout, greedy=False),
            "tasks": args.sft_tasks,
            "epochs": args.sft_epochs,
            "learning_rate": args.sft_lr,
            "mistake_rate": args.sft_mistake_rate,
            # each round's epochs, losses and (when checked) sampled success on unseen train tasks
            "rounds": json.loads((sft / WARM_START_RECORD).read_text())["rounds"],
        },
    }
    print(
        f"SFT start: held-out success {results['sft']['heldout_success']:.3f} greedy, "
        f"{results['sft']['heldout_success_sampled']:.3f} at the training temperature "
        f"({len(results['sft']['rounds'])} round(s) of {args.sft_epochs:g} epochs)",
        flush=True,
    )
    for name in args.runs:
        overrides = [
            f"model={sft}",
            f"output_dir={out / name}",
            f"seed={args.seed}",
            "resume=false",
            f"time_budget_s={args.minutes * 60}",
            "max_steps=100000",
            "save_steps=100000",
            *[setting for run_name, setting in args.set if run_name == name],
        ]
        run = train_run(config_path(args.env, name), overrides)
        run_config = load_config(config_path(args.env, name))
        run["heldout_success"] = held_out_success(run["output_dir"], run_config, args.heldout)
        run["heldout_success_sampled"] = held_out_success(run["output_dir"], run_config, args.heldout, greedy=False)
        run["gain_points"] = 100 * (run["heldout_success"] - results["sft"]["heldout_success"])
        run["gain_points_sampled"] = 100 * (run["heldout_success_sampled"] - results["sft"]["heldout_success_sampled"])
        results[name] = run
        print(
            f"{name}: {run['steps']} steps in {run['wall_s']:.0f}s, held-out success {run['heldout_success']:.3f} "
            f"greedy ({run['gain_points']:+.1f} points), {run['heldout_success_sampled']:.3f} at the training "
            f"temperature ({run['gain_points_sampled']:+.1f})",
            flush=True,
        )
    if {"tree_grpo", "linear_grpo"} <= set(args.runs):
        linear = results["linear_grpo"]["log"]
        linear_last = log_series(linear, "rollout/success_rate")[-COMPARISON_WINDOW:]
        linear_final = sum(linear_last) / max(1, len(linear_last))
        linear_steps = max(log_series(linear, "rollout/env_steps_total"), default=0.0)
        tree_steps = steps_to_reach(results["tree_grpo"]["log"], linear_final)
        results["tree_vs_linear"] = {
            "linear_final_train_success": linear_final,
            "linear_env_steps": linear_steps,
            "tree_env_steps_to_match": tree_steps,
            "fraction": None if tree_steps is None or not linear_steps else tree_steps / linear_steps,
        }
    if "sao" in args.runs:
        sao = results["sao"]["log"]
        rewards = log_series(sao, "rollout/success_rate")
        kl = log_series(sao, "kl_to_start")
        window = smooth(rewards, 20)
        results["sao_stability"] = {
            "updates": results["sao"]["steps"],
            "first20_success": window[19] if len(window) >= 20 else None,
            "last20_success": window[-1] if window else None,
            "min20_success_after_update_20": min(window[19:], default=None),
            "success20_at_update_300": window[299] if len(window) >= 300 else None,
            "max_kl_to_start": max(kl, default=None),
            "last_kl_to_start": kl[-1] if kl else None,
            "max_entropy": max(log_series(sao, "entropy"), default=None),
            "dropped_stale": max(log_series(sao, "staleness/dropped_total"), default=0.0),
        }
    write_learning_curve(
        {name: training_curve(results[name]["log"]) for name in args.runs},
        out / "learning_curve.svg",
        title=f"{ENV_TITLES[args.env]}, tiny model, CPU, seed {args.seed}",
    )
    for name in args.runs:  # the full histories stay in each run's trainer_state.json
        results[name].pop("log")
    return results


def throughput(args, out: Path) -> dict:
    """Async SAO vs. the synchronous group pipeline on a long-tailed env, same batch and concurrency."""
    # From the SFT start: its episodes call lookup (where the latency is), a random model's do not.
    sft = sft_start(args, load_config(config_path("keychain", "sao")), out)
    common = [
        f"model={sft}",
        f"max_steps={args.steps}",
        "save_steps=100000",
        "resume=false",
        "report_to=none",
        f"env_kwargs={{split: train, num_tasks: 200, max_hops: 2, step_latency: {args.latency:g}}}",
        f"rollout_concurrency={args.concurrency}",
        f"seed={args.seed}",
    ]
    for name in ("throughput-sao", "throughput-sync"):  # a fresh store each time: nothing from an earlier measurement
        shutil.rmtree(out / name, ignore_errors=True)
    # BATCH trajectories per learner step in both: SAO takes BATCH episodes, the group pipeline BATCH / 4 tasks × 4.
    sao = train_run(
        config_path("keychain", "sao"),
        [
            *common,
            f"output_dir={out / 'throughput-sao'}",
            f"per_device_train_batch_size={BATCH}",
            "log_kl_to_start=false",
        ],
    )
    sync = train_run(
        config_path("keychain", "linear_grpo"),
        [
            *common,
            f"output_dir={out / 'throughput-sync'}",
            f"per_device_train_batch_size={BATCH // 4}",
            "num_generations=4",
        ],
    )
    # Trained trajectories (SAO's dropped stale ones are counted apart, as waste).
    result = {
        "latency_median_s": args.latency,
        "steps": args.steps,
        "batch_trajectories": BATCH,
        "rollout_concurrency": args.concurrency,
        "sao": {
            "trajectories_per_s": BATCH * sao["steps"] / sao["wall_s"],
            "dropped_stale": max(log_series(sao["log"], "staleness/dropped_total"), default=0.0),
            "learner_idle_fraction": sum(log_series(sao["log"], "learner/wait_s")) / sao["wall_s"],
        },
        "sync": {
            "trajectories_per_s": BATCH * sync["steps"] / sync["wall_s"],
            "learner_idle_fraction": sum(log_series(sync["log"], "rollout/time_s")) / sync["wall_s"],
        },
    }
    result["speedup"] = result["sao"]["trajectories_per_s"] / result["sync"]["trajectories_per_s"]
    print(
        f"throughput: SAO {result['sao']['trajectories_per_s']:.2f} traj/s (learner idle "
        f"{result['sao']['learner_idle_fraction']:.0%}) vs sync {result['sync']['trajectories_per_s']:.2f} traj/s "
        f"(idle {result['sync']['learner_idle_fraction']:.0%}): {result['speedup']:.2f}x",
        flush=True,
    )
    return result


#: What decides one seed's learning results: a seed whose out/seed-N/results.json has the same is not run again.
SEED_SETTINGS = (
    "env",
    "minutes",
    "runs",
    "heldout",
    "sft_tasks",
    "sft_epochs",
    "sft_lr",
    "sft_mistake_rate",
    "sft_min_start_success",
    "sft_max_rounds",
    "seed",
    "set",
)


def over_seeds(args, out: Path) -> dict:
    """:func:`learning` once per seed (each with its own SFT start, shared by its runs), then each figure's mean and 95% interval.

    Each seed's results are kept in ``out/seed-N/results.json`` with the settings: a rerun with the
    same settings (after a crash, or with more seeds) reuses them. A seed whose SFT start fails its
    self-check (:class:`WarmStartFailed`) is recorded as such and left out of the figures, which say
    how many seeds they cover; the other seeds still run.
    """
    per_seed = {}
    for seed in args.seeds:
        seed_args = argparse.Namespace(**{**vars(args), "seed": seed})
        saved = out / f"seed-{seed}" / "results.json"
        settings = json.loads(json.dumps({k: v for k, v in vars(seed_args).items() if k in SEED_SETTINGS}))
        if saved.exists() and (kept := json.loads(saved.read_text())).get("settings") == settings:
            print(f"--- seed {seed}: kept from {saved} (the same settings)", flush=True)
            per_seed[seed] = kept["results"]
            continue
        print(f"--- seed {seed}", flush=True)
        try:
            per_seed[seed] = learning(seed_args, saved.parent)
        except WarmStartFailed as error:
            # A start that cannot learn is a result of this seed: reported, kept (a rerun does not train
            # it again), and the other seeds still run.
            print(f"--- seed {seed}: {error}", flush=True)
            per_seed[seed] = {"start_failed": str(error)}
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps({"settings": settings, "results": per_seed[seed]}, indent=2, default=str))
    failed = [seed for seed, r in per_seed.items() if "start_failed" in r]
    ran = [r for r in per_seed.values() if "start_failed" not in r]
    figures: dict[str, list[float]] = {}
    if ran:  # a mean needs at least one seed
        figures["sft_heldout_success"] = [r["sft"]["heldout_success"] for r in ran]
        for name in args.runs:
            figures[f"{name}_heldout_success"] = [r[name]["heldout_success"] for r in ran]
            figures[f"{name}_gain_points"] = [r[name]["gain_points"] for r in ran]
            figures[f"{name}_gain_points_sampled"] = [r[name]["gain_points_sampled"] for r in ran]
    fractions = [r["tree_vs_linear"]["fraction"] for r in ran if "tree_vs_linear" in r]
    if fractions:
        # A seed where tree never reached linear's final success counts as 1 (no saving), not as missing.
        figures["tree_env_steps_fraction_of_linear"] = [1.0 if f is None else min(f, 1.0) for f in fractions]
    summary = {}
    for figure, values in figures.items():
        mean, low, high = mean_interval(values)
        summary[figure] = {"values": values, "mean": mean, "ci95": [low, high]}
        print(f"{figure}: {mean:.3g} (95% interval {low:.3g} to {high:.3g}; {len(values)} seeds)", flush=True)
    if failed:
        print(f"starts that failed their check (not in the figures above): seeds {failed}", flush=True)
    return {"seeds": per_seed, "summary": summary, "starts_failed": failed}


def run_setting(text: str) -> tuple[str, str]:
    """``RUN.key=value`` → (RUN, ``key=value``): a config override for one run."""
    name, dot, setting = text.partition(".")
    if not dot or "=" not in setting or name not in RUNS:
        raise argparse.ArgumentTypeError(f"expected RUN.key=value with RUN one of {', '.join(RUNS)}, got {text!r}")
    return name, setting


def run_names(text: str) -> list[str]:
    names = text.split(",")
    if unknown := [n for n in names if n not in RUNS]:
        raise argparse.ArgumentTypeError(f"unknown run {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["all", "learning", "throughput"], default="all")
    parser.add_argument(
        "--env",
        choices=ENVS,
        default="keychain",
        help="learning: the env (throughput is KeyChain's; default: %(default)s)",
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="wall time per RL run (default: %(default)s)")
    parser.add_argument(
        "--runs", type=run_names, default=list(RUNS), help=f"learning: which of {','.join(RUNS)} to run (default: all)"
    )
    parser.add_argument("--heldout", type=int, default=100, help="held-out tasks to evaluate (default: %(default)s)")
    # The demo's start by default (RL_DEMO_START). The solutions-only start (--sft-mistake-rate 0) at
    # 3e-3, seed 0: 1000 × 2 epochs 13% held-out, × 2.5 58%, × 3 69.5%.
    parser.add_argument(
        "--sft-tasks", type=int, default=RL_DEMO_START["tasks"], help="demonstrations (train tasks) for the SFT start"
    )
    parser.add_argument("--sft-epochs", type=float, default=RL_DEMO_START["epochs"])
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument(
        "--sft-mistake-rate",
        type=float,
        default=RL_DEMO_START["mistake_rate"],
        help="how often the demonstrator makes the env's scripted mistake (KeyChain: submits the key a pointer names "
        "instead of looking it up; Calculator: evaluates a + b * c left to right) (default: %(default)s)",
    )
    parser.add_argument(
        "--sft-min-start-success",
        type=float,
        default=RL_DEMO_START["min_start_success"],
        help="the start's self-check: sampled success it must reach on unseen train tasks, else it trains another "
        "round of --sft-epochs (0: no check; default: %(default)s)",
    )
    parser.add_argument("--sft-max-rounds", type=int, default=RL_DEMO_START["max_rounds"])
    parser.add_argument("--steps", type=int, default=20, help="throughput: learner steps per pipeline")
    parser.add_argument("--latency", type=float, default=0.3, help="throughput: median seconds per lookup")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=BATCH,
        help="throughput: episodes in flight in both pipelines (default: one per trajectory of a batch)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seeds",
        type=lambda text: [int(s) for s in text.split(",")],
        default=None,
        help="learning: repeat over these seeds (e.g. 0,1,2) and report means with 95%% intervals",
    )
    parser.add_argument(
        "--set",
        type=run_setting,
        action="append",
        default=[],
        help="learning: a config override for one run, e.g. sao.off_policy_correction=decoupled or "
        "linear_grpo.step_advantage_weight=1 (repeatable)",
    )
    parser.add_argument("--out", default="runs/learning")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    if args.part in ("all", "learning"):
        results["learning"] = over_seeds(args, out) if args.seeds else learning(args, out)
    if args.part in ("all", "throughput"):
        results["throughput"] = throughput(args, out)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"results in {out / 'results.json'}")


if __name__ == "__main__":
    main()
