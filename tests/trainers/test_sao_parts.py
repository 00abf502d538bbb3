"""SAO's pieces: the value models' outputs, and the producer's copy of the policy really being a separate model."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from agentgym.models import tiny_model_path
from agentgym.trainers.sao import SeparateValueModel, ValueHead, _unpatched_copy


def test_value_models_give_a_value_per_position():
    ids, mask = torch.tensor([[5, 6, 7, 8]]), torch.ones(1, 4, dtype=torch.long)
    head = ValueHead(hidden_size=16)
    assert head(torch.randn(1, 4, 16)).tolist() == [[0.0] * 4]  # zero-initialised: no baseline before learning
    separate = SeparateValueModel(str(tiny_model_path()))
    assert separate(ids, mask).shape == (1, 4)


def test_producer_copy_does_not_run_the_learners_weights():
    learner = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
    add_fused_lm_head(learner)  # what GRPOTrainer does to the model it trains
    copy = _unpatched_copy(learner)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        before = copy(input_ids=ids).logits
        for parameter in learner.parameters():  # the learner takes a (large) step
            parameter.add_(0.5)
        assert torch.equal(copy(input_ids=ids).logits, before)
        assert not torch.equal(learner(input_ids=ids).logits, before)
