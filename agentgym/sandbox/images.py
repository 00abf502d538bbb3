"""The base sandbox image: built offline from Debian packages (debootstrap, then `docker import`), or from a
Dockerfile where a registry is reachable; tagged by a hash of its recipe so that a build is done once.

``agentgym images build`` calls :func:`build_base_image`. The rootfs tarball is cached under
``$AGENTGYM_CACHE/images`` (default ``~/.cache/agentgym/images``), so re-importing after the
image was deleted takes seconds. ``AGENTGYM_DEBIAN_MIRROR`` overrides the Debian mirror;
``AGENTGYM_BASE_IMAGE`` makes :func:`require_base_image` use another image.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors

from agentgym.sandbox import engine, labels
from agentgym.sandbox.base import SandboxError, SandboxUnavailableError

# Bump when the build steps change in a way the fields below do not show.
RECIPE_VERSION = 1
REPOSITORY = "agentgym/base"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-pytest", "git", "ca-certificates", "procps", "patch")
# Runs in the new rootfs (chroot). uid/gid 1000 match SandboxConfig.user.
USER_SETUP = """\
groupadd --gid 1000 agent
useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent --shell /bin/bash agent
mkdir -p /workspace
chown 1000:1000 /workspace
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log /var/log/bootstrap.log /tmp/*
"""
IMAGE_CHANGES = (
    "ENV PATH=/home/agent/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    # .pyc files embed source mtimes: a forked and a replayed workspace would differ by them.
    "ENV PYTHONDONTWRITEBYTECODE=1",
    "WORKDIR /workspace",
    'CMD ["/bin/bash"]',
)

Progress = Callable[[str], None]


def recipe_hash(
    packages: tuple[str, ...] = PACKAGES, setup: str = USER_SETUP, changes: tuple[str, ...] = IMAGE_CHANGES
) -> str:
    """The content hash of a debootstrap recipe (suite, packages, user setup, image settings, version);
    the defaults are the base image's (the desktop image passes its own)."""
    recipe = {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "variant": "minbase",
        "packages": packages,
        "setup": setup,
        "changes": changes,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def base_image_tag() -> str:
    """The tag the current recipe's image has (or will have once built)."""
    return f"{REPOSITORY}:{recipe_hash()[:12]}"


def cache_dir() -> Path:
    root = os.environ.get("AGENTGYM_CACHE") or Path.home() / ".cache" / "agentgym"
    path = Path(root) / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def image_exists(tag: str) -> bool:
    try:
        engine.api().inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def require_base_image() -> str:
    """The base image's tag: $AGENTGYM_BASE_IMAGE, else the current recipe's build, else agentgym/base:latest
    (which a Dockerfile build also sets)."""
    override = os.environ.get("AGENTGYM_BASE_IMAGE")
    candidates = [override] if override else [base_image_tag(), f"{REPOSITORY}:latest"]
    for tag in candidates:
        if image_exists(tag):
            return tag
    raise SandboxUnavailableError(
        f"the sandbox image {candidates[0]} is missing: run `agentgym images build` "
        "(about two minutes, offline from the Debian mirror; needs root for debootstrap)"
    )


def build_base_image(
    *, force: bool = False, dockerfile: str | os.PathLike | None = None, progress: Progress = print
) -> str:
    """Build the base image unless it exists (``force`` rebuilds); returns its tag.

    Without ``dockerfile``: debootstrap a minimal Debian, add the ``agent`` user (uid 1000) and
    ``/workspace``, tar the rootfs into the cache and ``docker import`` it. Needs root. With
    ``dockerfile``: ``docker build`` it (for machines that can pull a base image).
    """
    if dockerfile is not None:
        return _build_from_dockerfile(Path(dockerfile), force=force, progress=progress)
    return build_debootstrap_image(REPOSITORY, force=force, progress=progress)


def build_debootstrap_image(
    repository: str,
    *,
    packages: tuple[str, ...] = PACKAGES,
    setup: str = USER_SETUP,
    changes: tuple[str, ...] = IMAGE_CHANGES,
    force: bool = False,
    progress: Progress = print,
) -> str:
    """Build ``repository:<recipe hash>`` by debootstrap + ``docker import`` unless it exists; returns the tag.

    The base image and the desktop image (:mod:`agentgym.sandbox.desktop`) differ only in their recipe.
    """
    content_hash = recipe_hash(packages, setup, changes)
    tag = f"{repository}:{content_hash[:12]}"
    with _build_lock():  # a second process waits here, then finds the image built
        if image_exists(tag) and not force:
            return tag
        tarball = cache_dir() / f"{content_hash}.tar.gz"
        if force or not tarball.exists():
            _debootstrap_tarball(tarball, progress, packages=packages, setup=setup)
        progress(f"importing {tarball} as {tag}")
        _import(tarball, tag, content_hash, changes=changes)
    return tag


@contextmanager
def _build_lock() -> Iterator[None]:
    with open(cache_dir() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _debootstrap_tarball(
    tarball: Path, progress: Progress, *, packages: tuple[str, ...] = PACKAGES, setup: str = USER_SETUP
) -> None:
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "building the base image runs debootstrap, which needs root: run `sudo agentgym images build` "
            "(or `agentgym images build --dockerfile PATH` where a registry is reachable)"
        )
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailableError("debootstrap is missing: `sudo apt-get install debootstrap`")
    mirror = os.environ.get("AGENTGYM_DEBIAN_MIRROR", DEFAULT_MIRROR)
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="build-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        try:
            progress(f"debootstrap {SUITE} from {mirror} (about a minute)")
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(rootfs), mirror])
            progress("adding the agent user and /workspace")
            _run(["chroot", str(rootfs), "/bin/sh", "-ec", setup])
        finally:
            _unmount_below(rootfs)  # an interrupted debootstrap leaves /proc mounted; rmtree must not descend into it
        progress(f"packing the rootfs into {tarball}")
        partial = Path(tmp) / "rootfs.tar.gz"
        _run(["tar", "--numeric-owner", "-I", "gzip -1", "-C", str(rootfs), "-cf", str(partial), "."])
        os.replace(partial, tarball)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    if done.returncode != 0:
        raise SandboxError(f"`{' '.join(argv[:3])} ...` failed ({done.returncode}):\n{done.stdout[-3000:]}")


def _unmount_below(root: Path) -> None:
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    prefix = f"{root}/"
    for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


def _labels(content_hash: str) -> dict[str, str]:
    return {labels.MANAGED: "true", labels.KIND: labels.KIND_BASE, labels.CONTENT_HASH: content_hash}


def _import(tarball: Path, tag: str, content_hash: str, *, changes: tuple[str, ...] = IMAGE_CHANGES) -> None:
    client = engine.api()
    previous = _image_id(tag)
    label_change = "LABEL " + " ".join(f'{k}="{v}"' for k, v in _labels(content_hash).items())
    repository, _, name = tag.partition(":")
    with engine.engine_errors("docker import"):
        answer = client.import_image_from_file(
            str(tarball), repository=repository, tag=name, changes=[*changes, label_change]
        )
    if not image_exists(tag):
        raise SandboxError(f"docker import of {tarball} did not produce {tag}: {answer}")
    _tag_latest_and_drop(tag, previous)


def _build_from_dockerfile(dockerfile: Path, *, force: bool, progress: Progress) -> str:
    content_hash = hashlib.sha256(f"{RECIPE_VERSION}\0".encode() + dockerfile.read_bytes()).hexdigest()
    tag = f"{REPOSITORY}:{content_hash[:12]}"
    if image_exists(tag) and not force:
        return tag
    previous = _image_id(tag)
    with engine.engine_errors("docker build"):
        for event in engine.api().build(
            path=str(dockerfile.parent),
            dockerfile=dockerfile.name,
            tag=tag,
            labels=_labels(content_hash),
            rm=True,
            forcerm=True,
            decode=True,
        ):
            if "error" in event:
                raise SandboxError(f"docker build {dockerfile} failed: {event['error']}")
            if event.get("stream", "").strip():
                progress(event["stream"].rstrip())
    _tag_latest_and_drop(tag, previous)
    return tag


def _image_id(tag: str) -> str | None:
    try:
        return engine.api().inspect_image(tag)["Id"]
    except docker.errors.ImageNotFound:
        return None


def _tag_latest_and_drop(tag: str, previous: str | None) -> None:
    """Point <repository>:latest at ``tag`` and remove the image a forced rebuild replaced, if nothing uses it."""
    client = engine.api()
    client.tag(tag, tag.rpartition(":")[0], "latest")
    if previous and previous != client.inspect_image(tag)["Id"]:
        try:
            client.remove_image(previous)
        except docker.errors.APIError:
            pass  # containers still run on it; `docker image prune` can take it later
