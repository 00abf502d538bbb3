"""Forking an agent program's episode at a model call: the env forked there, the program replayed to it from the record.

A program that drives itself cannot be put into a mid-episode state from outside: its state is its
own (variables, files, an SDK's memory). A **fork at model call k** of an episode recorded with
``branching=True`` (the env snapshotted at every model call) is therefore:

0. the original recorded with ``branching=True``
   (:func:`~agentgym.gateway.programs.reset_and_run`, which returns the session to fork from);
1. the env forked from its snapshot at call k (the state it had when the program made call k);
2. the program run again from its start against a session in **replay** (:class:`Replay`): its
   first k model calls are answered with the recorded replies (the same ids, logprobs and version:
   nothing is sampled) and its tool calls before call k with the recorded results (the forked env
   is already past them: nothing is executed again);
3. from call k on, everything is live: calls are sampled, tool calls step the forked env.

The program reaches call k in the state it had there only if it is deterministic given its answers
(it sends the same requests in the same order). Each replayed request is checked against the
record: a model call must bring exactly the recorded prompt ids, a tool call the recorded name and
arguments. A program that diverges gets HTTP 409 (``replay_diverged``) and the fork is a failed
episode (``metadata["program_error"]``); nothing of the original record changes.

The fork's trajectory starts with the replayed turns (copies of the original's), so it and the
original share that prefix as a rollout tree's paths do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgym.gateway.session import Session, ToolStep
from agentgym.rollout.policy import Completion
from agentgym.rollout.trajectory import Trajectory, Turn
from agentgym.serve import RequestError

__all__ = ["Replay", "fork_episode"]


@dataclass
class Replay:
    """The record a fork is replayed from: the model calls and tool steps before its fork point."""

    turns: list[Turn]
    steps: list[ToolStep]
    calls_served: int = 0
    steps_served: int = 0
    diverged: list[str] = field(default_factory=list)

    def serves_call(self) -> bool:
        return self.calls_served < len(self.turns)

    def serves_step(self) -> bool:
        return self.steps_served < len(self.steps)

    def call(self, prompt_ids: list[int]) -> Completion:
        turn = self.turns[self.calls_served]
        if list(prompt_ids) != turn.prompt_ids:
            self._diverge(f"model call {self.calls_served} brought other prompt ids than the record's")
        self.calls_served += 1
        return Completion(
            text=turn.action,
            token_ids=list(turn.completion_ids),
            logprobs=list(turn.logprobs),
            finish_reason=turn.finish_reason,
            policy_version=turn.policy_version,
            entropy=turn.entropy,
            replica=turn.replica,
        )

    def step(self, name: str, arguments: dict) -> ToolStep:
        recorded = self.steps[self.steps_served]
        if (name, arguments) != (recorded.name, recorded.arguments):
            self._diverge(
                f"tool call {self.steps_served} is {name}({arguments}), the record's {recorded.name}({recorded.arguments})"
            )
        self.steps_served += 1
        return recorded

    def _diverge(self, why: str) -> None:
        self.diverged.append(why)
        raise RequestError(
            f"the program diverged from its record during a fork's replay: {why}", status=409, code="replay_diverged"
        )


async def fork_episode(
    gateway: Any, env: Any, original: Session, at_call: int, program: Any, *, timeout: float = 300.0
) -> Trajectory:
    """The episode of ``original`` forked at its model call ``at_call`` (see the module docstring).

    ``env`` is the original's env (still open; its snapshots are in ``original.snapshots``); the fork
    runs on a forked env, which is closed when the fork's episode ends.
    """
    from agentgym.gateway.programs import run_program_episode

    if not original.branching:
        raise ValueError("the episode was not recorded with branching=True: it has no snapshots to fork from")
    if not 0 <= at_call < len(original.snapshots):
        raise ValueError(f"at_call must be in [0, {len(original.snapshots)}), got {at_call}")
    child = await env.afork(original.snapshots[at_call])
    replay = Replay(
        [Turn.from_dict(t.to_dict()) for t in original.turns[:at_call]],
        [s for s in original.steps if s.after_call <= at_call],
    )
    try:
        trajectory, _ = await run_program_episode(
            gateway, child, program, original.task_id, original.initial_observation, timeout=timeout, replay=replay
        )
    finally:
        await child.aclose()
    trajectory.metadata["fork"] = {
        "at_call": at_call,
        "replayed_calls": replay.calls_served,
        "diverged": replay.diverged,
    }
    return trajectory
