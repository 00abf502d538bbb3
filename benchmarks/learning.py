"""Proof that the trainers learn, and what asynchrony buys: KeyChain (or Calculator, ScienceWorld, TextWorld) on CPU with the tiny local model.

Learning (``--part learning``):

1. SFT warm start: the tiny model is fine-tuned with TRL's SFTTrainer on scripted demonstrations
   of the train split (token-exact multi-turn sequences through the real agent loop); by default
   the env's start in :data:`ENVS` (``--sft-*``): on KeyChain and Calculator ``RL_DEMO_START``, an
   early-answering demonstrator whose habit RL has to unlearn; on ScienceWorld and TextWorld the
   gold paths and walkthroughs with idle commands before some steps (the config lists the train and test tasks).
2. RL from that start with each variant of ``VARIANTS`` (``--runs``; default: tree GRPO, linear
   GRPO and SAO): a run config of examples/configs/<env>-*.yaml (``--env``) plus the variant's
   settings — linear GRPO, SAO, tree GRPO (uniform), TRACE allocation, reflect-then-retry, success
   replay, MC-GRPO's median pivot, APRIL's partial rollouts (issue 34) — each for ``--minutes``
   of wall time (``--budget time``), or until it has taken ``--env-steps`` env steps
   (``--budget env_steps``), or both (``--budget both``; the env-step budget is then, per seed, the fewest env
   steps any variant took in its wall time). With both, each timed run saves its policy every ``SNAPSHOT_EVERY``
   env steps (``env_step_snapshots``; the budget is rounded down to a multiple of it) and a variant's
   equal-env-steps figures are those of its snapshot at the budget: the policy an ``env_step_budget`` run of the
   same seed stops with, without a second run (``--env-steps-from runs``: a second run per variant, as before
   2026-12-07; a variant whose timed run has no snapshot at the budget gets one either way).
3. Measured: held-out success (``--heldout`` tasks of the env's held-out split: KeyChain's and Calculator's
   ``heldout``, the text worlds' ``test``; greedy, and sampled at the training temperature) of the SFT start
   and of each trained model, with each task's greedy result and, where the tasks have several categories
   (Calculator's operator patterns), each category's success; the training-success curve against env steps (tree GRPO's env steps to reach
   linear GRPO's final success, as a fraction of linear's); tokens generated and env steps spent by each
   run; SAO's reward curve and KL to its start over its updates; with ``--validation N``, each run validates
   greedily on N tasks of the env's validation split and its best checkpoint's held-out success is reported
   beside the last's. With ``--seeds``, every figure's mean and 95% interval over the seeds (issue 34's
   table: ``--seeds 0,1,2 --budget both --runs all``). Targets: +30 points held-out for both trainers; tree
   ≤ 70% of linear's env steps; SAO without collapse over 300 updates.

Throughput (``--part throughput``): KeyChain with long-tailed lookup latency
(``step_latency``), SAO's asynchronous producer/learner against the synchronous group pipeline
(linear GRPO: generate a batch, wait for its slowest episode, then train) with the same batch of
trajectories per step and the same rollout concurrency (``--concurrency`` env slots; by default
one per trajectory of the batch, as a synchronous pipeline generates its batch at once):
trajectories/s and the learner's idle fraction. Target: ≥ 2.5× trajectories/s.

Everything goes to ``--out``: results.json, learning_curve.svg, and each run's directory
(TensorBoard events, trajectory store, trainer_state.json). Seeds: ``--seed`` for SFT, the
trainers and the task order; sampling during rollouts is not seeded (HFPolicy draws fresh seeds).
With ``--seeds``, one seed per invocation (``--seeds 0``, then ``--seeds 1`` ... with the same
``--out``) and a last ``--seeds 0,1,2`` that finds them all kept gives the figures over the seeds. The seeds
behind the docs' results page are kept in ``benchmarks/results/<name>/seed-N/results.json`` (without the run
directories): ``--out benchmarks/results/<name>`` with the same settings prints their tables again without training.

    .venv/bin/python benchmarks/learning.py                      # everything, about 1.5 h on 2 cores
    .venv/bin/python benchmarks/learning.py --part learning --seeds 0,1,2   # means and 95% intervals, ~3 h
    .venv/bin/python benchmarks/learning.py --part throughput --steps 20
    .venv/bin/python benchmarks/learning.py --part learning --runs all --budget both --seeds 0,1,2 --minutes 5
    .venv/bin/python benchmarks/learning.py --part learning --env textworld --runs tree_grpo --seeds 0 --minutes 10
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

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
from agentgym.trainers.rollouts import ENV_STEP_SNAPSHOTS, SNAPSHOT_RECORD  # noqa: E402
from agentgym.trainers.warm_start import (  # noqa: E402
    RL_DEMO_START,
    WARM_START_RECORD,
    WarmStartFailed,
    held_out_success,
    held_out_tasks,
    scripted_warm_start,
    split_tasks,
    task_categories,
)

CONFIGS = ROOT / "examples" / "configs"
BATCH = 16  # throughput: trained trajectories per learner step in both pipelines
# Logged steps averaged for tree vs linear: one step's training success (8 tasks at T 0.7) is noise.
COMPARISON_WINDOW = 20
#: The variants: a run config (examples/configs/<env>-<config>.yaml) and the settings that make the variant.
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "linear_grpo": ("linear_grpo", ()),
    "sao": ("sao", ()),
    "tree_grpo": ("tree_grpo", ("tree_strategy=uniform",)),
    "trace": ("tree_grpo", ("tree_strategy=contrast", "task_allocation=trace")),
    "reflect_retry": ("linear_grpo", ("reflect_retry=true", "pivotal_credit=true")),
    # The same restart from the (grader's) failure turn without the reflection: what the language adds.
    "failure_retry": (
        "linear_grpo",
        ("reflect_retry=true", "reflect_diagnose=false", "reflect_locate=grader", "pivotal_credit=true"),
    ),
    "replay": ("linear_grpo", ("success_replay=true",)),
    "median_pivot": ("linear_grpo", ("median_pivot=true", "advantage_baseline=median")),
    # The median baseline alone (G episodes, none left out): what the baseline does without MC-GRPO's extra sample.
    "median_baseline": ("linear_grpo", ("advantage_baseline=median",)),
    "april": ("linear_grpo", ("partial_rollouts=true",)),
}
RUNS = tuple(VARIANTS)
#: Env steps between a timed run's policy snapshots (``--budget both``): the equal-env-steps budget is a multiple of
#: it. A KeyChain step takes ~70 env steps, so nearly every step is kept (~1 MB each for the tiny model); all but the
#: budget's snapshot are deleted once it is evaluated.
SNAPSHOT_EVERY = 100
DEFAULT_RUNS = ["tree_grpo", "linear_grpo", "sao"]


class LearningEnv(NamedTuple):
    """An env the learning part runs on: its title, its held-out split and count, its SFT start's defaults, and the
    split ``--validation`` draws from (the held-out split's tasks after the evaluated ones, where it is the same)."""

    title: str
    heldout_split: str = "heldout"
    heldout: int = 100
    #: ``--sft-*`` defaults (:data:`RL_DEMO_START`'s keys).
    sft: dict = RL_DEMO_START
    validation_split: str = "heldout"


#: Envs with scripted demonstrations and a config per run: examples/configs/<env>-<run>.yaml.
ENVS = {
    "keychain": LearningEnv("KeyChain"),
    "calculator": LearningEnv("Calculator"),
    # Text worlds: the config lists the train and test tasks (a game each, generated at first use, or a variation);
    # the demonstrator idles (TextGameEnv.idle_command) before a step that often; no self-check (its unseen
    # train tasks would have to be listed and made too).
    "scienceworld": LearningEnv(
        "ScienceWorld",
        "test",
        30,
        {"tasks": 120, "epochs": 20.0, "mistake_rate": 0.2, "min_start_success": 0.0, "max_rounds": 1},
        "dev",
    ),
    "textworld": LearningEnv(
        "TextWorld",
        "test",
        30,
        {"tasks": 60, "epochs": 30.0, "mistake_rate": 0.2, "min_start_success": 0.0, "max_rounds": 1},
        "dev",
    ),
}


def config_path(env: str, run: str) -> Path:
    """A variant's run config (or a run config's own path, for ``tree_grpo``, ``linear_grpo``, ``sao``)."""
    return CONFIGS / f"{env}-{VARIANTS[run][0] if run in VARIANTS else run}.yaml"


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


def validation_overrides(args, config: dict) -> list[str]:
    """The run overrides that validate on ``--validation`` tasks of the env's validation split every
    ``--validation-every`` steps (none without ``--validation``): the trainer keeps the best checkpoint.

    The tasks are never the evaluated held-out ones: where the validation split is the held-out split
    (KeyChain's, Calculator's ``heldout``), they are the ``--validation`` tasks after the first ``--heldout``.
    """
    if not args.validation:
        return []
    env = ENVS[args.env]
    skip = args.heldout if env.validation_split == env.heldout_split else 0
    _, ids = split_tasks(config, env.validation_split, args.validation, skip=skip)
    return [
        f"validation_tasks={json.dumps(ids)}",
        f"validation_env_kwargs={json.dumps({'tasks': ids})}",
        f"validation_every={args.validation_every}",
    ]


#: A finished run's results and settings, in its output dir: a rerun of its seed with the same settings reuses it, so
#: a seed's table (18 runs, about 90 minutes on 2 cores) survives a crash or a stop part-way.
RUN_RECORD = "benchmark-run.json"


def run_settings(args, name: str, budget: list[str]) -> dict:
    """What one variant's run depends on: the seed's settings but the other runs' (``--runs``, ``--budget``,
    ``--env-steps``, ``--env-steps-from``: its own budget is given) and the ``--set`` overrides of other runs."""
    own = {"runs", "budget", "env_steps", "env_steps_from", "set"}
    settings = {k: v for k, v in vars(args).items() if k in SEED_SETTINGS and k not in own}
    settings |= {"set": [setting for run_name, setting in args.set if run_name == name], "run_budget": budget}
    return json.loads(json.dumps(settings))


def kept_run(kept_file: Path, settings: dict, label: str) -> dict | None:
    """The run kept in ``kept_file`` (:data:`RUN_RECORD`) if it was made with ``settings``, else None."""
    if kept_file.exists() and (kept := json.loads(kept_file.read_text()))["settings"] == settings:
        print(f"{label}: kept from {kept_file} (the same settings)", flush=True)
        return kept["run"]
    return None


def keep_run(kept_file: Path, settings: dict, run: dict) -> None:
    """Keep ``run`` in ``kept_file`` (:data:`RUN_RECORD`) with the ``settings`` :func:`kept_run` reuses it for."""
    kept_file.parent.mkdir(parents=True, exist_ok=True)
    kept_file.write_text(json.dumps({"settings": settings, "run": run}, default=str))


def by_category(successes: dict[str, float], categories: dict[str, str]) -> dict[str, float]:
    """The mean success of each category's tasks (``successes``: each task's, ``categories``: each task's category)."""
    grouped: dict[str, list[float]] = {}
    for task_id, success in successes.items():
        grouped.setdefault(categories[task_id], []).append(success)
    return {category: sum(values) / len(values) for category, values in sorted(grouped.items())}


@functools.cache
def heldout_categories(env: str, count: int) -> dict[str, str]:
    """The category of each of the env's first ``count`` held-out tasks (the same tasks for every config of the env)."""
    config = load_config(config_path(env, "linear_grpo"))
    return task_categories(config, split_tasks(config, ENVS[env].heldout_split, count)[1])


def heldout(args, model: str | Path, config: dict) -> dict:
    """``model``'s held-out figures: greedy success, with each task's and, where the env's tasks have more than one
    category (Calculator's operator patterns), each category's; and its success at the training temperature."""
    split = ENVS[args.env].heldout_split
    tasks = held_out_tasks(model, config, args.heldout, split=split)
    figures = {"heldout_success": sum(tasks.values()) / len(tasks), "heldout_by_task": tasks}
    if len(set((categories := heldout_categories(args.env, args.heldout)).values())) > 1:
        figures["heldout_by_category"] = by_category(tasks, categories)
    figures["heldout_success_sampled"] = held_out_success(model, config, args.heldout, greedy=False, split=split)
    return figures


def start_heldout(args, sft: Path, config: dict) -> dict:
    """The SFT start's :func:`heldout` figures, measured once and kept beside its weights (:data:`RUN_RECORD`).

    Every run's gains are over these figures, and the sampled one is a new draw each time it is measured: a rerun
    of a seed that stopped part-way must compare its new runs with the figures its kept runs were compared with.
    They are kept for these weights only (a start built again is measured again)."""
    weights = hashlib.sha256()
    for file in sorted(sft.glob("*.safetensors")):
        weights.update(file.read_bytes())
    kept_file = sft / RUN_RECORD
    settings = {"weights": weights.hexdigest(), "env": args.env, "heldout": args.heldout}
    if (kept := kept_run(kept_file, settings, "SFT start's held-out figures")) is not None:
        return kept
    figures = heldout(args, sft, config)
    keep_run(kept_file, settings, figures)
    return figures


def categories_text(figures: dict) -> str:
    """The greedy held-out success of each category in :func:`heldout`'s ``figures``, for a log line ("" if none)."""
    by = figures.get("heldout_by_category", {})
    return "; greedy by category: " + ", ".join(f"{c} {v:.2f}" for c, v in by.items()) if by else ""


def add_gains(run: dict, start: dict) -> None:
    """The run's held-out gains over the SFT ``start``, greedy and sampled, in points."""
    run["gain_points"] = 100 * (run["heldout_success"] - start["heldout_success"])
    run["gain_points_sampled"] = 100 * (run["heldout_success_sampled"] - start["heldout_success_sampled"])


def run_variant(args, name: str, sft: Path, output_dir: Path, budget: list[str], results: dict) -> dict:
    """One variant trained from the SFT start under ``budget`` (overrides); its held-out success, env steps and tokens,
    and with ``--validation`` the held-out success of its best checkpoint on the validation tasks beside the last's."""
    config, settings = VARIANTS[name]
    run_config = load_config(config_path(args.env, config))
    kept_file = output_dir / RUN_RECORD
    kept_settings = run_settings(args, name, budget)
    if (kept := kept_run(kept_file, kept_settings, f"{name} ({', '.join(budget)})")) is not None:
        add_gains(kept, results["sft"])  # over this seed's start figures, whichever run measured them
        return kept
    overrides = [
        f"model={sft}",
        f"output_dir={output_dir}",
        f"seed={args.seed}",
        "resume=false",
        "max_steps=100000",
        "save_steps=100000",
        *budget,
        *settings,
        *validation_overrides(args, run_config),
        *[setting for run_name, setting in args.set if run_name == name],
    ]
    run = train_run(config_path(args.env, config), overrides)
    split = ENVS[args.env].heldout_split
    run |= heldout(args, run["output_dir"], run_config)
    if args.validation:
        best, last = run["validation"]["best"], run["validation"]["last"]
        best_dir = Path(run["output_dir"]) / "best-checkpoint"
        run["best"] = {
            "step": best["step"],
            "validation_success": best["success"],
            "last_validation_success": last["success"],
            # The last checkpoint is the best one when no earlier validation beat it: its figure is the last's.
            "heldout_success": run["heldout_success"]
            if best["step"] == last["step"]
            else held_out_success(best_dir, run_config, args.heldout, split=split),
        }
    run.pop("validation")
    add_gains(run, results["sft"])
    run["env_steps"] = max(log_series(run["log"], "rollout/env_steps_total"), default=0.0)
    run["generated_tokens"] = max(log_series(run["log"], "rollout/generated_tokens_total"), default=0.0)
    if "best" in run:
        print(
            f"{name}: best on validation at step {run['best']['step']} ({run['best']['validation_success']:.3f}; "
            f"the last {run['best']['last_validation_success']:.3f}): held-out {run['best']['heldout_success']:.3f}",
            flush=True,
        )
    print(
        f"{name} ({', '.join(budget)}): {run['steps']} steps in {run['wall_s']:.0f}s, {run['env_steps']:.0f} env steps, "
        f"{run['generated_tokens']:.0f} tokens; held-out success {run['heldout_success']:.3f} greedy "
        f"({run['gain_points']:+.1f} points), {run['heldout_success_sampled']:.3f} at the training temperature "
        f"({run['gain_points_sampled']:+.1f}){categories_text(run)}",
        flush=True,
    )
    keep_run(kept_file, kept_settings, run)
    return run


def equal_env_steps_budget(timed_env_steps: list[float], every: int, given: int | None = None) -> int:
    """The equal-env-steps budget: ``given``, else the fewest env steps a timed run took rounded down to a multiple
    of ``every`` (the snapshots' spacing; the fewest itself when that is under ``every``)."""
    if given:
        return given
    fewest = int(min(timed_env_steps))
    return fewest // every * every or fewest


def snapshot_variant(args, name: str, timed_dir: Path, output_dir: Path, budget: int, results: dict) -> dict | None:
    """A variant at ``budget`` env steps from its timed run's snapshot there (``timed_dir/env-steps/<budget>``): its
    held-out success, and the step, env steps and tokens at the snapshot; None when the timed run has none.

    Kept in ``output_dir`` (:data:`RUN_RECORD`) like a run, with the timed run's settings and the budget."""
    snapshot = timed_dir / ENV_STEP_SNAPSHOTS / str(budget)
    kept_file = output_dir / RUN_RECORD
    kept_settings = run_settings(args, name, [f"env_step_snapshot={budget}"])
    if (kept := kept_run(kept_file, kept_settings, f"{name} (at {budget} env steps)")) is not None:
        add_gains(kept, results["sft"])
        return kept
    if not (snapshot / SNAPSHOT_RECORD).exists():
        return None
    record = json.loads((snapshot / SNAPSHOT_RECORD).read_text())
    run_config = load_config(config_path(args.env, VARIANTS[name][0]))
    run = {
        "snapshot": str(snapshot),
        "steps": record["step"],
        "env_steps": float(record["env_steps"]),
        "generated_tokens": float(record["generated_tokens"]),
        **heldout(args, snapshot, run_config),
    }
    add_gains(run, results["sft"])
    print(
        f"{name} (at {budget} env steps, its timed run's snapshot): step {run['steps']}, {run['env_steps']:.0f} env "
        f"steps, {run['generated_tokens']:.0f} tokens; held-out success {run['heldout_success']:.3f} greedy "
        f"({run['gain_points']:+.1f} points), {run['heldout_success_sampled']:.3f} at the training temperature "
        f"({run['gain_points_sampled']:+.1f}){categories_text(run)}",
        flush=True,
    )
    keep_run(kept_file, kept_settings, run)
    for other in (timed_dir / ENV_STEP_SNAPSHOTS).iterdir():  # evaluated: the others go (~1 MB each, ~100 a run)
        if other != snapshot:
            shutil.rmtree(other)
    return run


def learning(args, out: Path) -> dict:
    config = load_config(config_path(args.env, "tree_grpo"))
    sft = sft_start(args, config, out)
    split = ENVS[args.env].heldout_split
    results = {
        "seed": args.seed,
        "minutes": args.minutes,
        "heldout_tasks": args.heldout,
        "heldout_split": split,
        "sft": {
            **start_heldout(args, sft, config),
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
        f"({len(results['sft']['rounds'])} round(s) of {args.sft_epochs:g} epochs){categories_text(results['sft'])}",
        flush=True,
    )
    snapshots = args.budget == "both" and args.env_steps_from == "snapshots"
    every = args.env_steps or (SNAPSHOT_EVERY if snapshots else 1)
    for name in args.runs:
        if args.budget in ("time", "both"):
            timed = [f"time_budget_s={args.minutes * 60}", *([f"env_step_snapshots={every}"] if snapshots else [])]
            results[name] = run_variant(args, name, sft, out / name, timed, results)
    if args.budget in ("env_steps", "both"):
        if args.budget == "env_steps":
            budget = args.env_steps
        else:  # the given budget, or the fewest env steps any variant took in its wall time
            budget = equal_env_steps_budget([results[name]["env_steps"] for name in args.runs], every, args.env_steps)
        results["equal_env_steps"] = {"env_steps": budget}
        for name in args.runs:
            at = snapshot_variant(args, name, out / name, out / f"{name}-steps", budget, results) if snapshots else None
            results["equal_env_steps"][name] = at or run_variant(
                args, name, sft, out / f"{name}-steps", [f"env_step_budget={budget}"], results
            )
    timed = args.runs if args.budget in ("time", "both") else []
    if {"tree_grpo", "linear_grpo"} <= set(timed):
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
    if "sao" in timed:
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
    if timed:
        write_learning_curve(
            {name: training_curve(results[name]["log"]) for name in timed},
            out / "learning_curve.svg",
            title=f"{ENVS[args.env].title}, tiny model, CPU, seed {args.seed}",
        )
    for run in [results[name] for name in timed] + [
        results["equal_env_steps"][name] for name in args.runs if "equal_env_steps" in results
    ]:
        run.pop("log", None)  # the full histories stay in each run's trainer_state.json (a snapshot has none)
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
    "budget",
    "env_steps",
    "env_steps_from",
    "validation",
    "validation_every",
)
#: The values of settings added since results were kept: a kept seed without one was run with its value.
SEED_SETTING_DEFAULTS = {"validation": 0, "validation_every": 5, "env_steps_from": "runs"}


def over_seeds(args, out: Path) -> dict:
    """:func:`learning` once per seed (each with its own SFT start, shared by its runs), then each figure's mean and 95% interval.

    Each seed's results are kept in ``out/seed-N/results.json`` with the settings: a rerun with the
    same settings (after a crash, or with more seeds) reuses them, as :func:`run_variant` does each finished run's
    (:data:`RUN_RECORD`) within a seed that did not finish. A seed whose SFT start fails its
    self-check (:class:`WarmStartFailed`) is recorded as such and left out of the figures, which say
    how many seeds they cover; the other seeds still run.
    """
    per_seed = {}
    for seed in args.seeds:
        seed_args = argparse.Namespace(**{**vars(args), "seed": seed})
        saved = out / f"seed-{seed}" / "results.json"
        settings = json.loads(json.dumps({k: v for k, v in vars(seed_args).items() if k in SEED_SETTINGS}))
        if (
            saved.exists()
            and {**SEED_SETTING_DEFAULTS, **(kept := json.loads(saved.read_text()))["settings"]} == settings
        ):
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
        linear = [r.get("linear_grpo") for r in ran]
        for name in args.runs:
            for budget, runs in (
                ("", [r.get(name) for r in ran]),
                ("@env_steps", [r.get("equal_env_steps", {}).get(name) for r in ran]),
            ):
                if not all(runs):
                    continue
                for key in ("heldout_success", "gain_points", "gain_points_sampled", "env_steps", "generated_tokens"):
                    figures[f"{name}{budget}_{key}"] = [run[key] for run in runs]
                if all("best" in run for run in runs):
                    figures[f"{name}{budget}_best_heldout_success"] = [run["best"]["heldout_success"] for run in runs]
                if (name != "linear_grpo" or budget) and all(linear):
                    # Paired with linear GRPO's timed run of the same seed (the same start): the targets are
                    # a gain over it at equal wall time, and its held-out success reached in at most half its env
                    # steps (an equal-env-steps run at or above it, with its env steps as a share of linear's).
                    figures[f"{name}{budget}_vs_linear_points"] = [
                        100 * (run["heldout_success"] - base["heldout_success"]) for run, base in zip(runs, linear)
                    ]
                    figures[f"{name}{budget}_env_steps_share_of_linear"] = [
                        run["env_steps"] / base["env_steps"] for run, base in zip(runs, linear)
                    ]
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
    table = variant_table(summary, args.runs)
    by_seed = seed_table({seed: r for seed, r in per_seed.items() if "start_failed" not in r}, summary, args.runs)
    print(table, by_seed, sep="\n\n", flush=True)
    return {"seeds": per_seed, "summary": summary, "starts_failed": failed, "table": table, "seed_table": by_seed}


#: The two budgets of ``--budget both``: the suffix of their figures in :func:`over_seeds`'s summary, and a label.
BUDGETS = (("", "equal wall time"), ("@env_steps", "equal env steps"))


def variant_table(summary: dict, runs: list[str]) -> str:
    """The variants at equal wall time and at equal env steps as a Markdown table (means, 95% intervals over seeds)."""

    def cell(figure: str, scale: float = 1.0, digits: int = 1) -> str:
        entry = summary[figure]
        low, high = entry["ci95"]
        interval = "" if low != low else f" [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"  # NaN: one seed
        return f"{scale * entry['mean']:.{digits}f}{interval}"

    lines = [
        "| variant | budget | held-out success, greedy (%) | gain over the start (points) | vs linear GRPO's timed run "
        "(points) | env steps | env steps, % of linear GRPO's timed run | tokens generated |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in runs:
        for budget, label in BUDGETS:
            if f"{name}{budget}_heldout_success" not in summary:
                continue
            paired = f"{name}{budget}_vs_linear_points" in summary
            lines.append(
                f"| {name} | {label} | {cell(f'{name}{budget}_heldout_success', 100)} | "
                f"{cell(f'{name}{budget}_gain_points')} | "
                f"{cell(f'{name}{budget}_vs_linear_points') if paired else '—'} | "
                f"{cell(f'{name}{budget}_env_steps', digits=0)} | "
                f"{cell(f'{name}{budget}_env_steps_share_of_linear', 100, 0) if paired else '—'} | "
                f"{cell(f'{name}{budget}_generated_tokens', digits=0)} |"
            )
    return "\n".join(lines)


def signed(value: float, digits: int = 0) -> str:
    """``value`` with its sign, a typographic minus and none on zero: the results page's points (+2, −4, 0)."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text.replace("-", "\u2212")


def seed_table(per_seed: dict[int, dict], summary: dict, runs: list[str]) -> str:
    """Each variant at both budgets with every seed's figures side by side, as a Markdown table (the results page's).

    Per seed (``per_seed``: a seed's :func:`learning` results, in :func:`over_seeds`'s order): greedy held-out success,
    the points over linear GRPO's timed run of that seed with their mean and 95% interval (from ``summary``), env
    steps and their share of that run's, tokens generated, and learner steps (an asynchronous trainer's are updates)."""
    seeds = " / ".join(map(str, per_seed))
    lines = [
        f"| variant | budget | held-out success, greedy (%): seed {seeds} | vs linear GRPO's timed run (points): seed "
        f"{seeds} | mean vs linear [95% interval] | env steps: seed {seeds} | env steps, % of linear's timed run | "
        f"tokens generated (k): seed {seeds} | steps: seed {seeds} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def each(figures) -> str:
        return " / ".join(figures)

    for name in runs:
        for budget, label in BUDGETS:
            at = [r.get(name) if not budget else r.get("equal_env_steps", {}).get(name) for r in per_seed.values()]
            if not all(at):
                continue
            # One decimal where the held-out count is not 100 (a text world's 30 games: 6.7), none where it is whole.
            success = (f"{100 * run['heldout_success']:.1f}".removesuffix(".0") for run in at)
            cells = [name, label, each(success)]
            if (paired := f"{name}{budget}_vs_linear_points") in summary:
                low, high = summary[paired]["ci95"]
                interval = "" if low != low else f" [{signed(low, 1)}, {signed(high, 1)}]"  # NaN: one seed
                shares = summary[f"{name}{budget}_env_steps_share_of_linear"]["values"]
                cells += [
                    each(signed(points, 1).removesuffix(".0") for points in summary[paired]["values"]),
                    signed(summary[paired]["mean"], 1) + interval,
                ]
            else:  # linear GRPO's timed run: the baseline itself
                shares = None
                cells += ["—", "—"]
            cells += [
                each(f"{run['env_steps']:.0f}" for run in at),
                each(f"{100 * share:.0f}" for share in shares) if shares else "—",
                each(f"{run['generated_tokens'] / 1000:.1f}" for run in at),
                each(str(run["steps"]) for run in at) + (" updates" if VARIANTS[name][0] == "sao" else ""),
            ]
            lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def run_setting(text: str) -> tuple[str, str]:
    """``RUN.key=value`` → (RUN, ``key=value``): a config override for one run."""
    name, dot, setting = text.partition(".")
    if not dot or "=" not in setting or name not in RUNS:
        raise argparse.ArgumentTypeError(f"expected RUN.key=value with RUN one of {', '.join(RUNS)}, got {text!r}")
    return name, setting


def run_names(text: str) -> list[str]:
    names = list(RUNS) if text == "all" else text.split(",")
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
        "--runs",
        type=run_names,
        default=DEFAULT_RUNS,
        help=f"learning: which variants of {','.join(RUNS)} to run, or all (default: {','.join(DEFAULT_RUNS)})",
    )
    parser.add_argument(
        "--budget",
        choices=["time", "env_steps", "both"],
        default="time",
        help="learning: train each variant for --minutes, for --env-steps env steps, or both (default: %(default)s)",
    )
    parser.add_argument(
        "--env-steps",
        type=int,
        default=None,
        help="learning: the env-step budget (default with --budget both: the fewest any variant took in --minutes)",
    )
    parser.add_argument(
        "--env-steps-from",
        choices=["snapshots", "runs"],
        default="snapshots",
        help="learning, --budget both: each variant's equal-env-steps policy is its timed run's snapshot at the "
        "budget, or a second run stopped there (default: %(default)s)",
    )
    parser.add_argument(
        "--heldout", type=int, default=None, help="held-out tasks to evaluate (default: the env's, in ENVS)"
    )
    # The env's start by default (ENVS; KeyChain's and Calculator's: RL_DEMO_START). The solutions-only start
    # (--sft-mistake-rate 0) on KeyChain at 3e-3, seed 0: 1000 × 2 epochs 13% held-out, × 2.5 58%, × 3 69.5%.
    parser.add_argument("--sft-tasks", type=int, default=None, help="demonstrations (train tasks) for the SFT start")
    parser.add_argument("--sft-epochs", type=float, default=None)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument(
        "--sft-mistake-rate",
        type=float,
        default=None,
        help="how often the demonstrator makes the env's scripted mistake (KeyChain: submits the key a pointer names "
        "instead of looking it up; Calculator: evaluates a + b * c left to right; a text world: idles before a "
        "step)",
    )
    parser.add_argument(
        "--sft-min-start-success",
        type=float,
        default=None,
        help="the start's self-check: sampled success it must reach on unseen train tasks, else it trains another "
        "round of --sft-epochs (0: no check)",
    )
    parser.add_argument("--sft-max-rounds", type=int, default=None)
    parser.add_argument(
        "--validation",
        type=int,
        default=0,
        help="learning: validate each run greedily on this many tasks of the env's validation split (the text "
        "worlds' dev, else held-out tasks after --heldout's) and report its best checkpoint's held-out success "
        "beside the last's (default: none)",
    )
    parser.add_argument(
        "--validation-every", type=int, default=5, help="learning: steps between validations (default: %(default)s)"
    )
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
    if args.budget == "env_steps" and args.env_steps is None:
        parser.error("--budget env_steps needs --env-steps")
    if args.part != "learning" and ENVS[args.env].sft != RL_DEMO_START:
        parser.error(f"the throughput part is KeyChain's, with its start: run --env {args.env} with --part learning")
    env = ENVS[args.env]
    args.heldout = env.heldout if args.heldout is None else args.heldout
    for key, value in env.sft.items():  # the --sft-* options not given: the env's start
        if getattr(args, f"sft_{key}") is None:
            setattr(args, f"sft_{key}", value)
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
