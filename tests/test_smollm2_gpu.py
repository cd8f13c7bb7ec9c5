"""`benchmarks/gpu/smollm2_gpu.py`, the script a GPU machine runs, rehearsed here on the CPU: the
GGUF split into two checked parts under 50 MB that join to the same file, then the smoke run and
the study on a 2-block SmolLM2-architecture model, sized from the smoke's timings, ending with its
report, the runs' archive and seed 0's weights (the critic's input statistics in them)."""

import json
import tarfile
from pathlib import Path

import pytest
import torch

from tests.helpers import load_benchmark, smollm2_architecture

pytestmark = pytest.mark.slow  # about 90 s: four short training runs in subprocesses, then the analysis

SMALL = (
    "--agent.lora-layers 1 --agent.critic-width 32 --num-envs 8 --sac.batch-size 16 --sac.critic-warmup-updates 2 "
    "--ppo.rollout-steps 64 --ppo.minibatch-size 32 --ppo.epochs 1 --agent.device cpu --agent.dtype float32"
)


def test_prepare_splits_the_gguf_into_two_parts_under_50_mb_that_join_to_the_same_file(tmp_path):
    from sacglam.models.parts import join_parts, manifest_name, sha256_of

    script = load_benchmark("smollm2_gpu")
    first, second = tmp_path / "first", tmp_path / "second"
    script.prepare(script.Prepare(first=first, second=second, arch=False))  # the arch files: test_gpu_check's
    manifest = json.loads((first / manifest_name(script.GGUF_NAME)).read_text())
    assert [p["size"] < 50e6 for p in manifest["parts"]] == [True, True]
    assert len(list(first.glob("*.part*of2"))) == len(list(second.glob("*.part*of2"))) == 1
    joined = join_parts(first / manifest_name(script.GGUF_NAME), tmp_path / "joined.gguf", search=[second])
    assert sha256_of(joined) == manifest["sha256"] and joined.stat().st_size == manifest["size"]
    # on the GPU machine part 1 arrives a call earlier and waits where the smoke kept it
    kept = tmp_path / "kept"
    script.keep_first_part(first, kept)
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in first.iterdir())
    script.assemble(
        script.Assemble(first=(kept, tmp_path / "gone"), second=second, out=tmp_path / "out", convert=False)
    )
    assert sha256_of(tmp_path / "out" / script.GGUF_NAME) == manifest["sha256"]


def test_smoke_then_study_on_a_small_model_size_the_runs_and_write_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    script = load_benchmark("smollm2_gpu")
    arch = Path(smollm2_architecture(tmp_path / "arch", layers=2, hidden=64))
    smoke_runs, runs, out = tmp_path / "smoke", tmp_path / "study", tmp_path / "out"
    carried, kept = tmp_path / "carried", tmp_path / "kept"  # the folder part 1 came in need not stay: part 1 moves
    carried.mkdir()
    for name in (f"{script.GGUF_NAME}.part1of2", f"{script.GGUF_NAME}.parts.json"):
        (carried / name).write_text(name)
    script.smoke(
        script.Smoke(
            seeds=(0,),
            arch=arch,
            runs=smoke_runs,
            smoke_env_steps=64,
            eval_episodes=4,
            flags=SMALL,
            thread_limit=1,
            first=carried,
            keep_parts=kept,
        )
    )
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in carried.iterdir())
    timings = json.loads((smoke_runs / "timings.json").read_text())
    assert {r["evaluations"] for r in timings["runs"].values()} == {1, 2}  # PPO once, SAC before and after
    assert all(r["wall_s"] > r["train_s"] > 0 and r["env_steps"] >= 64 for r in timings["runs"].values())

    script.study(
        script.Study(
            budget_s=120,
            margin_s=5,
            seeds=(0,),
            runs=runs,
            smoke_runs=smoke_runs,
            eval_episodes=4,
            flags=f"--agent.model {smoke_runs / 'model'} --total-env-steps 128 {SMALL}",  # ends before its limit
            thread_limit=1,
            output=out,
        )
    )
    sizing = json.loads((out / "sizing.json").read_text())
    assert 30 <= sizing["time_limit_s"] < 120 and sizing["load_s"] > 0
    assert sizing["device"].startswith("NVIDIA" if torch.cuda.is_available() else "CPU")  # the machine's, in the report
    report = json.loads((out / "smollm2.json").read_text())
    assert report["target"] == {"simple-train": 0.8, "simple-test": 0.5}
    for name in ("sac-her/seed0", "ppo/seed0"):
        run = report["runs"][name]
        assert run["finished"] and run["final"] is not None and run["env_steps"] >= 128
        config = json.loads((runs / name.replace("/", "-") / "config.json").read_text())
        assert config["time_limit_s"] == round(sizing["time_limit_s"]) and config["eval_episodes"] == 4
        assert config["agent"]["critic_input_norm"] == "standardise"  # a pre-trained model's path: auto
        weights = torch.load(out / f"{name.split('/')[0]}-seed0-weights.pt")
        assert float(weights["critic.input_norm.count"]) > 0  # the learner's updates reached the statistics
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"sac-her-seed0/metrics.jsonl", "ppo-seed0/config.json", "ppo-seed0/train.log"} <= names
    assert not any(n.endswith(".pt") for n in names)
