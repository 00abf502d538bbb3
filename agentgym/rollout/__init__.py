"""The rollout engine: policies, the agent loop, turn-level tree rollouts, the async runner and the trajectory store.

Names are imported lazily so that ``import agentgym.rollout`` does not pull in torch,
transformers or aiohttp until a class that needs them is used.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.rollout.agent import Agent, AgentConfig, Episode, EpisodeCheckpoint, FoldPolicy
    from agentgym.rollout.chat import ChatFormat, TemplateError, check_prefix_preserving
    from agentgym.rollout.hf_policy import HFPolicy
    from agentgym.rollout.images import ImageConfig, ImageRejectedError
    from agentgym.rollout.openai_policy import OpenAIPolicy
    from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams
    from agentgym.rollout.runner import (
        EpisodeRequest,
        Failure,
        Job,
        PendingEpisode,
        Runner,
        RunnerConfig,
        RunResult,
        RunStats,
    )
    from agentgym.rollout.store import TrajectoryStore, records_from_dataset, records_to_dataset, sequences_to_dataset
    from agentgym.rollout.trajectory import RolloutTree, TrainingSequence, Trajectory, TreeNode, Turn
    from agentgym.rollout.tree import SuccessPredictor, TreeConfig, TreeRollout
    from agentgym.rollout.tree_values import (
        assign_values,
        node_values,
        prefix_sharing_saving,
        turn_advantages,
        usable_returns,
    )
    from agentgym.rollout.vision import VisionChatFormat

_EXPORTS = {
    "Agent": "agent",
    "AgentConfig": "agent",
    "Episode": "agent",
    "EpisodeCheckpoint": "agent",
    "FoldPolicy": "agent",
    "ChatFormat": "chat",
    "TemplateError": "chat",
    "check_prefix_preserving": "chat",
    "Completion": "policy",
    "Policy": "policy",
    "PolicyError": "policy",
    "SamplingParams": "policy",
    "HFPolicy": "hf_policy",
    "ImageConfig": "images",
    "ImageRejectedError": "images",
    "OpenAIPolicy": "openai_policy",
    "RolloutTree": "trajectory",
    "TrainingSequence": "trajectory",
    "Trajectory": "trajectory",
    "TreeNode": "trajectory",
    "Turn": "trajectory",
    "TreeConfig": "tree",
    "TreeRollout": "tree",
    "SuccessPredictor": "tree",
    "assign_values": "tree_values",
    "node_values": "tree_values",
    "prefix_sharing_saving": "tree_values",
    "turn_advantages": "tree_values",
    "usable_returns": "tree_values",
    "Failure": "runner",
    "PendingEpisode": "runner",
    "Runner": "runner",
    "RunnerConfig": "runner",
    "RunResult": "runner",
    "EpisodeRequest": "runner",
    "Job": "runner",
    "RunStats": "runner",
    "TrajectoryStore": "store",
    "records_from_dataset": "store",
    "records_to_dataset": "store",
    "sequences_to_dataset": "store",
    "VisionChatFormat": "vision",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
