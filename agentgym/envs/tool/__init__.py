"""agentgym.envs.tool: ToolEnv, for writing tool-use environments from plain Python functions and tasks; MCP servers, BFCL, KeyChain and Calculator.

The MCP client and the BFCL envs load on first use of their names (the ``mcp`` SDK and
``bfcl-eval`` are optional: the ``tool`` extra).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports
from agentgym.envs.state import SQLiteState, StateCopy
from agentgym.envs.tool.calculator import CalculatorEnv
from agentgym.envs.tool.env import SUBMIT, ToolEnv
from agentgym.envs.tool.keychain import KeyChainEnv
from agentgym.envs.tool.schema import Tool, tool_from_callable, tools_from_object

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.envs.tool.bfcl import BFCLMultiTurnEnv
    from agentgym.envs.tool.mcp import MCPError, MCPServer, MCPToolEnv

_LAZY = {
    "MCPError": "mcp",
    "MCPServer": "mcp",
    "MCPToolEnv": "mcp",
    "BFCLMultiTurnEnv": "bfcl",
}

__all__ = [
    "CalculatorEnv",
    "KeyChainEnv",
    "SQLiteState",
    "StateCopy",
    "SUBMIT",
    "Tool",
    "ToolEnv",
    "tool_from_callable",
    "tools_from_object",
    *_LAZY,
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
