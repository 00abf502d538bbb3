"""Harbor task directories as code envs: agentgym/code.harbor-v0 (the instruction is the task, tests/ the hidden grader, solution/ the reference).

The parts: :mod:`.loader` reads and checks a task directory, :mod:`.dockerfile` rebuilds its Dockerfile on
the base image, :mod:`.image` builds and tags that image, :mod:`.verifier` runs the tests and reads the
reward, :mod:`.env` is :class:`HarborEnv`.

A Harbor task (https://harborframework.com/docs/tasks) is a directory::

    task.toml          timeouts, resources, metadata
    instruction.md     what the agent is asked to do
    environment/       Dockerfile and its build context: the agent's container
    tests/test.sh      the verifier, copied to /tests after the agent is done; writes
                       /logs/verifier/reward.json ({"reward": x, ...}) or /logs/verifier/reward.txt (x)
    solution/solve.sh  the oracle, copied to /solution and run instead of an agent

``HarborEnv(path=...)`` loads one such directory or a directory of them (task ids are the
directory names).

**Untrusted directories.** A task directory may come from anyone, so loading refuses what would reach
past it: a link (anywhere in the task directory) whose target leaves the directory, and anything that
is not a regular file, a directory or such a link (a FIFO, a device). The files read on the host
(``task.toml``, ``instruction.md``, the Dockerfile, the oracle's files) are bounded in size. Every
resource a ``task.toml`` sets is capped by :class:`~agentgym.integrations.harbor.loader.HarborLimits`
(``cpus``, ``memory_mb``, ``storage_mb``, the build, verifier and agent timeouts): a task that asks
for more is refused at load, naming the field and the cap (``HarborEnv(limits={...})`` raises one). ``task.toml`` is read with :mod:`tomllib`: Harbor's own models
(``harbor.models.task.config.TaskConfig``) need Python 3.12 and pull in litellm, supabase and
fastapi, so agentgym reads the fields it uses itself, with Harbor's defaults.

**Images.** The task's Dockerfile is rebuilt offline on agentgym's base image (Debian bookworm,
Python 3.11, :mod:`agentgym.sandbox.images`) where it allows that (:func:`translate_dockerfile`):

* ``FROM`` ``debian:bookworm[-slim]``, ``debian:12[...]``, ``python:3.11[-slim][-bookworm]`` or
  ``agentgym/base`` is replaced by the base image; any other image would have to come from a
  registry, and the task says so;
* ``COPY``/``ADD`` of the task's own files, ``WORKDIR``, ``ENV``, ``ARG``, ``LABEL``, ``USER``,
  ``SHELL`` are kept; ``RUN`` is kept and runs with the network disabled, so a step that downloads
  fails, and the task's error names the step and quotes its output; ``CMD``, ``ENTRYPOINT``,
  ``EXPOSE``, ``HEALTHCHECK`` and ``STOPSIGNAL`` are ignored (the sandbox runs its own process);
* multi-stage builds, ``COPY --from``, ``ADD`` of a URL, BuildKit-only flags, heredocs,
  ``VOLUME`` (a volume would escape snapshots) and ``ONBUILD`` are refused, with the reason.

agentgym then adds one layer: the working directory (the last ``WORKDIR``, or
``[environment].workdir``) is handed to the sandbox user (uid 1000, who runs every tool), and
``/logs/verifier`` (root's) and ``/logs/agent``, ``/solution`` (the agent's) are made. Images are
tagged ``agentgym/harbor:<content hash>`` (the base image, the Dockerfile and every file of the
build context), so a task is built once. :class:`HarborImageError` says why a task cannot be built.

**Grading** (``submit()``) follows Harbor's verifier, in a *fresh* container started from a commit of
the agent's (so nothing the agent started is still running), as root: ``/tests`` and
``/logs/verifier`` are emptied, the task's ``tests/`` are copied in (the agent never sees them),
``/tests/test.sh`` runs from the working directory with its output in
``/logs/verifier/test-stdout.txt``, within ``[verifier].timeout_sec``, and the reward is what the
script wrote to ``reward.json`` (its ``"reward"`` key, or its only value) or ``reward.txt``: a finite
number, as Harbor parses it. A run that times out, or writes no reward file or an unreadable
one, scores 0 with ``grade["error"]`` saying why. Success is a reward of at least 1.

What the agent cannot do (each has a hack in ``tests/integrations/test_harbor.py``): write the
reward file (``/logs/verifier`` is root's, and it is emptied before the tests run anyway); leave a
process that writes it later (the verifier's container has none of the agent's processes); put a
program of its own in the verifier's way (test.sh runs with ``PATH`` cut to the image's directories
that root owns and nobody else can write, so ``~/.local/bin`` is dropped); read the tests. What it
can do: anything test.sh itself lets the agent's code do while it runs as root (test.sh that runs
the agent's program can be told anything by it; ``python -m`` from the working directory imports
the agent's modules of the same name first). Harbor's own verifier has the same limits.

Not supported: multi-step tasks (``[[steps]]``), docker-compose environments, Windows tasks,
prebuilt ``docker_image`` environments. The sandbox has no network whatever
``[environment].network_mode`` asks for; ``[agent].timeout_sec`` is not enforced (``max_turns`` and
the per-command timeouts are); ``cpus``, ``memory_mb`` and ``storage_mb`` set the sandbox's limits
(within the caps above).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.integrations.harbor.dockerfile import UnbuildableError, translate_dockerfile
    from agentgym.integrations.harbor.env import HarborEnv, reference_solution
    from agentgym.integrations.harbor.image import HarborImageError, build_task_image, image_tag
    from agentgym.integrations.harbor.loader import (
        HarborLimits,
        HarborTask,
        HarborTaskError,
        load_harbor_tasks,
        read_task,
    )
    from agentgym.integrations.harbor.verifier import run_verifier

_EXPORTS = {
    "HarborTask": "loader",
    "HarborTaskError": "loader",
    "HarborLimits": "loader",
    "load_harbor_tasks": "loader",
    "read_task": "loader",
    "UnbuildableError": "dockerfile",
    "translate_dockerfile": "dockerfile",
    "HarborImageError": "image",
    "build_task_image": "image",
    "image_tag": "image",
    "run_verifier": "verifier",
    "HarborEnv": "env",
    "reference_solution": "env",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
