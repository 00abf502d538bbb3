"""The in-container half of the desktop sandbox: start the X session, launch apps, run input actions, and observe.

Sent over stdin to the image's ``/usr/bin/python3 -I -S`` (no agentgym, no numpy there; nothing of it
is written into the container) by the same bootstrap as the command server
(:func:`agentgym.sandbox.command_server.bootstrap_argv`): one long-lived process per desktop that
reads requests, one JSON line each (``{"command": ..., "arg": {...}}``), on stdin, and answers each
on stdout with a JSON header line (carrying ``size``) followed by ``size`` bytes: the
zlib-compressed XWD screenshot for commands that observe. Keeping one process (and one attached
``docker exec``) for the desktop's life saves an exec and an interpreter start per step.

The helper runs as the agent's uid (the apps it starts are the agent's), so it first makes itself
non-dumpable, as the command server does: the agent's processes can neither open
``/proc/<helper>/fd/*`` (the channel to the host) nor ptrace it, and the tools it runs get
``/dev/null`` for stdin. What it reads that the agent can write (the accessibility summaries,
window titles) is bounded before it goes to the host. Observing first waits until three
consecutive screenshots are equal (after an action, and until a Tk app has acknowledged it
through its state file), so what comes back is the settled screen and not a frame in the middle
of a redraw.
"""

import ctypes
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import zlib

DISPLAY = ":0"
PR_SET_DUMPABLE = 4
A11Y_DIR = "/tmp/agentgym/a11y"
LOG_DIR = "/tmp/agentgym/log"
SETTLE_FIRST_S = 0.02
SETTLE_POLL_S = 0.02
SETTLE_LIMIT_S = 3.0
TREE_ROUNDS = 3  # walks of the accessibility tree at most, while the screen changes across one
STATE_DIR = "/tmp/agentgym/state"
# How long to wait for a Tk app to show that it processed an action (see await_app).
APP_LIMIT_S = 1.5
# What one observation may carry of what the agent's processes can write: the host bounds the whole
# answer too, and these keep an honest one under that bound.
A11Y_FILES = 16
A11Y_BYTES = 32 << 10
WINDOWS = 64
TITLE_CHARS = 256
# The accessibility tree (a11y_tree.py, sent with "start"): at most this many nodes and characters, and
# this long a walk; an app that stops answering AT-SPI calls costs the step this much and no more.
TREE_NODES = 1000
TREE_CHARS = 128 << 10
TREE_LIMIT_S = 10.0
SESSION_BUS = "/tmp/agentgym/bus"
# Set by "start": the tree walker's source, when the image has AT-SPI.
TREE_SCRIPT: list[str] = []


def run(argv, check=True, timeout=10):
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    return run_result(argv, done) if check else done


def run_result(argv, done):
    """``done`` if its command succeeded, else a RuntimeError with its error output."""
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}: {done.stderr.decode(errors='replace').strip() or done.returncode}")
    return done


def spawn(name, argv, cwd=None, env=None):
    """Start a long-lived process detached from this helper (its own session, output in a log file)."""
    os.makedirs(LOG_DIR, exist_ok=True)
    with open(os.path.join(LOG_DIR, f"{name}.log"), "ab") as log:
        subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )


# Generous: on a loaded 2-core machine an X server or openbox can take many seconds to come up.
START_LIMIT_S = 60.0


def wait_for(predicate, what, limit=START_LIMIT_S):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def start(arg):
    """Xvfb and openbox (and, in the apps image, a session D-Bus for AT-SPI); returns once the window manager
    answers."""
    width, height = int(arg["width"]), int(arg["height"])
    os.makedirs(A11Y_DIR, exist_ok=True)
    if arg.get("a11y_tree"):
        start_session_bus()
        TREE_SCRIPT[:] = [arg["a11y_tree"]]
    # A desktop forked from a snapshot inherits the old X server's lock file and socket. Xvfb refuses to
    # start when the pid in the lock is alive, and in the new container that pid may well be one of ours.
    number = DISPLAY.lstrip(":")
    for stale in (f"/tmp/.X{number}-lock", f"/tmp/.X11-unix/X{number}"):
        if os.path.lexists(stale):
            os.remove(stale)
    spawn(
        "xvfb",
        [
            "Xvfb",
            DISPLAY,
            "-screen",
            "0",
            f"{width}x{height}x24",
            "-nolisten",
            "tcp",
            "-dpi",
            "96",
            "-br",
            "-noreset",
            "+extension",
            "XTEST",
            "-s",
            "0",
            "-ac",
            # No key auto-repeat: on a loaded machine a key held between xdotool's press and release
            # for over the default 660 ms would repeat ("docs" typed as "doccs").
            "-ardelay",
            "3600000",
            "-arinterval",
            "3600000",
        ],
    )
    wait_for(lambda: run(["xdotool", "getdisplaygeometry"], check=False).returncode == 0, "the X server")
    # Openbox answers wmctrl before it manages windows; --startup runs once its start-up is complete.
    ready = "/tmp/agentgym/wm-ready"
    if os.path.exists(ready):
        os.remove(ready)
    spawn("openbox", ["openbox", "--config-file", arg["wm_config"], "--startup", f"touch {ready}"])
    wait_for(lambda: os.path.exists(ready), "the window manager")
    run(["xdotool", "mousemove", str(arg.get("pointer_x", width // 2)), str(arg.get("pointer_y", height // 2))])
    return {}


def start_session_bus():
    """A session D-Bus that the apps (and the tree walker) inherit: GTK's and LibreOffice's AT-SPI bridges
    find the accessibility bus through it (at-spi-bus-launcher, activated on demand by the bus)."""
    if os.path.lexists(SESSION_BUS):  # a fork's filesystem still has the old session's socket
        os.remove(SESSION_BUS)
    address = f"unix:path={SESSION_BUS}"
    spawn("dbus", ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={address}"])
    wait_for(lambda: accepts(SESSION_BUS), "the session bus")
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
    # AT-SPI's bridges stay off until a client says one listens (GNOME does this for screen readers).
    run(
        [
            "dbus-send",
            "--session",
            "--print-reply",
            "--dest=org.a11y.Bus",
            "/org/a11y/bus",
            "org.freedesktop.DBus.Properties.Set",
            "string:org.a11y.Status",
            "string:IsEnabled",
            "variant:boolean:true",
        ],
        timeout=30,
    )


def accepts(path):
    """Whether a Unix socket at ``path`` takes connections: the daemon binds (creating the file) before it
    listens, and a client in between is refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        try:
            client.connect(path)
        except OSError:
            return False
    return True


def accessibility_tree(width, height):
    """The linearized AT-SPI tree (a11y_tree.py), bounded in nodes, characters and time."""
    try:
        done = subprocess.run(
            ["/usr/bin/python3", "-I", "-c", TREE_SCRIPT[0], str(TREE_NODES), str(TREE_CHARS), str(width), str(height)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=TREE_LIMIT_S,
            cwd="/",
        )
    except subprocess.TimeoutExpired:
        return "(the accessibility tree did not answer in time)"
    if done.returncode != 0:
        return f"(the accessibility tree could not be read: {done.stderr.decode(errors='replace')[-300:].strip()})"
    return done.stdout[: TREE_CHARS + 4096].decode("utf-8", errors="replace")


def wmctrl_lines(flags):
    # Before the first client maps, openbox has not set _NET_CLIENT_LIST and wmctrl fails: no windows.
    return run(["wmctrl", flags], check=False).stdout.decode(errors="replace").splitlines()


def focused_title():
    return run(["xdotool", "getactivewindow", "getwindowname"], check=False).stdout.decode(errors="replace")


def window_ids():
    return {line.split()[0] for line in wmctrl_lines("-l") if line}


def state_stamp():
    """The newest modification time of the Tk apps' state files (None when there are none)."""
    try:
        return max(
            (entry.stat().st_mtime_ns for entry in os.scandir(STATE_DIR) if entry.name.endswith(".json")), default=None
        )
    except FileNotFoundError:
        return None


def await_app(before):
    """Wait until a Tk app has rewritten its state file since ``before``: it does so once it has processed
    an input event, so the settle that follows cannot mistake a starved app (an unchanged screen because the
    app has not run yet, on a loaded machine) for a settled one. Apps without state files are not waited for."""
    if before is None:
        return
    deadline = time.monotonic() + APP_LIMIT_S
    while state_stamp() == before and time.monotonic() < deadline:
        time.sleep(0.01)


def launch(arg):
    """Start an app and wait for its first window to be mapped (and the screen to settle, by the caller)."""
    before, stamp = window_ids(), state_stamp()
    spawn(
        arg["name"],
        arg["argv"],
        cwd=arg.get("cwd") or os.path.expanduser("~"),
        env=dict(os.environ, DISPLAY=DISPLAY, **arg.get("env", {})),
    )
    limit = float(arg.get("timeout", 15))
    wait_for(lambda: len(window_ids() - before) >= 1, f"a window of {arg['name']}", limit=limit)
    if arg.get("ready_title"):  # an app whose first window is a loading one (LibreOffice): wait until its
        # document's window has the focus, or keys sent next would go to the loading window and be lost
        wait_for(lambda: arg["ready_title"] in focused_title(), f"{arg['ready_title']!r} focused", limit)
    await_app(stamp)  # a relaunched Tk app rewrites its (committed) state file once it is up
    return {}


def act(arg):
    """Run one input action; errors that come from the action's content are returned, not raised."""
    kind = arg["action"]
    xdo = ["xdotool"]
    if kind in ("click", "double_click", "right_click"):
        button = "3" if kind == "right_click" else "1"
        repeat = "2" if kind == "double_click" else "1"
        xdo += ["mousemove", str(arg["x"]), str(arg["y"]), "click", "--repeat", repeat, "--delay", "60", button]
    elif kind == "move":
        xdo += ["mousemove", str(arg["x"]), str(arg["y"])]
    elif kind == "drag":
        mid_x, mid_y = (arg["x1"] + arg["x2"]) // 2, (arg["y1"] + arg["y2"]) // 2
        xdo += [
            "mousemove",
            str(arg["x1"]),
            str(arg["y1"]),
            "mousedown",
            "1",
            "sleep",
            "0.05",
            "mousemove",
            str(mid_x),
            str(mid_y),
            "sleep",
            "0.05",
            "mousemove",
            str(arg["x2"]),
            str(arg["y2"]),
            "sleep",
            "0.05",
            "mouseup",
            "1",
        ]
    elif kind == "scroll":
        if "x" in arg:
            xdo += ["mousemove", str(arg["x"]), str(arg["y"])]
        for amount, negative, positive in ((arg["dy"], "4", "5"), (arg["dx"], "6", "7")):
            if amount:
                xdo += ["click", "--repeat", str(abs(amount)), "--delay", "20", positive if amount > 0 else negative]
        if len(xdo) == 1:
            return {}
    elif kind == "type":
        xdo += ["type", "--delay", "8", "--", arg["text"]]
    elif kind == "key":
        xdo += ["key", "--delay", "30", "--", *arg["keys"]]
    elif kind == "wait":
        time.sleep(float(arg["seconds"]))
        return {}
    else:
        return {"error": f"unknown action {kind!r}"}
    stamp = state_stamp() if kind != "move" else None  # a bare move sends no key or button event to wait for
    done = run(xdo, check=False, timeout=60)
    problem = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0 or "No such key" in problem or "Invalid" in problem:
        return {"error": problem or f"xdotool exited with {done.returncode}"}
    await_app(stamp)
    return {}


def screen_size():
    width, height = run(["xdotool", "getdisplaygeometry"]).stdout.split()
    return int(width), int(height)


# xwd asks the X server about the windows on the root as it captures; a window that closes meanwhile (a dialog
# going away after its button was pressed) fails the capture with X's BadWindow, seen once after GIMP's export.
# The next capture no longer meets that window.
SCREENSHOT_TRIES = 3


def screenshot():
    argv = ["xwd", "-root", "-silent", "-display", DISPLAY]
    for attempt in range(1, SCREENSHOT_TRIES + 1):
        done = run(argv, check=False)
        if done.returncode == 0 or b"BadWindow" not in done.stderr or attempt == SCREENSHOT_TRIES:
            break
    return run_result(argv, done).stdout


def settle():
    """The screen once three captures in a row are equal (or the last one after SETTLE_LIMIT_S)."""
    time.sleep(SETTLE_FIRST_S)
    deadline = time.monotonic() + SETTLE_LIMIT_S
    previous, same = screenshot(), 0
    while True:
        time.sleep(SETTLE_POLL_S)
        current = screenshot()
        same = same + 1 if current == previous else 0
        if same == 2 or time.monotonic() > deadline:
            return current, same == 2
        previous = current


def describe():
    windows = []
    for line in wmctrl_lines("-lGp")[:WINDOWS]:
        parts = line.split(None, 8)
        if len(parts) >= 8:
            wid, _desk, pid, x, y, w, h, _host = parts[:8]
            windows.append(
                {
                    "id": int(wid, 16),
                    "pid": int(pid),
                    "x": int(x),
                    "y": int(y),
                    "width": int(w),
                    "height": int(h),
                    "title": parts[8][:TITLE_CHARS] if len(parts) > 8 else "",
                }
            )
    focused = run(["xdotool", "getactivewindow"], check=False).stdout.decode().strip()
    location = dict(
        item.split("=", 1) for item in run(["xdotool", "getmouselocation", "--shell"]).stdout.decode().split()
    )
    a11y = {}
    if os.path.isdir(A11Y_DIR):
        for name in sorted(name for name in os.listdir(A11Y_DIR) if name.endswith(".txt"))[:A11Y_FILES]:
            text = read_bounded(os.path.join(A11Y_DIR, name), A11Y_BYTES)
            if text is not None:
                a11y[name[:-4][:TITLE_CHARS]] = text
    return {
        "windows": windows,
        "focused": int(focused) if focused.isdigit() else None,
        "pointer": [int(location.get("X", 0)), int(location.get("Y", 0))],
        "a11y": a11y,
    }


def read_bounded(path, limit):
    """At most ``limit`` bytes of a regular file as text, None for anything else: the agent may have put a
    fifo (which would block), a link or a device there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def handle(command, arg):
    """One request: (header, body). Failures of the desktop itself come back as {"fatal": ...}."""
    try:
        if command == "start":
            return start(arg), b""
        if command == "launch":
            answer = launch(arg)
        elif command == "act":
            answer = act(arg)
        elif command == "observe":
            answer = {}
        else:
            return {"fatal": f"unknown command {command!r}"}, b""
        image, stable = settle()
        if arg.get("tree") and TREE_SCRIPT:
            width, height = screen_size()
            # An unchanged screen is not an idle app: LibreOffice greys its toolbars and paints nothing while it
            # saves, which the pixel check took for settled (a fork and a replay then showed the save, and
            # its status bar's fields, at different moments). Every call of the walk is served by the app's
            # main loop, so once the walk is back the app has run again: settle anew, and walk again while
            # the screen changed across the walk, so the tree and the screenshot show the same moment.
            for _ in range(TREE_ROUNDS):
                answer["tree"] = accessibility_tree(width, height)
                after, stable = settle()
                if after == image:
                    break
                image = after
        answer.update(describe(), stable=stable)
        return answer, zlib.compress(image, 1)
    except (RuntimeError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as exc:
        return {"fatal": f"{type(exc).__name__}: {exc}"}, b""


def serve():
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        header, body = handle(request["command"], request.get("arg", {}))
        header["size"] = len(body)
        out.write(json.dumps(header).encode() + b"\n" + body)
        out.flush()


def main():
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    serve()


if __name__ == "__main__":  # the bootstrap runs it as __main__; importing it starts nothing
    main()
