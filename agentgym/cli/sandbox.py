"""`agentgym images build` and `agentgym sandbox gc`: the sandbox images, built offline, and the reaping of what dead processes left."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentgym.cli.common import UsageError


def _images_build(args: argparse.Namespace) -> int:
    if args.desktop or args.desktop_apps:
        if args.dockerfile:
            raise UsageError("the desktop images are built from Debian packages; they take no --dockerfile")
        from agentgym.sandbox.desktop import build_desktop_image

        print(build_desktop_image(apps=args.desktop_apps, force=args.force))
        return 0
    from agentgym.sandbox.images import build_base_image

    if args.dockerfile and not Path(args.dockerfile).is_file():
        raise UsageError(f"--dockerfile {args.dockerfile!r}: no such file")
    tag = build_base_image(force=args.force, dockerfile=args.dockerfile)
    print(tag)
    return 0


def _sandbox_gc(args: argparse.Namespace) -> int:
    from agentgym.sandbox.docker import gc

    report = gc(all=args.all)
    print(json.dumps(report, indent=2, default=str))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add this group's commands to the ``agentgym`` parser's subcommands."""
    images = commands.add_parser("images", help="sandbox images").add_subparsers(dest="action", required=True)
    build = images.add_parser("build", help="build the base sandbox image offline (debootstrap + docker import)")
    build.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    build.add_argument("--dockerfile", help="build from this Dockerfile instead (needs a reachable registry)")
    build.add_argument(
        "--desktop",
        action="store_true",
        help="build the desktop image for the GUI envs instead (Xvfb, openbox, xdotool, apps)",
    )
    build.add_argument(
        "--desktop-apps",
        action="store_true",
        help="build the desktop image with the real apps instead (LibreOffice, GIMP, mousepad, pcmanfm, AT-SPI)",
    )
    build.set_defaults(run=_images_build)

    sandbox = commands.add_parser("sandbox", help="sandboxes").add_subparsers(dest="action", required=True)
    gc = sandbox.add_parser("gc", help="remove containers and snapshot images left by dead processes")
    gc.add_argument("--all", action="store_true", help="remove every agentgym container and snapshot image")
    gc.set_defaults(run=_sandbox_gc)
