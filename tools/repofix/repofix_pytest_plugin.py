"""pytest plugin for RepoFix's offline generator (tools/repofix/repofix_gen.py): records every test's outcome, and how each failing test failed, as JSON.

repofix_gen loads it with ``-p repofix_pytest_plugin`` while screening bugs. The
failure details (the failing statement in the test, the values it saw, the
exception text) are what the generated bug reports are written from, so they
are captured here, in the test process, rather than scraped from terminal output.
The report goes to the file named by $REPOFIX_REPORT when the session ends.
"""

import inspect
import json
import os
import textwrap

import pytest

_MAX_REPR = 200  # longer values make unreadable bug reports; they are left out

_outcomes: dict[str, str] = {}
_failures: dict[str, dict] = {}


def _short_repr(value):
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ is the library's business, not ours
        return None
    return text if len(text) <= _MAX_REPR else None


def _describe(item, excinfo):
    test_path = str(item.path)
    # The deepest frame that belongs to the test module is the user-visible call site.
    test_frames = [entry for entry in excinfo.traceback if str(entry.path) == test_path]
    frame = test_frames[-1] if test_frames else None
    locals_ = {}
    if frame is not None:
        for name, value in frame.locals.items():
            if name.startswith("@") or name.startswith("__"):
                continue  # assertion-rewriting temporaries and module dunders
            text = _short_repr(value)
            if text is not None:
                locals_[name] = text
    callspec = getattr(item, "callspec", None)
    params = {}
    if callspec is not None:
        params = {k: v for k, v in ((k, _short_repr(v)) for k, v in callspec.params.items()) if v is not None}
    try:
        source = textwrap.dedent(inspect.getsource(item.function))
    except (OSError, TypeError, AttributeError):
        source = ""
    last = excinfo.traceback[-1] if len(excinfo.traceback) else None
    return {
        "exc_type": excinfo.typename,
        "exception": excinfo.exconly(),
        # Helpers beside the test module (tabulate's test/common.py) count as test code too.
        "raised_in_test": last is not None and os.path.dirname(str(last.path)) == os.path.dirname(test_path),
        "statement": str(frame.statement).strip() if frame is not None else "",
        "locals": locals_,
        "params": params,
        "test_source": source,
    }


def pytest_runtest_logreport(report):
    previous = _outcomes.get(report.nodeid, "passed")
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.skipped and previous == "passed":
        _outcomes[report.nodeid] = "skipped"
    else:
        _outcomes[report.nodeid] = previous


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None and report.nodeid not in _failures:
        _failures[report.nodeid] = dict(_describe(item, call.excinfo), stdout=report.capstdout[:4000])


def pytest_sessionfinish(session):
    path = os.environ.get("REPOFIX_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"outcomes": _outcomes, "failures": _failures}, fh)
