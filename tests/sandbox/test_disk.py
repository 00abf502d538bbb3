"""The writable-layer measurement behind the soft disk limit (agentgym.sandbox.disk.layer_size), on host directories."""

import os

from agentgym.sandbox import disk

MiB = 1024**2
NAME = "d" * 200  # 30 levels of these: a path of 6,030 bytes, past PATH_MAX (4,096)


def _deep_tree(root, levels: int, data: int) -> None:
    """``levels`` nested directories under ``root`` with a file of ``data`` bytes at the bottom, made through
    descriptors (no path that long can be opened)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(NAME, dir_fd=fd)
            fd, parent = os.open(NAME, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(parent)
        out = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"x" * data)
        os.close(out)
    finally:
        os.close(fd)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_tree_nested_past_path_max_is_counted_in_full(tmp_path):
    # The deepest file sits where no path reaches it: a walk by path skipped it, and a policy could hide any
    # amount of data there from the disk limit.
    _deep_tree(tmp_path, 30, 8 * MiB)
    before = _open_descriptors()
    size = disk.layer_size(str(tmp_path))
    assert size >= 8 * MiB + 30 * disk.BLOCK
    assert _open_descriptors() == before  # every ancestor it held open is closed
