"""Both trainers for two steps with ``rollout_backend: ray``: envs on the cluster's env workers, sampling on two `agentgym serve` replicas, weights pushed to them.

The trainers run in this process (the learner); their rollouts run on the two-node cluster of
the ``ray_cluster`` fixture. Every turn must carry the weight version that sampled it and the
replica that served it, the replicas must hold the learner's weights after each push, and
nothing the trainer started (replicas, env workers) may outlive ``train()``.
"""

from __future__ import annotations

import pytest
import ray

from agentgym.models import tiny_model_path
from agentgym.rollout.store import TrajectoryStore
from agentgym.rollout.trajectory import RolloutTree

# Short episodes on a few KeyChain tasks: two contended cores run learner, replicas and workers.
COMMON = dict(
    env_id="agentgym/tool.keychain-v0",
    env_kwargs={"num_tasks": 8},
    max_turns=2,
    max_turn_tokens=8,
    per_device_train_batch_size=2,
    max_steps=2,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    rollout_backend="ray",
)
RAY = {"address": None, "env_workers": 2, "envs_per_worker": 4, "policy_replicas": 2}


def _actors(trainer) -> list:
    """The replica and env worker actors the trainer started."""
    return [r.actor for r in trainer.replicas._replicas] + [slot.actor for slot in trainer.env_pool.slots]


def _all_dead(actors: list) -> bool:
    for actor in actors:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            continue
        return False
    return True


def _turns(path) -> list:
    records = TrajectoryStore(path).read()
    assert records, "no rollouts were stored"
    return (
        [n.turn for r in records for n in r.nodes]
        if isinstance(records[0], RolloutTree)
        else [t for r in records for t in r.turns]
    )


def _replicas_used(path) -> set[str]:
    served = {turn.replica for turn in _turns(path)}
    assert None not in served, "every turn records the replica that served it"
    return served


@pytest.mark.slow
@pytest.mark.parametrize("adapter", [None, {"r": 4, "alpha": 8}], ids=["full", "lora"])
def test_tree_grpo_two_steps_on_the_cluster(ray_cluster, tmp_path, adapter):
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    # With a LoRA adapter the replicas hold plain models and get the merged weights at each push.
    args = TreeGRPOConfig(
        output_dir=str(tmp_path),
        num_generations=2,
        tree_max_leaves=4,
        rollout_concurrency=4,
        ray=RAY,
        peft=adapter,
        **COMMON,
    )
    trainer = TreeGRPOTrainer(str(tiny_model_path()), args)
    urls, actors = list(trainer.replicas.urls), _actors(trainer)
    assert len(urls) == 2
    trainer.train()
    served = _replicas_used(tmp_path / "trajectories.jsonl")
    assert served == set(urls), f"both replicas sample: {served}"
    versions = {turn.policy_version for turn in _turns(tmp_path / "trajectories.jsonl")}
    assert versions == {0, 1}, "step 0's rollouts sampled by version 0, step 1's by the pushed version 1"
    assert _all_dead(actors), "train() stops the replicas and env workers it started"


@pytest.mark.slow
def test_sao_two_steps_on_the_cluster_keeps_its_staleness_bound(ray_cluster, tmp_path):
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig

    args = SAOConfig(
        output_dir=str(tmp_path),
        rollout_concurrency=2,
        producer_queue_size=4,
        max_staleness=1,
        log_kl_to_start=False,
        ray=RAY,
        **COMMON,
    )
    trainer = SAOTrainer(str(tiny_model_path()), args)
    actors = _actors(trainer)
    trainer.train()
    _replicas_used(tmp_path / "trajectories.jsonl")
    # Admission is counted in this process for every producer episode, so the bound is exact.
    assert trainer.started - trainer.consumed <= args.max_staleness * args.per_device_train_batch_size
    assert all(s <= args.max_staleness for s in trainer.staleness), trainer.staleness
    assert _all_dead(actors)


def test_a_bad_ray_section_fails_at_config_time(tmp_path):
    from agentgym.trainers.sao_config import SAOConfig

    with pytest.raises(ValueError, match="unknown key"):
        SAOConfig(output_dir=str(tmp_path), rollout_backend="ray", ray={"adress": "auto"}, use_cpu=True)
    with pytest.raises(ValueError, match="rollout_backend must be"):
        SAOConfig(output_dir=str(tmp_path), rollout_backend="cluster", use_cpu=True)
    with pytest.raises(ValueError, match="needs rollout_backend: ray"):
        SAOConfig(output_dir=str(tmp_path), ray={"address": "auto"}, use_cpu=True)
