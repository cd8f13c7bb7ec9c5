"""`benchmarks/ray_gpu.py`, the script for a GPU machine without internet access, rehearsed on the
CPU: wheels larger than a part travel in checked parts and join to the same file, and `run`
measures the learner's bound, scoring's breakdown, the local runner and the Ray runner on a
2-block SmolLM2-architecture model, writing every figure the GPU table needs."""

import hashlib
import json

import pytest

from tests.helpers import load_benchmark, smollm2_architecture

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_wheels_over_the_part_size_travel_in_checked_parts_and_install_offline(tmp_path):
    script = load_benchmark("ray_gpu")
    source = tmp_path / "downloaded"
    source.mkdir()
    big = source / "ray-9.9.9-cp311-cp311-manylinux2014_x86_64.whl"
    big.write_bytes(bytes(range(256)) * 12_000)  # 3 MB
    (source / "tyro-1.0.0-py3-none-any.whl").write_bytes(b"small")
    out = tmp_path / "carried"
    script.prepare(script.Prepare(out=out, part_mb=1.0, wheels_from=source))
    assert not (out / "wheels" / big.name).exists() and len(list((out / "wheels").glob(f"{big.name}.part*of*"))) == 4
    assert (out / "smollm2-arch" / "tokenizer.json").exists()
    command = script.install(script.Install(folder=out, dry_run=True))
    joined = out / "wheels" / big.name
    assert hashlib.sha256(joined.read_bytes()).hexdigest() == hashlib.sha256(big.read_bytes()).hexdigest()
    assert command[-2:] == ["ray", "tyro"] and "--no-index" in command
    assert not list((out / "wheels").glob("*.part*")) and not list((out / "wheels").glob("*.parts.json"))


def test_run_measures_every_part_of_the_gpu_table_on_the_cpu(tmp_path):
    script = load_benchmark("ray_gpu")
    model = smollm2_architecture(tmp_path / "arch")
    output = tmp_path / "ray_gpu.json"
    args = script.Run(
        model_dir=tmp_path / "arch",
        device="cpu",
        dtype="float32",
        budget_s=240,
        env_steps=256,
        workers=(2,),
        updates=2,
        scoring_states=16,
        repeats=1,
        small_resources=True,
        output=output,
    )
    del model
    report = script.run(args)
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    parts = report["parts"]
    assert set(parts) == {"learner", "scoring", "local", "ray-2"}
    assert parts["learner"]["updates_per_s"] > 0 and parts["learner"]["env_steps_per_s_bound"] > 0
    assert set(parts["scoring"]["seconds"]) == {"tokenize_and_pack", "to_device", "forward", "to_host"}
    assert sum(parts["scoring"]["shares"].values()) == pytest.approx(1.0)
    assert 0 < parts["scoring"]["forward_share_of_matmul_rate"]
    for name in ("local", "ray-2"):
        assert parts[name]["env_steps"] >= 256 and parts[name]["env_steps_per_s"] > 0
    assert report["ratios"]["ray-2"]["vs_local"] > 0 and report["ratios"]["ray-2"]["vs_learner_bound"] > 0
