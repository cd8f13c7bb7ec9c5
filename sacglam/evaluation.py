"""Policy evaluation on fixed, reproducible episode sets: success rate per goal type.

Episodes are stratified by goal type (equal counts per type, goals uniform within a type), because
98% of the train goals are sequential and a uniform draw would leave single goals with a handful
of episodes. The overall figure re-weights the per-type rates by each type's share of the goal set,
so it estimates success under the environment's own uniform goal distribution.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

from tqdm.auto import tqdm

from sacglam.config import EnvConfig
from sacglam.envs.goals import GOAL_SETS, GOAL_TYPES, goal_type, goal_type_shares
from sacglam.types import EpisodeResult, EpisodeSpec, Policy

OVERALL = "all"


def episode_specs(goal_set: str, episodes: int, seed: int) -> list[EpisodeSpec]:
    """`episodes` specs, split as evenly as possible over the goal types present in the set."""
    by_type: dict[str, list[str]] = defaultdict(list)
    for goal in GOAL_SETS[goal_set]:
        by_type[goal_type(goal)].append(goal)
    types = [t for t in GOAL_TYPES if t in by_type]
    rng = random.Random(f"episodes/{goal_set}/{seed}")
    return [
        EpisodeSpec(goal=rng.choice(by_type[types[i % len(types)]]), seed=rng.randrange(2**31))
        for i in range(episodes)
    ]


def run_episodes(
    policy: Policy,
    env_config: EnvConfig,
    specs: Sequence[EpisodeSpec],
    num_envs: int = 32,
    progress: bool = False,
    description: str = "",
) -> list[EpisodeResult]:
    """Run every spec to its end with `policy` acting on up to `num_envs` states at a time.

    Each spec is reset with its own seed and goal, so results do not depend on `num_envs`.
    Returns results in spec order.
    """
    envs = [env_config.make() for _ in range(min(num_envs, len(specs)))]
    results: list[EpisodeResult | None] = [None] * len(specs)
    slot_spec: list[int | None] = [None] * len(envs)
    slot_obs: list[str] = [""] * len(envs)
    slot_candidates: list[list[str]] = [[] for _ in envs]
    slot_steps = [0] * len(envs)
    pending = iter(range(len(specs)))
    bar = tqdm(total=len(specs), desc=description, disable=not progress, leave=False)

    def load(slot: int) -> None:
        index = next(pending, None)
        slot_spec[slot] = index
        if index is not None:
            spec = specs[index]
            slot_obs[slot], info = envs[slot].reset(seed=spec.seed, options={"goal": spec.goal})
            slot_candidates[slot] = info["candidates"]
            slot_steps[slot] = 0

    for slot in range(len(envs)):
        load(slot)
    while True:
        active = [s for s in range(len(envs)) if slot_spec[s] is not None]
        if not active:
            break
        actions = policy.act([slot_obs[s] for s in active], [slot_candidates[s] for s in active])
        for slot, action in zip(active, actions, strict=True):
            obs, reward, terminated, truncated, info = envs[slot].step(action)
            slot_steps[slot] += 1
            slot_obs[slot], slot_candidates[slot] = obs, info["candidates"]
            if terminated or truncated:
                spec = specs[slot_spec[slot]]
                results[slot_spec[slot]] = EpisodeResult(
                    goal=spec.goal,
                    goal_type=goal_type(spec.goal),
                    seed=spec.seed,
                    success=reward > 0,
                    steps=slot_steps[slot],
                )
                bar.update(1)
                load(slot)
    bar.close()
    return results  # type: ignore[return-value]


def success_by_goal_type(results: Iterable[EpisodeResult], goal_set: str) -> dict[str, dict[str, float]]:
    """Per goal type: `{"success": rate, "episodes": n}`, plus `OVERALL`, weighted by each type's
    share of `goal_set` (the environment's uniform goal distribution)."""
    successes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for r in results:
        counts[r.goal_type] += 1
        successes[r.goal_type] += r.success
    table = {t: {"success": successes[t] / counts[t], "episodes": counts[t]} for t in GOAL_TYPES if counts[t]}
    share = goal_type_shares(goal_set)
    covered = sum(share[t] for t in table)
    table[OVERALL] = {
        "success": sum(table[t]["success"] * share[t] for t in table) / covered,
        "episodes": sum(counts.values()),
    }
    return table


MODES = ("sampled", "greedy")


@dataclass(frozen=True)
class EvaluationPart:
    """A slice of one training-time evaluation: some of the episodes of one goal set, with the
    policy sampling or greedy. An evaluation runs in parts so its caller can show progress
    between them (the driver, while a learner actor evaluates)."""

    held_out: bool  # the environment's held-out goal set, else its training goal set
    mode: Literal["sampled", "greedy"]
    specs: tuple[EpisodeSpec, ...]
    seed: int  # the sampling generator's seed for this slice

    def env(self, train_env: EnvConfig) -> EnvConfig:
        return train_env.held_out if self.held_out else train_env


def evaluation_parts(train_env: EnvConfig, episodes: int, seed: int, part_size: int) -> list[EvaluationPart]:
    """The parts of one evaluation: for the train and the held-out goal set, the same `episodes`
    fixed episode specs with the policy sampling, then greedy, cut into slices of `part_size`."""
    parts = []
    for held_out in (False, True):
        goals = (train_env.held_out if held_out else train_env).goals
        specs = episode_specs(goals, episodes, seed)
        for mode in MODES:
            for k, start in enumerate(range(0, len(specs), part_size)):
                part_seed = random.Random(f"evaluation/{goals}/{mode}/{seed}/{k}").randrange(2**31)
                parts.append(EvaluationPart(held_out, mode, tuple(specs[start : start + part_size]), part_seed))
    return parts


def summarize_evaluation(
    train_env: EnvConfig, parts: Sequence[EvaluationPart], results: Sequence[Sequence[EpisodeResult]]
) -> dict[str, float]:
    """`eval/<goal set>/<mode>/<goal type or all>` success rates from each part's results."""
    grouped: dict[tuple[str, str], list[EpisodeResult]] = defaultdict(list)
    for part, part_results in zip(parts, results, strict=True):
        grouped[(part.env(train_env).goals, part.mode)] += part_results
    out = {}
    for (goals, mode), episode_results in grouped.items():
        for goal_type_name, row in success_by_goal_type(episode_results, goals).items():
            out[f"eval/{goals}/{mode}/{goal_type_name}"] = row["success"]
    return out


def format_success_table(rows: dict[str, dict[str, dict[str, float]]]) -> str:
    """A plain-text table: one row per label, one column per goal type plus the weighted overall."""
    columns = [t for t in GOAL_TYPES if any(t in r for r in rows.values())] + [OVERALL]
    width = max([len(label) for label in rows] + [10])
    header = f"{'':<{width}}" + "".join(f"{c:>17}" for c in columns)
    lines = [header, "-" * len(header)]
    for label, table in rows.items():
        cells = []
        for c in columns:
            cells.append(f"{table[c]['success']:>10.3f} ({int(table[c]['episodes']):>3})" if c in table else f"{'-':>17}")
        lines.append(f"{label:<{width}}" + "".join(f"{cell:>17}" for cell in cells))
    return "\n".join(lines)
