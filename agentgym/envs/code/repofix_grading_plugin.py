"""RepoFix's trusted pytest runner: records each hidden test's outcome, and every sign that the code under test tampered with pytest, under a nonce the repository cannot know.

:mod:`agentgym.envs.code.repofix` copies this file into the grading sandbox and runs it in place of
``python -m pytest``, with pytest's arguments, and one JSON line on stdin: ``nonce``, ``record`` (where
to write the record), ``changed`` (a file listing, NUL-separated, the files the agent's diff added or
changed) and ``protected`` (the hidden test files). Before any code of the repository can run, it
reads that line and points stdin at /dev/null (so a re-executed process finds no nonce), imports
pytest and its default plugins, hashes the hidden test files, lists the repository's files and
installs an audit hook (Python 3.8+; audit hooks cannot be removed). It then runs pytest with the
working directory first on ``sys.path``, as ``python -m pytest`` has it, and itself registered as a
plugin, which keeps a reference to every function and class (and class member) of ``pytest``,
``_pytest``, ``pluggy`` and ``unittest`` just before the first conftest file is imported, and
records each test's setup/call/teardown outcome by the node id that the ``-rA`` summary prints.

When pytest returns, it writes the record (the nonce, pytest's exit code, the outcomes, the
collection errors and every sign of tampering seen) and exits at once, so that no ``atexit`` hook or
thread of the code under test runs after it. Signs of tampering:

* one of those functions, classes or class members replaced (checked once collection has imported
  the code under test, and when the session ends);
* one of their functions' code or defaults, or one of their objects' class, replaced at any moment by
  code the checks do not trust (the audit hook: this catches a change undone before the next check);
* ``sys.settrace``/``sys.setprofile`` called by such code, or a trace or profile function set after a
  test;
* a hook implemented by code that is not pytest's, pluggy's, the standard library's, an installed
  package's, or a repository file that existed before the run and that the agent's diff left alone:
  a plugin registered by the agent's code, or by code it wrote at run time;
* the plugin manager's, the hook relay's or a hook caller's own functions replaced;
* a report that says passed for a phase that raised; a hidden test file changed on disk.

It is pytest's own process, so code that sets out to defeat this file in particular (finds the nonce in
its memory, patches the guard, rewrites the record from a thread or a process it forks, compiles
code under a trusted file's name) is not stopped by it; see repofix's module docstring for what
grading does and does not defend against. Python 3.6 syntax, the standard library and pytest only:
SWE-bench images bring their own interpreters.
"""

import hashlib
import importlib
import json
import os
import sys
import threading

import pytest

# The modules whose functions decide and report outcomes, and the test-side checks of unittest.
WATCHED_PACKAGES = ("pytest", "_pytest", "pluggy", "unittest")
MAX_FLAGS = 20  # enough to say what happened; a flood of repeats says nothing more
AUDITED = frozenset(("object.__setattr__", "sys.settrace", "sys.setprofile"))


def _is_code(value):
    return callable(value) or hasattr(type(value), "__get__")


def _functions(value):
    """The classes and Python functions in a member: itself, or what a classmethod, staticmethod or property wraps."""
    for candidate in (
        value,
        getattr(value, "__func__", None),
        getattr(value, "fget", None),
        getattr(value, "fset", None),
    ):
        if isinstance(candidate, type) or hasattr(candidate, "__code__"):
            yield candidate


def _under(path, directory):
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _digest(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


class Guard:
    """The plugin: outcomes by node id, and the tampering checks (see the module docstring)."""

    def __init__(self, setup):
        self.nonce = setup["nonce"]
        self.record_path = setup["record"]
        self.workdir = os.path.realpath(os.getcwd())
        self.launcher = os.path.realpath(__file__)
        with open(setup["changed"], "rb") as listing:
            names = [name for name in listing.read().decode("utf-8", "surrogateescape").split("\0") if name]
        self.changed = {os.path.realpath(os.path.join(self.workdir, name)) for name in names}
        self.protected = {path: _digest(path) for path in (os.path.join(self.workdir, p) for p in setup["protected"])}
        self.repo_files: set[str] = set()
        for root, dirs, files in os.walk(self.workdir):
            dirs[:] = [d for d in dirs if d != ".git"]
            self.repo_files.update(os.path.realpath(os.path.join(root, name)) for name in files)
        import _pytest.config

        for name in getattr(_pytest.config, "default_plugins", ()):
            try:
                importlib.import_module("_pytest." + name)
            except ImportError:  # a plugin of another pytest version
                pass
        importlib.import_module("unittest")
        import _pytest
        import pluggy

        package_dirs = [os.path.dirname(os.path.realpath(m.__file__)) for m in (_pytest, pluggy, pytest)]
        self.trusted_dirs = package_dirs + [
            os.path.realpath(p)
            for p in sys.path[1:]
            if p and os.path.isdir(p) and not _under(os.path.realpath(p), self.workdir)
        ]
        self.modules = {}  # name -> module, of WATCHED_PACKAGES
        self.members = {}  # (module, name) or (module, class, name) -> function or class
        self.watched_ids = set()  # of those functions and classes, and of the functions that members wrap
        self.instances = []  # (description, object, its own functions)
        self.config = None
        self.tests = {}  # node id -> {phase: outcome}
        self.collect_errors = []
        self.flags = []
        self._file_trust = {}
        self._gettrace, self._getprofile = sys.gettrace, sys.getprofile
        if hasattr(sys, "addaudithook"):
            sys.addaudithook(self._audit)

    # ------------------------------------------------------------------ evidence
    def _flag(self, message):
        if message not in self.flags and len(self.flags) < MAX_FLAGS:
            self.flags.append(message)

    def _audit(self, event, args):
        # Assigning to a class is not audited, but replacing a function's code or defaults and an
        # object's class are, and so are trace and profile functions: these are caught even when
        # undone before the next check.
        if event not in AUDITED:
            return
        if event == "object.__setattr__":
            target, name = args[0], args[1]
            if id(target) not in self.watched_ids and not (
                name == "__class__" and id(type(target)) in self.watched_ids
            ):
                return
            what = "%s.%s was changed" % (getattr(target, "__qualname__", type(target).__qualname__), name)
        else:
            what = "%s was called" % event
        culprit = self._untrusted_caller()
        if culprit is not None:
            self._flag("%s by %s" % (what, culprit))

    def _untrusted_caller(self):
        """The file of the first frame on the stack whose code is not trusted (see ``_trusted``), or None."""
        frame = sys._getframe(2)
        while frame is not None:
            if not self._trusted(frame.f_code.co_filename):
                return frame.f_code.co_filename
            frame = frame.f_back
        return None

    def _check_members(self):
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                self._flag("the module %s was replaced in sys.modules" % name)
        for key, value in list(self.members.items()):
            owner = self.modules[key[0]] if len(key) == 2 else self.members[key[:2]]
            if vars(owner).get(key[-1]) is not value:
                self._flag("%s was replaced" % ".".join(key))
        for description, obj, functions in self.instances:
            current = vars(obj)
            for attr, value in functions.items():
                if current.get(attr) is not value:
                    self._flag("%s's %s was replaced" % (description, attr))

    def _check_tracing(self):
        if self._gettrace() is not None or self._getprofile() is not None:
            self._flag("a trace or profile function is set")
        if getattr(threading, "_trace_hook", None) is not None or getattr(threading, "_profile_hook", None) is not None:
            self._flag("a trace or profile function is set for new threads")

    def _trusted(self, path):
        """Whether code from ``path`` is pytest's, pluggy's, an installed package's, the standard library's,
        this file's, or a repository file that existed before the run and that the agent's diff left alone."""
        if path not in self._file_trust:
            if path.startswith("<frozen "):
                trusted = True
            else:
                real = os.path.realpath(path)
                if _under(real, self.workdir):
                    trusted = real in self.repo_files and real not in self.changed
                else:
                    trusted = real == self.launcher or any(_under(real, d) for d in self.trusted_dirs)
                trusted = trusted and os.path.isfile(real)
            self._file_trust[path] = trusted
        return self._file_trust[path]

    def _check_hooks(self):
        hook = self.config.pluginmanager.hook
        for name, caller in list(vars(hook).items()):
            for impl in getattr(caller, "get_hookimpls", lambda: ())():
                code = getattr(impl.function, "__code__", None)
                if code is None or not self._trusted(code.co_filename):
                    self._flag(
                        "%s is implemented by code outside pytest and the unchanged repository (%s)"
                        % (name, code.co_filename if code else repr(impl.function))
                    )

    def _check_protected(self):
        for path, digest in self.protected.items():
            if _digest(path) != digest:
                self._flag("the hidden test file %s changed on disk" % path)

    # ------------------------------------------------------------------ pytest hooks
    # trylast, and registered after pytest's own plugins: after their changes to pytest's classes
    # (legacypath adds properties), before the trylast loader of conftest files, and so before any
    # code of the repository runs.
    @pytest.hookimpl(trylast=True)
    def pytest_load_initial_conftests(self, early_config):
        self.config = early_config
        self.modules = {
            name: module
            for name, module in list(sys.modules.items())
            if module is not None and name.split(".")[0] in WATCHED_PACKAGES
        }
        for module_name, module in self.modules.items():
            for attr, value in list(vars(module).items()):
                if not _is_code(value):
                    continue
                self.members[(module_name, attr)] = value
                if isinstance(value, type) and value.__module__ == module_name:
                    for member, member_value in list(vars(value).items()):
                        if _is_code(member_value):
                            self.members[(module_name, attr, member)] = member_value
        self.watched_ids.update(id(function) for value in self.members.values() for function in _functions(value))
        pm = early_config.pluginmanager
        objects = [("the config", early_config), ("the plugin manager", pm), ("the hook relay", pm.hook)]
        objects += [("the hook caller of " + name, caller) for name, caller in vars(pm.hook).items()]
        for description, obj in objects:
            functions = {
                attr: value for attr, value in vars(obj).items() if _is_code(value) or attr in ("hook", "pluginmanager")
            }
            self.instances.append((description, obj, functions))

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(report.nodeid or ".")

    def pytest_collection_finish(self, session):
        # Every test module, and with it the code under test, has been imported by now.
        self._check_members()
        self._check_protected()
        self._check_hooks()

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        nodeid = item.config.cwd_relative_nodeid(report.nodeid)
        if hasattr(report, "wasxfail"):
            verdict = "xpassed" if report.passed else "xfailed" if report.skipped else report.outcome
        else:
            verdict = report.outcome
        if report.passed and call.excinfo is not None:
            self._flag(
                "the %s report of %s says passed, but it raised %s" % (report.when, nodeid, call.excinfo.typename)
            )
        phases = self.tests.setdefault(nodeid, {})
        if phases.get(report.when) != "failed":
            phases[report.when] = verdict

    def pytest_runtest_logfinish(self):
        self._check_tracing()

    def pytest_sessionfinish(self):
        # The last checks run here: after pytest returns, its cleanup undoes its own patches.
        self._check_members()
        self._check_tracing()
        self._check_protected()
        self._check_hooks()

    # ------------------------------------------------------------------ the record
    def write_record(self, exit_code):
        record = {
            "nonce": self.nonce,
            "exit_code": exit_code,
            "tests": self.tests,
            "collect_errors": self.collect_errors,
            "tampering": self.flags,
        }
        partial = self.record_path + ".part"
        with open(partial, "w") as handle:
            json.dump(record, handle)
        os.replace(partial, self.record_path)


def main():
    line = sys.stdin.readline()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(os.devnull)
    try:
        setup = json.loads(line)
    except ValueError:
        setup = None
    if not isinstance(setup, dict) or not setup.get("nonce"):
        sys.stderr.write("agentgym grading: no grading setup on stdin (a re-executed test process?); no tests run\n")
        return 4
    guard = Guard(setup)
    sys.path[0] = guard.workdir  # this file's directory until now; `python -m pytest` puts the cwd there
    exit_code = None
    try:
        exit_code = int(pytest.main(sys.argv[1:], plugins=[guard]))
    finally:
        guard.write_record(exit_code)
    # Leave at once: the code under test's atexit handlers and threads get no turn after the record.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    sys.exit(main())
