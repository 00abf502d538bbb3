"""What both trainers share at rollout time: the env factory, agent and runner, and rollouts turned into TRL's (B, T) batch layout.

TRL's GRPO loss reads ``prompt_ids`` (left-padded), ``completion_ids`` (right-padded),
``completion_mask`` (real tokens), ``tool_mask`` (1 = gets loss) and ``advantages`` of shape
(B, T). A multi-turn training sequence (:meth:`Trajectory.sequences`) maps onto it as TRL's own
tool loop does: the prompt is everything before the first sampled token, the completion is the
rest — the model's turns *and* the env's answers between them — and ``tool_mask`` is the
env-token mask, so env tokens never get loss. Each token gets the advantage of its turn.

With a vision-language policy (the config's ``images`` section) a row also carries the encoded
bytes of its sequence's images, in the order of their runs of image tokens, and the batch gets
what TRL's GRPOTrainer feeds a Qwen2-VL model's forward: ``pixel_values`` and
``image_grid_thw`` (every row's images, flat, row after row), ``num_images`` per row (TRL splits,
shuffles and slices them by it) and ``mm_token_type_ids`` over prompt + completion. TRL's
``_get_per_token_logps_and_entropies`` passes them to the model, so the loss's logprobs are
recomputed with the pixels the policy saw.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers import TrainerCallback

from agentgym.core import AgentEnv
from agentgym.registration import make_env_factory
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import SamplingParams
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
from agentgym.rollout.store import Record, TrajectoryStore
from agentgym.rollout.trajectory import RolloutTree, Trajectory
from agentgym.rollout.vision import VisionChatFormat
from agentgym.trainers.lora import is_adapted, merged_weights

__all__ = [
    "ENV_STEP_SNAPSHOTS",
    "EnvStepBudget",
    "EnvStepSnapshots",
    "Row",
    "SNAPSHOT_RECORD",
    "TimeBudget",
    "collate",
    "image_inputs",
    "rollout_env_factory",
    "policy_copy",
    "record_metrics",
    "sequences",
    "rollout_weights",
    "trajectory_rows",
]


def make_agent(policy: HFPolicy, args) -> Agent:
    sampling = SamplingParams(
        max_tokens=args.max_turn_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0
    )
    return Agent(
        policy,
        AgentConfig(
            sampling=sampling,
            system_prompt=args.system_prompt,
            context_window=args.context_window,
            max_turns=args.max_turns,
            mode="tokens",
            images=args.image_config(),
        ),
    )


def rollout_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of ``model``'s policy weights for a sampler (a value model attached to it left out).

    A peft model gives its merged weights under the plain model's names: samplers hold plain models.
    """
    if is_adapted(model):
        return merged_weights(model, skip_prefix="value_model.")
    return {k: v.detach().clone() for k, v in model.state_dict().items() if not k.startswith("value_model.")}


def sequences(batch: dict) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A TRL batch's whole sequences: ``(input_ids, attention_mask, completion width)`` (the logits to keep)."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    return input_ids, attention_mask, batch["completion_ids"].size(1)


def policy_copy(model: torch.nn.Module) -> torch.nn.Module:
    """An independent plain copy of the policy with its class's own forward (an adapter merged into its weights).

    TRL patches ``model.forward`` with a fused LM head whose closure holds the *original* model's
    forward, so a plain deep copy would still run the original's weights.
    """
    clone = copy.deepcopy(model)
    if is_adapted(clone):
        clone = cast(Any, clone).merge_and_unload()
    if "forward" in vars(clone):
        del clone.forward
    return clone


def rollout_env_factory(args) -> Callable[[], AgentEnv]:
    """The envs of a trainer's rollouts: the config's env, wrapped for its memory section if it has one."""
    factory = make_env_factory(args.env_id, args.env_kwargs)
    if args.memory is None:
        return factory
    from agentgym.memory.config import MemoryConfig

    return MemoryConfig.from_dict(args.memory).wrap(factory)


def make_runner(
    agent: Agent,
    args,
    store: TrajectoryStore | None,
    job=None,
    env_factory: Callable[[], AgentEnv] | None = None,
    concurrency: int | None = None,
) -> Runner:
    """The runner of a trainer's rollouts, on ``env_factory``'s envs (default: made here from the config).

    It keeps its envs between calls (a trainer's steps reset them with the next tasks instead of
    building new ones); the trainer closes them with ``Runner.aclose`` when training ends.
    ``concurrency`` defaults to the config's ``rollout_concurrency``. With ``rollout_backend: gateway``
    the job is the config's agent program run through the gateway (:class:`~agentgym.gateway.programs.GatewayJob`),
    sampling from ``agent``'s policy with the trainer's sampling settings.
    """
    programs = args.program_config()
    if programs is not None:
        job = programs.job()
    return Runner(
        agent,
        env_factory or rollout_env_factory(args),
        RunnerConfig(
            concurrency=concurrency or args.rollout_concurrency,
            episode_timeout=args.episode_timeout,
            progress=False,
            store=store,
            keep_envs=True,
        ),
        job=job,
    )


def run_requests(runner: Runner, requests: Sequence[EpisodeRequest]) -> list[Record]:
    """Run every request to its end (from synchronous trainer code) and return the records in request order."""
    result = asyncio.run(runner.run(list(requests)))
    order = {(r.task_id, r.repeat, r.group): i for i, r in enumerate(requests)}
    return sorted(
        result.records,
        key=lambda r: order.get((r.task_id, r.metadata.get("repeat"), r.metadata.get("group")), len(order)),
    )


class TimeBudget(TrainerCallback):
    """Stops training (and saves) once ``seconds`` of training have passed: runs are compared at equal wall time."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.started >= self.seconds:
            control.should_training_stop = True
            control.should_save = True
        return control


class EnvStepBudget(TrainerCallback):
    """Stops training (and saves) once the trainer's ``env_steps`` reach ``steps``: runs are compared at equal env steps."""

    def __init__(self, trainer, steps: int):
        self.trainer = trainer
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer.env_steps >= self.steps:
            control.should_training_stop = True
            control.should_save = True
        return control


#: Where :class:`EnvStepSnapshots` keeps the policy at each mark: ``<output_dir>/env-steps/<mark>``.
ENV_STEP_SNAPSHOTS = "env-steps"
#: Each snapshot's record: the step, env steps and tokens generated when it was taken.
SNAPSHOT_RECORD = "snapshot.json"


class EnvStepSnapshots(TrainerCallback):
    """Saves the policy's weights the first time the trainer's ``env_steps`` reach each multiple of ``every``.

    The snapshot at mark ``m`` (``<output_dir>/env-steps/<m>``, with :data:`SNAPSHOT_RECORD`) is taken at the end of
    the first step at or past ``m`` env steps: the policy an ``env_step_budget=m`` run of the same seed stops with
    (the learning-rate schedule follows ``max_steps``, not the budget), so one run gives every equal-env-steps
    comparison up to its length. A resumed run keeps the snapshots already there; a mark passed within one step
    shares that step's snapshot with the marks before it (each gets its own directory, so a lookup by mark works).
    """

    def __init__(self, trainer, every: int):
        self.trainer = trainer
        self.every = every
        self.done = 0  # the highest mark handled: each step looks only at the marks it passed

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self.trainer
        root = os.path.join(args.output_dir, ENV_STEP_SNAPSHOTS)
        for mark in range(self.done + self.every, trainer.env_steps + 1, self.every):
            self.done = mark
            path = os.path.join(root, str(mark))
            if os.path.exists(os.path.join(path, SNAPSHOT_RECORD)):  # a resumed run's
                continue
            trainer.save_model(path)
            if trainer.accelerator.is_main_process:
                record = {
                    "mark": mark,
                    "step": state.global_step,
                    "env_steps": trainer.env_steps,
                    "generated_tokens": trainer.generated_tokens,
                }
                with open(os.path.join(path, SNAPSHOT_RECORD), "w") as file:  # last: a snapshot without it is partial
                    json.dump(record, file)
        return control


@dataclass
class Row:
    """One training sequence in TRL's layout (lists over the completion part), plus its turns for value targets."""

    prompt_ids: list[int]
    completion_ids: list[int]
    loss_mask: list[int]
    sampling_logps: list[float]
    advantages: list[float]
    turn_starts: list[int]  # completion offset of each turn's first sampled token
    turn_rewards: list[float]
    images: list[bytes] = field(default_factory=list)  # encoded, in the order of the sequence's runs of image tokens


def trajectory_rows(
    trajectory: Trajectory, turn_advantages: Sequence[float], trainable: Sequence[bool] | None = None
) -> list[Row]:
    """The trajectory's training sequences as rows; turn ``i``'s tokens get ``turn_advantages[i]``.

    ``trainable[i] = False`` keeps turn ``i`` as context without loss (a tree node already
    trained through another path).
    """
    rows = []
    for sequence in trajectory.sequences():
        start = sequence.turn_spans[0][0]
        completion = sequence.input_ids[start:]
        mask = list(sequence.mask[start:])
        advantages = [0.0] * len(completion)
        for (lo, hi), turn in zip(sequence.turn_spans, sequence.turn_indices):
            advantages[lo - start : hi - start] = [float(turn_advantages[turn])] * (hi - lo)
            if trainable is not None and not trainable[turn]:
                mask[lo - start : hi - start] = [0] * (hi - lo)
        # Earlier completions inside the completion part that are context (after a fold) are already mask 0.
        rows.append(
            Row(
                sequence.input_ids[:start],
                completion,
                mask,
                sequence.logprobs[start:],
                advantages,
                [lo - start for lo, _ in sequence.turn_spans],
                [trajectory.turns[i].reward for i in sequence.turn_indices],
                [_image(trajectory, h) for h in sequence.image_hashes],
            )
        )
    return rows


def _image(trajectory: Trajectory, image_hash: str) -> bytes:
    try:
        return trajectory.images[image_hash]
    except KeyError:
        raise ValueError(
            f"trajectory {trajectory.task_id!r} refers to image {image_hash[:12]} but holds no bytes for it: "
            "a VLM's sequences need their images to be trained on"
        ) from None


def collate(rows: Sequence[Row], pad_id: int, device, vision: VisionChatFormat | None = None) -> dict:
    """Rows as padded tensors: prompts left-padded, completions right-padded (TRL's layout).

    With ``vision`` (the policy's :class:`~agentgym.rollout.vision.VisionChatFormat`) and rows
    holding images, the batch also has the model's image inputs (see the module docstring).
    """
    width_p = max(len(r.prompt_ids) for r in rows)
    width_c = max(len(r.completion_ids) for r in rows)

    def left(values, fill, dtype):
        return torch.tensor([[fill] * (width_p - len(v)) + list(v) for v in values], dtype=dtype, device=device)

    def right(values, fill, dtype):
        return torch.tensor([list(v) + [fill] * (width_c - len(v)) for v in values], dtype=dtype, device=device)

    batch = {
        "prompt_ids": left([r.prompt_ids for r in rows], pad_id, torch.long),
        "prompt_mask": left([[1] * len(r.prompt_ids) for r in rows], 0, torch.long),
        "completion_ids": right([r.completion_ids for r in rows], pad_id, torch.long),
        "completion_mask": right([[1] * len(r.completion_ids) for r in rows], 0, torch.long),
        "tool_mask": right([r.loss_mask for r in rows], 0, torch.long),
        "sampling_per_token_logps": right([r.sampling_logps for r in rows], 0.0, torch.float32),
        "advantages": right([r.advantages for r in rows], 0.0, torch.float32),
    }
    if any(r.images for r in rows):
        if vision is None:
            raise ValueError("the rollouts hold images but the policy is not a vision-language model")
        for r in rows:  # the ids must hold exactly one run of image tokens per image, as the policy saw them
            vision.check_images(r.prompt_ids + r.completion_ids, r.images)
        inputs = vision.image_inputs([image for r in rows for image in r.images])
        batch["pixel_values"] = inputs["pixel_values"].to(device)
        batch["image_grid_thw"] = inputs["image_grid_thw"].to(device)
        batch["num_images"] = [len(r.images) for r in rows]
        batch["mm_token_type_ids"] = torch.cat(
            [
                left([vision.mm_token_type_ids(r.prompt_ids) for r in rows], 0, torch.long),
                right([vision.mm_token_type_ids(r.completion_ids) for r in rows], 0, torch.long),
            ],
            dim=1,
        )
    return batch


def image_inputs(batch: dict) -> dict:
    """The model inputs about images in a :func:`collate` batch (none for text), as keyword arguments of TRL's
    ``_get_per_token_logps_and_entropies``."""
    keys = ("pixel_values", "image_grid_thw", "num_images", "mm_token_type_ids")
    return {key: batch[key] for key in keys if key in batch}


def pad_rows(rows: list[Row], multiple: int) -> list[Row]:
    """Append loss-free copies of the last row until ``len(rows)`` is a multiple of ``multiple``.

    TRL splits a generation batch into ``steps_per_generation`` equal slices and drops a
    remainder; trees give a varying number of sequences, so the batch is padded instead.
    """
    while len(rows) % multiple:
        last = rows[-1]
        rows.append(
            Row(
                last.prompt_ids,
                last.completion_ids,
                [0] * len(last.loss_mask),
                last.sampling_logps,
                [0.0] * len(last.advantages),
                [],
                [],
                last.images,
            )
        )
    return rows


def record_metrics(records: Sequence[Record]) -> dict[str, float]:
    """Success rate, env error rate and episode shape of finished rollouts (trees counted by their leaves)."""
    paths = [p for r in records for p in ([r] if isinstance(r, Trajectory) else r.paths())]
    trees = [r for r in records if isinstance(r, RolloutTree)]
    metrics = {
        "rollout/success_rate": _mean([p.success for p in paths]),
        "rollout/reward": _mean([p.reward for p in paths]),
        "rollout/env_error_rate": _mean([p.error is not None for p in paths]),
        "rollout/turns": _mean([len(p.turns) for p in paths]),
        "rollout/env_steps": float(sum(r.num_env_steps for r in records)),
    }
    if trees:
        from agentgym.rollout.tree_values import prefix_sharing_saving

        metrics.update(
            {
                "tree/leaves": _mean([len(t.leaves) for t in trees]),
                "tree/nodes": _mean([len(t.nodes) for t in trees]),
                "tree/depth": _mean([max(len(t.path(leaf.id)) for leaf in t.leaves) for t in trees if t.nodes]),
                "tree/branch_points": _mean([sum(n.branched for n in t.nodes) for t in trees]),
                "tree/prefix_sharing_saving": _mean([prefix_sharing_saving(t) for t in trees]),
            }
        )
    return metrics


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan
