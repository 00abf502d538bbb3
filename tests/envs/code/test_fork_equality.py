"""Forked code envs are indistinguishable from envs that replayed the same actions (real Docker)."""

import gymnasium
import pytest

import agentgym  # noqa: F401
from tests.helpers.tool_calls import call

pytestmark = pytest.mark.docker

HASHED = ("/workspace", "/home/agent", "/tmp")


PREFIX = [
    call("bash", command="mkdir -p /workspace/notes && cd /workspace/notes && export STAGE=two"),
    call("write_file", path="/workspace/notes/a.txt", content="alpha\n"),
    call("bash", command="echo $STAGE >> a.txt && chmod 600 a.txt && ln -s a.txt link && git init -q /tmp/r"),
]
NEXT = call("bash", command="pwd; echo $STAGE; cat link; ls -la --time-style=+ | awk '{print $1, $NF}'")


@pytest.mark.parametrize(
    "env_id,task_id", [("agentgym/code.humaneval-v0", "HumanEval/3"), ("agentgym/code.repofix-v0", None)]
)
def test_fork_at_turn_k_equals_replay(docker_ready, env_id, task_id):
    original, replayed = gymnasium.make(env_id), gymnasium.make(env_id)
    task_id = task_id or original.unwrapped.task_ids()[0]
    try:
        for env in (original, replayed):
            env.reset(options={"task_id": task_id})
            for action in PREFIX:
                env.step(action)
        fork = original.fork()
        try:
            assert fork.unwrapped.turn == replayed.unwrapped.turn == len(PREFIX)
            assert fork.unwrapped.sandbox.fs_hash(HASHED) == replayed.unwrapped.sandbox.fs_hash(HASHED)
            # The original keeps going and does not disturb the fork.
            original.step(call("bash", command="rm -rf /workspace/notes"))
            fork_step, replay_step = fork.step(NEXT), replayed.step(NEXT)
            assert fork_step[0]["text"] == replay_step[0]["text"]
            assert "/workspace/notes\ntwo\nalpha\ntwo" in fork_step[0]["text"]
            assert fork_step[1:4] == replay_step[1:4]
            assert fork.unwrapped.sandbox.fs_hash(HASHED) == replayed.unwrapped.sandbox.fs_hash(HASHED)
            assert original.unwrapped.sandbox.fs_hash(HASHED) != fork.unwrapped.sandbox.fs_hash(HASHED)
        finally:
            fork.close()
    finally:
        original.close()
        replayed.close()


def test_restore_rewinds_the_filesystem_and_shell(docker_ready):
    env = gymnasium.make("agentgym/code.humaneval-v0")
    try:
        env.reset(options={"task_id": "HumanEval/0"})
        env.step(PREFIX[0])
        before = env.unwrapped.sandbox.fs_hash(HASHED)
        with env.snapshot() as snap:
            assert snap.metadata["image"]
            env.step(call("bash", command="cd / && rm -rf /workspace/* && export STAGE=gone"))
            env.restore(snap)
            assert env.unwrapped.sandbox.fs_hash(HASHED) == before and env.unwrapped.turn == 1
            obs, *_ = env.step(call("bash", command="pwd; echo $STAGE"))
            assert obs["text"] == "/workspace/notes\ntwo"
    finally:
        env.close()


def test_snapshot_of_one_task_does_not_restore_into_another(docker_ready):
    from agentgym.snapshot import SnapshotMismatchError

    first, second = gymnasium.make("agentgym/code.humaneval-v0"), gymnasium.make("agentgym/code.humaneval-v0")
    try:
        first.reset(options={"task_id": "HumanEval/0"})
        second.reset(options={"task_id": "HumanEval/1"})
        with first.snapshot() as snap, pytest.raises(SnapshotMismatchError):
            second.restore(snap)
    finally:
        first.close()
        second.close()
