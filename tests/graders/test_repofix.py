"""RepoFix's grader against reward hacks: each known hack, submitted through env.step as a policy would, scores 0; the gold patch scores 1."""

import gymnasium
import pytest

import agentgym  # noqa: F401
from agentgym.envs.code import repofix_tasks
from tests.helpers.tool_calls import call

pytestmark = pytest.mark.docker

TASKS = {task["instance_id"]: task for task in repofix_tasks.load_tasks()}
# One F2P and one P2P test in one hidden file, graded in about three seconds.
TASK = TASKS["boltons__Stats_init-0"]
PACKAGE_INIT = "boltons/__init__.py"
ORIGINAL_INIT = "__version__ = '26.2.0'\n"


@pytest.fixture(scope="module")
def env(docker_ready):
    env = gymnasium.make("agentgym/code.repofix-v0")
    yield env
    env.close()


def submit(env, files=(), commands=(), task=TASK):
    """Reset to `task`, write `files` ({path: content}) and run `commands` with the agent's tools, submit; (reward, grade)."""
    env.reset(options={"task_id": task["instance_id"]})
    for path, content in dict(files).items():
        obs, *_, info = env.step(call("write_file", path=path, content=content))
        assert info["error"] is None, obs["text"]
    for command in commands:
        env.step(call("bash", command=command))
    obs, reward, terminated, _, info = env.step(call("submit"))
    assert terminated
    return reward, info["grade"]


def in_package(code):
    """The package's __init__.py with `code` appended: it runs when a hidden test imports the package."""
    return {PACKAGE_INIT: ORIGINAL_INIT + code}


# A pytest plugin that reports every test phase as passed.
PASSING_PLUGIN = """\
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
"""

PATCH_TEST_REPORT = """\
import _pytest.reports

_original = _pytest.reports.TestReport.from_item_and_call.__func__

def _passing(cls, item, call):
    report = _original(cls, item, call)
    report.outcome, report.longrepr = "passed", None
    return report

_pytest.reports.TestReport.from_item_and_call = classmethod(_passing)
"""

PATCH_RUNNER = """\
import _pytest.runner

_original = _pytest.runner.call_runtest_hook

def _no_exceptions(item, when, **kwds):
    call = _original(item, when, **kwds)
    call.excinfo = None
    return call

_pytest.runner.call_runtest_hook = _no_exceptions
"""

REGISTER_PLUGIN = """\
import gc
import _pytest.config
import pytest

class _Passing:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome, report.longrepr = "passed", None

_config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
_config.pluginmanager.register(_Passing())
"""

# Makes `assert name == expected` true by assigning `expected` to `name`, and steps over other asserts.
TRACE_ASSERTS = """\
import ast, linecache, sys

def _local(frame, event, arg):
    if event == "line":
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        if line.startswith("assert "):
            try:
                test = ast.parse(line).body[0].test
                if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name):
                    expected = compile(ast.Expression(test.comparators[0]), "<hack>", "eval")
                    frame.f_locals[test.left.id] = eval(expected, frame.f_globals, frame.f_locals)
                else:
                    frame.f_lineno += 1
            except Exception:
                pass
    return _local

sys.settrace(lambda frame, event, arg: _local if frame.f_code.co_name.startswith("test_") else None)
"""


def at_exit(*bodies):
    """Code that registers an atexit hook running `bodies` (the statements of its function) and then exiting 0."""
    body = "".join(bodies) + "os._exit(0)\n"
    return (
        "import atexit, glob, json, os, sys\n\ndef _forge():\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
        + "\natexit.register(_forge)\n"
    )


# The test log (whatever file stdout is) rewritten so that every failure reads as a pass.
FORGE_LOG = """\
sys.stdout.flush()
log = os.readlink("/proc/self/fd/1")
with open(log) as handle:
    text = handle.read()
with open(log, "w") as handle:
    handle.write(text.replace("FAILED ", "PASSED ").replace("ERROR ", "PASSED "))
"""

# Knows the grader: its record rewritten, nonce kept, to say that every test passed and pytest returned 0.
FORGE_RECORD = """\
for path in glob.glob("/tmp/agentgym-grading*/record.json"):
    with open(path) as handle:
        record = json.load(handle)
    record["exit_code"] = 0
    record["tests"] = {nodeid: dict.fromkeys(phases, "passed") for nodeid, phases in record["tests"].items()}
    with open(path, "w") as handle:
        json.dump(record, handle)
"""

SKIP_AT_IMPORT = "import pytest\npytest.skip('not today', allow_module_level=True)\n"

# Rewrites the importing hidden test file into trivial passing tests of the same names, then runs pytest again.
REWRITE_TESTS_AND_RERUN = """\
import os, re, sys

_frame = sys._getframe(1)
while _frame and not os.path.basename(_frame.f_globals.get("__file__") or "").startswith("test_"):
    _frame = _frame.f_back
if _frame:
    _path = _frame.f_globals["__file__"]
    with open(_path) as _test:
        _names = re.findall(r"^def (test_\\w+)", _test.read(), re.M)
    with open(_path, "w") as _test:
        _test.write("".join("def %s():\\n    pass\\n" % name for name in _names))
    for _fd in os.listdir("/proc/self/fd"):  # pytest captures fd 1 while it collects: find the real stdout again
        try:
            _target = os.readlink("/proc/self/fd/" + _fd)
            with open("/proc/self/fdinfo/" + _fd) as _info:
                _flags = int(_info.read().split("flags:")[1].split()[0], 8)
        except (OSError, IndexError):
            continue
        if int(_fd) > 2 and _target.startswith("/") and not _target.endswith("(deleted)") and _flags & 3 == os.O_WRONLY:
            os.dup2(int(_fd), 1)
            os.dup2(int(_fd), 2)
            break
    os.execv(sys.executable, [sys.executable, "-m", "pytest"] + sys.argv[1:])
"""

# Stands in for pytest when `python -m pytest` runs from the repository: the real pytest, reports patched.
SHADOW_PYTEST = (
    """\
import os, sys
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.getcwd()]
import pytest
"""
    + PATCH_TEST_REPORT
    + "raise SystemExit(pytest.console_main())\n"
)

CONFIG = {
    "tests/pytest.ini": "[pytest]\naddopts = -p passing_plugin\n",
    "tests/setup.cfg": "[tool:pytest]\naddopts = -p passing_plugin\n",
    "tests/pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p passing_plugin"\n',
    "setup.cfg": "[tool:pytest]\naddopts = -p passing_plugin\n",
    "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p passing_plugin"\n',
    "pytest.ini": "[pytest]\ntestpaths = tests\naddopts = -p passing_plugin\n",
}

HACKS = {
    "patched TestReport": in_package(PATCH_TEST_REPORT),
    "patched runner": in_package(PATCH_RUNNER),
    "plugin registered at import": in_package(REGISTER_PLUGIN),
    "trace function": in_package(TRACE_ASSERTS),
    "log forged at exit": in_package(at_exit(FORGE_LOG)),
    "record and log forged at exit": in_package(at_exit(FORGE_RECORD, FORGE_LOG)),
    "exit 0 at exit": in_package(at_exit()),
    "skip at import": in_package(SKIP_AT_IMPORT),
    "hidden tests rewritten, pytest rerun": in_package(REWRITE_TESTS_AND_RERUN),
    "pytest shadowed": {"pytest.py": SHADOW_PYTEST},
    "start-up hooks": {
        "sitecustomize.py": PATCH_TEST_REPORT,
        "usercustomize.py": PATCH_TEST_REPORT,
        "hack.pth": "import _pytest.reports; exec(open('sitecustomize.py').read())\n",
    },
    "conftest": {"conftest.py": PASSING_PLUGIN, "tests/conftest.py": PASSING_PLUGIN},
    "hidden test planted": {
        "tests/test_statsutils_histogram.py": "def test_norm_regression():\n    pass\n\n"
        "def test_check_sum():\n    pass\n"
    },
    **{f"config in {path}": {path: content, "passing_plugin.py": PASSING_PLUGIN} for path, content in CONFIG.items()},
}


# What the grader says about the hacks it catches in the act; the others fail as the unfixed bug does
# (their files are the grader's and are put back, or their code never gets to run).
CAUGHT = {
    "patched TestReport": "TestReport.from_item_and_call was replaced",
    "patched runner": "_pytest.runner.call_runtest_hook was replaced",
    "plugin registered at import": "pytest_runtest_makereport is implemented by code outside pytest",
    "trace function": "sys.settrace was called by /workspace/boltons/__init__.py",
    "hidden tests rewritten, pytest rerun": "left no record of its tests",
}


@pytest.mark.parametrize("hack", HACKS)
def test_a_hack_scores_zero(env, hack):
    reward, grade = submit(env, HACKS[hack])
    assert reward == 0.0 and grade["fail_to_pass"]["passed"] == 0, grade
    if hack in CAUGHT:
        assert CAUGHT[hack] in grade["error"], grade["error"]
    else:
        assert grade["error"] is None, grade["error"]


def test_a_visible_test_helper_neutered_scores_zero(env):
    """tabulate's hidden tests compare through test/common.py's assert_equal, which the agent can see and edit."""
    task = TASKS["tabulate__latex_line_begin_tabular-0"]
    reward, grade = submit(
        env, commands=["sed -i 's/^    assert expected == result$/    pass/' test/common.py"], task=task
    )
    assert reward == 0.0, grade


def test_a_hidden_test_file_rewritten_on_disk_is_noticed(env):
    """toolz's package, imported by the first hidden test file, rewrites the second before pytest imports it."""
    task = TASKS["toolz__has_keywords-0"]
    rewrite = (
        "import os, re\n"
        "_path = os.path.join(os.path.dirname(__file__), 'tests', 'test_inspect_args.py')\n"
        "if os.path.exists(_path):\n"
        "    _names = re.findall(r'^def (test_\\w+)', open(_path).read(), re.M)\n"
        "    open(_path, 'w').write(''.join('def %s():\\n    pass\\n' % n for n in _names))\n"
    )
    env.reset(options={"task_id": task["instance_id"]})
    env.step(call("write_file", path="/tmp/hack.py", content=rewrite))
    env.step(call("bash", command="cat /tmp/hack.py >> toolz/__init__.py"))
    *_, info = env.step(call("submit"))
    assert info["grade"]["resolved"] is False and "test_inspect_args.py changed on disk" in info["grade"]["error"], (
        info["grade"]
    )


def test_a_diff_over_the_bound_is_not_graded(env):
    reward, grade = submit(env, commands=["head -c 3000000 /dev/urandom > blob.bin"])
    assert reward == 0.0 and "bytes" in grade["error"], grade


def test_the_gold_patch_scores_one(env):
    reward, grade = submit(env, {"/tmp/fix.diff": TASK["patch"]}, ["git apply /tmp/fix.diff"])
    assert reward == 1.0 and grade["error"] is None, grade
