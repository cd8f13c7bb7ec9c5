"""Checkpoints that detect their own damage: each is sealed with a manifest of its files' sizes and
checksums; a resume skips a damaged one for the newest intact one with a one-line warning (and sets
it aside), and fails in one line naming the damaged files when none is intact. Every kind of file a
checkpoint holds (learner, replay snapshot, rollout workers, driver counters, goal sampler) is
truncated, deleted and garbled in turn."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from sacglam.cli import main
from sacglam.config import GoalSamplerConfig, PipelineConfig, TrainConfig
from sacglam.pipeline.run import RunDirectoryError, run_pipeline
from sacglam.runtime.checkpoint import COMPLETE, MANIFEST, CheckpointStore, file_digest
from tests.helpers import tiny_pipeline_config

KINDS = {  # what each part of a checkpoint is called in it
    "learner": "learner.pt",
    "workers": "workers.pkl",
    "driver": "driver.json",
    "goal sampler": "goal_sampler.pt",
    "replay": "replay",  # a directory of Arrow files
}


def config(tmp_path, name: str) -> TrainConfig:
    """SAC-GLAM+HER with its own goal sampler, so that a checkpoint holds every kind of file."""
    return tiny_pipeline_config(
        tmp_path,
        name,
        goal_sampler=GoalSamplerConfig(mode="progress"),
        total_env_steps=256,
        pipeline=PipelineConfig(rollout_workers=2, checkpoint_every=128),
    )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A run that kept two checkpoints (at 128 and 256 env steps)."""
    cfg = config(tmp_path_factory.mktemp("checkpoints"), "run")
    run_pipeline(cfg, announce=lambda _: None)
    return cfg.output_dir


@pytest.fixture
def run_copy(finished_run, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(finished_run, target)
    return target


def damage_file(checkpoint, kind: str, how: str) -> str:
    """Damage the `kind` file of `checkpoint` (`truncated`, `missing` or `garbled`: same size,
    other bytes); returns its name in the manifest."""
    checkpoint = Path(checkpoint)  # a local one (a StoragePath names its local path)
    path = checkpoint / KINDS[kind]
    if path.is_dir():
        path = max(p for p in path.rglob("*") if p.is_file())
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:100] if len(data) > 100 else data[:-1])
    elif how == "missing":
        path.unlink()
    else:
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    return path.relative_to(checkpoint).as_posix()


def test_a_checkpoint_is_sealed_with_a_manifest_of_every_file(finished_run):
    store = CheckpointStore(finished_run / "checkpoints")
    newest, skipped = store.latest_intact()
    assert newest is not None and newest.name == "step-000000256" and not skipped
    files = json.loads((newest / MANIFEST).read_text())["files"]
    assert {name.split("/")[0] for name in files} == set(KINDS.values())
    assert all(entry["bytes"] > 0 and len(entry["sha256"]) == 64 for entry in files.values())
    assert (newest / COMPLETE).read_text().split() == ["256", file_digest(newest / MANIFEST)]  # sealed last


@pytest.mark.parametrize("how", ["truncated", "missing", "garbled"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_damaged_file_of_any_kind_makes_its_checkpoint_skipped_for_the_one_before(run_copy, kind, how):
    store = CheckpointStore(run_copy / "checkpoints")
    newest = store.latest()
    assert newest is not None
    name = damage_file(newest, kind, how)
    intact, skipped = store.latest_intact()
    assert intact is not None and intact.name == "step-000000128"
    assert [path for path, _ in skipped] == [newest]
    assert (
        name in skipped[0][1]
        and {"truncated": "bytes where", "missing": "is missing", "garbled": "checksum"}[how] in skipped[0][1]
    )


@pytest.mark.parametrize("kind", ["learner", "replay"])
def test_a_resume_falls_back_to_the_newest_intact_checkpoint_with_a_one_line_warning(run_copy, capsys, kind):
    """Every component restores the fallback: the learner and counters (driver), the replay actor
    (its transitions are the older checkpoint's)."""
    from sacglam.replay_actor.buffer import ReplayBuffer

    checkpoints = run_copy / "checkpoints"
    env = config(run_copy.parent, "unused").env.spec()
    transitions_at_128 = len(ReplayBuffer.load(checkpoints / "step-000000128" / "replay", env=env))
    name = damage_file(checkpoints / "step-000000256", kind, "truncated")  # a full disk at the last checkpoint
    messages: list[str] = []
    cfg = replace(config(run_copy.parent, "unused"), resume=run_copy, total_env_steps=384)
    run_pipeline(cfg, announce=messages.append)
    warning = capsys.readouterr().err.strip()
    assert "\n" not in warning and warning.startswith("sacglam: warning: checkpoint step-000000256 is damaged")
    assert f"({name} has " in warning and "resuming from step-000000128" in warning
    resumed = next(m for m in messages if "resumed" in m)
    assert "128 env steps" in resumed and f"{transitions_at_128} transitions in storage" in resumed
    assert (checkpoints / "damaged-step-000000256").is_dir()  # kept for inspection
    assert CheckpointStore(checkpoints).latest().name == "step-000000384"
    rows = [json.loads(line) for line in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] >= 384


def test_a_resume_with_no_intact_checkpoint_fails_in_one_line_naming_the_damaged_files(run_copy, capsys):
    checkpoints = run_copy / "checkpoints"
    damage_file(checkpoints / "step-000000256", "replay", "garbled")
    damage_file(checkpoints / "step-000000128", "driver", "missing")
    before = sorted(p.name for p in checkpoints.iterdir())
    with pytest.raises(SystemExit) as stop:
        main(["train", "--resume", str(run_copy), "--no-progress"])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and error.startswith("sacglam: ") and "holds no intact checkpoint" in error
    assert "step-000000256: replay/" in error and "does not match its checksum" in error
    assert "step-000000128: driver.json is missing" in error
    assert sorted(p.name for p in checkpoints.iterdir()) == before  # nothing was changed


def test_a_checkpoint_written_before_manifests_is_taken_as_it_is(run_copy):
    store = CheckpointStore(run_copy / "checkpoints")
    newest = store.latest()
    assert newest is not None
    (newest / MANIFEST).unlink()
    (newest / COMPLETE).write_text("256")  # the old seal: the step alone
    assert store.latest_intact() == (newest, []) and store.latest() == newest


@pytest.mark.parametrize("how", ["missing", "garbled", "truncated"])
def test_a_damaged_manifest_is_damage_not_an_old_checkpoint(run_copy, how):
    """The seal holds the manifest's checksum: a checkpoint that lost or changed its manifest is
    not taken for one written before manifests existed."""
    store = CheckpointStore(run_copy / "checkpoints")
    newest = store.latest()
    assert newest is not None
    manifest = newest / MANIFEST
    if how == "missing":
        manifest.unlink()
    elif how == "garbled":
        manifest.write_text(manifest.read_text().replace('"bytes": ', '"bytes": 1', 1))
    else:
        manifest.write_text(manifest.read_text()[:50])
    intact, skipped = store.latest_intact()
    assert intact is not None and intact.name == "step-000000128"
    assert MANIFEST in skipped[0][1]
    assert store.latest() == intact  # the cheap check sees it too


def test_a_fresh_run_over_damaged_checkpoints_is_still_refused(run_copy):
    damage_file(run_copy / "checkpoints" / "step-000000256", "workers", "missing")
    with pytest.raises(RunDirectoryError, match="already holds a run's checkpoints"):
        run_pipeline(config(run_copy.parent, "run"), announce=lambda _: None)


def test_the_store_remembers_verdicts_only_for_the_checkpoints_it_keeps(tmp_path):
    from sacglam.runtime import checkpoint as checkpoint_module

    store = CheckpointStore(tmp_path / "checkpoints", keep=2)
    for env_steps in range(0, 10 * 64, 64):
        tmp = store.begin(env_steps)
        (tmp / "learner.pt").write_bytes(bytes([env_steps % 251]) * 16)
        store.commit(tmp, env_steps)
        assert store.latest_intact()[0] == store.root / f"step-{env_steps:09d}"
    remembered = [path for path in checkpoint_module._checked if path.path.startswith(store.root.path)]
    assert sorted(p.name for p in remembered) == ["step-000000512", "step-000000576"]


def test_resuming_a_complete_run_changes_nothing_and_says_how_to_train_it_further(run_copy, capsys):
    """With status 0: a job script that resumes until the run is done ends there."""
    (run_copy / "report.md").write_text("# the report `sacglam train` wrote at the end\n")
    metrics = (run_copy / "metrics.jsonl").read_bytes()
    main(["train", "--resume", str(run_copy), "--no-progress"])  # returns: no SystemExit(2)
    assert (run_copy / "report.md").read_text() == "# the report `sacglam train` wrote at the end\n"
    message = capsys.readouterr().err
    assert "is complete: it ended at its budget, 256 env steps" in message and "larger --total-env-steps" in message
    assert (run_copy / "metrics.jsonl").read_bytes() == metrics  # no duplicated records


def test_a_complete_run_stopped_before_its_final_files_gets_them_from_its_resume(run_copy, capsys):
    """Killed between its final checkpoint and `learner.pt` (and the report): the resume, which
    has nothing to train, writes them from that checkpoint and the metrics."""
    (run_copy / "learner.pt").unlink()
    main(["train", "--resume", str(run_copy), "--no-progress"])
    final = run_copy / "checkpoints" / "step-000000256" / "learner.pt"
    assert (run_copy / "learner.pt").read_bytes() == final.read_bytes()
    assert "| success (all goal types) | before | after |" in (run_copy / "report.md").read_text()
    assert "final files were not all written" in capsys.readouterr().out


def test_only_the_final_checkpoint_of_a_run_that_reached_its_budget_counts_as_complete(tmp_path):
    from sacglam.pipeline.run import finished_at
    from sacglam.runtime.storage import StoragePath

    def saved(**counters):
        (tmp_path / "driver.json").write_text(json.dumps(counters))
        return StoragePath(tmp_path)

    assert finished_at(saved(env_steps=256, finished=True), 256) == 256
    assert finished_at(saved(env_steps=256, finished=True), 512) is None  # resumed with a larger budget
    # a checkpoint at the budget written before the updates owed there and the final evaluation
    # (a run killed in between), a run stopped early or at a time limit, a checkpoint from before the flag
    assert finished_at(saved(env_steps=256, finished=False), 256) is None
    assert finished_at(saved(env_steps=256), 256) is None
    # an on-policy run's dropped steps do not count towards its budget, as its schedule does not count them
    assert finished_at(saved(env_steps=300, discarded_env_steps=60, finished=True), 256) is None


def _files(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--agent.critic-width", "64"], "agent.critic_width 32 -> 64"),
        (["--config", "tune_configs/runs/cpu_simple_ppo.yaml"], 'algo "sac-her" -> "ppo"'),
    ],
    ids=["critic width", "algorithm"],
)
def test_a_resume_whose_settings_build_another_agent_fails_in_one_line_and_changes_nothing(
    run_copy, capsys, flags, named
):
    before = _files(run_copy)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--resume", str(run_copy), "--total-env-steps", "384", "--no-progress", *flags])
    assert exit_.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"sacglam: cannot resume {run_copy} with these settings: its checkpoint step-000000256")
    assert "trainable state does not fit this agent" in line and named in line and "records are kept" in line
    assert _files(run_copy) == before  # the metrics and TensorBoard files too: the check comes first


def test_a_resume_reads_past_a_record_cut_short_by_a_crash_and_replaces_it(run_copy):
    """A full disk (or a power loss) leaves the last record without its end: the resume drops it
    (and every record past the checkpoint), rewriting the file whole."""
    damage_file(run_copy / "checkpoints" / "step-000000256", "learner", "truncated")
    with (run_copy / "metrics.jsonl").open("a") as f:
        f.write('{"env_steps": 256, "loss/cri')
    main(["train", "--resume", str(run_copy), "--no-progress"])
    records = [json.loads(line) for line in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 256 and not (run_copy / "metrics.jsonl.tmp").exists()


def test_a_damaged_line_amid_the_records_is_named_in_one_line(run_copy, capsys):
    lines = (run_copy / "metrics.jsonl").read_text().splitlines(keepends=True)
    lines[1] = "not a record\n"
    (run_copy / "metrics.jsonl").write_text("".join(lines))
    with pytest.raises(SystemExit):
        main(["train", "--resume", str(run_copy), "--total-env-steps", "384", "--no-progress"])
    assert "metrics.jsonl line 2 is not a metrics record ('not a record')" in capsys.readouterr().err


def test_a_run_logs_one_training_record_at_its_budget(finished_run):
    """The record after the updates owed at the budget, not one before them as well."""
    records = [json.loads(line) for line in (Path(finished_run) / "metrics.jsonl").read_text().splitlines()]
    at_budget = [r for r in records if r["env_steps"] == 256 and "train/success" in r]
    assert len(at_budget) == 1


@pytest.mark.parametrize(
    "files",
    [{"config.json": '{"my": "settings"}', "report.md": "# my notes"}, {"metrics.jsonl": "x", "train.log": ""}],
    ids=["a config.json not a run's", "records without a config"],
)
def test_a_fresh_run_refuses_a_folder_holding_files_a_run_would_overwrite(tmp_path, capsys, files):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(SystemExit):
        main(["train", "--agent.model", "tiny-causal", "--total-env-steps", "64", "--output-dir", str(folder)])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{folder} already holds " in line and "not written by a run" in line and "nothing was changed" in line
    assert {p.name: p.read_text() for p in folder.iterdir()} == files


def test_a_fresh_run_writes_beside_other_files_and_over_an_earlier_attempt(tmp_path, finished_run):
    """A log the command's output goes to (`... | tee DIR/train.log`), a `.gitkeep`: the run's
    files do not touch them; an earlier attempt's files (a run's config.json) are its own."""
    from sacglam.run_directory import refuse_foreign_files
    from sacglam.runtime.storage import StoragePath

    folder = tmp_path / "mine"
    (folder / "checkpoints").mkdir(parents=True)
    for name in ("train.log", ".gitkeep", "notes.txt"):
        (folder / name).write_text(f"{name} kept")
    refuse_foreign_files(StoragePath(folder))  # returns: the run may write here
    before = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    assert before == {name: f"{name} kept" for name in ("train.log", ".gitkeep", "notes.txt")}
    for name in ("config.json", "metrics.jsonl"):
        shutil.copy(Path(finished_run) / name, folder / name)
    refuse_foreign_files(StoragePath(folder))  # an earlier attempt's own files: allowed too
    after = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    assert after == before | {n: (Path(finished_run) / n).read_text() for n in ("config.json", "metrics.jsonl")}
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["checkpoints"]  # the check changed nothing
