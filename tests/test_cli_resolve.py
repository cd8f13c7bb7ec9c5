"""The command line's one resolver (`sacglam.cli.resolve`), rule by rule: each row is a command
line, the run config file it names (`{file}`) and the run it resumes or evaluates (`{run}`, whose
config.json holds the config given), and the config it resolves to or the refusal it gets."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from sacglam.cli import parse
from sacglam.cli.resolve import read_flags
from sacglam.config import DEFAULT_WARM_START_STEPS, AgentConfig, EnvConfig, SACConfig, TrainConfig
from sacglam.errors import UserInputError

LISTED = "tests.broken_envs:Listed"  # a protocol environment that lists its words: no random play to collect them
LISTED_WORDS = EnvConfig(name=LISTED).spec().vocabulary()
SIMPLE_RUN = TrainConfig(seed=5, total_env_steps=1_000)  # Playground-Text's simplified task, the tiny model

RESOLVED = {  # rule: (args, file, run, {setting: value} of the config resolved)
    "the flags override the file": (["train", "--config", "{file}", "--seed", "7"], {"seed": 3, "sac": {"batch_size": 64}}, None, {"seed": 7, "sac.batch_size": 64}),
    "a flag at its default still overrides the file": (["train", "--config", "{file}", "--seed", "0"], {"seed": 3}, None, {"seed": 0}),
    "--algo beside a file is read as the file's algo: its method's defaults": (["train", "--config", "{file}", "--algo", "ppo"], {"num_envs": 16}, None, {"algo": "ppo", "agent.critic": "value", "num_envs": 16}),
    "--algo beside a file whose blocks do not fit it takes the flags that fit them": (["train", "--config", "{file}", "--algo", "ppo", "--agent.critic", "value"], {"algo": "sac-her", "agent": {"critic": "action"}}, None, {"algo": "ppo", "agent.critic": "value"}),
    "--algo sac without a file gets SAC-GLAM's settings, as a file naming it does": (["train", "--algo", "sac"], None, None, {"algo": "sac", "sac": SACConfig()}),
    "another --env.name without a file gets the environment's own defaults, not the simplified task's": (["train", "--env.name", LISTED], None, None, {"env": EnvConfig(name=LISTED)}),
    "another --env.name over a file's simplified task gets the train goal set": (["train", "--config", "{file}", "--env.name", LISTED], {"env": {"goals": "simple-train"}}, None, {"env.name": LISTED, "env.goals": "train"}),
    "a flag that changes the model works out the model's defaults again": (["train", "--config", "{file}", "--agent.model", "smollm2-135m"], {"agent": {"model": "tiny-causal"}}, None, {"warm_start_steps": 0, "agent.lora_r": 16, "agent.end_of_action": False, "agent.critic_input_norm": "standardise"}),
    "a flag that changes the environment collects the final environment's words": (["train", "--config", "{file}", "--env.name", LISTED], {"agent": {"model": "tiny-causal"}}, None, {"agent.tiny_vocabulary": LISTED_WORDS, "warm_start_steps": DEFAULT_WARM_START_STEPS}),
    "a default the file sets is kept when a flag changes the model": (["train", "--config", "{file}", "--agent.model", "smollm2-135m"], {"warm_start_steps": 7, "agent": {"lora_r": 0}}, None, {"warm_start_steps": 7, "agent.lora_r": 0}),
    "a default a flag sets is kept when a flag changes the model, in either form": (["train", "--config", "{file}", "--agent.model", "smollm2-135m", "--warm-start-steps=3", "--agent.lora-r", "4"], {}, None, {"warm_start_steps": 3, "agent.lora_r": 4}),
    "--resume DIR starts from the run's saved config, under the flags": (["train", "--resume", "{run}", "--total-env-steps", "2000"], None, SIMPLE_RUN, {"seed": 5, "total_env_steps": 2_000, "resume": "{run}"}),
    "--resume=DIR is --resume DIR": (["train", "--resume={run}"], None, SIMPLE_RUN, {"seed": 5, "resume": "{run}"}),
    "--output-dir naming the resumed run itself is no conflict": (["train", "--resume", "{run}", "--output-dir", "{run}/"], None, SIMPLE_RUN, {"seed": 5}),
    "evaluate --config takes a run config's environment, seed and agent, without its critic": (["evaluate", "--config", "{file}"], {"algo": "sac", "seed": 4, "env": {"max_steps": 5}}, None, {"seed": 4, "env.max_steps": 5, "env.n_objects": 3, "env_given": True, "agent.model": "tiny-causal", "agent.critic": "none"}),
    "evaluate --config takes a file of evaluation settings as they are": (["evaluate", "--config", "{file}"], {"episodes": 8}, None, {"episodes": 8, "env_given": False}),
    "evaluate --run takes the run's environment under the --env flags": (["evaluate", "--run", "{run}", "--env.max-steps", "4"], None, SIMPLE_RUN, {"env": EnvConfig(n_objects=3, goals="simple-train", max_steps=4), "env_given": True}),
    "evaluate --run with a file changes the run's environment by the file's env block only": (["evaluate", "--run", "{run}", "--config", "{file}"], {"env": {"max_steps": 1}, "seed": 9}, SIMPLE_RUN, {"env": EnvConfig(n_objects=3, goals="simple-train", max_steps=1), "seed": 0}),
    "evaluate --run with a file naming another environment takes it over the defaults": (["evaluate", "--run", "{run}", "--config", "{file}"], {"env": {"name": LISTED}}, SIMPLE_RUN, {"env": EnvConfig(name=LISTED)}),
    "evaluate --run keeps --episodes and --output as given, even at their defaults": (["evaluate", "--run", "{run}", "--episodes", "400", "--output", "runs/evaluation.json"], None, SIMPLE_RUN, {"run_episodes": 400, "output_given": True}),
    "evaluate without --run leaves the run-only settings alone": (["evaluate", "--episodes", "400", "--output", "runs/evaluation.json"], None, None, {"run_episodes": None, "output_given": False}),
}  # fmt: skip

REFUSED = {  # rule: (args, file, run, what the one line says)
    "a mapping given as a flag, or a key inside it": (["train", "--env.kwargs.max_steps", "2"], None, None, "--env.kwargs is a mapping, set in a run config"),
    "a Ray mapping given as a flag": (["train", "--pipeline.resources.node-resources={}"], None, None, "--pipeline.resources.node-resources is a mapping"),
    "--config without a file": (["evaluate", "--config"], None, None, "--config needs a YAML file"),
    "--resume without a directory": (["train", "--resume"], None, None, "--resume needs the run directory to continue"),
    "an --output-dir elsewhere than the run --resume continues": (["train", "--resume", "{run}", "--output-dir", "{run}-copy"], None, SIMPLE_RUN, "--resume {run} continues the run in its own directory, so --output-dir {run}-copy would not be used"),
    "an env flag the environment --env.name names never reads": (["train", "--env.name", LISTED, "--env.n-objects=2"], None, None, f"--env.n-objects is a setting of playground-text, babyai-text, which env.name '{LISTED}' does not read"),
    "an env flag the file's environment never reads": (["train", "--config", "{file}", "--env.max-steps", "3"], {"env": {"name": LISTED}}, None, f"--env.max-steps is a setting of playground-text, babyai-text, textworld, which env.name '{LISTED}'"),
    "an env flag the resumed run's environment never reads": (["train", "--resume", "{run}", "--env.level", "GoToLocal"], None, SIMPLE_RUN, "--env.level is a setting of babyai-text, which env.name 'playground-text' does not read"),
    "an env flag the evaluated run's environment never reads": (["evaluate", "--run", "{run}", "--env.tw-games", "2"], None, SIMPLE_RUN, "--env.tw-games is a setting of textworld, which env.name 'playground-text'"),
    "a setting of the file's env block its environment never reads": (["train", "--config", "{file}"], {"env": {"name": LISTED, "max_steps": 10}}, None, "{file}: env.max_steps is a setting of"),
    "a setting of the env block evaluate --run takes that the run's environment never reads": (["evaluate", "--run", "{run}", "--config", "{file}"], {"env": {"level": "GoToLocal"}}, SIMPLE_RUN, "{file}: env.level is a setting of babyai-text"),
    "a setting of an env block naming another environment than the run's that it never reads": (["evaluate", "--run", "{run}", "--config", "{file}"], {"env": {"name": LISTED, "max_steps": 10}}, SIMPLE_RUN, "{file}: env.max_steps is a setting of"),
    "a file without an env block beside evaluate --run": (["evaluate", "--run", "{run}", "--config", "{file}"], {"seed": 3}, SIMPLE_RUN, "--config {file} has no env block"),
    "flags that pick what evaluate --run evaluates": (["evaluate", "--run", "{run}", "--agent.model", "smollm2-135m", "--variants=simple"], None, SIMPLE_RUN, "--variants, --agent.model do not apply with --run"),
    "the goal set --env.goals gives beside another --env.name, kept even where it does not exist": (["train", "--env.name", LISTED, "--env.goals", "test"], None, None, f"env '{LISTED}' has no held-out twin"),
    "--algo beside a file whose blocks do not fit it, without the flags that do": (["train", "--config", "{file}", "--algo", "ppo"], {"agent": {"critic": "action"}}, None, "algo='ppo' needs a value head"),
    "an environment named by flags alone that does not import, without a file's location": (["train", "--env.name", "no_such_module:Kitchen"], None, None, "env.name 'no_such_module:Kitchen': cannot import module"),
}  # fmt: skip


def _command_line(tmp_path: Path, args: list[str], file: dict | None, run: TrainConfig | None) -> list[str]:
    """`args` with `{file}` a YAML file holding `file` and `{run}` a run directory whose config.json is `run`'s."""
    if file is not None:
        (tmp_path / "file.yaml").write_text(yaml.safe_dump(file))
    if run is not None:
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "config.json").write_text(json.dumps(dataclasses.asdict(run), default=str))
    return [a.replace("{file}", str(tmp_path / "file.yaml")).replace("{run}", str(tmp_path / "run")) for a in args]


def _setting(cfg: object, key: str) -> object:
    for name in key.split("."):
        cfg = getattr(cfg, name)
    return cfg


@pytest.mark.parametrize("rule", list(RESOLVED))
def test_a_command_line_resolves_to_the_config_its_rule_gives(rule, tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    args, file, run, expected = RESOLVED[rule]
    cfg = parse(_command_line(tmp_path, args, file, run))
    for key, value in expected.items():
        value = value.replace("{run}", str(tmp_path / "run")) if isinstance(value, str) else value
        assert _setting(cfg, key) == value, key


@pytest.mark.parametrize("rule", list(REFUSED))
def test_a_command_line_a_rule_refuses_fails_in_one_line_saying_why(rule, tmp_path, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    args, file, run, expected = REFUSED[rule]
    with pytest.raises(UserInputError) as error:
        parse(_command_line(tmp_path, args, file, run))
    expected = expected.replace("{file}", str(tmp_path / "file.yaml")).replace("{run}", str(tmp_path / "run"))
    assert expected in error.value.one_line(), error.value.one_line()
    if "without a file's location" in rule:
        assert error.value.one_line().startswith(expected)


def test_the_flags_are_read_with_their_values_in_either_form_and_negations_name_their_setting():
    flags = read_flags(["--config", "f.yaml", "--env.max-steps=3", "--sac.no-her", "--agent.tiny-vocabulary", "a", "b"])
    assert [(f.typed, f.key, f.value) for f in flags.named] == [
        ("--config", "config", "f.yaml"),
        ("--env.max-steps", "env.max_steps", "3"),
        ("--sac.no-her", "sac.her", None),
        ("--agent.tiny-vocabulary", "agent.tiny_vocabulary", "a"),
    ]
    assert flags.args == ("--env.max-steps=3", "--sac.no-her", "--agent.tiny-vocabulary", "a", "b")  # no --config FILE
    assert [f.key for f in flags.given("env")] == ["env.max_steps"] and flags.value("sac.her") is None
    assert read_flags(["--seed", "1", "--seed=2"]).value("seed") == "2"  # the last one, as the parser takes it
    assert read_flags(["--config=f.yaml", "--seed", "1"]).args == ("--seed", "1")


def test_a_tiny_run_resumed_with_its_own_words_keeps_them(tmp_path):
    """A resumed run's config is its own: nothing worked out again (its words, its warm start)."""
    run = TrainConfig(agent=AgentConfig(model="tiny-causal", critic_width=256, tiny_vocabulary=("a", "b")))
    cfg = parse(_command_line(tmp_path, ["train", "--resume", "{run}", "--seed", "3"], None, run))
    assert cfg.agent.tiny_vocabulary == ("a", "b") and cfg.seed == 3
