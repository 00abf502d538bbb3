"""`agentgym train`: one training process from a YAML config (several: `accelerate launch -m agentgym.train`)."""

from __future__ import annotations

import argparse


def _train(args: argparse.Namespace) -> int:
    from agentgym.train import main as train_main

    return train_main(["--config", args.config, *args.overrides])


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    train = commands.add_parser(
        "train",
        help="train a policy on an env (TreeGRPO or SAO) from a YAML config",
        description="One process; for several, run `accelerate launch -m agentgym.train --config X.yaml`.",
    )
    train.add_argument("--config", required=True, help="a YAML config (see examples/configs/)")
    train.add_argument("overrides", nargs="*", help="key=value overrides of config fields, e.g. max_steps=10")
    train.set_defaults(run=_train)
