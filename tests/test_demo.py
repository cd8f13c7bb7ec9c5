"""The main job's shape: `sacglam demo` runs each phase config through the CLI's train and writes
one report over them; its configs are the ones `make demo` runs."""

from pathlib import Path

import pytest
import yaml

from sacglam.cli import main
from sacglam.config import TrainConfig
from sacglam.config_io import load_yaml_config
from sacglam.demo import DEFAULT_PHASES

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_phases_are_valid_configs_through_ray_and_the_first_learns_with_evaluations():
    learning, smollm2 = (load_yaml_config(TrainConfig, ROOT / p) for p in DEFAULT_PHASES)
    assert learning.runner == smollm2.runner == "ray"
    assert learning.eval_episodes >= 128 and learning.total_env_steps >= 4 * learning.eval_every
    assert smollm2.agent.model == "smollm2-135m" and smollm2.agent.lora_rank > 0


def _phase(tmp_path, name, **changes):
    data = yaml.safe_load((ROOT / "tune_configs" / "runs" / "demo_learning.yaml").read_text())
    data |= {
        "runner": "local",
        "total_env_steps": 256,
        "eval_every": 128,
        "eval_episodes": 4,
        "num_envs": 8,
        "warm_start_steps": 2,
        "progress": False,
        "pipeline": {"rollout_workers": 2},
    } | changes
    data["sac"] |= {"batch_size": 16}
    path = tmp_path / f"demo_{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_demo_runs_every_phase_and_writes_one_report_with_curves(tmp_path, capsys):
    phases = [_phase(tmp_path, "first"), _phase(tmp_path, "second", eval_episodes=0)]
    main(["demo", "--phases", *map(str, phases), "--output-dir", str(tmp_path / "demo")])
    out = capsys.readouterr().out
    assert "phase 1/2: first" in out and "phase 2/2: second" in out
    assert "simple-train/sampled/all" in out and "no evaluation (eval_episodes 0)" in out
    report = (tmp_path / "demo" / "report.md").read_text()
    assert "## first" in report and "## second" in report and "Learning curve" in report
    assert "![curves](first/curves.png)" in report and (tmp_path / "demo" / "first" / "curves.png").exists()
    assert (tmp_path / "demo" / "second" / "metrics.jsonl").exists()
    assert "[page](first/transcripts/transcripts.html)" in report  # the phase that evaluated, not the other
    assert (tmp_path / "demo" / "first" / "transcripts" / "transcripts.html").exists()
    assert not (tmp_path / "demo" / "second" / "transcripts").exists()


def test_a_bad_later_phase_or_an_earlier_demo_fails_before_anything_runs(tmp_path, capsys):
    bad = _phase(tmp_path, "second", agent={"model": "no-such-model"})
    with pytest.raises(SystemExit):
        main(["demo", "--phases", str(_phase(tmp_path, "first")), str(bad), "--output-dir", str(tmp_path / "demo")])
    assert "no-such-model" in capsys.readouterr().err and not (tmp_path / "demo").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.md").write_text("an earlier demo")
    with pytest.raises(SystemExit):
        main(["demo", "--phases", str(_phase(tmp_path, "first")), "--output-dir", str(tmp_path / "old")])
    assert "holds an earlier demo" in capsys.readouterr().err
