"""SAOConfig: TRL's GRPOConfig plus the rollout settings (AgentgymConfig) and the value-model, clipping, staleness and producer settings of SAOTrainer."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym.trainers.base_config import AgentgymConfig

__all__ = ["SAOConfig"]

VALUE_BASELINES = ("trajectory", "gae")
OFF_POLICY_CORRECTIONS = ("none", "decoupled")


@dataclass
class SAOConfig(AgentgymConfig):
    """Configuration for :class:`~agentgym.trainers.sao.SAOTrainer`.

    From GRPOConfig: ``epsilon`` and ``epsilon_high`` are the strict clipping bounds
    ``[1 − epsilon, 1 + epsilon_high]``; ``per_device_train_batch_size`` is the number of
    trajectories per step on each process; ``temperature``/``top_p``/``top_k`` are the producer's
    sampling settings; optimizer, schedule, logging and saving options apply as usual. GRPO's group
    options (``loss_type``, ``scale_rewards``, ``beta``, ...) are not used: SAO has no groups.
    ``num_generations`` stays at GRPOConfig's minimum of 2 only because GRPOConfig checks it; SAO
    samples one rollout per task whatever it says (keep the global batch even).
    """

    value_model: str = field(
        default="head",
        metadata={
            "help": "'head': a linear value head on the policy's last hidden state; or a model directory: a separate "
            "small model with a linear head."
        },
    )
    value_baseline: str = field(
        default="gae",
        metadata={
            "help": f"One of {VALUE_BASELINES}: 'trajectory' (A = R − V(s₀) for every turn) or 'gae' (per-turn GAE)."
        },
    )
    gamma: float = field(default=1.0, metadata={"help": "Per-turn discount."})
    gae_lambda: float = field(default=0.95, metadata={"help": "GAE λ (1.0: Monte Carlo returns)."})
    value_loss_coef: float = field(default=0.5, metadata={"help": "Weight of the value loss."})
    value_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Learning rate of the value model's own parameters (the head, or the separate model); default: "
            "learning_rate. A fresh head at a small policy rate learns its baseline too slowly to help."
        },
    )
    max_staleness: int = field(
        default=4,
        metadata={
            "help": "Samples whose oldest turn is more than this many policy versions behind the learner are dropped."
        },
    )
    off_policy_correction: str = field(
        default="none",
        metadata={
            "help": f"One of {OFF_POLICY_CORRECTIONS}: 'none' clips the ratio to the policy that sampled a turn; "
            "'decoupled' (AReaL's objective) clips it to the learner's weights when the batch was taken and weights "
            "each token by their ratio to the sampling policy (one extra forward pass per batch)."
        },
    )
    replay_per_step: int = field(
        default=1, metadata={"help": "success_replay: replayed successes added to each batch (distinct tasks)."}
    )
    sync_every: int = field(default=1, metadata={"help": "Copy the learner's weights to the producer every k steps."})
    producer_queue_size: int = field(
        default=64,
        metadata={"help": "Finished trajectories waiting for the learner (the producer blocks when it is full)."},
    )
    log_kl_to_start: bool = field(
        default=True,
        metadata={"help": "Log KL(policy ‖ initial policy) on the trained tokens (one extra forward per step)."},
    )
    ddp_find_unused_parameters: bool | None = field(
        default=False,
        metadata={
            "help": "Kept False: the value model is used outside the policy's forward, which DDP's unused-parameter "
            "search would count as unused and then see its gradient arrive a second time."
        },
    )
    num_generations: int = field(default=2, metadata={"help": "Not used by SAO (see the class docstring)."})

    def __post_init__(self):
        if self.value_baseline not in VALUE_BASELINES:
            raise ValueError(f"value_baseline must be one of {VALUE_BASELINES}, got {self.value_baseline!r}")
        if self.off_policy_correction not in OFF_POLICY_CORRECTIONS:
            raise ValueError(
                f"off_policy_correction must be one of {OFF_POLICY_CORRECTIONS}, got {self.off_policy_correction!r}"
            )
        if self.value_learning_rate is not None and self.value_learning_rate <= 0:
            raise ValueError(f"value_learning_rate must be positive, got {self.value_learning_rate}")
        if self.success_replay and self.off_policy_correction != "decoupled":
            raise ValueError("success_replay trains old successes off-policy: set off_policy_correction: decoupled")
        if self.replay_per_step < 1:
            raise ValueError(f"replay_per_step must be at least 1, got {self.replay_per_step}")
        if self.max_staleness < 0 or self.sync_every < 1 or self.producer_queue_size < 1:
            raise ValueError("max_staleness must be >= 0, sync_every and producer_queue_size >= 1")
        super().__post_init__()
        if self.epsilon_high is None:  # type: ignore[has-type]  # GRPOConfig is read untyped (mypy overrides)
            self.epsilon_high = self.epsilon
