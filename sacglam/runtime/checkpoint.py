"""Checkpoint directories, written atomically and checked on the way back.

A checkpoint is built in `<root>/.tmp-<step>/` by whoever owns each part (the driver writes the
learner state, the counters and the rollout workers' states; the replay actor writes its Arrow
snapshot; the goal sampler its state), then sealed: a manifest of every file's size and SHA-256
(`MANIFEST.json`), then the `COMPLETE` marker, written last, which holds the env step and the
manifest's own SHA-256. The directory is renamed to `<root>/step-<step>/` and named in
`<root>/latest` (replaced atomically). A run killed at any moment leaves the previous checkpoint
whole: a half-written one is a `.tmp-*` directory that nothing reads.

`COMPLETE` says the files were written; the manifest says whether they are still what was written
(a full disk, a truncated copy, a bad sector). Two checks:
- `latest_intact()` hashes every file: a resume uses it, falls back past damaged checkpoints and
  sets them aside (`damaged-step-*`), so that the pointer names an intact one;
- `latest()`, which the replay actor and the goal sampler call when they are built or restarted
  and Ray Tune at every metrics record, checks the seal, the manifest and every file's size, and
  hashes nothing: after a resume the pointer names a checkpoint that was hashed.
Hashes are remembered per process, for files whose names, sizes and times have not changed: the
checkpoint a run just wrote is not read back. A checkpoint written before manifests existed
(`COMPLETE` holds the step alone, and there is no manifest) is taken as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

COMPLETE = "COMPLETE"
MANIFEST = "MANIFEST.json"
DAMAGED_PREFIX = "damaged-"  # a damaged checkpoint set aside by a resume that fell back

# checkpoint directory -> (stamp of its files, damage found): see `_files_stamp`
_checked: dict[Path, tuple[tuple, str | None]] = {}


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def manifest_of(directory: Path) -> dict[str, dict[str, int | str]]:
    """{path relative to `directory`: {"bytes", "sha256"}} of every file under it but the seals."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name not in (COMPLETE, MANIFEST))
    return {p.relative_to(directory).as_posix(): {"bytes": p.stat().st_size, "sha256": file_digest(p)} for p in files}


def seal_step(checkpoint: Path) -> int:
    """The env step a sealed checkpoint was written at (the first line of its `COMPLETE`)."""
    return int((checkpoint / COMPLETE).read_text().split()[0])


def _files_stamp(checkpoint: Path) -> tuple:
    """Names (relative), sizes and modification times of every file: unchanged by a rename."""
    return tuple(
        (p.relative_to(checkpoint).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(checkpoint.rglob("*"))
        if p.is_file()
    )


def _read_manifest(checkpoint: Path) -> tuple[dict[str, dict] | None, list[str]]:
    """(the manifest's files, or None for a checkpoint written before manifests; problems with the
    seal or the manifest itself)."""
    seal = checkpoint / COMPLETE
    if not seal.is_file():  # the files may still be checked against the manifest
        files, problems = _manifest_files(checkpoint) if (checkpoint / MANIFEST).is_file() else (None, [])
        return files, [f"{COMPLETE} is missing", *problems]
    words = seal.read_text().split()
    if len(words) == 1 and words[0].isdigit() and not (checkpoint / MANIFEST).exists():
        return None, []  # written before manifests: nothing to check it against
    if len(words) != 2 or not words[0].isdigit():
        return None, [f"{COMPLETE} is unreadable"]
    if not (checkpoint / MANIFEST).is_file():
        return None, [f"{MANIFEST} is missing"]
    if file_digest(checkpoint / MANIFEST) != words[1]:
        return None, [f"{MANIFEST} does not match the checksum {COMPLETE} holds"]
    return _manifest_files(checkpoint)


def _manifest_files(checkpoint: Path) -> tuple[dict[str, dict] | None, list[str]]:
    try:
        files = json.loads((checkpoint / MANIFEST).read_text())["files"]
        if not all(isinstance(e, dict) and isinstance(e["bytes"], int) and "sha256" in e for e in files.values()):
            raise TypeError
        return files, []
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, [f"{MANIFEST} is unreadable"]


def damage(checkpoint: Path, hashes: bool = True) -> str | None:
    """None when `checkpoint` is sealed and its files match its manifest (sizes only, without
    `hashes`); otherwise what is wrong, in one line, each damaged file named."""
    files, problems = _read_manifest(checkpoint)
    for name, expected in (files or {}).items():
        path = checkpoint / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != expected["bytes"]:
            problems.append(f"{name} has {path.stat().st_size:,} bytes where {expected['bytes']:,} were written")
        elif hashes and file_digest(path) != expected["sha256"]:
            problems.append(f"{name} does not match its checksum (same size, other bytes)")
    return "; ".join(problems) or None


def _hashed_damage(checkpoint: Path) -> str | None:
    stamp = _files_stamp(checkpoint)
    known = _checked.get(checkpoint)
    if known is None or known[0] != stamp:
        _checked[checkpoint] = known = (stamp, damage(checkpoint))
    return known[1]


class CheckpointStore:
    def __init__(self, root: str | Path, keep: int = 2):
        self.root, self.keep = Path(root), keep

    def _newest_first(self) -> list[Path]:
        """Checkpoints, the one `latest` names first, then by step, newest first. (A sealed one
        newer than the pointer, left by a kill between the rename and the pointer's update, is
        whole and comes after it.)"""
        steps = sorted(self.root.glob("step-*"), reverse=True)
        pointer = self.root / "latest"
        named = self.root / pointer.read_text().strip() if pointer.exists() else None
        if named is not None and named in steps:
            steps.remove(named)
            steps.insert(0, named)
        return steps

    def latest_intact(self) -> tuple[Path | None, list[tuple[Path, str]]]:
        """(the newest checkpoint whose files match its manifest, hashed, or None; the newer ones
        skipped, each with what is wrong with it)."""
        skipped: list[tuple[Path, str]] = []
        for path in self._newest_first():
            problem = _hashed_damage(path)
            if problem is None:
                return path, skipped
            skipped.append((path, problem))
        return None, skipped

    def latest(self) -> Path | None:
        """The newest checkpoint whose seal, manifest and file sizes are right (no hashing), or None."""
        for path in self._newest_first():
            known = _checked.get(path)
            if known is not None and known[0] == _files_stamp(path):
                if known[1] is None:
                    return path
            elif damage(path, hashes=False) is None:
                return path
        return None

    def set_aside(self, damaged: Path, intact: Path | None) -> Path:
        """Rename a damaged checkpoint out of the way (`damaged-step-...`, kept for inspection; the
        `keep` newest such are kept) and point `latest` at `intact`, so that the run goes on from
        there and its next checkpoints are not mixed with the damaged one."""
        target = self.root / f"{DAMAGED_PREFIX}{damaged.name}"
        shutil.rmtree(target, ignore_errors=True)
        damaged.rename(target)
        for old in sorted(self.root.glob(f"{DAMAGED_PREFIX}step-*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        if intact is not None:
            self._point_at(intact)
        return target

    def begin(self, env_steps: int) -> Path:
        """A fresh temporary directory to write the checkpoint at `env_steps` into."""
        tmp = self.root / f".tmp-{env_steps:09d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def commit(self, tmp: Path, env_steps: int) -> Path:
        """Seal `tmp` (manifest, then `COMPLETE` with the manifest's checksum) as the newest
        checkpoint; drop the oldest beyond `keep`."""
        manifest = {"env_steps": env_steps, "files": manifest_of(tmp)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        (tmp / COMPLETE).write_text(f"{env_steps}\n{file_digest(tmp / MANIFEST)}\n")
        final = self.root / f"step-{env_steps:09d}"
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _checked[final] = (_files_stamp(final), None)  # just hashed: intact
        self._point_at(final)
        for old in sorted(self.root.glob("step-*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _point_at(self, checkpoint: Path) -> None:
        pointer_tmp = self.root / "latest.tmp"
        pointer_tmp.write_text(checkpoint.name)
        os.replace(pointer_tmp, self.root / "latest")
