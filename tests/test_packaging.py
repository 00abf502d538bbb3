"""The built wheel carries all four import roots (agentgym, .envs, .trainers, .memory) and the task data."""

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_wheel_installs_into_a_fresh_venv_and_imports_all_parts(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next((tmp_path / "dist").glob("agentgym-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentgym/envs/code/__init__.py" in names and "agentgym/trainers/__init__.py" in names
    assert any(n.startswith("agentgym/envs/code/tasks/repofix/") for n in names)
    assert "agentgym/rollout/templates/chatml_tools.jinja" in names

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
