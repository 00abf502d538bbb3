"""The cluster's one memory bank: envs on both nodes read and write it through ``shared: true``, a worker killed mid-write loses no acknowledged episode, and the bank actor killed and restarted keeps its store."""

from __future__ import annotations

import pytest

from agentgym.envs.tool.keychain import demonstration, make_task
from agentgym.memory.config import MemoryConfig
from agentgym.memory.induction import EpisodeRecord, summarize_episode
from agentgym.memory.store import MemoryStore

ENV_ID = "agentgym/tool.keychain-v0"


class EpisodeHost:
    """A Ray actor holding one KeyChain env made the way an env worker makes it (make_env_factory wrapped by the memory section)."""

    def __init__(self, memory: dict):
        from agentgym.registration import make_env_factory

        self.env = MemoryConfig.from_dict(memory).wrap(make_env_factory(ENV_ID))()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def bank_status(self) -> dict:
        return self.env.bank.status()

    def play(self, task_id: str) -> dict:
        """One scripted episode; what it retrieved at reset and the memory error of its last step (None: written)."""
        _, info = self.env.reset(options={"task_id": task_id})
        for reply in demonstration(make_task(task_id)):
            *_, last = self.env.step(reply)
        return {"retrieved": info["memory"]["episodes"], "error": last.get("memory_error")}

    def stream(self, task_ids: list[str]):
        """Plays ``task_ids`` one after another, yielding ``(task_id, memory error or None)`` as each episode ends."""
        for task_id in task_ids:
            yield task_id, self.play(task_id)["error"]


@pytest.fixture
def cluster(ray_cluster):
    """(head node id, other node id, a function starting an EpisodeHost on a node); hosts and bank actors are killed after."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from agentgym.memory.remote import NAMESPACE, bank_name

    head = ray_cluster.head_node.node_id
    other = next(node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeID"] != head)
    hosts, stores = [], []

    def host(node_id: str, memory: dict):
        stores.append(memory["path"])
        actor = (
            ray.remote(EpisodeHost)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
            .remote(memory)
        )
        hosts.append(actor)
        return actor

    yield head, other, host
    for actor in hosts:
        ray.kill(actor)
    for path in stores:
        try:
            ray.kill(ray.get_actor(bank_name(path), namespace=NAMESPACE))
        except ValueError:  # never created, or already gone
            pass


def episodes(path) -> dict[int, EpisodeRecord]:
    """Every episode entry of the store, read from the file; each must be whole (record, summary and tag agree)."""
    with MemoryStore(path, read_only=True) as store:
        assert store._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        found = {}
        for entry in store.entries(kind="episode"):
            record = EpisodeRecord.from_dict(entry.data["record"])
            assert (entry.title, entry.text) == summarize_episode(record), f"entry {entry.id} is torn"
            assert entry.task == record.task_id and entry.tags == ["success" if record.success else "failure"]
            found[entry.id] = record
        return found


def test_shared_must_be_a_boolean_and_a_missing_store_fails_when_the_bank_opens(cluster, tmp_path):
    import ray

    from agentgym.memory.remote import NAMESPACE, bank_name

    with pytest.raises(ValueError, match="shared must be true or false"):
        MemoryConfig.from_dict({"path": str(tmp_path / "m.db"), "shared": "yes"})
    missing = tmp_path / "missing.db"
    config = MemoryConfig(str(missing), mode="read", shared=True)  # the store is the head node's: checked there
    with pytest.raises(ValueError, match=r"could not open .*missing\.db on the head node: .*does not exist"):
        config.open_bank()
    with pytest.raises(ValueError):  # the actor that failed to open is gone; nothing waits for it
        ray.get_actor(bank_name(missing, read_only=True), namespace=NAMESPACE)
    assert not missing.exists()


def test_envs_on_both_nodes_write_to_one_bank_and_retrieve_each_others_episodes(cluster, tmp_path):
    import ray

    head, other, host = cluster
    memory = {"path": str(tmp_path / "memory.db"), "shared": True, "k_episodes": 2}
    far = host(other, memory)  # the first to ask makes the bank, on the head node all the same
    near = host(head, memory)
    assert ray.get([far.node.remote(), near.node.remote()]) == [other, head]
    far_bank, near_bank = ray.get([far.bank_status.remote(), near.bank_status.remote()])
    assert far_bank["pid"] == near_bank["pid"] and far_bank["node_id"] == head

    first = ray.get(far.play.remote("train-1"))
    second = ray.get(near.play.remote("train-2"))
    third = ray.get(far.play.remote("train-3"))
    written = episodes(memory["path"])
    assert first == {"retrieved": [], "error": None} and second["error"] is None and third["error"] is None
    assert [written[i].task_id for i in second["retrieved"]] == ["train-1"]  # the far node's episode
    assert "train-2" in {written[i].task_id for i in third["retrieved"]}  # the near node's episode

    # Both nodes at once: every episode lands once.
    tasks = {far: [f"train-{n}" for n in range(10, 16)], near: [f"train-{n}" for n in range(20, 26)]}
    results = ray.get([actor.play.remote(task) for actor, ids in tasks.items() for task in ids])
    assert all(result["error"] is None for result in results)
    played = sorted(record.task_id for record in episodes(memory["path"]).values())
    assert played == sorted(["train-1", "train-2", "train-3", *tasks[far], *tasks[near]])


def test_a_worker_killed_mid_stream_of_writes_loses_no_acknowledged_episode(cluster, tmp_path):
    import ray

    from agentgym.memory.remote import RemoteBank

    _, other, host = cluster
    memory = {"path": str(tmp_path / "memory.db"), "shared": True}
    writer = host(other, memory)
    bank_pid = ray.get(writer.bank_status.remote())["pid"]
    acknowledged = []
    for ref in writer.stream.remote([f"train-{n}" for n in range(200)]):
        task_id, error = ray.get(ref)
        assert error is None
        acknowledged.append(task_id)
        if len(acknowledged) == 25:
            ray.kill(writer)  # while it is playing (and writing) the next episodes
            break
    stored = [record.task_id for record in episodes(memory["path"]).values()]  # all whole
    assert set(acknowledged) <= set(stored) and len(stored) == len(set(stored)) < 200

    bank = RemoteBank(memory["path"])  # the bank still serves, from the same actor
    assert bank.status()["pid"] == bank_pid and bank.status()["episodes"] >= len(stored)
    [retrieved] = bank.retrieve("Find the number stored under", k_episodes=1).episodes
    record = EpisodeRecord.from_dict(retrieved.data["record"])
    added = bank.add_episode(record)
    assert episodes(memory["path"])[added].task_id == record.task_id


def test_the_bank_actor_killed_and_restarted_reopens_the_same_store(cluster, tmp_path):
    import ray

    from agentgym.memory.remote import RemoteBank

    head, other, host = cluster
    memory = {"path": str(tmp_path / "memory.db"), "shared": True}
    writer = host(other, memory)
    bank = RemoteBank(memory["path"])
    before = bank.status()
    results = []
    for ref in writer.stream.remote([f"train-{n}" for n in range(40)]):
        results.append(ray.get(ref))
        if len(results) == 10:
            ray.kill(bank.actor, no_restart=False)  # the writer is mid-stream
    after = bank.status()
    assert after["pid"] != before["pid"] and after["path"] == before["path"] and after["node_id"] == head
    acknowledged = [task_id for task_id, error in results if error is None]
    stored = [record.task_id for record in episodes(memory["path"]).values()]  # all whole
    # At most the write in flight when the actor died failed (reported, not lost silently), and it stayed out or whole.
    assert len(acknowledged) >= 39 and set(acknowledged) <= set(stored) and len(stored) == len(set(stored))
    assert after["episodes"] == len(stored)
    assert bank.retrieve("Find the number stored under", k_episodes=3).episodes
