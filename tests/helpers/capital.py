"""CapitalEnv, the one-turn env of the short learning checks: reward 1 when the reply holds a capital letter."""

from __future__ import annotations

import asyncio

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


def capital_tokens(tokenizer) -> torch.Tensor:
    """The ids of the tokens that hold a capital letter (the rewarded first tokens)."""
    return torch.tensor([i for i in range(len(tokenizer)) if any(c.isupper() for c in tokenizer.decode([i]))])


def first_prompt(trainer) -> list[int]:
    """The token ids of an episode's first prompt, exactly as the trainer's policy sees it."""
    env = CapitalEnv()
    try:
        return asyncio.run(trainer.agent.start(env, "shout-0")).prompt_ids
    finally:
        env.close()
