"""Moving a committed snapshot image between Docker engines: its own layers out as bytes (``docker save``), into another engine as a private image (``docker load``).

A snapshot image is the image its sandbox started from (a base or task image) plus one layer per
commit. :meth:`PortableSnapshot.of` saves the image and keeps only the layers above that start
image, so the bytes are what the agent changed (kilobytes to megabytes), not the hundreds of
megabytes of the base. The engine that loads them must have the start image under the same name
with the same layers (it skips loading layers it has, so the archive needs only the others): true
on one engine, and across nodes whose images come from one source (a registry, the same cached
rootfs tarball); a node whose image was built apart has other layer digests and refuses the import
with a :class:`SnapshotError` that says so.

:meth:`PortableSnapshot.load` gives the importing process a snapshot image of its own: a child of
the loaded image, committed with this process's owner labels, whose release removes that child
(and the loaded image, when this import loaded it). The exporter's image is never removed by the
import side, which matters when both live on one engine (two workers of one node, every test).
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field

from agentgym.extras import requires

with requires("sandbox"):
    import docker.errors

from agentgym.sandbox import cleanup, engine, labels
from agentgym.sandbox.docker import DockerSnapshot, label_change
from agentgym.sandbox.images import image_exists
from agentgym.snapshot import SnapshotError

__all__ = ["PortableSnapshot"]

# Serialises loads in this process, so that two imports of one image track it once.
_load_lock = threading.Lock()
_CHUNK = 1 << 20


@dataclass(frozen=True)
class PortableSnapshot:
    """A :class:`DockerSnapshot` as plain data: the shell state and the image's layers above its start image."""

    image_id: str
    start_names: tuple[str, ...]  # the names of the non-snapshot image the layers go on top of
    start_layers: tuple[str, ...]  # its layers' digests, which the importing engine's image must have
    archive: bytes  # `docker save` of image_id without the start image's layers
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)

    @classmethod
    def of(cls, snapshot: DockerSnapshot) -> PortableSnapshot:
        """Save ``snapshot``'s image (which stays where it is, owned by its snapshot)."""
        client = engine.api()
        with engine.engine_errors("exporting a snapshot image"):
            start = _start_image(client, snapshot.ref)
            start_layers = start["RootFS"]["Layers"]
            # The save includes the start image's layers (hundreds of MB): spool it to disk, not the heap.
            with tempfile.TemporaryFile() as spool:
                for chunk in client.get_image(snapshot.ref, chunk_size=_CHUNK):
                    spool.write(chunk)
                spool.seek(0)
                archive = _without_layers(spool, len(start_layers))
        return cls(
            image_id=snapshot.ref,
            start_names=tuple(start.get("RepoTags") or [start["Id"]]),
            start_layers=tuple(start_layers),
            archive=archive,
            cwd=snapshot.cwd,
            env=dict(snapshot.env),
            metadata=dict(snapshot.metadata),
        )

    def load(self) -> DockerSnapshot:
        """The snapshot in this engine, as an image this process owns (release it like any snapshot)."""
        client = engine.api()
        cleanup.ensure_installed()
        with _load_lock, engine.engine_errors("importing a snapshot image"):
            start_image = self._local_start_image(client)
            loaded_here = not image_exists(self.image_id)
            if loaded_here:
                _docker_load(client, self.archive)
                cleanup.track_snapshot(self.image_id, parent=start_image)
            image_id = _private_child(client, self.image_id, start_image)
            if loaded_here:
                cleanup.release_image(self.image_id)  # removed when the child goes (it keeps it alive until then)
        return DockerSnapshot(
            ref=image_id,
            cwd=self.cwd,
            env=dict(self.env),
            metadata={**self.metadata, "image": image_id, "parent": self.image_id},
        )

    def _local_start_image(self, client: docker.APIClient) -> str:
        """The id of this engine's image that has the start image's name and layers."""
        for name in self.start_names:
            try:
                local = client.inspect_image(name)
            except docker.errors.ImageNotFound:
                continue
            if tuple(local["RootFS"]["Layers"][: len(self.start_layers)]) == self.start_layers:
                return local["Id"]
            raise SnapshotError(
                f"this Docker engine's {name} has other layers than the one the snapshot was committed on "
                "(built apart, not from one source); the snapshot cannot be imported here"
            )
        raise SnapshotError(
            f"this Docker engine lacks {self.start_names[0]}, the image the snapshot was committed on; "
            "build or pull it here first"
        )


def _start_image(client: docker.APIClient, image_id: str) -> dict:
    """The inspect data of the first non-snapshot image under ``image_id``'s chain of commits."""
    info = client.inspect_image(image_id)
    while (info["Config"].get("Labels") or {}).get(labels.KIND) == labels.KIND_SNAPSHOT:
        # An imported image has no parent on this engine; its child says where its chain starts.
        start = info["Config"]["Labels"].get(labels.SNAPSHOT_START) or info.get("Parent")
        if not start:
            raise SnapshotError(f"snapshot image {image_id[:19]} has no known start image; it cannot be exported")
        info = client.inspect_image(start)
    return info


def _without_layers(archive: io.IOBase, count: int) -> bytes:
    """``archive`` (a `docker save` tar) without the files of its first ``count`` layers."""
    out = io.BytesIO()
    with tarfile.open(fileobj=archive) as source, tarfile.open(fileobj=out, mode="w") as target:
        manifest = json.load(source.extractfile("manifest.json"))
        layers = manifest[0]["Layers"]
        dropped = set(layers[:count]) - set(layers[count:])  # a blob shared with a kept layer stays
        for member in source:
            if member.name not in dropped:
                target.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def _docker_load(client: docker.APIClient, archive: bytes) -> None:
    for event in client.load_image(archive):
        if "error" in event:
            raise SnapshotError(f"the Docker engine refused the snapshot image: {event['error']}")


def _private_child(client: docker.APIClient, image_id: str, start_image: str) -> str:
    """A commit of a never-started container of ``image_id``: an image with this process's owner labels.

    Its own id, so its release cannot touch ``image_id``, and a child, so the engine keeps
    ``image_id`` while it lives; its label names the start image for a later export.
    """
    owner = labels.owner_labels(labels.KIND_SNAPSHOT) | {labels.SNAPSHOT_START: start_image}
    container_id = client.create_container(image_id, labels=labels.owner_labels(labels.KIND_SANDBOX))["Id"]
    try:
        child = client.commit(container_id, changes=[label_change(owner)], pause=False)["Id"]
    finally:
        client.remove_container(container_id, force=True)
    cleanup.track_snapshot(child, parent=image_id)
    return child
