"""Pack the vendored RepoFix libraries into ``repos.tar.gz``, the archive code.repofix-v0 unpacks its workspaces from.

The libraries ship as one archive, not as a source tree, so that their code is data to agentgym:
no linter, type checker or line count of the package sees it. To change a library, unpack the
archive, edit, and pack it again (the same files always give the same bytes); tasks whose
``base_commit`` no longer matches must then be regenerated (``python -m tools.repofix.repofix_gen``):

    mkdir /tmp/repos && tar -xzf agentgym/envs/code/tasks/repofix/repos.tar.gz -C /tmp/repos
    python -m tools.repofix.repos_archive /tmp/repos
"""

from __future__ import annotations

import argparse
import gzip
import io
import sys
import tarfile
from pathlib import Path

from agentgym.envs.code.repofix_tasks import REPOS_ARCHIVE, is_litter


def pack(src: Path, archive: Path = REPOS_ARCHIVE) -> Path:
    """Write every file under ``src`` (one directory per library, build litter left out) to ``archive``.

    Deterministic: members sorted, regular files only, with no owner, time or mode beyond 0644, and a
    gzip header without a timestamp, so an unchanged tree packs to the same bytes."""
    src = Path(src)
    files = sorted(p for p in src.rglob("*") if p.is_file() and not is_litter(p.relative_to(src).as_posix()))
    if not files:
        raise ValueError(f"{src}: no files to pack")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(src).as_posix())
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0))
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="directory holding one directory per library")
    parser.add_argument("--out", type=Path, default=REPOS_ARCHIVE, help="archive to write")
    args = parser.parse_args(argv)
    print(f"wrote {pack(args.src, args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
