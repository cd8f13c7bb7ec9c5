"""Replay buffer cost against its size: add and sample time, and memory, up to 100k env transitions.

Fills a `ReplayBuffer` (HER on, at most 32 relabels per episode, n-step 3) with uniform-random
full-task episodes (6 objects, 8,470 goals, 30 steps; recorded through the rollout workers' own
`EpisodeRecorder`) and, at each checkpoint size, measures:
- `add`: the mean time of one `add` (relabeling included), over the episodes added since the last
  checkpoint;
- `sample after add`: a sample right after an add (what the learner sees in a live run, where
  every update follows new episodes), median over `--repeats` add-then-sample pairs;
- `sample`: a sample with nothing added since the previous one, median over `--repeats`;
for batch 64 and 256, in `ratio` mode (half relabeled) and `prior` mode (goal types as the
environment draws them). Memory per 100k env transitions: Arrow's allocations plus Python's
(tracemalloc) for a second buffer filled to the largest size (no timing then), scaled to 100k.

Before each timed sample the caches are flushed (64 MB written), as the learner's update between
two samples does in a run; without it a 1k buffer sits in cache and a 100k one cannot, and the
ratio would measure the CPU's caches rather than the buffer. The warm, back-to-back figure is
printed too.

    .venv/bin/python benchmarks/speed/replay.py [--sizes 1000 10000 30000 60000 100000] [--repeats 30]

Prints a table and writes benchmarks/speed/results/replay/replay.json. Targets: sample time at 100k within 1.5x
of the time at 1k; batch-64 ratio sample at most 3 ms; at most 200 MB per 100k env transitions.
"""

from __future__ import annotations

import gc
import json
import pickle
import platform
import random
import statistics
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
import tyro

from sacglam.config import EnvConfig
from sacglam.replay_actor.buffer import ReplayBuffer
from sacglam.rollout_workers.recorder import EpisodeRecorder
from sacglam.types import Episode


@dataclass(frozen=True)
class Args:
    sizes: list[int] = field(default_factory=lambda: [1_000, 10_000, 30_000, 60_000, 100_000])
    """Buffer sizes (env transitions) at which to measure, increasing."""
    repeats: int = 30
    """Samples per measurement; the median is reported."""
    her_max_goals: int = 32
    """Relabels kept per episode."""
    n_step: int = 3
    seed: int = 0
    output: Path = Path("benchmarks/speed/results/replay/replay.json")


def random_episodes(env_steps: int, seed: int, num_envs: int = 32) -> list[Episode]:
    """Finished uniform-random full-task episodes holding about `env_steps` transitions."""
    vec, rng = EnvConfig.variant("full").make_vector(num_envs), random.Random(seed)
    recorder = EpisodeRecorder(num_envs)
    observations, infos = vec.reset(seed=seed)
    recorder.start(observations, infos)
    episodes: list[Episode] = []
    while sum(e.length for e in episodes) < env_steps:
        actions = [rng.choice(c) for c in infos["candidates"]]
        observations, rewards, terminated, truncated, infos = vec.step(actions)
        episodes += recorder.record(actions, observations, rewards, terminated, truncated, infos)
    return episodes


def median_ms(samples: list[float]) -> float:
    return 1e3 * statistics.median(samples)


class CacheFlush:
    """Writes 64 MB, more than any CPU cache: what a learner update between two samples does to
    the caches (it streams through the model's weights and activations)."""

    def __init__(self, megabytes: int = 64):
        self.block = np.zeros(megabytes * 2**20 // 8)

    def __call__(self) -> None:
        self.block += 1.0


def time_samples(
    buffer: ReplayBuffer, batch: int, mode: str, n_step: int, repeats: int, flush: CacheFlush | None = None
) -> float:
    times = []
    buffer.sample(batch, n_step, mode)  # warm: whatever an add left to do is not this row's cost
    for _ in range(repeats):
        if flush is not None:
            flush()
        start = time.perf_counter()
        buffer.sample(batch, n_step, mode)
        times.append(time.perf_counter() - start)
    return median_ms(times)


def time_samples_after_add(
    buffer: ReplayBuffer, spare: list[Episode], batch: int, n_step: int, repeats: int, flush: CacheFlush
) -> float:
    """Add one episode, flush the caches, then time one batch-`batch` ratio sample; `repeats` times."""
    times = []
    for episode in spare[:repeats]:
        buffer.add(episode)
        flush()
        start = time.perf_counter()
        buffer.sample(batch, n_step, "ratio")
        times.append(time.perf_counter() - start)
    return median_ms(times)


def new_buffer(args: Args) -> ReplayBuffer:
    capacity = max(args.sizes) + 10_000  # never evicts while filling: the sizes are what is stored
    return ReplayBuffer(capacity, gamma=0.99, her=True, her_max_goals=args.her_max_goals, seed=args.seed)


def measure_times(args: Args, episodes: list[Episode]) -> list[dict]:
    buffer, rows, position, flush = new_buffer(args), [], 0, CacheFlush()
    for size in args.sizes:
        add_times = []
        while buffer.env_transitions < size:
            start = time.perf_counter()
            buffer.add(episodes[position])
            add_times.append(time.perf_counter() - start)
            position += 1
        row = {
            "env_transitions": buffer.env_transitions,
            "stored_transitions": len(buffer),
            "episodes": buffer.episodes,
            "add_ms": median_ms(add_times),
        }
        for batch in (64, 256):
            for mode in ("ratio", "prior"):
                row[f"sample_ms/{mode}/{batch}"] = time_samples(buffer, batch, mode, args.n_step, args.repeats, flush)
        row["warm_sample_ms/ratio/64"] = time_samples(buffer, 64, "ratio", args.n_step, args.repeats)
        spare = episodes[position : position + args.repeats]
        position += len(spare)
        row["sample_after_add_ms/ratio/64"] = time_samples_after_add(
            buffer, spare, 64, args.n_step, args.repeats, flush
        )
        rows.append(row)
    return rows


def measure_memory(args: Args, episodes: list[Episode]) -> dict:
    """Bytes a buffer holding `max(sizes)` env transitions allocates (Arrow, and Python by tracemalloc).

    Episodes arrive pickled and are unpickled inside the measurement, as a replay actor receives
    them from rollout workers: the buffer then owns every text it keeps, and they are counted."""
    size, wire = 0, []
    for episode in episodes:
        if size >= max(args.sizes):
            break
        wire.append(pickle.dumps(episode))
        size += episode.length
    gc.collect()
    tracemalloc.start()
    python_before, arrow_before = tracemalloc.get_traced_memory()[0], pa.total_allocated_bytes()
    buffer = new_buffer(args)
    for message in wire:
        buffer.add(pickle.loads(message))
    buffer.sample(64, args.n_step, "ratio")  # whatever index sampling keeps is part of the cost
    gc.collect()
    python_bytes = tracemalloc.get_traced_memory()[0] - python_before
    tracemalloc.stop()
    arrow_bytes = pa.total_allocated_bytes() - arrow_before
    return {
        "env_transitions": buffer.env_transitions,
        "relabeled_transitions": buffer.relabeled_transitions,
        "python_bytes": python_bytes,
        "arrow_bytes": arrow_bytes,
        "mb_per_100k_env_transitions": (python_bytes + arrow_bytes) / buffer.env_transitions * 100_000 / 2**20,
    }


def main(args: Args) -> None:
    torch.set_num_threads(1)
    episodes = random_episodes(max(args.sizes) + 40 * args.repeats * len(args.sizes) + 2_000, args.seed)
    rows = measure_times(args, episodes)
    memory = measure_memory(args, episodes)
    header = f"{'env trans.':>10} {'stored':>9} {'add':>6} " + " ".join(
        f"{name:>13}" for name in ("ratio/64", "ratio/256", "prior/64", "prior/256", "after add/64", "warm r/64")
    )
    print("sample milliseconds (median), caches flushed before each sample as a learner update between")
    print("two samples does; `warm r/64`: back-to-back ratio/64 samples (a small buffer stays in cache);")
    print("stored = environment + relabeled transitions; add: ms per episode, HER included")
    print(header)
    for row in rows:
        cells = [
            row["sample_ms/ratio/64"],
            row["sample_ms/ratio/256"],
            row["sample_ms/prior/64"],
            row["sample_ms/prior/256"],
            row["sample_after_add_ms/ratio/64"],
            row["warm_sample_ms/ratio/64"],
        ]
        print(
            f"{row['env_transitions']:>10,} {row['stored_transitions']:>9,} {row['add_ms']:>6.2f} "
            + " ".join(f"{c:>13.2f}" for c in cells)
        )
    first, last = rows[0], rows[-1]
    growth = {
        key: last[key] / first[key]
        for key in last
        if key.startswith(("sample_ms", "sample_after_add_ms", "warm_sample_ms"))  # sample time, largest over smallest
    }
    print(f"\nsample time, largest buffer over smallest: {', '.join(f'{k} {v:.2f}x' for k, v in growth.items())}")
    print(
        f"memory: {memory['mb_per_100k_env_transitions']:.1f} MB per 100k env transitions "
        f"(Arrow {memory['arrow_bytes'] / 2**20:.1f} MB, Python {memory['python_bytes'] / 2**20:.1f} MB "
        f"for {memory['env_transitions']:,} env transitions and {memory['relabeled_transitions']:,} relabeled)"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "rows": rows,
        "growth_largest_over_smallest": growth,
        "memory": memory,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"processor": platform.processor() or platform.machine(), "python": platform.python_version()},
    }
    args.output.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(tyro.cli(Args))
