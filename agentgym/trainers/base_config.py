"""AgentgymConfig: what every agentgym trainer's config adds to TRL's GRPOConfig — the rollout settings and shared defaults.

:class:`~agentgym.trainers.tree_grpo_config.TreeGRPOConfig` and
:class:`~agentgym.trainers.sao_config.SAOConfig` subclass it (TRL's trainer + config pairs:
``AgentgymTrainer`` in :mod:`agentgym.trainers.base` is the trainer side). Its fields are
:class:`RolloutArguments` (the env, the agent loop, concurrency, the trajectory store, memory, screenshots)
and four defaults that differ from TrainingArguments': ``bf16`` on only where CUDA is available,
no activation checkpointing, a log line per step, TensorBoard reports; and the ``peft`` section
(a LoRA adapter, :mod:`agentgym.trainers.lora`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

__all__ = ["AgentgymConfig", "RolloutArguments"]

TASK_ALLOCATIONS = ("uniform", "trace")


@dataclass
class RolloutArguments:
    """The rollout settings of every agentgym trainer: which env, the agent loop's limits, concurrency, the store, memory.

    A plain dataclass (no TrainingArguments), so tools that only roll out can take it alone;
    :class:`AgentgymConfig` mixes it into GRPOConfig.
    """

    env_id: str = field(
        default="agentgym.envs.tool.keychain:KeyChainEnv",
        metadata={"help": "The env: a registered id (`agentgym/<Name>-v0`) or an entry point `module:Class`."},
    )
    env_kwargs: dict = field(default_factory=dict, metadata={"help": "Keyword arguments for the env."})
    train_tasks: list[str] | None = field(
        default=None, metadata={"help": "Task ids to train on (default: every task the env lists)."}
    )
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "System prompt of the agent loop (None: none; the tool list still goes in the template's system block)."
        },
    )
    max_turns: int | None = field(
        default=None, metadata={"help": "Turns per episode (the env's own limit applies too)."}
    )
    max_turn_tokens: int = field(default=48, metadata={"help": "Tokens the policy may sample per turn."})
    context_window: int | None = field(
        default=None, metadata={"help": "Prompt + completion tokens per episode (None: the model's max positions)."}
    )
    rollout_concurrency: int = field(
        default=16,
        metadata={
            "help": "Episodes in flight at once (their samples batch). With the local backend a TreeGRPO step runs "
            "at least all of its episodes (trees) at once, as TRL generates a whole generation batch together."
        },
    )
    rollout_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "The most requests the in-process policy decodes in one batch (None: every first turn of a "
            "step's group at once: tasks × num_generations for TreeGRPO, rollout_concurrency for SAO's producer)."
        },
    )
    episode_timeout: float | None = field(default=None, metadata={"help": "Seconds an episode may run."})
    store_path: str | None = field(
        default=None,
        metadata={
            "help": "JSONL trajectory store (default: <output_dir>/trajectories.jsonl); every rollout is appended."
        },
    )
    time_budget_s: float | None = field(
        default=None, metadata={"help": "Stop training after this many seconds (a checkpoint is saved at the stop)."}
    )
    env_step_budget: int | None = field(
        default=None,
        metadata={
            "help": "Stop training once the rollouts this process trained on took this many env steps (a checkpoint "
            "is saved at the stop): runs compared at equal env steps."
        },
    )
    env_step_snapshots: int | None = field(
        default=None,
        metadata={
            "help": "Save the policy's weights to <output_dir>/env-steps/<m> (with snapshot.json: step, env steps, "
            "tokens) the first time the env steps reach each multiple m of this: what an env_step_budget=m run of "
            "the same seed would stop with, so one run gives every equal-env-steps comparison up to its length."
        },
    )
    report_rollout_metrics: bool = field(
        default=True,
        metadata={"help": "Log success rate, env error rate and episode shape with the trainer's metrics."},
    )
    memory: dict | None = field(
        default=None,
        metadata={
            "help": "Memory bank section {path, mode: read|learn, k_skills, k_episodes, min_utility, write_forks, shared}: every "
            "rollout env is wrapped in a MemoryWrapper (see agentgym.memory.config). None: no memory."
        },
    )

    images: dict | None = field(
        default=None,
        metadata={
            "help": "Screenshots in the policy's prompts, an ImageConfig section {keep_last, max_side, format, quality, "
            "max_bytes, min_side, thumbnail_side} (see agentgym.rollout.images); the model must be a VLM. None: text only."
        },
    )

    rollout_backend: str = field(
        default="local",
        metadata={
            "help": "Where rollouts run: `local` (envs and sampling in this process), `ray` (the cluster's env "
            "workers and policy replicas; see the `ray` section) or `gateway` (an agent program per episode, "
            "sampling through the gateway from this process's policy; see the `gateway` section)."
        },
    )
    ray: dict | None = field(
        default=None,
        metadata={
            "help": "With rollout_backend: ray, the cluster section {address, env_workers, envs_per_worker, "
            "policy_replicas, replica_max_batch_size} (see agentgym.distributed.config)."
        },
    )

    gateway: dict | None = field(
        default=None,
        metadata={
            "help": "With rollout_backend: gateway, the program section {program: 'module:function' or a command "
            "(argv list), timeout, max_calls, max_concurrent} (see agentgym.gateway.programs.ProgramConfig)."
        },
    )

    def check_memory(self) -> None:
        """Fail at config time, not at the first rollout, on a bad memory section."""
        if self.memory is not None:
            from agentgym.memory.config import MemoryConfig

            MemoryConfig.from_dict(self.memory)

    def image_config(self):
        """The ``images`` section as an :class:`~agentgym.rollout.images.ImageConfig` (None: text only); a bad one is a ValueError."""
        if self.images is None:
            return None
        from agentgym.rollout.images import ImageConfig
        from agentgym.sections import from_section

        return from_section(ImageConfig, self.images, "images")

    def check_rollout_backend(self) -> None:
        """Fail at config time on an unknown backend or a bad ``ray`` section."""
        if self.rollout_backend not in ("local", "ray", "gateway"):
            raise ValueError(f"rollout_backend must be 'local', 'ray' or 'gateway', got {self.rollout_backend!r}")
        if self.rollout_batch_size is not None and self.rollout_batch_size < 1:
            raise ValueError(f"rollout_batch_size must be at least 1, got {self.rollout_batch_size}")
        if self.rollout_backend != "ray" and self.ray is not None:
            raise ValueError("a `ray` section needs rollout_backend: ray")
        if self.rollout_backend == "ray":
            from agentgym.distributed.config import RayConfig

            RayConfig.from_dict(self.ray)
        if (self.rollout_backend == "gateway") != (self.gateway is not None):
            raise ValueError("rollout_backend: gateway and a `gateway` section go together")
        if self.gateway is not None:
            self.program_config()

    def program_config(self):
        """The ``gateway`` section as a :class:`~agentgym.gateway.programs.ProgramConfig` (None without one)."""
        if self.gateway is None:
            return None
        from agentgym.gateway.programs import ProgramConfig
        from agentgym.sections import from_section

        return from_section(ProgramConfig, self.gateway, "gateway")


@dataclass
class AgentgymConfig(GRPOConfig, RolloutArguments):
    """GRPOConfig plus :class:`RolloutArguments` and the shared defaults (see the module docstring).

    Subclasses validate their own fields in ``__post_init__`` and then call this one, which
    checks the memory section and resolves ``bf16`` before GRPOConfig's own checks.
    """

    bf16: bool | None = field(default=None, metadata={"help": "bfloat16 mixed precision (default: on with CUDA)."})
    activation_checkpointing: bool | None = field(default=False, metadata={"help": "Trade compute for memory."})
    logging_steps: float = field(default=1, metadata={"help": "Log every X update steps."})
    report_to: str | list[str] = field(default="tensorboard", metadata={"help": "Where to report metrics."})
    peft: dict | None = field(
        default=None,
        metadata={
            "help": "Train a LoRA adapter instead of every weight: {r, alpha, dropout, target_modules, modules_to_save} "
            "(see agentgym.trainers.lora). None: full fine-tuning."
        },
    )

    task_allocation: str = field(
        default="uniform",
        metadata={
            "help": f"One of {TASK_ALLOCATIONS}: how a step's sampling budget is split over tasks. 'uniform': equally "
            "(TreeGRPO: num_generations episodes or tree_max_leaves leaves per task; SAO: every task once per epoch). "
            "'trace' (TRACE): by each task's recent success rate p, where mixed outcomes are likeliest — TreeGRPO "
            "hands the step's episodes (leaves) out by the gain in P(mixed group), SAO samples tasks ∝ p(1−p) + "
            "allocation_floor (see agentgym.trainers.allocation)."
        },
    )
    allocation_decay: float = field(
        default=0.8,
        metadata={
            "help": "task_allocation: trace — each task's outcome counts are multiplied by this per new outcome."
        },
    )
    allocation_floor: float = field(
        default=0.05,
        metadata={"help": "task_allocation: trace, SAO — added to every task's p(1−p) weight, so no task drops out."},
    )

    success_replay: bool = field(
        default=False,
        metadata={
            "help": "RLEP: keep verified successes (per task, with their policy versions; refilled from the trajectory "
            "store on a resume) and mix them into later batches as off-policy samples under SAO's decoupled objective "
            "— TreeGRPO (tree=False) adds a task's newest one to a group whose episodes all failed, SAO adds "
            "replay_per_step to each batch (see agentgym.trainers.replay)."
        },
    )
    importance_weight_cap: float | None = field(
        default=5.0,
        metadata={
            "help": "The upper bound of the decoupled objective's importance weights π_proximal/π_behaviour (None: none): "
            "SAO's with off_policy_correction: decoupled, and TreeGRPO's on reflect-then-retry retries and replayed "
            "successes."
        },
    )
    validation_tasks: list[str] | None = field(
        default=None,
        metadata={
            "help": "Task ids of a validation split: every validation_every steps and at the end the policy runs them "
            "greedily, and the checkpoint with the best success is kept in <output_dir>/best-checkpoint; "
            "<output_dir>/validation.json reports it beside the last one."
        },
    )
    validation_env_kwargs: dict = field(
        default_factory=dict,
        metadata={"help": "Merged into env_kwargs for validation (e.g. {split: heldout}, where the tasks live)."},
    )
    validation_every: int = field(default=10, metadata={"help": "Steps between validations (with validation_tasks)."})
    replay_per_task: int = field(default=4, metadata={"help": "success_replay: successes kept per task."})

    def __post_init__(self):
        import torch

        from agentgym.trainers.lora import lora_section

        if self.env_step_budget is not None and self.env_step_budget < 1:
            raise ValueError(f"env_step_budget must be at least 1 (or None), got {self.env_step_budget}")
        if self.env_step_snapshots is not None and self.env_step_snapshots < 1:
            raise ValueError(f"env_step_snapshots must be at least 1 (or None), got {self.env_step_snapshots}")
        if self.importance_weight_cap is not None and self.importance_weight_cap < 1:
            raise ValueError(f"importance_weight_cap must be at least 1 (or None), got {self.importance_weight_cap}")
        if self.validation_every < 1:
            raise ValueError(f"validation_every must be at least 1, got {self.validation_every}")
        if self.validation_tasks is not None and not self.validation_tasks:
            raise ValueError("validation_tasks is empty: list task ids, or leave it out")
        if self.replay_per_task < 1:
            raise ValueError(f"replay_per_task must be at least 1, got {self.replay_per_task}")

        if self.task_allocation not in TASK_ALLOCATIONS:
            raise ValueError(f"task_allocation must be one of {TASK_ALLOCATIONS}, got {self.task_allocation!r}")
        if not 0 < self.allocation_decay <= 1 or self.allocation_floor < 0:
            raise ValueError("allocation_decay must be in (0, 1] and allocation_floor >= 0")

        self.check_memory()
        lora_section(self.peft)  # a bad peft section fails here, not after the model loaded
        self.image_config()  # a bad images section fails here, not at the first rollout
        self.check_rollout_backend()
        if self.bf16 is None:
            self.bf16 = torch.cuda.is_available()
        super().__post_init__()
