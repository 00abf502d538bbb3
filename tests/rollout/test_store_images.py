"""Images in the trajectory store: written once per content hash beside the JSONL, read back by hash, refused when
their bytes do not hash to their name, and a warning (not a silent loss) when a record's bytes are missing."""

import hashlib
import json
import warnings

import pytest

from agentgym.rollout.store import TrajectoryStore
from agentgym.rollout.trajectory import RolloutTree, Trajectory, Turn

SCREEN_A, SCREEN_B, SCREEN_C = b"\x89PNG screen a", b"\x89PNG screen b", b"\x89PNG screen c"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def turn(prompt, completion, hashes, mask=None) -> Turn:
    return Turn(
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[-0.5] * len(completion),
        prompt_mask=mask or [0] * len(prompt),
        image_hashes=[digest(h) for h in hashes],
    )


def two_turns() -> Trajectory:
    first = turn([1, 2, 9, 9, 3], [4, 5], [SCREEN_A])
    second = turn([1, 2, 9, 9, 3, 4, 5, 6, 9, 9, 9, 7], [8], [SCREEN_A, SCREEN_B], mask=[0] * 5 + [1, 1] + [0] * 5)
    images = {digest(d): d for d in (SCREEN_A, SCREEN_B)}
    return Trajectory(task_id="t", env_id="gui", turns=[first, second], images=images)


def test_images_are_stored_once_by_hash_and_read_back(tmp_path):
    trajectory = two_turns()
    with TrajectoryStore(tmp_path / "run.jsonl") as store:
        store.extend([trajectory, two_turns()])
    assert sorted(p.name for p in store.images_dir.iterdir()) == sorted([digest(SCREEN_A), digest(SCREEN_B)])
    encoded = [json.loads(line)["record"] for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert encoded[0]["turns"][1]["image_hashes"] == {"shared": 1, "new": [digest(SCREEN_B)]}
    assert "images" not in encoded[0]  # the bytes never go into the JSONL

    reader = TrajectoryStore(tmp_path / "run.jsonl")
    stored = reader.read()[0]
    assert stored == trajectory and stored.turns[1].image_hashes == trajectory.turns[1].image_hashes
    assert stored.images == {}
    assert reader.images(stored) == trajectory.images
    assert reader.load_images(stored).images == trajectory.images
    assert reader.image(digest(SCREEN_B)) == SCREEN_B


def test_a_tree_stores_its_nodes_images_and_each_path_carries_its_own(tmp_path):
    tree = RolloutTree(task_id="t", env_id="gui", images={digest(d): d for d in (SCREEN_A, SCREEN_B, SCREEN_C)})
    root = tree.add(None, turn([1, 9, 2], [3], [SCREEN_A]))
    tree.add(root.id, turn([1, 9, 2, 3, 9, 4], [5], [SCREEN_A, SCREEN_B], mask=[0, 0, 0, 1, 0, 0]))
    tree.add(root.id, turn([1, 9, 2, 3, 9, 4], [6], [SCREEN_A, SCREEN_C], mask=[0, 0, 0, 1, 0, 0]))
    with TrajectoryStore(tmp_path / "trees.jsonl") as store:
        store.append(tree)
    assert len(list(store.images_dir.iterdir())) == 3
    stored = store.read()[0]
    assert stored == tree and store.images(stored) == tree.images
    paths = list(tree.paths())
    assert [sorted(p.images.values()) for p in paths] == [[SCREEN_A, SCREEN_B], [SCREEN_A, SCREEN_C]]
    assert [row["image_hashes"] for row in store.sequences_dataset()] == [
        [digest(SCREEN_A), digest(SCREEN_B)],
        [digest(SCREEN_A), digest(SCREEN_C)],
    ]


def test_bytes_that_do_not_hash_to_their_name_are_refused_and_nothing_is_written(tmp_path):
    trajectory = two_turns()
    trajectory.images[digest(SCREEN_B)] = SCREEN_C
    store = TrajectoryStore(tmp_path / "run.jsonl")
    with pytest.raises(ValueError, match=f"image {digest(SCREEN_B)} hash to {digest(SCREEN_C)}"):
        store.append(trajectory)
    store.close()
    assert not (tmp_path / "run.jsonl").exists() or store.read() == []


def test_missing_bytes_warn_and_the_record_is_kept(tmp_path):
    trajectory = two_turns()
    del trajectory.images[digest(SCREEN_B)]
    with TrajectoryStore(tmp_path / "run.jsonl") as store:
        with pytest.warns(RuntimeWarning, match=r"1 images its turns refer to have no bytes"):
            store.append(trajectory)
        stored = store.read()[0]
        assert stored == trajectory
        with pytest.raises(KeyError, match=digest(SCREEN_B)):
            store.images(stored)
        # Once the bytes are in the store, another record that refers to them needs none of its own.
        store.append(two_turns())
        trajectory.images.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            store.append(trajectory)
        assert store.images(store.read()[-1])[digest(SCREEN_B)] == SCREEN_B


def test_image_lookups_take_only_hashes(tmp_path):
    store = TrajectoryStore(tmp_path / "run.jsonl")
    for bad in ("../run.jsonl", "ABC", digest(SCREEN_A).upper(), ""):
        with pytest.raises(ValueError, match="64 lowercase hex digits"):
            store.image(bad)
    with pytest.raises(KeyError):
        store.image(digest(SCREEN_A))


def test_text_records_make_no_image_directory(tmp_path):
    with TrajectoryStore(tmp_path / "run.jsonl") as store:
        store.append(Trajectory(task_id="t", env_id="code", turns=[turn([1, 2], [3], [])]))
    assert not store.images_dir.exists()
    assert "image_hashes" not in json.loads((tmp_path / "run.jsonl").read_text())["record"]["turns"][0]
