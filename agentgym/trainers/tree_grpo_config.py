"""TreeGRPOConfig: TRL's GRPOConfig plus the rollout settings (AgentgymConfig) and the tree and advantage settings of TreeGRPOTrainer."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentgym.rollout.reflect import LOCATORS
from agentgym.rollout.tree import STRATEGIES
from agentgym.trainers.advantages import BASELINES, SCALES
from agentgym.trainers.base_config import AgentgymConfig

__all__ = ["TreeGRPOConfig"]


@dataclass
class TreeGRPOConfig(AgentgymConfig):
    """Configuration for :class:`~agentgym.trainers.tree_grpo.TreeGRPOTrainer`.

    Everything of :class:`trl.GRPOConfig` applies (loss types, ``epsilon``/``epsilon_high``/``delta``
    clipping, ``beta``, ``importance_sampling_level``, ``off_policy_mask_threshold``,
    ``top_entropy_quantile``, ...) with two changes of meaning: each dataset row is one task (its
    group is grown on one process), and ``num_generations`` is the group: the linear episodes per
    task with ``tree=False``, the roots of the task's tree with ``tree=True`` (GRPOConfig still
    checks that ``per_device_train_batch_size × processes × steps_per_generation`` is divisible by
    it). ``temperature``,
    ``top_p`` and ``top_k`` are the agent's sampling settings; ``max_turn_tokens`` bounds a turn.
    The rollout settings and shared defaults are :class:`~agentgym.trainers.base_config.AgentgymConfig`'s.
    """

    tree: bool = field(
        default=True,
        metadata={
            "help": "Grow a turn-level tree per task (per-turn advantages); False: linear episodes, group baseline."
        },
    )
    tree_strategy: str = field(default="uniform", metadata={"help": f"Tree allocation: one of {STRATEGIES}."})
    tree_max_leaves: int | None = field(default=8, metadata={"help": "Leaves per tree."})
    tree_max_env_steps: int | None = field(default=None, metadata={"help": "Env steps (nodes) per tree."})
    tree_branch_every: int = field(default=1, metadata={"help": "uniform: branch after every k-th turn."})
    tree_branches: int = field(default=2, metadata={"help": "uniform: continuations per branch point."})
    tree_max_resample: int = field(
        default=0,
        metadata={
            "help": "Resamples to make siblings differ. 0 keeps siblings independent draws (unbiased advantages)."
        },
    )
    advantage_baseline: str = field(
        default="mean", metadata={"help": f"Baseline: one of {BASELINES} (median: MC-GRPO's robust baseline)."}
    )
    advantage_scale: str | None = field(
        default=None,
        metadata={
            "help": f"Divide advantages by a std: one of {SCALES}. Default: 'group' for linear episodes (GRPO), "
            "'none' for trees (a per-group std biases per-turn advantages; 'batch' only rescales)."
        },
    )
    step_advantage_weight: float = field(
        default=0.0,
        metadata={
            "help": "tree=False only: GiGPO's anchor-state step advantages, added with this weight (ω; GiGPO uses 1) "
            "to the episode advantage: turns taken from an identical observation within a task's group are "
            "compared by their discounted return (step_gamma). 0: off."
        },
    )
    step_gamma: float = field(default=0.95, metadata={"help": "Discount of the returns the step advantages compare."})
    median_pivot: bool = field(
        default=False,
        metadata={
            "help": "tree=False only: MC-GRPO's G+1 rollouts — num_generations + 1 episodes per task, the median baseline, "
            "and the episode whose reward is the median (the pivot, advantage 0) left out of the gradient and of the "
            "loss's token count, so num_generations episodes are trained. Needs advantage_baseline: median and an even "
            "num_generations (an odd group, whose median is one member)."
        },
    )
    reflect_retry: bool = field(
        default=False,
        metadata={
            "help": "tree=False only: reflect-then-retry (R³L) — each failed episode is diagnosed (the policy itself, or "
            "reflect_reviewer), its failure turn located (reflect_locate), forked at that turn's snapshot and retried "
            "with the reflection in context; the retry joins its task's group, trained WITHOUT the reflection, each of "
            "its tokens weighted as SAO's decoupled objective does: w = min(importance_weight_cap, π_learner / π_sampled) "
            "(see agentgym.rollout.reflect)."
        },
    )
    reflect_locate: str = field(
        default="diagnosis", metadata={"help": f"How the failure turn is found: one of {LOCATORS}."}
    )
    reflect_reviewer: str | None = field(
        default=None, metadata={"help": "A model directory whose policy diagnoses failures (None: the policy itself)."}
    )
    reflect_max_tokens: int = field(default=64, metadata={"help": "The diagnosis's length in tokens."})
    reflect_diagnose: bool = field(
        default=True,
        metadata={
            "help": "With reflect_retry: False retries from the failure turn without a reflection (no diagnosis, no note "
            "in the retry's context, so the retry is on-policy and not weighted); reflect_locate must then be grader "
            "or predictor. Separates what the restart point gives from what the language does."
        },
    )
    pivotal_credit: bool = field(
        default=False,
        metadata={
            "help": "With reflect_retry: a failed episode and its retry get loss only on the turns from the fork on."
        },
    )
    positive_weight: float = field(
        default=1.0,
        metadata={"help": "Positive Amplification: successful episodes' advantages are multiplied by this (1: off)."},
    )
    replay_branches: int = field(
        default=0,
        metadata={
            "help": "With success_replay (tree=False): for each group whose episodes all failed, this many episodes "
            "branch from the task's newest replayed success — a fresh env replayed to the success's state after k "
            "turns (k spread along it), the policy playing on from there — and join the group, trained on their own "
            "turns only (see agentgym.trainers.replay). 0: off."
        },
    )
    partial_rollouts: bool = field(
        default=False,
        metadata={
            "help": "tree=False only: APRIL's partial rollouts — each step also runs partial_over_provision × its tasks "
            "extra groups (drawn from the dataset) and the episodes carried over, stops once as many groups as it has "
            "tasks are complete, and carries every unfinished episode (paused at a turn boundary) to the next step, "
            "where it resumes. Tokens sampled by an older policy are weighted as SAO's decoupled objective does "
            "(see agentgym.trainers.partial)."
        },
    )
    partial_over_provision: float = field(
        default=0.5,
        metadata={"help": "partial_rollouts: extra groups per step, as a fraction of its tasks (rounded up)."},
    )
    drop_zero_variance_groups: bool = field(
        default=False,
        metadata={
            "help": "Leave out tasks whose usable outcomes are all equal (no signal); kept if that would leave none."
        },
    )

    def __post_init__(self):
        if self.tree_strategy not in STRATEGIES:
            raise ValueError(f"tree_strategy must be one of {STRATEGIES}, got {self.tree_strategy!r}")
        if self.advantage_baseline not in BASELINES:
            raise ValueError(f"advantage_baseline must be one of {BASELINES}, got {self.advantage_baseline!r}")
        if self.advantage_scale is None:
            self.advantage_scale = "none" if self.tree else "group"
        if self.advantage_scale not in SCALES:
            raise ValueError(f"advantage_scale must be one of {SCALES}, got {self.advantage_scale!r}")
        if self.step_advantage_weight < 0 or not 0 <= self.step_gamma <= 1:
            raise ValueError("step_advantage_weight must be >= 0 and step_gamma in [0, 1]")
        if self.tree and self.step_advantage_weight:
            raise ValueError(
                "step_advantage_weight (GiGPO's anchor-state grouping) is for tree=False: a tree's siblings already "
                "share their state, and its per-turn advantages compare them"
            )
        if self.tree and self.rollout_backend == "gateway":
            raise ValueError(
                "tree=True grows trees through the agent loop; an agent program through the gateway runs linear "
                "episodes: set tree: false with rollout_backend: gateway"
            )
        if self.median_pivot and (self.reflect_retry or self.success_replay):
            raise ValueError("median_pivot needs groups of exactly G+1; reflect_retry and success_replay add to them")
        if self.median_pivot and (self.tree or self.advantage_baseline != "median" or self.num_generations % 2):
            raise ValueError(
                "median_pivot needs tree=False, advantage_baseline='median' and an even num_generations "
                f"(G+1 odd), got tree={self.tree}, advantage_baseline={self.advantage_baseline!r}, "
                f"num_generations={self.num_generations}"
            )
        if self.success_replay and self.tree:
            raise ValueError("success_replay is for tree=False: a replayed success joins a group of linear episodes")
        if self.reflect_retry and self.tree:
            raise ValueError("reflect_retry is for tree=False: a retry branches off one linear episode")
        if self.reflect_locate not in LOCATORS:
            raise ValueError(f"reflect_locate must be one of {LOCATORS}, got {self.reflect_locate!r}")
        if not self.reflect_diagnose and self.reflect_locate == "diagnosis":
            raise ValueError("reflect_diagnose=False locates the failure turn by reflect_locate: grader or predictor")
        if self.pivotal_credit and not self.reflect_retry:
            raise ValueError("pivotal_credit needs reflect_retry (its fork point)")
        if self.tree and self.positive_weight != 1:
            raise ValueError("positive_weight (Positive Amplification) is for tree=False episode advantages")
        if self.positive_weight <= 0 or self.reflect_max_tokens < 1:
            raise ValueError("positive_weight must be > 0 and reflect_max_tokens >= 1")
        if self.task_allocation == "trace":
            if self.median_pivot:
                raise ValueError("median_pivot needs groups of exactly G+1; task_allocation: trace varies their size")
            if self.tree and (self.tree_strategy != "contrast" or self.tree_max_leaves is None):
                raise ValueError(
                    "task_allocation: trace with trees splits the step's leaves (tree_max_leaves per task) across "
                    "tasks and spends each task's share on its prefixes by tree_strategy: contrast; set both"
                )
        if self.reflect_retry and self.rollout_backend == "gateway":
            raise ValueError(
                "reflect_retry forks the agent loop's episode and adds the reflection to its context; an agent program "
                "through the gateway keeps its own context: set reflect_retry: false with rollout_backend: gateway"
            )
        if self.partial_rollouts and (self.tree or self.reflect_retry or self.rollout_backend != "local"):
            raise ValueError(
                "partial_rollouts pauses linear episodes at a turn boundary and resumes them next step: it needs "
                "tree=False, reflect_retry=False and rollout_backend: local (a tree, a retry or an agent program is one "
                "job the runner can only cancel and restart from scratch, which wastes the work APRIL saves)"
            )
        if self.replay_branches < 0 or (self.replay_branches and not self.success_replay):
            raise ValueError("replay_branches needs success_replay (the successes it branches from) and must be >= 0")
        if self.partial_over_provision < 0:
            raise ValueError(f"partial_over_provision must be >= 0, got {self.partial_over_provision}")
        if self.tree and self.advantage_scale == "group":
            raise ValueError(
                "advantage_scale='group' is the biased per-turn normalisation; use 'none' or 'batch' "
                "with tree=True (see agentgym.rollout.tree_values)"
            )
        super().__post_init__()
