"""Portable snapshots: bytes from export_snapshot, imported into a second env of the same id (as another node would), fork exactly like a local fork, free what the import made, and refuse other kinds and damaged data."""

import json
import re
import time

import gymnasium
import pytest

import agentgym  # noqa: F401
from agentgym.envs.state import SQLiteState
from agentgym.envs.tool import ToolEnv
from agentgym.envs.tool.bfcl import BFCLMultiTurnEnv, from_bfcl_call
from agentgym.envs.tool.keychain import demonstration, make_task
from agentgym.snapshot import SnapshotError, SnapshotMismatchError, SnapshotReleasedError
from tests.helpers.bfcl import ground_truth, public_state
from tests.helpers.tool_calls import call


def run(env, actions):
    """Each step as comparable data: observation text and image bytes, reward, ends, info without the tool list."""
    steps = []
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        image = observation.get("image")
        steps.append(
            (
                observation["text"],
                None if image is None else image.tobytes(),
                reward,
                terminated,
                truncated,
                {k: v for k, v in info.items() if k != "tools"},
            )
        )
    return steps


def moved_fork(env, snapshot, elsewhere):
    """A fork made where ``elsewhere`` lives from ``snapshot``'s bytes, and the imported snapshot (the caller releases it)."""
    imported = elsewhere.import_snapshot(env.export_snapshot(snapshot))
    assert (imported.kind, imported.task_id, imported.turn) == (snapshot.kind, snapshot.task_id, snapshot.turn)
    assert imported.metadata["imported"]
    return elsewhere.fork(imported), imported


# ---------------------------------------------------------------------------------------- tool envs
def test_a_keychain_fork_from_imported_bytes_continues_like_a_local_fork_and_a_replay():
    task_id = "train-0"
    replies = demonstration(make_task(task_id))  # two lookups and the answer
    original, elsewhere, replay = (gymnasium.make("agentgym/tool.keychain-v0").unwrapped for _ in range(3))
    for env in (original, replay):
        env.reset(options={"task_id": task_id})
        run(env, replies[:1])
    with original.snapshot() as snapshot:
        moved, imported = moved_fork(original, snapshot, elsewhere)
        assert original.export_snapshot(snapshot) is original.export_snapshot(snapshot)  # made once
        local = original.fork(snapshot)
    original.step(replies[-1])  # the original goes on; neither fork sees it
    steps = run(moved, replies[1:])
    assert steps == run(local, replies[1:]) == run(replay, replies[1:])
    assert steps[-1][2:4] == (1.0, True)
    elsewhere.restore(imported)  # restore takes an imported snapshot too
    imported.release()
    assert run(elsewhere, replies[1:]) == steps
    for env in (original, elsewhere, replay, moved, local):
        env.close()


def test_bfcl_state_travels_with_its_backends():
    task_id = "multi_turn_base_3"
    original, elsewhere = BFCLMultiTurnEnv("base"), BFCLMultiTurnEnv("base")
    task = original.task_data[task_id]
    replies = []
    for turn in ground_truth(task, one_call_per_reply=True):
        replies += [[from_bfcl_call(c, task["involved_classes"]) for c in reply] for reply in turn] + ["Done."]
    half = len(replies) // 2
    original.reset(options={"task_id": task_id})
    run(original, replies[:half])
    with original.snapshot() as snapshot:
        moved, imported = moved_fork(original, snapshot, elsewhere)
        local = original.fork(snapshot)
    with imported:
        steps = run(moved, replies[half:])
    assert steps == run(local, replies[half:]) and steps[-1][5]["success"]
    assert public_state(moved) == public_state(local)
    for env in (original, elsewhere, moved, local):
        env.close()


def _notes_env() -> ToolEnv:
    def add(note: str, state: SQLiteState) -> str:
        state.execute("INSERT INTO notes VALUES (?)", (note,))
        return f"{state.query('SELECT COUNT(*) FROM notes')[0][0]} notes"

    return ToolEnv(
        [add],
        {"t": "Add notes."},
        state_factory=lambda task: SQLiteState(script="CREATE TABLE notes (text TEXT)"),
        variant="notes",
    )


def test_a_sqlite_world_state_travels_as_its_database():
    original, elsewhere = _notes_env(), _notes_env()
    original.reset(options={"task_id": "t"})
    run(original, [call("add", note="one"), call("add", note="two")])
    with original.snapshot() as snapshot:
        moved, imported = moved_fork(original, snapshot, elsewhere)
    imported.release()
    original.step(call("add", note="only in the original"))
    assert run(moved, [call("add", note="three")])[0][0] == "3 notes"
    assert moved.state.query("SELECT text FROM notes") == [("one",), ("two",), ("three",)]
    for env in (original, elsewhere, moved):
        env.close()


def test_other_kinds_and_damaged_bytes_are_refused_before_anything_is_unpickled(monkeypatch):
    keychain, bfcl = gymnasium.make("agentgym/tool.keychain-v0").unwrapped, BFCLMultiTurnEnv("base")
    keychain.reset(options={"task_id": "train-0"})
    snapshot = keychain.snapshot()
    data = keychain.export_snapshot(snapshot)
    magic, header, body = data.split(b"\n", 2)
    unpickled = []
    monkeypatch.setattr("agentgym.snapshot.pickle.loads", unpickled.append)  # a spy: refusals must come first
    with pytest.raises(SnapshotMismatchError, match=f"cannot be imported into a {re.escape(bfcl.kind)}"):
        bfcl.import_snapshot(data)
    with pytest.raises(SnapshotMismatchError, match="cannot be exported by"):
        bfcl.export_snapshot(snapshot)
    damaged = {
        "truncated": data[:-7],
        "checksum does not match": data[:-1] + bytes([data[-1] ^ 1]),
        "not agentgym snapshot data": b"\x80\x04garbage",
        "damaged header": magic + b"\n{not json\n" + body,
        "format 2; this agentgym reads format 1": b"\n".join(
            [magic, json.dumps({**json.loads(header), "format": 2}).encode(), body]
        ),
    }
    for message, bad in damaged.items():
        with pytest.raises(SnapshotError, match=message):
            keychain.import_snapshot(bad)
    assert unpickled == []
    snapshot.release()
    with pytest.raises(SnapshotReleasedError):
        keychain.export_snapshot(snapshot)
    keychain.close()
    bfcl.close()


def test_a_state_that_does_not_pickle_cannot_be_exported():
    env = ToolEnv([], {"t": "Nothing."}, state_factory=lambda task: {"callback": lambda: None})
    env.reset(options={"task_id": "t"})
    with env.snapshot() as snapshot:
        env.fork(snapshot).close()  # a local fork deep-copies it
        with pytest.raises(SnapshotError, match="cannot be exported: its state does not pickle"):
            env.export_snapshot(snapshot)
    env.close()


# ---------------------------------------------------------------------------------------- code envs
PREFIX = [
    call("bash", command="mkdir -p /workspace/notes && cd /workspace/notes && export STAGE=two"),
    call("write_file", path="/workspace/notes/a.txt", content="alpha\n"),
]
NEXT = [call("bash", command="pwd; echo $STAGE; cat a.txt; ls -la /workspace/notes | awk '{print $1, $NF}'")]


def _our_images() -> set[str]:
    from agentgym.sandbox import engine, labels

    return {image["Id"] for image in engine.api().images(all=True, filters=labels.session_filter())}


def _settled_images(expected: set[str]) -> set[str]:
    deadline = time.monotonic() + 30  # container removals run in the background
    while (images := _our_images()) != expected and time.monotonic() < deadline:
        time.sleep(0.5)
    return images


@pytest.mark.parametrize("env_id", ["agentgym/code.humaneval-v0", "agentgym/code.repofix-v0"])
def test_a_code_env_snapshot_travels_as_its_image_layers(docker_ready, env_id):
    before = _our_images()
    original, elsewhere = gymnasium.make(env_id).unwrapped, gymnasium.make(env_id).unwrapped
    original.reset(options={"task_id": original.task_ids()[0]})
    run(original, PREFIX)
    snapshot = original.snapshot()
    data = original.export_snapshot(snapshot)
    assert len(data) < 1 << 20  # the commit's own layers, not the base image's
    local = original.fork(snapshot)
    expected = run(local, NEXT)
    assert "/workspace/notes\ntwo\nalpha" in expected[0][0]

    # Both on one engine (two workers of a node): the import is a private image of the importer's.
    imported = elsewhere.import_snapshot(data)
    assert imported.metadata["image"] != snapshot.metadata["image"]
    moved = elsewhere.fork(imported)
    assert run(moved, NEXT) == expected
    moved.close()
    again = elsewhere.export_snapshot(imported)  # an imported snapshot moves on, to a third node
    imported.release()
    assert snapshot.metadata["image"] in _our_images()  # the importer's release left the exporter's image alone

    # The images gone (as on another engine): the import loads them and frees them again.
    local.close()
    snapshot.release()
    assert _settled_images(before) == before
    with elsewhere.import_snapshot(again) as imported:
        moved = elsewhere.fork(imported)
    assert run(moved, NEXT) == expected
    moved.close()
    original.close()
    elsewhere.close()
    assert _settled_images(before) == before


# ---------------------------------------------------------------------------------------- web envs
def test_a_web_app_snapshot_travels_with_its_database_tabs_and_storage():
    from agentgym.envs.web.app_env import WebAppEnv, app_tasks

    task = app_tasks("shop")["add_variant/0"]
    original, elsewhere = WebAppEnv("shop", screenshot=True), WebAppEnv("shop", screenshot=True)
    forks = []
    try:
        observation, _ = original.reset(options={"task_id": task.id})
        half = len(task.solution) // 2
        for step in task.solution[:half]:
            observation, *_ = original.step(step(observation["text"]) if callable(step) else step)
        with original.snapshot() as snapshot:
            moved, imported = moved_fork(original, snapshot, elsewhere)
            forks.append(moved)
            imported.release()
            forks.append(local := original.fork(snapshot))
        assert moved.fork_mode == local.fork_mode == "restore"
        assert moved.app.origin != original.app.origin  # served by the importer's own server
        cart = "SELECT product_id, size, colour, quantity FROM cart_items ORDER BY id"
        assert moved.app.db.query(cart) == original.app.db.query(cart)
        text = observation["text"]
        for step in task.solution[half:]:  # the fork finishes the task, step for step like a local fork
            action = step(text) if callable(step) else step
            (there,), (here,) = run(moved, [action]), run(local, [action])
            assert there == here
            text = there[0]
        assert there[2:4] == (1.0, True)
    finally:
        for env in (*forks, original, elsewhere):
            env.close()


# ---------------------------------------------------------------------------------------- GUI desktop
def test_a_desktop_snapshot_travels_as_its_action_prefix_and_pointer(desktop_image):
    """xedit keeps its buffer only in memory, so its snapshots replay: the bytes hold the actions (a relaunch
    snapshot's commit travels like a code env's, at the cost of saving the desktop image: about 12 s here)."""
    from agentgym.envs.gui import DesktopEnv
    from agentgym.envs.gui.tasks import TASKS

    solution = TASKS["xedit-fix-typo"].solution
    original, elsewhere = DesktopEnv(image=desktop_image), DesktopEnv(image=desktop_image)
    forks = []
    try:
        original.reset(options={"task_id": "xedit-fix-typo"})
        run(original, solution[:2])
        with original.snapshot() as snapshot:
            assert snapshot.metadata["fork"] == "replay"
            moved, imported = moved_fork(original, snapshot, elsewhere)
            forks.append(moved)
            imported.release()
            forks.append(local := original.fork(snapshot))
        steps = run(moved, solution[2:])
        assert steps == run(local, solution[2:]) and steps[-1][5]["success"]
    finally:
        for env in (*forks, original, elsewhere):
            env.close()
