"""CapitalEnv, the one-turn env of the short learning checks: reward 1 when the reply holds a capital letter."""

from __future__ import annotations

import torch

from agentgym.envs.tool.env import ToolEnv

TASKS = {f"shout-{i}": "Reply in capital letters." for i in range(8)}


def _has_capital(task, state, transcript):
    answer = str(transcript[-1]["arguments"].get("answer", "")) if transcript else ""
    ok = any(c.isupper() for c in answer)
    return float(ok), ok


class CapitalEnv(ToolEnv):
    """One turn: the reply is the answer; reward 1 when it holds a capital letter (~10% of the vocabulary's tokens)."""

    def __init__(self, **kwargs):
        super().__init__([], TASKS, check=_has_capital, max_turns=1, call_timeout=None, variant="capitals", **kwargs)


def capital_mass(trainer, prompt_ids: list[int], capitals: torch.Tensor) -> float:
    """The probability, under the trainer's rollout model, that the reply's first token is one of ``capitals``."""
    model = trainer.rollout_model
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    return logits.softmax(-1)[capitals].sum().item()
