"""AgentgymTrainer: what every agentgym trainer adds to TRL's GRPOTrainer — rollouts on this process, the store, rollout state in checkpoints.

The trainers (:class:`~agentgym.trainers.tree_grpo.TreeGRPOTrainer`,
:class:`~agentgym.trainers.sao.SAOTrainer`) subclass it with a config that subclasses
:class:`~agentgym.trainers.base_config.AgentgymConfig`, and replace TRL's
``_generate_and_score_completions`` with their own rollouts. What they share:

* **one dataset row per task** (``prompt`` = the task id, :func:`task_dataset`; by default the
  config's ``train_tasks`` or every task the env lists, :func:`default_tasks`): a task's whole
  group is grown on one process, so its advantages need no cross-process gather;
* **rewards from the env**: GRPOTrainer needs a reward function named, :func:`env_reward`, which
  is never called;
* **the trajectory store** (``store_path``, one file per process) and the in-process policy
  (:class:`~agentgym.rollout.hf_policy.HFPolicy` over a model, :meth:`AgentgymTrainer._make_policy`);
* **envs kept between steps**: the rollouts' runner (``self.runner``, made by a subclass with
  :func:`~agentgym.trainers.rollouts.make_runner`) resets its envs with the next step's tasks
  instead of building new ones, replaces those that failed, and closes them when ``train()``
  returns or raises;
* **the rollout backend**: ``local`` runs envs and sampling in this process; ``ray`` runs the
  envs on a cluster's env workers (:class:`~agentgym.distributed.env_pool.EnvPool`) and samples
  from ``agentgym serve`` replicas started as Ray actors
  (:class:`~agentgym.distributed.replicas.PolicyReplicas`), which get the learner's weights
  through the object store (:meth:`AgentgymTrainer._sync_rollout_weights`); every turn records the
  weight version that sampled it and the replica that served it. With several training processes
  each one has its own pool and replicas. Both are closed when ``train()`` returns; ``gateway``
  runs the config's agent program per episode (:mod:`agentgym.gateway`), which samples through a
  gateway from the in-process policy, so each step's weights are what the gateway serves;
* **rollout state in checkpoints**: each process writes :data:`STATE_FILE` last into a checkpoint
  (so its presence marks a complete one; :func:`agentgym.train.last_complete_checkpoint`), and a
  resumed run reads it back; subclasses extend ``_rollout_state``/``_restore_rollout_state``;
* **metrics averaged over processes**, so every rank logs the same numbers;
* **vision-language policies**: with a Qwen2-VL-style model (TRL loads its processor) the
  in-process policy takes the processor's image processor, the agent puts the env's screenshots
  in its prompts (the config's ``images`` section), and the batches carry the images' pixel
  values, which TRL's forward pass gives the model (:mod:`agentgym.trainers.rollouts`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sized
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer, ProcessorMixin, TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from agentgym.registration import make_env_factory
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.runner import Runner
from agentgym.rollout.store import TrajectoryStore
from agentgym.trainers.base_config import AgentgymConfig
from agentgym.trainers.lora import adapter_config, is_adapted
from agentgym.trainers.rollouts import (
    EnvStepBudget,
    EnvStepSnapshots,
    TimeBudget,
    image_inputs,
    policy_copy,
    rollout_env_factory,
    rollout_weights,
    sequences,
)

if TYPE_CHECKING:
    from agentgym.distributed.replicas import PolicyReplicas

__all__ = [
    "STATE_FILE",
    "AgentgymTrainer",
    "ImageTextProcessor",
    "default_tasks",
    "env_reward",
    "task_dataset",
    "vision_processor",
]

#: Each process's rollout state in a checkpoint, written last: a checkpoint holding it for every rank is complete.
STATE_FILE = "agentgym_state-rank{rank}.json"


def env_reward(prompts, completions, **kwargs):
    """The reward is the env's (our rollouts compute it); GRPOTrainer's constructor needs a reward source named."""
    raise RuntimeError("agentgym trainers take rewards from the env; this reward function is never called")


def task_dataset(task_ids):
    """A dataset with one row per task (``prompt`` = the task id), the trainers' ``train_dataset``."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": list(task_ids)})


def default_tasks(args) -> list[str]:
    """The config's ``train_tasks``, or every task a probe env lists."""
    if args.train_tasks:
        return list(args.train_tasks)
    env = make_env_factory(args.env_id, args.env_kwargs)()
    try:
        return list(env.unwrapped.task_ids())
    finally:
        env.close()


class ImageTextProcessor(ProcessorMixin):
    """A VLM's image processor and tokenizer as one processor (what TRL's GRPOTrainer takes a VLM's to be).

    The model's own processor class (``AutoProcessor``) also loads a video processor, which needs
    torchvision; agentgym's rollouts send images only, so they need just these two.
    """

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None):
        super().__init__(image_processor, tokenizer, chat_template=chat_template)


def vision_processor(model) -> ImageTextProcessor | None:
    """The :class:`ImageTextProcessor` of a vision-language model (a local path or a loaded model), else None."""
    config = AutoConfig.from_pretrained(model) if isinstance(model, (str, os.PathLike)) else model.config
    if getattr(config, "vision_config", None) is None:
        return None
    path = model if isinstance(model, (str, os.PathLike)) else config.name_or_path
    return ImageTextProcessor(AutoImageProcessor.from_pretrained(path), AutoTokenizer.from_pretrained(path))


class Validation(TrainerCallback):
    """Validates the trainer's policy every ``validation_every`` steps and when training ends (:meth:`AgentgymTrainer.validate`)."""

    def __init__(self, trainer: AgentgymTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % args.validation_every == 0:
            self.trainer.validate()

    def on_train_end(self, args, state, control, **kwargs):
        self.trainer.validate()


class AgentgymTrainer(GRPOTrainer):
    """GRPOTrainer with agentgym's rollout plumbing (see the module docstring); subclass it, do not use it alone.

    Args:
        model: a model path or a causal LM (as for GRPOTrainer).
        args: an :class:`~agentgym.trainers.base_config.AgentgymConfig` (a subclass's config).
        train_dataset: one row per task, ``prompt`` = task id (:func:`task_dataset`); by default the
            config's ``train_tasks`` or every task the env lists.
        processing_class: the tokenizer (its chat template must be prefix-preserving).
        callbacks: as for GRPOTrainer.
        optimizers: as for GRPOTrainer.
        peft_config: a ``peft.PeftConfig`` to train an adapter (or the config's ``peft`` section; not both).
    """

    _tag_names = ["trl", "agentgym"]
    args: AgentgymConfig
    policy: Any  # the rollouts' policy, made by a subclass with _make_policy
    runner: Runner | None = None  # the rollouts' runner (its envs kept between steps), made by a subclass

    def __init__(
        self,
        model,
        args: AgentgymConfig,
        train_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
    ):
        super().__init__(
            model,
            reward_funcs=env_reward,
            args=args,
            train_dataset=train_dataset if train_dataset is not None else task_dataset(default_tasks(args)),
            processing_class=processing_class if processing_class is not None else vision_processor(model),
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=self._adapter_config(args, peft_config),
        )
        self._setup_rollouts()

    def _adapter_config(self, args: AgentgymConfig, peft_config):
        """The adapter to train (None: every weight); subclasses add the modules they attach to the model."""
        return adapter_config(args.peft, peft_config)

    def _setup_rollouts(self) -> None:
        """The store (one file per process), the unwrapped model rollouts sample from, the time budget."""
        args = self.args
        rank = self.accelerator.process_index
        path = args.store_path or os.path.join(args.output_dir, "trajectories.jsonl")
        if rank:  # one file per process: appends from several processes must not interleave
            root, ext = os.path.splitext(path)
            path = f"{root}-rank{rank}{ext}"
        self.store = TrajectoryStore(path)
        self.store_position = sum(1 for _ in self.store)  # records already there (a resumed run) are not ours to train
        self.rollout_model = self.accelerator.unwrap_model(self.model)
        if args.time_budget_s:
            self.add_callback(TimeBudget(args.time_budget_s))
        self.env_steps = 0  # env steps of the rollouts this process trained on (or consumed), across resumes
        self.generated_tokens = 0  # tokens they sampled
        if args.env_step_budget:
            self.add_callback(EnvStepBudget(self, args.env_step_budget))
        if args.env_step_snapshots:
            self.add_callback(EnvStepSnapshots(self, args.env_step_snapshots))
        self.validation: dict = {"best": None, "last": None, "history": []}
        if args.validation_tasks:
            self.add_callback(Validation(self))
        self.env_pool = None
        self.replicas: PolicyReplicas | None = None
        self.env_factory = rollout_env_factory(args)
        if args.rollout_backend == "ray":
            from agentgym.distributed.cluster import connect
            from agentgym.distributed.config import RayConfig
            from agentgym.distributed.env_pool import EnvPool

            self.ray_config = RayConfig.from_dict(args.ray)
            connect(self.ray_config.address)
            wrap = None
            if args.memory is not None:
                from agentgym.memory.config import MemoryConfig

                wrap = MemoryConfig.from_dict(args.memory).on_cluster().wrap
            self.env_pool = EnvPool(
                args.env_id,
                args.env_kwargs,
                workers=self.ray_config.env_workers,
                envs_per_worker=self.ray_config.envs_per_worker,
                wrap=wrap,
            )
            self.env_factory = self.env_pool

    def _group_requests(self) -> int:
        """How many requests a step's group sends the policy at once (its first turns); subclasses say."""
        return self.args.rollout_concurrency

    def _make_policy(self, model):
        """The rollouts' policy: ``model`` in-process (batching ``rollout_batch_size`` requests: by default a whole group's), or its replicas on the cluster."""
        if self.args.rollout_backend == "ray":
            from agentgym.distributed.replicas import PolicyReplicas

            if self._is_vlm:
                raise ValueError("vision-language models train with rollout_backend: local only (for now)")

            self.replicas = PolicyReplicas(
                policy_copy(model) if is_adapted(model) else model,  # replicas hold plain models, given merged weights
                tokenizer=self.processing_class,
                replicas=self.ray_config.policy_replicas,
                max_batch_size=self.ray_config.replica_max_batch_size,
                version=self.state.global_step,
            )
            return self.replicas.policy(
                tokenizer=self.processing_class, max_concurrency=self.args.rollout_concurrency, name="replicas"
            )
        batch = self.args.rollout_batch_size or max(self.args.rollout_concurrency, self._group_requests())
        if self.args.rollout_backend == "gateway" and self._is_vlm:
            raise ValueError(
                "vision-language models do not train through the gateway (for now): its turns hold no images"
            )
        if self._is_vlm:
            return HFPolicy.from_model(
                model,
                self._tokenizer,
                image_processor=cast(ProcessorMixin, self.processing_class).image_processor,
                max_batch_size=batch,
                name="learner",
                seed=self.args.seed,
            )
        if self.args.images is not None:
            raise ValueError(
                "the config's `images` section needs a vision-language model (Qwen2-VL style, with an image "
                f"processor); {type(model).__name__} is text-only"
            )
        # Seeded like the rest of the run: the same config samples the same rollouts (the learning tests'
        # outcomes are then fixed, not a draw).
        return HFPolicy.from_model(
            model, self.processing_class, max_batch_size=batch, name="learner", seed=self.args.seed
        )

    @property
    def vision(self):
        """The policy's :class:`~agentgym.rollout.vision.VisionChatFormat` (a VLM's), else None: what batches need for pixels."""
        return self.policy.chat_format if getattr(self.policy, "accepts_images", False) else None

    def _sync_rollout_weights(self, version: int) -> None:
        """Give the rollouts' policy the learner's current weights as ``version``.

        In-process the policy samples from the learner's own module, so only the version moves; the
        replicas get a copy of the weights (the value model left out).
        """
        if self.replicas is None:
            self.policy.update_weights(self.policy.model, version=version)  # same weights object
        else:
            self.policy.update_weights(rollout_weights(self.rollout_model), version=version)

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            self._close_rollouts()

    def _close_rollouts(self) -> None:
        """Close the envs kept between steps, then stop the cluster's replicas and env workers this trainer started."""
        if self.runner is not None:
            asyncio.run(self.runner.aclose())
        if self.replicas is not None:
            self.replicas.close()
        if self.env_pool is not None:
            self.env_pool.close()

    def _get_train_sampler(self, dataset=None):
        # One row per task: a task's whole group (episodes or tree) is grown on one process, so its
        # advantages need no cross-process gather.
        return RepeatSampler(
            data_source=cast(Sized, dataset if dataset is not None else self.train_dataset),  # a map-style dataset
            mini_repeat_count=1,
            batch_size=self.args.generation_batch_size,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    def _rollout_state(self) -> dict:
        """What this process's rollouts need to resume (JSON); subclasses add theirs to ``super()``'s."""
        return {
            "store_path": str(self.store.path),
            "store_position": self.store_position,
            "validation": self.validation,
            "env_steps": self.env_steps,
            "generated_tokens": self.generated_tokens,
        }

    def _restore_rollout_state(self, state: dict) -> None:
        """Take back what :meth:`_rollout_state` wrote into the checkpoint being resumed."""
        self.store_position = state["store_position"]
        self.validation = state.get("validation", self.validation)
        self.env_steps = state.get("env_steps", 0)
        self.generated_tokens = state.get("generated_tokens", 0)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        # Written last: its presence marks a complete checkpoint (agentgym.train resumes only from those).
        folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, STATE_FILE.format(rank=self.accelerator.process_index))
        with open(path + ".tmp", "w") as file:
            json.dump(self._rollout_state(), file)
        os.replace(path + ".tmp", path)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            path = os.path.join(checkpoint, STATE_FILE.format(rank=self.accelerator.process_index))
            if os.path.exists(path):
                with open(path) as file:
                    self._restore_rollout_state(json.load(file))

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        # A model with tied embeddings (the tiny model, Qwen2's small sizes) stores the shared tensor once,
        # so every checkpoint "misses" lm_head.weight; transformers 5.24 warns about it on each resume
        # although load_state_dict filled it through the embeddings. Only keys whose tensor nothing loaded
        # are missing.
        missing = set(load_result.missing_keys)
        by_tensor: dict[int, set[str]] = {}
        for name, parameter in self.model.named_parameters(remove_duplicate=False):
            by_tensor.setdefault(id(parameter), set()).add(name)
        loaded = {name for names in by_tensor.values() if names - missing for name in names}
        super()._issue_warnings_after_load(
            load_result._replace(missing_keys=[key for key in load_result.missing_keys if key not in loaded])
        )

    def validate(self) -> float:
        """Greedy success of the policy being trained on ``validation_tasks``; the best one's weights go to ``best-checkpoint``.

        Runs at the end of every ``validation_every``-th step and when training ends (the last
        checkpoint's score); ``<output_dir>/validation.json`` holds the best and the last
        ``{step, success}`` and every validation so far.
        """
        from agentgym.trainers.warm_start import agent_config, success_rate

        args = self.args
        step = self.state.global_step
        if self.validation["last"] is not None and self.validation["last"]["step"] == step:
            return self.validation["last"]["success"]  # already validated at this step
        factory = make_env_factory(args.env_id, {**args.env_kwargs, **args.validation_env_kwargs})
        loop = {
            "max_turn_tokens": args.max_turn_tokens,
            "max_turns": args.max_turns,
            "system_prompt": args.system_prompt,
        }
        policy = HFPolicy.from_model(
            self.rollout_model, self.processing_class, max_batch_size=args.rollout_concurrency, name="validation"
        )
        was_training = self.rollout_model.training
        self.rollout_model.eval()
        try:
            success = success_rate(
                policy,
                factory,
                list(args.validation_tasks or []),
                agent_config(loop, greedy=True),
                args.rollout_concurrency,
            )
        finally:
            self.rollout_model.train(was_training)
            asyncio.run(policy.aclose())  # its batching thread
        entry = {"step": step, "success": success}
        self.validation["history"].append(entry)
        self.validation["last"] = entry
        best = self.validation["best"]
        if best is None or success > best["success"]:
            self.validation["best"] = entry
            self.save_model(os.path.join(args.output_dir, "best-checkpoint"))
        if self.accelerator.is_main_process:
            path = os.path.join(args.output_dir, "validation.json")
            with open(path + ".tmp", "w") as file:
                json.dump(self.validation, file, indent=1)
            os.replace(path + ".tmp", path)
        self._metrics["train"]["validation/success"].append(success)
        return success

    def _proximal_logps(self, batch: dict) -> torch.Tensor:
        """The learner's own log-probabilities of the batch's tokens before it trains on them (the decoupled objective's proximal policy)."""
        input_ids, attention_mask, keep = sequences(batch)
        with torch.no_grad():
            return self._get_per_token_logps_and_entropies(
                self.model,
                input_ids,
                attention_mask,
                keep,
                batch_size=self.args.per_device_train_batch_size,
                **image_inputs(batch),
            )[0]

    def _log_metrics(self, mode: str, metrics: dict[str, float]) -> None:
        # Averaged over processes so every rank logs the same numbers.
        names = sorted(metrics)
        values = torch.tensor([metrics[n] for n in names], dtype=torch.float64, device=self.accelerator.device)
        gathered = self.accelerator.gather(values[None]).view(-1, len(names))
        for i, name in enumerate(names):
            column = gathered[:, i]
            column = column[~torch.isnan(column)]
            if len(column):
                self._metrics[mode][name].append(column.mean().item())
