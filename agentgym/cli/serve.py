"""`agentgym serve`: a local model over an OpenAI-compatible HTTP API (:mod:`agentgym.serve`)."""

from __future__ import annotations

import argparse

from agentgym.cli.common import listening, model_dir


def _serve(args: argparse.Namespace) -> int:
    from agentgym.serve import serve

    model_dir(args.model, "--model")
    with listening(args.host, args.port):
        serve(
            args.model,
            host=args.host,
            port=args.port,
            max_batch_size=args.max_batch_size,
            served_model_name=args.served_model_name,
            device=args.device,
            allow_weight_updates=args.allow_weight_updates,
        )
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    serve = commands.add_parser("serve", help="serve a local model over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", required=True, help="a local Hugging Face checkpoint directory")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    serve.add_argument(
        "--max-batch-size", type=int, default=16, help="requests per forward batch (default: %(default)s)"
    )
    serve.add_argument("--served-model-name", help="the model name clients send (default: the --model value)")
    serve.add_argument("--device", help="torch device, e.g. cuda:0 (default: the policy's choice)")
    serve.add_argument(
        "--allow-weight-updates",
        action="store_true",
        help="accept new weights on POST /v1/weights (a trainer's pushes); any client that reaches the server could then replace the model",
    )
    serve.set_defaults(run=_serve)
