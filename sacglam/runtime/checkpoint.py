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
The root may be a local directory or a URI (`sacglam.runtime.storage`): on an object store a
checkpoint is moved into place file by file, the seal last, so a move cut short leaves a
directory without a seal, which is read as damaged and set aside like any other.
Hashes are remembered per process, for files whose names, sizes and times have not changed: the
checkpoint a run just wrote is not read back (on local disk; an object store's times are too coarse). A checkpoint written before manifests existed
(`COMPLETE` holds the step alone, and there is no manifest) is taken as it is.
"""

from __future__ import annotations

import json
import os

from sacglam.runtime.storage import StoragePath

COMPLETE = "COMPLETE"
MANIFEST = "MANIFEST.json"
DAMAGED_PREFIX = "damaged-"  # a damaged checkpoint set aside by a resume that fell back

# checkpoint directory -> (stamp of its files, damage found): see `_files_stamp`
_checked: dict[StoragePath, tuple[tuple, str | None]] = {}


def _storage(path: str | os.PathLike | StoragePath) -> StoragePath:
    return path if isinstance(path, StoragePath) else StoragePath(path)


def file_digest(path: str | os.PathLike | StoragePath) -> str:
    return _storage(path).sha256()


def manifest_of(directory: StoragePath) -> dict[str, dict[str, int | str]]:
    """{path relative to `directory`: {"bytes", "sha256"}} of every file under it but the seals."""
    return {
        name: {"bytes": size, "sha256": (directory / name).sha256()}
        for name, size, _ in directory.files()
        if name not in (COMPLETE, MANIFEST)
    }


def seal_step(checkpoint: str | os.PathLike | StoragePath) -> int:
    """The env step a sealed checkpoint was written at (the first line of its `COMPLETE`)."""
    return int((_storage(checkpoint) / COMPLETE).read_text().split()[0])


def _files_stamp(checkpoint: StoragePath) -> tuple:
    """Names (relative), sizes and modification times of every file: unchanged by a local rename."""
    return tuple(checkpoint.files())


def _read_manifest(checkpoint: StoragePath) -> tuple[dict[str, dict] | None, list[str]]:
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


def _manifest_files(checkpoint: StoragePath) -> tuple[dict[str, dict] | None, list[str]]:
    try:
        files = json.loads((checkpoint / MANIFEST).read_text())["files"]
        if not all(isinstance(e, dict) and isinstance(e["bytes"], int) and "sha256" in e for e in files.values()):
            raise TypeError
        return files, []
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, [f"{MANIFEST} is unreadable"]


def damage(checkpoint: str | os.PathLike | StoragePath, hashes: bool = True) -> str | None:
    """None when `checkpoint` is sealed and its files match its manifest (sizes only, without
    `hashes`); otherwise what is wrong, in one line, each damaged file named."""
    checkpoint = _storage(checkpoint)
    files, problems = _read_manifest(checkpoint)
    sizes = {name: size for name, size, _ in checkpoint.files()} if files else {}
    for name, expected in (files or {}).items():
        if name not in sizes:
            problems.append(f"{name} is missing")
        elif sizes[name] != expected["bytes"]:
            problems.append(f"{name} has {sizes[name]:,} bytes where {expected['bytes']:,} were written")
        elif hashes and file_digest(checkpoint / name) != expected["sha256"]:
            problems.append(f"{name} does not match its checksum (same size, other bytes)")
    return "; ".join(problems) or None


def _hashed_damage(checkpoint: StoragePath) -> str | None:
    stamp = _files_stamp(checkpoint)
    known = _checked.get(checkpoint)
    # An object store's modification times have whole seconds: a file rewritten within the second
    # keeps its stamp, so there the remembered verdict is not trusted (a resume hashes it again).
    if known is None or known[0] != stamp or not checkpoint.is_local:
        _checked[checkpoint] = known = (stamp, damage(checkpoint))
    return known[1]


class CheckpointStore:
    """The checkpoints of one run under `root` (a local directory or a URI)."""

    def __init__(self, root: str | os.PathLike | StoragePath, keep: int = 2):
        self.root, self.keep = _storage(root), keep

    def _newest_first(self) -> list[StoragePath]:
        """Checkpoints, the one `latest` names first, then by step, newest first. (A sealed one
        newer than the pointer, left by a kill between the rename and the pointer's update, is
        whole and comes after it.)"""
        steps = self.root.children("step-")[::-1]
        pointer = self.root / "latest"
        named = self.root / pointer.read_text().strip() if pointer.is_file() else None
        if named is not None and named in steps:
            steps.remove(named)
            steps.insert(0, named)
        return steps

    def latest_intact(self) -> tuple[StoragePath | None, list[tuple[StoragePath, str]]]:
        """(the newest checkpoint whose files match its manifest, hashed, or None; the newer ones
        skipped, each with what is wrong with it)."""
        skipped: list[tuple[StoragePath, str]] = []
        for path in self._newest_first():
            problem = _hashed_damage(path)
            if problem is None:
                return path, skipped
            skipped.append((path, problem))
        return None, skipped

    def latest(self) -> StoragePath | None:
        """The newest checkpoint whose seal, manifest and file sizes are right (no hashing), or None."""
        for path in self._newest_first():
            known = _checked.get(path)
            if known is not None and known[0] == _files_stamp(path):
                if known[1] is None:
                    return path
            elif damage(path, hashes=False) is None:
                return path
        return None

    def set_aside(self, damaged: StoragePath, intact: StoragePath | None) -> StoragePath:
        """Rename a damaged checkpoint out of the way (`damaged-step-...`, kept for inspection; the
        `keep` newest such are kept) and point `latest` at `intact`, so that the run goes on from
        there and its next checkpoints are not mixed with the damaged one."""
        target = self.root / f"{DAMAGED_PREFIX}{damaged.name}"
        target.rmtree()
        damaged.move_dir(target)
        _checked.pop(damaged, None)
        for old in self.root.children(f"{DAMAGED_PREFIX}step-")[: -self.keep]:
            old.rmtree()
        if intact is not None:
            self._point_at(intact)
        return target

    def begin(self, env_steps: int) -> StoragePath:
        """A fresh temporary directory to write the checkpoint at `env_steps` into."""
        tmp = self.root / f".tmp-{env_steps:09d}"
        tmp.rmtree()
        tmp.mkdir()
        return tmp

    def commit(self, tmp: StoragePath, env_steps: int) -> StoragePath:
        """Seal `tmp` (manifest, then `COMPLETE` with the manifest's checksum) as the newest
        checkpoint; drop the oldest beyond `keep`."""
        manifest = {"env_steps": env_steps, "files": manifest_of(tmp)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        (tmp / COMPLETE).write_text(f"{env_steps}\n{file_digest(tmp / MANIFEST)}\n")
        final = self.root / f"step-{env_steps:09d}"
        final.rmtree()
        tmp.move_dir(final, last=(COMPLETE,))
        _checked[final] = (_files_stamp(final), None)  # just hashed: intact
        self._point_at(final)
        for old in self.root.children("step-")[: -self.keep]:
            old.rmtree()
            _checked.pop(old, None)  # the remembered verdicts stay as many as the checkpoints kept
        return final

    def _point_at(self, checkpoint: StoragePath) -> None:
        (self.root / "latest").replace_text(checkpoint.name)
