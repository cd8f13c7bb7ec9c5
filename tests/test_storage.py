"""A run's storage may be a URI: `StoragePath` on local disk and on a real S3-compatible server
(moto, on 127.0.0.1), checkpoints sealed and checked there, and a whole run written to S3 and
resumed from its URI (`sacglam train --resume s3://...`) without touching the local disk."""

import json
from dataclasses import replace

import pytest

from sacglam.cli import main
from sacglam.config import GoalSamplerConfig, PipelineConfig
from sacglam.pipeline.run import run_pipeline
from sacglam.runtime.checkpoint import COMPLETE, CheckpointStore
from sacglam.runtime.storage import StoragePath
from tests.helpers import tiny_pipeline_config


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return StoragePath(tmp_path / "root")
    return StoragePath(request.getfixturevalue("s3_server")("root"))


def test_a_storage_path_reads_writes_lists_and_moves_alike_on_local_disk_and_s3(root):
    (root / "a" / "x.txt").write_text("hello")
    (root / "a" / "sub" / "y.bin").write_bytes(b"\x00" * 10)
    (root / "b-1").write_text("1")
    assert (root / "a" / "x.txt").read_text() == "hello" and (root / "a/sub/y.bin").size() == 10
    assert (root / "a").is_dir() and (root / "a" / "x.txt").is_file() and not (root / "nothing").exists()
    assert [p.name for p in root.children()] == ["a", "b-1"] and [p.name for p in root.children("b-")] == ["b-1"]
    assert [(name, size) for name, size, _ in (root / "a").files()] == [("sub/y.bin", 10), ("x.txt", 5)]
    assert (root / "nothing").children() == [] and (root / "nothing").files() == []
    (root / "a").move_dir(root / "c", last=("x.txt",))
    assert not (root / "a").exists() and (root / "c" / "sub" / "y.bin").read_bytes() == b"\x00" * 10
    (root / "pointer").replace_text("one")
    (root / "pointer").replace_text("two")
    assert (root / "pointer").read_text() == "two"
    (root / "b-1").unlink()
    with (root / "d").writing_locally() as local:
        (local / "f.txt").write_text("made locally")
    with (root / "d").reading_locally() as local:
        assert (local / "f.txt").read_text() == "made locally"
    same = StoragePath((root / "d" / "f.txt").as_location())  # a location string keeps a URI's options
    assert same.read_text() == "made locally"
    (root / "c").rmtree()
    assert [p.name for p in root.children()] == ["d", "pointer"]


def test_checkpoints_on_s3_are_sealed_pruned_and_their_damage_found(s3_server):
    store = CheckpointStore(s3_server("run"), keep=2)
    for step in (100, 200, 300):
        tmp = store.begin(step)
        (tmp / "learner.pt").write_bytes(bytes(range(200)))
        (tmp / "replay" / "steps.arrow").write_bytes(b"arrow" * 50)
        store.commit(tmp, step)
    assert [p.name for p in store.root.children("step-")] == ["step-000000200", "step-000000300"]
    assert store.latest().name == "step-000000300" and not store.root.children(".tmp-")
    garbled = store.latest() / "replay" / "steps.arrow"
    garbled.write_bytes(b"ARROW" + b"arrow" * 49)  # same size, other bytes
    assert store.latest().name == "step-000000300"  # sizes only: the cheap check passes
    intact, skipped = store.latest_intact()
    assert intact.name == "step-000000200" and "replay/steps.arrow does not match its checksum" in skipped[0][1]
    store.set_aside(skipped[0][0], intact)
    assert store.latest().name == "step-000000200" and (store.root / "damaged-step-000000300" / COMPLETE).is_file()


def test_a_checkpoint_whose_move_into_place_was_cut_short_is_not_taken(s3_server):
    """On an object store a checkpoint is moved file by file, the seal last: a kill in between
    leaves a directory without its seal, which is passed over."""
    store = CheckpointStore(s3_server("run"))
    first = store.begin(100)
    (first / "learner.pt").write_bytes(b"first")
    store.commit(first, 100)
    cut = store.root / "step-000000200"
    (cut / "learner.pt").write_bytes(b"second")  # moved before the kill; MANIFEST and COMPLETE were not
    assert store.latest().name == "step-000000100" and store.latest_intact() == (store.latest(), [])
    (store.root / "latest").unlink()  # even without the pointer, by step alone
    assert store.latest().name == "step-000000100"
    intact, skipped = store.latest_intact()
    assert intact.name == "step-000000100" and "COMPLETE is missing" in skipped[0][1]


def _records(run: StoragePath) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_run_on_s3_writes_every_part_there_and_resumes_from_its_uri(s3_server, tmp_path, monkeypatch, capsys):
    """Checkpoints (learner, replay snapshot, goal sampler, workers, driver), metrics, the config,
    the final learner and the report all land in the bucket; nothing is written to the working
    directory; `sacglam train --resume s3://...` continues from the newest checkpoint there."""
    monkeypatch.chdir(tmp_path)
    uri = s3_server("runs/sac")
    cfg = replace(
        tiny_pipeline_config(tmp_path, "unused"),
        output_dir=uri,
        goal_sampler=GoalSamplerConfig(mode="progress"),
        total_env_steps=256,
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=128),
    )
    run_pipeline(cfg, announce=lambda _: None)
    run = StoragePath(uri)
    newest = CheckpointStore(run / "checkpoints").latest_intact()[0]
    assert newest.name == "step-000000256"
    parts = {name.split("/")[0] for name, _, _ in newest.files()}
    assert {"learner.pt", "replay", "goal_sampler.pt", "workers.pkl", "driver.json", "MANIFEST.json"} <= parts
    assert {"config.json", "metrics.jsonl", "metrics.csv", "learner.pt", "tensorboard"} <= {
        p.name for p in run.children()
    }
    assert _records(run)[-1]["env_steps"] == 256
    assert list(tmp_path.iterdir()) == []  # nothing on the local disk of the run's own

    main(["train", "--resume", uri, "--total-env-steps", "384", "--no-progress"])
    out = capsys.readouterr().out
    assert "resumed" in out and "from step-000000256: 256 env steps" in out
    records = _records(run)
    assert records[-1]["env_steps"] >= 384
    steps = [r["env_steps"] for r in records if "eval/train/sampled/all" in r]
    assert steps == sorted(steps) and len(steps) == len(set(steps))  # the earlier session's kept once
    assert CheckpointStore(run / "checkpoints").latest().name == "step-000000384"
    assert (run / "report.md").is_file() and f"report: {run / 'report.md'}" in out

    # a damaged record is named by the run's own file, not by the session's local staging copy
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join([lines[0], "not a record\n", *lines[2:]]))
    with pytest.raises(SystemExit):
        main(["train", "--resume", uri, "--total-env-steps", "512", "--no-progress"])
    assert f"sacglam: {run / 'metrics.jsonl'} line 2 is not a metrics record" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "--output-dir", "nosuch://bucket/run"], "sacglam: cannot open the storage 'nosuch://bucket/run'"),
        (["train", "--resume", "nosuch://bucket/run"], "sacglam: cannot open the storage 'nosuch://bucket/run'"),
        (["tune", "tune_configs/experiments/figure2.yaml", "--storage", "nosuch://b/t"], "cannot open the storage"),
    ],
)
def test_a_uri_of_an_unknown_scheme_fails_in_one_line_before_anything_runs(argv, expected, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv + (["--agent.model", "tiny-causal", "--no-progress"] if argv[0] == "train" else []))
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "\n" not in error and error.startswith("sacglam: ") and expected in error
    assert "s3://" in error  # what schemes there are


def test_a_bucket_that_does_not_exist_fails_in_one_line_before_anything_runs(s3_server, capsys):
    uri = s3_server("run").replace("sacglam-test-", "no-such-bucket-")
    with pytest.raises(SystemExit) as stop:
        main(["train", "--output-dir", uri, "--agent.model", "tiny-causal", "--no-progress"])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "\n" not in error
    assert error.startswith("sacglam: cannot create the run directory s3://no-such-bucket-") and "--output-dir" in error
