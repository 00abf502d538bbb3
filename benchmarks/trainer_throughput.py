"""Trainer throughput against TRL: TreeGRPO (``tree: false``) and SAO steps/s beside TRL's plain GRPOTrainer on the same work.

The same work for every trainer: ``--prompts`` prompts ("Reply in capital letters.") × ``--generations``
completions of at most ``--max-tokens`` tokens per optimizer step, sampled at temperature 1
from the tiny local model (:mod:`agentgym.models.tiny`), one forward/backward over all of them
per step (no gradient accumulation), CPU, ``bf16=False``, no gradient checkpointing, no KL term.
TRL's GRPOTrainer gets the prompts as a dataset and the reward as a function; TreeGRPOTrainer
(``tree=False``) gets a single-turn env whose check is that same function, with its default
rollout settings. SAO (one trajectory per prompt slot, ``--prompts × --generations`` per update)
is shown for reference: its producer overlaps generation with the learner.

Runs are interleaved (TRL, TreeGRPO, SAO, TRL, ...) for ``--rounds`` rounds, each a fresh trainer
for ``--steps`` steps; the first step of each run (compilation, caches, env start) is left out.
Per phase, seconds per step: generation (TRL: ``model.generate``; ours: the policy's decode
batches), env (our rollouts minus generation: resets, steps, the agent loop), scoring
(reward and batch building, logprob recomputation included), train (forward + backward), and
the optimizer and Trainer overhead (the rest of the step).

    .venv/bin/python benchmarks/trainer_throughput.py --rounds 3 --steps 6

Prints a Markdown table and a JSON line; ``--out`` also writes the JSON there.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import TrainerCallback

from agentgym.envs.tool.env import ToolEnv
from agentgym.models import tiny_model_path

PROMPT = "Reply in capital letters."
TRAINERS = ("trl_grpo", "tree_grpo", "sao")
PHASES = ("generation", "env", "scoring", "train", "optimizer")
ENV_ID = "trainer_throughput:CapitalEnv"  # this file, importable once main() puts benchmarks/ on sys.path


def capital_reward(completions, **kwargs) -> list[float]:
    """TRL's reward function: 1 for a reply holding a capital letter."""
    return [float(any(c.isupper() for c in _text(c))) for c in completions]


def _text(completion) -> str:
    return completion if isinstance(completion, str) else completion[-1]["content"]


def _capital_check(task, state, transcript) -> tuple[float, bool]:
    """The env's check: the same rule as :func:`capital_reward`, on the reply."""
    answer = str(transcript[-1]["arguments"].get("answer", "")) if transcript else ""
    ok = any(c.isupper() for c in answer)
    return float(ok), ok


class CapitalEnv(ToolEnv):
    """One turn, no tools: the reply is the answer; reward 1 when it holds a capital letter."""

    def __init__(self, prompts: int = 8, **kwargs):
        tasks = {f"shout-{i}": PROMPT for i in range(prompts)}
        super().__init__([], tasks, check=_capital_check, max_turns=1, call_timeout=None, variant="capitals", **kwargs)


class Phases:
    """Seconds spent in wrapped methods, per training step (the first step left out)."""

    def __init__(self):
        self.current: defaultdict[str, float] = defaultdict(float)
        self.steps: list[dict[str, float]] = []
        self.step_started = 0.0

    def wrap(self, owner, method: str, phase: str) -> None:
        inner = getattr(owner, method)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.current[phase] += time.perf_counter() - started

        setattr(owner, method, timed)

    def callback(self) -> TrainerCallback:
        phases = self

        class StepTimes(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                phases.current.clear()
                phases.step_started = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                phases.steps.append({**phases.current, "step": time.perf_counter() - phases.step_started})

        return StepTimes()

    def per_step(self) -> dict[str, float]:
        """Mean seconds per step of each phase and of the whole step, from the second step on."""
        kept = self.steps[1:]
        return {name: statistics.fmean(s.get(name, 0.0) for s in kept) for name in ("step", *self._raw_names(kept))}

    @staticmethod
    def _raw_names(steps) -> list[str]:
        return sorted({name for s in steps for name in s if name != "step"})


def _common(args, out: str) -> dict:
    return {
        "output_dir": out,
        "num_generations": args.generations,
        "temperature": 1.0,
        "learning_rate": 1e-5,
        "max_steps": args.steps,
        "beta": 0.0,
        "gradient_accumulation_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "logging_steps": 1,
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "seed": 0,
        "disable_tqdm": True,
    }


def run_trl(args, out: str) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        **_common(args, out),
        per_device_train_batch_size=args.prompts * args.generations,  # TRL counts completions
        max_completion_length=args.max_tokens,
    )
    # Plain text, tokenized as it is: the very tokens our agent's first prompt holds.
    dataset = Dataset.from_dict({"prompt": [args.rendered_prompt] * (args.prompts * 4)})
    trainer = GRPOTrainer(str(tiny_model_path()), reward_funcs=capital_reward, args=config, train_dataset=dataset)
    phases = Phases()
    phases.wrap(trainer, "_generate", "generation")
    phases.wrap(trainer, "_generate_and_score_completions", "rollout")
    phases.wrap(trainer, "training_step", "train")
    trainer.add_callback(phases.callback())
    trainer.train()
    times = phases.per_step()
    return _phases(times, generation=times["generation"], rollout=times["rollout"], extra={})


def run_tree_grpo(args, out: str) -> dict:
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    config = TreeGRPOConfig(
        **_common(args, out),
        env_id=ENV_ID,
        env_kwargs={"prompts": args.prompts},
        tree=False,
        per_device_train_batch_size=args.prompts,  # ours counts tasks, each grown into its group
        max_turn_tokens=args.max_tokens,
        loss_type="dapo",
    )
    trainer = TreeGRPOTrainer(str(tiny_model_path()), config)
    phases = Phases()
    phases.wrap(trainer.policy, "_run_batch", "generation")
    phases.wrap(trainer, "_rollouts", "rollout_env")
    phases.wrap(trainer, "_generate_and_score_completions", "rollout")
    phases.wrap(trainer, "training_step", "train")
    trainer.add_callback(phases.callback())
    trainer.train()
    times = phases.per_step()
    stats = trainer.policy.stats
    extra = {"policy_batches": stats.batches, "max_batch": stats.max_batch_seen, "requests": stats.requests}
    return _phases(
        times, generation=times["generation"], rollout=times["rollout"], env=times["rollout_env"], extra=extra
    )


def run_sao(args, out: str) -> dict:
    from agentgym.trainers.base import task_dataset
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig

    common = _common(args, out)
    common.pop("num_generations")
    config = SAOConfig(
        **common,
        env_id=ENV_ID,
        env_kwargs={"prompts": args.prompts},
        per_device_train_batch_size=args.prompts * args.generations,  # one trajectory per slot
        max_turn_tokens=args.max_tokens,
    )
    # The dataset only counts the learner's slots (the producer draws the env's tasks itself).
    slots = task_dataset([f"shout-{i % args.prompts}" for i in range(args.prompts * args.generations)])
    trainer = SAOTrainer(str(tiny_model_path()), config, train_dataset=slots)
    phases = Phases()
    phases.wrap(trainer, "training_step", "train")
    trainer.add_callback(phases.callback())
    trainer.train()
    times = phases.per_step()
    return {"steps_per_s": 1.0 / times["step"], "step_s": times["step"], "phases_s": {}}


def _phases(times: dict, *, generation: float, rollout: float, env: float | None = None, extra: dict) -> dict:
    env_s = (env - generation) if env is not None else 0.0
    rollout_part = env if env is not None else generation
    phases = {
        "generation": generation,
        "env": env_s,
        "scoring": rollout - rollout_part,
        "train": times["train"] - rollout,  # Trainer.training_step prepares (generates) its inputs first
        "optimizer": times["step"] - times["train"],
    }
    return {"steps_per_s": 1.0 / times["step"], "step_s": times["step"], "phases_s": phases, **extra}


def rendered_prompt(prompts: int) -> str:
    """The text of the first prompt the trainers' agent loop builds for a task (no system prompt, as configured), TRL's prompt."""
    import asyncio

    from agentgym.rollout.agent import Agent, AgentConfig
    from agentgym.rollout.hf_policy import HFPolicy

    policy = HFPolicy(tiny_model_path())
    env = CapitalEnv(prompts)
    try:
        episode = asyncio.run(Agent(policy, AgentConfig(mode="tokens", system_prompt=None)).start(env, "shout-0"))
    finally:
        env.close()
    text = policy.chat_format.tokenizer.decode(episode.prompt_ids)
    if policy.chat_format.tokenizer(text, add_special_tokens=False)["input_ids"] != list(episode.prompt_ids):
        raise RuntimeError("the rendered prompt does not tokenize back to the agent's tokens")
    return text


RUNS = {"trl_grpo": run_trl, "tree_grpo": run_tree_grpo, "sao": run_sao}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=6, help="steps per run (the first is left out)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every trainer")
    parser.add_argument("--runs", default=",".join(TRAINERS), help=f"comma-separated, of {TRAINERS}")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out)")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the env entry point trainer_throughput:CapitalEnv
    torch.manual_seed(0)
    args.rendered_prompt = rendered_prompt(args.prompts)
    names = args.runs.split(",")
    results: dict[str, list[dict]] = {name: [] for name in names}
    load = []
    for round_ in range(args.rounds):
        for name in names:
            with tempfile.TemporaryDirectory() as out:
                results[name].append(RUNS[name](args, out))
            load.append(os.getloadavg()[0])
            print(f"round {round_ + 1} {name}: {results[name][-1]['steps_per_s']:.3f} steps/s", file=sys.stderr)
    summary = {name: _summarise(runs) for name, runs in results.items()}
    report = {
        "work": {"prompts": args.prompts, "generations": args.generations, "max_tokens": args.max_tokens},
        "steps": args.steps,
        "rounds": args.rounds,
        "load_avg_1m": [round(x, 2) for x in load],
        "trainers": summary,
    }
    if "trl_grpo" in summary and "tree_grpo" in summary:
        ratios = [t["steps_per_s"] / r["steps_per_s"] for t, r in zip(results["tree_grpo"], results["trl_grpo"])]
        report["tree_grpo_over_trl"] = {"median": statistics.median(ratios), "per_round": ratios}
    print(_table(report))
    print(json.dumps(report))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2))
    return report


def _summarise(runs: list[dict]) -> dict:
    phases = {p: statistics.median(r["phases_s"][p] for r in runs) for p in PHASES if p in runs[0]["phases_s"]}
    keep = {k: v for k, v in runs[-1].items() if k not in ("steps_per_s", "step_s", "phases_s")}
    return {
        "steps_per_s": statistics.median(r["steps_per_s"] for r in runs),
        "steps_per_s_runs": [r["steps_per_s"] for r in runs],
        "phases_s": phases,
        **keep,
    }


def _table(report: dict) -> str:
    lines = [
        "| trainer | steps/s (median) | " + " | ".join(f"{p} s/step" for p in PHASES) + " |",
        "|---|---:|" + "---:|" * len(PHASES),
    ]
    for name, s in report["trainers"].items():
        cells = [f"{s['phases_s'][p]:.3f}" if p in s["phases_s"] else "" for p in PHASES]
        lines.append(f"| {name} | {s['steps_per_s']:.3f} | " + " | ".join(cells) + " |")
    if "tree_grpo_over_trl" in report:
        ratio = report["tree_grpo_over_trl"]
        lines.append("")
        lines.append(
            f"TreeGRPO ÷ TRL GRPOTrainer: {ratio['median']:.2f}× (per round: "
            + ", ".join(f"{r:.2f}" for r in ratio["per_round"])
            + ")"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
