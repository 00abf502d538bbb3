"""TreeGRPOTrainer: TRL's GRPOTrainer fed by agentgym rollouts — multi-turn, token-exact, env tokens masked, per-turn tree advantages.

TRL's hook ``_generate_and_score_completions`` is replaced: for each task (one dataset row) the
rollout engine runs, on this process, either a turn-level tree (``tree=True``:
:class:`~agentgym.rollout.tree.TreeRollout` with ``num_generations`` roots and the configured
strategy) or ``num_generations`` linear episodes (``tree=False``), through the
:class:`~agentgym.rollout.runner.Runner` (bounded concurrency, retries, every record appended to
the trajectory store). As TRL generates a whole generation batch at once, a step's episodes
(trees) are all in flight together and their first turns decode in one batch (local backend;
``rollout_batch_size`` caps the batch); the runner's envs are kept between steps. The policy is the model being trained, wrapped in-process by
:class:`~agentgym.rollout.hf_policy.HFPolicy` (its version = the optimizer steps taken).

Every root-to-leaf path becomes a training sequence in TRL's layout
(:mod:`agentgym.trainers.rollouts`): env tokens get ``tool_mask`` 0, and each turn's tokens carry
that turn's advantage, a (B, T) tensor. Trees use the per-turn estimator of
:mod:`agentgym.rollout.tree_values` (hierarchical node values, leave-one-out sibling baseline);
a node shared by several paths gets loss in exactly one of them, so a shared prefix is not
counted once per leaf. Linear episodes use the group baseline. TRL's ``_compute_loss`` is kept as
it is, so every loss type and clipping option of GRPOConfig applies unchanged.

Options from issue 34 (docs: Training → Branching that pays in training): MC-GRPO's median
pivot (``median_pivot``), TRACE's split of a step's budget over tasks (``task_allocation``,
:mod:`agentgym.trainers.allocation`), reflect-then-retry with Pivotal Credit and Positive
Amplification (``reflect_retry``, :mod:`agentgym.rollout.reflect`) and success replay
(``success_replay``, :mod:`agentgym.trainers.replay`) and APRIL's partial rollouts
(``partial_rollouts``, :mod:`agentgym.trainers.partial`); retries, replayed successes and
tokens sampled by an older policy (a resumed episode's early turns) are off-policy rows whose
advantages carry the decoupled objective's importance weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from dataclasses import replace
from typing import Any, cast

import torch
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import use_adapter

from agentgym.rollout.reflect import ReflectConfig, ReflectRetry
from agentgym.rollout.runner import EpisodeRequest
from agentgym.rollout.trajectory import RolloutTree, Trajectory
from agentgym.rollout.tree import SuccessPredictor, TreeConfig, TreeRollout
from agentgym.rollout.tree_values import node_values, turn_advantages, usable_returns
from agentgym.trainers.advantages import (
    amplify_positive,
    anchor_step_advantages,
    group_advantages,
    importance_weights,
    median_pivots,
    pivotal_trainable,
    turn_gae,
)
from agentgym.trainers.allocation import TaskOutcomes, allocate_budget
from agentgym.trainers.base import AgentgymTrainer
from agentgym.trainers.lora import is_adapted
from agentgym.trainers.partial import PartialGroups, episodes_to_complete, extra_groups
from agentgym.trainers.replay import SuccessReplay, prefix_fork_turns, replay_age
from agentgym.trainers.rollouts import (
    Row,
    collate,
    image_inputs,
    make_agent,
    make_runner,
    pad_rows,
    record_metrics,
    run_requests,
    sequences,
    trajectory_rows,
)
from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

__all__ = ["TreeGRPOTrainer", "tree_training_paths"]


class TreeGRPOTrainer(AgentgymTrainer):
    """GRPO on agentgym envs with turn-level tree rollouts (see the module docstring).

    Arguments as for :class:`~agentgym.trainers.base.AgentgymTrainer`, with a :class:`TreeGRPOConfig`.
    """

    _tag_names = ["trl", "grpo", "agentgym", "tree-grpo"]
    _name = "TreeGRPO"
    args: TreeGRPOConfig

    def __init__(
        self,
        model,
        args: TreeGRPOConfig,
        train_dataset=None,
        processing_class=None,
        callbacks=None,
        optimizers=(None, None),
        peft_config=None,
    ):
        super().__init__(model, args, train_dataset, processing_class, callbacks, optimizers, peft_config)
        self.policy = self._make_policy(self.rollout_model)
        self.agent = make_agent(self.policy, args)
        self.predictor = SuccessPredictor() if args.tree and args.tree_strategy == "contrast" else None
        self.tree_config = (
            TreeConfig(
                strategy=args.tree_strategy,
                roots=args.num_generations,
                max_leaves=args.tree_max_leaves,
                max_env_steps=args.tree_max_env_steps,
                branch_every=args.tree_branch_every,
                branches=args.tree_branches,
                max_resample=args.tree_max_resample,
                concurrency=max(args.rollout_concurrency, args.num_generations),  # every root's first turn at once
            )
            if args.tree
            else None
        )
        self.outcomes = TaskOutcomes(args.allocation_decay)  # each task's recent success rate (task_allocation: trace)
        self.leaf_budgets: dict[str, int] = {}  # request group -> its tree's leaves (task_allocation: trace)
        self.allocation: list[int] = []
        self.reflect = self._reflect_retry() if args.reflect_retry else None
        self.success_replay = SuccessReplay(args.replay_per_task) if args.success_replay else None
        self.partial = PartialGroups() if args.partial_rollouts else None  # APRIL: groups and episodes carried over
        self.partial_stats: dict[str, float] = {}
        self.branch_plan: dict[tuple[str, int], tuple[Trajectory, int]] = {}  # (group, repeat) -> (success, fork turn)
        self.branch_stats: dict[str, float] = {}
        self.branch_runner = (
            make_runner(self.agent, args, self.store, job=self._replay_branch_job, env_factory=self.env_factory)
            if args.replay_branches
            else None
        )
        self.runner = make_runner(
            self.agent,
            args,
            self.store,
            job=self._tree_job if args.tree else (self.reflect.job if self.reflect is not None else None),
            env_factory=self.env_factory,
            concurrency=self._step_concurrency(),
        )

    def _tasks_per_generation(self) -> int:
        """Tasks (dataset rows) one rollout call grows on this process: TRL's per-process generation batch."""
        return self.args.per_device_train_batch_size * self.args.steps_per_generation

    def _group_size(self) -> int:
        """Linear episodes per task: ``num_generations``, plus MC-GRPO's pivot with ``median_pivot``."""
        return self.args.num_generations + int(self.args.median_pivot)

    def _group_requests(self) -> int:
        return self._tasks_per_generation() * self._group_size()

    def _step_concurrency(self) -> int:
        """Episodes (trees) in flight: all of a step's, as TRL generates its batch at once; a cluster's env slots cap it.

        With partial rollouts, the over-provisioned groups too (they run beside the step's own).
        """
        if self.args.rollout_backend == "ray":
            return self.args.rollout_concurrency
        groups = self._tasks_per_generation()
        if self.args.partial_rollouts:
            groups += extra_groups(groups, self.args.partial_over_provision, 0)
        jobs = groups * (1 if self.args.tree else self._group_size())
        return max(self.args.rollout_concurrency, jobs)

    # ------------------------------------------------------------------ rollouts
    def _tree_job(self, agent, env, request: EpisodeRequest):
        config = self.tree_config
        if request.group in self.leaf_budgets:  # this task's share of the step's leaves (TRACE)
            config = replace(config, max_leaves=self.leaf_budgets[request.group])
        return TreeRollout(agent, config, self.predictor).run(env, request.task_id, request.seed)

    def _reflect_retry(self) -> ReflectRetry:
        """The reflect-then-retry job: the policy (or ``reflect_reviewer``) diagnoses, the shared predictor may locate."""
        args = self.args
        reviewer = None
        if args.reflect_reviewer is not None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from agentgym.rollout.hf_policy import HFPolicy

            model = AutoModelForCausalLM.from_pretrained(args.reflect_reviewer, local_files_only=True).eval()
            tokenizer = AutoTokenizer.from_pretrained(args.reflect_reviewer, local_files_only=True)
            reviewer = HFPolicy.from_model(model, tokenizer, name="reviewer", seed=args.seed)
        if args.reflect_locate == "predictor" and self.predictor is None:
            self.predictor = SuccessPredictor()
        config = ReflectConfig(
            locate=args.reflect_locate, max_tokens=args.reflect_max_tokens, diagnose=args.reflect_diagnose
        )
        return ReflectRetry(self.agent, config, reviewer, self.predictor)

    def _allocate(self, task_ids: list[str]) -> list[int]:
        """Per task, its episodes (linear) or tree leaves this step: equal shares, or TRACE's split of their sum."""
        args = self.args
        share = (args.tree_max_leaves or 1) if args.tree else self._group_size()  # trace checks it is set
        if args.task_allocation == "uniform":
            return [share] * len(task_ids)
        minimum = args.num_generations if args.tree else 2  # a tree's roots; a group baseline's two episodes
        return allocate_budget([self.outcomes.rate(t) for t in task_ids], share * len(task_ids), minimum)

    def _rollouts(self, task_ids: list[str]) -> list:
        step = self.state.global_step
        extra: list[str] = []
        if self.partial is not None:  # APRIL: extra groups of dataset tasks, fewer while carried ones are open
            count = extra_groups(len(task_ids), self.args.partial_over_provision, len(self.partial.expected))
            pool = list(self.train_dataset["prompt"])
            extra = random.Random(self.args.seed * 1_000_003 + step).choices(pool, k=count) if count else []
        self.allocation = self._allocate(task_ids + extra)
        if self.args.tree:
            requests = [EpisodeRequest(t, group=f"{step}:{i}") for i, t in enumerate(task_ids)]
            self.leaf_budgets = (
                {r.group: n for r, n in zip(requests, self.allocation) if r.group is not None}
                if self.args.task_allocation == "trace"
                else {}
            )
        else:
            labels = [f"{step}:{i}" for i in range(len(task_ids))] + [f"{step}:x{i}" for i in range(len(extra))]
            requests = [
                EpisodeRequest(t, repeat=j, group=label)
                for label, t, n in zip(labels, task_ids + extra, self.allocation)
                for j in range(n)
            ]
        self._sync_rollout_weights(step)  # on-policy: the rollouts sample from this step's weights
        was_training = self.rollout_model.training
        self.rollout_model.eval()
        started = time.perf_counter()
        try:
            # Gathers ZeRO-3 shards for the duration of the rollouts (a no-op for DDP and one process).
            with unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                # TrainingArguments.__post_init__ parses a JSON-string value into a dict.
                gradient_checkpointing_kwargs=cast(dict[str, Any] | None, self.args.gradient_checkpointing_kwargs),
            ):
                if self.partial is not None:
                    finished, records = self._partial_rollouts(requests, len(task_ids))
                else:
                    records = finished = run_requests(self.runner, requests)
                if self.branch_runner is not None:
                    branches = self._replay_branch_rollouts(records)
                    records, finished = records + branches, finished + branches
        finally:
            self.rollout_model.train(was_training)
        self.rollout_seconds = time.perf_counter() - started  # the learner is idle meanwhile (synchronous pipeline)
        self.store_position += len(finished)
        self.env_steps += sum(r.num_env_steps for r in finished)
        self.generated_tokens += sum(r.num_generated_tokens for r in finished)
        for record in finished:
            if record.metadata.get("replay_branch"):  # it started from a success's prefix: not the task's rate
                continue
            for path in [record] if isinstance(record, Trajectory) else record.paths():
                if path.error is None:
                    self.outcomes.update(record.task_id, path.success)
        return records

    def _replay_branch_rollouts(self, records: list) -> list[Trajectory]:
        """Episodes branching from replayed successes' prefixes, ``replay_branches`` for each group whose episodes all failed."""
        replay = self.success_replay
        outcomes: dict[str, list[bool]] = {}
        tasks: dict[str, str] = {}
        for path in _reflected_paths(records):
            if path.error is None and path.turns:
                outcomes.setdefault(path.metadata["group"], []).append(path.success)
                tasks[path.metadata["group"]] = path.task_id
        self.branch_plan = {}
        requests = []
        for group, successes in outcomes.items():
            if any(successes) or (success := replay.newest(tasks[group])) is None:
                continue
            for j, fork in enumerate(prefix_fork_turns(len(success.turns), self.args.replay_branches)):
                self.branch_plan[(group, j)] = (success, fork)
                requests.append(EpisodeRequest(success.task_id, repeat=j, group=group))
        branches = cast(list[Trajectory], run_requests(cast(Any, self.branch_runner), requests) if requests else [])
        usable = [b for b in branches if b.error is None]
        self.branch_stats = {
            "replay/branches": float(len(usable)),
            "replay/branch_success_rate": sum(b.success for b in usable) / len(usable) if usable else math.nan,
        }
        return branches

    async def _replay_branch_job(self, agent, env, request: EpisodeRequest) -> Trajectory:
        """Replay a success's first turns on ``env`` (checked against the record), then let the policy play on."""
        success, fork = self.branch_plan[(request.group, request.repeat)]
        episode = await agent.replay(env, success, fork)
        while not episode.done:
            await agent.step(episode)
        trajectory = episode.trajectory()
        trajectory.metadata.update(fork_turn=fork, replay_branch=True)
        return trajectory

    def _partial_rollouts(self, requests: list[EpisodeRequest], needed: int) -> tuple[list, list]:
        """APRIL: run the carried episodes and ``requests`` until ``needed`` groups are complete; carry the rest.

        Returns the records finished in this step and the records of the complete groups (to train).
        Each runner call's target is the fewest finished episodes that could complete the groups still
        needed, so the step stops as soon as it can.
        """
        partial = self.partial
        items = partial.open(requests)
        carried = sum(item.episode is not None for item in items)
        finished: list = []
        while len(partial.complete()) < needed and items:
            target = episodes_to_complete(partial.remaining(), needed - len(partial.complete()))
            result = asyncio.run(self.runner.resume(items, target=min(target, len(items))))
            finished += result.records
            partial.add(result.records, result.pending)
            items = result.pending
        records = partial.take(partial.complete())
        this_step = {id(r) for r in finished}
        self.partial_stats = {
            "partial/resumed": float(carried),
            "partial/carried": float(sum(item.episode is not None for item in partial.pending)),
            "partial/open_groups": float(len(partial.expected)),
            "partial/late_records": float(sum(id(r) not in this_step for r in records)),
        }
        return finished, records

    def _close_rollouts(self) -> None:
        if self.partial is not None and self.partial.pending:  # their envs stay open while they are carried
            asyncio.run(self.runner.discard(self.partial.pending))
            self.partial.pending = []
        if self.branch_runner is not None:
            asyncio.run(self.branch_runner.aclose())
        super()._close_rollouts()

    def _rows(self, records: list) -> tuple[list[Row], dict[str, float]]:
        """Training rows and advantage statistics; groups are trees (tree mode) or a task's episodes."""
        groups: list[tuple[list[Trajectory], list[list[float]], list[list[bool]], list[float]]] = []
        pivot_count = 0
        stats_replay: dict[str, float] = {}
        if self.args.tree:
            for tree in records:
                groups.append(tree_training_paths(tree, self.args.advantage_baseline))
        else:
            by_group: dict[str, list[Trajectory]] = {}
            for trajectory in _reflected_paths(records):
                if trajectory.error is None and trajectory.turns:
                    by_group.setdefault(trajectory.metadata["group"], []).append(trajectory)
            if self.success_replay is not None:
                stats_replay = self._mix_replay(by_group)
            members = [t for ts in by_group.values() for t in ts]
            if members:
                rewards, labels = [t.reward for t in members], [t.metadata["group"] for t in members]
                advantages = group_advantages(rewards, labels, self.args.advantage_baseline, self.args.advantage_scale)
                pivots = median_pivots(rewards, labels) if self.args.median_pivot else [False] * len(members)
                pivot_count = sum(pivots)
                it = iter(zip(advantages, pivots))
                for trajectories in by_group.values():
                    base, pivot = zip(*(next(it) for _ in trajectories))
                    adv = amplify_positive(base, [t.success for t in trajectories], self.args.positive_weight)
                    steps = self._step_advantages(trajectories)
                    groups.append(
                        (
                            trajectories,
                            [[a + s for s in step] for a, step in zip(adv, steps)],
                            # the pivot is the baseline: no loss on it, nor in the loss's token count
                            [self._trainable(t, p) for t, p in zip(trajectories, pivot)],
                            [t.reward for t in trajectories],
                        )
                    )
        if self.args.tree and self.args.advantage_scale == "batch":
            outcomes = [r for g in groups for r in g[3]]
            std = _std(outcomes)
            groups = [(ts, [[a / (std + 1e-4) for a in adv] for adv in advs], tr, out) for ts, advs, tr, out in groups]
        informative = [g for g in groups if len(set(g[3])) > 1]
        kept = informative if self.args.drop_zero_variance_groups and informative else groups
        rows: list[Row] = []
        self.off_policy_rows = []  # rows of retries, replayed successes and older policies' turns (weighted in the batch)
        version = self.policy.version
        for trajectories, advs, trainable, _ in kept:
            for t, adv, train in zip(trajectories, advs, trainable):
                if any(train):
                    made = trajectory_rows(t, adv, train)
                    rows += made
                    # an older policy's trained turns: a partial rollout's carried ones (a branch's prefix gets no loss)
                    stale = any(turn.policy_version < version for turn, tr in zip(t.turns, train) if tr)
                    off_policy = bool(t.metadata.get("off_policy_retry") or t.metadata.get("replayed") or stale)
                    self.off_policy_rows += [off_policy] * len(made)
        if not rows:
            raise RuntimeError("no usable rollouts in this batch: every episode failed (see the trajectory store)")
        token_advantages = [a for row in rows for a, m in zip(row.advantages, row.loss_mask) if m]
        stats = {
            "groups/zero_variance_frac": 1.0 - len(informative) / len(groups) if groups else math.nan,
            "groups/kept": float(len(kept)),
            "groups/median_pivots": float(pivot_count),
            **stats_replay,
            "advantage/abs_mean": sum(abs(a) for a in token_advantages) / max(1, len(token_advantages)),
        }
        return rows, stats

    def _mix_replay(self, by_group: dict[str, list[Trajectory]]) -> dict[str, float]:
        """Add a task's newest replayed success to each group whose episodes all failed; then keep this step's successes."""
        replay = self.success_replay
        version = self.state.global_step
        ages = []
        for group, trajectories in by_group.items():
            if any(t.success for t in trajectories) or (success := replay.newest(trajectories[0].task_id)) is None:
                continue
            metadata = {**success.metadata, "group": group, "replayed": True}
            metadata.pop("fork_turn", None)  # a replayed retry is trained whole
            trajectories.append(replace(success, metadata=metadata))
            ages.append(replay_age(success, version))
        for trajectories in by_group.values():
            for trajectory in trajectories:
                if not trajectory.metadata.get("replayed"):
                    replay.add(trajectory)
        return {
            "replay/mixed": float(len(ages)),
            "replay/age_mean": sum(ages) / len(ages) if ages else math.nan,
            "replay/size": float(len(replay)),
        }

    def _trainable(self, trajectory: Trajectory, pivot: bool) -> list[bool]:
        """Which turns get loss: none of MC-GRPO's pivot; with Pivotal Credit, a reflected pair's turns from the fork on;
        a branch from a replayed success's prefix, its own turns (from the fork on)."""
        if pivot:
            return [False] * len(trajectory.turns)
        fork = trajectory.metadata.get("fork_turn")
        if fork is not None and (self.args.pivotal_credit or trajectory.metadata.get("replay_branch")):
            return pivotal_trainable(len(trajectory.turns), fork)
        return [True] * len(trajectory.turns)

    def _step_advantages(self, trajectories: list[Trajectory]) -> list[list[float]]:
        """Per turn, ω × GiGPO's anchor-state step advantage within one task's episodes (zeros when ω is 0)."""
        weight = self.args.step_advantage_weight
        if not weight:
            return [[0.0] * len(t.turns) for t in trajectories]
        returns, anchors = [], []
        for trajectory in trajectories:
            rewards = [turn.reward for turn in trajectory.turns]
            returns.append(turn_gae(rewards, [0.0] * len(rewards), gamma=self.args.step_gamma, lam=1.0)[1])
            # The state a turn acts from: the env's previous answer (the first turn's: the episode's first observation).
            anchors.append([trajectory.initial_observation] + [turn.observation for turn in trajectory.turns[:-1]])
        flat = anchor_step_advantages([r for rs in returns for r in rs], [a for a_s in anchors for a in a_s])
        it = iter(flat)
        return [[weight * next(it) for _ in t.turns] for t in trajectories]

    # ------------------------------------------------------------------ TRL's hook
    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        records = self._rollouts([x["prompt"] for x in inputs])
        rows, stats = self._rows(records)
        rows = pad_rows(rows, self.args.steps_per_generation if mode == "train" else 1)
        batch = collate(rows, self._tokenizer.pad_token_id, self.accelerator.device, self.vision)
        if any(self.off_policy_rows):
            stats.update(self._weigh_off_policy(batch))
        if self.reflect is not None:
            trees = [r for r in records if isinstance(r, RolloutTree) and "reflection" in r.metadata]
            retried = [t.leaf_success.get(t.metadata["reflection"]["retry_leaf"], False) for t in trees]
            stats["reflect/retries"] = float(len(trees))
            stats["reflect/retry_success_rate"] = sum(retried) / len(retried) if retried else math.nan
        loss_mask = batch["completion_mask"] * batch["tool_mask"]
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        self._add_reference_logps(batch, mode)
        rollout = record_metrics(records)
        metrics = {**stats, **self.partial_stats, **self.branch_stats, "reward": rollout["rollout/reward"]}
        if self.args.report_rollout_metrics:
            metrics.update(
                rollout,
                **{
                    "rollout/env_steps_total": float(self.env_steps),
                    "rollout/generated_tokens_total": float(self.generated_tokens),
                    "rollout/time_s": self.rollout_seconds,
                    "policy_version": float(self.policy.version),
                    "allocation/max_share": max(self.allocation) / sum(self.allocation),
                },
            )
        self._log_metrics(mode, metrics)
        return batch

    def _weigh_off_policy(self, batch: dict) -> dict[str, float]:
        """Weight the off-policy rows' tokens (retries, replayed successes) as SAO's decoupled objective does.

        A retry was sampled with the reflection in its context and is trained without it; a
        replayed success was sampled by an older policy. Their sampling logprobs are the behaviour
        policy. TRL's clipped ratio is taken around the learner's weights when the batch was taken
        (the proximal policy, the same as TRL's old policy here); each of their tokens' advantage is
        multiplied by ``w = min(importance_weight_cap, π_proximal / π_behaviour)``, π_proximal on the
        context the row is trained in, so the gradient estimates the current policy's objective.
        """
        flags = torch.tensor(self.off_policy_rows + [False] * (batch["advantages"].size(0) - len(self.off_policy_rows)))
        flags = flags.to(batch["advantages"].device)[:, None]
        proximal = self._proximal_logps(batch)
        weights = importance_weights(proximal, batch["sampling_per_token_logps"], self.args.importance_weight_cap)
        weights = torch.where(flags, weights, torch.ones_like(weights))
        batch["advantages"] = batch["advantages"] * weights
        mask = (batch["completion_mask"] * batch["tool_mask"]).bool() & flags
        return {"off_policy/weight_mean": weights[mask].mean().item() if mask.any() else math.nan}

    def _add_reference_logps(self, batch: dict, mode: str) -> None:
        """Add ``old_per_token_logps`` (generation and optimisation steps misaligned) and ``ref_per_token_logps`` (beta ≠ 0), as TRL does."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        need_old = self.args.gradient_accumulation_steps % generate_every != 0
        if not need_old and self.beta == 0.0:
            return
        input_ids, attention_mask, keep = sequences(batch)
        size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        images = image_inputs(batch)  # a VLM's pixels, as the loss's forward gets them
        with torch.no_grad():
            if need_old:
                batch["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.model, input_ids, attention_mask, keep, batch_size=size, **images
                )[0]
            if self.beta != 0.0:
                # An adapter's reference is its base model, the adapter switched off (or the "ref" copy
                # TRL makes of an adapter it was given trained): TRL's way.
                reference = self.ref_model if self.ref_model is not None else self.model
                learner = self.rollout_model
                adapted = self.ref_model is None and is_adapted(learner)
                ref_adapter = "ref" if adapted and "ref" in learner.peft_config else None
                with use_adapter(learner, ref_adapter) if adapted else contextlib.nullcontext():
                    batch["ref_per_token_logps"] = self._get_per_token_logps_and_entropies(
                        reference, input_ids, attention_mask, keep, batch_size=size, **images
                    )[0]

    def _rollout_state(self) -> dict:
        state = {**super()._rollout_state(), "task_outcomes": self.outcomes.state()}
        if self.predictor is not None:
            state["predictor"] = {
                "weights": self.predictor.weights.tolist(),
                "updates": self.predictor.updates,
                "successes": self.predictor.successes,
            }
        return state

    def _restore_rollout_state(self, state: dict) -> None:
        super()._restore_rollout_state(state)
        if "task_outcomes" in state:
            self.outcomes.load(state["task_outcomes"])
        if self.success_replay is not None:  # the successes of the records trained before the checkpoint
            self.success_replay.add_records(record for i, record in enumerate(self.store) if i < self.store_position)
        if self.predictor is not None and "predictor" in state:
            import numpy as np

            self.predictor.weights = np.array(state["predictor"]["weights"])
            self.predictor.updates = state["predictor"]["updates"]
            self.predictor.successes = state["predictor"]["successes"]


def _reflected_paths(records: list) -> list[Trajectory]:
    """Linear records as trajectories: a reflect-then-retry tree gives its failed path and its retry, both marked with the fork."""
    paths: list[Trajectory] = []
    for record in records:
        if isinstance(record, Trajectory):
            paths.append(record)
            continue
        reflection = record.metadata.get("reflection")
        for path in record.paths():
            if reflection is not None:
                path.metadata["fork_turn"] = reflection["fork_turn"]
                # Sampled with the reflection in its context and trained without it: off-policy (a retry without a
                # diagnosis acted in the policy's own context).
                path.metadata["off_policy_retry"] = (
                    path.metadata["leaf"] == reflection["retry_leaf"] and reflection["diagnosis"] is not None
                )
            paths.append(path)
    return paths


def tree_training_paths(tree: RolloutTree, baseline: str = "mean"):
    """A tree as training data: its paths, the per-turn advantages along each, which turns get loss, the usable outcomes.

    Leaves with an error (a budget cut, a broken env) have no outcome; nodes with no usable leaf
    below get no loss. Every other node gets loss on exactly one path (the first leaf below it),
    so a shared prefix is trained once, not once per leaf.
    """
    usable = usable_returns(tree)
    advantages = turn_advantages(tree, baseline)
    has_outcome = [value is not None for value in node_values(tree)]  # None: no usable leaf below
    trained: set[int] = set()
    paths, path_advantages, path_trainable = [], [], []
    for trajectory in tree.paths():
        nodes = tree.path(trajectory.metadata["leaf"])
        trainable = [has_outcome[n.id] and n.id not in trained for n in nodes]
        trained.update(n.id for n, t in zip(nodes, trainable) if t)
        if any(trainable):
            paths.append(trajectory)
            path_advantages.append([advantages[n.id] for n in nodes])
            path_trainable.append(trainable)
    return paths, path_advantages, path_trainable, list(usable.values())


def _std(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
