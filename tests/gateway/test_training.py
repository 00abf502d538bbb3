"""Both trainers take steps from gateway episodes: an unmodified openai-client program on KeyChain, sampling from the
tiny model being trained, whose weight pushes the gateway serves at the next step."""

from __future__ import annotations

import pytest

from agentgym.models import tiny_model_path
from agentgym.rollout.store import TrajectoryStore

GATEWAY = {"program": "tests.helpers.gateway_programs:openai_program", "timeout": 60, "max_calls": 4}
COMMON = dict(
    env_id="agentgym.envs.tool.keychain:KeyChainEnv",
    train_tasks=["train-0", "train-1"],
    max_turn_tokens=8,
    rollout_backend="gateway",
    gateway=GATEWAY,
    beta=0.0,
    max_steps=2,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    seed=0,
)


def _check_store(path, steps: int):
    records = list(TrajectoryStore(path))
    assert records
    for record in records:
        stats = record.metadata["gateway"]
        assert stats["calls"] == len(record.turns) >= 1
        assert record.metadata["program_error"] is None
        for turn in record.turns:
            assert turn.completion_ids and len(turn.logprobs) == len(turn.completion_ids)
            assert len(turn.completion_ids) <= 8  # the trainer's max_turn_tokens capped the program's 200
    # The weights pushed between steps reached the gateway's backend: each step sampled with its own version.
    assert {t.policy_version for r in records for t in r.turns} == set(range(steps))


def test_tree_grpo_trains_two_steps_from_gateway_episodes(tmp_path):
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    args = TreeGRPOConfig(
        output_dir=str(tmp_path), tree=False, num_generations=2, per_device_train_batch_size=2, **COMMON
    )
    trainer = TreeGRPOTrainer(str(tiny_model_path()), args)
    trainer.train()
    assert trainer.state.global_step == 2
    _check_store(tmp_path / "trajectories.jsonl", 2)


def test_sao_trains_two_steps_from_gateway_episodes(tmp_path):
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig

    args = SAOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, rollout_concurrency=2, **COMMON)
    trainer = SAOTrainer(str(tiny_model_path()), args)
    trainer.train()
    assert trainer.state.global_step == 2
    records = list(TrajectoryStore(tmp_path / "trajectories.jsonl"))
    assert records and all(r.metadata["gateway"]["calls"] >= 1 for r in records)


def test_a_tree_through_the_gateway_is_refused_at_config_time(tmp_path):
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    with pytest.raises(ValueError, match="tree: false"):
        TreeGRPOConfig(output_dir=str(tmp_path), tree=True, **COMMON)
    with pytest.raises(ValueError, match="go together"):
        TreeGRPOConfig(output_dir=str(tmp_path), tree=False, **{**COMMON, "gateway": None})
    with pytest.raises(ValueError, match="module:function"):
        TreeGRPOConfig(output_dir=str(tmp_path), tree=False, **{**COMMON, "gateway": {"program": "nonsense"}})
