"""The training entry point: ``accelerate launch -m agentgym.train --config examples/configs/<x>.yaml`` (or ``agentgym train``).

A config is YAML::

    trainer: tree_grpo          # or sao
    model: tiny                 # a model directory, or "tiny" for the locally built tiny model
    resume: true                # continue from the newest complete checkpoint in output_dir, if any
    output_dir: runs/keychain-tree
    max_steps: 100
    ...                         # any field of TreeGRPOConfig / SAOConfig (GRPOConfig, TrainingArguments)

``key=value`` arguments after the config override its fields (values parsed as YAML), e.g.
``max_steps=2 output_dir=/tmp/run``. The same command runs on one CPU process or, under
``accelerate launch`` with a config from ``examples/accelerate_configs/``, on several processes
or GPUs. Several CPU processes: ``accelerate launch --multi_gpu --num_processes 2 -m
agentgym.train --config X.yaml use_cpu=true`` (torchrun + gloo; accelerate 1.16's ``--cpu
--num_processes 2`` starts a single process unless MPI is set up).

A checkpoint counts as complete when every process wrote its rollout state into it (the last
file written), so a run killed mid-save resumes from the one before.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import yaml

__all__ = ["TRAINERS", "last_complete_checkpoint", "load_config", "main"]

TRAINERS = {
    "tree_grpo": ("agentgym.trainers.tree_grpo:TreeGRPOTrainer", "agentgym.trainers.tree_grpo_config:TreeGRPOConfig"),
    "sao": ("agentgym.trainers.sao:SAOTrainer", "agentgym.trainers.sao_config:SAOConfig"),
}


def load_config(path: str | os.PathLike, overrides: list[str] = ()) -> dict:
    """The YAML config with ``key=value`` overrides applied."""
    config = {key: _number(value) for key, value in (yaml.safe_load(Path(path).read_text()) or {}).items()}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"agentgym train: override {item!r} is not key=value")
        parsed = _number(yaml.safe_load(value))
        # YAML 1.1 reads no/yes/on/off as booleans; save_strategy=no means the string
        config[key] = value if isinstance(parsed, bool) and value.lower() not in ("true", "false") else parsed
    return config


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _number(value):
    """``value``, or its float when it is a number YAML 1.1 leaves as a string (``1e-3``: no dot, so not a float)."""
    return float(value) if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value) else value


def last_complete_checkpoint(output_dir: str | os.PathLike, world_size: int) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` holding the rollout state of all ``world_size`` processes."""
    from agentgym.trainers.tree_grpo import STATE_FILE

    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    steps = sorted((int(m.group(1)), p) for p in folder.iterdir()
                   if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and p.is_dir())
    for _, path in reversed(steps):
        if all((path / STATE_FILE.format(rank=r)).exists() for r in range(world_size)):
            return str(path)
    return None


def _load(target: str):
    from importlib import import_module

    module, _, name = target.partition(":")
    return getattr(import_module(module), name)


def build_trainer(config: dict):
    """The trainer a config describes (model resolved, config class filled)."""
    config = dict(config)
    kind = config.pop("trainer", "tree_grpo")
    if kind not in TRAINERS:
        raise SystemExit(f"agentgym train: trainer must be one of {sorted(TRAINERS)}, got {kind!r}")
    model = str(config.pop("model", "tiny"))
    config.pop("resume", None)
    if model == "tiny":
        from agentgym.models import tiny_model_path

        model = str(tiny_model_path())
    trainer_cls, config_cls = (_load(t) for t in TRAINERS[kind])
    return trainer_cls(model, config_cls(**config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentgym train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a YAML config (see examples/configs/)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of config fields")
    args = parser.parse_args(argv)
    config = load_config(args.config, args.overrides)
    resume = config.get("resume", True)
    trainer = build_trainer(config)
    checkpoint = None
    if resume is True:
        checkpoint = last_complete_checkpoint(trainer.args.output_dir, trainer.accelerator.num_processes)
    elif resume:
        checkpoint = str(resume)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(trainer.args.output_dir)
    trainer.save_state()  # trainer_state.json (the log history) next to the model
    if trainer.accelerator.is_main_process:
        print(f"agentgym train: {trainer.state.global_step} steps on {trainer.accelerator.num_processes} process(es), "
              f"loss {result.training_loss:.4f}, resumed from {checkpoint or 'scratch'}; model in {trainer.args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
