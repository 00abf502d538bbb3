"""The `agentgym` command line: list envs, build sandbox images, reap leftover sandboxes, serve a model over an OpenAI-compatible API (more subcommands arrive with later work)."""

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym", description=__doc__.split(":")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    envs = commands.add_parser("envs", help="environments").add_subparsers(dest="action", required=True)
    envs.add_parser("list", help="list registered env ids").set_defaults(run=_envs_list)

    images = commands.add_parser("images", help="sandbox images").add_subparsers(dest="action", required=True)
    build = images.add_parser("build", help="build the base sandbox image offline (debootstrap + docker import)")
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument("--dockerfile", help="build from this Dockerfile instead (needs a reachable registry)")
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
