"""The browser sandbox: Debian's Chromium driven by Playwright's async API, one browser per process, one isolated context per env, a closed network.

The parts: :mod:`.process` (finding Chromium, the account and launcher it runs with), :mod:`.network`
(the gate that confines a session's traffic), :mod:`.session` (:class:`BrowserSession`) and
:mod:`.host` (:class:`BrowserHost` and :class:`LoopThread`).

Playwright's sync API is not safe with many sessions in one process, so everything browser-side
runs on one event loop in a dedicated thread (:class:`LoopThread`); environments, which are used
from many threads at once, hand it coroutines with :meth:`BrowserHost.run` and block until they
finish. One Chromium process serves every env of the process; each env gets a
:class:`BrowserSession`, i.e. its own browser context (cookies, storage, cache) with its own tabs.

Chromium renders pages the agent controls, so it is confined like any other sandbox:

* **Unprivileged and sandboxed.** Chromium runs with its own sandbox on (namespaces and
  seccomp-BPF for every renderer). When this process is root, Chromium runs as the system user
  :data:`BROWSER_USER` (created on first use) through a launcher that drops root with
  ``setpriv``; its home and temporary files live in a directory of that user's, removed when the
  browser closes. Where the kernel refuses the sandbox, the launch fails with Chromium's reason;
  ``AGENTGYM_CHROMIUM_SANDBOX=0`` is the explicit, logged way to run without it.
* **Only the env's origins, at the network layer.** Each context sends all its traffic, loopback
  included, through its own :class:`NetworkGate` (an HTTP proxy on loopback) that connects only
  to the session's origins, so a fetch, frame, image, WebSocket or worker cannot reach any other
  port. Routing additionally aborts (and lists) other requests before they leave the page.
  Every blocked request is recorded in :attr:`BrowserSession.blocked`, for the observation.
* **No ``data:``/``blob:`` navigations** unless the env declares the scheme: the gate gives every
  document a ``frame-src`` policy of the session's origins, the agent's ``goto`` is checked with
  :meth:`BrowserSession.allows`, and Chromium itself refuses top-level ``data:`` navigations by
  pages. Such URLs as subresources (images, fonts) stay allowed.
* **No downloads.** Contexts refuse them; each one is listed in :attr:`BrowserSession.downloads`.

A crash is an env failure, not a model error: a renderer crash or a lost browser marks the
session :attr:`~BrowserSession.crashed`, actions on it raise :class:`BrowserCrashedError`, and
the next session starts a fresh Chromium when the old one is gone.

Chromium is the ``chromium`` Debian package, found on ``PATH`` or given explicitly (argument or
``AGENTGYM_CHROMIUM``); Playwright's own browser downloads are never used.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.sandbox.browser.host import BrowserHost, LoopThread
    from agentgym.sandbox.browser.network import NetworkGate, origin_of
    from agentgym.sandbox.browser.process import BROWSER_USER, LAUNCH_ARGS, BrowserUnavailableError, find_chromium
    from agentgym.sandbox.browser.session import BrowserCrashedError, BrowserSession, navigation_history

_EXPORTS = {
    "BROWSER_USER": "process",
    "LAUNCH_ARGS": "process",
    "BrowserUnavailableError": "process",
    "find_chromium": "process",
    "NetworkGate": "network",
    "origin_of": "network",
    "BrowserCrashedError": "session",
    "BrowserSession": "session",
    "navigation_history": "session",
    "BrowserHost": "host",
    "LoopThread": "host",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
