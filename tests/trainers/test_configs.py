"""Every example YAML config names a trainer and only fields its config class has; overrides parse as YAML; checkpoint completeness; the launch, resume and learning-signal guards."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from agentgym.train import OWN_KEYS, TRAINERS, _load, last_complete_checkpoint, load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "examples" / "configs").glob("*.yaml"))
ACCELERATE = sorted((Path(__file__).resolve().parents[2] / "examples" / "accelerate_configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_builds_its_config_class(path, tmp_path):
    config = load_config(path, [f"output_dir={tmp_path}"])
    config_cls = _load(TRAINERS[config["trainer"]][1])
    args = config_cls(**{k: v for k, v in config.items() if k not in OWN_KEYS})  # the launcher's own keys aside
    assert args.report_to == ["tensorboard"]


def test_every_env_kind_has_a_config_per_trainer():
    names = {p.stem for p in CONFIGS}
    for kind in ("keychain", "calculator", "bfcl", "humaneval", "miniwob", "desktop", "scienceworld", "textworld"):
        assert {f"{kind}-tree_grpo", f"{kind}-sao"} <= names


def test_accelerate_configs_parse():
    kinds = {yaml.safe_load(p.read_text())["distributed_type"] for p in ACCELERATE}
    assert kinds == {"NO", "MULTI_GPU", "FSDP", "DEEPSPEED"}


def test_overrides_keep_yaml_booleans_as_words(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer: sao\n")
    config = load_config(path, ["save_strategy=no", "max_steps=3", "tree=false", "env_kwargs={num_tasks: 4}"])
    assert config == {
        "trainer": "sao",
        "save_strategy": "no",
        "max_steps": 3,
        "tree": False,
        "env_kwargs": {"num_tasks": 4},
    }


def test_last_complete_checkpoint_needs_every_rank(tmp_path):
    for step, ranks in ((1, [0, 1]), (2, [0, 1]), (3, [0])):  # checkpoint-3 was cut short by a kill
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        for rank in ranks:
            (folder / f"agentgym_state-rank{rank}.json").write_text("{}")
    assert last_complete_checkpoint(tmp_path, world_size=2) == str(tmp_path / "checkpoint-2")
    assert last_complete_checkpoint(tmp_path, world_size=1) == str(tmp_path / "checkpoint-3")
    assert last_complete_checkpoint(tmp_path / "missing", world_size=1) is None


def test_exponent_numbers_are_floats_in_files_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer: sao\nlearning_rate: 3e-4\nrun_name: 1e5x\n")
    config = load_config(path, ["epsilon=2E-1", "warmup_ratio=.5e-1"])
    assert (config["learning_rate"], config["epsilon"], config["warmup_ratio"]) == (3e-4, 0.2, 0.05)
    assert config["run_name"] == "1e5x"


def test_a_config_must_name_its_trainer_and_output_dir(tmp_path):
    from agentgym.train import ConfigError, build_trainer

    with pytest.raises(ConfigError, match="`trainer` must be one of sao, tree_grpo; it sets none"):
        build_trainer({"output_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="sets no output_dir"):
        build_trainer({"trainer": "sao"})
    with pytest.raises(ConfigError, match="unknown warm_start key 'epoch'; did you mean 'epochs'"):
        build_trainer({"trainer": "sao", "output_dir": str(tmp_path), "warm_start": {"epoch": 1}})
    with pytest.raises(ConfigError, match="warm_start: max_rounds must be >= 1"):
        build_trainer(
            {
                "trainer": "sao",
                "output_dir": str(tmp_path),
                "warm_start": {"max_rounds": 0},
                "env_id": "agentgym.envs.tool.keychain:KeyChainEnv",
            }
        )
    with pytest.raises(
        ConfigError, match="warm_start: agentgym/tool.bfcl-multi-turn-base-v0 does not script demonstrations"
    ):
        build_trainer(
            {
                "trainer": "sao",
                "output_dir": str(tmp_path),
                "warm_start": True,
                "env_id": "agentgym/tool.bfcl-multi-turn-base-v0",
            }
        )
    with pytest.raises(ConfigError, match="tree_strategy must be one of"):  # the config class's own checks
        build_trainer({"trainer": "tree_grpo", "output_dir": str(tmp_path), "tree_strategy": "random"})


def test_processes_that_did_not_join_one_run_are_refused(monkeypatch):
    from agentgym.train import ConfigError, _check_world_size

    monkeypatch.setenv("WORLD_SIZE", "8")  # e.g. ddp.yaml on a machine without GPUs: 8 runs of world size 1
    with pytest.raises(ConfigError, match="started 8 processes but they did not join one run .world size 1."):
        _check_world_size(1)
    _check_world_size(8)
    monkeypatch.delenv("WORLD_SIZE")
    _check_world_size(1)


def test_two_runs_cannot_share_an_output_dir(tmp_path):
    from agentgym.train import ConfigError, _claim_output_dir

    lock = _claim_output_dir(str(tmp_path / "run"))
    try:
        with pytest.raises(ConfigError, match=rf"run is in use by another training run \(pid {os.getpid()}\)"):
            _claim_output_dir(str(tmp_path / "run"))
    finally:
        lock.close()
    _claim_output_dir(str(tmp_path / "run")).close()  # free again once the first run ended


def test_resuming_with_another_max_steps_is_refused(tmp_path):
    from agentgym.train import ConfigError, _check_resumable

    (tmp_path / "trainer_state.json").write_text(json.dumps({"max_steps": 100, "global_step": 20}))
    _check_resumable(str(tmp_path), 100)
    with pytest.raises(ConfigError, match="max_steps=100, .* max_steps=200 would not take effect"):
        _check_resumable(str(tmp_path), 200)


def test_learning_signal_of_a_logged_step():
    from agentgym.train import has_learning_signal

    assert has_learning_signal({"groups/zero_variance_frac": 1.0, "rollout/success_rate": 0.0}) is False
    assert has_learning_signal({"groups/zero_variance_frac": 0.75}) is True
    assert has_learning_signal({"rollout/success_rate": 0.0, "rollout/reward": 0.0}) is False  # SAO
    assert has_learning_signal({"rollout/success_rate": 0.125}) is True
    assert has_learning_signal({"loss": 0.0}) is None


def test_a_ctrl_c_that_python_dropped_still_ends_the_run(capsys):
    import asyncio
    import signal

    from agentgym.train import _interrupt_callback, _interrupts_kept

    class Collected:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # Ctrl-C while the garbage collector runs a finalizer

    async def absorbing():
        try:
            await asyncio.sleep(0)
            signal.raise_signal(signal.SIGINT)  # Ctrl-C during a rollout whose cleanup returns instead of raising
            await asyncio.sleep(1)
        except (asyncio.CancelledError, KeyboardInterrupt):
            pass

    step = _interrupt_callback()
    before = signal.getsignal(signal.SIGINT)
    for drop in (Collected, lambda: asyncio.run(absorbing())):
        with pytest.raises(KeyboardInterrupt), _interrupts_kept():
            step.on_step_begin(None, None, None)  # nothing pending: the step runs
            drop()  # Python drops the KeyboardInterrupt: the run would go on to its end
            with pytest.raises(KeyboardInterrupt):
                step.on_step_end(None, None, None)  # ... but the next step boundary ends it
            step.on_step_begin(None, None, None)
    with pytest.raises(KeyboardInterrupt), _interrupts_kept():
        Collected()  # dropped in the last step: leaving train() says so
    assert signal.getsignal(signal.SIGINT) is before
    assert "Exception ignored" not in capsys.readouterr().err  # no traceback for a dropped interrupt
    with _interrupts_kept():
        step.on_step_end(None, None, None)  # a new run starts uninterrupted


def test_steps_without_learning_signal_warn_once_and_name_the_warm_start(capsys):
    from types import SimpleNamespace

    from agentgym.train import NO_SIGNAL_PATIENCE, _learning_signal_callback

    callback, state = _learning_signal_callback(), SimpleNamespace(is_world_process_zero=True)
    quiet = {"groups/zero_variance_frac": 1.0}
    for _ in range(NO_SIGNAL_PATIENCE - 1):
        callback.on_log(None, state, None, logs=quiet)
    callback.on_log(None, state, None, logs={"groups/zero_variance_frac": 0.5})  # a signal resets the count
    for _ in range(NO_SIGNAL_PATIENCE - 1):
        callback.on_log(None, state, None, logs=quiet)
    assert capsys.readouterr().err == ""
    for _ in range(3):
        callback.on_log(None, state, None, logs=quiet)
    err = capsys.readouterr().err
    assert err.count("no learning signal") == 1 and "warm_start: true" in err


def test_both_trainers_and_configs_build_on_one_shared_base(tmp_path):
    import dataclasses

    import torch

    from agentgym.trainers import (
        AgentgymConfig,
        AgentgymTrainer,
        RolloutArguments,
        SAOConfig,
        SAOTrainer,
        TreeGRPOConfig,
        TreeGRPOTrainer,
    )

    assert issubclass(TreeGRPOTrainer, AgentgymTrainer) and issubclass(SAOTrainer, AgentgymTrainer)
    shared = {f.name: f for f in dataclasses.fields(AgentgymConfig)}
    rollout = {f.name for f in dataclasses.fields(RolloutArguments)}
    assert rollout | {"bf16", "activation_checkpointing", "logging_steps", "report_to"} <= set(shared)
    for config_cls in (TreeGRPOConfig, SAOConfig):
        assert issubclass(config_cls, AgentgymConfig)
        fields = {f.name: f for f in dataclasses.fields(config_cls)}
        for name in rollout | {"bf16", "report_to"}:
            assert fields[name].default == shared[name].default and fields[name].metadata["help"]
        args = config_cls(output_dir=str(tmp_path), report_to="none")
        assert args.bf16 == torch.cuda.is_available()  # resolved once, by the shared base


def test_gigpo_step_advantages_are_for_linear_episodes_only(tmp_path):
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert TreeGRPOConfig(tree=False, step_advantage_weight=1.0, **common).step_gamma == 0.95
    with pytest.raises(ValueError, match="for tree=False"):
        TreeGRPOConfig(tree=True, step_advantage_weight=1.0, **common)
    with pytest.raises(ValueError, match="step_gamma"):
        TreeGRPOConfig(tree=False, step_advantage_weight=1.0, step_gamma=1.5, **common)
