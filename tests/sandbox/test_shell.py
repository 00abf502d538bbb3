"""The exec stream machinery without an engine: output capping, trailer extraction across any framing, state parsing."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym.sandbox import shell


def test_capture_keeps_everything_within_the_limit():
    capture = shell.OutputCapture(1024)
    for _ in range(8):
        capture.write(b"x" * 128)
    assert capture.text() == "x" * 1024 and capture.dropped == 0


def test_capture_keeps_head_and_tail_and_counts_the_rest():
    capture = shell.OutputCapture(1024)
    capture.write(b"H" * 600)
    for _ in range(100):
        capture.write(b"m" * 1000)
    capture.write(b"T" * 512)
    text = capture.text()
    assert text.startswith("H" * 512)
    assert text.endswith("T" * 512)
    assert f"[... {600 + 100_000 - 512} bytes of output truncated ...]" in text


def _frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


class _Chunks:
    """A reader that returns the stream in the given pieces, like a socket would."""

    def __init__(self, data: bytes, cuts: list[int]):
        points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
        self.pieces = [data[a:b] for a, b in zip(points, points[1:])]

    def read1(self, _n):
        return self.pieces.pop(0) if self.pieces else b""


class _Sock:
    def settimeout(self, _t):
        pass


def _capture():
    return shell.OutputCapture(4096)


@given(
    out=st.binary(max_size=300),
    err=st.binary(max_size=300),
    late=st.binary(max_size=50),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_trailer_is_cut_out_of_stderr_however_the_stream_is_split(out, err, late, cuts):
    begin, end = b"\x1e[agentgym 0123]", b"\x1e[/agentgym 0123]"
    trailer_bytes = begin + b"7\0/tmp\0FOO=bar\0" + end
    split = len(err) // 2
    # Docker interleaves the two pipes freely: stderr's trailer may come before stdout's end.
    data = (
        _frame(2, err[:split])
        + _frame(1, out[:3])
        + _frame(2, err[split:] + trailer_bytes[:5])
        + _frame(2, trailer_bytes[5:])
        + _frame(2, late)
        + _frame(1, out[3:] + begin)
        + _frame(1, end + late)
    )
    result = shell.read_exec_stream(_Chunks(data, cuts), _Sock(), float("inf"), _capture, begin, end)
    assert result.stdout.text() == out.decode(errors="replace")
    assert result.stderr.text() == err.decode(errors="replace")
    assert result.records == [b"7", b"/tmp", b"FOO=bar"]


def test_stream_without_trailer_keeps_all_output():
    data = _frame(2, b"partial \x1e[agent") + _frame(1, b"out")
    result = shell.read_exec_stream(
        _Chunks(data, []), _Sock(), float("inf"), _capture, b"\x1e[agentgym 1]", b"\x1e[/agentgym 1]"
    )
    assert (result.stdout.text(), result.stderr.text()) == ("out", "partial \x1e[agent")
    assert result.records == []


def test_state_records_parse_into_cwd_and_env():
    fallback = shell.ShellState("/workspace")
    state = shell.ShellState.parse([b"/tmp", b"A=1", b"B=x=y", b"GONE"], fallback)
    assert state == shell.ShellState("/tmp", {"A": "1", "B": "x=y"})
    assert shell.ShellState.parse([], fallback) is fallback


def test_one_off_variables_must_be_shell_names():
    with pytest.raises(ValueError):
        shell.exec_command("true", timeout=1, kill_grace=1, state_file="/s", workdir=None, env={"A-B": "1"})


def test_bounded_buffer_keeps_up_to_its_limit_then_is_full():
    buffer = shell.BoundedBuffer(10)
    buffer.write(b"12345")
    buffer.write(b"67890")
    assert not buffer.full and buffer.data == b"1234567890"
    buffer.write(b"x")
    assert buffer.full and buffer.data == b"1234567890"


def test_a_full_bounded_capture_ends_the_read():
    first = _frame(1, b"x" * 5000)
    chunks = _Chunks(first + _frame(1, b"never read"), [len(first)])
    result = shell.read_exec_stream(
        chunks, _Sock(), float("inf"), lambda: shell.BoundedBuffer(1000), b"\x1e[agentgym 2]", b"\x1e[/agentgym 2]"
    )
    assert result.full and len(chunks.pieces) == 1


def test_a_huge_trailer_is_cut_and_its_end_still_found():
    begin, end = b"\x1e[agentgym 3]", b"\x1e[/agentgym 3]"
    stderr = begin + b"0\0\0/w\0BIG=" + b"a" * (3 * shell.MAX_TRAILER) + b"\0" + end + b"late"
    data = _frame(1, begin + end) + b"".join(_frame(2, stderr[i : i + 30_000]) for i in range(0, len(stderr), 30_000))
    result = shell.read_exec_stream(_Chunks(data, [7, 100_001]), _Sock(), float("inf"), _capture, begin, end)
    assert result.records == [b"0", b"", b"/w"]  # the cut record is dropped
    assert result.stderr.text() == ""
