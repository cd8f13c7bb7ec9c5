"""A large file carried in parts: split under a size limit, each part and the whole checked by
sha256 on arrival.

For machines that take uploads of limited size and cannot download (air-gapped GPU nodes, upload
limits of tens of MB): `split_file` writes the parts and a manifest (`<file>.parts.json`: the
file's name, size and sha256, and each part's); `join_parts` finds the parts beside a manifest
(or in other directories, for parts that travelled separately), checks every part's size and
sha256 before writing anything, joins them, checks the whole, and only then puts the file in
place. A missing or damaged part is named in a one-line error; nothing half-written is left.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from sacglam.errors import UserInputError

CHUNK = 1 << 20


class PartsError(UserInputError, ValueError):
    """A part is missing, or its size or sha256 is not the manifest's."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def manifest_name(file_name: str) -> str:
    return f"{file_name}.parts.json"


def split_file(path: Path, out_dirs: Sequence[Path], max_part_bytes: int) -> list[Path]:
    """Split `path` into the fewest parts of at most `max_part_bytes` (sizes as even as possible),
    part k written to `out_dirs[k % len(out_dirs)]`, and the manifest to every directory of
    `out_dirs`. Returns the manifest paths."""
    if max_part_bytes < 1:
        raise ValueError(f"max_part_bytes must be >= 1, got {max_part_bytes}")
    size = path.stat().st_size
    count = max(1, -(-size // max_part_bytes))
    base, extra = divmod(size, count)
    parts = []
    with open(path, "rb") as source:
        for k in range(count):
            name = f"{path.name}.part{k + 1}of{count}"
            directory = out_dirs[k % len(out_dirs)]
            directory.mkdir(parents=True, exist_ok=True)
            digest, remaining = hashlib.sha256(), base + (1 if k < extra else 0)
            with open(directory / name, "wb") as part:
                while remaining:
                    block = source.read(min(CHUNK, remaining))
                    digest.update(block)
                    part.write(block)
                    remaining -= len(block)
            parts.append({"name": name, "size": base + (1 if k < extra else 0), "sha256": digest.hexdigest()})
    manifest = {"file": path.name, "size": size, "sha256": sha256_of(path), "parts": parts}
    written = []
    for directory in dict.fromkeys(out_dirs):
        target = directory / manifest_name(path.name)
        target.write_text(json.dumps(manifest, indent=2))
        written.append(target)
    return written


def join_parts(manifest_path: Path, out: Path, search: Sequence[Path] = ()) -> Path:
    """Check and join the parts of `manifest_path` into `out` (a file path); parts are looked for
    beside the manifest, then in `search`. Raises `PartsError` before writing when a part is
    missing or damaged, or when the joined file's sha256 is not the manifest's."""
    manifest = json.loads(manifest_path.read_text())
    places = [manifest_path.parent, *search]
    found = []
    for part in manifest["parts"]:
        candidates = [d / part["name"] for d in places if (d / part["name"]).exists()]
        if not candidates:
            raise PartsError(
                f"part {part['name']} of {manifest['file']} is missing: looked in {', '.join(map(str, places))}; "
                "copy it there (every part of the manifest is needed)"
            )
        path = candidates[0]
        if path.stat().st_size != part["size"] or sha256_of(path) != part["sha256"]:
            raise PartsError(
                f"part {path} of {manifest['file']} is damaged (size or sha256 differs from the manifest's): copy it again"
            )
        found.append(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    digest = hashlib.sha256()
    with open(partial, "wb") as joined:
        for path in found:
            with open(path, "rb") as f:
                while block := f.read(CHUNK):
                    digest.update(block)
                    joined.write(block)
    if digest.hexdigest() != manifest["sha256"]:
        partial.unlink()
        raise PartsError(
            f"the joined {manifest['file']} does not match the manifest's sha256: its parts belong to different files"
        )
    os.replace(partial, out)
    return out
