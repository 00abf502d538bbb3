"""agentgym.envs.tool: ToolEnv, for writing tool-use environments from plain Python functions, tasks and a check."""

from agentgym.envs.tool.env import SUBMIT, ToolEnv
from agentgym.envs.tool.schema import Tool, tool_from_callable, tools_from_object
from agentgym.envs.tool.state import SQLiteState, StateCopy

__all__ = ["SQLiteState", "StateCopy", "SUBMIT", "Tool", "ToolEnv", "tool_from_callable", "tools_from_object"]
