"""A Harbor task's image: built offline on the base image from the translated Dockerfile, tagged by its content (see :mod:`agentgym.integrations.harbor`)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

from agentgym.extras import requires
from agentgym.integrations.harbor.loader import HarborTask
from agentgym.sandbox.base import SandboxUnavailableError

with requires("code"):
    from agentgym.sandbox import engine, images, labels
    from agentgym.sandbox.shell import SYSTEM_PATH

__all__ = ["HarborImageError", "build_task_image", "image_path", "image_tag"]

# Bump when the generated Dockerfile or the build changes in a way the hashed inputs do not show.
IMAGE_RECIPE_VERSION = 1
IMAGE_REPOSITORY = "agentgym/harbor"
IMAGE_KIND = "harbor-task"
GENERATED_DOCKERFILE = ".agentgym-harbor.Dockerfile"


class HarborImageError(SandboxUnavailableError):
    """A task's image cannot be built here; the message says why."""


def _context_digest(context: Path) -> list[tuple[str, int, str]]:
    entries = []
    for item in sorted(context.rglob("*")):
        relative = item.relative_to(context).as_posix()
        if item.is_symlink():
            entries.append((relative, 0, "link:" + str(item.readlink())))
        elif item.is_file():
            entries.append((relative, item.stat().st_mode & 0o7777, hashlib.sha256(item.read_bytes()).hexdigest()))
    return entries


def image_tag(task: HarborTask, base_image_id: str) -> str:
    """``agentgym/harbor:<hash>`` of the base image, the generated Dockerfile and the build context's files."""
    recipe = {
        "version": IMAGE_RECIPE_VERSION,
        "base": base_image_id,
        "dockerfile": task.dockerfile,
        "context": _context_digest(task.path / "environment"),
    }
    return f"{IMAGE_REPOSITORY}:{hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]}"


def build_task_image(task: HarborTask, *, progress=None) -> str:
    """The task's image (built offline unless an image of the same content exists); :class:`HarborImageError` says why not."""
    if task.dockerfile is None:
        raise HarborImageError(f"Harbor task {task.id} cannot be built here: {task.unbuildable}")
    base = images.require_base_image()
    with engine.engine_errors("inspecting the base image"):
        base_id = engine.api().inspect_image(base)["Id"]
    tag = image_tag(task, base_id)
    if images.image_exists(tag):
        return tag
    context = task.path / "environment"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for child in sorted(context.iterdir()):
            tar.add(child, arcname=child.name)
        data = f"FROM {base_id}\n{task.dockerfile}".encode()
        info = tarfile.TarInfo(GENERATED_DOCKERFILE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    output: list[str] = []
    step = ""
    with engine.engine_errors(f"building the image of Harbor task {task.id}"):
        for event in engine.api().build(
            fileobj=buffer,
            custom_context=True,
            dockerfile=GENERATED_DOCKERFILE,
            tag=tag,
            labels={labels.MANAGED: "true", labels.KIND: IMAGE_KIND, labels.CONTENT_HASH: tag.rpartition(":")[2]},
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
            decode=True,
            timeout=task.build_timeout,
        ):
            text = _ANSI.sub("", event.get("stream", ""))
            if text.startswith("Step "):
                step, output = text.split(" : ", 1)[-1].strip(), []
            else:
                output.append(text)
            if progress is not None and text.strip():
                progress(text.rstrip())
            if "error" in event:
                lines = [
                    line for line in "".join(output).splitlines() if line.strip() and not _BUILDER_NOISE.match(line)
                ]
                tail = "\n".join(lines[-12:])
                raise HarborImageError(
                    f"Harbor task {task.id} cannot be built here: `{step[:200]}` failed with the network disabled "
                    f"({event['error'].strip()})" + (f":\n{tail}" if tail else "")
                )
    if not images.image_exists(tag):
        raise HarborImageError(f"Harbor task {task.id}: the build reported success but made no image {tag}")
    return tag


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BUILDER_NOISE = re.compile(r"^( ---> |Removing intermediate container |Successfully )")


def image_path(tag: str) -> str:
    """The PATH an image's configuration sets."""
    with engine.engine_errors(f"inspecting {tag}"):
        variables = engine.api().inspect_image(tag)["Config"].get("Env") or []
    return next((v.partition("=")[2] for v in variables if v.startswith("PATH=")), SYSTEM_PATH)
