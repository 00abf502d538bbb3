"""Proof that the trainers learn, and what asynchrony buys: KeyChain on CPU with the tiny local model.

Learning (``--part learning``):

1. SFT warm start: the tiny model is fine-tuned with TRL's SFTTrainer on scripted demonstrations
   of the train split (token-exact multi-turn sequences through the real agent loop).
2. RL from that start with tree GRPO, linear GRPO and SAO (examples/configs/keychain-*.yaml),
   each for ``--minutes`` of wall time (SAO also stops at 300 updates).
3. Measured: held-out success (greedy, ``--heldout`` tasks of the heldout split) of the SFT start
   and of each trained model; the training-success curve against env steps (tree GRPO's env
   steps to reach linear GRPO's final success, as a fraction of linear's); SAO's reward curve and
   KL to its start over its updates. Targets (issue 7): +30 points held-out for both trainers;
   tree ≤ 70% of linear's env steps; SAO without collapse over 300 updates.

Throughput (``--part throughput``): KeyChain with long-tailed lookup latency
(``step_latency``), SAO's asynchronous producer/learner against the synchronous group pipeline
(linear GRPO: generate a batch, wait for its slowest episode, then train) with the same batch of
trajectories per step and the same rollout concurrency: trajectories/s and the learner's idle
fraction. Target: ≥ 2.5× trajectories/s.

Everything goes to ``--out``: results.json, learning_curve.svg, and each run's directory
(TensorBoard events, trajectory store, trainer_state.json). Seeds: ``--seed`` for SFT, the
trainers and the task order; sampling during rollouts is not seeded (HFPolicy draws fresh seeds).

    .venv/bin/python benchmarks/learning.py                      # everything, about 1.5 h on 2 cores
    .venv/bin/python benchmarks/learning.py --part throughput --steps 20
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "configs"
RUNS = {"tree_grpo": "keychain-tree_grpo.yaml", "linear_grpo": "keychain-linear_grpo.yaml", "sao": "keychain-sao.yaml"}


def _agent_config(config: dict, greedy: bool):
    from agentgym.rollout.agent import AgentConfig
    from agentgym.rollout.policy import SamplingParams

    return AgentConfig(sampling=SamplingParams(max_tokens=config["max_turn_tokens"],
                                               temperature=0.0 if greedy else config.get("temperature", 1.0)),
                       system_prompt=config.get("system_prompt"), max_turns=config["max_turns"], mode="tokens")


def warm_start(out: Path, config: dict, args) -> Path:
    """The SFT start (built once per --out)."""
    from transformers import AutoTokenizer

    from agentgym.envs.tool.keychain import demonstration, make_task, task_ids
    from agentgym.models import tiny_model_path
    from agentgym.trainers.rollouts import make_env_factory
    from agentgym.trainers.warm_start import demonstration_dataset, demonstrations, sft_warm_start

    target = out / "sft"
    if (target / "model.safetensors").exists():
        return target
    base = tiny_model_path()
    tasks = task_ids("train", config["env_kwargs"]["num_tasks"])
    trajectories = demonstrations(make_env_factory(config["env_id"], config["env_kwargs"]), tasks,
                                  lambda t: demonstration(make_task(t, config["env_kwargs"]["max_hops"])),
                                  AutoTokenizer.from_pretrained(base), _agent_config(config, greedy=True))
    dataset = demonstration_dataset(trajectories)
    return sft_warm_start(base, dataset, target, epochs=args.sft_epochs, learning_rate=args.sft_lr, seed=args.seed)


def held_out(model: Path, config: dict, count: int) -> float:
    from agentgym.envs.tool.keychain import task_ids
    from agentgym.trainers.rollouts import make_env_factory
    from agentgym.trainers.warm_start import success_rate

    env_kwargs = {**config["env_kwargs"], "split": "heldout", "num_tasks": count}
    return success_rate(model, make_env_factory(config["env_id"], env_kwargs), task_ids("heldout", count),
                        _agent_config(config, greedy=True))


def train(config_name: str, overrides: list[str]) -> dict:
    """One run of ``agentgym.train`` in this process; returns its log history."""
    from agentgym.train import build_trainer, load_config

    trainer = build_trainer(load_config(CONFIGS / config_name, overrides))
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    trainer.save_model(trainer.args.output_dir)
    trainer.save_state()
    return {"log": trainer.state.log_history, "wall_s": wall, "steps": trainer.state.global_step,
            "output_dir": trainer.args.output_dir}


def smooth(values: list[float], window: int = 5) -> list[float]:
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]


def series(log: list[dict], key: str) -> list[float]:
    return [h[key] for h in log if key in h and h[key] is not None and not math.isnan(h[key])]


def steps_to_reach(log: list[dict], target: float) -> float | None:
    """Env steps at which the smoothed training success first reaches ``target``."""
    points = [(h["rollout/env_steps_total"], h["rollout/success_rate"]) for h in log
              if "rollout/env_steps_total" in h and "rollout/success_rate" in h]
    for (steps, _), value in zip(points, smooth([s for _, s in points])):
        if value >= target:
            return steps
    return None


def learning(args, out: Path) -> dict:
    from agentgym.train import load_config

    config = load_config(CONFIGS / RUNS["tree_grpo"])
    sft = warm_start(out, config, args)
    results = {"seed": args.seed, "minutes": args.minutes, "heldout_tasks": args.heldout,
               "sft": {"heldout_success": held_out(sft, config, args.heldout)}}
    print(f"SFT start: held-out success {results['sft']['heldout_success']:.3f}", flush=True)
    for name, config_name in RUNS.items():
        overrides = [f"model={sft}", f"output_dir={out / name}", f"seed={args.seed}", "resume=false",
                     f"time_budget_s={args.minutes * 60}", "max_steps=300" if name == "sao" else "max_steps=100000",
                     "save_steps=100000"]
        run = train(config_name, overrides)
        run["heldout_success"] = held_out(Path(run["output_dir"]), load_config(CONFIGS / config_name), args.heldout)
        run["gain_points"] = 100 * (run["heldout_success"] - results["sft"]["heldout_success"])
        results[name] = run
        print(f"{name}: {run['steps']} steps in {run['wall_s']:.0f}s, held-out success {run['heldout_success']:.3f} "
              f"({run['gain_points']:+.1f} points)", flush=True)
    linear = results["linear_grpo"]["log"]
    linear_final = sum(series(linear, "rollout/success_rate")[-5:]) / max(1, len(series(linear, "rollout/success_rate")[-5:]))
    linear_steps = max(series(linear, "rollout/env_steps_total"), default=0.0)
    tree_steps = steps_to_reach(results["tree_grpo"]["log"], linear_final)
    results["tree_vs_linear"] = {"linear_final_train_success": linear_final, "linear_env_steps": linear_steps,
                                 "tree_env_steps_to_match": tree_steps,
                                 "fraction": None if tree_steps is None or not linear_steps else tree_steps / linear_steps}
    sao = results["sao"]["log"]
    rewards = series(sao, "rollout/success_rate")
    results["sao_stability"] = {"updates": results["sao"]["steps"],
                                "first20_success": sum(rewards[:20]) / max(1, len(rewards[:20])),
                                "last20_success": sum(rewards[-20:]) / max(1, len(rewards[-20:])),
                                "max_kl_to_start": max(series(sao, "kl_to_start"), default=None),
                                "dropped_stale": max(series(sao, "staleness/dropped_total"), default=0.0)}
    write_curve(results, out / "learning_curve.svg")
    for name in RUNS:  # the full histories stay in each run's trainer_state.json
        results[name].pop("log")
    return results


def throughput(args, out: Path) -> dict:
    """Async SAO vs. the synchronous group pipeline on a long-tailed env, same batch and concurrency."""
    common = [f"max_steps={args.steps}", "save_steps=100000", "resume=false", "report_to=none",
              "env_kwargs={split: train, num_tasks: 200, max_hops: 2, step_latency: %g}" % args.latency,
              "rollout_concurrency=8", f"seed={args.seed}"]
    # 16 trajectories per learner step in both: SAO takes 16 episodes, the group pipeline 4 tasks × 4.
    sao = train(RUNS["sao"], [*common, f"output_dir={out / 'throughput-sao'}", "per_device_train_batch_size=16",
                              "log_kl_to_start=false"])
    sync = train(RUNS["linear_grpo"], [*common, f"output_dir={out / 'throughput-sync'}",
                                       "per_device_train_batch_size=4", "num_generations=4"])
    sao_trajectories = max(series(sao["log"], "producer/consumed_total"), default=0.0)
    sync_trajectories = 16.0 * sync["steps"]
    result = {
        "latency_median_s": args.latency, "steps": args.steps, "batch_trajectories": 16,
        "sao": {"trajectories_per_s": sao_trajectories / sao["wall_s"],
                "learner_idle_fraction": sum(series(sao["log"], "learner/wait_s")) / sao["wall_s"]},
        "sync": {"trajectories_per_s": sync_trajectories / sync["wall_s"],
                 "learner_idle_fraction": sum(series(sync["log"], "rollout/time_s")) / sync["wall_s"]},
    }
    result["speedup"] = result["sao"]["trajectories_per_s"] / result["sync"]["trajectories_per_s"]
    print(f"throughput: SAO {result['sao']['trajectories_per_s']:.2f} traj/s (learner idle "
          f"{result['sao']['learner_idle_fraction']:.0%}) vs sync {result['sync']['trajectories_per_s']:.2f} traj/s "
          f"(idle {result['sync']['learner_idle_fraction']:.0%}): {result['speedup']:.2f}x", flush=True)
    return result


def write_curve(results: dict, path: Path) -> None:
    """Training success against env steps for the three runs, as a self-contained SVG."""
    width, height, pad = 640, 360, 48
    colors = {"tree_grpo": "#1f77b4", "linear_grpo": "#ff7f0e", "sao": "#2ca02c"}
    curves = {}
    for name in RUNS:
        log = results[name]["log"]
        points = [(h["rollout/env_steps_total"] if "rollout/env_steps_total" in h else h.get("producer/consumed_total", 0.0),
                   h["rollout/success_rate"]) for h in log if "rollout/success_rate" in h]
        if name == "sao":  # SAO counts trajectories; put it on the same axis via its mean turns per episode
            turns = series(log, "rollout/turns")
            scale = sum(turns) / len(turns) if turns else 1.0
            points = [(x * scale, y) for x, y in points]
        curves[name] = list(zip([x for x, _ in points], smooth([y for _, y in points])))
    xmax = max((x for c in curves.values() for x, _ in c), default=1.0) or 1.0
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">env steps (x{xmax:.0f})</text>',
             f'<text x="12" y="{height / 2}" transform="rotate(-90 12 {height / 2})" text-anchor="middle">'
             'training success (moving average of 5 logs)</text>']
    for i, (name, curve) in enumerate(curves.items()):
        coords = " ".join(f"{pad + (width - 2 * pad) * x / xmax:.1f},{height - pad - (height - 2 * pad) * y:.1f}"
                          for x, y in curve)
        lines.append(f'<polyline fill="none" stroke="{colors[name]}" stroke-width="2" points="{coords}"/>')
        lines.append(f'<text x="{width - pad - 110}" y="{pad + 16 * i}" fill="{colors[name]}">{name}</text>')
    lines.append("</svg>")
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["all", "learning", "throughput"], default="all")
    parser.add_argument("--minutes", type=float, default=20.0, help="wall time per RL run (default: %(default)s)")
    parser.add_argument("--heldout", type=int, default=100, help="held-out tasks to evaluate (default: %(default)s)")
    # 3 epochs at 1e-3 left the random tiny model at 0% held-out (it learns `lookup("` and then
    # repeats itself); these defaults are the next thing to try and have not been run yet.
    parser.add_argument("--sft-epochs", type=float, default=20.0)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=20, help="throughput: learner steps per pipeline")
    parser.add_argument("--latency", type=float, default=0.05, help="throughput: median seconds per env step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/learning")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    if args.part in ("all", "learning"):
        results["learning"] = learning(args, out)
    if args.part in ("all", "throughput"):
        results["throughput"] = throughput(args, out)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"results in {out / 'results.json'}")


if __name__ == "__main__":
    main()
