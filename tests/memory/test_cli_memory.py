"""`agentgym memory list | show | search | prune | export | import` and `agentgym eval --memory`, including the bad inputs users give."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.cli import main
from agentgym.memory.bank import MemoryBank
from agentgym.memory.induction import EpisodeRecord, SkillDraft
from agentgym.memory.store import Entry
from tests.helpers.memory_policies import GOOD, HARMFUL

AGENTGYM = Path(sys.executable).with_name("agentgym")
TASK = "Find the number stored under cloud. Use lookup(key); an entry may point to another key. Then submit(answer)."


@pytest.fixture
def store(tmp_path) -> str:
    path = tmp_path / "memory.db"
    bank = MemoryBank(path)
    bank.add_episode(EpisodeRecord(env="keychain", task_id="train-1", task=TASK, reward=1.0, success=True))
    bank.add_skill(
        SkillDraft("solve", "key chains", GOOD, env="keychain", family="train"), validation={"gain": 0.5, "n": 10}
    )
    bank.add_skill(SkillDraft("guess", "key chains", HARMFUL, env="keychain", family="train"))
    bank.close()
    return str(path)


def run(capsys, *args) -> tuple[int, str, str]:
    try:
        code = main(["memory", *args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return code, captured.out, captured.err + (exc.code if isinstance(exc.code, str) else "")
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_and_show(store, capsys):
    code, out, _ = run(capsys, "list", store)
    assert code == 0 and len(out.splitlines()) == 3
    assert "solve" in out and "utility=0.500 uses=0 v1" in out
    code, out, _ = run(capsys, "list", store, "--kind", "skill", "--limit", "1")
    assert out.splitlines()[1] == "... more (raise --limit)"
    code, out, _ = run(capsys, "show", store, "2")
    assert code == 0 and "[skill 2] solve (utility +0.50" in out and '"uses": 0' in out


def test_search(store, capsys):
    code, out, _ = run(capsys, "search", store, "number stored under frost", "--kind", "episode")
    assert code == 0 and len(out.splitlines()) == 1 and "episode  Find the number stored under cloud" in out
    code, out, _ = run(capsys, "search", store, "zzzz")
    assert code == 0 and out.strip() == "(no match)"


def test_prune_removes_and_reports(store, capsys):
    code, out, _ = run(capsys, "prune", store, "--max-skills", "1", "--max-episodes", "0")
    assert code == 0 and json.loads(out) == {"merged": [], "pruned": [], "evicted": [3, 1]}
    code, out, _ = run(capsys, "list", store)
    assert len(out.splitlines()) == 1 and "solve" in out


def test_export_then_import_round_trips(store, tmp_path, capsys):
    exported = tmp_path / "memory.jsonl"
    code, _, err = run(capsys, "export", store, str(exported))
    assert code == 0 and "exported 3 entries" in err
    target = str(tmp_path / "copy.db")
    code, out, _ = run(capsys, "import", target, str(exported))
    assert code == 0 and "imported 3 entries" in out
    original = [json.loads(line) for line in exported.read_text().splitlines()]
    copied = list(MemoryBank(target).store.entries())
    assert [(e.kind, e.title, e.data, e.created) for e in copied] == [
        (r["kind"], r["title"], r["data"], r["created"]) for r in original
    ]


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"kind": 3, "text": "x"}', "string 'kind' and 'text'"),
        ('{"kind": "skill", "text": "x", "data": [1]}', "'data' must be a JSON object"),
        ('{"kind": "skill", "text": "x", "colour": "red"}', "unknown fields ['colour']"),
        ("{not json", "Expecting property name"),
    ],
)
def test_a_bad_import_file_imports_nothing(tmp_path, capsys, line, problem):
    source = tmp_path / "in.jsonl"
    source.write_text('{"kind": "episode", "text": "fine"}\n' + line + "\n")
    code, _, err = run(capsys, "import", str(tmp_path / "new.db"), str(source))
    assert code == 2 and "in.jsonl:2: " in err and problem in err
    assert not (tmp_path / "new.db").exists()


def test_bad_stores_and_ids_are_clear_errors(store, tmp_path, capsys):
    code, _, err = run(capsys, "list", str(tmp_path / "missing.db"))
    assert code == 2 and "no memory store at" in err
    code, _, err = run(capsys, "show", store, "99")
    assert code == 2 and f"no entry 99 in {store}" in err
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not sqlite")
    code, _, err = run(capsys, "list", str(garbage))
    assert code == 2 and "cannot read" in err and "not a database" in err
    with pytest.raises(SystemExit) as usage:
        main(["memory", "show", store, "seven"])
    assert usage.value.code == 2


def test_show_warns_about_corrupted_skill_data(store, capsys):
    bank = MemoryBank(store)
    broken = bank.store.add(Entry(kind="skill", text="t", title="broken", data={"steps": 5}))
    code, out, err = run(capsys, "show", store, str(broken))
    assert code == 0 and '"steps": 5' in out and f"skill {broken} has no usable procedure" in err


def test_empty_store(tmp_path, capsys):
    MemoryBank(tmp_path / "empty.db").close()
    assert run(capsys, "list", str(tmp_path / "empty.db"))[1].strip() == "(no entries)"


def test_eval_with_memory_learns_and_read_mode_needs_a_store(tmp_path):
    suite = tmp_path / "keychain.jsonl"
    suite.write_text("".join(json.dumps({"env": "tool.keychain-v0", "task_id": f"train-{i}"}) + "\n" for i in range(2)))
    store = tmp_path / "memory.db"
    base = [str(AGENTGYM), "eval", "--suite", str(suite), "--policy", "nonsense", "--memory", str(store)]
    result = subprocess.run(
        [*base, "--memory-mode", "learn", "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert MemoryBank(store).store.count(kind="episode") == 2
    missing = subprocess.run(
        [*base[:-1], str(tmp_path / "none.db"), "--out", str(tmp_path / "run2")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and "read mode needs an existing store" in missing.stderr
