"""Bring your own environment: a toy environment defined only in a test file runs through
`sacglam train` by `module:Class`, with and without hindsight relabeling, and is evaluated on
its own goal draw and its held-out twin."""

from __future__ import annotations

import json

import pytest
import yaml

from sacglam.cli import main


@pytest.mark.parametrize("algo", ["sac-her", "sac"])
def test_a_toy_environment_from_a_test_file_trains_through_sacglam_train(algo, tmp_path, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])  # `tests.` importable
    config = {
        "algo": algo,
        "env": {"name": "tests.test_env_protocol:Corridor", "held_out_kwargs": {}},
        "agent": {"model": "tiny-causal", "lora_r": 0, "critic": "action", "critic_width": 32},
        "sac": {
            "her": algo == "sac-her",
            "sampling": "ratio" if algo == "sac-her" else "uniform",
            "batch_size": 16,
            "update_every": 16,
            "gradient_steps": 1,
            "critic_warmup_updates": 2,
            "n_step": 2,
            "gamma": 0.9,
        },
        "num_envs": 4,
        "total_env_steps": 192,
        "eval_every": 96,
        "eval_episodes": 4,
        "log_every": 64,
        "output_dir": str(tmp_path / "run"),
        "progress": False,
    }
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(config))
    main(["train", "--config", str(tmp_path / "toy.yaml")])
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = {k: v for r in records for k, v in r.items()}
    assert last["env_steps"] >= 192 and last["learner/updates"] > 0
    assert 0.0 <= last["eval/train/sampled/all"] <= 1.0 and "eval/test/greedy/all" in last
    relabeled = last["buffer/relabeled_fraction"]
    assert relabeled > 0.2 if algo == "sac-her" else relabeled == 0.0
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["env"]["name"] == "tests.test_env_protocol:Corridor" and saved["agent"]["tiny_vocabulary"]
    # report.md links the final evaluation's first episodes, recorded as `sacglam watch` records them
    report = (tmp_path / "run" / "report.md").read_text()
    assert "[page](transcripts/transcripts.html)" in report
    steps = json.loads((tmp_path / "run" / "transcripts" / "transcripts.json").read_text())
    assert len(steps) == 3 and all(episode["steps"] for episode in steps)
