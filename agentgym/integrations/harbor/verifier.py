"""Grading a Harbor task as Harbor's verifier does: its tests/ run as root in a fresh container of the agent's work, and the reward file they write is parsed (see :mod:`agentgym.integrations.harbor`)."""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from agentgym.extras import requires
from agentgym.integrations.harbor.dockerfile import VERIFIER_DIR
from agentgym.integrations.harbor.image import image_path
from agentgym.integrations.harbor.loader import HarborTask

with requires("code"):
    from agentgym.sandbox.docker import DockerSandbox, tar_directory
    from agentgym.sandbox.shell import SYSTEM_PATH

__all__ = ["run_verifier"]

TESTS_DIR = "/tests"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
REWARD_TEXT = f"{VERIFIER_DIR}/reward.txt"
TEST_STDOUT = f"{VERIFIER_DIR}/test-stdout.txt"
MAX_REWARD_BYTES = 64 * 1024  # a reward file is a number or a small JSON object
LOG_TAIL_CHARS = 2000


# Keeps the PATH entries (of $1) that root owns and nobody else can write, up to /: the agent's
# ~/.local/bin (first on the base image's PATH) and whatever the agent could have made are dropped.
_TRUSTED_PATH = r"""
__ag_trusted() {
  local p=$1 s
  while :; do
    [ -L "$p" ] && return 1
    s=$(/usr/bin/stat -c '%u %a' -- "$p" 2>/dev/null) || return 1
    [ "${s%% *}" = 0 ] && (( (8#${s##* } & 8#022) == 0 )) || return 1
    [ "$p" = / ] && return 0
    p=${p%/*}; p=${p:-/}
  done
}
__ag_path=
IFS=: read -ra __ag_dirs <<< "$1"
for __ag_dir in "${__ag_dirs[@]}"; do
  case $__ag_dir in /*) __ag_trusted "$__ag_dir" && __ag_path=${__ag_path:+$__ag_path:}$__ag_dir ;; esac
done
echo "$__ag_path"
"""


def run_verifier(task: HarborTask, sandbox: DockerSandbox, *, image: str) -> dict:
    """Run the task's tests in ``sandbox`` (a fresh root sandbox of the agent's committed work) and read the reward.

    Returns the grade: ``reward``, ``rewards`` (what the reward file held), ``source`` (the file),
    ``exit_code`` and ``timed_out`` of test.sh, ``log`` (the tail of its output), ``error``.
    """
    grade: dict[str, Any] = {"reward": 0.0, "rewards": {}, "source": None, "exit_code": None, "timed_out": False}
    grade["error"] = None
    prepared = sandbox.exec(
        f"rm -rf {TESTS_DIR} {VERIFIER_DIR} && mkdir -p {TESTS_DIR} {VERIFIER_DIR}", env={"PATH": SYSTEM_PATH}
    )
    if prepared.exit_code != 0:
        grade["error"] = f"could not prepare {TESTS_DIR} and {VERIFIER_DIR}: {prepared.output.strip()[-300:]}"
        return grade
    sandbox.put_tree(TESTS_DIR, tar_directory(task.path / "tests", sandbox.config))
    trusted = sandbox.exec(
        f"/bin/bash -c {shlex.quote(_TRUSTED_PATH)} agentgym {shlex.quote(image_path(image))}",
        env={"PATH": SYSTEM_PATH},
    )
    path = trusted.stdout.strip() or SYSTEM_PATH
    timeout = task.verifier_timeout  # within the loader's cap
    variables = {str(k): str(v) for k, v in task.config.get("verifier", {}).get("env", {}).items()}
    run = sandbox.exec(
        f"chmod +x {TESTS_DIR}/test.sh && ({TESTS_DIR}/test.sh) > {TEST_STDOUT} 2>&1",
        workdir=task.workdir,
        env={**variables, "PATH": path, "HOME": "/root"},
        timeout=timeout,
    )
    grade.update(exit_code=run.exit_code, timed_out=run.timed_out)
    grade["log"] = sandbox.exec(f"tail -c {LOG_TAIL_CHARS} {TEST_STDOUT}", env={"PATH": SYSTEM_PATH}).stdout
    if run.timed_out:
        grade["error"] = f"the tests did not finish within {timeout:g} s"
        return grade
    for source, parse in ((REWARD_JSON, _parse_reward_json), (REWARD_TEXT, _parse_reward_text)):
        try:
            data = sandbox.read_file(source, max_bytes=MAX_REWARD_BYTES)
        except FileNotFoundError:
            continue
        except OSError as exc:
            grade["error"] = f"cannot read {source}: {exc}"
            return grade
        grade["source"] = source
        try:
            grade["rewards"] = parse(data)
            grade["reward"] = _main_reward(grade["rewards"])
        except ValueError as exc:
            grade["error"] = f"{source}: {exc}"
        return grade
    grade["error"] = f"the tests wrote no reward ({REWARD_JSON} or {REWARD_TEXT}); test.sh exit code {run.exit_code}"
    return grade


def _parse_reward_text(data: bytes) -> dict[str, float]:
    try:
        value = float(data.decode("utf-8").strip())
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"not a number: {data[:80]!r}") from None
    return {"reward": value}


def _parse_reward_json(data: bytes) -> dict[str, float]:
    try:
        rewards = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"not JSON: {data[:80]!r}") from None
    if not isinstance(rewards, dict) or not rewards:
        raise ValueError("not a JSON object of rewards")
    for key, value in rewards.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"reward {key!r} is not a number: {value!r}")
    return {str(k): float(v) for k, v in rewards.items()}


def _main_reward(rewards: dict[str, float]) -> float:
    if "reward" in rewards:
        value = rewards["reward"]
    elif len(rewards) == 1:
        value = next(iter(rewards.values()))
    else:
        raise ValueError(f"several rewards and none named 'reward': {sorted(rewards)[:5]}")
    if not math.isfinite(value):
        raise ValueError(f"the reward is not finite: {value}")
    return value
