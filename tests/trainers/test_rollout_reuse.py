"""TreeGRPO's rollouts across steps: a step's whole group batched and in flight at once, envs reset rather than rebuilt, all closed at the end."""

from __future__ import annotations

import pytest
from transformers import TrainerCallback

from agentgym.envs.tool.env import ToolEnv
from agentgym.models import tiny_model_path

TASKS = {f"echo-{i}": "Say anything." for i in range(4)}


def _anything(task, state, transcript):
    return 1.0, True


class CountedEnv(ToolEnv):
    """One turn, any reply succeeds; every instance (forks included) is registered, to check reuse and closing."""

    instances: list[CountedEnv] = []

    def __init__(self, **kwargs):
        super().__init__([], TASKS, check=_anything, max_turns=1, call_timeout=None, variant="counted", **kwargs)
        self.closed = False
        CountedEnv.instances.append(self)

    def close(self):
        self.closed = True
        super().close()


class KeptEnvs(TrainerCallback):
    """After each step: the envs the trainer's runner keeps; raises at ``fail_at`` (a training error)."""

    def __init__(self, trainer, fail_at: int | None = None):
        self.trainer, self.fail_at, self.after_step = trainer, fail_at, []

    def on_step_end(self, args, state, control, **kwargs):
        self.after_step.append(list(self.trainer.runner.kept))
        if state.global_step == self.fail_at:
            raise RuntimeError("a training error")


def _trainer(tmp_path, **overrides):
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    CountedEnv.instances = []
    args = TreeGRPOConfig(
        output_dir=str(tmp_path),
        env_id=f"{__name__}:CountedEnv",
        num_generations=2,
        per_device_train_batch_size=2,  # tasks per step
        max_turn_tokens=2,
        rollout_concurrency=1,
        beta=0.0,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        **overrides,
    )
    return TreeGRPOTrainer(str(tiny_model_path()), args)


def test_linear_steps_batch_their_group_and_reuse_envs_which_an_error_closes(tmp_path):
    trainer = _trainer(tmp_path, tree=False, max_steps=3)
    # 2 tasks × 2 episodes: all four in flight and in one policy batch, whatever rollout_concurrency says.
    assert trainer.runner.config.concurrency == 4 and trainer.policy.max_batch_size == 4
    probes = len(CountedEnv.instances)  # the env that listed the tasks (closed)
    kept = KeptEnvs(trainer, fail_at=2)
    trainer.add_callback(kept)
    with pytest.raises(RuntimeError, match="a training error"):
        trainer.train()
    first, second = kept.after_step
    assert len(first) == 4 and sorted(map(id, second)) == sorted(map(id, first))  # reset, not rebuilt
    assert len(CountedEnv.instances) == probes + 4
    assert all(env.closed for env in CountedEnv.instances) and not trainer.runner.kept


def test_tree_steps_keep_their_root_envs_and_close_every_fork(tmp_path):
    trainer = _trainer(tmp_path, tree=True, tree_max_leaves=4, max_steps=2)
    assert trainer.runner.config.concurrency == 2 and trainer.policy.max_batch_size == 4
    kept = KeptEnvs(trainer)
    trainer.add_callback(kept)
    trainer.train()
    first, second = kept.after_step
    assert len(first) == 2 and sorted(map(id, second)) == sorted(map(id, first))
    forks = [env for env in CountedEnv.instances[1:] if env not in first]
    assert forks  # each tree forked its root's reset state for the second root
    assert all(env.closed for env in CountedEnv.instances) and not trainer.runner.kept
