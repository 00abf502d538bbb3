"""Packaging: the wheel carries every part and its data; the core install runs a ToolEnv; extras, pins and version."""

import importlib.metadata
import json
import re
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import gymnasium
from packaging.requirements import Requirement

import agentgym
from agentgym.extras import BFCL_REQUIREMENTS, DISTRIBUTION, TAU2_REQUIREMENTS

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def test_wheel_installs_into_a_fresh_venv_and_imports_all_parts(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next((tmp_path / "dist").glob("agentgym_envs-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert f"agentgym_envs-{agentgym.__version__}.dist-info/licenses/LICENSE" in names
    assert "agentgym/envs/code/__init__.py" in names and "agentgym/trainers/__init__.py" in names
    repofix = "agentgym/envs/code/tasks/repofix/"
    assert {repofix + "repos.tar.gz", repofix + "tasks.jsonl"} <= set(names)
    # The vendored libraries are data (the archive), and the offline tools stay in the source checkout.
    assert not [n for n in names if n.startswith("agentgym/envs/code/tasks/") and n.endswith(".py")]
    assert not [n for n in names if n.startswith("tools/")]
    assert "agentgym/rollout/templates/chatml_tools.jinja" in names
    assert "agentgym/py.typed" in names

    fresh = tmp_path / "venv"
    venv.create(fresh, with_pip=False)
    python = fresh / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Install the wheel by unpacking it (what pip does for a pure wheel); dependencies come from
    # the dev venv through a .pth line, which does not run the dev venv's editable finder.
    zipfile.ZipFile(wheel).extractall(site)
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import agentgym, agentgym.envs, agentgym.trainers, agentgym.memory, agentgym.envs.code;"
        "print(agentgym.__file__); print(len(agentgym.registered_env_ids()))"
    )
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith(site)


def optional_modules() -> list[str]:
    """The import names of every distribution an extra (other than dev) brings, and of bfcl-eval."""
    by_distribution: dict[str, set[str]] = {}
    for module, distributions in importlib.metadata.packages_distributions().items():
        for distribution in distributions:
            by_distribution.setdefault(_canonical(distribution), set()).add(module)
    requirements = [r for extra, rs in EXTRAS.items() if extra != "dev" for r in rs] + list(BFCL_REQUIREMENTS)
    names = {_canonical(Requirement(r).name) for r in requirements} - {DISTRIBUTION, "mpmath"}
    modules: set[str] = set()
    for name in names:
        modules |= _modules_of(name, by_distribution)
    return sorted(m for m in modules if m.isidentifier())


def _modules_of(name: str, by_distribution: dict[str, set[str]]) -> set[str]:
    """The import names a distribution installs; a meta-distribution's (fastmcp 4 only requires
    fastmcp-slim, which holds the modules) are those of its unconditional requirements."""
    if name in by_distribution:
        return by_distribution[name]
    try:
        requires = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError(f"{name} is declared in an extra but not installed in the dev venv") from None
    requirements = [Requirement(r) for r in requires]
    modules = set().union(*(_modules_of(_canonical(r.name), by_distribution) for r in requirements if not r.marker))
    assert modules, f"{name} is installed but brings no module, itself or through its requirements"
    return modules


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Runs in a fresh interpreter in which every optional package is "not installed": a finder ahead of
# all others raises ModuleNotFoundError for them, as a missing package would.
CORE_ONLY = """
import importlib.abc, json, sys

BLOCKED = set(sys.argv[1].split(","))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NotInstalled())

import gymnasium
import agentgym, agentgym.cli, agentgym.envs.tool, agentgym.eval, agentgym.memory, agentgym.rollout
import agentgym.sandbox, agentgym.trainers

def env_id(entry_point):
    return next(i for i in agentgym.registered_env_ids() if gymnasium.spec(i).entry_point == entry_point)

env = gymnasium.make(env_id("agentgym.envs.tool.keychain:KeyChainEnv"))
obs, info = env.reset(seed=0)
obs, reward, terminated, truncated, info = env.step("lookup")
fork = env.unwrapped.fork()
fork.step("more text")
fork.close()
env.close()

def error(action):
    try:
        action()
    except ModuleNotFoundError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"

import importlib
errors = {
    "code": error(lambda: gymnasium.make(env_id("agentgym.envs.code.humaneval:HumanEvalEnv"))),
    "web": error(lambda: importlib.import_module("agentgym.envs.web")),
    "gui": error(lambda: gymnasium.make(env_id("agentgym.envs.gui.env:DesktopEnv"))),
    "bfcl": error(lambda: importlib.import_module("agentgym.envs.tool.bfcl")),
    "tau2": error(lambda: importlib.import_module("agentgym.envs.conversation.tau2")),
    "tool": error(lambda: importlib.import_module("agentgym.envs.tool.mcp")),
    "sandbox": error(lambda: agentgym.sandbox.DockerSandbox),
    "train": error(lambda: importlib.import_module("agentgym.rollout.hf_policy")),
    "eval": error(lambda: importlib.import_module("agentgym.rollout.openai_policy")),
    "serve": error(lambda: importlib.import_module("agentgym.serve")),
    "memory": error(lambda: importlib.import_module("agentgym.memory.embeddings").default_embedder()),
    "openenv": error(lambda: importlib.import_module("agentgym.integrations.openenv.server")),
    "train (TRL interop)": error(lambda: importlib.import_module("agentgym.integrations.trl").task_dataset(env_id("agentgym.envs.tool.keychain:KeyChainEnv"))),
}
heavy = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
print(json.dumps({"errors": errors, "imported": heavy}))
"""


def test_the_core_install_runs_a_tool_env_and_each_missing_extra_names_itself():
    """Without any extra, `import agentgym` and a ToolEnv's reset/step/fork work; every other part says what to install."""
    blocked = optional_modules()
    assert {"docker", "playwright", "torch", "openai", "aiohttp", "mcp", "miniwob", "bfcl_eval"} <= set(blocked)
    result = subprocess.run(
        [sys.executable, "-c", CORE_ONLY, ",".join(blocked)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["imported"] == []
    for extra, message in report["errors"].items():
        assert message.startswith("MissingDependencyError: No module named"), (extra, message)
        if extra == "bfcl":
            assert "pip install --no-deps " + " ".join(f"'{r}'" for r in BFCL_REQUIREMENTS) in message
            continue
        assert f"pip install '{DISTRIBUTION}[{extra.split()[0]}]'" in message, (extra, message)
        assert f"pip install -e '.[{extra.split()[0]}]'" in message, (extra, message)  # not on PyPI yet: a clone
        if extra == "tau2":
            assert "then pip install --no-deps " + " ".join(f"'{r}'" for r in TAU2_REQUIREMENTS) in message


def test_every_extra_is_part_of_all_and_dev_has_the_tools():
    self_references = {extra for r in EXTRAS["all"] for extra in Requirement(r).extras}
    assert self_references == set(EXTRAS) - {"all", "dev", "sandbox"}  # sandbox comes with code and gui
    assert {"pytest", "ruff", "mypy", "build"} <= {Requirement(r).name for r in EXTRAS["dev"]}


def test_an_exact_pin_has_its_reason_beside_it():
    """`==` only with a comment on its line or the line just above it (TRL's private hooks, torch's CPU build, ...)."""
    lines = (REPO / "pyproject.toml").read_text().splitlines()
    unexplained = [
        line.strip()
        for number, line in enumerate(lines)
        if re.search(r'"[^"#]*==[^"]*"', line) and "#" not in line and not lines[number - 1].strip().startswith("#")
    ]
    assert unexplained == []
    requirements = [Requirement(r) for rs in [PYPROJECT["project"]["dependencies"], *EXTRAS.values()] for r in rs]
    exact = {r.name for r in requirements if any(s.operator == "==" for s in r.specifier)}
    assert not exact & {"openai", "rich", "aiohttp", "docker", "playwright"}


def test_one_version_string():
    assert agentgym.__version__ == PYPROJECT["project"]["version"] == importlib.metadata.version(DISTRIBUTION)
    assert not re.search(r"__version__\s*=\s*[\"']", (REPO / "agentgym" / "__init__.py").read_text())
    version = subprocess.run([Path(sys.executable).with_name("agentgym"), "--version"], capture_output=True, text=True)
    assert (version.returncode, version.stdout) == (0, f"agentgym {agentgym.__version__}\n")


def test_the_distribution_name_is_ours_and_carries_its_license():
    # PyPI's `agentgym` is another project (0.0.2, "Agent Gym - Pytorch"); the import name stays agentgym.
    assert PYPROJECT["project"]["name"] == DISTRIBUTION == "agentgym-envs"
    assert all(Requirement(r).name == DISTRIBUTION for r in EXTRAS["all"] if "[" in r)
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_markers_follow_what_a_test_uses():
    """The pure selection holds no test of an env that needs Docker, a browser or the desktop."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not docker and not browser and not desktop",
            "tests/envs/test_every_env.py",
            "tests/envs/gui/test_env.py",
            "tests/envs/web/test_web_env.py",
            "tests/sandbox/test_exec.py",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    selected = [line for line in result.stdout.splitlines() if "::" in line]
    assert selected, result.stdout + result.stderr
    for test_id in selected:
        assert test_id.startswith("tests/envs/test_every_env.py::"), test_id
        param = test_id.partition("[")[2].rstrip("]")
        if param:
            assert gymnasium.spec(param).entry_point.startswith(
                ("agentgym.envs.tool.", "agentgym.envs.text.", "agentgym.envs.conversation.")
            ), test_id
