"""The in-container half of the command server: runs a sandbox's commands for the host, one at a time, over the
stdin and stdout of the one attached ``docker exec`` that started it.

The host (:mod:`agentgym.sandbox.command_server`) starts ``/usr/bin/python3 -I -S`` as the sandbox
user with a two-line bootstrap and sends this file over stdin; the image's own interpreter runs it
(stdlib only: agentgym is not in the container). Python rather than bash because the server must
make itself non-dumpable (``prctl``), wait on a child and its pipes at once (a pidfd) and frame
binary messages, none of which bash can do.

Messages both ways are ``>II`` (JSON length, blob length), the JSON header, then the blob. A
request is ``{"op": "run", ...}`` (its blob: the command's stdin) or ``{"op": "stop"}``; the server
answers ``{"started": true}`` before it starts anything, then the result. What the host may trust:

* the exit status is the server's own ``waitpid`` of the ``timeout`` process it started, the
  command's output comes over pipes the server created, and the shell state is read by the server
  from the state file after the command; nothing a command prints can end up in a result's header.
* the server is non-dumpable (``PR_SET_DUMPABLE`` 0): processes of the same uid can neither open
  ``/proc/<server>/fd/*`` (the channel) nor ptrace it, and its children get only their own pipes.
  The agent can still kill it; the host sees the channel end.

For a ``"shell": true`` run the server does what :data:`agentgym.sandbox.shell.OUTER` does on the
per-command exec path (see there for why): refuse the command when the pids cgroup has fewer than
8 free slots, run it under ``timeout -k``, sweep what it left after a timeout or when it left the
table more than half full, report ``full`` when the table stays full.
"""

import ctypes
import json
import os
import selectors
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
from typing import IO, cast

HEADER = struct.Struct(">II")
PR_SET_DUMPABLE = 4
FREE_SLOTS = 8
CHUNK = 1 << 16
# What is read from a finished command's pipes before the rest goes to the Drainer's thread (a
# background process that floods its inherited stdout must not hold the answer back).
DRAIN_LIMIT = 1 << 20


def send(out, header, blob=b""):
    data = json.dumps(header).encode()
    out.write(HEADER.pack(len(data), len(blob)) + data + blob)
    out.flush()


def receive(stream):
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None, b""
    size, blob_size = HEADER.unpack(head)
    header = json.loads(stream.read(size))
    return header, stream.read(blob_size)


class Capture:
    """A stream's first and last bytes within ``limit`` (dropping the middle), or with ``bounded`` its first
    ``limit + 1`` bytes, after which the stream is no longer read (``full``)."""

    def __init__(self, limit, bounded):
        self.bounded = bounded
        self.head_limit = limit + 1 if bounded else limit // 2
        self.tail_limit = limit - limit // 2
        self.head, self.tail = bytearray(), bytearray()
        self.dropped = 0
        self.full = False

    def write(self, data):
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if self.bounded:
            self.full = len(self.head) == self.head_limit
            return
        self.tail += data
        if len(self.tail) > 2 * self.tail_limit:
            self.trim()

    def trim(self):
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def parts(self):
        self.trim()
        return [len(self.head), len(self.tail), self.dropped], bytes(self.head + self.tail)


def pids():
    """The pids cgroup's (use, limit), or None without a limit."""
    for folder in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        try:
            with open(f"{folder}/pids.max") as limit, open(f"{folder}/pids.current") as use:
                return int(use.read()), int(limit.read())
        except (OSError, ValueError):
            continue
    return None


def tight():
    use = pids()
    return use is not None and use[1] - use[0] < FREE_SLOTS


def stays_full():
    until = time.monotonic() + 0.5  # the killed leave once init reaps them
    while tight():
        if time.monotonic() >= until:
            return True
    return False


def processes():
    """(pid, state, start time in clock ticks) of every other process that can be read."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                fields = file.read().rpartition(b")")[2].split()
        except OSError:
            continue
        yield int(name), fields[0], int(fields[19])


def start_time(pid):
    with open(f"/proc/{pid}/stat", "rb") as file:
        return int(file.read().rpartition(b")")[2].split()[19])


def sweep(started):
    """Kill what a command started, its process group left or not, pass after pass until a pass finds none."""
    for _ in range(50):
        found = False
        for pid, state, start in processes():
            if state != b"Z" and start >= started:
                try:
                    os.kill(pid, signal.SIGKILL)
                    found = True
                except OSError:
                    pass
        if not found:
            return


def stop():
    """Kill every process this uid may signal but this one (kill(-1) spares the caller and is atomic against
    fork); "busy" when some survive a second of it."""
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        alive = False
        for pid, state, _ in processes():
            if state == b"Z":
                continue
            try:
                os.kill(pid, 0)
            except OSError:
                continue
            alive = True
            break
        if not alive:
            return ""
    return "busy"


def read_state(path, limit):
    """The state file's NUL-terminated records within ``limit`` bytes; none unless it is a regular file (the
    agent may replace it with a FIFO or a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        data = bytearray()
        while len(data) < limit:
            chunk = os.read(fd, min(CHUNK, limit - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError:
        return b""
    finally:
        os.close(fd)
    end = data.rfind(b"\0")
    return bytes(data[: end + 1])


class Drainer:
    """Reads what background processes still write to finished commands' pipes, until they close them, so
    that they neither block on a full pipe nor die of SIGPIPE.

    One thread, started with the server: a thread started per command would need a free process slot
    (threads count against the pids limit) at the moment a fork bomb the command left behind fills the
    table, and the server would die of the ``RuntimeError`` instead of answering.
    """

    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.pending = []
        self.lock = threading.Lock()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        threading.Thread(target=self.loop, daemon=True).start()

    def add(self, files):
        with self.lock:
            self.pending.extend(files)
        try:
            os.write(self.wake_write, b"x")
        except BlockingIOError:  # the pipe is full of wake-ups already: the thread will look
            pass

    def loop(self):
        while True:
            for key, _ in self.selector.select():
                if key.fileobj == self.wake_read:
                    try:
                        os.read(self.wake_read, CHUNK)
                    except BlockingIOError:
                        pass
                    with self.lock:
                        files, self.pending = self.pending, []
                    for file in files:
                        self.selector.register(file, selectors.EVENT_READ, file)
                    continue
                try:
                    data = os.read(key.data.fileno(), CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.selector.unregister(key.data)
                    key.data.close()


def run(request, stdin, drainer):
    shell = request["shell"]
    refused = {"rc": 126, "note": "refused", "out": [0, 0, 0], "err": [0, 0, 0]}
    if shell and tight():
        return refused, b""
    env = dict(os.environ, PATH=request["path"]) if request.get("path") else None
    argv = ["/usr/bin/timeout", "-k", request["grace"], request["timeout"], *request["argv"]]
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    except BlockingIOError:  # no free process slot
        return refused, b""
    started = start_time(proc.pid)  # still readable after the exit: the server has not reaped it yet
    captures = {file: Capture(request["limit"], request["bounded"]) for file in (proc.stdout, proc.stderr)}
    selector = selectors.DefaultSelector()
    for file in captures:
        os.set_blocking(file.fileno(), False)
        selector.register(file, selectors.EVENT_READ)
    pidfd = os.pidfd_open(proc.pid)
    selector.register(pidfd, selectors.EVENT_READ)
    pending = memoryview(stdin or b"")
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
    open_pipes = set(captures)
    exited = False
    while not exited:
        for key, _ in selector.select():
            if key.fileobj == pidfd:
                exited = True
            elif key.fileobj is proc.stdin:
                try:
                    pending = pending[os.write(proc.stdin.fileno(), pending[:CHUNK]) :]
                except BlockingIOError:
                    continue
                except OSError:  # the command closed its stdin: that is its business
                    pending = pending[:0]
                if not pending:
                    selector.unregister(proc.stdin)
                    proc.stdin.close()
            else:
                pipe = cast(IO[bytes], key.fileobj)  # the other registered files are the command's stdout and stderr
                capture = captures[pipe]
                data = os.read(pipe.fileno(), CHUNK)
                if data:
                    capture.write(data)
                if not data or capture.full:  # closing a full stream's pipe stops its writer (SIGPIPE)
                    selector.unregister(pipe)
                    open_pipes.discard(pipe)
                    pipe.close()
    selector.close()
    os.close(pidfd)
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    for file in list(open_pipes):  # what the command wrote before it exited is in the pipe already
        drained = 0
        while drained < DRAIN_LIMIT and not captures[file].full:
            try:
                data = os.read(file.fileno(), CHUNK)
            except BlockingIOError:
                break
            if not data:
                open_pipes.discard(file)
                file.close()
                break
            captures[file].write(data)
            drained += len(data)
    if open_pipes:
        drainer.add(list(open_pipes))
    rc = proc.wait()
    rc = 128 - rc if rc < 0 else rc  # killed by a signal: as a shell reports it
    note = ""
    if shell:
        use = pids()
        if rc in (124, 137) or (use is not None and 2 * use[0] > use[1]):
            sweep(started)
            if stays_full():
                note = "full"
    out, out_data = captures[proc.stdout].parts()
    err, err_data = captures[proc.stderr].parts()
    state = read_state(request["state_file"], request["state_limit"]) if shell else b""
    return {"rc": rc, "note": note, "out": out, "err": err, "state": len(state)}, out_data + err_data + state


def main():
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    source, out = sys.stdin.buffer, sys.stdout.buffer
    drainer = Drainer()
    send(out, {"ready": os.getpid()})
    while True:
        request, blob = receive(source)
        if request is None:
            return
        send(out, {"started": True})
        if request["op"] == "stop":
            send(out, {"left": stop()})
        else:
            header, data = run(request, blob if request["stdin"] else None, drainer)
            send(out, header, data)


if __name__ == "__main__":  # the bootstrap runs it as __main__; importing it starts nothing
    main()
