"""benchmarks/studies/generalisation.py: the statistics and the issue's checks it reports, on
hand-built per-seed figures whose answers are worked out here by hand."""

from __future__ import annotations

import math

import pytest

from tests.helpers import load_benchmark

study = load_benchmark("generalisation")


def variant(**figures: list[float]) -> dict:
    return {"figures": {name.replace("__", "/"): study._stats(values) for name, values in figures.items()}}


def test_stats_and_difference_are_the_sample_figures_and_the_welch_standard_error():
    a, b = study._stats([0.5, 0.7, 0.6]), study._stats([0.2, 0.4])
    assert a["mean"] == pytest.approx(0.6) and a["sd"] == pytest.approx(0.1)  # sample sd: sqrt(0.02 / 2)
    d = study.difference(a, b)
    se = math.sqrt(0.1**2 / 3 + math.sqrt(0.02) ** 2 / 2)
    assert d["difference"] == pytest.approx(0.3)
    assert d["standard_error"] == pytest.approx(se)
    assert d["in_standard_errors"] == pytest.approx(0.3 / se)


def test_acceptance_against_ppo_glam_and_today():
    variants = {
        "today": variant(train__greedy__all=[0.7, 0.8], held_out__greedy__all=[0.2, 0.4]),
        "ppo": variant(train__greedy__all=[0.8, 0.8], held_out__greedy__all=[0.5, 0.5]),
        "mine": variant(train__greedy__all=[0.8, 0.9], held_out__greedy__all=[0.5, 0.7]),
    }
    checks = study.acceptance(variants, "mine")
    assert checks["train greedy >= PPO-GLAM's"] and checks["held-out greedy >= PPO-GLAM's"]
    # a gain of 0.3 over a standard error of sqrt(0.02 / 2 + 0.02 / 2) = 0.141: 2.12 standard errors
    assert checks["held-out greedy above today's by > 2 standard errors"]
    assert not checks["held-out greedy sd over seeds <= 0.08"]  # sd 0.141

    variants["mine"] = variant(train__greedy__all=[0.7, 0.8], held_out__greedy__all=[0.45, 0.5])
    checks = study.acceptance(variants, "mine")
    assert not checks["train greedy >= PPO-GLAM's"] and not checks["held-out greedy >= PPO-GLAM's"]
    assert not checks["held-out greedy above today's by > 2 standard errors"]  # 0.175 / 0.103 = 1.70
    assert checks["held-out greedy sd over seeds <= 0.08"]  # sd 0.035


def test_acceptance_on_a_form_without_ppo_glam_compares_training_success_with_today():
    window = study.WINDOW_FIGURE
    today = variant(**{window: [0.5, 0.6]})
    better, worse = variant(**{window: [0.6, 0.6]}), variant(**{window: [0.5, 0.55]})
    assert study.acceptance({"today": today, "mine": better}, "mine")["training success >= today's"]
    checks = study.acceptance({"today": today, "mine": worse}, "mine")
    assert not checks["training success >= today's"]
    assert checks["training success gain over today"]["difference"] == pytest.approx(-0.025)
