"""agentgym.envs.text: text worlds played by free-text commands — the TextGameEnv base, BabyAI as text, ScienceWorld, TextWorld, TextWorldExpress.

The worlds load on first use of their names (``minigrid``, ``scienceworld``, ``textworld``, ``jericho`` and
``textworld-express`` are the ``text`` extra).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports
from agentgym.envs.text.env import ACT, Played, TextGameEnv

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.envs.text.babyai import BabyAIEnv
    from agentgym.envs.text.scienceworld import ScienceWorldEnv
    from agentgym.envs.text.textworld import TextWorldEnv
    from agentgym.envs.text.textworld_express import TextWorldExpressEnv

_LAZY = {
    "BabyAIEnv": "babyai",
    "ScienceWorldEnv": "scienceworld",
    "TextWorldEnv": "textworld",
    "TextWorldExpressEnv": "textworld_express",
}

__all__ = ["ACT", "Played", "TextGameEnv", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
