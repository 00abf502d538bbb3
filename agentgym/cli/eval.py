"""`agentgym eval` and `agentgym eval compare`: a policy on a suite, and the paired difference of two runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgym.cli.common import UsageError, fmt, model_dir


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help text at spaces only, so names like bfcl-miss_func stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _make_policy(args: argparse.Namespace):
    """``--policy``: an http(s) URL, a local model directory, ``oracle`` or ``nonsense`` (see ``agentgym eval --help``)."""
    from agentgym.eval import oracles
    from agentgym.models import BUILT_IN_MODELS

    if args.policy == "oracle":
        return oracles.oracle_for
    if args.policy in ("scripted", "scripted-flawed"):
        from agentgym.eval.scripted import IMPERFECT, scripted_agent_for

        return scripted_agent_for(IMPERFECT if args.policy == "scripted-flawed" else ())
    if args.policy == "nonsense":
        return oracles.NonsensePolicy()
    if args.policy.startswith(("http://", "https://")):
        if not args.model:
            raise UsageError("--model is required with an endpoint URL")
        from agentgym.rollout.openai_policy import OpenAIPolicy

        return OpenAIPolicy(args.policy, args.model, tokenizer=args.tokenizer)
    if args.policy in BUILT_IN_MODELS or Path(args.policy).is_dir():
        from agentgym.rollout.hf_policy import HFPolicy

        return HFPolicy(model_dir(args.policy, "--policy"))
    raise UsageError(
        f"--policy {args.policy!r} is not a URL, a model directory, 'tiny', 'oracle', 'scripted', 'scripted-flawed' "
        "or 'nonsense'"
    )


def _print_summary(summary: dict, results: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = (
        "success_rate",
        "success_ci95",
        *(f"pass@{j}" for j in summary["metrics"]["pass_at_k"]),
        *(f"pass^{j}" for j in summary["metrics"].get("pass_hat_k", {})),
        "mean_turns",
        "env_error_rate",
        "program_error_rate",
    )

    def cells(metrics: dict) -> list[str]:
        values = {
            "success_rate": metrics["success_rate"],
            "success_ci95": metrics["success_ci95"],
            **{f"pass@{j}": v for j, v in metrics["pass_at_k"].items()},
            **{f"pass^{j}": v for j, v in metrics.get("pass_hat_k", {}).items()},
            "mean_turns": metrics["mean_turns"],
            "env_error_rate": metrics["env_error_rate"],
            "program_error_rate": metrics.get("program_error_rate"),
        }
        return [fmt(values[c]) for c in columns]

    table = Table(
        title=f"{summary['suite']} · {summary['model']} · k={summary['k']} · "
        f"{summary['episodes']} episodes of {summary['tasks']} tasks"
    )
    for column in ("category", *columns):
        table.add_column(column)
    for category, metrics in summary["by_category"].items():
        table.add_row(category, *cells(metrics))
    table.add_row("all", *cells(summary["metrics"]), style="bold")
    console = Console()
    if not console.is_terminal:
        console.width = 160  # rich assumes 80 columns for a pipe, which would cut the headers
    console.print(table)
    errors = summary.get("errors") or {}
    if errors:
        print("failed episodes by error: " + ", ".join(f"{kind} {count}" for kind, count in errors.items()))
    retried = sum(bool((r.get("trajectory") or {}).get("metadata", {}).get("failures")) for r in results)
    if retried:
        print(
            f"{retried} episode(s) were retried after a failed attempt (an env error, a lost Ray worker or node, a "
            "timeout): each result is its last attempt; results.jsonl lists the failed ones under the trajectory's "
            "metadata.failures"
        )
    _print_overflows(results)


def _print_overflows(results: list[dict]) -> None:
    """What the episodes that outgrew the model's context window say about the settings (plain and branching runs)."""
    overflows = [r for r in results if str(r.get("error") or "").startswith("context_overflow")]
    at_start = sum(r["turns"] == 0 for r in overflows)
    if at_start:
        print(
            f"{at_start} episode(s) failed before the model answered: the task's prompt plus --max-tokens does not "
            "fit the model's context window, which no turn limit changes; lower --max-tokens if the prompt itself "
            "fits, else use a model or server with a longer context window (counted as failures)"
        )
    if len(overflows) > at_start:
        print(
            f"{len(overflows) - at_start} episode(s) outgrew the model's context window mid-episode (counted as "
            "failures): lower --max-turns, or serve the model with a longer context"
        )


def _eval(args: argparse.Namespace) -> int:
    import asyncio

    from agentgym.eval.harness import PolicyUnavailableError, evaluate
    from agentgym.eval.suites import load_suite
    from agentgym.rollout.agent import AgentConfig

    if not args.suite or not args.policy:
        raise UsageError("--suite and --policy are required (or: agentgym eval compare RUN_A RUN_B)")
    if args.branching:
        return _eval_branching(args)
    try:
        suite = load_suite(args.suite).filter(args.tasks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_suite_envs(suite)
    memory = None
    if args.memory:
        from agentgym.memory.config import MemoryConfig

        try:
            memory = MemoryConfig(args.memory, mode=args.memory_mode)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    ray = None
    if args.ray:
        from agentgym.distributed.config import RayConfig

        try:
            ray = RayConfig(address=args.ray, env_workers=args.env_workers, envs_per_worker=args.envs_per_worker)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.env_workers is not None:
        raise UsageError("--env-workers needs --ray ADDRESS")
    images = _image_config(args)
    config = AgentConfig(sampling=_sampling(args))
    program = None
    if args.program:
        from agentgym.gateway.programs import load_program

        try:  # a command line (several words) or module:function
            program = load_program(args.program.split() if " " in args.program.strip() else args.program)
        except (ValueError, ImportError, AttributeError) as exc:
            raise UsageError(f"--program {args.program!r}: {exc}") from None
    policy = _make_policy(args)
    if program is not None and getattr(policy, "chat_format", None) is None:
        raise UsageError("--program needs a policy in token mode: a local model, or a URL with --tokenizer")
    out = args.out or f"runs/eval-{suite.name}"
    model = args.model or ("oracle" if args.policy == "oracle" else None)

    async def run() -> dict:
        try:
            return await evaluate(
                suite,
                policy,
                k=args.k,
                concurrency=args.concurrency,
                out_dir=out,
                max_turns=args.max_turns,
                timeout=args.timeout,
                seed=args.seed,
                agent_config=config,
                model=model,
                memory=memory,
                screenshots=args.screenshots,
                images=images,
                ray=ray,
                program=program,
            )
        finally:
            if hasattr(policy, "aclose"):
                await policy.aclose()

    try:
        summary = asyncio.run(run())
    except PolicyUnavailableError as exc:
        print(f"agentgym eval: {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:  # e.g. --out holds a run with other settings
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print(
            f"agentgym eval: interrupted; finished episodes are kept in {out}/results.jsonl "
            "(rerun the same command to resume)",
            file=sys.stderr,
        )
        return 130
    from agentgym.eval.report import load_run

    _print_summary(summary, load_run(out)[1])
    print(f"results in {out}")
    return 0


_BRANCHING_EXCLUDES = {"memory": "--memory", "ray": "--ray", "images": "--images", "screenshots": "--screenshots"}


def _eval_branching(args: argparse.Namespace) -> int:
    """``agentgym eval --branching``: branching evaluation and linear Monte Carlo at the same token budget, per seed."""
    import asyncio

    from agentgym.eval.branching import BranchingConfig, check_user_side, run_branching, run_monte_carlo, summarize_run
    from agentgym.eval.harness import RESULTS, load_results
    from agentgym.eval.suites import load_suite
    from agentgym.rollout.agent import AgentConfig

    for name, flag in _BRANCHING_EXCLUDES.items():
        if getattr(args, name):
            raise UsageError(f"{flag} does not apply to --branching")
    if args.k != 1:
        raise UsageError("-k does not apply to --branching (the token budget sets how many episodes run)")
    if args.seeds < 1:
        raise UsageError(f"--seeds must be at least 1, got {args.seeds}")
    if not 0 <= args.mc_chance <= 1:
        raise UsageError(f"--mc-chance must be in [0, 1], got {args.mc_chance:g}")
    behaviours = tuple(b.strip() for b in (args.behaviours or "").split(",") if b.strip()) or BranchingConfig.behaviours
    try:
        config = BranchingConfig(
            token_budget=args.token_budget, behaviours=behaviours, max_turns=args.max_turns or BranchingConfig.max_turns
        )
        suite = load_suite(args.suite).filter(args.tasks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_suite_envs(suite)
    try:
        check_user_side(suite)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    policy = _make_policy(args)
    users = _branching_users(args)
    out = args.out or f"runs/branching-{suite.name}"
    agent_config = AgentConfig(sampling=_sampling(args), system_prompt=None)

    async def run() -> dict:
        try:
            for seed in range(args.seed, args.seed + args.seeds):
                for mode, runner in (("branching", run_branching), ("monte_carlo", run_monte_carlo)):
                    await runner(
                        suite,
                        policy,
                        users(mode),
                        config=config,
                        out_dir=out,
                        seed=seed,
                        agent_config=agent_config,
                        model=args.model,
                        user_name=args.user,
                        concurrency=args.concurrency,
                    )
            return summarize_run(out)
        finally:
            if hasattr(policy, "aclose"):
                await policy.aclose()

    try:
        summary = asyncio.run(run())
    except ValueError as exc:  # an env without a simulated user, --out holding other settings
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        print(f"agentgym eval: interrupted; finished tasks are kept in {out} (rerun to resume)", file=sys.stderr)
        return 130
    print(f"{'metric':24} {'branching':>28} {'monte_carlo':>28}")
    for metric in ("failures_per_1k_tokens", "failures", "distinct_failures", "tasks_with_failure", "tokens"):
        cells = [summary[mode]["over_seeds"].get(metric) for mode in ("branching", "monte_carlo")]
        print(f"{metric:24} " + " ".join(f"{fmt(c['mean']) + ' ' + fmt(c['ci95']) if c else '-':>28}" for c in cells))
    ratio = summary.get("ratio") or {}
    print(f"branching / monte carlo failures per 1k tokens: {fmt(ratio.get('failures_per_1k_tokens'))}")
    _print_overflows(load_results(Path(out) / RESULTS))
    print(f"results in {out} (report.html: each task's branch tree)")
    return 0


def _branching_users(args: argparse.Namespace):
    """``--user``: a factory ``mode -> (seed -> UserSimulator)`` (the Monte Carlo user of 'diverse' draws behaviours)."""
    if args.user == "diverse":
        from agentgym.envs.diverse_user import DiverseScriptedUser

        return lambda mode: (
            (lambda seed: DiverseScriptedUser())
            if mode == "branching"
            else (lambda seed: DiverseScriptedUser(args.mc_chance, seed))
        )
    from agentgym.eval.branching import policy_users
    from agentgym.models import BUILT_IN_MODELS
    from agentgym.rollout.policy import Policy

    user_policy: Policy
    if args.user.startswith(("http://", "https://")):
        if not args.user_model:
            raise UsageError("--user-model is required with a --user URL")
        from agentgym.rollout.openai_policy import OpenAIPolicy

        user_policy = OpenAIPolicy(args.user, args.user_model)
    elif args.user in BUILT_IN_MODELS or Path(args.user).is_dir():
        from agentgym.rollout.hf_policy import HFPolicy

        user_policy = HFPolicy(model_dir(args.user, "--user"))
    else:
        raise UsageError(f"--user {args.user!r} is not 'diverse', 'tiny', a model directory or a URL")
    return policy_users(user_policy, args.max_tokens)  # the user's turns are capped as the agent's


def _sampling(args: argparse.Namespace):
    """``--temperature``, ``--max-tokens`` and ``--top-p`` as the SamplingParams of every turn."""
    from agentgym.rollout.policy import SamplingParams

    if args.temperature < 0:
        raise UsageError(f"--temperature must be >= 0 (0 is greedy), got {args.temperature:g}")
    if args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    if not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1], got {args.top_p:g}")
    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p)


_IMAGE_OPTIONS = {
    "image_keep": "keep_last",
    "image_max_side": "max_side",
    "image_format": "format",
    "image_quality": "quality",
    "image_max_bytes": "max_bytes",
}


def _image_config(args: argparse.Namespace):
    """``--images`` and its ``--image-*`` settings as an ImageConfig, or ``None`` (text only)."""
    given = [option for option in _IMAGE_OPTIONS if getattr(args, option) is not None]
    if not args.images:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --images")
        return None
    from agentgym.rollout.images import ImageConfig

    try:
        return ImageConfig(**{_IMAGE_OPTIONS[option]: getattr(args, option) for option in given})
    except ValueError as exc:
        raise UsageError(f"--images: {exc}") from None


def _check_suite_envs(suite) -> None:
    """Every env the suite names is registered (or a ``module:Class`` entry point), before any episode starts."""
    import gymnasium

    import agentgym  # noqa: F401  (registers the envs)

    for env_id, _ in suite.by_env():
        if ":" in env_id:
            continue
        try:
            gymnasium.spec(env_id)
        except gymnasium.error.Error:
            raise UsageError(
                f"suite {suite.name!r} names env {env_id!r}, which is not registered "
                "(`agentgym envs list` shows the ids)"
            ) from None


def _run_dir(path: str) -> Path:
    """A finished eval run's directory (``path`` may name its results.jsonl)."""
    folder = Path(path)
    if folder.name == "results.jsonl":
        folder = folder.parent
    missing = [name for name in ("results.jsonl", "summary.json") if not (folder / name).is_file()]
    if missing:
        what = "no such directory" if not folder.is_dir() else f"not an eval run (no {' or '.join(missing)})"
        raise UsageError(f"{path}: {what}; give the --out directory of an `agentgym eval` run")
    return folder


def _eval_compare(args: argparse.Namespace) -> int:
    from agentgym.eval.metrics import compare
    from agentgym.eval.report import compare_report, load_run

    run_a, run_b = _run_dir(args.run_a), _run_dir(args.run_b)
    result = compare(load_run(run_a)[1], load_run(run_b)[1], seed=args.seed)
    if not result["tasks"]:
        raise UsageError(
            f"the two runs share no task ({result['only_a']} tasks only in A, {result['only_b']} only "
            "in B), so there is nothing to compare"
        )
    print(f"A = {args.run_a}\nB = {args.run_b}")
    for key, value in result.items():
        print(f"{key:18} {fmt(value)}")
    print(f"report: {compare_report(run_a, run_b)}")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    from agentgym.eval.suites import BUILTIN_SUITES

    evaluation = commands.add_parser(
        "eval",
        help="evaluate a policy on a suite (or compare two runs)",
        formatter_class=_HelpFormatter,
        description="Run k samples of every task of a suite; results.jsonl, summary.json "
        "and report.html go to --out, and a rerun resumes. The suite's tasks, the model, --seed, --max-turns, "
        "the sampling settings, --memory and --images are the run's identity (run.json): a rerun with others "
        "into the same --out is refused.",
    )
    evaluation.add_argument("--suite", help=f"{', '.join(BUILTIN_SUITES)}, or a JSONL/YAML suite file")
    evaluation.add_argument(
        "--policy",
        help="an http(s) OpenAI-compatible endpoint URL, a local model directory, 'tiny' (the locally built "
        "test model), 'oracle' (the tasks' known solutions), 'scripted' / 'scripted-flawed' (scripted conversational "
        "agents over the known solutions: careful, or with flaws that user behaviours trigger) or 'nonsense' (gibberish)",
    )
    evaluation.add_argument("--model", help="the model name the endpoint serves (required with a URL)")
    evaluation.add_argument("--tokenizer", help="with a URL: the served model's tokenizer, for token mode")
    evaluation.add_argument("-k", type=int, default=1, help="samples per task (default: %(default)s)")
    evaluation.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="episodes at once; with --branching, tasks at once, each task's episodes in turn (default: %(default)s)",
    )
    evaluation.add_argument("--out", help="the run directory (default: runs/eval-<suite>)")
    evaluation.add_argument("--tasks", help="only these task ids: a comma-separated list of ids or globs")
    evaluation.add_argument("--max-turns", type=int, help="turns per episode (default: the env's limit)")
    evaluation.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature of every reply; 0 is greedy (default: %(default)s)",
    )
    evaluation.add_argument(
        "--max-tokens",
        type=int,
        default=1024,
        help="the most tokens of one reply; a longer one is cut (default: %(default)s)",
    )
    evaluation.add_argument(
        "--top-p", type=float, default=1.0, help="nucleus sampling: 1 keeps every token (default: %(default)s)"
    )
    evaluation.add_argument(
        "--timeout",
        type=float,
        help="seconds per episode (default: none); with --program, seconds the program may run (default: 300), "
        "past which it is killed and counted as a program_error",
    )
    evaluation.add_argument("--seed", type=int, default=0, help="base of the reset seeds (default: %(default)s)")
    evaluation.add_argument(
        "--memory", metavar="PATH", help="a memory store: retrieved memories and skills go into each task's prompt"
    )
    evaluation.add_argument(
        "--memory-mode",
        choices=("read", "learn"),
        default="read",
        help="read: retrieve only; learn: also write each episode back (default: %(default)s)",
    )
    evaluation.add_argument(
        "--screenshots",
        action="store_true",
        help="a screenshot of every turn in the report's trajectory viewer (envs that render images: web, gui)",
    )
    evaluation.add_argument(
        "--images",
        action="store_true",
        help="send the policy each observation's screenshot too (a vision model's endpoint): web envs with "
        "Set-of-Marks, the GUI desktop; the report shows what the model saw",
    )
    evaluation.add_argument(
        "--image-keep",
        type=int,
        metavar="K",
        help="with --images: the newest K screenshots stay in the prompt (default: 1)",
    )
    evaluation.add_argument(
        "--image-max-side", type=int, metavar="PX", help="with --images: shrink to this longer side (default: 768)"
    )
    evaluation.add_argument(
        "--image-format", choices=("png", "jpeg"), help="with --images: the encoding sent (default: png)"
    )
    evaluation.add_argument("--image-quality", type=int, metavar="Q", help="with --images: JPEG quality (default: 85)")
    evaluation.add_argument(
        "--image-max-bytes",
        type=int,
        metavar="N",
        help="with --images: the most bytes one image may take; larger ones are shrunk, then left out (default: 2000000)",
    )
    evaluation.add_argument(
        "--program",
        metavar="PROGRAM",
        help="evaluate your own agent program through the gateway: module:function, or a command line (it reads "
        "OPENAI_BASE_URL, OPENAI_API_KEY, AGENTGYM_MCP_URL and AGENTGYM_GOAL; see docs/gateway.md)",
    )
    evaluation.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the episodes on a Ray cluster's env workers: its address (HEAD:6379) or 'auto' (the one `ray start` runs here)",
    )
    evaluation.add_argument(
        "--env-workers", type=int, help="with --ray: env worker actors, spread over the nodes (default: one per node)"
    )
    evaluation.add_argument(
        "--envs-per-worker",
        type=int,
        default=8,
        help="with --ray: envs each worker hosts at once (default: %(default)s)",
    )
    evaluation.add_argument(
        "--branching",
        action="store_true",
        help="branching evaluation (DIVERT) of an env with a simulated user: episodes branched at user turns with "
        "diverse user behaviours, against linear Monte Carlo at the same token budget; reports failures per 1,000 "
        "tokens, distinct failures and tasks with a failure, and each task's branch tree",
    )
    evaluation.add_argument(
        "--token-budget",
        type=int,
        default=100_000,
        help="with --branching: agent + user tokens per task, for each of the two modes (default: %(default)s)",
    )
    evaluation.add_argument(
        "--user",
        default="diverse",
        help="with --branching: the simulated user: 'diverse' (the scripted user that plays the behaviours), 'tiny', "
        "a local model directory or an endpoint URL (with --user-model) (default: %(default)s)",
    )
    evaluation.add_argument("--user-model", help="with --branching and a --user URL: the model name it serves")
    evaluation.add_argument(
        "--mc-chance",
        type=float,
        default=0.3,
        help="with --branching and --user diverse: the Monte Carlo user's chance per turn of taking on a behaviour "
        "(default: %(default)s)",
    )
    evaluation.add_argument(
        "--seeds", type=int, default=1, help="with --branching: seeds to run from --seed on (default: %(default)s)"
    )
    evaluation.add_argument(
        "--behaviours", help="with --branching: the user behaviours to branch with, comma-separated (default: all)"
    )
    evaluation.set_defaults(run=_eval)
    compare = evaluation.add_subparsers(dest="action").add_parser("compare", help="paired difference of two runs")
    compare.add_argument("run_a", help="a run directory (or its results.jsonl)")
    compare.add_argument("run_b", help="another run directory")
    compare.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    compare.set_defaults(run=_eval_compare)
