"""Wrappers that keep branching: ``snapshot``/``restore``/``fork`` and the async twins through any stack of Gymnasium wrappers.

Gymnasium's wrappers forward only ``reset``, ``step``, ``render`` and ``close``, so a wrapped
:class:`~agentgym.core.AgentEnv` (``gymnasium.make(id, max_episode_steps=3)``,
``RecordEpisodeStatistics(env)``) would hide its branching. ``import agentgym`` therefore gives
:class:`gymnasium.Wrapper` the branching surface — ``snapshot``, ``restore``, ``fork`` and
``areset``/``astep``/``asnapshot``/``arestore``/``afork``/``aclose`` — names Gymnasium does not
use; it changes nothing else of Gymnasium. Through a stack of wrappers:

* ``snapshot()`` takes the env's :class:`~agentgym.snapshot.Snapshot` and files each wrapper's own
  state with it (TimeLimit's elapsed steps, the episode statistics, the memory context). It is the
  env's snapshot object itself, so reference counting and ``release`` are the env's;
* ``restore(snapshot)`` restores the env, then each wrapper's state;
* ``fork(snapshot=None)`` forks the env and rebuilds the same stack over the fork — the same
  classes with the same constructor arguments — with each wrapper's state copied (its current
  one, or the snapshot's). A fork of the outer wrapper is again the outer wrapper.

A snapshot taken below a wrapper (e.g. from ``env.unwrapped``) carries none of that wrapper's
state: restoring it keeps the wrapper's state as it is, and a fork from it gets a copy of the
wrapper's current state (a fresh ``TimeLimit`` or ``OrderEnforcing`` could not even step).

A wrapper takes part in branching in one of two ways:

* subclass :class:`BranchingWrapper` and name its state in :attr:`~BranchingWrapper.branch_attributes`
  (copied with :func:`copy.deepcopy`), or override :meth:`~BranchingWrapper._branch_state`,
  :meth:`~BranchingWrapper._load_branch_state` and :meth:`~BranchingWrapper._rebuild`;
* or, for a wrapper class one cannot change, declare it with :func:`register_branching` (this is
  how Gymnasium's ``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker`` and
  ``RecordEpisodeStatistics`` are declared below).

Any other wrapper raises :class:`WrapperNotBranchingError` naming it: its state is unknown, and a
fork or restore that silently dropped it would not equal a replay.

The async twins of a wrapper run its sync method in the shared env thread pool, like
:class:`~agentgym.core.AgentEnv`'s.

:class:`RecordScreenshots` is such a wrapper: every step's ``info["screenshot"]`` holds the env's
rendered frame as a base64 PNG, for trajectory viewers such as the eval report.
"""

from __future__ import annotations

import base64
import copy
import pickle
import struct
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics, TimeLimit

from agentgym.core import AsyncTwins, BranchAttributes
from agentgym.snapshot import Snapshot, SnapshotMismatchError

__all__ = [
    "BranchingWrapper",
    "RecordScreenshots",
    "WrapperNotBranchingError",
    "encode_png",
    "export_snapshot",
    "fork",
    "import_snapshot",
    "register_branching",
    "restore",
    "snapshot",
]


class WrapperNotBranchingError(TypeError):
    """A wrapper in the stack does not declare its state, so the stack cannot be snapshotted, restored or forked."""


@dataclass(frozen=True)
class _Adapter:
    """How one wrapper class branches: its state out and back in, and a copy of it over another env."""

    capture: Callable[[gym.Wrapper], Any]
    load: Callable[[gym.Wrapper, Any], None]
    rebuild: Callable[[gym.Wrapper, gym.Env], gym.Wrapper]


_adapters: dict[type, _Adapter] = {}

# The wrappers' states filed with each snapshot taken through them: {depth below the wrapper: (class, state)}.
# Kept beside the snapshot rather than in it, so a snapshot stays the env's own (restorable by env.unwrapped).
_wrapper_states: weakref.WeakKeyDictionary[Snapshot, dict[int, tuple[type, Any]]] = weakref.WeakKeyDictionary()


def register_branching(
    wrapper_class: type[gym.Wrapper],
    attributes: Sequence[str] = (),
    rebuild: Callable[[gym.Wrapper, gym.Env], gym.Wrapper] | None = None,
) -> None:
    """Declare how instances of ``wrapper_class`` (exactly that class, not subclasses) branch.

    ``attributes`` name the wrapper's own state, deep-copied into snapshots and forks (none: a
    stateless wrapper). ``rebuild(wrapper, env)`` makes the same wrapper over another env; the
    default passes the constructor arguments Gymnasium's ``RecordConstructorArgs`` saved.
    """
    names = tuple(attributes)
    _adapters[wrapper_class] = _Adapter(
        capture=lambda wrapper: {name: copy.deepcopy(getattr(wrapper, name)) for name in names},
        load=BranchAttributes._load_branch_state,  # type: ignore[arg-type]  # sets the named attributes on any object
        rebuild=rebuild or _rebuild_from_saved_kwargs,
    )


def _rebuild_from_saved_kwargs(wrapper: gym.Wrapper, env: gym.Env) -> gym.Wrapper:
    saved = getattr(wrapper, "_saved_kwargs", None)
    if saved is None:
        raise WrapperNotBranchingError(
            f"{type(wrapper).__qualname__} cannot be rebuilt over a fork: it records no constructor arguments "
            "(gymnasium.utils.RecordConstructorArgs); pass rebuild= to register_branching"
        )
    return type(wrapper)(env, **copy.deepcopy(saved))


class BranchingWrapper(BranchAttributes, AsyncTwins, gym.Wrapper):
    """Base class of wrappers with state of their own that a snapshot, a restore and a fork must carry.

    A subclass names its per-episode state in :attr:`branch_attributes`, or overrides
    ``_branch_state`` and ``_load_branch_state`` (the envs' hooks:
    :class:`~agentgym.core.BranchAttributes`) and :meth:`_rebuild`. Its constructor's
    arguments (after ``env``) are remembered, so that a fork is the same wrapper over the forked
    env; override :meth:`_rebuild` when an argument must not be passed twice as given (e.g. a
    path the wrapper opened), and :meth:`fork` to mark a fork as one.
    """

    _spawn_args: tuple[tuple, dict]

    def __new__(cls, *args, **kwargs):
        # The arguments after ``env`` (positional or keyword); none at all when copy or pickle makes the object.
        self = super().__new__(cls)
        self._spawn_args = (args[1:], {name: value for name, value in kwargs.items() if name != "env"})
        return self

    def _rebuild(self, env: gym.Env) -> BranchingWrapper:
        """The same wrapper (class and constructor arguments) over ``env``."""
        args, kwargs = self._spawn_args
        return type(self)(env, *args, **kwargs)

    def snapshot(self) -> Snapshot:
        return snapshot(self)

    def restore(self, snapshot: Snapshot) -> None:
        restore(self, snapshot)

    def fork(self, snapshot: Snapshot | None = None) -> gym.Env:
        return fork(self, snapshot)


# Used only for BranchingWrapper instances (see _adapter).
_HOOKS = _Adapter(
    capture=lambda wrapper: cast(BranchingWrapper, wrapper)._branch_state(),
    load=lambda wrapper, state: cast(BranchingWrapper, wrapper)._load_branch_state(state),
    rebuild=lambda wrapper, env: cast(BranchingWrapper, wrapper)._rebuild(env),
)


def _adapter(wrapper: gym.Wrapper) -> _Adapter:
    if isinstance(wrapper, BranchingWrapper):
        return _HOOKS
    adapter = _adapters.get(type(wrapper))
    if adapter is None:
        cls = type(wrapper)
        raise WrapperNotBranchingError(
            f"{cls.__module__}.{cls.__qualname__} does not declare its state, so this stack cannot be "
            "snapshotted, restored or forked; subclass agentgym.BranchingWrapper, or declare it with "
            "agentgym.wrappers.register_branching"
        )
    return adapter


def _depth(wrapper: gym.Wrapper) -> int:
    """How many wrappers sit between ``wrapper`` and the env (a wrapper's place in a stack, counted from the env)."""
    depth, inner = 0, wrapper.env
    while isinstance(inner, gym.Wrapper):
        depth, inner = depth + 1, inner.env
    return depth


def _inner_method(wrapper: gym.Wrapper, name: str) -> Callable:
    method = getattr(wrapper.env, name, None)
    if method is None:
        raise WrapperNotBranchingError(
            f"{type(wrapper.env).__qualname__} has no {name}(): only agentgym envs (AgentEnv) can branch"
        )
    return method


def snapshot(env: gym.Wrapper) -> Snapshot:
    """The env's snapshot, with the state of every wrapper down to it (see the module docstring)."""
    state = _adapter(env).capture(env)  # before the env's snapshot exists, so that a failure leaks none
    snap = _inner_method(env, "snapshot")()
    _wrapper_states.setdefault(snap, {})[_depth(env)] = (type(env), state)
    return snap


def _saved_state(env: gym.Wrapper, snap: Snapshot) -> tuple[bool, Any]:
    """(whether ``snap`` carries state of ``env``'s place in the stack, that state)."""
    saved = _wrapper_states.get(snap, {}).get(_depth(env))
    if saved is None:
        return False, None
    cls, state = saved
    if cls is not type(env):
        raise SnapshotMismatchError(
            f"this snapshot was taken through a {cls.__qualname__} where this stack has a {type(env).__qualname__}"
        )
    return True, state


def restore(env: gym.Wrapper, snapshot: Snapshot) -> None:
    """Restore the env, then every wrapper whose state ``snapshot`` carries (the others keep theirs)."""
    adapter = _adapter(env)
    found, state = _saved_state(env, snapshot)
    _inner_method(env, "restore")(snapshot)
    if found:
        adapter.load(env, state)


def fork(env: gym.Wrapper, snapshot: Snapshot | None = None) -> gym.Env:
    """The same stack over a fork of the env, each wrapper with a copy of its state (``snapshot``'s, else its current one)."""
    adapter = _adapter(env)
    found, state = (False, None) if snapshot is None else _saved_state(env, snapshot)
    state = state if found else adapter.capture(env)
    inner = _inner_method(env, "fork")(snapshot)
    try:
        child = adapter.rebuild(env, inner)
        adapter.load(child, state)
    except BaseException:
        inner.close()
        raise
    return child


_WRAPPED_MAGIC = b"agentgym-wrapped-snapshot\n"


def export_snapshot(env: gym.Wrapper, snapshot: Snapshot) -> bytes:
    """The env's :meth:`~agentgym.core.AgentEnv.export_snapshot` bytes together with the wrappers' states the snapshot carries.

    Made for :func:`import_snapshot` of the same stack in another process (a Ray env worker on
    another node), so that a fork there continues the wrappers as a local fork would.
    """
    inner = cast("Any", env.unwrapped).export_snapshot(snapshot)
    return _WRAPPED_MAGIC + pickle.dumps((inner, _wrapper_states.get(snapshot, {})), protocol=pickle.HIGHEST_PROTOCOL)


def import_snapshot(env: gym.Wrapper, data: bytes) -> Snapshot:
    """A snapshot from :func:`export_snapshot`'s bytes (or an env's own), with the wrappers' states filed as a local one's."""
    data = bytes(data)
    inner, states = pickle.loads(data[len(_WRAPPED_MAGIC) :]) if data.startswith(_WRAPPED_MAGIC) else (data, {})
    snap = cast("Any", env.unwrapped).import_snapshot(inner)
    if states:
        _wrapper_states[snap] = dict(states)
    return snap


def _install_on_gymnasium_wrapper() -> None:
    """Give every Gymnasium wrapper the branching surface (names Gymnasium does not define; see the module docstring)."""
    methods = {
        "snapshot": snapshot,
        "restore": restore,
        "fork": fork,
        "export_snapshot": export_snapshot,
        "import_snapshot": import_snapshot,
        **{name: getattr(AsyncTwins, name) for name in ("areset", "astep", "asnapshot", "arestore", "afork", "aclose")},
    }
    for name, method in methods.items():
        if name not in vars(gym.Wrapper):
            setattr(gym.Wrapper, name, method)


_install_on_gymnasium_wrapper()

# The wrappers gymnasium.make applies, and the statistics wrapper training loops add. Their state is in
# private attributes (restoring a TimeLimit's count has no public way): hence Gymnasium's exact pin.
register_branching(TimeLimit, ["_elapsed_steps"])
register_branching(OrderEnforcing, ["_has_reset"])
# Its checks ran on the source's first reset and step; a fork must not run them again mid-episode.
register_branching(
    PassiveEnvChecker,
    ["checked_reset", "checked_step", "checked_render", "checked_data_reuse", "_previous_data"],
)
register_branching(
    RecordEpisodeStatistics,
    [
        "episode_count",
        "episode_start_time",
        "episode_returns",
        "episode_lengths",
        "time_queue",
        "return_queue",
        "length_queue",
    ],
)


class RecordScreenshots(BranchingWrapper):
    """Every step's ``info[key]`` (``"screenshot"``) holds a base64 PNG of the env's frame after the step.

    For trajectory viewers such as the eval report (``agentgym eval --screenshots``), which show
    ``info["screenshot"]`` of each turn. The frame is the env's own ``render()``, so the env must
    be made with ``render_mode="rgb_array"`` (the web envs and the GUI desktop render so):
    ``RecordScreenshots(gymnasium.make("agentgym/web.shop-v0", render_mode="rgb_array"))``.
    Resets record nothing, nor do steps that end in ``info["env_error"]`` (the env may be gone); a
    step whose render fails keeps its result and says why in ``info[key + "_error"]``.

    It has no state of its own: a fork is a RecordScreenshots (same ``key``) over the forked env.
    Screenshots are large (tens to hundreds of kB a turn): record them where they are looked at.
    """

    def __init__(self, env: gym.Env, key: str = "screenshot"):
        if env.render_mode != "rgb_array":
            modes = env.metadata.get("render_modes", [])
            hint = (
                "make it with render_mode='rgb_array'"
                if "rgb_array" in modes
                else f"it renders no rgb_array images (its render modes: {modes})"
            )
            raise ValueError(f"RecordScreenshots needs an env whose render() returns rgb_array images: {hint}")
        super().__init__(env)
        self.key = key

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if "env_error" not in info:
            try:
                frame = self.env.render()
                if frame is not None:
                    info[self.key] = base64.b64encode(encode_png(np.asarray(frame))).decode()
            except Exception as exc:
                info[f"{self.key}_error"] = f"{type(exc).__name__}: {exc}"
        return observation, reward, terminated, truncated, info


def encode_png(frame: np.ndarray) -> bytes:
    """An H×W×3 (RGB), H×W×4 (RGBA) or H×W (grey) uint8 array as PNG bytes (no filtering; zlib only, no Pillow)."""
    frame = np.ascontiguousarray(frame, dtype=np.uint8)
    if frame.ndim == 2:
        frame = frame[..., None]
    if frame.ndim != 3 or frame.shape[2] not in (1, 3, 4):
        raise ValueError(f"expected an H×W×3, H×W×4 or H×W image, got shape {frame.shape}")
    height, width, channels = frame.shape
    rows = np.zeros((height, 1 + width * channels), np.uint8)  # each row: filter type 0, then its pixels
    rows[:, 1:] = frame.reshape(height, width * channels)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    color_type = {1: 0, 3: 2, 4: 6}[channels]
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )
