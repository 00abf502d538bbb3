"""The Chromium process: finding Debian's Chromium, the unprivileged account it runs as, and the profile and launcher of one launch (see :mod:`agentgym.sandbox.browser`)."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from agentgym.sandbox import labels
from agentgym.sandbox.base import SandboxUnavailableError

__all__ = ["BROWSER_USER", "BrowserUnavailableError", "LAUNCH_ARGS", "Profile", "browser_account", "find_chromium"]


#: Flags for a headless Chromium on a closed network (the sandbox flag is Playwright's, from ``sandbox``).
LAUNCH_ARGS = [
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--mute-audio",
    "--font-render-hinting=none",  # identical glyph rasterisation across runs, for screenshot hashes
    # WebRTC would otherwise send UDP (and TURN over TCP) around the proxy, to any port.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
]

#: Features turned off besides Playwright's: autofill's server queries would go to the gate (and be
#: reported as blocked) whenever a page has a form.
_DISABLED_FEATURES = ("AutofillServerCommunication",)

#: The account Chromium runs as when this process is root.
BROWSER_USER = "agentgym-browser"

#: Environment variables Chromium gets from this process (nothing else: no credentials).
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "FONTCONFIG_FILE", "FONTCONFIG_PATH")


class BrowserUnavailableError(SandboxUnavailableError):
    """No usable Chromium on this machine."""


def find_chromium(path: str | os.PathLike | None = None) -> str:
    """The Chromium executable: ``path``, else ``$AGENTGYM_CHROMIUM``, else ``chromium`` on ``PATH``."""
    candidates = [str(path)] if path else []
    if os.environ.get("AGENTGYM_CHROMIUM"):
        candidates.append(os.environ["AGENTGYM_CHROMIUM"])
    if not candidates:
        candidates = [found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))]
    for candidate in candidates:
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = f" (looked for {', '.join(candidates)})" if candidates else ""
    raise BrowserUnavailableError(
        f"Chromium was not found{where}. Install Debian's package: `apt-get install chromium` "
        "(agentgym never downloads browsers), or pass its path / set AGENTGYM_CHROMIUM."
    )


def browser_account() -> tuple[int, int] | None:
    """(uid, gid) of :data:`BROWSER_USER` when this process is root (creating the user once), else None.

    Chromium refuses its sandbox as root, and a browser that renders agent-written pages must not
    hold root anyway; an unprivileged process simply runs Chromium as itself.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(BROWSER_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        done = subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                BROWSER_USER,
            ],
            capture_output=True,
            text=True,
        )
        try:  # another process may have created it meanwhile
            entry = pwd.getpwnam(BROWSER_USER)
        except KeyError:
            raise BrowserUnavailableError(
                f"Chromium must not run as root, and the user {BROWSER_USER} could not be created "
                f"({done.stderr.strip() or 'useradd exited ' + str(done.returncode)}); create it with "
                f"`useradd --system --user-group {BROWSER_USER}`."
            ) from None
    return entry.pw_uid, entry.pw_gid


class Profile:
    """Where one Chromium launch lives: a home for its files (owned by the account Chromium runs as) and the launcher Playwright starts.

    The launcher passes one ``--disable-features`` (Chromium keeps only the last one given, which
    would drop Playwright's) and, when this process is root, hands Chromium the profile
    directory Playwright made and drops to :data:`BROWSER_USER` with ``setpriv``. The directory
    itself stays this process's, so the browser's account cannot rewrite a launcher that root
    executes; :meth:`remove` deletes everything once the browser is gone.
    """

    def __init__(self, chromium: str, account: tuple[int, int] | None):
        self.root = Path(tempfile.mkdtemp(prefix=labels.browser_dir_prefix()))
        self.home = self.root / "home"
        self.home.mkdir(mode=0o700)
        if account is not None:
            os.chown(self.home, *account)
            self.root.chmod(0o711)
        self.executable = str(self._write_launcher(chromium, account))

    def _write_launcher(self, chromium: str, account: tuple[int, int] | None) -> Path:
        command, hand_over = shlex.quote(chromium), ""
        if account is not None:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                raise BrowserUnavailableError(
                    "setpriv (Debian's util-linux) is needed to run Chromium as "
                    f"{BROWSER_USER} when agentgym runs as root"
                )
            uid, gid = account
            hand_over = f'    --user-data-dir=*) chown -R {uid}:{gid} "${{arg#--user-data-dir=}}" || exit 1;;\n'
            command = (
                f"{shlex.quote(setpriv)} --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all "
                f"--bounding-set=-all -- {command}"
            )
        script = (
            "#!/bin/sh\n# Written by agentgym.sandbox.browser for one Chromium launch.\n"
            f"features={','.join(_DISABLED_FEATURES)}\n"
            'for arg do\n  shift\n  case "$arg" in\n'
            '    --disable-features=*) features="$features,${arg#--disable-features=}"; continue;;\n'
            f'{hand_over}  esac\n  set -- "$@" "$arg"\ndone\n'
            f'exec {command} "$@" "--disable-features=$features"\n'
        )
        launcher = self.root / "launch"
        launcher.write_text(script)
        launcher.chmod(0o755)
        return launcher

    def env(self) -> dict[str, str]:
        env = {key: os.environ[key] for key in _PASSED_ENV if key in os.environ}
        home = str(self.home)
        return dict(env, HOME=home, TMPDIR=home, XDG_CONFIG_HOME=home, XDG_CACHE_HOME=home)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
