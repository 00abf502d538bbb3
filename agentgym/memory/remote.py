"""One memory bank for every worker of a run: a Ray actor that owns the SQLite store on the head node, and the client MemoryWrapper uses on any node.

A memory section with ``shared: true`` (:class:`~agentgym.memory.config.MemoryConfig`) wraps every
env, on whichever node it runs, in a :class:`~agentgym.memory.wrapper.MemoryWrapper` over a
:class:`RemoteBank`: the same methods as :class:`~agentgym.memory.bank.MemoryBank`, with the same
signatures and return values, each one call to the run's :class:`BankActor`, which runs it on
its :class:`MemoryBank`. So every worker retrieves what every other worker wrote.

**One actor per store.** The actor is named after the store path (and read-only or not), in the
``agentgym`` namespace, and detached: the first process that asks creates it (``get_if_exists``),
every other one finds it, and it does not die with the worker that happened to create it. It
lives on the head node, which holds the cluster's own state (so the bank fails only with the
cluster) and is the machine where ``ray start --head`` and usually the driver run; a relative path
is opened from the head node's working directory (the driver's, for a cluster ``ray.init`` starts),
so give an absolute one on a cluster of several machines. It outlives the run: the next run with
the same path reaches it again, and :meth:`RemoteBank.shutdown` (or ``ray stop``) ends it. It takes
no CPU from the cluster's scheduling and serves ``CONCURRENCY`` calls at once (the store gives
each thread its own connection; SQLite queues the writers).

**The guarantees of a local bank.** A write (``add_episode``, ``record_use``, ``add_skill``,
refinement) is one actor call whose SQLite transaction commits before it returns, so a worker that
dies mid-write loses nothing already acknowledged and can leave no torn entry: its last write
either committed whole or not at all. The actor restarts without limit (``max_restarts=-1``) on the
head node and reopens the same file. Reads are retried until it is back. A write first waits for
the actor to be up (a retried no-op call), then is sent once: one in flight when the actor died may
have committed, and a retry could store an episode twice, so its caller gets the Ray error and the
MemoryWrapper reports it in ``info["memory_error"]``, as it does any failed write.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from agentgym.extras import requires
from agentgym.memory.bank import MemoryBank

with requires("distributed"):
    import ray
    from ray.exceptions import ActorDiedError

__all__ = ["CONCURRENCY", "NAMESPACE", "BankActor", "RemoteBank", "bank_name"]

NAMESPACE = "agentgym"
CONCURRENCY = 8
HEAD_NODE = "node:__internal_head__"  # the resource Ray gives the head node alone
# Reads (and the wait before a write) are sent again until the actor is back: it restarts without
# limit, and stays down only if it cannot reopen the store (then the call fails: the actor is dead).
UNTIL_BACK = -1


def bank_name(path: str | os.PathLike, read_only: bool = False) -> str:
    """The Ray actor name of the bank for the store at ``path`` (every process that names the path alike finds it)."""
    return f"agentgym-memory:{os.path.normpath(os.fspath(path))}" + (":read-only" if read_only else "")


class BankActor:
    """The Ray actor that owns the :class:`MemoryBank` of one store file and runs the bank methods :class:`RemoteBank` forwards.

    Its options (name, lifetime, placement, restarts) are set where it is made, in :class:`RemoteBank`.
    """

    def __init__(self, path: str, read_only: bool = False):
        if read_only and not os.path.isfile(path):  # SQLite's own error would only say "unable to open"
            raise FileNotFoundError(
                f"{path} does not exist; read mode needs an existing store (learn mode creates one)"
            )
        self.bank = MemoryBank(path, read_only=read_only)

    @ray.method(max_task_retries=UNTIL_BACK)
    def read(self, name: str, args: tuple, kwargs: dict) -> Any:
        return self._method(name, "read")(*args, **kwargs)

    def write(self, name: str, args: tuple, kwargs: dict) -> Any:
        return self._method(name, "write")(*args, **kwargs)

    @ray.method(max_task_retries=UNTIL_BACK)
    def ready(self) -> None:
        """Nothing, once the actor is up: what a write waits for, so that only a write in flight when it died fails."""

    @ray.method(max_task_retries=UNTIL_BACK)
    def status(self) -> dict:
        """Where the store is and what it holds: node_id, pid, path (absolute), read_only, episodes, skills."""
        store = self.bank.store
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "path": str(store.path.resolve()),
            "read_only": store.read_only,
            "episodes": store.count(kind="episode"),
            "skills": store.count(kind="skill"),
        }

    def _method(self, name: str, kind: str):
        # Only what RemoteBank forwards, each by its own kind: a write never goes through the retried read.
        if getattr(getattr(RemoteBank, name, None), "bank_call", None) != kind:
            raise AttributeError(f"the bank actor has no {kind} method {name!r}")
        return getattr(self.bank, name)


# The actor class (a plain ``@ray.remote`` decorator would hide ``.options`` from type checkers).
_BANK_ACTOR = ray.remote(BankActor)


def _forwarded(name: str, kind: str):
    """A RemoteBank method with ``MemoryBank.<name>``'s signature and docstring that runs it on the actor (``kind``: read or write)."""

    @functools.wraps(getattr(MemoryBank, name))
    def method(self: RemoteBank, *args, **kwargs):
        if kind == "write":
            ray.get(self.actor.ready.remote())
        return ray.get(getattr(self.actor, kind).remote(name, args, kwargs))

    method.bank_call = kind  # type: ignore[attr-defined]  # what the actor checks before running a call
    return method


class RemoteBank:
    """The :class:`MemoryBank` of the store at ``path`` as served by its :class:`BankActor` (created here if no process has yet).

    Needs a connected Ray process (a driver after :func:`~agentgym.distributed.cluster.connect`,
    or any Ray worker). Opening the store happens here, so a bad path fails now with a
    ``ValueError``, not at the first episode.
    """

    def __init__(self, path: str | os.PathLike, *, read_only: bool = False):
        self.path = os.path.normpath(os.fspath(path))
        self.read_only = read_only
        # Any: Ray's stubs type a handle's method calls as returning nothing usable.
        self.actor: Any = _BANK_ACTOR.options(
            name=bank_name(self.path, read_only),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            resources={HEAD_NODE: 0.001},
            num_cpus=0,
            max_concurrency=CONCURRENCY,
            max_restarts=-1,
            max_task_retries=0,
        ).remote(self.path, read_only)
        try:
            self.status()
        except ActorDiedError as exc:  # its __init__ failed: the last line of the message is the store's error
            reason = str(exc).strip().splitlines()[-1]
            raise ValueError(f"memory: the shared bank could not open {self.path} on the head node: {reason}") from None

    retrieve = _forwarded("retrieve", "read")
    skills = _forwarded("skills", "read")
    episode_records = _forwarded("episode_records", "read")
    baselines = _forwarded("baselines", "read")
    add_episode = _forwarded("add_episode", "write")
    add_skill = _forwarded("add_skill", "write")
    record_use = _forwarded("record_use", "write")
    merge_duplicates = _forwarded("merge_duplicates", "write")
    prune = _forwarded("prune", "write")
    enforce_capacity = _forwarded("enforce_capacity", "write")
    refine = _forwarded("refine", "write")

    def status(self) -> dict:
        """The actor's :meth:`BankActor.status`: node_id, pid, path (absolute, on the head node), read_only, episodes, skills."""
        return ray.get(self.actor.status.remote())

    def shutdown(self) -> None:
        """End the actor for every process (what it committed stays in the store); the next RemoteBank starts a new one."""
        ray.kill(self.actor, no_restart=True)

    def __repr__(self) -> str:
        return f"RemoteBank({self.path!r}, read_only={self.read_only})"
