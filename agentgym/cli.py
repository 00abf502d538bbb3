"""The `agentgym` command line: list envs, build sandbox images, reap leftover sandboxes, serve a model over an OpenAI-compatible API, evaluate a model on a suite, train."""

from __future__ import annotations

import argparse
import json
import sys


def _envs_list(args: argparse.Namespace) -> int:
    import gymnasium

    from agentgym.registration import registered_env_ids

    for env_id in registered_env_ids():
        entry = gymnasium.spec(env_id).entry_point
        print(f"{env_id:40} {entry if isinstance(entry, str) else entry.__qualname__}")
    return 0


def _images_build(args: argparse.Namespace) -> int:
    if args.desktop:
        if args.dockerfile:
            raise SystemExit("agentgym images build: --desktop is built from Debian packages; it takes no --dockerfile")
        from agentgym.sandbox.desktop import build_desktop_image

        print(build_desktop_image(force=args.force))
        return 0
    from agentgym.sandbox.images import build_base_image

    tag = build_base_image(force=args.force, dockerfile=args.dockerfile)
    print(tag)
    return 0


def _sandbox_gc(args: argparse.Namespace) -> int:
    from agentgym.sandbox.docker import gc

    report = gc(all=args.all)
    print(json.dumps(report, indent=2, default=str))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from agentgym.rollout.server import serve

    serve(args.model, host=args.host, port=args.port, max_batch_size=args.max_batch_size,
          served_model_name=args.served_model_name, device=args.device)
    return 0


def _make_policy(args: argparse.Namespace):
    """``--policy``: an http(s) URL, a local model directory, ``oracle`` or ``nonsense`` (see ``agentgym eval --help``)."""
    from pathlib import Path

    from agentgym.eval import oracles

    if args.policy == "oracle":
        return oracles.oracle_for
    if args.policy == "nonsense":
        return oracles.NonsensePolicy()
    if args.policy.startswith(("http://", "https://")):
        if not args.model:
            raise SystemExit("agentgym eval: --model is required with an endpoint URL")
        from agentgym.rollout.openai_policy import OpenAIPolicy

        return OpenAIPolicy(args.policy, args.model, tokenizer=args.tokenizer)
    if Path(args.policy).is_dir():
        from agentgym.rollout.hf_policy import HFPolicy

        return HFPolicy(args.policy)
    raise SystemExit(f"agentgym eval: --policy {args.policy!r} is not a URL, a model directory, 'oracle' or 'nonsense'")


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = ("success_rate", "success_ci95", *(f"pass@{j}" for j in summary["metrics"]["pass_at_k"]), "mean_turns",
               "env_error_rate")

    def cells(metrics: dict) -> list[str]:
        values = {"success_rate": metrics["success_rate"], "success_ci95": metrics["success_ci95"],
                  **{f"pass@{j}": v for j, v in metrics["pass_at_k"].items()},
                  "mean_turns": metrics["mean_turns"], "env_error_rate": metrics["env_error_rate"]}
        return [_fmt(values[c]) for c in columns]

    table = Table(title=f"{summary['suite']} · {summary['model']} · k={summary['k']} · "
                        f"{summary['episodes']} episodes of {summary['tasks']} tasks")
    for column in ("category", *columns):
        table.add_column(column)
    for category, metrics in summary["by_category"].items():
        table.add_row(category, *cells(metrics))
    table.add_row("all", *cells(summary["metrics"]), style="bold")
    console = Console()
    if not console.is_terminal:
        console.width = 160  # rich assumes 80 columns for a pipe, which would cut the headers
    console.print(table)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _eval(args: argparse.Namespace) -> int:
    import asyncio

    from agentgym.eval.harness import PolicyUnavailableError, evaluate
    from agentgym.eval.suites import load_suite

    if not args.suite or not args.policy:
        raise SystemExit("agentgym eval: --suite and --policy are required (or: agentgym eval compare RUN_A RUN_B)")
    try:
        suite = load_suite(args.suite).filter(args.tasks)
    except ValueError as exc:
        raise SystemExit(f"agentgym eval: {exc}") from None
    policy = _make_policy(args)
    out = args.out or f"runs/eval-{suite.name}"
    model = args.model or ("oracle" if args.policy == "oracle" else None)

    async def run() -> dict:
        try:
            return await evaluate(suite, policy, k=args.k, concurrency=args.concurrency, out_dir=out,
                                  max_turns=args.max_turns, timeout=args.timeout, seed=args.seed, model=model)
        finally:
            if hasattr(policy, "aclose"):
                await policy.aclose()

    try:
        summary = asyncio.run(run())
    except PolicyUnavailableError as exc:
        print(f"agentgym eval: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:  # e.g. --out holds a run with other settings
        print(f"agentgym eval: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"agentgym eval: interrupted; finished episodes are kept in {out}/results.jsonl "
              "(rerun the same command to resume)", file=sys.stderr)
        return 130
    _print_summary(summary)
    print(f"results in {out}")
    return 0


def _eval_compare(args: argparse.Namespace) -> int:
    from agentgym.eval.harness import load_results
    from agentgym.eval.metrics import compare
    from agentgym.eval.report import compare_report

    result = compare(load_results(args.run_a), load_results(args.run_b), seed=args.seed)
    print(f"A = {args.run_a}\nB = {args.run_b}")
    for key, value in result.items():
        print(f"{key:18} {_fmt(value)}")
    print(f"report: {compare_report(args.run_a, args.run_b)}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from agentgym.train import main as train_main

    return train_main(["--config", args.config, *args.overrides])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__.split(":")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    envs = commands.add_parser("envs", help="environments").add_subparsers(dest="action", required=True)
    envs.add_parser("list", help="list registered env ids").set_defaults(run=_envs_list)

    images = commands.add_parser("images", help="sandbox images").add_subparsers(dest="action", required=True)
    build = images.add_parser("build", help="build the base sandbox image offline (debootstrap + docker import)")
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument("--dockerfile", help="build from this Dockerfile instead (needs a reachable registry)")
    build.add_argument("--desktop", action="store_true",
                       help="build the desktop image for the GUI envs instead (Xvfb, openbox, xdotool, apps)")
    build.set_defaults(run=_images_build)

    sandbox = commands.add_parser("sandbox", help="sandboxes").add_subparsers(dest="action", required=True)
    gc = sandbox.add_parser("gc", help="remove containers and snapshot images left by dead processes")
    gc.add_argument("--all", action="store_true", help="remove every agentgym container and snapshot image")
    gc.set_defaults(run=_sandbox_gc)

    serve = commands.add_parser("serve", help="serve a local model over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", required=True, help="a local Hugging Face checkpoint directory")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    serve.add_argument("--max-batch-size", type=int, default=16, help="requests per forward batch (default: %(default)s)")
    serve.add_argument("--served-model-name", help="the model name clients send (default: the --model value)")
    serve.add_argument("--device", help="torch device, e.g. cuda:0 (default: the policy's choice)")
    serve.set_defaults(run=_serve)

    evaluation = commands.add_parser("eval", help="evaluate a policy on a suite (or compare two runs)",
                                     description="Run k samples of every task of a suite; results.jsonl, summary.json "
                                                 "and report.html go to --out, and a rerun resumes.")
    evaluation.add_argument("--suite", help="humaneval, repofix, bfcl-base, bfcl-miss_func, bfcl-miss_param, "
                                            "bfcl-long_context, bfcl, or a JSONL/YAML suite file")
    evaluation.add_argument("--policy", help="an http(s) OpenAI-compatible endpoint URL, a local model directory, "
                                             "'oracle' (the tasks' known solutions) or 'nonsense' (gibberish)")
    evaluation.add_argument("--model", help="the model name the endpoint serves (required with a URL)")
    evaluation.add_argument("--tokenizer", help="with a URL: the served model's tokenizer, for token mode")
    evaluation.add_argument("-k", type=int, default=1, help="samples per task (default: %(default)s)")
    evaluation.add_argument("--concurrency", type=int, default=8, help="episodes at once (default: %(default)s)")
    evaluation.add_argument("--out", help="the run directory (default: runs/eval-<suite>)")
    evaluation.add_argument("--tasks", help="only these task ids: a comma-separated list of ids or globs")
    evaluation.add_argument("--max-turns", type=int, help="turns per episode (default: the env's limit)")
    evaluation.add_argument("--timeout", type=float, help="seconds per episode (default: none)")
    evaluation.add_argument("--seed", type=int, default=0, help="base of the reset seeds (default: %(default)s)")
    evaluation.set_defaults(run=_eval)
    compare = evaluation.add_subparsers(dest="action").add_parser("compare", help="paired difference of two runs")
    compare.add_argument("run_a", help="a run directory (or its results.jsonl)")
    compare.add_argument("run_b", help="another run directory")
    compare.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    compare.set_defaults(run=_eval_compare)

    train = commands.add_parser("train", help="train a policy on an env (TreeGRPO or SAO) from a YAML config",
                                description="One process; for several, run "
                                            "`accelerate launch -m agentgym.train --config X.yaml`.")
    train.add_argument("--config", required=True, help="a YAML config (see examples/configs/)")
    train.add_argument("overrides", nargs="*", help="key=value overrides of config fields, e.g. max_steps=10")
    train.set_defaults(run=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from agentgym.sandbox.base import SandboxUnavailableError

    try:
        return args.run(args)
    except SandboxUnavailableError as exc:
        print(f"agentgym: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
