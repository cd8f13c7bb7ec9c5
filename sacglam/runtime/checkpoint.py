"""Checkpoint directories, written atomically.

A checkpoint is built in `<root>/.tmp-<step>/` by whoever owns each part (the driver writes the
learner state, the counters and the rollout workers' states; the replay actor writes its Arrow
snapshot), then renamed to `<root>/step-<step>/` and named in `<root>/latest` (replaced
atomically). A run killed at any moment leaves the previous checkpoint whole: a half-written one
is a `.tmp-*` directory that nothing reads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

COMPLETE = "COMPLETE"


class CheckpointStore:
    def __init__(self, root: str | Path, keep: int = 2):
        self.root, self.keep = Path(root), keep

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        return path if (path / COMPLETE).exists() else None

    def begin(self, env_steps: int) -> Path:
        """A fresh temporary directory to write the checkpoint at `env_steps` into."""
        tmp = self.root / f".tmp-{env_steps:09d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        return tmp

    def commit(self, tmp: Path, env_steps: int) -> Path:
        """Seal `tmp` as the newest checkpoint; drop the oldest beyond `keep`."""
        (tmp / COMPLETE).write_text(str(env_steps))
        final = self.root / f"step-{env_steps:09d}"
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        pointer_tmp = self.root / "latest.tmp"
        pointer_tmp.write_text(final.name)
        os.replace(pointer_tmp, self.root / "latest")
        for old in sorted(self.root.glob("step-*"))[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return final
