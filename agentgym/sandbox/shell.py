"""The in-container side of exec: a bash wrapper that keeps cwd and exported variables across commands and
reports each command's end, and the reader that demultiplexes, caps and parses an exec's output stream.

:data:`INNER` runs every command, whichever way it reaches the container; :data:`OUTER`,
:data:`PLAIN` and :data:`STOP` are the per-command ``docker exec`` path's, which the command
server (:mod:`agentgym.sandbox.command_server`) replaces with its own findings where it runs."""

from __future__ import annotations

import io
import re
import secrets
import shlex
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

STDOUT, STDERR = 1, 2
_FRAME_HEADER = 8
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Runs under `timeout` in a fresh bash for every exec. $1: state file, $2: one-off workdir,
# $3: one-off variable assignments, $4: the command. The state file holds the cwd, then the
# variables that differ from the container's own environment ("K=V", or "K" when unset),
# NUL-separated; living in the container's filesystem, `docker commit` captures it with the rest.
INNER = r"""
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
  local k old n=0 dir=$PWD
  for k in "${!__ag_set[@]}"; do
    # A one-off variable persists only if the command itself changed it.
    [[ ${!k-} == "${__ag_set[$k]}" ]] || continue
    if [[ -v __ag_old[$k] ]]; then export -- "$k=${__ag_old[$k]}"; else unset -v -- "$k"; fi
  done
  [[ -n $__ag_workdir && $dir == "$__ag_workdir" ]] && dir=$__ag_cwd
  local -a new=("$dir")
  for k in $(compgen -e); do
    case $k in PWD|OLDPWD|SHLVL|_) continue ;; esac
    [[ -v __ag_base[$k] && ${__ag_base[$k]} == "${!k}" ]] || new+=("$k=${!k}")
  done
  for k in "${!__ag_base[@]}"; do [[ -v $k ]] || new+=("$k"); done
  # A file that already holds this state (most commands change none) is left alone: mv is a fork and an
  # exec, a large part of a short command's cost. Readers skip an unterminated last record, so does this.
  if [[ -f $__ag_state && ! -L $__ag_state ]]; then
    while IFS= read -r -d '' old; do
      (( n < ${#new[@]} )) && [[ $old == "${new[n]}" ]] || { n=-1; break; }
      n=$(( n + 1 ))
    done < "$__ag_state"
    (( n == ${#new[@]} )) && return
  fi
  builtin printf '%s\0' "${new[@]}" > "$__ag_state.tmp" && command mv -f -- "$__ag_state.tmp" "$__ag_state"
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
"""

# The most trailer bytes the host keeps: the state file is the agent's to fill (a huge exported
# variable), and every byte read back from a sandbox is bounded.
MAX_TRAILER = 1 << 20


# The exec's own process: it enforces the wall-clock limit inside the container (so a frozen
# client cannot leave a command running) and then writes a trailer, framed by per-exec random
# markers, with the exit status, a note and the state file on stderr, and an empty one on stdout.
# Docker copies the two pipes independently, so each stream needs its own end mark; the
# trailers also tell the reader that the command is over when a background process keeps
# the pipes open. Programs are named by absolute path: the agent can put its own `timeout` or
# `bash` first in $PATH (~/.local/bin), and would then run without a time limit.
#
# Processes. After a timeout (124, or 137 when the kill was needed) `timeout` has killed the
# command's process group; __ag_sweep then kills what the command started that left the group
# or the session (setsid, nohup, daemons): every process started no earlier than this wrapper
# (/proc/PID/stat field 22, in clock ticks), pass after pass until a pass finds none, so that a
# fork bomb cannot outgrow it. kill fails on what the sandbox user may not signal, which leaves
# the container's keep-alive alone. The same sweep follows a command that leaves the pids cgroup
# more than half full (a fork bomb that backgrounded itself). The note says "full" when the
# table stays (nearly) full after the sweep, and "refused" when it was full before the command
# (which then does not run: its forks would fail and block); the host then clears the table.
# On the normal path this costs two reads of cgroup files. Nothing after the command forks (the
# state file is copied with builtins), so a full table cannot block the trailer.
# $1 timeout, $2 kill grace, $3/$4 markers, $5 state file, $6 INNER, $7.. INNER's arguments.
OUTER = r"""
__ag_pids() {  # the pids cgroup's use and limit into __ag_cur/__ag_max; false without a limit
  local dir
  for dir in /sys/fs/cgroup/pids /sys/fs/cgroup; do [[ -r $dir/pids.max ]] && break; done
  read -r __ag_max 2>/dev/null <"$dir/pids.max" && [[ $__ag_max =~ ^[0-9]+$ ]] && read -r __ag_cur <"$dir/pids.current"
}
__ag_full() {  # fewer than 8 free slots, still after half a second (the killed leave once init reaps them)
  local until=$(( ${EPOCHREALTIME//[!0-9]/} + 500000 ))
  while __ag_pids && (( __ag_max - __ag_cur < 8 )); do
    (( ${EPOCHREALTIME//[!0-9]/} < until )) || return 0
  done
  return 1
}
__ag_sweep() {
  local line start p n found
  read -r line </proc/$$/stat; set -- ${line##*) }; start=${20}
  for n in {1..50}; do
    found=
    for p in /proc/[1-9]*; do
      p=${p#/proc/}
      (( p == $$ )) && continue
      read -r line 2>/dev/null <"/proc/$p/stat" || continue
      set -- ${line##*) }
      [[ $1 != Z ]] && (( ${20} >= start )) && kill -9 "$p" 2>/dev/null && found=1
    done
    [[ $found ]] || return
  done
}
note=
if __ag_pids && (( __ag_max - __ag_cur < 8 )); then
  rc=126 note=refused
else
  /usr/bin/timeout -k "$2" "$1" /bin/bash -c "$6" agentgym "$5" "${@:7}"
  rc=$?
  if (( rc == 124 || rc == 137 )) || { __ag_pids && (( 2 * __ag_cur > __ag_max )); }; then
    __ag_sweep
    __ag_full && note=full
  fi
fi
printf '%s%s' "$3" "$4"
{ printf '%s%s\0%s\0' "$3" "$rc" "$note"
  n=0  # at most MAX_TRAILER bytes of it, however large the agent made it
  while (( n < MAX_TRAILER )) && IFS= read -r -d '' -n MAX_TRAILER record; do
    printf '%s\0' "$record"
    (( n += ${#record} + 1 ))
  done 2>/dev/null <"$5"
  printf '%s' "$4"; } >&2
""".replace("MAX_TRAILER", str(MAX_TRAILER))

# The $PATH of the host's own helper commands: system directories only, which the agent cannot write to.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The wrapper of the host's own helper commands (file reads and writes, run_argv): the same time
# limit and trailer as OUTER (exit status only), no shell state, and SYSTEM_PATH.
# $1 timeout, $2 kill grace, $3/$4 markers, $5.. the argv.
PLAIN = r"""
t=$1 k=$2 b=$3 e=$4
shift 4
PATH=SYSTEM_PATH /usr/bin/timeout -k "$k" "$t" "$@"
rc=$?
printf '%s%s' "$b" "$e"
printf '%s%s\0%s' "$b" "$rc" "$e" >&2
""".replace("SYSTEM_PATH", SYSTEM_PATH)

# Stops every process the sandbox user may signal (kill(-1) spares pid 1 and the caller, and is
# atomic against fork, so a fork bomb dies in one call), again and again until only zombies are
# left; "busy" when processes survive a second of that. Only builtins, since a full process table
# refuses forks; it runs as the exec's own process, not under PLAIN, whose `timeout` it would
# kill. $1/$2 markers.
STOP = r"""
until=$(( ${EPOCHREALTIME//[!0-9]/} + 1000000 )) left=busy
while (( ${EPOCHREALTIME//[!0-9]/} < until )); do
  kill -9 -1 2>/dev/null
  alive=
  for d in /proc/[1-9]*; do
    p=${d#/proc/}
    (( p == $$ )) && continue
    kill -0 "$p" 2>/dev/null || continue
    read -r s 2>/dev/null <"$d/stat" || continue
    s=${s##*) }
    [[ $s == Z* ]] && continue
    alive=1
    break
  done
  [[ $alive ]] || { left=; break; }
done
printf '%s%s' "$1" "$2"
printf '%s%s\0%s' "$1" "$left" "$2" >&2
"""


@dataclass
class ShellState:
    """The cwd and the exported variables (as changes to the container's environment) a sandbox carries."""

    cwd: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, records: list[bytes], fallback: ShellState) -> ShellState:
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
    """One exec's argv plus the markers that frame its trailer; and for the command server
    (:mod:`agentgym.sandbox.command_server`), which wraps commands itself, what the wrapper runs."""

    argv: list[str]
    begin: bytes
    end: bytes
    program: list[str] = field(default_factory=list)  # what runs under `timeout` (empty: no server form)
    timeout: float = 0.0
    kill_grace: float = 0.0
    state_file: str = ""  # set for shell commands, which OUTER's duties apply to (pids, sweep, state)


def _markers() -> tuple[str, str]:
    nonce = secrets.token_hex(8)
    return f"\x1e[agentgym {nonce}]", f"\x1e[/agentgym {nonce}]"


def exec_command(
    command: str, *, timeout: float, kill_grace: float, state_file: str, workdir: str | None, env: dict[str, str] | None
) -> ExecCommand:
    begin, end = _markers()
    assignments = "".join(f"__ag_env {_checked_name(k)} {shlex.quote(v)}\n" for k, v in (env or {}).items())
    inner_args = [workdir or "", assignments, command]
    argv = ["/bin/bash", "-c", OUTER, "agentgym", f"{timeout:g}", f"{kill_grace:g}", begin, end, state_file, INNER]
    return ExecCommand(
        argv + inner_args,
        begin.encode(),
        end.encode(),
        program=["/bin/bash", "-c", INNER, "agentgym", state_file, *inner_args],
        timeout=timeout,
        kill_grace=kill_grace,
        state_file=state_file,
    )


def plain_command(argv: list[str], *, timeout: float, kill_grace: float) -> ExecCommand:
    """``argv`` under :data:`PLAIN`: a helper command with a time limit and an exit-status trailer."""
    begin, end = _markers()
    return ExecCommand(
        ["/bin/sh", "-c", PLAIN, "agentgym", f"{timeout:g}", f"{kill_grace:g}", begin, end, *argv],
        begin.encode(),
        end.encode(),
        program=list(argv),
        timeout=timeout,
        kill_grace=kill_grace,
    )


def stop_command() -> ExecCommand:
    """:data:`STOP`, whose trailer's one record is empty when no process is left, else ``busy``."""
    begin, end = _markers()
    return ExecCommand(["/bin/bash", "-c", STOP, "agentgym", begin, end], begin.encode(), end.encode())


def _checked_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return name


class OutputCapture:
    """Keeps the first and the last bytes of a stream within ``limit``, counting what it drops between them."""

    full = False  # it never stops the stream: what is dropped is only counted

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


class BoundedBuffer:
    """Keeps a stream's bytes while they fit in ``limit``; one byte more makes it ``full``, which ends the read
    (for binary output that is useless cut: file contents, screenshots)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.data = bytearray()
        self.full = False

    def write(self, data: bytes) -> None:
        if self.full:
            return
        if len(self.data) + len(data) > self.limit:
            self.full = True
            data = data[: self.limit - len(self.data)]
        self.data += data


class TrailerFilter:
    """Passes stderr through while cutting out the trailer between ``begin`` and ``end``.

    At most :data:`MAX_TRAILER` bytes of the trailer are kept (its last, cut record is dropped).
    """

    def __init__(self, begin: bytes, end: bytes):
        self.begin, self.end = begin, end
        self.pending = b""  # a suffix that could be the start of the begin (or, in the trailer, the end) marker
        self.payload: bytearray | None = None
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.payload is not None:
            data = self.pending + data
            at = data.find(self.end)
            if at >= 0:
                self.done = True
                self.pending = b""
                self._keep(data[:at])
            else:
                keep = min(len(data), len(self.end) - 1)
                self.pending = data[len(data) - keep :]
                self._keep(data[: len(data) - keep])
            return b""
        data = self.pending + data
        at = data.find(self.begin)
        if at >= 0:
            self.payload = bytearray()
            self.pending = b""
            self.feed(data[at + len(self.begin) :])
            return data[:at]
        keep = min(len(data), len(self.begin) - 1)
        self.pending = data[len(data) - keep :]
        return data[: len(data) - keep]

    def _keep(self, data: bytes) -> None:
        self.payload += data[: MAX_TRAILER - len(self.payload)]

    def flush(self) -> bytes:
        if self.payload is not None:
            return b""  # an unfinished trailer is not output
        pending, self.pending = self.pending, b""
        return pending

    def records(self) -> list[bytes]:
        """The trailer's NUL-separated fields (for OUTER: exit status, note, then the state file's records)."""
        return bytes(self.payload).split(b"\0")[:-1] if self.done else []


class Backstop(Exception):
    """The stream stayed silent past the client-side deadline (a frozen or wedged container)."""


# The kind of capture a read makes for both streams: its caller knows which (text, or bounded bytes).
Capture = TypeVar("Capture", OutputCapture, BoundedBuffer)


@dataclass
class StreamResult(Generic[Capture]):
    stdout: Capture
    stderr: Capture
    # The trailer's fields (for OUTER: exit status, note, then the state file's records); none when it is missing.
    records: list[bytes]

    @property
    def full(self) -> bool:
        """Whether a bounded stream overflowed (and the read stopped there)."""
        return self.stdout.full or self.stderr.full


def read_exec_stream(
    reader: io.BufferedIOBase,
    sock: socket.socket,
    deadline: float,
    capture: Callable[[], Capture],
    begin: bytes,
    end: bytes,
) -> StreamResult[Capture]:
    """Read Docker's multiplexed frames until both trailers, the end of the stream or a full capture
    (``capture()`` makes one per stream); raise Backstop at ``deadline``."""
    out = {STDOUT: capture(), STDERR: capture()}
    trailers = {STDOUT: TrailerFilter(begin, end), STDERR: TrailerFilter(begin, end)}
    buffer = bytearray()
    while not all(t.done for t in trailers.values()) and not any(c.full for c in out.values()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Backstop
        sock.settimeout(remaining)
        try:
            chunk = reader.read1(1 << 16)
        except TimeoutError:
            raise Backstop from None
        if not chunk:
            break
        buffer += chunk
        _drain_frames(buffer, out, trailers)
    for stream, trailer in trailers.items():
        out[stream].write(trailer.flush())
    return StreamResult(out[STDOUT], out[STDERR], trailers[STDERR].records())


def _drain_frames(
    buffer: bytearray, out: Mapping[int, OutputCapture | BoundedBuffer], trailers: dict[int, TrailerFilter]
) -> None:
    while len(buffer) >= _FRAME_HEADER:
        size = int.from_bytes(buffer[4:_FRAME_HEADER], "big")
        if len(buffer) < _FRAME_HEADER + size:
            return
        stream = buffer[0] if buffer[0] in out else STDOUT
        payload = bytes(buffer[_FRAME_HEADER : _FRAME_HEADER + size])
        del buffer[: _FRAME_HEADER + size]
        if not trailers[stream].done:  # what a background process writes after the trailer is not this command's
            out[stream].write(trailers[stream].feed(payload))
