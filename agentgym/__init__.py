"""agentgym: branchable Gymnasium environments for LLM agents, with tree-rollout RL trainers and an eval harness.

``import agentgym`` registers every built-in environment as ``agentgym/<Name>-v0`` and loads
environment plugins, so ``gymnasium.make("agentgym/HumanEval-v0")`` works after it.
"""

from agentgym.actions import ParsedAction, ToolCall, ToolSpec, parse_action
from agentgym.core import (
    AgentEnv,
    AgentText,
    Outcome,
    Snapshot,
    SnapshotError,
    SnapshotMismatchError,
    SnapshotReleasedError,
)
from agentgym.registration import load_plugins, register_builtin_envs, register_env, registered_env_ids

__version__ = "0.1.0"

__all__ = [
    "AgentEnv",
    "AgentText",
    "Outcome",
    "Snapshot",
    "SnapshotError",
    "SnapshotMismatchError",
    "SnapshotReleasedError",
    "ParsedAction",
    "ToolCall",
    "ToolSpec",
    "parse_action",
    "register_env",
    "registered_env_ids",
    "__version__",
]

register_builtin_envs()
load_plugins()
