"""Checkpoint directories, written atomically and checked on the way back.

A checkpoint is built in `<root>/.tmp-<step>/` by whoever owns each part (the driver writes the
learner state, the counters and the rollout workers' states; the replay actor writes its Arrow
snapshot; the goal sampler its state), then sealed: a manifest of every file's size and SHA-256
(`MANIFEST.json`), then the `COMPLETE` marker, written last. The directory is renamed to
`<root>/step-<step>/` and named in `<root>/latest` (replaced atomically). A run killed at any moment
leaves the previous checkpoint whole: a half-written one is a `.tmp-*` directory that nothing reads.

`COMPLETE` says the files were written; the manifest says whether they are still what was written
(a full disk, a truncated copy, a bad sector). `latest()` is the newest checkpoint whose files match
its manifest, so every component that restores (the driver at `--resume`, a restarted replay actor
or goal sampler) agrees on the same one; `latest_intact()` also says what it skipped and why. A
checkpoint written before manifests existed has none and is taken as it is.
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


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def manifest_of(directory: Path) -> dict[str, dict[str, int | str]]:
    """{path relative to `directory`: {"bytes", "sha256"}} of every file under it but the seals."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name not in (COMPLETE, MANIFEST))
    return {p.relative_to(directory).as_posix(): {"bytes": p.stat().st_size, "sha256": file_digest(p)} for p in files}


def damage(checkpoint: Path) -> str | None:
    """None when `checkpoint` is complete and its files match its manifest; otherwise what is wrong,
    in one line (each damaged file named)."""
    if not (checkpoint / COMPLETE).exists():
        return f"{COMPLETE} is missing (the checkpoint was never sealed)"
    if not (checkpoint / MANIFEST).exists():
        return None  # written before manifests: nothing to check it against
    try:
        files = json.loads((checkpoint / MANIFEST).read_text())["files"]
    except (ValueError, KeyError, TypeError):
        return f"{MANIFEST} is unreadable"
    problems = []
    for name, expected in files.items():
        path = checkpoint / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != expected["bytes"]:
            problems.append(f"{name} has {path.stat().st_size:,} bytes where {expected['bytes']:,} were written")
        elif file_digest(path) != expected["sha256"]:
            problems.append(f"{name} does not match its checksum (same size, other bytes)")
    return "; ".join(problems) or None


class CheckpointStore:
    def __init__(self, root: str | Path, keep: int = 2):
        self.root, self.keep = Path(root), keep
        # checkpoint -> (its files' names, sizes and times, damage): files are hashed again only
        # when one of them changed, not at every `latest()` (Tune asks at every metrics record)
        self._checked: dict[Path, tuple[tuple, str | None]] = {}

    def _damage(self, checkpoint: Path) -> str | None:
        stamp = tuple(
            (p.as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(checkpoint.rglob("*")) if p.is_file()
        )
        if checkpoint not in self._checked or self._checked[checkpoint][0] != stamp:
            self._checked[checkpoint] = (stamp, damage(checkpoint))
        return self._checked[checkpoint][1]

    def _newest_first(self) -> list[Path]:
        """Checkpoints, the one `latest` names first, then by step, newest first."""
        steps = sorted(self.root.glob("step-*"), reverse=True)
        pointer = self.root / "latest"
        named = self.root / pointer.read_text().strip() if pointer.exists() else None
        if named is not None and named in steps:
            steps.remove(named)
            steps.insert(0, named)
        return steps

    def latest_intact(self) -> tuple[Path | None, list[tuple[Path, str]]]:
        """(the newest checkpoint whose files match its manifest, or None; the newer ones skipped,
        each with what is wrong with it)."""
        skipped: list[tuple[Path, str]] = []
        for path in self._newest_first():
            problem = self._damage(path)
            if problem is None:
                return path, skipped
            skipped.append((path, problem))
        return None, skipped

    def latest(self) -> Path | None:
        """The newest intact checkpoint, or None."""
        return self.latest_intact()[0]

    def set_aside(self, damaged: Path, intact: Path | None) -> Path:
        """Rename a damaged checkpoint out of the way (`damaged-step-...`, kept for inspection, never
        read or pruned) and point `latest` at `intact`, so that the run goes on from there and its
        next checkpoints are not mixed with the damaged one."""
        target = self.root / f"{DAMAGED_PREFIX}{damaged.name}"
        shutil.rmtree(target, ignore_errors=True)
        damaged.rename(target)
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
        """Seal `tmp` (manifest, then `COMPLETE`) as the newest checkpoint; drop the oldest beyond
        `keep`."""
        manifest = {"env_steps": env_steps, "files": manifest_of(tmp)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        (tmp / COMPLETE).write_text(str(env_steps))
        final = self.root / f"step-{env_steps:09d}"
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        self._point_at(final)
        for old in sorted(self.root.glob("step-*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _point_at(self, checkpoint: Path) -> None:
        pointer_tmp = self.root / "latest.tmp"
        pointer_tmp.write_text(checkpoint.name)
        os.replace(pointer_tmp, self.root / "latest")
