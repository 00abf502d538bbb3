"""The in-container side of exec: a bash wrapper that keeps cwd and exported variables across commands and
reports each command's end, and the reader that demultiplexes, caps and parses an exec's output stream."""

from __future__ import annotations

import re
import secrets
import shlex
import socket
import time
from dataclasses import dataclass, field
from typing import BinaryIO

STDOUT, STDERR = 1, 2
_FRAME_HEADER = 8
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Runs under `timeout` in a fresh bash for every exec. $1: state file, $2: one-off workdir,
# $3: one-off variable assignments, $4: the command. The state file holds the cwd, then the
# variables that differ from the container's own environment ("K=V", or "K" when unset),
# NUL-separated; living in the container's filesystem, `docker commit` captures it with the rest.
INNER = r'''
__ag_state=$1 __ag_workdir=$2 __ag_start=$PWD __ag_cwd=$PWD
declare -A __ag_base=() __ag_set=() __ag_old=()
for __ag_k in $(compgen -e); do __ag_base[$__ag_k]=${!__ag_k}; done
if [[ -r $__ag_state ]]; then
  { IFS= read -r -d '' __ag_cwd
    while IFS= read -r -d '' __ag_kv; do
      if [[ $__ag_kv == *=* ]]; then export -- "$__ag_kv"; else unset -v -- "$__ag_kv"; fi
    done; } < "$__ag_state"
fi
__ag_env() { [[ -v $1 ]] && __ag_old[$1]=${!1}; __ag_set[$1]=$2; export -- "$1=$2"; }
__ag_save() {
  local k dir=$PWD
  for k in "${!__ag_set[@]}"; do
    # A one-off variable persists only if the command itself changed it.
    [[ ${!k-} == "${__ag_set[$k]}" ]] || continue
    if [[ -v __ag_old[$k] ]]; then export -- "$k=${__ag_old[$k]}"; else unset -v -- "$k"; fi
  done
  [[ -n $__ag_workdir && $dir == "$__ag_workdir" ]] && dir=$__ag_cwd
  { builtin printf '%s\0' "$dir"
    for k in $(compgen -e); do
      case $k in PWD|OLDPWD|SHLVL|_) continue ;; esac
      [[ -v __ag_base[$k] && ${__ag_base[$k]} == "${!k}" ]] || builtin printf '%s=%s\0' "$k" "${!k}"
    done
    for k in "${!__ag_base[@]}"; do [[ -v $k ]] || builtin printf '%s\0' "$k"; done
  } > "$__ag_state.tmp" && command mv -f -- "$__ag_state.tmp" "$__ag_state"
}
eval "$3"
if [[ -n $__ag_workdir ]]; then
  cd -- "$__ag_workdir" || exit 1
else
  cd -- "$__ag_cwd" 2>/dev/null || cd -- "$__ag_start"
fi
unset -v __ag_k __ag_kv
trap __ag_save EXIT
eval "$4"
'''

# The exec's own process: it enforces the wall-clock limit inside the container (so a frozen
# client cannot leave a command running) and then writes a trailer, framed by per-exec random
# markers, with the exit status and the state file on stderr, and an empty one on stdout.
# Docker copies the two pipes independently, so each stream needs its own end mark; the
# trailers also tell the reader that the command is over when a background process keeps
# the pipes open.
# $1 timeout, $2 kill grace, $3/$4 markers, $5 state file, $6 INNER, $7.. INNER's arguments.
OUTER = r'''
timeout -k "$2" "$1" bash -c "$6" agentgym "$5" "${@:7}"
rc=$?
printf '%s%s' "$3" "$4"
{ printf '%s%s\0' "$3" "$rc"; cat -- "$5" 2>/dev/null; printf '%s' "$4"; } >&2
'''


@dataclass
class ShellState:
    """The cwd and the exported variables (as changes to the container's environment) a sandbox carries."""

    cwd: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, records: list[bytes], fallback: "ShellState") -> "ShellState":
        if not records:
            return fallback
        env = {}
        for record in records[1:]:
            key, sep, value = record.decode(errors="replace").partition("=")
            if sep:
                env[key] = value
        return cls(records[0].decode(errors="replace"), env)


@dataclass
class ExecCommand:
    """One exec's argv plus the markers that frame its trailer."""

    argv: list[str]
    begin: bytes
    end: bytes


def exec_command(command: str, *, timeout: float, kill_grace: float, state_file: str,
                 workdir: str | None, env: dict[str, str] | None) -> ExecCommand:
    nonce = secrets.token_hex(8)
    begin, end = f"\x1e[agentgym {nonce}]", f"\x1e[/agentgym {nonce}]"
    assignments = "".join(f"__ag_env {_checked_name(k)} {shlex.quote(v)}\n" for k, v in (env or {}).items())
    argv = ["bash", "-c", OUTER, "agentgym", f"{timeout:g}", f"{kill_grace:g}", begin, end, state_file,
            INNER, workdir or "", assignments, command]
    return ExecCommand(argv, begin.encode(), end.encode())


def _checked_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return name


class OutputCapture:
    """Keeps the first and the last bytes of a stream within ``limit``, counting what it drops between them."""

    def __init__(self, limit: int):
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def write(self, data: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > 2 * self.tail_limit:  # trim in batches, not on every frame
            self._trim()

    def _trim(self) -> None:
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        self._trim()
        if not self.dropped:
            return (self.head + self.tail).decode(errors="replace")
        note = f"\n[... {self.dropped} bytes of output truncated ...]\n"
        return self.head.decode(errors="replace") + note + self.tail.decode(errors="replace")


class TrailerFilter:
    """Passes stderr through while cutting out the trailer between ``begin`` and ``end``."""

    def __init__(self, begin: bytes, end: bytes):
        self.begin, self.end = begin, end
        self.pending = b""  # a suffix that could be the start of the begin marker
        self.payload: bytearray | None = None
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.payload is not None:
            self.payload += data
            if self.end in self.payload:
                del self.payload[self.payload.index(self.end):]
                self.done = True
            return b""
        data = self.pending + data
        at = data.find(self.begin)
        if at >= 0:
            self.payload = bytearray()
            self.pending = b""
            self.feed(data[at + len(self.begin):])
            return data[:at]
        keep = min(len(data), len(self.begin) - 1)
        self.pending = data[len(data) - keep:]
        return data[:len(data) - keep]

    def flush(self) -> bytes:
        pending, self.pending = self.pending, b""
        return pending

    def records(self) -> list[bytes]:
        """The trailer's NUL-separated fields: exit status, then the state file's records."""
        return bytes(self.payload).split(b"\0")[:-1] if self.done else []


class Backstop(Exception):
    """The stream stayed silent past the client-side deadline (a frozen or wedged container)."""


@dataclass
class StreamResult:
    stdout: OutputCapture
    stderr: OutputCapture
    trailer: TrailerFilter  # stderr's, which carries the exit status and the shell state


def read_exec_stream(reader: BinaryIO, sock: socket.socket, deadline: float, limit: int,
                     begin: bytes, end: bytes) -> StreamResult:
    """Read Docker's multiplexed frames until both trailers or the end of the stream; raise Backstop at ``deadline``."""
    out = {STDOUT: OutputCapture(limit), STDERR: OutputCapture(limit)}
    trailers = {STDOUT: TrailerFilter(begin, end), STDERR: TrailerFilter(begin, end)}
    buffer = bytearray()
    while not all(t.done for t in trailers.values()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Backstop
        sock.settimeout(remaining)
        try:
            chunk = reader.read1(1 << 16)
        except (TimeoutError, socket.timeout):
            raise Backstop from None
        if not chunk:
            break
        buffer += chunk
        _drain_frames(buffer, out, trailers)
    for stream, trailer in trailers.items():
        out[stream].write(trailer.flush())
    return StreamResult(out[STDOUT], out[STDERR], trailers[STDERR])


def _drain_frames(buffer: bytearray, out: dict[int, OutputCapture], trailers: dict[int, TrailerFilter]) -> None:
    while len(buffer) >= _FRAME_HEADER:
        size = int.from_bytes(buffer[4:_FRAME_HEADER], "big")
        if len(buffer) < _FRAME_HEADER + size:
            return
        stream = buffer[0] if buffer[0] in out else STDOUT
        payload = bytes(buffer[_FRAME_HEADER:_FRAME_HEADER + size])
        del buffer[:_FRAME_HEADER + size]
        if not trailers[stream].done:  # what a background process writes after the trailer is not this command's
            out[stream].write(trailers[stream].feed(payload))
