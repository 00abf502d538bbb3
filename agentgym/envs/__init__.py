"""agentgym.envs: the built-in environment families — code/, tool/, web/, gui/ — and the world-state copies they share (state.py).

Each family is a subpackage with its own exports (``from agentgym.envs.tool import ToolEnv``);
importing one family never imports another.
"""

from agentgym.envs.state import SQLiteState, StateCopy

__all__ = ["SQLiteState", "StateCopy"]
