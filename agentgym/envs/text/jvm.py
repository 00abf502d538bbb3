"""JVMGameEnv: the base of text worlds whose engine is a py4j JVM (ScienceWorld, TextWorldExpress) — pooled engines, a dead one as an env error, forks by replay.

Both packages run their simulator as a jar behind a py4j gateway (``engine._gateway``, its
``java_process``) and neither can save or restore a game's state. So an env of this kind:

* takes a JVM from its package's :class:`~agentgym.sandbox.engine_pool.EnginePool` at its
  first reset and gives it back at close (a dead one is discarded instead), so a reset loads
  a task into a warm JVM rather than starting one;
* turns a py4j failure into :class:`EngineDied` (the step is an ``env_error``), dropping the
  engine so that the next reset takes a new one;
* branches by replay (:class:`~agentgym.envs.text.env.ReplayedGameEnv`): a fork loads the task
  into a warm engine and plays the commands again.

A missing ``java`` is one line naming the Debian package to install (:func:`require_java`).
"""

from __future__ import annotations

import abc
import functools
import logging
import shutil
from collections.abc import Callable
from typing import Any

from agentgym.envs.text.env import ReplayedGameEnv
from agentgym.extras import requires
from agentgym.sandbox.engine_pool import EnginePool

with requires("text"):
    from py4j.protocol import Py4JError

# A JVM that dies is reported once, as EngineDied. py4j would also log the broken connection with its traceback
# from its own threads, and formatting a traceback parses source (ast) on CPython 3.11, which before 3.11.8
# races with parsing in the main thread ("AST constructor recursion depth mismatch", CPython gh-106905) and
# breaks later imports of the process.
logging.getLogger("py4j").setLevel(logging.CRITICAL)

__all__ = ["EngineDied", "JVMGameEnv", "JavaMissingError", "alive", "jvm_pool", "require_java", "stop"]


class JavaMissingError(RuntimeError):
    """No Java runtime to run a simulator."""


class EngineDied(RuntimeError):
    """The JVM behind an env stopped answering (an env failure: the step is an env_error)."""


def require_java(benchmark: str) -> None:
    """Raise :class:`JavaMissingError` (one line, naming what to install) when no ``java`` is on PATH."""
    if shutil.which("java") is None:
        raise JavaMissingError(
            f"{benchmark} needs a Java runtime and none is on PATH: install one (Debian: apt-get install default-jre-headless)"
        )


def alive(engine: Any) -> bool:
    """Whether a py4j engine's JVM still runs."""
    return engine._gateway.java_process.poll() is None


def stop(engine: Any) -> None:
    """Shut a py4j engine's gateway down and wait for its JVM to end (killing it if it does not)."""
    process = engine._gateway.java_process
    try:
        engine.close()
    except Exception:  # a dead gateway cannot be shut down politely; the process is ended below
        pass
    try:
        process.wait(timeout=10)
    except Exception:
        process.kill()
        process.wait()


def jvm_pool(start: Callable[[], Any], engine_mb: int) -> Callable[[], EnginePool]:
    """The getter of one package's process-wide pool of JVM engines (each ``engine_mb`` resident), made at its first call."""
    return functools.cache(lambda: EnginePool(start, stop, alive, engine_mb))


class JVMGameEnv(ReplayedGameEnv):
    """A text world played in a pooled py4j JVM, branched by replay (see the module docstring).

    Subclasses set :meth:`engine_pool` and implement ``_setup`` (which calls :meth:`_engine` for
    the engine and resets :attr:`commands`), ``_play`` (which appends to :attr:`commands`),
    ``_gold_path``, ``_grade`` and ``valid_actions``.
    """

    #: The benchmark's name, in error messages.
    benchmark = "the"

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.engine: Any = None

    @staticmethod
    @abc.abstractmethod
    def engine_pool() -> EnginePool:
        """The family's process-wide pool this env's engines come from (its module's :func:`jvm_pool` getter)."""

    def _engine(self) -> Any:
        """The env's engine, taken from the pool on first use."""
        if self.engine is None:
            self.engine = self.engine_pool().acquire()
        return self.engine

    def _engine_call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call into the JVM; a dead one is given up (the next reset takes another) and raised as :class:`EngineDied`."""
        try:
            return function(*args, **kwargs)
        except Py4JError as exc:
            engine, self.engine = self.engine, None
            self.engine_pool().discard(engine)
            raise EngineDied(f"the {self.benchmark} JVM stopped answering ({type(exc).__name__})") from exc

    def _teardown(self) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            (self.engine_pool().release if alive(engine) else self.engine_pool().discard)(engine)
