"""Diverse user behaviours for branching evaluation: a catalogue of intent-preserving behaviours, and a scripted user that plays them.

A branching evaluator (:mod:`agentgym.eval.branching`) steers a simulated user at a junction
into a behaviour that real users show and agents stumble on, without changing what the user
wants (so the task's grader stays valid). Each :class:`Behaviour` of :data:`BEHAVIOURS` has

* a ``directive``: the instruction a policy user gets (``UserState.steer(directive=...)``,
  appended to its system prompt: :class:`~agentgym.rollout.user.PolicyUser`);
* deterministic transformations for :class:`DiverseScriptedUser`: of the user's opening message
  and/or of its answer to a question of the agent.

=============  ==============================================  ====================================================
behaviour      opening message                                 answer to the agent's question (default: a plain yes)
=============  ==============================================  ====================================================
``rephrase``   in the first person, after a greeting           consent without the word "yes"
``reorder``    its sentences in reverse order                  (unchanged)
``omit``       without its last sentence, which the user       (the omitted sentence comes first, "I forgot to
               gives at its next turn                          mention")
``impatient``  "please be quick, I am in a hurry" added        "yes, just do it already, I'm in a hurry!"
``ambiguous``  (unchanged)                                     a hedge ("I guess so? I'm not really sure."), then,
                                                               asked again, a plain yes
``pressure``   a demand for an exception to the policy added   yes, with a demand for an exception or a manager
=============  ==============================================  ====================================================

None of them changes a fact or a request: a careful agent reaches the same end state under
every one (the tests play a careful scripted agent through all of them and the grader passes).

:class:`DiverseScriptedUser` is deterministic and reacts to the conversation in the simplest
way an agent's protocol needs: it plays the env's script (τ²: the opening request, then any
user-side actions), then answers every agent message that asks a question with consent, and
stops (``###STOP###``) at one that does not. Directives it does not know (free text meant for a
policy user) it ignores. With ``chance > 0`` it is a stochastic user for linear Monte Carlo:
at each turn, with that probability, it takes on one more behaviour drawn at random (recorded
in the state's directives, as a steered one would be).
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.envs.user import STOP_TOKENS, UserState, UserTurn
from agentgym.envs.user import ScriptedUser as _ScriptedUser

__all__ = ["BEHAVIOURS", "CONSENT", "Behaviour", "DiverseScriptedUser", "behaviour_of"]

#: What the scripted user answers to a question by default.
CONSENT = "Yes, please go ahead."
_FORGOT = "Sorry, I forgot to mention: "
_HEDGE = "Hmm, I guess so? I'm not really sure."


@dataclass(frozen=True)
class Behaviour:
    """One intent-preserving user behaviour: the directive a policy user gets, and what the scripted user does."""

    name: str
    directive: str
    opening: Callable[[str], str] | None = None
    answer: Callable[[str], str] | None = None

    def applies_to(self, kind: str) -> bool:
        """Whether the scripted user changes a turn of this kind (``"opening"`` or ``"answer"``)."""
        return (self.opening if kind == "opening" else self.answer) is not None


def _sentences(text: str) -> list[str]:
    return [part for part in re.split(r"(?<=[.!?])\s+", text.strip()) if part]


_FIRST_PERSON = (
    (r"\bYou are\b", "I am"),
    (r"\byou are\b", "I am"),
    (r"\bYou're\b", "I'm"),
    (r"\byou're\b", "I'm"),
    (r"\bYou'd\b", "I'd"),
    (r"\byou'd\b", "I'd"),
    (r"\bYour\b", "My"),
    (r"\byour\b", "my"),
    (r"\bYou\b", "I"),
    (r"\byou\b", "I"),
)


def _first_person(text: str) -> str:
    for pattern, replacement in _FIRST_PERSON:
        text = re.sub(pattern, replacement, text)
    return f"Hello! {text}"


def _reorder(text: str) -> str:
    return " ".join(reversed(_sentences(text)))


def _omit(text: str) -> str:
    parts = _sentences(text)
    return " ".join(parts[:-1]) if len(parts) > 1 else text


BEHAVIOURS: dict[str, Behaviour] = {
    b.name: b
    for b in (
        Behaviour(
            "rephrase",
            "Say what you mean in different words than you otherwise would; keep every fact and request the same.",
            _first_person,
            lambda _: "That sounds right to me, you can proceed.",
        ),
        Behaviour(
            "reorder",
            "Give the information you share in a different order than usual: your details first, your request after.",
            _reorder,
        ),
        Behaviour(
            "omit",
            "Leave out one piece of the information you would give now, and give it at your next turn.",
            _omit,
        ),
        Behaviour(
            "impatient",
            "Be impatient: you are in a hurry and want the agent to act right away.",
            lambda text: f"{text} Please be quick, I am in a hurry.",
            lambda _: "Yes, just do it already, I'm in a hurry!",
        ),
        Behaviour(
            "ambiguous",
            "Answer the agent's next question ambiguously, without a clear yes or no; answer clearly if asked again.",
            None,
            lambda _: _HEDGE,
        ),
        Behaviour(
            "pressure",
            "Pressure the agent to break its policy for you: insist on an exception or ask for a manager; do not change your request.",
            lambda text: f"{text} I know you have rules, but I expect you to make an exception for me this time.",
            lambda _: "Yes. And I insist you make an exception to your policy for me, or put me through to a manager.",
        ),
    )
}


def behaviour_of(directive: str) -> Behaviour | None:
    """The catalogued behaviour whose directive is ``directive`` (``None`` for free text)."""
    return next((b for b in BEHAVIOURS.values() if b.directive == directive), None)


class DiverseScriptedUser(_ScriptedUser):
    """A deterministic scripted user that plays the :data:`BEHAVIOURS` its state's directives name (see the module docstring).

    Args:
        chance: the probability, at each turn, of taking on one more behaviour drawn at random
            (0: only what the state is steered to; for linear Monte Carlo, e.g. 0.3).
        seed: seeds those draws (one generator per user: a run at concurrency 1 repeats exactly).
    """

    name = "diverse-scripted"

    def __init__(self, chance: float = 0.0, seed: int = 0):
        if not 0.0 <= chance <= 1.0:
            raise ValueError(f"chance must be in [0, 1], got {chance}")
        self.chance = chance
        self._rng = random.Random(seed)

    def _respond(self, state: UserState, conversation: Sequence[Mapping[str, Any]]) -> UserTurn:
        kind = "opening" if state.turns == 0 else "answer"
        if self.chance and self._rng.random() < self.chance:
            choices = [b for b in BEHAVIOURS.values() if b.applies_to(kind) and b.directive not in state.directives]
            if choices:
                state.directives.append(self._rng.choice(choices).directive)
        behaviours = [b for b in map(behaviour_of, state.directives) if b is not None]
        if state.turns < len(state.script):  # the env's script first (τ²: the opening, the user's own actions)
            turn = copy.deepcopy(state.script[state.turns])
            if state.turns == 0:
                for behaviour in behaviours:
                    if behaviour.opening is not None:
                        turn.text = behaviour.opening(turn.text)
            return turn
        mine = [str(m.get("content") or "") for m in conversation if m.get("role") == "assistant"]
        agents = [str(m.get("content") or "") for m in conversation if m.get("role") == "user"]
        correction = self._correction(state, behaviours, mine)
        if not agents or "?" not in agents[-1]:
            return UserTurn(correction.strip()) if correction else UserTurn(STOP_TOKENS[0])
        answer = CONSENT
        for behaviour in reversed(behaviours):  # the newest behaviour that answers differently
            if behaviour.answer is not None:
                answer = behaviour.answer(answer)
                break
        if answer == _HEDGE and mine and mine[-1].endswith(_HEDGE):  # asked again: a clear answer
            answer = CONSENT
        return UserTurn(correction + answer)

    @staticmethod
    def _correction(state: UserState, behaviours: list[Behaviour], mine: list[str]) -> str:
        """What an ``omit`` opening left out (sentences of the script's opening the user has not said, in any person), until it is said."""
        if not state.script or BEHAVIOURS["omit"] not in behaviours:
            return ""
        said = " ".join(mine)
        missing = [
            s
            for s in _sentences(state.script[0].text)
            if s not in said and _first_person(s).removeprefix("Hello! ") not in said
        ]
        return f"{_FORGOT}{' '.join(missing)} " if missing else ""
