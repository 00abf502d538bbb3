"""The desktop sandbox: an X desktop in a hardened container, screenshots, input, and the helper's failure modes."""

import io
import struct
import tarfile

import numpy as np
import pytest

from agentgym.sandbox import engine
from agentgym.sandbox.base import SandboxError
from agentgym.sandbox.desktop import (
    DESKTOP_PACKAGES,
    DesktopSandbox,
    Screen,
    decode_screenshot,
    desktop_config,
    desktop_image_tag,
    tar_tree,
)


def xwd(pixels: np.ndarray, byte_order: int = 0, bits: int = 32) -> bytes:
    """A minimal XWD file as Xvfb's xwd writes it: 32 bits per pixel (or 24, packed, as xwd writes a screen with
    windows of several visuals), ZPixmap, masks 0xff0000/0xff00/0xff."""
    height, width, _ = pixels.shape
    stride = width * bits // 8 + 8  # rows padded, as servers may do
    name = b"xwdump\0"
    header = [
        100 + len(name),
        7,
        2,
        24,
        width,
        height,
        0,
        byte_order,
        32,
        byte_order,
        32,
        bits,
        stride,
        4,
        0xFF0000,
        0xFF00,
        0xFF,
        8,
        256,
        2,
        width,
        height,
        0,
        0,
        0,
    ]
    values = (pixels[..., 0].astype(np.uint32) << 16) | (pixels[..., 1].astype(np.uint32) << 8) | pixels[..., 2]
    octets = values.astype("<u4" if byte_order == 0 else ">u4").view(np.uint8).reshape(height, width, 4)
    if bits == 24:  # the value's three low bytes
        octets = octets[..., :3] if byte_order == 0 else octets[..., 1:]
    rows = np.zeros((height, stride), dtype=np.uint8)
    rows[:, : width * bits // 8] = octets.reshape(height, -1)
    return struct.pack(">25I", *header) + name + b"\0" * 12 * 2 + rows.tobytes()


@pytest.mark.parametrize("bits", [32, 24])
@pytest.mark.parametrize("byte_order", [0, 1])
def test_decode_screenshot(byte_order, bits):
    pixels = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    assert np.array_equal(decode_screenshot(xwd(pixels, byte_order, bits)), pixels)


def test_decode_rejects_other_formats():
    data = bytearray(xwd(np.zeros((2, 2, 3), np.uint8)))
    data[44:48] = struct.pack(">I", 16)  # bits per pixel
    with pytest.raises(SandboxError, match="16 bits per pixel"):
        decode_screenshot(bytes(data))


def test_tar_tree_adds_parent_folders_owned_by_the_sandbox_user():
    archive = tar_tree({"a/b/c.txt": b"x", "d": None}, desktop_config())
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: m for m in tar}
    assert list(members) == ["a", "a/b", "a/b/c.txt", "d"]
    assert members["a"].isdir() and members["d"].isdir() and members["a/b/c.txt"].isfile()
    assert {(m.uid, m.gid) for m in members.values()} == {(1000, 1000)}


def test_image_recipe():
    assert desktop_image_tag().startswith("agentgym/desktop:")
    assert {"xvfb", "openbox", "xdotool", "x11-apps", "python3-tk"} <= set(DESKTOP_PACKAGES)


@pytest.mark.docker
def test_a_desktop_in_a_hardened_container(desktop_image):
    with DesktopSandbox.create(desktop_image, screen=Screen(800, 600), warm=False) as desktop:
        state = desktop.observe()
        assert state.image.shape == (600, 800, 3) and state.image.dtype == np.uint8
        assert not state.image.any()  # a black root window and nothing else
        assert state.windows == [] and state.pointer == (400, 300) and state.stable
        info = engine.api().inspect_container(desktop.sandbox.id)
        assert info["HostConfig"]["NetworkMode"] == "none" and info["HostConfig"]["CapDrop"] == ["ALL"]
        # The container's keep-alive runs as nobody (out of the agent's reach); commands run as the agent.
        assert info["Config"]["User"] == "65534:65534" and desktop.sandbox.exec("id -u").stdout == "1000\n"
        # The X server runs inside the container, as the sandbox user, reachable only there.
        processes = desktop.sandbox.exec("ps -o user=,args= -C Xvfb").stdout
        assert processes.startswith("agent") and "-nolisten tcp" in processes

        desktop.sandbox.write_file("/home/agent/a.txt", "hello\n")
        state = desktop.launch("xedit", ["xedit", "-geometry", "640x480+0+0", "/home/agent/a.txt"])
        (window,) = state.windows
        assert window["title"] == "xedit" and window["width"] == 640 and state.focused == window["id"]
        assert state.image[:480, :640].any() and not state.image[500:, 700:].any()

        state = desktop.act({"action": "key", "keys": ["NoSuchKey"]})
        assert "No such key" in state.error
        state = desktop.act({"action": "move", "x": 10, "y": 11})
        assert state.error is None and state.pointer == (10, 11)
        typed = desktop.act({"action": "type", "text": "X"})
        assert typed.error is None and not np.array_equal(typed.image, state.image)

        desktop.sandbox.write_file("/home/agent/long.txt", "".join(f"line {n}\n" for n in range(300)))
        state = desktop.launch("xedit", ["xedit", "-geometry", "640x480+0+0", "/home/agent/long.txt"])
        scrolled = desktop.act({"action": "scroll", "dx": 0, "dy": 5, "x": 300, "y": 300})
        assert scrolled.error is None and not np.array_equal(scrolled.image, state.image)


@pytest.mark.docker
def test_a_dead_desktop_raises_sandbox_errors(desktop_image):
    desktop = DesktopSandbox.create(desktop_image, warm=False)
    try:
        with pytest.raises(SandboxError, match="timed out waiting for a window"):
            desktop.launch("nothing", ["sleep", "30"], timeout=1)
        desktop.sandbox.run_argv(["pkill", "-f", "agentgym-desktop-[h]elper"])
        with pytest.raises(SandboxError, match="helper"):
            desktop.observe()
    finally:
        desktop.close()


def test_cli_builds_the_desktop_image_with_a_flag(monkeypatch, capsys):
    from agentgym import cli
    from agentgym.sandbox import desktop

    monkeypatch.setattr(
        desktop, "build_desktop_image", lambda apps=False, force=False: f"agentgym/desktop:apps={apps}-force={force}"
    )
    assert cli.main(["images", "build", "--desktop", "--force"]) == 0
    assert capsys.readouterr().out.strip() == "agentgym/desktop:apps=False-force=True"
    assert cli.main(["images", "build", "--desktop-apps"]) == 0
    assert capsys.readouterr().out.strip() == "agentgym/desktop:apps=True-force=False"
    with pytest.raises(SystemExit, match="take no --dockerfile"):
        cli.main(["images", "build", "--desktop", "--dockerfile", "Dockerfile"])
