"""Every example YAML config names a trainer and only fields its config class has; overrides parse as YAML; checkpoint completeness."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentgym.train import TRAINERS, _load, last_complete_checkpoint, load_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "examples" / "configs").glob("*.yaml"))
ACCELERATE = sorted((Path(__file__).resolve().parents[2] / "examples" / "accelerate_configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_builds_its_config_class(path, tmp_path):
    config = load_config(path, [f"output_dir={tmp_path}"])
    config_cls = _load(TRAINERS[config.pop("trainer")][1])
    config.pop("model"), config.pop("resume")
    args = config_cls(**config)
    assert args.report_to == ["tensorboard"]


def test_every_env_kind_has_a_config_per_trainer():
    names = {p.stem for p in CONFIGS}
    for kind in ("keychain", "bfcl", "humaneval", "miniwob", "desktop"):
        assert {f"{kind}-tree_grpo", f"{kind}-sao"} <= names


def test_accelerate_configs_parse():
    kinds = {yaml.safe_load(p.read_text())["distributed_type"] for p in ACCELERATE}
    assert kinds == {"NO", "MULTI_GPU", "FSDP", "DEEPSPEED"}


def test_overrides_keep_yaml_booleans_as_words(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer: sao\n")
    config = load_config(path, ["save_strategy=no", "max_steps=3", "tree=false", "env_kwargs={num_tasks: 4}"])
    assert config == {"trainer": "sao", "save_strategy": "no", "max_steps": 3, "tree": False,
                      "env_kwargs": {"num_tasks": 4}}


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
