"""Moving files in and out of a sandbox, and hashing its trees."""

import io
import tarfile

import pytest

from agentgym.sandbox.docker import DockerSandbox

pytestmark = pytest.mark.docker


def test_text_and_binary_round_trip(sandbox):
    sandbox.write_file("/workspace/t.txt", "héllo\n")
    blob = bytes(range(256)) * 4096
    sandbox.write_file("/workspace/b.bin", blob, mode=0o755)
    assert sandbox.read_file("/workspace/t.txt") == "héllo\n".encode()
    assert sandbox.read_file("/workspace/b.bin") == blob
    assert sandbox.exec("stat -c '%a %u:%g' b.bin").stdout == "755 1000:1000\n"


def test_missing_parents_are_created_as_the_agent(sandbox):
    sandbox.write_file("/workspace/a/b/c/deep.txt", "x")
    assert sandbox.exec("cat a/b/c/deep.txt; stat -c '%u' a a/b a/b/c").stdout == "x1000\n1000\n1000\n"
    assert sandbox.exec("touch a/b/new").ok  # the agent can work in what was created for it


def test_relative_paths_follow_the_shell_cwd(sandbox):
    sandbox.exec("mkdir -p /tmp/here && cd /tmp/here")
    sandbox.write_file("rel.txt", "r")
    assert sandbox.read_file("/tmp/here/rel.txt") == b"r"
    assert sandbox.read_file("rel.txt") == b"r"


def test_symlinks_are_followed_and_errors_are_os_errors(sandbox):
    sandbox.exec("echo target > /tmp/real && ln -s /tmp/real /workspace/link && ln -s real /tmp/rel")
    assert sandbox.read_file("/workspace/link") == b"target\n"
    assert sandbox.read_file("/tmp/rel") == b"target\n"
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/workspace/nope")
    with pytest.raises(IsADirectoryError):
        sandbox.read_file("/workspace")


def test_put_tree_copies_a_host_directory(sandbox, tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "m.py").write_text("print('m')\n")
    (tmp_path / "top.txt").write_text("top")
    sandbox.put_tree("/workspace/project", tmp_path)
    listing = sandbox.exec("cd project && find . | sort && stat -c '%u' pkg/sub/m.py").stdout
    assert listing == ".\n./pkg\n./pkg/sub\n./pkg/sub/m.py\n./top.txt\n1000\n"
    assert sandbox.exec("python3 pkg/sub/m.py").stdout == "m\n"  # the cd above persisted


def test_put_tree_extracts_tar_bytes(sandbox):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("dir/f.txt")
        info.size, info.uid, info.gid = 3, 1000, 1000
        tar.addfile(info, io.BytesIO(b"abc"))
    sandbox.put_tree("/workspace", buffer.getvalue())
    assert sandbox.read_file("/workspace/dir/f.txt") == b"abc"


def test_fs_hash_sees_content_modes_and_links_but_not_times(docker_ready):
    script = "mkdir -p d && echo one > d/a && echo two > b && chmod 600 b && ln -s d/a l && touch -d @0 b"
    with DockerSandbox.create(docker_ready, warm=False) as one, DockerSandbox.create(docker_ready, warm=False) as two:
        one.exec(script)
        two.exec("sleep 1.1; " + script.replace("@0", "@12345"))
        assert one.fs_hash() == two.fs_hash()
        two.exec("chmod 644 b")
        assert one.fs_hash() != two.fs_hash()
        two.exec("chmod 600 b && echo changed > d/a")
        assert one.fs_hash() != two.fs_hash()
        assert one.fs_hash(["/workspace", "/nonexistent"]) != one.fs_hash()
