"""A chat-mode test policy for KeyChain that follows the skills in its prompt in order, else replies a fixed fallback."""

from __future__ import annotations

from agentgym.memory.bank import procedures_in_prompt, split_prompt
from agentgym.memory.induction import follow_any
from agentgym.rollout.policy import Completion, Policy

GOOD = ['lookup(key=<word after "under" in the task>)', "submit(answer=<last number in the last observation>)"]
HARMFUL = ['submit(answer="11")']


class Follower(Policy):
    """Follows the procedures shown (:func:`follow_any`); without one (or once all are used up) replies ``fallback``.

    ``fallback=None`` solves one-hop KeyChain tasks on its own (the GOOD procedure, built in).
    Every first prompt it sees is kept in ``prompts``.
    """

    name = "follower"

    def __init__(self, fallback: str | None = 'submit("0")'):
        self.fallback = fallback
        self.prompts: list[str] = []

    async def chat(self, messages, tools, sampling):
        users = [m for m in messages if m["role"] != "system"]
        prompt = str(users[0]["content"])
        observations = [""] + [str(m["content"]) for m in users[1:] if m["role"] in ("user", "tool")]
        if len(observations) == 1:
            self.prompts.append(prompt)
        _, task = split_prompt(prompt)
        procedures = procedures_in_prompt(prompt) or ([GOOD] if self.fallback is None else [])
        call = follow_any(procedures, task, observations)
        if call is None:
            return Completion(text=self.fallback or 'submit("0")')
        args = ", ".join(f'"{v}"' for v in call["arguments"].values())
        return Completion(text=f"{call['name']}({args})")
