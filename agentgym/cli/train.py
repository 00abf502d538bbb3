"""`agentgym train`: one training process from a YAML config, or several with `--launch ACCELERATE_CONFIG`."""

from __future__ import annotations

import argparse


def _train(args: argparse.Namespace) -> int:
    from agentgym.train import launch
    from agentgym.train import main as train_main

    argv = ["--config", args.config, *args.overrides]
    return launch(args.launch, argv) if args.launch else train_main(argv)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    train = commands.add_parser(
        "train",
        help="train a policy on an env (TreeGRPO or SAO) from a YAML config",
        description="One process; several with --launch and a config from examples/accelerate_configs/ "
        "(what `accelerate launch --config_file ACCELERATE_CONFIG -m agentgym.train --config X.yaml` runs, "
        "checked first: a launch this machine cannot run is one line before any process starts).",
    )
    train.add_argument("--config", required=True, help="a YAML config (see examples/configs/)")
    train.add_argument(
        "--launch",
        metavar="ACCELERATE_CONFIG",
        help="run under accelerate with this config: cpu_ddp.yaml (CPU processes, with use_cpu=true), ddp.yaml, "
        "fsdp2.yaml, deepspeed_zero{2,3}.yaml (GPUs)",
    )
    train.add_argument("overrides", nargs="*", help="key=value overrides of config fields, e.g. max_steps=10")
    train.set_defaults(run=_train)
