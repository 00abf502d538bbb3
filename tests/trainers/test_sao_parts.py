"""SAO's pieces: the value models' outputs, and the producer's copy of the policy really being a separate model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from agentgym.models import tiny_model_path
from agentgym.trainers.rollouts import policy_copy
from agentgym.trainers.sao import SeparateValueModel, ValueHead
from tests.helpers.trainers import sao_trainer


def test_value_models_give_a_value_per_position():
    ids, mask = torch.tensor([[5, 6, 7, 8]]), torch.ones(1, 4, dtype=torch.long)
    head = ValueHead(hidden_size=16)
    assert head(torch.randn(1, 4, 16)).tolist() == [[0.0] * 4]  # zero-initialised: no baseline before learning
    separate = SeparateValueModel(str(tiny_model_path()))
    assert separate(ids, mask).shape == (1, 4)


def test_producer_copy_does_not_run_the_learners_weights():
    learner = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    add_fused_lm_head(learner)  # what GRPOTrainer does to the model it trains
    copy = policy_copy(learner)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        before = copy(input_ids=ids).logits
        for parameter in learner.parameters():  # the learner takes a (large) step
            parameter.add_(0.5)
        assert torch.equal(copy(input_ids=ids).logits, before)
        assert not torch.equal(learner(input_ids=ids).logits, before)


def _sao_trainer(tmp_path, **settings):
    env = "agentgym.envs.tool.keychain:KeyChainEnv"
    settings = {"env_id": env, "per_device_train_batch_size": 2, "log_kl_to_start": False, "max_steps": 1, **settings}
    return sao_trainer(tmp_path, **settings)


def test_value_model_learns_at_its_own_rate(tmp_path):
    trainer = _sao_trainer(tmp_path, learning_rate=5e-5, value_learning_rate=1e-3)
    optimizer = trainer.create_optimizer()
    assert trainer.create_optimizer() is optimizer  # a second call changes nothing
    value_ids = {id(p) for p in trainer.rollout_model.value_model.parameters()}
    by_rate = {}
    for group in optimizer.param_groups:
        by_rate.setdefault(group["lr"], set()).update(id(p) for p in group["params"])
    assert by_rate[1e-3] == value_ids
    assert not by_rate[5e-5] & value_ids
    assert len(by_rate[5e-5]) == sum(1 for _ in trainer.rollout_model.parameters()) - len(value_ids)


def test_producer_stays_at_most_max_staleness_batches_ahead(tmp_path):
    trainer = _sao_trainer(tmp_path, max_staleness=3)  # 2 trajectories a step: 6 episodes ahead at most
    assert [trainer._admit() for _ in range(7)] == [True] * 6 + [False]
    trainer.consumed += 2  # the learner takes a batch: two more may start
    assert [trainer._admit() for _ in range(3)] == [True, True, False]
    on_policy = _sao_trainer(tmp_path / "on-policy", max_staleness=0)  # still one batch, or nothing would run
    assert [on_policy._admit() for _ in range(3)] == [True, True, False]


def test_the_decoupled_objective_clips_to_the_learner_and_weights_by_the_sampler(tmp_path):
    trainer = _sao_trainer(tmp_path, off_policy_correction="decoupled", max_steps=2, max_staleness=1, max_turns=2)
    generate, batches = trainer._generate_and_score_completions, []

    def keeping(inputs):
        batches.append(generate(inputs))
        return batches[-1]

    trainer._generate_and_score_completions = keeping
    trainer.train()
    first = batches[0]
    mask = (first["completion_mask"] * first["tool_mask"]).bool()
    # Step 0's samples came from the producer holding the learner's own weights: proximal = behaviour.
    proximal, behaviour = first["proximal_per_token_logps"], first["sampling_per_token_logps"]
    assert proximal.shape == behaviour.shape
    assert torch.allclose(proximal[mask], behaviour[mask], atol=1e-4)
    logged = trainer.state.log_history[0]
    assert logged["off_policy/weight_mean"] == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(ValueError, match="off_policy_correction must be one of"):
        _sao_trainer(tmp_path / "bad", off_policy_correction="aReaL")
