"""sacglam's on-disk cache: things built once and reused by later runs (converted models, tiny
models, TextWorld games). It lives in `$SACGLAM_CACHE`, default `~/.cache/sacglam`.

Entries are directories published atomically (`publish`): a killed build, or two processes
building the same entry at once (rollout workers on one node), never leave a half-written entry.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("SACGLAM_CACHE", Path.home() / ".cache" / "sacglam"))


def publish(build: Callable[[Path], None], target: Path, marker: str) -> Path:
    """The directory `target`, built by `build(tmp_dir)` into a fresh directory and renamed into
    place unless it is already there; `marker` is a file name every finished entry has (the check
    that it is there)."""
    if (target / marker).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process published it first
            if not (target / marker).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
