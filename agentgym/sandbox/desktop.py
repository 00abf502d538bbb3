"""DesktopSandbox: an Xvfb desktop (window manager, apps) inside a hardened Docker container, with screenshots,
xdotool input, and snapshot/fork built on the Docker sandbox's container commit.

The display runs inside the container (``Xvfb :0``, no TCP, nothing touches the host's X server);
every operation is one request to a small in-container helper (``deskctl.py``, sent over stdin at
start and kept running on one attached ``docker exec``) that drives ``xdotool``, waits until the
screen stops changing, and returns a zlib-compressed raw screenshot together with the window
list, the focused window, the pointer and the apps' accessibility summaries.

Trust. The helper runs as the agent's uid (the apps it starts are the agent's) but makes itself
non-dumpable before it reads a request, as the command server does, so the agent's processes cannot
open its channel or ptrace it. The host still bounds every byte it takes from the channel (the
header line, the compressed screenshot and what it inflates to, the stderr kept for messages) and
checks the screenshot's geometry. The agent can kill or stop the helper, or the X server under it:
a helper that fails on the agent's turn while the container runs is the agent's failure
(:class:`DesktopHelperLost`, scored as a limit the agent exceeded), never an env error that a
trainer would drop. See :mod:`agentgym.envs.gui` for what a snapshot captures and how a fork
rebuilds the in-memory X state that a commit cannot hold.

The desktop image is the base sandbox recipe plus Xvfb, openbox, xdotool, wmctrl, core and
TrueType fonts, ``x11-apps`` (xedit, xcalc, xwd) and Tk, built offline by
``agentgym images build --desktop`` and tagged by its recipe hash like the base image.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import struct
import tarfile
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agentgym.core import ResourceLimitExceeded
from agentgym.sandbox import engine, images
from agentgym.sandbox.base import SandboxError, SandboxUnavailableError
from agentgym.sandbox.command_server import bootstrap_argv
from agentgym.sandbox.docker import _DEATH_NOTICE_S, DockerSandbox, DockerSnapshot, SandboxConfig, _hijack

__all__ = [
    "DesktopHelperLost",
    "DesktopSandbox",
    "DesktopState",
    "Screen",
    "build_desktop_image",
    "require_desktop_image",
    "desktop_image_tag",
    "decode_screenshot",
    "desktop_config",
    "tar_tree",
]

REPOSITORY = "agentgym/desktop"
DESKTOP_PACKAGES = images.PACKAGES + (
    "xvfb",
    "xfonts-base",
    "x11-xkb-utils",
    "xkb-data",
    "openbox",
    "xdotool",
    "wmctrl",
    "x11-apps",
    "python3-tk",
    "fonts-dejavu-core",
)
# The X server wants its socket directory root-owned and sticky; the sandbox user cannot make it so.
DESKTOP_SETUP = (
    images.USER_SETUP
    + """\
mkdir -p -m 1777 /tmp/.X11-unix
rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/*
"""
)
DESKTOP_CHANGES = images.IMAGE_CHANGES + ("ENV DISPLAY=:0",)

#: Where the window manager's configuration lives in the container (the agent user's, not root's).
RUNTIME_DIR = "/tmp/agentgym/runtime"
_HELPER = Path(__file__).with_name("deskctl.py").read_bytes()
_TREE_WALKER = Path(__file__).with_name("a11y_tree.py").read_text()
# What the host takes from the helper's channel: an answer's JSON header line (windows, titles and
# accessibility summaries, each bounded by the helper), the bytes of stderr kept for messages, and
# what an XWD dump may hold besides the pixels (its header, window name and colour map).
MAX_HEADER_BYTES = 1 << 20
_STDERR_BYTES = 4096
_TREE_LIMIT_S = 10.0  # deskctl.TREE_LIMIT_S: the longest a tree walk may add to a command
_XWD_EXTRA_BYTES = 64 << 10


APPS_REPOSITORY = "agentgym/desktop-apps"
#: The real apps, installed by apt in the chroot (debootstrap's own resolver does not follow the
#: alternatives and virtual packages these pull in). ``libreoffice-gtk3`` is where LibreOffice's
#: AT-SPI bridge lives; ``python3-pyatspi`` walks the accessibility tree from inside the desktop; ``xterm``
#: (with ``zip``/``unzip``) is the terminal of the OS tasks (:mod:`agentgym.envs.gui.generators_os`); ``chromium``
#: (Debian's, from the mirror's suite) is the browser of the Chromium tasks (:mod:`agentgym.envs.gui.generators_chrome`).
APPS_PACKAGES = (
    "libreoffice-calc",
    "libreoffice-writer",
    "libreoffice-impress",
    "libreoffice-gtk3",
    "gimp",
    "chromium",
    "mousepad",
    "pcmanfm",
    "xterm",
    "zip",
    "unzip",
    "fonts-liberation2",
    "fonts-dejavu",
    "dbus",
    "dbus-x11",
    "at-spi2-core",
    "python3-pyatspi",
)
#: The agent's LibreOffice settings, seeded before its profile is made: no tip of the day, no "what's
#: new" or donation bar, no "keep current format?" question on saving xlsx/docx/pptx, no autosave or
#: crash recovery (a fork's relaunch would offer to recover), no update check, macros refused; Calc's
#: AutoInput and Writer's word completion off, so that typed text lands as typed.
LIBREOFFICE_SETTINGS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" \
xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="UseOpenCL" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="WarnAlienFormat" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="AutoSave" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Recovery/AutoSave"><prop oor:name="Enabled" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Recovery/RecoveryInfo"><prop oor:name="Enabled" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Security/Scripting"><prop oor:name="MacroSecurityLevel" oor:op="fuse"><value>3</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="ooSetupLastVersion" oor:op="fuse"><value>7.4</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="LastTimeDonateShown" oor:op="fuse"><value>9999999999</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="LastTimeGetInvolvedShown" oor:op="fuse"><value>9999999999</value></prop></item>
<item oor:path="/org.openoffice.Office.Calc/Input"><prop oor:name="AutoInput" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Writer/AutoFunction/Completion"><prop oor:name="Enable" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Jobs/Jobs/org.openoffice.Office.Jobs:Job['UpdateCheck']/Arguments">\
<prop oor:name="AutoCheckEnabled" oor:op="fuse"><value>false</value></prop></item>
</oor:items>
"""
_LO_PROFILE = "/home/agent/.config/libreoffice/4/user"
#: The agent's GIMP settings (gimprc), added to the profile GIMP made: no update check. (Debian's GIMP
#: starts in single-window mode, the toolbox, the docks and the image in one window that the window
#: manager maximizes: /etc/gimp/2.0/sessionrc.)
GIMP_SETTINGS = """(check-updates no)
"""
_GIMP_PROFILE = "/home/agent/.config/GIMP/2.10"
#: Chromium's managed policies (root's, which the agent cannot change): downloads refused, as the web envs refuse them
#: (``DownloadRestrictions`` 3 blocks every download, "save page as" included); no sign-in, sync, default-browser,
#: translate, password-saving or privacy-sandbox prompts, no metrics, no background mode (closing the window ends the
#: browser, which writes its profile then) and no extension installs. No policy touches what the tasks change
#: (bookmarks, history, font sizes). The desktop has no network at all (the container has none).
CHROMIUM_POLICIES = {
    "DownloadRestrictions": 3,
    "BrowserSignin": 0,
    "SyncDisabled": True,
    "DefaultBrowserSettingEnabled": False,
    "MetricsReportingEnabled": False,
    "TranslateEnabled": False,
    "PasswordManagerEnabled": False,
    "PrivacySandboxPromptEnabled": False,
    "PromotionalTabsEnabled": False,
    "BackgroundModeEnabled": False,
    "ExtensionInstallBlocklist": ["*"],
}
_CHROMIUM_POLICY_DIR = "/etc/chromium/policies/managed"
# GTK 3 reads its settings from settings.ini, GTK 2 from ~/.gtkrc-2.0, and GIMP (GTK 2) from its profile's gtkrc.
_GTK_SETTINGS = "gtk-cursor-blink = 0\\ngtk-enable-animations = 0\\n"
# apt runs in the chroot with /proc mounted (postinst scripts read it); the LibreOffice profile is made
# once, headless, as the agent, so that no app start pays for it (several seconds) or shows first-run UI.
# So is GIMP's, without a display (-i), before its settings are added (GIMP makes a profile only where
# there is none): its first start queries every plug-in (writing pluginrc) and caches the fonts, over a
# minute on a loaded machine; later starts read what that left (plug-ins are matched by their files' mtimes,
# which the image keeps).
# GTK's text cursor does not blink (a blinking cursor never lets the screen settle, and a fork's
# screenshot would differ from a replay's by the blink phase); nor does GTK animate.
APPS_SETUP = f"""\
mount -t proc proc /proc
trap 'umount /proc' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {" ".join(APPS_PACKAGES)} >/dev/null
{DESKTOP_SETUP}mkdir -p {_LO_PROFILE}
cat > {_LO_PROFILE}/registrymodifications.xcu <<'XCU'
{LIBREOFFICE_SETTINGS}XCU
mkdir -p /home/agent/.config/gtk-3.0
printf '[Settings]\\ngtk-cursor-blink = false\\ngtk-enable-animations = false\\n' > /home/agent/.config/gtk-3.0/settings.ini
chown -R 1000:1000 /home/agent/.config
su agent -s /bin/sh -c 'HOME=/home/agent timeout 120 soffice --headless --norestore --terminate_after_init'
su agent -s /bin/sh -c 'HOME=/home/agent timeout 600 gimp -i -b "(gimp-quit 0)"'
test -s {_GIMP_PROFILE}/pluginrc
cat >> {_GIMP_PROFILE}/gimprc <<'RC'
{GIMP_SETTINGS}RC
printf '{_GTK_SETTINGS}' | tee /home/agent/.gtkrc-2.0 >> {_GIMP_PROFILE}/gtkrc
chown -R 1000:1000 /home/agent/.config /home/agent/.gtkrc-2.0
mkdir -p {_CHROMIUM_POLICY_DIR}
cat > {_CHROMIUM_POLICY_DIR}/agentgym.json <<'JSON'
{json.dumps(CHROMIUM_POLICIES, indent=1)}
JSON
rm -rf /tmp/* /tmp/.[!.]* && mkdir -p -m 1777 /tmp/.X11-unix
"""
APPS_CHANGES = DESKTOP_CHANGES + ("ENV SAL_USE_VCLPLUGIN=gtk3",)


def desktop_image_tag(apps: bool = False) -> str:
    """The desktop image's tag (``apps``: the variant with LibreOffice, GIMP and the other real apps)."""
    repository, recipe = _variant(apps)
    return f"{repository}:{images.recipe_hash(*recipe)[:12]}"


def _variant(apps: bool) -> tuple[str, tuple[tuple[str, ...], str, tuple[str, ...]]]:
    if apps:
        return APPS_REPOSITORY, (DESKTOP_PACKAGES, APPS_SETUP, APPS_CHANGES)
    return REPOSITORY, (DESKTOP_PACKAGES, DESKTOP_SETUP, DESKTOP_CHANGES)


def build_desktop_image(*, apps: bool = False, force: bool = False, progress=print) -> str:
    """Build the desktop image unless it exists (about three minutes from the Debian mirror, more with
    ``apps``; needs root)."""
    repository, (packages, setup, changes) = _variant(apps)
    return images.build_debootstrap_image(
        repository, packages=packages, setup=setup, changes=changes, force=force, progress=progress
    )


def require_desktop_image(apps: bool = False) -> str:
    """The desktop image's tag: $AGENTGYM_DESKTOP_IMAGE (or $AGENTGYM_DESKTOP_APPS_IMAGE), else the current
    recipe's build."""
    tag = os.environ.get("AGENTGYM_DESKTOP_APPS_IMAGE" if apps else "AGENTGYM_DESKTOP_IMAGE") or desktop_image_tag(apps)
    if not images.image_exists(tag):
        flag = "--desktop-apps" if apps else "--desktop"
        raise SandboxUnavailableError(
            f"the desktop image {tag} is missing: run `agentgym images build {flag}` "
            "(a few minutes, offline from the Debian mirror; needs root for debootstrap)"
        )
    return tag


# The window manager's configuration: every window undecorated at the top-left corner and focused
# when it maps, so app layouts (and reference solutions' coordinates) do not depend on placement;
# one keyboard shortcut, alt+Tab (the next window, focused and raised, without the switcher's pop-up, which a
# screenshot could catch half drawn), so every other key reaches the apps; a click focuses and raises a window.
# The real apps (desktop-apps image) fill the screen, as on OSWorld's desktop: with several open, alt+Tab is the
# way from one to another.
OPENBOX_CONFIG = """<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="http://openbox.org/3.4/rc">
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <desktops><number>1</number></desktops>
  <margins><top>0</top><bottom>0</bottom><left>0</left><right>0</right></margins>
  <keyboard><keybind key="A-Tab"><action name="NextWindow"><dialog>none</dialog><bar>no</bar><raise>yes</raise>
    <finalactions><action name="Focus"/><action name="Raise"/></finalactions></action></keybind></keyboard>
  <mouse><context name="Client">
    <mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
    <mousebind button="Right" action="Press"><action name="Focus"/><action name="Raise"/></mousebind>
  </context></mouse>
  <applications>
    <application class="*"><decor>no</decor><position force="yes"><x>0</x><y>0</y></position></application>
    <application class="libreoffice*"><maximized>yes</maximized></application>
    <application class="Gimp*"><maximized>yes</maximized></application>
    <application class="Mousepad"><maximized>yes</maximized></application>
    <application class="XTerm"><maximized>yes</maximized></application>
    <application class="Chromium*"><maximized>yes</maximized></application>
  </applications>
</openbox_config>
"""


class DesktopHelperLost(SandboxError, ResourceLimitExceeded):
    """The desktop helper failed (died, hung, or the X server went away under it) during the agent's action
    while the container was running: the agent's processes, which share its uid, can kill or stop it, so
    this ends the episode as the agent's failure rather than as an env error."""


@dataclass(frozen=True)
class Screen:
    """The virtual screen's size in pixels (24-bit colour)."""

    width: int = 1024
    height: int = 768

    def contains(self, x: int, y: int) -> bool:
        return 0 <= x < self.width and 0 <= y < self.height

    @property
    def screenshot_bytes(self) -> int:
        """The most an uncompressed screenshot of this screen may take (32 bits per pixel)."""
        return self.width * self.height * 4 + _XWD_EXTRA_BYTES


@dataclass
class DesktopState:
    """One observation of the desktop: the settled screenshot and what the X server says about it.

    ``windows`` are dicts with ``id``, ``pid``, ``x``, ``y``, ``width``, ``height``, ``title``
    (top-level windows, stacking order); ``a11y`` maps an app name to its accessibility summary;
    ``stable`` is false when the screen was still changing after the settle limit; ``error`` is
    what an input action reported (an unknown key name, say), None when it ran; ``tree`` is the
    linearized accessibility tree (``role, name, text, position, size`` per line, see
    ``a11y_tree.py``) on a desktop started with ``a11y_tree=True``, else None.
    """

    image: np.ndarray
    windows: list[dict] = field(default_factory=list)
    focused: int | None = None
    pointer: tuple[int, int] = (0, 0)
    a11y: dict[str, str] = field(default_factory=dict)
    stable: bool = True
    error: str | None = None
    tree: str | None = None


def desktop_config() -> SandboxConfig:
    """The code sandbox's hardening, with room for an X server, a window manager and a few apps."""
    return SandboxConfig(
        working_dir="/home/agent",
        mem_limit="1g",
        pids_limit=256,
        cpus=1.0,
        environment={"DISPLAY": ":0", "HOME": "/home/agent"},
    )


class DesktopSandbox:
    """A running X desktop in a :class:`DockerSandbox`; see the module docstring.

    Get one with :meth:`create` (a fresh desktop) or :meth:`from_snapshot` (a fork). Files go
    through :attr:`sandbox` (``read_file``, ``write_file``, ``put_tree``, ``fs_hash``).
    """

    def __init__(self, sandbox: DockerSandbox, screen: Screen):
        self.sandbox = sandbox
        self.screen = screen
        self._channel: _HelperChannel | None = None
        self._lock = threading.Lock()
        #: Whether observations carry the accessibility tree (a desktop started with ``a11y_tree=True``).
        self.a11y_tree = False

    @classmethod
    def create(
        cls,
        image: str | None = None,
        *,
        screen: Screen | None = None,
        config: SandboxConfig | None = None,
        warm: bool = True,
        pointer: tuple[int, int] | None = None,
        a11y_tree: bool = False,
    ) -> DesktopSandbox:
        """A desktop with the X server and the window manager running and nothing else on the screen.

        ``a11y_tree`` (the desktop-apps image): a session D-Bus with AT-SPI for the apps, and every
        observation carries the accessibility tree."""
        sandbox = DockerSandbox.create(
            image or require_desktop_image(apps=a11y_tree), config=config or desktop_config(), warm=warm
        )
        return cls._started(sandbox, screen or Screen(), pointer, a11y_tree)

    @classmethod
    def from_snapshot(
        cls,
        snapshot: DockerSnapshot,
        *,
        screen: Screen,
        config: SandboxConfig | None = None,
        pointer: tuple[int, int] | None = None,
        a11y_tree: bool = False,
    ) -> DesktopSandbox:
        """A desktop on ``snapshot``'s filesystem with a fresh X session (apps are relaunched by the caller)."""
        sandbox = DockerSandbox.from_snapshot(snapshot, config=config or desktop_config())
        return cls._started(sandbox, screen, pointer, a11y_tree)

    @classmethod
    def _started(
        cls, sandbox: DockerSandbox, screen: Screen, pointer: tuple[int, int] | None, a11y_tree: bool
    ) -> DesktopSandbox:
        desktop = cls(sandbox, screen)
        desktop.a11y_tree = a11y_tree
        try:
            sandbox.put_tree(RUNTIME_DIR, _runtime_archive(sandbox.config))
            arg = {"width": screen.width, "height": screen.height, "wm_config": f"{RUNTIME_DIR}/openbox.xml"}
            if a11y_tree:
                arg["a11y_tree"] = _TREE_WALKER
            if pointer is not None:
                arg.update(pointer_x=pointer[0], pointer_y=pointer[1])
            desktop._command("start", arg, observe=False, timeout=150)
        except BaseException:
            sandbox.close(wait=False)
            raise
        return desktop

    # ------------------------------------------------------------------ the helper
    def launch(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60.0,
        ready_title: str | None = None,
    ) -> DesktopState:
        """Start an app, wait for its first window (and, with ``ready_title``, for a window whose title contains
        it: LibreOffice maps a loading window before its document's), and observe the settled screen."""
        return self._command(
            "launch",
            {"name": name, "argv": argv, "cwd": cwd, "env": env or {}, "timeout": timeout, "ready_title": ready_title},
            timeout=timeout + 10,
        )

    def act(self, action: dict) -> DesktopState:
        """Run one validated input action (see ``deskctl.act``) and observe the settled screen.

        Raises :class:`DesktopHelperLost` when the helper fails while the container runs (the agent's doing),
        SandboxError when the container is gone."""
        timeout = 30.0 + float(action.get("seconds", 0)) + len(action.get("text", "")) * 0.05
        try:
            return self._command("act", action, timeout=timeout)
        except DesktopHelperLost:
            raise
        except SandboxError as exc:
            self.sandbox._raise_if_dead(self.sandbox.id, notice=_DEATH_NOTICE_S)
            raise DesktopHelperLost(
                f"{exc} (the container runs: the agent's processes killed, stopped or starved the desktop helper "
                "or the X server)"
            ) from exc

    def observe(self) -> DesktopState:
        return self._command("observe", {})

    def _command(self, command: str, arg: dict, *, observe: bool = True, timeout: float = 30.0) -> DesktopState | None:
        if observe and self.a11y_tree:
            arg, timeout = {**arg, "tree": True}, timeout + _TREE_LIMIT_S
        with self._lock:
            if self._channel is None:
                self._channel = _HelperChannel(self.sandbox)
            answer, body = self._channel.request(command, arg, timeout, self.screen.screenshot_bytes)
        if "fatal" in answer:
            raise SandboxError(f"desktop {command}: {answer['fatal']}")
        if not observe:
            return None
        image = decode_screenshot(_inflate(body, self.screen.screenshot_bytes))
        if image.shape[:2] != (self.screen.height, self.screen.width):
            raise SandboxError(f"desktop {command}: a screenshot of {image.shape[1]}x{image.shape[0]} pixels")
        return DesktopState(
            image,
            answer["windows"],
            answer["focused"],
            tuple(answer["pointer"]),
            answer["a11y"],
            answer["stable"],
            answer.get("error"),
            answer.get("tree"),
        )

    # ------------------------------------------------------------------ branching and lifetime
    def snapshot(self) -> DockerSnapshot:
        """Commit the container: the filesystem, including the apps' state files (the X session is not in it)."""
        return self.sandbox.snapshot()

    def close(self, wait: bool = True) -> None:
        channel, self._channel = self._channel, None
        try:
            if channel is not None:
                channel.close()
        finally:  # the container goes whatever closing the helper's channel raised
            self.sandbox.close(wait=wait)

    def __enter__(self) -> DesktopSandbox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _HelperChannel:
    """The attached ``docker exec`` of the helper (``deskctl.py`` over the command server's bootstrap):
    requests go in on its stdin, answers come back on its stdout in Docker's multiplexed frames (the end
    of stderr is kept for error messages). Every answer is bounded before it is parsed."""

    def __init__(self, sandbox: DockerSandbox):
        client = engine.api()
        with engine.engine_errors("starting the desktop helper"):
            exec_id = client.exec_create(
                sandbox.id, bootstrap_argv("agentgym-desktop-helper"), stdin=True, user=sandbox.config.user, workdir="/"
            )["Id"]
            self._response, self._reader, self._sock = _hijack(client, exec_id)
        self._frames = bytearray()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._broken: str | None = None
        self._sent = False

    def request(self, command: str, arg: dict, timeout: float, body_limit: int) -> tuple[dict, bytes]:
        """One answer: its JSON header (at most :data:`MAX_HEADER_BYTES`) and a body of at most ``body_limit``."""
        if self._broken:
            raise SandboxError(f"the desktop helper is unusable: {self._broken}")
        deadline = time.monotonic() + timeout
        try:
            message = json.dumps({"command": command, "arg": arg}).encode() + b"\n"
            if not self._sent:  # the helper's source first, read by the bootstrap
                message, self._sent = b"%d\n" % len(_HELPER) + _HELPER + message, True
            self._sock.sendall(message)
            while (end := self._stdout.find(b"\n")) < 0:
                if len(self._stdout) > MAX_HEADER_BYTES:
                    raise ValueError(f"an answer's header is over {MAX_HEADER_BYTES} bytes")
                self._fill(deadline, command)
            header = json.loads(self._stdout[:end])
            size = header["size"] if isinstance(header, dict) else None
            if not isinstance(size, int) or not 0 <= size <= body_limit:
                raise ValueError(f"an answer's body of {size!r} bytes (at most {body_limit})")
            del self._stdout[: end + 1]
            while len(self._stdout) < size:
                self._fill(deadline, command)
        except (OSError, ValueError, KeyError) as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise SandboxError(f"desktop {command}: the helper failed ({self._broken})") from exc
        body = bytes(self._stdout[:size])
        del self._stdout[:size]
        return header, body

    def _fill(self, deadline: float, command: str) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            # The stream is now somewhere in the middle of an answer: nothing after this can be trusted.
            self._broken = f"{command} took too long"
            raise SandboxError(f"desktop {command}: no answer from the desktop helper in time")
        self._sock.settimeout(remaining)
        chunk = self._reader.read1(1 << 16)
        if not chunk:
            self._broken = "it exited"
            raise SandboxError(
                f"desktop {command}: the helper exited: {bytes(self._stderr[-2000:]).decode(errors='replace')}"
            )
        self._frames += chunk
        while len(self._frames) >= 8:
            size = int.from_bytes(self._frames[4:8], "big")
            if len(self._frames) < 8 + size:
                break
            if self._frames[0] == 2:
                self._stderr = (self._stderr + self._frames[8 : 8 + size])[-_STDERR_BYTES:]
            else:
                self._stdout += self._frames[8 : 8 + size]
            del self._frames[: 8 + size]

    def close(self) -> None:
        self._broken = "closed"
        self._response.close()


def tar_tree(entries: dict[str, bytes | None], config: SandboxConfig) -> bytes:
    """A tar of files (bytes) and folders (None) at relative paths, owned by the sandbox user, for ``put_tree``;
    parent folders are added too, so that none is created as root by the engine."""
    folders = {posixpath.dirname(path) for path in entries}
    while folders - {""} - set(entries):
        entries = {**{folder: None for folder in folders if folder}, **entries}
        folders = {posixpath.dirname(path) for path in entries}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(entries):  # parents before children
            info = tarfile.TarInfo(path)
            info.uid, info.gid = config.uid_gid
            data = entries[path]
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _runtime_archive(config: SandboxConfig) -> bytes:
    return tar_tree({"openbox.xml": OPENBOX_CONFIG.encode()}, config)


def _inflate(body: bytes, limit: int) -> bytes:
    """The zlib-compressed ``body`` inflated, refusing one that inflates past ``limit`` bytes or does not end."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(body, limit)
    except zlib.error as exc:
        raise SandboxError(f"a screenshot that does not inflate: {exc}") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise SandboxError(f"a screenshot that inflates past {limit} bytes, or is cut short")
    return data


# XWD header fields (all big-endian CARD32): xwd writes them in network order whatever the host.
_XWD_FIELDS = (
    "header_size",
    "file_version",
    "pixmap_format",
    "pixmap_depth",
    "pixmap_width",
    "pixmap_height",
    "xoffset",
    "byte_order",
    "bitmap_unit",
    "bitmap_bit_order",
    "bitmap_pad",
    "bits_per_pixel",
    "bytes_per_line",
    "visual_class",
    "red_mask",
    "green_mask",
    "blue_mask",
    "bits_per_rgb",
    "colormap_entries",
    "ncolors",
    "window_width",
    "window_height",
    "window_x",
    "window_y",
    "window_bdrwidth",
)


def decode_screenshot(data: bytes) -> np.ndarray:
    """An XWD dump of a 24-bit TrueColor screen as H×W×3 uint8 RGB: 32 bits a pixel (what ``xwd -root`` gives on
    Xvfb), or 24 (what it gives while a window of another visual is mapped, e.g. a GTK 3 dialog with an alpha
    channel: xwd then reads the screen region by region into a packed image)."""
    if len(data) < 100:
        raise SandboxError(f"a screenshot of {len(data)} bytes, shorter than an XWD header")
    header = dict(zip(_XWD_FIELDS, struct.unpack(">25I", data[:100])))
    if header["bits_per_pixel"] not in (24, 32) or header["pixmap_format"] != 2:
        raise SandboxError(
            f"unsupported screenshot format: {header['bits_per_pixel']} bits per pixel, "
            f"pixmap format {header['pixmap_format']}"
        )
    size = header["bits_per_pixel"] // 8
    width, height, stride = header["pixmap_width"], header["pixmap_height"], header["bytes_per_line"]
    start = header["header_size"] + 12 * header["ncolors"]
    if header["header_size"] < 100 or not 0 < width * size <= stride or start + stride * height > len(data):
        raise SandboxError(
            f"a screenshot whose header does not match its {len(data)} bytes "
            f"({width}x{height} pixels, {stride} bytes a row, pixels from byte {start})"
        )
    rows = np.frombuffer(data, dtype=np.uint8, count=stride * height, offset=start).reshape(height, stride)
    octets = rows[:, : width * size].reshape(height, width, size).astype(np.uint32)
    # byte_order 0 (LSBFirst): a pixel's first byte is its lowest.
    order = range(size) if header["byte_order"] == 0 else range(size - 1, -1, -1)
    pixels = np.zeros((height, width), dtype=np.uint32)
    for shift, index in enumerate(order):
        pixels |= octets[..., index] << (8 * shift)
    channels = []
    for mask in (header["red_mask"], header["green_mask"], header["blue_mask"]):
        shift = (mask & -mask).bit_length() - 1
        channels.append(((pixels & mask) >> shift).astype(np.uint8))
    return np.stack(channels, axis=-1)
