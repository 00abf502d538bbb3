"""agentgym: branchable Gymnasium environments for LLM agents, with tree-rollout RL trainers and an eval harness.

``import agentgym`` registers every built-in environment as ``agentgym/<family>.<name>-v0`` (the id
scheme is described in :mod:`agentgym.registration`) and loads environment plugins, so
``gymnasium.make("agentgym/code.humaneval-v0")`` works after it.
"""

from importlib.metadata import version as _installed_version

from agentgym.actions import ParsedAction, ToolCall, ToolSpec, parse_action
from agentgym.core import AgentEnv, AgentText, Outcome, Verdict
from agentgym.extras import DISTRIBUTION
from agentgym.registration import load_plugins, register_builtin_envs, register_env, registered_env_ids
from agentgym.snapshot import Snapshot, SnapshotError, SnapshotMismatchError, SnapshotReleasedError
from agentgym.task import Task, run_solution
from agentgym.wrappers import BranchingWrapper, WrapperNotBranchingError

__version__ = _installed_version(DISTRIBUTION)  # the one version string is pyproject.toml's

__all__ = [
    "AgentEnv",
    "AgentText",
    "Outcome",
    "Snapshot",
    "SnapshotError",
    "SnapshotMismatchError",
    "SnapshotReleasedError",
    "Task",
    "Verdict",
    "BranchingWrapper",
    "WrapperNotBranchingError",
    "ParsedAction",
    "ToolCall",
    "ToolSpec",
    "parse_action",
    "register_env",
    "registered_env_ids",
    "run_solution",
    "__version__",
]

register_builtin_envs()
load_plugins()
