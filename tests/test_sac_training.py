"""The in-process SAC trainer: a smoke run that writes every output, and one slow learning run."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from sacglam.config import AgentConfig, SACConfig, TrainConfig
from sacglam.config_io import load_yaml_config
from sacglam.pipeline.run import run_pipeline
from tests.test_ppo import assert_cumulative_episode_counts


def test_a_short_run_writes_metrics_config_and_checkpoint(tmp_path):
    cfg = TrainConfig(
        algo="sac-her",
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=32),
        sac=SACConfig.with_her(batch_size=16, random_steps=64),
        num_envs=8,
        total_env_steps=256,
        eval_every=128,
        eval_episodes=4,
        log_every=64,
        warm_start_steps=2,
        output_dir=tmp_path / "run",
        progress=False,
    )
    final = run_pipeline(cfg)
    assert 0.0 <= final["eval/simple-train/sampled/all"] <= 1.0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in records if "eval/simple-test/greedy/all" in r] == [0, 128, 256]
    trained = [r for r in records if "loss/critic" in r]
    assert trained and all(r["learner/gradient_steps"] > 0 for r in trained)
    assert_cumulative_episode_counts([r for r in records if "train/episodes" in r])
    assert (tmp_path / "run" / "learner.pt").exists() and (tmp_path / "run" / "metrics.csv").exists()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["sac"]["her"] is True
    assert any((tmp_path / "run" / "tensorboard").iterdir())


def test_algo_and_her_must_agree():
    with pytest.raises(ValueError, match="algo='sac'"):
        TrainConfig(algo="sac", sac=SACConfig.with_her())


# The learning test: the CPU-sized SAC+HER config for 12k env steps, evaluated every 3k on 128
# fixed episodes per goal set (standard error of a success rate <= 0.044). Floating-point results
# differ between CPU kernel sets as between seeds, so the test asserts a rise its runs clear by a
# wide margin (`benchmarks/suite/test_margins.py` measures it over seeds and kernel sets; docs/development/testing.md).
LEARNING_TEST_THREADS = 1
LEARNING_TEST_MIN_RISE = 0.1
# Every measured run (seeds 0-2, three kernel sets) rises at least 0.29 over the 12k env steps
# (docs/development/testing.md), so the seed only decides where the suite's run stops: on this project's AMD
# EPYC, seed 2 stops at the first evaluation (3k, 0.117 above) under its AVX-512 kernels, those of
# the kind whose time target is tightest, and at 6k under AVX2 and ATen's `default` (seed 0: 9k,
# 3k and 3k). Another CPU's kernels may move the stop, never the verdict.
LEARNING_TEST_SEED = 2
CURVE_KEY = "eval/simple-train/sampled/all"


def learning_test_config(seed: int, output_dir: Path) -> TrainConfig:
    cfg = load_yaml_config(
        TrainConfig, Path(__file__).resolve().parents[1] / "tune_configs" / "runs" / "cpu_simple_sac_her.yaml"
    )
    return replace(
        cfg,
        total_env_steps=12_000,
        eval_every=3_000,
        eval_episodes=128,
        eval_modes=("sampled",),  # the curve's only mode and goal set (the curve is the same either way)
        eval_held_out=False,
        seed=seed,
        output_dir=output_dir,
        progress=False,
    )


def learning_curve(output_dir: Path) -> list[float]:
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [r[CURVE_KEY] for r in records if CURVE_KEY in r]


def until_risen(min_rise: float):
    """A `stop_when` for `run_pipeline` that ends the run at the first evaluation after the start
    whose `CURVE_KEY` is at least `min_rise` above the start's: `learning_rise` is decided there."""
    start: list[float] = []

    def risen(evaluation: dict[str, float]) -> bool:
        if not start:
            start.append(evaluation[CURVE_KEY])
            return False
        return evaluation[CURVE_KEY] - start[0] >= min_rise

    return risen


def learning_rise(curve: list[float]) -> float:
    """The best evaluation after the start, above the start. A single run's success oscillates
    between evaluations, and on some seeds falls back later (seed 3 of this config, on earlier
    code: 0.40 at 3k, 0.33 at 9k, 0.00 at 12k; docs/development/testing.md), so the last point alone would be
    a knife edge."""
    return max(curve[1:]) - curve[0]


@pytest.mark.slow
def test_sac_her_learns_the_simplified_task(tmp_path, torch_threads):
    """Learning notes: SAC+HER reaches 0.8 sampled success within about 15k env steps on the
    simplified task from a language warm start. Here: from the warm-started start near the
    uniform-random floor (0.26), the sampled success reaches at least 0.1 higher at one of the
    evaluations at 3k, 6k, 9k and 12k env steps. The run stops at the first that does (the
    assertion is decided there; seed 2 under AVX-512 kernels: at 3k, 0.12 above; under AVX2
    ones: at 6k, 0.14 above)."""
    torch_threads(LEARNING_TEST_THREADS)
    run_pipeline(
        learning_test_config(seed=LEARNING_TEST_SEED, output_dir=tmp_path / "run"),
        stop_when=until_risen(LEARNING_TEST_MIN_RISE),
    )
    curve = learning_curve(tmp_path / "run")
    assert 2 <= len(curve) <= 5 and curve[0] < 0.4, curve  # starts near the uniform-random floor
    assert learning_rise(curve) >= LEARNING_TEST_MIN_RISE, curve
