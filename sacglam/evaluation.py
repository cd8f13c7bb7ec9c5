"""Policy evaluation on fixed, reproducible episode sets: success rate per goal type.

Episodes are stratified by goal type (equal counts per type, goals uniform within a type), because
98% of Playground-Text's train goals are sequential and a uniform draw would leave single goals
with a handful of episodes. The overall figure re-weights the per-type rates by each type's share of the goal set,
so it estimates success under the environment's own uniform goal distribution.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tqdm.auto import tqdm

from sacglam.config import EnvConfig, TrainConfig
from sacglam.progress import bar_interval, to_terminal
from sacglam.types import EnvironmentPolicy, EpisodeResult, EpisodeSpec, MeasuredPolicy, Policy

OVERALL = "all"


def episode_specs(env: EnvConfig, episodes: int, seed: int) -> list[EpisodeSpec]:
    """`episodes` specs, split as evenly as possible over the goal types present in the
    environment's goal set; an environment without a goal list gets seeds only (goal None: the
    environment draws its own)."""
    spec = env.spec()
    rng = random.Random(f"episodes/{spec.goal_set}/{seed}")
    goals = spec.goals()
    if goals is None:
        return [EpisodeSpec(goal=None, seed=rng.randrange(2**31)) for _ in range(episodes)]
    by_type: dict[str, list[str]] = defaultdict(list)
    for goal in goals:
        by_type[spec.goal_type(goal)].append(goal)
    types = [t for t in spec.goal_types if t in by_type]
    return [
        EpisodeSpec(goal=rng.choice(by_type[types[i % len(types)]]), seed=rng.randrange(2**31)) for i in range(episodes)
    ]


def run_episodes(
    policy: Policy | EnvironmentPolicy,
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
    env_spec = env_config.spec()
    envs = [env_spec.make() for _ in range(min(num_envs, len(specs)))]
    slot_goal: list[str] = [""] * len(envs)
    results: list[EpisodeResult | None] = [None] * len(specs)
    slot_spec: list[int | None] = [None] * len(envs)
    slot_obs: list[str] = [""] * len(envs)
    slot_candidates: list[list[str]] = [[] for _ in envs]
    slot_steps = [0] * len(envs)
    slot_measures: list[list[float]] = [[] for _ in envs]
    pending = iter(range(len(specs)))
    bar = tqdm(total=len(specs), desc=description, disable=not progress, leave=False, **bar_interval())

    def load(slot: int) -> None:
        index = next(pending, None)
        slot_spec[slot] = index
        if index is not None:
            spec = specs[index]
            options = None if spec.goal is None else {"goal": spec.goal}
            slot_obs[slot], info = envs[slot].reset(seed=spec.seed, options=options)
            slot_candidates[slot] = info["candidates"]
            slot_goal[slot] = info.get("goal", spec.goal or "")
            slot_steps[slot] = 0
            slot_measures[slot] = []

    for slot in range(len(envs)):
        load(slot)
    while True:
        active = [s for s in range(len(envs)) if slot_spec[s] is not None]
        if not active:
            break
        if isinstance(policy, EnvironmentPolicy):  # an expert that reads the environment itself
            actions = policy.act_in(
                [envs[s] for s in active], [slot_obs[s] for s in active], [slot_candidates[s] for s in active]
            )
        elif isinstance(policy, MeasuredPolicy):
            actions, measures = policy.act_measured([slot_obs[s] for s in active], [slot_candidates[s] for s in active])
            for slot, measure in zip(active, measures or (), strict=False):
                slot_measures[slot].append(measure)
        else:
            actions = policy.act([slot_obs[s] for s in active], [slot_candidates[s] for s in active])
        for slot, action in zip(active, actions, strict=True):
            obs, reward, terminated, truncated, info = envs[slot].step(action)
            slot_steps[slot] += 1
            slot_obs[slot], slot_candidates[slot] = obs, info["candidates"]
            if terminated or truncated:
                index = slot_spec[slot]
                assert index is not None  # an active slot runs an episode
                spec = specs[index]
                goal = slot_goal[slot]
                results[index] = EpisodeResult(
                    goal=goal,
                    goal_type=env_spec.goal_type(goal),
                    seed=spec.seed,
                    success=bool(terminated) and float(reward) > 0,  # as Episode.success
                    steps=slot_steps[slot],
                    measure=sum(slot_measures[slot]) / len(slot_measures[slot]) if slot_measures[slot] else None,
                )
                bar.update(1)
                load(slot)
    bar.close()
    return results  # type: ignore[return-value]


def success_by_goal_type(results: Iterable[EpisodeResult], env: EnvConfig) -> dict[str, dict[str, float]]:
    """Per goal type: `{"success": rate, "episodes": n}`, plus `OVERALL`, weighted by each type's
    share of the environment's goal set (its uniform goal distribution)."""
    spec = env.spec()
    successes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for r in results:
        counts[r.goal_type] += 1
        successes[r.goal_type] += r.success
    table = {t: {"success": successes[t] / counts[t], "episodes": counts[t]} for t in spec.goal_types if counts[t]}
    share = spec.type_shares()
    covered = sum(share[t] for t in table)
    table[OVERALL] = {
        "success": sum(table[t]["success"] * share[t] for t in table) / covered,
        "episodes": sum(counts.values()),
    }
    return table


MODES = ("sampled", "greedy")


EVAL_SEED_OFFSET = 10_000  # a run's evaluation episodes never share seeds with its training episodes
EVAL_PART_EPISODES = 32  # episodes per part: the granularity of an evaluation's progress


@dataclass(frozen=True)
class EvaluationPart:
    """A slice of a training run's evaluation: some of the fixed episodes of one goal set, with
    the policy sampling or greedy. An evaluation runs part by part so that its caller can show
    progress between parts (the driver, while a learner actor evaluates)."""

    env: EnvConfig  # the training environment, or its held-out twin
    mode: Literal["sampled", "greedy"]
    specs: tuple[EpisodeSpec, ...]
    seed: int  # the sampling generator's seed for this slice
    num_envs: int  # episodes run side by side


def training_evaluation(cfg: TrainConfig) -> list[EvaluationPart]:
    """A run's evaluation: on its train and (`eval_held_out`) held-out goal sets, the same
    `eval_episodes` fixed episodes (seed + 10,000) every time, so curves compare like with like,
    with the policy sampling and/or greedy (`eval_modes`); in parts of `EVAL_PART_EPISODES` (whatever `num_envs` is, so are the parts)."""
    parts = []
    seed = cfg.seed + EVAL_SEED_OFFSET
    for env in (cfg.env, cfg.env.held_out) if cfg.eval_held_out and cfg.env.has_held_out else (cfg.env,):
        specs = episode_specs(env, cfg.eval_episodes, seed)
        for mode in cfg.eval_modes:
            for k, start in enumerate(range(0, len(specs), EVAL_PART_EPISODES)):
                part_seed = random.Random(f"evaluation/{env.goals}/{mode}/{seed}/{k}").randrange(2**31)
                chunk = tuple(specs[start : start + EVAL_PART_EPISODES])
                parts.append(EvaluationPart(env, mode, chunk, part_seed, cfg.num_envs))
    return parts


def run_part(policy: Policy, part: EvaluationPart) -> list[EpisodeResult]:
    return run_episodes(policy, part.env, part.specs, part.num_envs)


def run_evaluation(
    parts: Sequence[EvaluationPart], run: Callable[[EvaluationPart], list[EpisodeResult]], progress: tqdm | None = None
) -> dict[str, float]:
    """`eval/<goal set>/<mode>/<goal type or all>` success rates: each part run with `run` (in
    this process or on a learner actor), `progress` advanced by its episodes."""
    results = []
    for part in parts:
        results.append(run(part))
        if progress is not None:
            progress.update(len(part.specs))
    return summarize_evaluation(parts, results)


def evaluation_bar(parts: Sequence[EvaluationPart], show: bool) -> tqdm:
    """The per-episode bar shown while an evaluation runs (it disappears when done)."""
    return tqdm(
        total=sum(len(p.specs) for p in parts),
        desc="evaluating",
        unit="episode",
        leave=False,
        disable=not (show and to_terminal()),
    )


def summarize_evaluation(
    parts: Sequence[EvaluationPart], results: Sequence[Sequence[EpisodeResult]]
) -> dict[str, float]:
    """`eval/<goal set>/<mode>/<goal type or all>` success rates from each part's results."""
    grouped: dict[tuple[EnvConfig, str], list[EpisodeResult]] = defaultdict(list)
    for part, part_results in zip(parts, results, strict=True):
        grouped[(part.env, part.mode)] += part_results
    out = {}
    for (env, mode), episode_results in grouped.items():
        for goal_type_name, row in success_by_goal_type(episode_results, env).items():
            out[f"eval/{env.goals}/{mode}/{goal_type_name}"] = row["success"]
        for goal_type_name, value in measure_by_goal_type(episode_results, env).items():
            out[f"{MEASURE_PREFIX}/{env.goals}/{mode}/{goal_type_name}"] = value
    return out


MEASURE_PREFIX = "eval_pi_q_argmax"
"""Metric prefix of the agent's evaluation measure: the probability pi gives the critic's argmax."""


def measure_by_goal_type(results: Iterable[EpisodeResult], env: EnvConfig) -> dict[str, float]:
    """Per goal type, the mean over episodes of each episode's mean `measure`, plus `OVERALL`
    weighted by the goal set's type shares as success is; empty when no episode was measured."""
    sums: dict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    for r in results:
        if r.measure is not None:
            sums[r.goal_type] += r.measure
            counts[r.goal_type] += 1
    table = {t: sums[t] / counts[t] for t in counts}
    if not table:
        return {}
    share = env.spec().type_shares()
    covered = sum(share.get(t, 0.0) for t in table)
    if covered <= 0:  # only types outside the goal set's shares: no weighted figure to give
        return table
    return table | {OVERALL: sum(table[t] * share.get(t, 0.0) for t in table) / covered}


def format_success_table(rows: dict[str, dict[str, dict[str, float]]]) -> str:
    """A plain-text table: one row per label, one column per goal type plus the weighted overall."""
    columns = [t for t in dict.fromkeys(t for r in rows.values() for t in r) if t != OVERALL] + [OVERALL]
    width = max([len(label) for label in rows] + [10])
    header = f"{'':<{width}}" + "".join(f"{c:>17}" for c in columns)
    lines = [header, "-" * len(header)]
    for label, table in rows.items():
        cells = []
        for c in columns:
            cells.append(
                f"{table[c]['success']:>10.3f} ({int(table[c]['episodes']):>3})" if c in table else f"{'-':>17}"
            )
        lines.append(f"{label:<{width}}" + "".join(f"{cell:>17}" for cell in cells))
    return "\n".join(lines)
