"""The rollout engine: policies, the agent loop, turn-level tree rollouts, the async runner and the trajectory store.

Names are imported lazily so that ``import agentgym.rollout`` does not pull in torch,
transformers or aiohttp until a class that needs them is used.
"""

from agentgym._lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, deprecated={"Task": "agentgym.rollout.runner:EpisodeRequest"})
