"""``agentgym serve`` replicas as Ray actors (each an HTTP server on its node) and the policy that balances over them and pushes new weights.

:class:`PolicyReplicas` starts ``replicas`` actors spread over the cluster's nodes; each loads an
:class:`~agentgym.rollout.hf_policy.HFPolicy` and serves it with :func:`agentgym.serve.make_app`
on a free port of its node's address (:attr:`PolicyReplicas.urls`). Any OpenAI-compatible client
can use them; :meth:`PolicyReplicas.policy` gives a :class:`ReplicaPolicy`, an
:class:`~agentgym.rollout.openai_policy.OpenAIPolicy` in token mode over every replica.

Weights travel through Ray's object store, not HTTP: :meth:`PolicyReplicas.push_weights` puts the
state dict there once and every replica loads it with ``HFPolicy.update_weights`` (requests being
decoded finish on the old weights). It returns once every replica serves the new version, and
every completion then reports that version (``policy_version``). A trainer calls
``ReplicaPolicy.update_weights(weights, version)`` just as it calls an in-process HFPolicy's.

Faults: a replica that dies is not restarted (it would come back with its first weights under no
version anyone pushed); the policy fails its requests over to the others, and the next push
reports it (a warning naming it, and its URL in what :meth:`~PolicyReplicas.push_weights`
returns) and leaves it out from then on. A replica that does not confirm a push within
``timeout`` is killed likewise, so no replica serves weights of an unknown version. The weight
endpoint of the replicas' HTTP servers stays off: only the Ray driver pushes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agentgym.extras import requires

with requires("distributed"):
    import ray
    from ray.exceptions import RayActorError, RayTaskError

from agentgym.distributed.cluster import connect, kill_actors
from agentgym.rollout.openai_policy import OpenAIPolicy

__all__ = ["PolicyReplicas", "ReplicaError", "ReplicaPolicy"]

log = logging.getLogger(__name__)


class ReplicaError(RuntimeError):
    """Replicas could not start, or none is left to serve (every one died or missed a push)."""


@ray.remote(max_restarts=0, max_task_retries=0)
class _ReplicaServer:
    """One replica: an HFPolicy and the aiohttp app of ``agentgym serve`` over it, on this node (an async actor)."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str, max_batch_size: int, version: int, device: str | None):
        from agentgym.rollout.hf_policy import HFPolicy

        if isinstance(model, (str, os.PathLike)):
            self.policy = HFPolicy(
                os.fspath(model), device=device, max_batch_size=max_batch_size, version=version, name=name
            )
        else:
            if isinstance(tokenizer, (str, os.PathLike)):
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
            if device is not None:
                model = model.to(device)
            self.policy = HFPolicy.from_model(
                model, tokenizer, max_batch_size=max_batch_size, version=version, name=name
            )
        self.name = name
        self.runner: Any = None  # the aiohttp AppRunner, once started

    async def start(self) -> dict:
        """Serve on a free port of this node's address; returns the URL and where it runs."""
        from aiohttp import web

        from agentgym.serve import make_app

        self.runner = web.AppRunner(make_app(self.policy, self.name))
        await self.runner.setup()
        site = web.TCPSite(self.runner, ray.util.get_node_ip_address(), 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        return {
            "url": f"http://{host}:{port}/v1",
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }

    async def update_weights(self, state_dict: dict, version: int) -> int:
        # In a thread: it waits for the batch being decoded, and the HTTP server shares this loop.
        await asyncio.to_thread(self.policy.update_weights, state_dict, version)
        return self.policy.version

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        await self.policy.aclose()


@dataclass
class _Replica:
    actor: Any
    url: str
    node_id: str


class PolicyReplicas:
    """``replicas`` policy servers as Ray actors, spread over the nodes; a context manager.

    Args:
        model: a checkpoint directory that every node can read (a shared path, or the same path
            on each), or an in-memory transformers model on the CPU (sent to the replicas once
            through the object store; then ``tokenizer`` is required).
        replicas: how many servers to start.
        tokenizer: the model's tokenizer, a path or an object; defaults to ``model`` when that
            is a path. :meth:`policy` uses it too.
        max_batch_size: requests each replica decodes together.
        served_model_name: the model name clients send; defaults to the checkpoint's directory
            name (``"policy"`` for an in-memory model).
        version: the weights' version the replicas start at.
        num_cpus: Ray CPUs of each replica.
        num_gpus: Ray GPUs of each replica.
        device: the torch device in each replica (default: CUDA when the replica has a GPU).
        start_timeout: seconds the replicas may take to load and listen.

    Connects to the cluster at ``"auto"`` when this process is not connected yet
    (:func:`~agentgym.distributed.cluster.connect`).
    """

    def __init__(
        self,
        model: str | os.PathLike | Any,
        *,
        replicas: int = 2,
        tokenizer: Any = None,
        max_batch_size: int = 16,
        served_model_name: str | None = None,
        version: int = 0,
        num_cpus: float = 1,
        num_gpus: float = 0,
        device: str | None = None,
        start_timeout: float = 300.0,
    ):
        if replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {replicas}")
        by_path = isinstance(model, (str, os.PathLike))
        if by_path:
            model = str(model)
        elif tokenizer is None:
            raise ValueError("an in-memory model needs its tokenizer: PolicyReplicas(model, tokenizer=...)")
        connect()
        self.tokenizer = model if tokenizer is None else tokenizer
        self.model_name = served_model_name or (Path(model).name if by_path else "policy")
        self.version = version
        # An in-memory model goes into the object store once, not once per replica.
        shared = model if by_path else ray.put(model)
        tokenizer_arg = str(self.tokenizer) if isinstance(self.tokenizer, os.PathLike) else self.tokenizer
        actors = [
            cast(Any, _ReplicaServer)
            .options(num_cpus=num_cpus, num_gpus=num_gpus, scheduling_strategy="SPREAD")
            .remote(
                shared,
                tokenizer_arg,
                name=self.model_name,
                max_batch_size=max_batch_size,
                version=version,
                device=device,
            )
            for _ in range(replicas)
        ]
        try:
            started = ray.get([actor.start.remote() for actor in actors], timeout=start_timeout)
        except Exception as exc:
            for actor in actors:
                ray.kill(actor)
            raise ReplicaError(f"policy replicas did not start within {start_timeout:g} s: {exc}") from exc
        self._replicas = [_Replica(actor, info["url"], info["node_id"]) for actor, info in zip(actors, started)]

    @property
    def urls(self) -> list[str]:
        """The ``/v1`` base URLs of the replicas still serving."""
        return [replica.url for replica in self._replicas]

    @property
    def node_ids(self) -> list[str]:
        """The Ray node of each replica, in the order of :attr:`urls`."""
        return [replica.node_id for replica in self._replicas]

    def push_weights(self, state_dict: Any, version: int, *, timeout: float = 300.0) -> list[str]:
        """Load ``state_dict`` (or a model's) into every replica as ``version``; returns the URLs of replicas lost.

        Returns once every live replica serves ``version``. A replica that is dead, or has not
        confirmed within ``timeout`` seconds (it is then killed), is left out from now on, logged
        and returned. Weights that do not fit the model raise its ``ValueError`` and change
        nothing; :class:`ReplicaError` when no replica is left.
        """
        import torch

        if isinstance(state_dict, torch.nn.Module):
            state_dict = state_dict.state_dict()
        # On the CPU: the tensors go to other nodes (and processes without this one's devices).
        state = {name: tensor.detach().cpu() for name, tensor in state_dict.items()}
        weights = ray.put(state)
        calls = {replica.actor.update_weights.remote(weights, version): replica for replica in self._replicas}
        done, late = ray.wait(list(calls), num_returns=len(calls), timeout=timeout)
        lost, misfit = [calls[ref] for ref in late], None
        for ref in done:
            try:
                ray.get(ref)
            except RayActorError:
                lost.append(calls[ref])
            except RayTaskError as exc:  # the update itself failed: the same weights fail on every replica
                misfit = exc
        for replica in lost:
            ray.kill(replica.actor)
        self._replicas = [replica for replica in self._replicas if replica not in lost]
        if lost:
            log.warning(
                "policy replicas lost during the push of version %d: %s",
                version,
                ", ".join(replica.url for replica in lost),
            )
        if not self._replicas:
            raise ReplicaError(f"no policy replica is left: every one died or missed the push of version {version}")
        if misfit is not None:
            raise misfit
        self.version = version
        return [replica.url for replica in lost]

    def policy(self, *, tokenizer: Any = None, **kwargs) -> ReplicaPolicy:
        """A token-mode :class:`ReplicaPolicy` over every replica (``kwargs`` as for :class:`OpenAIPolicy`)."""
        return ReplicaPolicy(self, tokenizer=tokenizer, **kwargs)

    def close(self, timeout: float = 30.0) -> None:
        """Stop every replica's server and policy, then kill its actor."""
        replicas, self._replicas = self._replicas, []
        closing = [replica.actor.close.remote() for replica in replicas]
        ray.wait(closing, num_returns=len(closing), timeout=timeout)
        kill_actors([replica.actor for replica in replicas], timeout=timeout)

    def __enter__(self) -> PolicyReplicas:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ReplicaPolicy(OpenAIPolicy):
    """An :class:`OpenAIPolicy` in token mode over a :class:`PolicyReplicas`'s URLs that pushes new weights to them.

    :meth:`update_weights` has HFPolicy's signature, so a trainer syncs replicas the way it syncs
    an in-process policy. Other keyword arguments are :class:`OpenAIPolicy`'s; ``tokenizer``
    defaults to the replicas'.
    """

    def __init__(self, replicas: PolicyReplicas, *, tokenizer: Any = None, **kwargs):
        kwargs.setdefault("version", replicas.version)
        super().__init__(
            replicas.urls,
            replicas.model_name,
            tokenizer=replicas.tokenizer if tokenizer is None else tokenizer,
            **kwargs,
        )
        self.replicas = replicas

    def update_weights(self, weights: Any, version: int | None = None) -> None:
        """Push ``weights`` (a state dict or a model) to every replica and bump :attr:`version` (to ``version`` if given)."""
        version = self.version + 1 if version is None else version
        lost = self.replicas.push_weights(weights, version)
        if lost:
            self._drop_replicas(lost)
        self.version = version
