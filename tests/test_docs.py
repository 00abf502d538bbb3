"""The README and the docs site as users meet them: the site builds strict, and the Python examples run as written.

Every ```python block in README.md and docs/ is either run by a test here (``RUN``, keyed by file and
heading) or says why not in an HTML comment on the line above its fence (``<!-- not run: ... -->``,
invisible on GitHub and on the site); a new block that is neither fails ``test_every_python_example_is_run``.
"""

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import warnings
from itertools import takewhile
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_RUN = re.compile(r"<!-- not run: [^>]+ -->")

# (file, heading) of every example a test below runs.
RUN = {
    ("README.md", "Writing an environment"),
    ("docs/envs/index.md", "Using an env"),
    ("docs/envs/index.md", "Playing a reference solution"),
    ("docs/rollouts.md", "Rollouts"),
    ("docs/memory.md", "Memory and skill banks"),
    ("docs/envs/text.md", "Text worlds"),
    ("docs/gateway.md", "A first episode"),
    ("docs/envs/conversation.md", "Conversations (simulated users)"),
    ("docs/interoperability.md", "Any OpenEnv client"),
    ("docs/interoperability.md", "Branching over the protocol"),
    ("docs/interoperability.md", "agentgym envs in TRL's own GRPOTrainer"),
}


def python_blocks(path: Path) -> list[tuple[str, str, bool]]:
    """(heading, code, marked not run) of each ```python block of ``path``, under the nearest heading above it."""
    blocks, heading, previous = [], "", ""
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if line.startswith("```"):
            body = list(takewhile(lambda inner: not inner.startswith("```"), lines))  # consumes the closing fence
            if line.strip() == "```python":
                blocks.append((heading, "\n".join(body) + "\n", bool(NOT_RUN.fullmatch(previous))))
            previous = ""
            continue
        if match := re.match(r"#{1,6} (.+)", line):
            heading = match.group(1).strip()
        if line.strip():
            previous = line.strip()
    return blocks


def example(relative: str, heading: str) -> str:
    """The one Python example under ``heading`` in ``relative`` (a path from the repository root)."""
    found = [code for section, code, _ in python_blocks(ROOT / relative) if section == heading]
    assert len(found) == 1, f"{relative}: expected one python block under {heading!r}, found {len(found)}"
    return found[0]


def run_example(relative: str, heading: str) -> dict:
    namespace: dict = {}
    exec(compile(example(relative, heading), relative, "exec"), namespace)
    return namespace


def test_every_python_example_is_run():
    unmarked = {
        (page.relative_to(ROOT).as_posix(), heading)
        for page in PAGES
        for heading, _, not_run in python_blocks(page)
        if not not_run
    }
    assert unmarked == RUN


def test_docs_build_strict(tmp_path):
    """mkdocs.yml's strict build: a broken link or anchor, a missing snippet or API reference, a bad docstring fail it."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # Material's notice about MkDocs 2, not about these docs
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    site = tmp_path / "site"
    assert "GuessEnv" in (site / "envs" / "writing" / "index.html").read_text()  # the README's section
    # A lazily exported name (docs/extensions/lazy_exports.py) has its entry on its package's page.
    assert 'id="agentgym.rollout.Runner"' in (site / "reference" / "rollout" / "index.html").read_text()


def test_readme_links_resolve():
    """The README is read on GitHub, outside the site: its links into docs/ and to its own sections must hold too."""
    text = (ROOT / "README.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        path, _, anchor = link.partition("#")
        if path:
            assert (ROOT / path).exists(), link
        else:
            assert anchor in anchors, link


def test_bare_agentgym_commands_come_after_how_the_command_gets_on_path():
    """`make demo` installs into .venv, which is not on PATH: the pages and the demo itself say so before any bare
    `agentgym ...` command, and how to install from a clone names the distribution, not PyPI's other `agentgym`."""
    activate = "source .venv/bin/activate"
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        text = page.read_text()
        first_command = re.search(r"^agentgym (envs|tasks|serve|eval|train|memory|images|sandbox|openenv) ", text, re.M)
        assert activate in text[: first_command.start() if first_command else None], page
        assert "pip install -e '.[all]'" in text and "agentgym-envs" in text, page
        assert not re.search(r"pip install '?agentgym[\[' ]", text), page
    demo = re.search(r"^demo:.*?\n\n", (ROOT / "Makefile").read_text(), re.S | re.M)
    assert demo and activate in demo.group(), "make demo ends by saying how agentgym gets on PATH"


def shell_commands(path: Path) -> list[str]:
    """The commands of each ```bash block of ``path``: continuation lines joined, comments and blank lines left out."""
    commands = []
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if line.startswith("```"):
            body = list(takewhile(lambda inner: not inner.startswith("```"), lines))
            if line.strip() == "```bash":
                text = "\n".join(body).replace("\\\n", " ")
                commands += [c for c in (re.sub(r"(^|\s)#.*", "", c).strip() for c in text.splitlines()) if c]
    return commands


def test_every_documented_command_runs_as_written_from_a_clone():
    """What a fresh clone can run: each `agentgym ...` command parses with the real parser (a synopsis with
    `...`, `[...]` or `a|b` left out), each file a command names exists, and nothing is installed from PyPI
    under agentgym's names (it is not published; PyPI's `agentgym` is another project)."""
    from agentgym.cli import build_parser

    checked = 0
    for page in PAGES:
        for command in shell_commands(page):
            where = f"{page.relative_to(ROOT)}: {command}"
            for part in (p.strip() for p in command.split("&&")):
                words = shlex.split(part)
                assert not re.search(
                    r"pip install (-\S+ )*'?agentgym(-envs)?[\[' ]|pip install (-\S+ )*'?agentgym(-envs)?$", part
                ), where
                named = [w for w in words if re.match(r"(examples|scripts|benchmarks|docs)/\S+\.\w+$", w)]
                assert all((ROOT / w).exists() for w in named), where
                if words[0] == "agentgym" and not re.search(r"\.\.\.|\[|\|", part):
                    try:
                        build_parser().parse_args(words[1:])
                    except SystemExit as exc:
                        raise AssertionError(f"does not parse: {where}") from exc
                    checked += 1
    assert checked > 30


def test_writing_an_environment_example_works():
    run_example("README.md", "Writing an environment")
    import gymnasium

    env = gymnasium.make("agentgym/Guess-v0")
    env.reset(options={"task_id": "42"})
    assert env.step("guess(50)")[0]["text"] == "Lower."
    branch = env.fork()
    assert branch.step('<tool_call>{"name": "guess", "arguments": {"n": 42}}</tool_call>')[1:3] == (1.0, True)
    assert "must be integer" in env.step('guess("x")')[4]["error"]

    # Gymnasium's own checker passes without a warning, though GuessEnv never mentions render_mode or render_fps
    # (on the env gymnasium.make built: check_env warns that it checks wrappers instead when given the stack).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(gymnasium.make("agentgym/Guess-v0").unwrapped, skip_render_check=False)
    assert [str(w.message) for w in caught] == []


@pytest.mark.docker
def test_using_an_env_example_works(docker_ready, capsys):
    namespace = run_example("docs/envs/index.md", "Using an env")
    assert "def has_close_elements" in capsys.readouterr().out  # HumanEval/0's task, printed
    assert namespace["info"]["task_id"] == "HumanEval/0" and not namespace["info"]["error"]


def test_text_worlds_example_works(capsys):
    namespace = run_example("docs/envs/text.md", "Text worlds")
    try:
        assert capsys.readouterr().out.startswith("Mission: go to ")  # the first observation, printed
        assert namespace["info"]["task_id"] == "test/GoToLocal/0" and "turn left" in namespace["info"]["valid_actions"]
        assert not namespace["info"].get("error")
    finally:
        namespace["env"].close()


def test_gateway_example_works(capsys):
    namespace = run_example("docs/gateway.md", "A first episode")
    trajectory = namespace["trajectory"]
    (turn,) = trajectory.turns
    assert turn.completion_ids and len(turn.logprobs) == len(turn.completion_ids)
    assert trajectory.metadata["graded_by"] == "gateway" and trajectory.metadata["program_error"] is None
    assert "prompt ids," in capsys.readouterr().out


def test_conversation_example_works(capsys):
    namespace = run_example("docs/envs/conversation.md", "Conversations (simulated users)")
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2:] == ["user: ###STOP###", "0.0 ['DB', 'COMMUNICATE']"]
    assert namespace["terminated"] and namespace["info"]["task_id"] == "0" and not namespace["info"]["error"]


@pytest.mark.docker
def test_rollouts_example_works(docker_ready, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes rollouts.jsonl to the working directory
    namespace = run_example("docs/rollouts.md", "Rollouts")
    linear, trees, dataset = namespace["linear"], namespace["trees"], namespace["dataset"]
    assert len(linear.records) == 4 and not linear.failures
    assert len(trees.records) == 2 and all(len(t.leaves) == 6 for t in trees.records)
    assert dataset.num_rows == 4 + 12 and (tmp_path / "rollouts.jsonl").exists()


@pytest.mark.slow
def test_memory_example_works(tmp_path, monkeypatch, capsys):
    """As the page says: with the scripted follower of benchmarks/memory_ablation.py in place of the endpoint."""
    spec = importlib.util.spec_from_file_location("memory_ablation", ROOT / "benchmarks" / "memory_ablation.py")
    ablation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ablation)
    import agentgym.rollout

    monkeypatch.setattr(agentgym.rollout, "OpenAIPolicy", lambda base_url, model: ablation.ProcedureFollower())
    monkeypatch.setattr(agentgym.rollout, "Agent", ablation.SeededAgent)  # the follower's draws follow the reset seed
    monkeypatch.chdir(tmp_path)  # the example writes memory.db to the working directory
    namespace = run_example("docs/memory.md", "Memory and skill banks")

    out = capsys.readouterr().out
    verdicts = [line for line in out.splitlines() if " gain " in line]
    admitted = [line for line in verdicts if not line.endswith(" None")]
    assert admitted and len(admitted) < len(verdicts) / 2, verdicts  # "rejects most of the rest"
    one_hop = ['lookup(key=<word after "under" in the task>)', "submit(answer=<last number in the last observation>)"]
    assert namespace["bank"].skills()[0].steps == one_hop
    assert "Relevant experience" in out  # read mode: the first observation starts with the memory block


def test_openenv_client_examples_work(capsys):
    """Both clients against a served KeyChain env, at the served port in place of the page's 8000."""
    from tests.helpers.serving import served

    with served("agentgym/tool.keychain-v0", max_sessions=4) as (url, _):
        for heading in ("Any OpenEnv client", "Branching over the protocol"):
            code = example("docs/interoperability.md", heading).replace("http://localhost:8000", url)
            exec(compile(code, "docs/interoperability.md", "exec"), {})
    plain_text, plain_step, branch_step, restored_turn = capsys.readouterr().out.splitlines()[-4:]
    assert 'Find the number stored under "' in plain_text
    assert plain_step.endswith(" 0.0 False") and branch_step and restored_turn == "0"


@pytest.mark.slow  # two GRPO steps of the tiny model on CPU
def test_trl_environment_factory_example_trains_with_the_local_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example's output_dir
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = run_example("docs/interoperability.md", "agentgym envs in TRL's own GRPOTrainer")["trainer"]
    assert trainer.state.global_step == 2  # TRL took the local model's chat template and trained two steps


def test_playing_a_reference_solution_example_works(capsys):
    namespace = run_example("docs/envs/index.md", "Playing a reference solution")
    assert namespace["reward"] == 1.0 and namespace["terminated"] and namespace["info"]["success"]
    assert callable(namespace["task"].reference_solution()[0])  # a web step reads the page
    assert capsys.readouterr().out.rstrip().endswith("-> 1.0 True")
