"""StairsEnv, episodes of known, task-dependent length for partial-rollout tests: ``stairs-k`` takes k replies, the last graded for a capital letter."""

from __future__ import annotations

from agentgym.core import AgentEnv, Outcome, Verdict

LENGTHS = {f"stairs-{k}": k for k in (1, 2, 3, 4)}


class StairsEnv(AgentEnv):
    """Plain-text replies; ``stairs-k``'s first k − 1 replies are answered "Again.", the k-th ends the episode.

    The k-th reply is the answer: reward 1 when it holds a capital letter (CapitalEnv's rule, so a
    random policy's groups have mixed outcomes).
    """

    allow_text_replies = True
    branch_attributes = ("replies",)

    def __init__(self, **kwargs):
        super().__init__(max_turns=max(LENGTHS.values()), **kwargs)
        self.replies = 0

    def task_ids(self):
        return list(LENGTHS)

    def tools(self):
        return []

    def _setup(self, task_id):
        self.replies = 0
        return f"Reply {LENGTHS[task_id]} times; the last reply in capital letters."

    def _reply_without_calls(self, text: str) -> Outcome:
        self.replies += 1
        if self.replies < LENGTHS[self.task_id]:
            return Outcome("Again.")
        return self._finish(text, "Answer received.")

    def _grade(self, answer):
        ok = any(c.isupper() for c in answer or "")
        return Verdict(float(ok), ok)
