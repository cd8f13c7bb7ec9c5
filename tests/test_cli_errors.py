"""Every subcommand answers a bad input with one line on stderr, `sacglam: <what and how to fix>`,
exit status 2 and no traceback; nothing is run or written before the check."""

import re

import pytest

from sacglam.cli import main

BAD_INPUTS = {
    "evaluate: unknown model": (
        ["evaluate", "--agent.model", "no-such-model", "--policies", "llm-sampled"],
        "no-such-model",
    ),
    "evaluate: unwritable output": (["evaluate", "--output", "/proc/no/such/file.json"], "--output"),
    "train: unknown model": (
        ["train", "--agent.model", "no-such-model", "--output-dir", "{tmp}/run"],
        "built-in model",
    ),
    "train: missing config file": (["train", "--config", "{tmp}/nothing.yaml"], "does not exist"),
    "train: malformed config file": (["train", "--config", "{tmp}/bad.yaml"], "is not valid YAML at line 2"),
    "train: directory as config file": (["train", "--config", "{tmp}"], "cannot read config file"),
    "train: resume of a run with a broken config.json": (["train", "--resume", "{tmp}/broken"], "cannot read"),
    "train: resume of a run whose config.json is not text": (["train", "--resume", "{tmp}/binary"], "cannot read"),
    "train: resume of a run whose config.json is a list": (
        ["train", "--resume", "{tmp}/listed"],
        "does not hold a config",
    ),
    "export: a run whose config.json is not text": (["export", "{tmp}/binary", "{tmp}/out"], "cannot read"),
    "train ppo: unwritable run directory": (
        ["train", "--config", "tune_configs/runs/cpu_simple_ppo.yaml", "--output-dir", "/proc/no/run"],
        "--output-dir",
    ),
    "evaluate: directory as output": (["evaluate", "--output", "{tmp}"], "is a directory"),
    "train: experiment file as config": (
        ["train", "--config", "tune_configs/experiments/warmup.yaml"],
        "is an experiment grid (it has `forms:`), not a run config: run it with `sacglam tune",
    ),
    "train: --config without a file": (["train", "--config"], "--config needs a YAML file"),
    "train: resume of no run": (["train", "--resume", "{tmp}/none"], "--resume takes a directory"),
    "train: unwritable run directory": (
        ["train", "--agent.model", "tiny-causal", "--output-dir", "/proc/no/run"],
        "--output-dir",
    ),
    "tune: missing experiment": (["tune", "{tmp}/nothing.yaml"], "does not exist"),
    "tune: unknown form": (["tune", "tune_configs/experiments/warmup.yaml", "--form", "nope"], "no form 'nope'"),
    "tune: training config as experiment": (
        ["tune", "tune_configs/runs/cpu_simple_sac.yaml"],
        "is a run config, not an experiment grid (it has no `forms:`): train it with `sacglam train --config",
    ),
    "plot: not an experiment": (["plot", "{tmp}"], "sacglam tune"),
    # rejected by the flag parser (its multi-line box becomes one line)
    "train: value out of range": (["train", "--sac.gamma", "2"], "gamma must be in [0, 1], got 2.0"),
    "train: settings that do not fit together": (
        ["train", "--num-envs", "3", "--pipeline.rollout-workers", "2"],
        "split evenly over pipeline.rollout_workers=2",
    ),
    "train: unknown flag": (["train", "--nope", "3"], "Unrecognized options: --nope"),
    "train: a misspelt flag gets the flag it resembles": (
        ["train", "--sac.batch-sise", "64"],
        "Unrecognized options: --sac.batch-sise, 64; did you mean --sac.batch-size?",
    ),
    "train: a misspelt switch gets the switch, then its negation": (
        ["train", "--no-progres"],
        "Unrecognized options: --no-progres; did you mean --no-progress or --progress?",
    ),
    "train: a misspelt environment module, named by flags alone": (
        ["train", "--env.name", "no_such_module:Kitchen", "--output-dir", "{tmp}/run"],
        "sacglam: env.name 'no_such_module:Kitchen': cannot import module 'no_such_module'",
    ),
    "train: a mapping on the command line": (
        ["train", "--env.name", "sacglam.envs.sanity:SayWord", "--env.kwargs", '{"max_steps": 2}'],
        "--env.kwargs is a mapping, set in a run config",
    ),
    "evaluate: a mapping on the command line": (
        ["evaluate", "--env.held-out-kwargs={}"],
        "--env.held-out-kwargs is a mapping, set in a run config",
    ),
    "train: a Ray mapping on the command line": (
        ["train", "--pipeline.resources.node_resources", "{}"],
        "--pipeline.resources.node-resources is a mapping, set in a run config",
    ),
    "train: a mapping's key as a flag": (
        ["train", "--env.kwargs.max_steps", "2"],
        "--env.kwargs is a mapping, set in a run config",
    ),
    "evaluate: a class a package does not have": (
        ["evaluate", "--env.name", "sacglam.envs:Nope"],
        "has no gymnasium.Env class 'Nope' (its classes: PlaygroundText)",
    ),
    "evaluate: a class the module does not have": (
        ["evaluate", "--env.name", "sacglam.envs.sanity:Nope"],
        "has no gymnasium.Env class 'Nope' (its classes: CarryWord, GoalCorridor, GoalTextEnv, SayWord)",
    ),
    "evaluate: a module a package does not have (misspelt)": (
        ["evaluate", "--env.name", "sacglam.envs.sanityy:SayWord"],
        "cannot import module 'sacglam.envs.sanityy' (No module named 'sacglam.envs.sanityy'); package "
        "'sacglam.envs' has ",
    ),
    "evaluate: a class named with a dot for the colon": (
        ["evaluate", "--env.name", "sacglam.envs.sanity.SayWord"],
        "a class is named module:Class: sacglam.envs.sanity:SayWord",
    ),
    "evaluate: a versioned id under a module that does not exist": (
        ["evaluate", "--env.name", "sacglam.envs.sanityy:SayWord-v0"],
        "cannot import module 'sacglam.envs.sanityy'",
    ),
    "evaluate: an environment whose info lists no candidates": (
        ["evaluate", "--env.name", "tests.test_env_spec:NoCandidates", "--episodes", "2"],
        "NoCandidates does not follow the environment protocol: reset: info has no 'candidates'",
    ),
    "train: an environment whose flags are strings": (
        ["train", "--env.name", "tests.broken_envs:StringFlags", "--env.goals", "train", "--output-dir", "{tmp}/run"],
        "StringFlags does not follow the environment protocol: episode 0, step 1: terminated and truncated must be bools",
    ),
    "train: an environment that fails on its own candidate": (
        [
            "train",
            "--env.name",
            "tests.broken_envs:RefusesOwnCandidate",
            "--env.goals",
            "train",
            "--output-dir",
            "{tmp}/run",
        ],
        "raised RuntimeError: the dial has no wait (at broken_envs.py:",
    ),  # fmt: skip
    "train: an environment whose constructor fails": (
        ["train", "--env.name", "tests.broken_envs:BrokenInit", "--output-dir", "{tmp}/run"],
        "constructing it failed (RuntimeError: the dial is not wired, at broken_envs.py:",
    ),
    "train: an environment with a number among its candidates": (
        ["train", "--env.name", "tests.broken_envs:NumberCandidate", "--output-dir", "{tmp}/run"],
        "reset: info['candidates'] must be a non-empty list of non-empty strings, got ['Turn the dial to one', 3, "
        "'Wait']: item 1 is 3 (int)",
    ),
    "train: a class that is no environment": (
        ["train", "--env.name", "tests.broken_envs:NotAnEnv", "--output-dir", "{tmp}/run"],
        "NotAnEnv is a class but not a gymnasium.Env subclass",
    ),
    "train: a zero budget setting is named": (["train", "--eval-every", "0"], "eval_every=0: num_envs"),
    "evaluate: a run directory that does not exist": (["evaluate", "--run", "{tmp}/none"], "none does not exist"),
    "evaluate: a flag that --run decides": (
        ["evaluate", "--run", "{tmp}/none", "--policies", "expert", "--agent.model", "tiny-causal"],
        "--policies, --agent.model do not apply with --run: it evaluates the run's own agent",
    ),
    "train: a config file's env setting its environment never reads": (
        ["train", "--config", "{tmp}/unread.yaml", "--output-dir", "{tmp}/run"],
        "unread.yaml: env.max_steps is a setting of playground-text, babyai-text, textworld, which env.name "
        "'tests.broken_envs:Dial' does not read",
    ),
    "train: a negative learning rate": (
        ["train", "--sac.actor-lr", "-1", "--output-dir", "{tmp}/run"],
        "actor_lr, critic_lr and alpha_lr must be >= 0",
    ),
    "train ppo: a negative learning rate": (
        ["train", "--config", "tune_configs/runs/cpu_simple_ppo.yaml", "--ppo.lr", "-0.1", "--output-dir", "{tmp}/run"],
        "lr must be >= 0 and max_grad_norm > 0, got lr=-0.1",
    ),
    "train: an empty replay buffer": (
        ["train", "--sac.buffer-capacity", "0", "--output-dir", "{tmp}/run"],
        "buffer_capacity must be >= 1 transition, got 0",
    ),
    "train: a batch the buffer cannot hold": (
        ["train", "--sac.batch-size", "1000", "--sac.buffer-capacity", "500", "--output-dir", "{tmp}/run"],
        "batch_size=1000 is more than buffer_capacity=500: learning starts once the buffer holds a batch, so this "
        "run would never train",
    ),
    "train: a misspelt built-in environment": (
        ["train", "--env.name", "playground-txt", "--output-dir", "{tmp}/run"],
        "env.name 'playground-txt' is not an environment here: did you mean 'playground-text'?",
    ),
    "train: an output directory given with --resume": (
        ["train", "--resume", "{tmp}/broken", "--output-dir", "{tmp}/run"],
        "--resume {tmp}/broken continues the run in its own directory, so --output-dir {tmp}/run would not be used",
    ),
    "train: a Ray address where nothing answers": (
        ["train", "--runner", "ray", "--address", "127.0.0.1:9", "--output-dir", "{tmp}/run"],
        "cannot join the Ray cluster at '127.0.0.1:9': nothing answers at 127.0.0.1:9",
    ),
    "evaluate: unknown choice": (["evaluate", "--policies", "foo"], "invalid choice 'foo' for argument '--policies'"),
    "tune: missing argument": (["tune"], "Missing from sacglam tune"),
    "unknown subcommand": (["bogus"], "Unrecognized options: bogus"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_a_bad_input_fails_in_one_line_without_a_traceback(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])
    args, expected = BAD_INPUTS[case]
    (tmp_path / "bad.yaml").write_text("algo: [sac\n")
    (tmp_path / "unread.yaml").write_text("env: {name: 'tests.broken_envs:Dial', max_steps: 10}\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    for name, content in (("binary", b"\xff\xfe{"), ("listed", b"[1, 2]")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_bytes(content)
    with pytest.raises(SystemExit) as stop:
        main([a.replace("{tmp}", str(tmp_path)) for a in args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    message = [line for line in err if line.startswith("sacglam: ")]
    expected = expected.replace("{tmp}", str(tmp_path))
    assert len(message) == 1 and expected in message[0], err
    assert not any("Traceback" in line for line in err)
    assert "---" not in message[0] and "─" not in message[0]  # a box's rules, drawn in dashes off a terminal
    assert not (tmp_path / "run").exists()
    if "environment" in case:  # not a setting the parser could not read: no parser wording, no `--help`
        assert "Error parsing" not in message[0] and "--help" not in message[0], message[0]


def test_a_user_error_raised_in_a_ray_actor_is_found_in_the_text_ray_passes_back():
    from sacglam.envs.protocol import EnvironmentProtocolError
    from sacglam.errors import user_error_in_remote_text

    # an actor that dies in its constructor: Ray's ActorDiedError keeps the remote traceback as text only
    text = (
        "The actor died because of an error raised in its creation task, ray::learner-0:LearnerService.__init__()\n"
        '  File "/x/sacglam/envs/guard.py", line 130, in _fail\n'
        "    raise EnvironmentProtocolError(\n"
        "sacglam.envs.protocol.EnvironmentProtocolError: Dial does not follow the environment protocol: step 1\n"
    )
    assert user_error_in_remote_text(text) == "Dial does not follow the environment protocol: step 1"
    assert user_error_in_remote_text(text.replace("EnvironmentProtocolError:", "KeyError:")) is None
    assert user_error_in_remote_text("builtins.ValueError: not the user's\n") is None
    # a bug raised while the user error was handled ends the text: it is the error, and keeps its traceback
    during = (
        text + "\nDuring handling of the above exception, another exception occurred:\n\n  File ...\nKeyError: 'x'\n"
    )
    assert user_error_in_remote_text(during) is None

    class RemoteError(EnvironmentProtocolError):  # as Ray's RayTaskError subclasses the remote error's class
        def __init__(self, cause):
            super().__init__(f"Traceback (most recent call last):\n  File ...\n{cause}")
            self.cause = cause

    assert RemoteError(EnvironmentProtocolError("the message")).one_line() == "the message"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["train", "--env.name", "tests.broken_envs:Dial", "--env.max-steps", "3"],
         "--env.max-steps is a setting of playground-text, babyai-text, textworld, which env.name "
         "'tests.broken_envs:Dial' does not read: pass the environment's own settings in a run config's env.kwargs"),
        (["evaluate", "--env.name", "tests.broken_envs:Dial", "--env.n-objects=2"], "--env.n-objects is a setting of"),
        (["train", "--env.level", "GoToLocal"], "--env.level is a setting of babyai-text, which env.name "
         "'playground-text' does not read"),
    ],
)  # fmt: skip
def test_an_env_flag_the_environment_never_reads_is_refused(args, expected, capsys, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2 and expected in capsys.readouterr().err


def test_an_error_that_stops_a_progress_bar_starts_a_line_of_its_own(monkeypatch, capsys):
    """`sacglam evaluate` on an environment that breaks mid-evaluation: its bar was open, and the
    message followed the bar's figures on the same line."""
    import sys

    from tqdm.auto import tqdm

    import sacglam.cli
    from sacglam.errors import UserInputError

    def parse_then_fail(args):
        bar = tqdm(total=10, desc="evaluating", leave=False, file=sys.stderr, mininterval=0)
        bar.update(3)
        raise UserInputError("MyEnv, episode 4: step('Wait') raised RuntimeError")

    monkeypatch.setattr(sacglam.cli, "parse", parse_then_fail)
    with pytest.raises(SystemExit):
        main(["evaluate"])
    err = capsys.readouterr().err
    assert "3/10" in err  # the bar was drawn
    before = err[: err.index("sacglam: MyEnv, episode 4")]
    assert before == "" or before[-1] in "\r\n"
    assert before.rstrip("\r\n").rsplit("\r", 1)[-1].strip() == ""  # what the line shows before it: nothing


def test_a_run_that_failed_through_ray_leaves_ray_before_its_line(monkeypatch, capsys):
    """An actor that died of a user's error wrote its own traceback, which Ray streams to the
    terminal after the one line unless the session is left first."""
    import sys
    import types

    import sacglam.cli
    from sacglam.errors import UserInputError

    events = []
    fake_ray = types.SimpleNamespace(is_initialized=lambda: True, shutdown=lambda: events.append("shutdown"))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)

    def fail(args):
        raise UserInputError("MyEnv, episode 2: step('Look around') raised RuntimeError")

    monkeypatch.setattr(sacglam.cli, "parse", fail)
    monkeypatch.setattr(sys.stderr, "write", lambda text, _w=sys.stderr.write: events.append(text) or _w(text))
    with pytest.raises(SystemExit):
        main(["train"])
    said = [e for e in events if e == "shutdown" or e.startswith("sacglam: ")]
    assert said[0] == "shutdown" and said[1].startswith("sacglam: MyEnv, episode 2")


def test_a_box_drawn_in_dashes_reads_as_the_same_line():
    """Where stderr cannot show box characters (an ASCII locale, some CI logs) tyro draws its box
    without borders and with dashes for rules; the line must not carry them."""
    import sys

    from sacglam.cli import UsageError, _one_line_errors

    ascii_box = (
        " Unrecognized options \n ------------------------------ \n"
        "  Unrecognized options: --no-progres          \n  ------------------------------\n"
        "  Perhaps you meant:                          \n      --progress, --no-progress               \n"
        "          Print a progress bar. (default: True)\n  ------------------------------\n"
        "  For full helptext, run sacglam train --help \n"
    )

    def cli(**_):
        sys.stderr.write(ascii_box)
        raise SystemExit(2)

    with pytest.raises(UsageError) as error:
        _one_line_errors("sacglam train", cli, args=["--no-progres"])
    assert str(error.value) == (
        "Unrecognized options: --no-progres; did you mean --no-progress or --progress? "
        "(`sacglam train --help` lists every option)"
    )


def test_an_environment_that_breaks_mid_run_says_what_the_run_kept_and_resume_continues(tmp_path, capsys, monkeypatch):
    """The protocol error names the step's action, and the line goes on with the newest
    checkpoint and the `--resume` command; once the environment is fixed, that command continues
    from that checkpoint."""
    from tests import broken_envs

    run = tmp_path / "run"
    args = ["train", "--env.name", "tests.broken_envs:BreaksLater", "--env.goals", "train", "--output-dir", str(run)]
    args += ["--total-env-steps", "768", "--num-envs", "8", "--eval-episodes", "0", "--warm-start-steps", "0"]
    args += ["--pipeline.checkpoint-every", "128", "--sac.batch-size", "16", "--agent.critic-width", "32"]
    args += ["--agent.tiny-vocabulary", *broken_envs.DIAL_WORDS]  # no random play to collect words (it would break)
    monkeypatch.setattr(broken_envs.BreaksLater, "broken", True)
    with pytest.raises(SystemExit) as stop:
        main([*args, "--no-progress"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    message = [line for line in err if line.startswith("sacglam: ")]
    assert len(message) == 1 and not any("Traceback" in line for line in err), err
    assert "info['candidates'] must be a non-empty list" in message[0] and "the step's action was '" in message[0]
    found = re.search(r"saved up to its newest checkpoint, (step-\d+) \((\d+) env steps\): once fixed, "
                      r"`sacglam train --resume (\S+)` continues from it$", message[0])  # fmt: skip
    assert found and found.group(3) == str(run), message[0]
    assert (run / "checkpoints" / found.group(1)).is_dir() and int(found.group(2)) >= 128
    monkeypatch.setattr(broken_envs.BreaksLater, "broken", False)
    main(["train", "--resume", str(run), "--no-progress"])
    out = capsys.readouterr().out
    assert f"from {found.group(1)}: {found.group(2)} env steps" in out, out
