"""Tests for the code.repofix-v0 task generator (tools/repofix): mutation operators, diff helpers, the shipped tasks.jsonl
and repos archive, host-side re-verification of a few tasks, and determinism of the candidate plan."""

import dataclasses
import io
import json
import shutil
import subprocess
import tarfile
from collections import Counter

import pytest

from agentgym.envs.code import repofix_tasks as tasks
from tools.repofix import repofix_gen as gen
from tools.repofix import repofix_mutate as mutate
from tools.repofix import repos_archive

REQUIRED_FIELDS = {
    "instance_id": str,
    "repo": str,
    "version": str,
    "base_commit": str,
    "problem_statement": str,
    "hints_text": str,
    "patch": str,
    "test_patch": str,
    "bug_patch": str,
    "FAIL_TO_PASS": list,
    "PASS_TO_PASS": list,
    "test_command": str,
    "difficulty": dict,
    "created_by": str,
}


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """The vendored libraries unpacked from the shipped archive, one directory each (read-only by convention)."""
    return gen.unpack_repos(tmp_path_factory.mktemp("repos"))


def mutants(source: str, operator: str) -> list[str]:
    """Every applicable mutant of `source` produced by one operator."""
    found = []
    for m in mutate.find_mutations(source):
        if m.operator == operator:
            mutated = mutate.apply_mutation(source, m)
            if mutated is not None:
                found.append(mutated)
    return sorted(found)


def body(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


# --- operators ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "operator, source, expected",
    [
        ("flip_comparison", body("def f(a, b):", "    return a < b"), [body("def f(a, b):", "    return a <= b")]),
        ("flip_comparison", body("def f(a):", "    return a is not None"), [body("def f(a):", "    return a is None")]),
        ("flip_comparison", body("def f(a, b):", "    return a not in b"), [body("def f(a, b):", "    return a in b")]),
        (
            "off_by_one",
            body("def f(xs):", "    return xs[0]"),
            [body("def f(xs):", "    return xs[-1]"), body("def f(xs):", "    return xs[1]")],
        ),
        (
            "off_by_one",
            body("def f(n):", "    return list(range(1, n))"),
            sorted(
                body("def f(n):", f"    return list(range({a}, {b}))")
                for a, b in [("2", "n"), ("0", "n"), ("1", "n + 1"), ("1", "n - 1")]
            ),
        ),
        ("off_by_one", body("def f(i):", "    return i + 1"), [body("def f(i):", "    return i")]),
        (
            "wrong_slice_bound",
            body("def f(s, n):", "    return s[:n]"),
            [body("def f(s, n):", "    return s[:n + 1]"), body("def f(s, n):", "    return s[:n - 1]")],
        ),
        ("swap_and_or", body("def f(a, b):", "    return a and b"), [body("def f(a, b):", "    return a or b")]),
        # `a and b or c`: swapping the inner `and` needs parentheses to keep its grouping; swapping
        # the outer `or` cannot be written without regrouping and is rejected by the AST check.
        (
            "swap_and_or",
            body("def f(a, b, c):", "    return a and b or c"),
            [body("def f(a, b, c):", "    return (a or b) or c")],
        ),
        (
            "drop_not",
            body("def f(a, b, c):", "    return c and not (a or b)"),
            [body("def f(a, b, c):", "    return c and (a or b)")],
        ),
        ("wrong_arith", body("def f(a, b):", "    return a * b"), [body("def f(a, b):", "    return a / b")]),
        (
            "wrong_arith",
            body("def f(a, b):", "    a //= b", "    return a"),
            [body("def f(a, b):", "    a /= b", "    return a")],
        ),
        ("wrong_arith", body("def f(a):", "    return 'x' + a"), []),
        (
            "wrong_return",
            body("def f(a):", "    b = a * 2", "    return b"),
            [body("def f(a):", "    b = a * 2", "    return a")],
        ),
        ("wrong_return", body("def f():", "    return True"), [body("def f():", "    return False")]),
        ("swap_args", body("def f(a, b):", "    return g(a, b)"), [body("def f(a, b):", "    return g(b, a)")]),
        ("swap_args", body("def f(a, b):", "    return isinstance(a, b)"), []),
        (
            "delete_statement",
            body(
                "def f(xs):",
                "    out = []",
                "    for x in xs:",
                "        if x is None:",
                "            continue",
                "        out.append(x)",
                "    return out",
            ),
            sorted(
                [
                    body("def f(xs):", "    out = []", "    for x in xs:", "        out.append(x)", "    return out"),
                    body(
                        "def f(xs):",
                        "    out = []",
                        "    for x in xs:",
                        "        if x is None:",
                        "            continue",
                        "    return out",
                    ),
                ]
            ),
        ),
        (
            "delete_statement",
            body("def f(xs):", "    if xs:", "        xs.sort()  # in place", "    return xs"),
            [body("def f(xs):", "    if xs:", "        pass", "    return xs")],
        ),
        (
            "wrong_default",
            body("def f(a, strict=True, *, n=0):", "    return a"),
            sorted(
                [
                    body("def f(a, strict=False, *, n=0):", "    return a"),
                    body("def f(a, strict=True, *, n=1):", "    return a"),
                ]
            ),
        ),
    ],
)
def test_operator_gives_expected_source(operator, source, expected):
    assert mutants(source, operator) == expected


def test_mutations_skip_docstrings_and_attribute_nested_functions():
    source = body(
        "class A:",
        "    @decorate(1 + 1)",
        "    def m(self, x):",
        '        """Return x < 1."""',
        "        def inner(y):",
        "            return y < x",
        "        return inner",
    )
    found = mutate.find_mutations(source)
    assert {m.function for m in found} == {"A.m", "A.m.<locals>.inner"}
    comparisons = [m for m in found if m.operator == "flip_comparison"]
    assert [m.function for m in comparisons] == ["A.m.<locals>.inner"]  # not the docstring, not the decorator
    assert mutate.apply_mutation(source, comparisons[0]) == source.replace("y < x", "y <= x")


def test_offsets_are_bytes_so_non_ascii_source_works():
    source = body("def f(s):", "    return s == 'é' and len(s) > 1")
    assert mutants(source, "flip_comparison") == sorted([source.replace("==", "!="), source.replace("> 1", ">= 1")])


def test_apply_mutation_rejects_edits_that_do_not_produce_the_intended_tree():
    source = body("def f(a, b):", "    return a < b")
    (m,) = [m for m in mutate.find_mutations(source) if m.operator == "flip_comparison"]
    (edits,) = m.alternatives
    start, end, _ = edits[0]
    assert mutate.apply_mutation(source, dataclasses.replace(m, alternatives=(((start, end, ">"),),))) is None


def test_find_mutations_is_stable(repos):
    source = (repos / "inflection" / "inflection" / "__init__.py").read_text()
    assert mutate.find_mutations(source) == mutate.find_mutations(source)


# --- diffs, patches, reports ---------------------------------------------------------------------------


def test_file_diff_round_trips_through_git_apply_and_patch(tmp_path):
    for tool in ("git", "patch"):
        work = tmp_path / tool
        work.mkdir()
        (work / "mod.py").write_text("a = 1\nb = 2\nc = 3")  # no newline at end of file
        (work / "gone.py").write_text("x = 1\n")
        diff = (
            gen.file_diff("mod.py", "a = 1\nb = 2\nc = 3", "a = 1\nb = 20\nc = 3")
            + gen.file_diff("gone.py", "x = 1\n", None)
            + gen.file_diff("sub/new.py", None, "y = 2\n")
        )
        if tool == "git":
            tasks.apply_patch(diff, work)
        else:
            subprocess.run(["patch", "-p1", "--batch", "--quiet"], cwd=work, input=diff.encode(), check=True)
        assert (work / "mod.py").read_text() == "a = 1\nb = 20\nc = 3"
        assert not (work / "gone.py").exists()
        assert (work / "sub" / "new.py").read_text() == "y = 2\n"


def test_apply_patch_raises_when_the_patch_does_not_fit(tmp_path):
    (tmp_path / "mod.py").write_text("a = 1\n")
    with pytest.raises(tasks.PatchError):
        tasks.apply_patch(gen.file_diff("mod.py", "a = 2\n", "a = 3\n"), tmp_path)


def test_parse_pytest_report():
    output = "\n".join(
        [
            "..F",
            "=========================== short test summary info ============================",
            "PASSED tests/test_a.py::test_one",
            "PASSED tests/test_a.py::test_p[a - b]",
            "PASSED tests/test_a.py::test_teardown",
            "ERROR tests/test_a.py::test_teardown - RuntimeError: boom",
            "FAILED tests/test_a.py::test_two - assert 1 == 2",
            "SKIPPED [1] tests/test_a.py:9: no numpy",
            "ERROR tests/test_b.py - ImportError: nope",
        ]
    )
    assert tasks.parse_pytest_report(output) == {
        "tests/test_a.py::test_one": True,
        "tests/test_a.py::test_p[a": True,  # why the generator never ships ids containing " - "
        "tests/test_a.py::test_teardown": False,
        "tests/test_a.py::test_two": False,
    }


def _failure(**overrides):
    failure = {
        "exc_type": "AssertionError",
        "exception": "AssertionError: assert 'CamelCase' == 'Camelcase'",
        "raised_in_test": True,
        "statement": "assert camel == inflection.camelize(underscore)",
        "locals": {"camel": "'CamelCase'", "underscore": "'camel_case'"},
        "params": {"camel": "'CamelCase'", "underscore": "'camel_case'"},
        "test_source": (
            "@pytest.mark.parametrize(('camel', 'underscore'), CASES)\n"
            "def test_camelize(camel, underscore):\n"
            '    """Camel case."""\n'
            "    assert camel == inflection.camelize(underscore)\n"
        ),
        "stdout": "",
    }
    return dict(failure, **overrides)


def test_problem_statement_reads_like_a_bug_report():
    node = "test_inflection.py::test_camelize[camel_case-CamelCase]"
    text = gen.problem_statement("inflection", [node], {node: _failure()}, {"camelize", "_helper"}, "_helper")
    assert text.splitlines()[0] == "`camelize` returns a wrong result"  # the public call, not the broken helper
    assert "assert 'CamelCase' == inflection.camelize('camel_case')" in text  # parameters filled in
    assert "AssertionError: assert 'CamelCase' == 'Camelcase'" in text
    assert "test_" not in text and "Camel case." not in text and "_helper" not in text


def test_problem_statement_for_an_exception_hides_object_addresses():
    failure = _failure(
        exc_type="error", exception="zlib.error: bad stream <Obj at 0x7f00deadbeef>", raised_in_test=False
    )
    text = gen.problem_statement("inflection", ["t.py::t"], {"t.py::t": failure}, {"camelize"}, "camelize")
    assert text.splitlines()[0] == "`camelize` raises zlib.error"
    assert "0x..." in text and "deadbeef" not in text


def test_load_tasks_decodes_swe_bench_string_lists(tmp_path):
    path = tmp_path / "swe.jsonl"
    path.write_text(json.dumps({"instance_id": "x", "FAIL_TO_PASS": '["t::a"]', "PASS_TO_PASS": "[]"}) + "\n\n")
    assert tasks.load_tasks(path) == [{"instance_id": "x", "FAIL_TO_PASS": ["t::a"], "PASS_TO_PASS": []}]


def test_load_tasks_hands_out_copies_and_rereads_a_changed_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"instance_id": "x", "FAIL_TO_PASS": ["t::a"]}) + "\n")
    first = tasks.load_tasks(path)
    first[0]["FAIL_TO_PASS"].append("changed by a caller")
    assert tasks.load_tasks(path) == [{"instance_id": "x", "FAIL_TO_PASS": ["t::a"]}]
    path.write_text(json.dumps({"instance_id": "y", "FAIL_TO_PASS": []}) + "\n")  # another size
    assert tasks.load_tasks(path) == [{"instance_id": "y", "FAIL_TO_PASS": []}]


def test_grade_results():
    task = {"FAIL_TO_PASS": ["a", "b"], "PASS_TO_PASS": ["c"]}
    assert tasks.grade_results(task, {"a": True, "b": True, "c": True})["resolved"]
    verdict = tasks.grade_results(task, {"a": True, "c": True})
    assert not verdict["resolved"] and verdict["fail_to_pass"] == {"passed": 1, "total": 2}


# --- the shipped tasks ------------------------------------------------------------------------------------

TASKS = tasks.load_tasks()


def test_shipped_tasks_are_plentiful_unique_and_spread():
    assert len(TASKS) >= 30
    assert len({t["instance_id"] for t in TASKS}) == len(TASKS)
    by_repo = Counter(t["repo"] for t in TASKS)
    assert set(by_repo) == set(gen.SPECS)
    assert max(by_repo.values()) <= 0.4 * 50  # the generator's cap for its default --count
    assert len({t["difficulty"]["operator"] for t in TASKS}) >= 6


@pytest.mark.slow  # a whole-benchmark sweep: every shipped task
@pytest.mark.parametrize("task", TASKS, ids=[t["instance_id"] for t in TASKS])
def test_shipped_task_is_well_formed(task, repos):
    for name, kind in REQUIRED_FIELDS.items():
        assert isinstance(task[name], kind), name
    assert task["created_by"] == gen.CREATED_BY
    assert task["base_commit"] == tasks.tree_digest(repos / task["repo"])
    f2p, p2p = task["FAIL_TO_PASS"], task["PASS_TO_PASS"]
    assert 1 <= len(f2p) <= 10 and not set(f2p) & set(p2p)
    assert all(gen._portable(n) for n in f2p + p2p)
    hidden = tasks.patched_files(task["test_patch"])
    assert hidden == gen.task_test_files(task)
    assert task["test_command"] == "python3 -m pytest -rA -p no:cacheprovider " + " ".join(hidden)
    (source,) = tasks.patched_files(task["patch"])
    assert tasks.patched_files(task["bug_patch"]) == sorted([source, *hidden])
    assert "deleted file mode" in task["bug_patch"] and "new file mode" in task["test_patch"]
    assert {"operator", "changed_lines"} <= set(task["difficulty"]) and task["difficulty"]["changed_lines"] >= 1
    statement = task["problem_statement"].lower()
    assert not any(word in statement for word in ("inject", "mutat", "mutant"))
    assert not any(path.lower() in statement for path in hidden)  # the hidden tests stay unnamed


@pytest.mark.slow  # a whole-benchmark sweep: every shipped task
@pytest.mark.parametrize("task", TASKS, ids=[t["instance_id"] for t in TASKS])
def test_shipped_patches_apply(task, tmp_path, repos):
    work = tasks.materialize_workspace(task, tmp_path / "ws")
    for path in tasks.patched_files(task["test_patch"]):
        assert not (work / path).exists()
    tasks.apply_patch(task["test_patch"], work)
    tasks.apply_patch(task["patch"], work)
    assert tasks.tree_digest(work) == task["base_commit"]
    # The same three diffs also apply with GNU patch, as a sandbox without git would use them.
    with_patch = gen.copy_repo(repos / task["repo"], tmp_path / "patch")
    for diff in (task["bug_patch"], task["test_patch"], task["patch"]):
        subprocess.run(["patch", "-p1", "--batch", "--quiet"], cwd=with_patch, input=diff.encode(), check=True)
    assert tasks.tree_digest(with_patch) == task["base_commit"]


def _one_per_repo():
    seen, picked = set(), []
    for task in TASKS:
        if task["repo"] not in seen:
            seen.add(task["repo"])
            picked.append(task)
    return picked


@pytest.mark.parametrize("task", _one_per_repo(), ids=lambda t: t["instance_id"])
def test_shipped_task_verifies_on_the_host(task, repos):
    problems = gen.verify_task(task, repos / task["repo"], gen.pytest_runner())
    assert problems == []


def test_verify_task_reports_a_task_whose_tests_do_not_fail(repos):
    # A "bug" that breaks nothing: its FAIL_TO_PASS test passes on the buggy code too.
    task = dict(TASKS[0], FAIL_TO_PASS=TASKS[0]["PASS_TO_PASS"][:1], PASS_TO_PASS=[])
    fake_results = {n: True for n in task["FAIL_TO_PASS"]}
    problems = gen.verify_task(task, repos / task["repo"], lambda _dir, _files: fake_results)
    assert problems and all(p.startswith("buggy:") for p in problems)


# --- determinism ----------------------------------------------------------------------------------------


def _plan(seed, repos):
    specs = [gen.SPECS["inflection"], gen.SPECS["semver"]]
    return [
        (c.repo, c.path, c.mutation.function, c.mutation.operator, c.mutation.description, c.mutated)
        for c in gen.plan_candidates(seed, repos, specs, per_repo=40)
    ]


def test_candidate_plan_is_deterministic_for_a_seed(repos):
    first = _plan(0, repos)
    assert len(first) > 40 and first == _plan(0, repos)
    assert first != _plan(1, repos)


def test_vendored_repos_carry_licenses_and_no_build_litter(repos):
    assert sorted(p.name for p in repos.iterdir()) == sorted(spec.name for spec in gen.REPOS)
    for spec in gen.REPOS:
        root = repos / spec.name
        assert any(root.glob("LICENSE*")), spec.name
        assert (root / "pytest.ini").exists()
        assert not list(root.rglob("__pycache__"))
        assert spec.source_files(root) and spec.test_files(root)
        assert not set(spec.source_files(root)) & set(spec.test_files(root))
    assert tasks.REPOS_ARCHIVE.stat().st_size < 2**20
    assert shutil.which("git") and shutil.which("patch")


def test_packing_the_unpacked_repos_gives_the_shipped_archive_byte_for_byte(repos, tmp_path):
    (repos / "toolz" / "__pycache__").mkdir()
    (repos / "toolz" / "__pycache__" / "x.pyc").write_bytes(b"litter")
    try:
        packed = repos_archive.pack(repos, tmp_path / "repos.tar.gz")
    finally:
        shutil.rmtree(repos / "toolz" / "__pycache__")
    assert packed.read_bytes() == tasks.REPOS_ARCHIVE.read_bytes()


def test_unpack_repo_refuses_an_unknown_repo_and_a_member_outside_it(tmp_path):
    with pytest.raises(tasks.PatchError, match="no such repository"):
        tasks.unpack_repo("numpy", tmp_path / "numpy")
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("toolz/../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tasks.PatchError, match="outside its repository"):
        tasks.unpack_repo("toolz", tmp_path / "work" / "toolz", evil)
    assert not (tmp_path / "escaped").exists()
