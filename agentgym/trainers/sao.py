"""SAOTrainer: single-rollout asynchronous optimization — one rollout per task, a learned value baseline, strict token clipping, bounded staleness.

The loop (one per process):

* **Producer** (a background thread with its own asyncio loop): ``rollout_concurrency`` workers
  each take the next task (every task once per epoch, reshuffled per epoch; with
  ``task_allocation: trace``, drawn ∝ p(1−p) of its recent outcomes), run one linear
  episode through the :class:`~agentgym.rollout.runner.Runner` on a *copy* of the policy
  (:class:`~agentgym.rollout.hf_policy.HFPolicy`, batching every worker's request together),
  append it to the trajectory store and put it in a bounded queue. The workers' envs are kept
  between episodes (reset with the next task) and closed when the producer stops. Every turn carries the version of the weights that sampled it.
* **Learner** (the Trainer loop): each step takes ``per_device_train_batch_size`` trajectories
  from the queue (first, after a resume, the stored ones it had not consumed). A trajectory
  whose oldest turn is more than ``max_staleness`` versions behind the learner is dropped and
  counted; the rest are trained on with their sampling logprobs as the behaviour policy. Every
  ``sync_every`` steps the learner's weights are copied into the producer's model (in-process,
  between two of its batches) and its version set to the learner's step.
* **Value model**: a linear head on the policy's last hidden state (``value_model="head"``; the
  value loss trains the head, not the shared trunk) or a separate small model with a head
  (``value_model=<path>``), attached to the policy module as
  ``value_model`` so the optimizer, DDP and checkpoints carry it. V(s) is read at the last
  token before each turn's first sampled token. The baseline is per trajectory
  (``A = R − V(s₀)``) or per turn with GAE (:func:`~agentgym.trainers.advantages.turn_gae`);
  the value loss ``(V − target)²`` is trained on the same batch, the value model's own parameters
  at ``value_learning_rate`` (a fresh zero head at a small policy rate learns too slowly to be a
  baseline).
* **Loss**: strict double-sided token clipping
  (:func:`~agentgym.trainers.advantages.strict_clip_policy_loss`): tokens whose ratio to the
  behaviour policy leaves ``[1 − ε_low, 1 + ε_high]`` get no gradient whatever the advantage's
  sign; the policy loss is the sum over the kept tokens divided by all trainable tokens.

On GPUs with a vLLM server the producer would sample from the server and the sync would go
through TRL's vLLM client; that path is not implemented yet (the in-process producer is).
"""

from __future__ import annotations

import asyncio
import copy
import math
import queue
import random
import re
import threading
import time
from collections import Counter, deque
from typing import cast

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForImageTextToText, PreTrainedModel
from trl.trainer.utils import add_fused_lm_head

from agentgym.rollout.runner import EpisodeRequest
from agentgym.rollout.trajectory import Trajectory
from agentgym.trainers.advantages import (
    decoupled_policy_loss,
    explained_variance,
    strict_clip_policy_loss,
    turn_gae,
)
from agentgym.trainers.allocation import TaskOutcomes, task_sampling_weights
from agentgym.trainers.base import AgentgymTrainer, default_tasks, task_dataset
from agentgym.trainers.lora import plain_model
from agentgym.trainers.replay import SuccessReplay, replay_age
from agentgym.trainers.rollouts import (
    collate,
    image_inputs,
    make_agent,
    make_runner,
    pad_rows,
    policy_copy,
    record_metrics,
    rollout_weights,
    sequences,
    trajectory_rows,
)
from agentgym.trainers.sao_config import SAOConfig

__all__ = ["SAOTrainer", "SeparateValueModel", "ValueHead"]

# The value model and every module in it (a head's layer, a separate value model's linears), as a regex
# peft's exclude_modules matches against whole module names.
_VALUE_MODEL_MODULES = r"(.*\.)?value_model(\..*)?"


class ValueHead(nn.Module):
    """V(s) = a linear map of the policy's last hidden state (the trunk is the policy's; the value loss does not train it)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)  # start at V = bias = 0: no baseline until it has learned one
        nn.init.zeros_(self.head.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden.float()).squeeze(-1)


class SeparateValueModel(nn.Module):
    """V(s) from its own small transformer (``path``: a model directory) plus a linear head."""

    def __init__(self, path: str):
        super().__init__()
        self.backbone = AutoModel.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        self.value = ValueHead(self.backbone.config.get_text_config().hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.value(self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)


class SAOTrainer(AgentgymTrainer):
    """SAO on agentgym envs (see the module docstring). Arguments as for :class:`~agentgym.trainers.base.AgentgymTrainer`, with an :class:`SAOConfig`."""

    _tag_names = ["trl", "agentgym", "sao"]
    _name = "SAO"
    args: SAOConfig

    def __init__(
        self,
        model,
        args: SAOConfig,
        train_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
    ):
        if isinstance(model, str):
            model = _load_policy(model)
        # Attached before the Trainer wraps the model, so the optimizer, DDP and checkpoints include it.
        model.value_model = (
            ValueHead(model.config.get_text_config().hidden_size)
            if args.value_model == "head"
            else SeparateValueModel(args.value_model)
        )
        self.tasks = default_tasks(args)  # the producer's, whatever the dataset
        if train_dataset is None:
            train_dataset = task_dataset(self.tasks)
        super().__init__(model, args, train_dataset, processing_class, callbacks, optimizers, peft_config)
        learner = plain_model(self.rollout_model)  # with an adapter, the model it wraps holds the value model
        value_model = learner.value_model
        del learner.value_model  # the copies below are policies only
        try:
            self.producer_model = policy_copy(self.rollout_model).eval()
            self.start_model = None
            if args.log_kl_to_start:
                self.start_model = policy_copy(self.rollout_model).eval().requires_grad_(False)
                # a copy of the causal LM being trained
                add_fused_lm_head(cast(PreTrainedModel, self.start_model), temperature=self.temperature)
        finally:
            learner.value_model = value_model
        self.policy = self._make_policy(self.producer_model)
        self.agent = make_agent(self.policy, args)
        self.queue: queue.Queue = queue.Queue(maxsize=args.producer_queue_size)
        self.replay: deque = deque()  # stored but untrained records found at a resume
        self.staleness: Counter[int] = Counter()
        self.dropped_stale = 0
        self.consumed = 0  # records this run's learner took (trained or dropped), across resumes
        self.started = 0  # episodes the producer started; started − consumed is bounded by _admit
        self.learner_wait_s = 0.0  # time the learner spent waiting for trajectories
        self.task_cursor = 0
        self.success_replay = SuccessReplay(args.replay_per_task) if args.success_replay else None
        self.outcomes = TaskOutcomes(args.allocation_decay)  # each task's recent success rate (task_allocation: trace)
        self.synced_step: int | None = None
        self._task_lock = threading.Lock()
        self._publish_lock = threading.Lock()
        self._stop = threading.Event()
        self._producer: threading.Thread | None = None
        self._producer_error: BaseException | None = None

    def _adapter_config(self, args, peft_config):
        adapter = super()._adapter_config(args, peft_config)
        if adapter is None:
            return None
        # The value model trains whole beside the adapter, and checkpoints with it: a module to save,
        # never a LoRA target (an "all-linear" adapter would otherwise reach into it).
        adapter = copy.deepcopy(adapter)
        adapter.modules_to_save = [*(adapter.modules_to_save or []), "value_model"]
        excluded = adapter.exclude_modules
        if isinstance(excluded, str):
            patterns = [excluded]
        else:  # a list matches each name as a module's last name components
            patterns = [rf"(.*\.)?{re.escape(name)}" for name in excluded or []]
        adapter.exclude_modules = "|".join([_VALUE_MODEL_MODULES, *patterns])
        return adapter

    # ------------------------------------------------------------------ producer
    def _next_task(self) -> str:
        with self._task_lock:
            rank, world = self.accelerator.process_index, self.accelerator.num_processes
            mine = self.tasks[rank::world] or self.tasks
            if self.args.task_allocation == "trace":  # by p(1−p) of each task's recent outcomes (TRACE)
                weights = task_sampling_weights([self.outcomes.rate(t) for t in mine], self.args.allocation_floor)
                draw = random.Random(self.args.seed * 1_000_003 + self.task_cursor * 101 + rank)  # resumable
                self.task_cursor += 1
                return draw.choices(mine, weights)[0]
            epoch, index = divmod(self.task_cursor, len(mine))
            order = list(mine)
            random.Random(self.args.seed * 1_000_003 + epoch * 101 + rank).shuffle(order)
            self.task_cursor += 1
            return order[index]

    def _admit(self) -> bool:
        """Whether the producer may start another episode: at most ``max_staleness`` batches (one, at 0) ahead of the learner.

        An episode started now is then taken within ``max_staleness`` learner steps, so a producer
        faster than its learner waits instead of filling the queue with samples that would be
        trained at the staleness limit or dropped (AReaL's staleness-bounded admission).
        """
        with self._task_lock:
            ahead = max(1, self.args.max_staleness) * self.args.per_device_train_batch_size
            if self.started - self.consumed >= ahead:
                return False
            self.started += 1
            return True

    def _publish(self, record) -> None:
        # Store order = queue order, so the store position counts exactly the records consumed.
        with self._publish_lock:
            self.store.append(record)
            while not self._stop.is_set():
                try:
                    self.queue.put(record, timeout=0.2)
                    return
                except queue.Full:
                    continue

    async def _produce(self) -> None:
        runner = make_runner(self.agent, self.args, store=None, env_factory=self.env_factory)

        async def worker() -> None:
            while not self._stop.is_set():
                if not self._admit():
                    await asyncio.sleep(0.02)
                    continue
                result = await runner.run([EpisodeRequest(self._next_task())])
                for record in result.records:
                    await asyncio.to_thread(self._publish, record)

        try:
            await asyncio.gather(*(worker() for _ in range(self.args.rollout_concurrency)))
        finally:  # the workers' envs, kept open between their episodes
            await runner.aclose()

    def _run_producer(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:  # noqa: BLE001 - reported to the learner, which would otherwise wait forever
            self._producer_error = exc

    def _start_producer(self) -> None:
        if self._producer is None:
            self._producer = threading.Thread(target=self._run_producer, name="sao-producer", daemon=True)
            self._producer.start()

    def _stop_producer(self) -> None:
        self._stop.set()
        if self._producer is not None:
            self._producer.join(timeout=60)

    def _close_rollouts(self) -> None:
        self._stop_producer()  # before the replicas and env workers it samples from go
        super()._close_rollouts()

    def _sync_producer(self) -> None:
        step = self.state.global_step
        if self.synced_step is not None and step - self.synced_step < self.args.sync_every:
            return
        self.policy.update_weights(rollout_weights(self.rollout_model), version=step)
        self.synced_step = step

    def _take(self, count: int) -> tuple[list[Trajectory], list[Trajectory], list[int]]:
        """``count`` fresh-enough trajectories (plus every record consumed on the way, and their staleness)."""
        step = self.state.global_step
        fresh: list[Trajectory] = []
        seen: list[Trajectory] = []
        staleness: list[int] = []
        while len(fresh) < count:
            if self.replay:
                record = self.replay.popleft()
            else:
                waiting = time.perf_counter()
                try:
                    record = self.queue.get(timeout=1.0)
                except queue.Empty:
                    if self._producer_error is not None:
                        raise RuntimeError("the SAO producer failed") from self._producer_error
                    continue
                finally:
                    self.learner_wait_s += time.perf_counter() - waiting
            self.store_position += 1
            self.consumed += 1
            self.env_steps += record.num_env_steps
            self.generated_tokens += record.num_generated_tokens
            seen.append(record)
            versions = [t.policy_version for t in record.turns]
            # A replayed record can carry a version newer than the restored weights (its weights were
            # lost with the killed run); its importance ratio is still taken against its own logprobs.
            age = max(0, step - min(versions)) if versions else 0
            if age > self.args.max_staleness:
                self.dropped_stale += 1
                continue
            if record.error is None and record.turns:
                with self._task_lock:  # the producer reads the rates
                    self.outcomes.update(record.task_id, record.success)
                fresh.append(record)
                staleness.append(age)
                self.staleness[age] += 1
        return fresh, seen, staleness

    # ------------------------------------------------------------------ values and advantages
    def _value_model(self, model=None):
        value_model = self._policy_module(model).value_model
        if hasattr(value_model, "modules_to_save"):  # an adapter's run trains a copy of it (peft's wrapper)
            return value_model.modules_to_save[value_model.active_adapter]
        return value_model

    def _trunk(self, model=None) -> nn.Module:
        """The policy's transformer without its LM head (what a value head reads), an adapter's layers in it."""
        return cast(nn.Module, self._policy_module(model).base_model)

    def _policy_module(self, model=None):
        """The policy module itself: unwrapped from DDP and the like, and from an adapter's peft model."""
        return plain_model(self.accelerator.unwrap_model(model if model is not None else self.model))

    def _values(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, images: dict | None = None
    ) -> torch.Tensor:
        """V at every position, (B, L), without gradients (``images``: a VLM's image inputs from the batch)."""
        value_model = self._value_model()
        pixels = {k: v for k, v in (images or {}).items() if k != "num_images"}  # the trunk takes them flat
        with torch.no_grad():
            if isinstance(value_model, ValueHead):
                hidden = self._trunk()(input_ids=input_ids, attention_mask=attention_mask, **pixels).last_hidden_state
                return value_model(hidden)
            return value_model(input_ids, attention_mask)

    def _advantages(self, trajectories: list[Trajectory]) -> tuple[dict, dict[str, float]]:
        """The batch with per-turn advantages from the value model, and the value targets at each turn's state."""
        device = self.accelerator.device
        pad = self._tokenizer.pad_token_id
        layout = [trajectory_rows(t, [0.0] * len(t.turns)) for t in trajectories]
        flat = [row for rows in layout for row in rows]
        draft = collate(flat, pad, device, self.vision)
        width = draft["prompt_ids"].size(1)
        values = self._values(
            torch.cat([draft["prompt_ids"], draft["completion_ids"]], 1),
            torch.cat([draft["prompt_mask"], draft["completion_mask"]], 1),
            image_inputs(draft),
        ).cpu()
        rows, positions, targets, predictions = [], [], [], []
        b = 0
        for trajectory, traj_rows in zip(trajectories, layout):
            turn_positions = [[width + s - 1 for s in row.turn_starts] for row in traj_rows]
            turn_values = [values[b + i, p].item() for i, ps in enumerate(turn_positions) for p in ps]
            rewards = [r for row in traj_rows for r in row.turn_rewards]
            if self.args.value_baseline == "gae":
                advantages, returns = turn_gae(rewards, turn_values, self.args.gamma, self.args.gae_lambda)
                trained = [True] * len(rewards)
            else:
                total = math.fsum(rewards)
                advantages = [total - turn_values[0]] * len(rewards)
                returns, trained = [total] * len(rewards), [i == 0 for i in range(len(rewards))]
            rows += trajectory_rows(trajectory, advantages)
            it = iter(zip(returns, trained, turn_values))
            for ps in turn_positions:
                row_targets = [next(it) for _ in ps]
                positions.append(ps)
                targets.append([(ret, keep) for ret, keep, _ in row_targets])
                predictions += [(v, ret) for ret, keep, v in row_targets if keep]
            b += len(traj_rows)
        padded = len(rows)
        rows = pad_rows(rows, self.args.steps_per_generation if self.model.training else 1)
        positions += [[0]] * (len(rows) - padded)  # loss-free padding rows train no value either
        targets += [[(0.0, False)]] * (len(rows) - padded)
        batch = collate(rows, pad, device, self.vision)
        k = max(len(p) for p in positions)
        batch["value_positions"] = torch.tensor([p + [0] * (k - len(p)) for p in positions], device=device)
        batch["value_targets"] = torch.tensor(
            [[r for r, _ in t] + [0.0] * (k - len(t)) for t in targets], dtype=torch.float32, device=device
        )
        batch["value_mask"] = torch.tensor(
            [[float(keep) for _, keep in t] + [0.0] * (k - len(t)) for t in targets], device=device
        )
        stats = {
            "value/explained_variance": explained_variance([v for v, _ in predictions], [r for _, r in predictions]),
            "value/mean": sum(v for v, _ in predictions) / max(1, len(predictions)),
        }
        return batch, stats

    def create_optimizer(self, model=None):
        optimizer = super().create_optimizer(model)
        if self.args.value_learning_rate is not None and not any(
            g.get("name") == "value" for g in optimizer.param_groups
        ):
            # The value model's parameters move from the Trainer's groups into a group of their own.
            own = [p for p in self._value_model(model).parameters() if p.requires_grad]
            ids = {id(p) for p in own}
            for group in optimizer.param_groups:
                group["params"] = [p for p in group["params"] if id(p) not in ids]
            optimizer.add_param_group(
                {"params": own, "lr": self.args.value_learning_rate, "weight_decay": 0.0, "name": "value"}
            )
        return optimizer

    # ------------------------------------------------------------------ TRL's hooks
    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        self._sync_producer()
        self._start_producer()
        waited = self.learner_wait_s
        fresh, seen, staleness = self._take(len(inputs))
        replayed: list[Trajectory] = []
        if self.success_replay is not None:  # RLEP: old successes, weighted by the decoupled objective
            draw = random.Random(self.args.seed * 7_919 + self.state.global_step)
            replayed = self.success_replay.sample(self.args.replay_per_step, draw)
            for record in fresh:
                self.success_replay.add(record)
        batch, stats = self._advantages(fresh + replayed)
        if self.args.off_policy_correction == "decoupled":
            batch["proximal_per_token_logps"] = self._proximal_logps(batch)
        mask = batch["completion_mask"] * batch["tool_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        metrics = {
            **stats,
            "staleness/mean": sum(staleness) / len(staleness),
            "staleness/max": float(max(staleness)),
            "staleness/dropped_total": float(self.dropped_stale),
            "producer/version": float(self.policy.version),
            "producer/queue": float(self.queue.qsize()),
            "producer/ahead": float(self.started - self.consumed),
            "learner/wait_s": self.learner_wait_s - waited,
            "producer/consumed_total": float(self.consumed),
            "rollout/env_steps_total": float(self.env_steps),
            "rollout/generated_tokens_total": float(self.generated_tokens),
        }
        if self.success_replay is not None:
            ages = [replay_age(t, self.state.global_step) for t in replayed]
            metrics["replay/mixed"] = float(len(replayed))
            metrics["replay/age_mean"] = sum(ages) / len(ages) if ages else math.nan
            metrics["replay/size"] = float(len(self.success_replay))
        metrics.update(
            {f"staleness/hist_{age}": float(self.staleness[age]) for age in range(self.args.max_staleness + 1)}
        )
        rollout = record_metrics(seen)
        metrics["reward"] = rollout["rollout/reward"]
        if self.args.report_rollout_metrics:
            metrics.update(rollout)
        self._log_metrics(mode, metrics)
        return batch

    def _compute_loss(self, model, inputs):
        mode = "train" if self.model.training else "eval"
        input_ids, attention_mask, keep = sequences(inputs)
        images = image_inputs(inputs)  # a VLM's pixels: the logprobs are recomputed with what the policy saw
        value_model = self._value_model(model)
        captured: dict[str, torch.Tensor] = {}
        hook = None
        if isinstance(value_model, ValueHead):  # read the trunk's output from the policy's own forward
            hook = self._trunk(model).register_forward_hook(
                lambda module, args, output: captured.update(hidden=output.last_hidden_state)
            )
        try:
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, keep, compute_entropy=True, **images
            )
        finally:
            if hook is not None:
                hook.remove()
        # The head reads the shared trunk but does not train it: with the value loss moving the trunk,
        # the KeyChain policy collapsed within a few hundred updates (success 0.53 → 0.08, KL 0.7).
        values = (
            value_model(captured["hidden"].detach()) if hook is not None else value_model(input_ids, attention_mask)
        )
        mask = (inputs["completion_mask"] * inputs["tool_mask"]).float()
        weights = None
        if "proximal_per_token_logps" in inputs:
            per_token, kept, weights = decoupled_policy_loss(
                logps,
                inputs["proximal_per_token_logps"],
                inputs["sampling_per_token_logps"],
                inputs["advantages"],
                mask,
                self.args.epsilon,
                self.args.epsilon_high,
                self.args.importance_weight_cap,
            )
        else:
            per_token, kept = strict_clip_policy_loss(
                logps,
                inputs["sampling_per_token_logps"],
                inputs["advantages"],
                mask,
                self.args.epsilon,
                self.args.epsilon_high,
            )
        tokens = mask.sum().clamp(min=1.0)
        policy_loss = per_token.sum() / tokens
        predicted = values.gather(1, inputs["value_positions"])
        value_mask = inputs["value_mask"]
        value_loss = (((predicted - inputs["value_targets"]) ** 2) * value_mask).sum() / value_mask.sum().clamp(min=1.0)
        loss = policy_loss + self.args.value_loss_coef * value_loss
        metrics = {
            "policy_loss": policy_loss.item(),
            "value/loss": value_loss.item(),
            "clip/strict_frac": 1.0 - (kept.sum() / tokens).item(),
            "entropy": ((entropies * mask).sum() / tokens).item(),
        }
        if weights is not None:
            metrics["off_policy/weight_mean"] = ((weights * mask).sum() / tokens).item()
            cap = self.args.importance_weight_cap
            if cap is not None:
                metrics["off_policy/capped_frac"] = (((weights >= cap).float() * mask).sum() / tokens).item()
        if self.start_model is not None:
            with torch.no_grad():
                start = self._get_per_token_logps_and_entropies(
                    self.start_model, input_ids, attention_mask, keep, **images
                )[0]
            # k3 estimator of KL(π ‖ π_start) on the trained tokens
            delta = start - logps.detach()
            metrics["kl_to_start"] = ((torch.exp(delta) - delta - 1) * mask).sum().item() / tokens.item()
        self._log_metrics(mode, metrics)
        return loss / (self.current_gradient_accumulation_steps if mode == "train" else 1.0)

    # ------------------------------------------------------------------ checkpoints
    def _rollout_state(self) -> dict:
        return {
            **super()._rollout_state(),
            "task_cursor": self.task_cursor,
            "dropped_stale": self.dropped_stale,
            "consumed": self.consumed,
            "staleness": {str(k): v for k, v in self.staleness.items()},
            "task_outcomes": self.outcomes.state(),
        }

    def _restore_rollout_state(self, state: dict) -> None:
        super()._restore_rollout_state(state)
        self.task_cursor = state["task_cursor"]
        self.dropped_stale = state["dropped_stale"]
        self.consumed = state["consumed"]
        self.staleness = Counter({int(k): v for k, v in state["staleness"].items()})
        if "task_outcomes" in state:
            self.outcomes.load(state["task_outcomes"])
        # Produced before the kill but never trained on: they go first, nothing stored is lost.
        self.replay = deque(record for i, record in enumerate(self.store) if i >= self.store_position)
        if self.success_replay is not None:  # the successes of the records trained before the checkpoint
            self.success_replay.add_records(r for i, r in enumerate(self.store) if i < self.store_position)
        self.started = self.consumed + len(self.replay)
        self._metrics["train"]["resumed_records"].append(float(len(self.replay)))


def _load_policy(path: str) -> PreTrainedModel:
    """The policy at ``path`` in float32: a causal LM, or a vision-language model (its config has a ``vision_config``)."""
    if hasattr(AutoConfig.from_pretrained(path), "vision_config"):
        return AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
