"""The replay actor (a thin service over `ReplayBuffer`; Ray makes it remote, the local runner
calls it directly): HER relabeling on insertion, batches in the configured sampling mode,
snapshots into checkpoints, and restore from the newest checkpoint when (re)started."""

from __future__ import annotations

import os
from collections.abc import Sequence

from sacglam.config import EnvConfig, SACConfig
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.runtime.checkpoint import CheckpointStore
from sacglam.runtime.storage import StoragePath
from sacglam.types import Episode, TransitionBatch

SNAPSHOT = "replay"  # the buffer's directory inside a checkpoint


class ReplayService:
    """`checkpoints`: the run's checkpoint directory (local or a URI). When it holds a checkpoint, the buffer is
    restored from the newest one, so a replay actor that Ray restarts comes back with its
    snapshot (what was added after it is lost, as for any fault)."""

    def __init__(
        self, sac: SACConfig, env: EnvConfig, seed: int, checkpoints: str | os.PathLike | StoragePath | None = None
    ):
        self.sac = sac
        spec = env.spec()
        latest = CheckpointStore(checkpoints).latest() if checkpoints is not None else None
        if latest is not None:
            with (latest / SNAPSHOT).reading_locally() as snapshot:
                self.buffer = ReplayBuffer.load(snapshot, env=spec)
            # a resume may change these (the run announces it): the buffer follows the run's settings
            self.buffer.follow(sac.buffer_capacity, sac.gamma, sac.her, sac.her_max_goals)
            self.restored_from: str | None = str(latest)
        else:
            self.buffer = ReplayBuffer(
                sac.buffer_capacity,
                sac.gamma,
                her=sac.her,
                her_max_goals=sac.her_max_goals,
                seed=seed,
                env=spec,
            )
            self.restored_from = None

    def add_episodes(self, episodes: Sequence[Episode]) -> int:
        """Store (and relabel) the episodes; returns the relabels made."""
        return sum(len(self.buffer.add(e)) for e in episodes)

    def sample(self, batch_size: int) -> TransitionBatch:
        sac = self.sac
        return self.buffer.sample(batch_size, sac.n_step, sac.sampling, sac.relabeled_fraction, sac.relabel_mix)

    def size(self) -> int:
        return len(self.buffer)

    def stats(self) -> dict[str, float]:
        b = self.buffer
        return {
            "buffer/transitions": len(b),
            "buffer/env_transitions": b.env_transitions,
            "buffer/episodes": b.episodes,
            "buffer/relabeled_fraction": b.relabeled_transitions / max(len(b), 1),
            "buffer/added_episodes": b.added_episodes,
            **{f"buffer/relabeled_share/{name}": share for name, share in b.relabeled_type_shares().items()},
        }

    def save(self, directory: str | os.PathLike | StoragePath) -> None:
        """Write the buffer into a checkpoint directory (Arrow IPC, atomic), wherever it is."""
        with (StoragePath(directory) / SNAPSHOT).writing_locally() as snapshot:
            self.buffer.save(snapshot)

    def ping(self) -> bool:
        return True
