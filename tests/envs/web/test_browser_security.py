"""The browser's confinement on real Chromium: unprivileged and sandboxed, no data:/blob: documents, no downloads, no loopback port but the env's own."""

import logging
import os
import pwd
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agentgym.envs.web.observation import element_id
from agentgym.sandbox.browser import BROWSER_USER, BrowserHost, BrowserUnavailableError

ROOT = Path(__file__).resolve().parents[3]


def proc_file(pid: int, name: str) -> bytes:
    """``/proc/<pid>/<name>``, or nothing for a process that exited since it was listed (renderers of
    closed contexts, spare contexts being replaced, come and go while the host runs)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except (ProcessLookupError, FileNotFoundError):
        return b""


def renderers(host):
    """Pids of the host's renderer processes."""
    return [pid for pid in host.chromium_pids() if b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def status(pid):
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.split() for key, _, value in (line.partition(":\t") for line in lines)}


def assert_sandboxed(host):
    """Every renderer runs unprivileged, in namespaces of its own, under seccomp-BPF."""
    expected_uid = pwd.getpwnam(BROWSER_USER).pw_uid if os.geteuid() == 0 else os.geteuid()
    pids = renderers(host)
    assert pids
    for pid in pids:
        fields = status(pid)
        assert {int(uid) for uid in fields["Uid"]} == {expected_uid}, fields["Uid"]
        assert fields["Seccomp"] == ["2"]  # a seccomp filter (0 is none)
        assert len(fields["NSpid"]) > 1  # a pid namespace of its own
        assert os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
        assert fields["CapEff"] == ["0000000000000000"]


def test_chromium_runs_unprivileged_with_its_sandbox_and_leaves_no_files(notes_app):
    host = BrowserHost()
    try:
        session = host.run(host.open_session([]), timeout=60)
        page = host.run(session.new_page("chrome://sandbox"))
        host.run(page.wait_for_function("() => document.body.innerText.includes('sandboxed')"))
        assert "You are adequately sandboxed." in host.run(page.inner_text("body"))
        assert_sandboxed(host)
        host.run(session.close())
        home = host._profile.home
        # This process may run other hosts' browsers too (the web envs share one): take this host's,
        # the browser process (no --type) whose environment is this host's private home.
        [browser] = [
            pid
            for pid in host.chromium_pids()
            if b"--type=" not in proc_file(pid, "cmdline")
            and f"HOME={home}".encode() in proc_file(pid, "environ").split(b"\0")
        ]
        argv = Path(f"/proc/{browser}/cmdline").read_bytes().split(b"\0")
        assert b"--no-sandbox" not in argv
        profile = Path(next(arg for arg in argv if arg.startswith(b"--user-data-dir=")).split(b"=", 1)[1].decode())
        if os.geteuid() == 0:
            owner = pwd.getpwnam(BROWSER_USER).pw_uid
            assert home.stat().st_uid == owner and profile.stat().st_uid == owner
        environ = Path(f"/proc/{browser}/environ").read_bytes().split(b"\0")
        assert f"TMPDIR={home}".encode() in environ
    finally:
        host.close()
    assert not home.parent.exists() and not profile.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the non-root case is this process itself")
def test_an_unprivileged_process_runs_chromium_sandboxed_as_itself(tmp_path):
    # The same code as any non-root user: no launcher drop, no --no-sandbox.
    home = Path(tempfile.mkdtemp(prefix="agentgym-test-home-"))
    os.chown(home, pwd.getpwnam(BROWSER_USER).pw_uid, pwd.getpwnam(BROWSER_USER).pw_gid)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path\n"
        "from agentgym.sandbox.browser import BrowserHost\n"
        "host = BrowserHost(); assert host.account is None\n"
        "session = host.run(host.open_session([]), timeout=60); host.run(session.new_page('about:blank'))\n"
        "import time\n"
        "def renderers():\n"
        "    found = {}\n"
        "    for p in host.chromium_pids():\n"
        "        try:\n"
        "            if b'--type=renderer' in Path(f'/proc/{p}/cmdline').read_bytes():\n"
        "                found[p] = Path(f'/proc/{p}/status').read_text().split('Seccomp:')[1].split()[0]\n"
        "        except OSError:\n"
        "            pass  # exited meanwhile\n"
        "    return found\n"
        # A renderer installs its seccomp filter early in its start, so one Chromium is starting right now (a
        # spare context's) may not have it yet: each renderer seen without it must get it, or exit, within 20 s.
        # One unfiltered for longer fails, with what it is.
        "host.run(host.spares_ready())\n"
        "first_unfiltered, filtered = {}, set()\n"
        "deadline = time.monotonic() + 30\n"
        "while True:\n"
        "    now, found = time.monotonic(), renderers()\n"
        "    filtered |= {p for p, mode in found.items() if mode == '2'}\n"
        "    first_unfiltered = {p: first_unfiltered.get(p, now) for p, mode in found.items() if mode != '2'}\n"
        "    stuck = [p for p, since in first_unfiltered.items() if now - since > 20]\n"
        "    if (filtered and not first_unfiltered) or stuck or now > deadline:\n"
        "        break\n"
        "    time.sleep(0.1)\n"
        "print('filtered', len(filtered), 'unfiltered', len(first_unfiltered), 'stuck', len(stuck))\n"
        "for p in stuck:\n"
        "    try:\n"
        "        print(Path(f'/proc/{p}/cmdline').read_bytes()[:500], Path(f'/proc/{p}/status').read_text())\n"
        "    except OSError:\n"
        "        print(p, 'exited since')\n"
        "host.run(session.close()); host.close()\n"
    )
    try:
        done = subprocess.run(
            [
                "setpriv",
                f"--reuid={BROWSER_USER}",
                f"--regid={BROWSER_USER}",
                "--clear-groups",
                sys.executable,
                "-c",
                script,
                str(ROOT),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ["PATH"], "HOME": str(home)},
            cwd=home,
        )
    finally:
        subprocess.run(["rm", "-rf", str(home)])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("filtered ") and " stuck 0" in done.stdout, done.stdout
    assert int(done.stdout.split()[1]) > 0, done.stdout


def test_a_sandbox_chromium_cannot_start_is_an_error_with_its_reason(caplog):
    # A stand-in for Chromium on a kernel without unprivileged user namespaces (its real message).
    folder = Path(tempfile.mkdtemp(prefix="agentgym-test-chromium-"))
    fake = folder / "chromium"
    fake.write_text(
        "#!/bin/sh\necho '[1:1:FATAL:zygote_host_impl_linux.cc(128)] No usable sandbox! If you are "
        "running on Ubuntu 23.10+ or another Linux distro that has disabled unprivileged user namespaces "
        "with AppArmor, see ...' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    folder.chmod(0o755)
    host = BrowserHost(fake)
    try:
        with pytest.raises(BrowserUnavailableError, match=r"No usable sandbox!.*AGENTGYM_CHROMIUM_SANDBOX=0"):
            host.run(host.open_session([]), timeout=60)
    finally:
        host.close()
        subprocess.run(["rm", "-rf", str(folder)])
    # The way out is explicit, and it is logged.
    host = BrowserHost(sandbox=False)
    try:
        with caplog.at_level(logging.WARNING, logger="agentgym.sandbox.browser"):
            session = host.run(host.open_session([]), timeout=60)
            host.run(session.new_page("about:blank"))
        assert "without its sandbox" in caplog.text
        assert {status(pid)["Seccomp"][0] for pid in renderers(host)} == {"0"}
        host.run(session.close())
    finally:
        host.close()


# ---------------------------------------------------------------- data: and blob: documents
def test_data_and_blob_documents_are_refused_unless_declared(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    for url in ("data:text/html,<h1>injected</h1>", "javascript:document.title='x'", "DATA:text/html,x"):
        _, _, _, _, info = notes_env.step(f'goto("{url}")')
        assert "outside the sites of this task" in (info["error"] or ""), (url, info["error"])
    observation, *_ = notes_env.step('goto("/frames")')
    page = notes_env.session.page

    def loaded_frames():
        return [frame.url for frame in page.frames if frame.url.startswith(("data:", "blob:"))]

    assert loaded_frames() == []
    # A page's link to a data: document leads nowhere either (Chromium's own rule for top frames).
    observation, *_ = notes_env.step(f"click({element_id(observation['text'], 'link', 'Data page')})")
    assert "URL: http://notes.local/frames" in observation["text"]

    # A session that declares the schemes gets them (as a task that needs them would).
    host = notes_env._host

    async def declared():
        session = await host.open_session([notes_env.app.origin], schemes=["data", "blob"])
        try:
            frame_page = await session.new_page(notes_env.app.origin + "/frames")
            await frame_page.wait_for_function("() => document.querySelectorAll('iframe').length == 2")
            await frame_page.wait_for_timeout(200)
            return sorted(frame.url.split(":")[0] for frame in frame_page.frames[1:])
        finally:
            await session.close()

    assert notes_env._run(declared()) == ["blob", "data"]


# ---------------------------------------------------------------- downloads
def files_with(marker: bytes, roots, since: float) -> list[str]:
    found = []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                    if info.st_mtime >= since and info.st_size < 1 << 20 and os.path.isfile(path):
                        if marker in Path(path).read_bytes():
                            found.append(path)
                except OSError:
                    continue
    return found


def test_downloads_are_refused_reported_and_leave_nothing_on_the_host(notes_env):
    start = time.time() - 1
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    observation, *_ = notes_env.step('goto("/downloads")')
    reports = []
    for name in ("Export", "Save", "Blob"):
        observation, *_ = notes_env.step(f"click({element_id(observation['text'], 'link', name)})")
        reports.append("Downloads refused (files are never saved): " in observation["text"])
    time.sleep(0.5)
    assert files_with(b"notes-secret-", {tempfile.gettempdir(), os.path.expanduser("~")}, start) == []
    assert reports == [True, True, True]


# ---------------------------------------------------------------- the network
class Listener:
    """A TCP and a UDP socket on loopback that count whoever reaches them."""

    def __init__(self):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp_port = self.udp.getsockname()[1]
        self.contacts: list[str] = []
        for sock in (self.tcp, self.udp):
            sock.settimeout(0.2)
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                connection, address = self.tcp.accept()
                self.contacts.append(f"tcp from {address}")
                connection.close()
            except OSError:
                pass
            try:
                _, address = self.udp.recvfrom(2048)
                self.contacts.append(f"udp from {address}")
            except OSError:
                pass

    def close(self):
        self._stop = True
        self._thread.join()
        self.tcp.close()
        self.udp.close()


# Every way a page can open a connection; none of them may reach another loopback port.
_PROBES_JS = """
([port, udpPort]) => {
  for (const host of ['127.0.0.1', 'localhost', '0.0.0.0', '[::ffff:7f00:1]']) {
    const base = `http://${host}:${port}`;
    fetch(base + '/fetch', {mode: 'no-cors'}).catch(() => {});
    new Image().src = base + '/img';
    const frame = document.createElement('iframe'); frame.src = base + '/frame'; document.body.appendChild(frame);
    try { new WebSocket(`ws://${host}:${port}/ws`); } catch (e) {}
    try { new EventSource(base + '/events'); } catch (e) {}
    navigator.sendBeacon(base + '/beacon', 'x');
    const code = `fetch('${base}/worker').catch(() => {}); try { new WebSocket('ws://${host}:${port}/worker'); } catch (e) {}`;
    new Worker(URL.createObjectURL(new Blob([code], {type: 'text/javascript'})));
  }
  const rtc = new RTCPeerConnection({iceServers: [
    {urls: `turn:127.0.0.1:${port}?transport=tcp`, username: 'u', credential: 'p'},
    {urls: `stun:127.0.0.1:${udpPort}`}]});
  rtc.createDataChannel('x');
  rtc.createOffer().then(offer => rtc.setLocalDescription(offer));
  return fetch('/').then(response => response.status);  // the env's own origin still answers
}
"""


def test_no_loopback_port_but_the_envs_own_is_reachable(notes_env):
    listener = Listener()
    try:
        notes_env.reset(options={"task_id": "add/0"})
        own = notes_env._run(notes_env.session.page.evaluate(_PROBES_JS, [listener.port, listener.udp_port]))
        assert own == 200
        time.sleep(3)
        assert listener.contacts == []
        blocked = notes_env.session.drain_blocked()  # the observation lists the first five
        assert {f"CONNECT 127.0.0.1:{listener.port}", f"http://127.0.0.1:{listener.port}/fetch"} <= set(blocked)
    finally:
        listener.close()


def test_the_gate_passes_the_envs_own_traffic_intact(notes_env):
    # Forms (POST bodies), redirects and pages all through the gate, as before it.
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    text = "x" * 100_000
    notes_env.step(f'fill({element_id(observation["text"], "textbox", "Note")}, "{text}")')
    observation, *_ = notes_env.step(f"click({element_id(observation['text'], 'button', 'Add')})")
    assert notes_env.app.db.query("SELECT count(*) FROM notes WHERE text = ?", (text,))[0][0] == 1
    assert "Blocked requests" not in observation["text"]


def test_gates_close_with_their_sessions(notes_app):
    from agentgym.envs.web.app_env import WebAppEnv

    env = WebAppEnv("notes")
    env.reset(options={"task_id": "add/0"})
    gate = env.session.gate
    port = gate._server.sockets[0].getsockname()[1]
    env.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
