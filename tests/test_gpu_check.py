"""`benchmarks/gpu/gpu_check.py`, the script a GPU machine runs, runs here on the CPU with a
2-block SmolLM2-architecture model (in bfloat16 where the CPU has it): every part completes and the PPO epoch's first
step is at ratio exactly 1."""

import json
from pathlib import Path

import pytest

from tests.helpers import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # about 15 s: model build, scoring, SAC and PPO updates, two short runs


def load_script():
    return load_benchmark("gpu_check")


def test_the_gpu_check_runs_on_the_cpu_with_a_small_model(tmp_path):
    """In bfloat16 where torch computes it in hardware (AVX-512 BF16, AMX, oneDNN not capped below
    them), in float32 where torch would emulate it: the emulation took 168 s of this test on an AVX2
    EPYC (the 49k-token LM head), and 92-101 s with the AVX2 switches on an EPYC with AVX-512 BF16
    before `native_cpu_bfloat16` read oneDNN's cap."""
    from sacglam.models.loading import native_cpu_bfloat16

    dtype = "bfloat16" if native_cpu_bfloat16() else "float32"
    gpu_check = load_script()
    gpu_check.prepare(gpu_check.Prepare(out=tmp_path / "arch"))
    assert {p.name for p in (tmp_path / "arch").iterdir()} >= {"config.json", "tokenizer.json"}
    assert not list((tmp_path / "arch").glob("*.safetensors"))  # nothing of the weights travels
    output = tmp_path / "gpu_check.json"
    gpu_check.run(
        gpu_check.Run(
            model_dir=tmp_path / "arch",
            device="cpu",
            dtype=dtype,
            layers=2,
            hidden=64,
            top_layers=1,
            scoring_states=(8,),
            sac_batch=8,
            ppo_rollout=48,
            ppo_minibatch=16,
            repeats=1,
            compile=False,
            pipeline_env_steps=64,
            eval_episodes=2,
            output=output,
        )
    )
    report = json.loads(output.read_text())
    assert report["errors"] == {}
    assert report["dtype_gap"]["dtype"] == dtype
    assert (
        report["dtype_gap"]["max_abs_log_pi_gap"] > 0
        if dtype == "bfloat16"
        else report["dtype_gap"]["max_abs_log_pi_gap"] == 0
    )
    assert [r["lora_layers"] for r in report["sac_update"]] == ["all", 1]
    assert all(r["finite"] and r["seconds_per_update"] > 0 for r in report["sac_update"])
    assert [r["lora_layers"] for r in report["ppo_update"]] == ["all", 1]
    assert all(r["first_step_log_ratio"] == 0.0 and r["first_step_clip_fraction"] == 0.0 for r in report["ppo_update"])
    assert [r["algo"] for r in report["pipeline"]] == ["sac-her", "ppo"]
    assert [r["states"] for r in report["scoring"]] == [8] and report["scoring"][0]["states_per_s"] > 0
