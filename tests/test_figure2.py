"""Figure 2's analysis: window success from cumulative counts, steps to a threshold, per-method
summaries, the full-task acceptance checks, and the plot; and the trainers log the counts it needs."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sacglam.experiments.figure2 import (
    checks,
    figure2_summary,
    first_step_reaching,
    max_drawdown,
    plot_figure2,
    window_success,
)


def cumulative(per_interval: list[tuple[int, int]], every: int = 1024) -> list[tuple[int, int, int]]:
    """(episodes, successes) per logging interval -> cumulative (env_steps, episodes, successes)."""
    out, episodes, successes = [], 0, 0
    for i, (e, s) in enumerate(per_interval, start=1):
        episodes, successes = episodes + e, successes + s
        out.append((i * every, episodes, successes))
    return out


def test_window_success_is_the_rate_over_the_episodes_inside_the_window():
    records = cumulative([(10, 0), (10, 5), (20, 20), (10, 0)], every=1000)
    # window 2000 at step 4000: the intervals ending at 3000 and 4000
    assert window_success(records, 2000) == [(1000, 0.0), (2000, 0.25), (3000, 25 / 30), (4000, 20 / 30)]
    assert window_success(records, 10_000)[-1] == (4000, 25 / 50)  # everything since step 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=30), st.integers(1, 12))
def test_window_success_equals_a_direct_count(intervals, window_intervals):
    intervals = [(e, min(s, e)) for e, s in intervals]
    records = cumulative(intervals, every=100)
    curve = dict(window_success(records, window_intervals * 100))
    for i in range(len(intervals)):
        inside = intervals[max(0, i + 1 - window_intervals) : i + 1]
        episodes = sum(e for e, _ in inside)
        if episodes == 0:
            assert (i + 1) * 100 not in curve
        else:
            assert curve[(i + 1) * 100] == pytest.approx(sum(s for _, s in inside) / episodes)
            assert 0.0 <= curve[(i + 1) * 100] <= 1.0


def test_first_step_reaching():
    curve = [(1, 0.1), (2, 0.25), (3, 0.1), (4, 0.3)]
    assert first_step_reaching(curve, 0.2) == 2
    assert first_step_reaching(curve, 0.5) is None


def test_max_drawdown_is_the_largest_fall_below_an_earlier_peak():
    assert max_drawdown([(1, 0.1), (2, 0.38), (3, 0.015), (4, 0.4), (5, 0.3)]) == pytest.approx(0.365)
    assert max_drawdown([(1, 0.1), (2, 0.2), (3, 0.3)]) == 0.0
    assert max_drawdown([]) == 0.0


def rows_for(variant, seed, rates, seconds_per_step, every=1024, episodes_per_interval=40):
    rows = [
        {
            "trial": f"{variant},seed={seed}",
            "variant": variant,
            "seed": seed,
            "env_steps": 0,
            "seconds": 0.0,
            "eval/train/sampled/all": 0.0,
        }
    ]
    episodes = successes = 0
    for i, rate in enumerate(rates, start=1):
        episodes += episodes_per_interval
        successes += round(rate * episodes_per_interval)
        rows.append(
            {
                "trial": f"{variant},seed={seed}",
                "variant": variant,
                "seed": seed,
                "env_steps": i * every,
                "seconds": i * every * seconds_per_step,
                "train/episodes": episodes,
                "train/successes": successes,
                "train/success": 0.5,
            }
        )
    last = len(rates) * every
    rows.append(
        {
            "trial": f"{variant},seed={seed}",
            "variant": variant,
            "seed": seed,
            "env_steps": last,
            "eval/train/sampled/all": rates[-1],
            "eval/train/greedy/all": rates[-1] / 2,
            "eval/test/sampled/all": 0.1,
            "eval/train/sampled/grasp": 1.0,
        }
    )
    return rows


def test_summary_and_checks_on_a_synthetic_table(tmp_path):
    ramp = [min(1.0, 0.05 * i) for i in range(25)]  # reaches 0.2 at interval 5
    flat = [0.05] * 25
    rows = []
    for seed in (0, 1, 2):
        rows += rows_for("sac-her", seed, ramp, seconds_per_step=0.012)
        rows += rows_for("ppo", seed, flat, seconds_per_step=0.010)
    summary = figure2_summary(rows, window=1024 * 6, threshold=0.2)
    her, ppo = summary["methods"]["sac-her"], summary["methods"]["ppo"]
    assert her["seeds"] == [0, 1, 2] and her["steps_to_threshold"][0] is not None
    assert ppo["steps_to_threshold"] == [None, None, None]
    assert her["max_drawdown"] == [0.0, 0.0, 0.0]  # a monotone ramp never falls
    assert ppo["final_training_success_mean"] == pytest.approx(0.05)
    assert her["evaluation"]["train/greedy/all"]["mean"] == pytest.approx(ramp[-1] / 2)
    assert her["evaluation"]["test/sampled/all"]["mean"] == pytest.approx(0.1)
    c = summary["checks"]
    assert c["wall_time_per_env_step_ratio_sac_her_to_ppo"] == pytest.approx(1.2)
    assert c["met"]["every_sac_her_seed_at_least_0.15"] and c["met"]["wall_time_per_env_step_at_most_1.5x_ppo"]
    assert c["met"]["sac_her_slowest_seed_reaches_threshold_in_half_the_fastest_ppo_seed_steps"] is True
    json.dumps(summary)  # what the benchmark writes
    plot_figure2(summary, tmp_path / "f.png", "test")
    assert (tmp_path / "f.png").stat().st_size > 10_000


def test_every_sac_her_variant_of_a_form_gets_its_own_checks():
    ramp = [min(1.0, 0.05 * i) for i in range(25)]
    rows = []
    for seed in (0, 1, 2):
        rows += rows_for("sac-her", seed, ramp, seconds_per_step=0.012)
        rows += rows_for("sac-her-slow", seed, [0.05] * 25, seconds_per_step=0.018)
        rows += rows_for("ppo", seed, [0.05] * 25, seconds_per_step=0.010)
    summary = figure2_summary(rows, window=1024 * 6, threshold=0.2)
    by_method = summary["checks_by_method"]
    assert set(by_method) == {"sac-her", "sac-her-slow"} and summary["checks"] == by_method["sac-her"]
    assert by_method["sac-her-slow"]["wall_time_per_env_step_ratio_sac_her_to_ppo"] == pytest.approx(1.8)
    assert not by_method["sac-her-slow"]["met"]["wall_time_per_env_step_at_most_1.5x_ppo"]
    assert by_method["sac-her"]["met"]["wall_time_per_env_step_at_most_1.5x_ppo"]
    single = figure2_summary([r for r in rows if r["variant"] != "sac-her-slow"], window=1024 * 6, threshold=0.2)
    assert "checks_by_method" not in single


def test_the_half_steps_check_is_undetermined_when_ppo_never_gets_there_and_sac_is_late():
    def method(steps, finals, per_step=0.01, budget=25_600):
        return {
            "steps_to_threshold": steps,
            "final_training_success": finals,
            "final_eval_sampled": finals,
            "final_training_success_mean": sum(finals) / len(finals),
            "seconds_per_env_step_mean": per_step,
            "curve": [{"env_steps": budget}],
        }

    late = checks({"sac-her": method([15_000, 16_000], [0.3, 0.3]), "ppo": method([None, None], [0.1, 0.1])}, 0.2)
    assert late["met"]["sac_her_slowest_seed_reaches_threshold_in_half_the_fastest_ppo_seed_steps"] is None
    early = checks({"sac-her": method([10_000, 12_000], [0.3, 0.3]), "ppo": method([None, None], [0.1, 0.1])}, 0.2)
    assert early["met"]["sac_her_slowest_seed_reaches_threshold_in_half_the_fastest_ppo_seed_steps"] is True
    slow = checks({"sac-her": method([30_000, 12_000], [0.3, 0.3]), "ppo": method([40_000, 50_000], [0.1, 0.1])}, 0.2)
    assert slow["met"]["sac_her_slowest_seed_reaches_threshold_in_half_the_fastest_ppo_seed_steps"] is False
    assert "sac_her_at_least_0.5_in_two_thirds_of_seeds_at_64k" not in late["met"]  # a 25.6k run
    assert checks({"sac": method([None], [0.0])}, 0.2) == {}


def test_the_64k_goal_counts_seeds_at_half_success_on_long_runs_only():
    def method(finals, budget):
        return {
            "steps_to_threshold": [10_000] * len(finals),
            "final_training_success": finals,
            "final_eval_sampled": [f + 0.1 for f in finals],
            "final_training_success_mean": sum(finals) / len(finals),
            "seconds_per_env_step_mean": 0.01,
            "curve": [{"env_steps": budget}],
        }

    key = "sac_her_at_least_0.5_in_two_thirds_of_seeds_at_64k"
    two = checks({"sac-her": method([0.6, 0.5, 0.2], 64_512), "ppo": method([0.1] * 3, 64_512)}, 0.2)
    assert two["met"][key] is True and two["sac_her_seeds_at_least_0.5_training"] == 2
    assert two["sac_her_seeds_at_least_0.5_eval_sampled"] == 2  # 0.7, 0.6, 0.3
    one = checks({"sac-her": method([0.6, 0.45, 0.2], 64_512), "ppo": method([0.1] * 3, 64_512)}, 0.2)
    assert one["met"][key] is False and one["sac_her_seeds_at_least_0.5_eval_sampled"] == 2
