"""Defaults that explore an environment never seen (`docs/guides/own-environment.md`, "In a run"): the
environments of `tests/foreign_envs.py` are written as a user outside this project writes them,
and plugged in with no setting but their name.

- The warm start runs until the policy is near uniform on random play's states (a stated measure
  and target), whatever the candidates' lengths and shared prefixes; it stops there.
- Candidates that are prefixes of others: without an end-of-action token no policy over them can
  be uniform (a property of any LM), with it the warm start gets there.
- A warm start that ends far from uniform warns in one line naming the likely cause; so does an
  off-policy run that has collected no learning signal after 10% of its budget, and its report.
- A newcomer's command line: `sacglam train --env.name module:Class`, nothing else.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
import torch

from sacglam.config import DEFAULT_WARM_START_TARGET_KL, AgentConfig, EnvConfig, SACConfig, TrainConfig
from sacglam.models.agent import GLAMAgent
from sacglam.models.warm_start import exploration_measure, language_warm_start, random_transcript
from sacglam.pipeline.run import run_pipeline
from tests.foreign_envs import Workbench

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ("tests.foreign_envs:Pantry", "tests.foreign_envs:Workbench", "tests.foreign_envs:Lamps")

# The newcomer's run: Pantry, the tiny model, every default (SAC-GLAM+HER), evaluated on 256 fixed
# episodes every 1,024 env steps (sampled and greedy), against uniform-random play on the same
# episodes. Margins over seeds and kernel sets: benchmarks/suite/test_margins.py, docs/development/testing.md.
NEWCOMER_ENV = "tests.foreign_envs:Pantry"
NEWCOMER_BUDGET = 4096
NEWCOMER_EPISODES = 256
NEWCOMER_MIN_UNTRAINED_RATIO = 0.8  # the untrained (warm-started) policy's sampled success / random's
# Seeds 0-2 under three kernel sets (AVX-512, AVX2, ATen's default): the ratio 0.84-1.02 (256
# episodes each way: the ratio's standard error is about 0.1), the gain 0.11-0.18 (a 6-step task
# the tiny model learns slowly: best greedy 0.34-0.38 against random's 0.20-0.24 by 4,096 env
# steps). Seed 0, the test's: 1.00 and 0.18 under all three.
NEWCOMER_MIN_GAIN = 0.05  # the best later greedy success, above random's


def default_agent(env_name: str, **agent) -> tuple[TrainConfig, GLAMAgent]:
    cfg = TrainConfig(env=EnvConfig(name=env_name, goals="train"), agent=AgentConfig(model="tiny-causal", **agent))
    torch.manual_seed(cfg.seed)
    return cfg, GLAMAgent(cfg.agent).eval()


@pytest.mark.parametrize("env_name", FOREIGN)
def test_the_default_warm_start_stops_once_the_policy_is_near_uniform(env_name, torch_threads):
    """The stopping rule itself: a warm start that stops before its cap has reached the target on
    the measure it states (re-measured here on the same states), and one step less would not have
    been checked; every environment here gets there well inside the cap (measured: 30-60 steps)."""
    torch_threads(1)
    cfg, agent = default_agent(env_name)
    before = exploration_measure(agent, *random_transcript(cfg.env, 256, seed=1)[:2])
    metrics = language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps or 0, target_kl=cfg.warm_start_target_kl)
    after = exploration_measure(agent, *random_transcript(cfg.env, 256, seed=1)[:2])  # other states than its own
    assert before.kl_to_uniform > 3 and before.largest_probability > 0.9  # the short-action bias to remove
    assert metrics["warm_start/steps"] < cfg.warm_start_steps / 2 and metrics["warm_start/steps"] % 10 == 0
    assert metrics["warm_start/kl_to_uniform"] <= DEFAULT_WARM_START_TARGET_KL
    assert after.kl_to_uniform < 5 * DEFAULT_WARM_START_TARGET_KL  # and on states it did not train on
    assert after.largest_probability < 1.5 * after.uniform_largest_probability


def test_without_an_end_token_a_prefix_outscores_each_of_its_continuations():
    """Sum-of-log-prob scoring without an end token: `Look` scores at least as high as `Look at the
    bench` under any weights (each extra token adds a log-probability <= 0), so pi(`Look`) >= 1/2 of
    the pair whatever training does. With the end token the order is the model's to choose."""
    env = Workbench()
    observation, info = env.reset(seed=0)
    candidates = info["candidates"]
    prefixes = [(a, b) for a in candidates for b in candidates if a != b and b.startswith(a + " ")]
    assert len(prefixes) == 7  # Look / Look at the bench, Paint the <part> / its 3 colours, twice
    for seed in range(5):
        scores = {}
        for end_of_action in (False, True):
            torch.manual_seed(seed)
            agent = GLAMAgent(AgentConfig(model="tiny-causal", tiny_vocabulary=words(), end_of_action=end_of_action))
            with torch.no_grad():
                scores[end_of_action] = agent.candidate_scores(agent.encode([observation], [candidates])).log_likelihood
        score = dict(zip(candidates, scores[False].tolist()))
        assert all(score[a] >= score[b] for a, b in prefixes)
        assert (scores[True] < scores[False]).all()  # the same weights, one more token scored: log P(end) < 0
    cfg, agent = default_agent("tests.foreign_envs:Workbench", end_of_action=False)
    metrics = language_warm_start(agent, cfg.env, steps=100, target_kl=cfg.warm_start_target_kl)
    assert metrics["warm_start/steps"] == 100 and metrics["warm_start/kl_to_uniform"] > 0.05  # 0.12 at 300 steps


def words() -> tuple[str, ...]:
    from sacglam.envs.words import collect_words

    return tuple(collect_words(Workbench))


def test_a_warm_start_that_cannot_reach_uniform_warns_naming_the_cause(tmp_path):
    """LoRA on the random tiny model (what `lora_r: 16` in a user's file gives) cannot reshape its
    output: in 100 steps, where every weight training reaches the target in 30-60, the warm start
    stays far from uniform (measured: mean KL 2.3 nats on Lamps), and the run says so in one line
    that names `agent.lora_r`, and its report shows the measure."""
    said: list[str] = []
    cfg = TrainConfig(
        env=EnvConfig(name="tests.foreign_envs:Lamps", goals="train"),
        agent=AgentConfig(model="tiny-causal", lora_r=16, critic_width=32),
        sac=SACConfig.with_her(batch_size=16, random_steps=64),
        num_envs=8,
        total_env_steps=64,
        eval_episodes=0,
        warm_start_steps=100,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    run_pipeline(cfg, announce=said.append)
    warnings = [line for line in said if line.startswith("warning:")]
    assert len(warnings) == 1 and "\n" not in warnings[0], said
    assert "after 100 warm-start steps" in warnings[0] and "agent.lora_r" in warnings[0]
    warm = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert warm["warm_start/kl_to_uniform"] > 1.0
    from sacglam.report import write_report

    assert "Warm start: 100 steps" in write_report(tmp_path / "run").read_text()


def test_the_warm_start_line_claims_near_uniform_only_against_its_target():
    from sacglam.models.warm_start import warm_start_line

    def line(kl, largest, target):
        metrics = {
            "warm_start/kl_to_uniform": kl,
            "warm_start/largest_probability": largest,
            "warm_start/uniform_largest_probability": 0.2,
            "warm_start/steps": 40,
        }
        return warm_start_line(metrics, target, AgentConfig(model="tiny-causal"))

    assert "is near uniform" in line(0.01, 0.22, 0.02)
    fixed = line(0.487, 0.37, None)  # the demo's 300 fixed steps: not near uniform, not degenerate either
    assert (
        fixed.startswith("warm start: 40 steps;") and "near uniform" not in fixed and "0.487 nats, no target" in fixed
    )
    assert line(0.5, 0.3, 0.02).startswith("warning: after 40 warm-start steps")
    assert line(2.3, 0.9, None).startswith("warning: after 40 warm-start steps")


class Desert(gymnasium.Env):
    """Nothing an agent does here is ever rewarded, and no goal is ever reported."""

    observation_space = gymnasium.spaces.Text(max_length=100)
    action_space = gymnasium.spaces.Text(max_length=20)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return "Goal: find water\nSand everywhere.\nAction:", self._info()

    def _info(self):
        return {"candidates": ["Walk north", "Walk south", "Wait"], "goal": "find water", "achieved_goals": []}

    def step(self, action):
        self.t += 1
        return "Goal: find water\nSand everywhere.\nAction:", 0.0, False, self.t >= 4, self._info()


def quiet_sac_run(tmp_path, env_name: str, total_env_steps: int, **changes) -> list[str]:
    """A short SAC run of the tiny model without warm start or evaluation (the run's lines, as
    announced): what the checks for a run without learning signal or reports need."""
    cfg = TrainConfig(
        env=EnvConfig(name=env_name, goals="train"),
        agent=AgentConfig(model="tiny-causal", critic_width=32),
        **({"sac": SACConfig.with_her(batch_size=16, random_steps=64)} | changes),
        num_envs=8,
        total_env_steps=total_env_steps,
        eval_episodes=0,
        warm_start_steps=0,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    said: list[str] = []
    run_pipeline(cfg, announce=said.append)
    return said


def test_an_off_policy_run_without_a_learning_signal_says_so_once(tmp_path):
    said = quiet_sac_run(tmp_path, "tests.test_exploration:Desert", 2048, log_every=512)
    lines = [line for line in said if "without a rewarded step" in line]
    assert len(lines) == 1, said
    found = re.match(r"warning: (\d+) env steps \((\d+)% of the budget, (\d+) episodes\)", lines[0])
    assert found, lines[0]
    step, share, episodes = map(int, found.groups())
    # at the first chunk past both 10% of 2,048 env steps and 50 episodes (of 4 steps, 8 at a time)
    assert 205 <= step < 205 + 64 and share in (10, 11, 12) and 50 <= episodes < 50 + 16
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["explore/no_signal_env_steps"] for r in records if "explore/no_signal_env_steps" in r] == [step]
    from sacglam.report import write_report

    assert f"No learning signal by env step {step}" in write_report(tmp_path / "run").read_text()
    # the line says that no goal was reported to relabel either: no second line for it
    assert "and no goal reported to relabel" in lines[0] and not [line for line in said if "none was reported" in line]


def test_a_relabeling_run_whose_environment_reports_no_goal_says_so_once(tmp_path):
    """NoReports pays its reward but never fills `info['achieved_goals']`: SAC-GLAM+HER then has
    nothing to relabel with, which it says once, in the metrics and in the report."""
    said = quiet_sac_run(tmp_path, "tests.broken_envs:NoReports", 512)
    unreported = [line for line in said if "relabels episodes with the goals the environment reports" in line]
    assert len(unreported) == 1 and not [line for line in said if "without a rewarded step" in line], said
    step = int(re.search(r"none was reported in (\d+) env steps", unreported[0]).group(1))
    assert step >= 0.1 * 512
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["explore/no_report_env_steps"] for r in records if "explore/no_report_env_steps" in r] == [step]
    from sacglam.report import write_report

    assert f"No goal reported for relabeling by env step {step}" in write_report(tmp_path / "run").read_text()


HELD_OUT_CASES = {  # (environment, its kwargs, its held-out twin's, relabeling): whether the run must say it
    "a held-out goal reported": ("HeldOutDial", {"leaks": True}, {"split": "test"}, True, True),
    "a correct twin": ("HeldOutDial", {"leaks": False}, {"split": "test"}, True, False),
    "a twin that holds out no goal": ("Dial", {}, {"max_steps": 5}, True, False),
    "an environment that says its twin holds out no goal": ("HeldOutMaps", {}, {"split": "test"}, True, False),
    "no relabeling, no goal sampler": ("HeldOutDial", {"leaks": True}, {"split": "test"}, False, False),
}


@pytest.mark.parametrize("case", list(HELD_OUT_CASES))
def test_a_held_out_goal_reported_in_training_is_said_once(case, tmp_path):
    """HeldOutDial holds "Reach three" out; with `leaks` its train split still reports it. The run
    learns its held-out and train goals from the evaluation's episodes (a protocol environment has
    no goal list) and says so once, in a line, the metrics and the report, when the run trains on
    reported goals; never for a correct twin, a twin that shares every goal with the train
    environment (it holds out something else), or a run that does not use reports."""
    name, kwargs, held_out_kwargs, her, said_once = HELD_OUT_CASES[case]
    cfg = TrainConfig(
        env=EnvConfig(name=f"tests.broken_envs:{name}", kwargs=kwargs, held_out_kwargs=held_out_kwargs),
        agent=AgentConfig(model="tiny-causal", critic_width=32),
        algo="sac-her" if her else "sac",
        sac=(SACConfig.with_her if her else SACConfig)(batch_size=16, random_steps=64),
        num_envs=8,
        total_env_steps=256,
        eval_episodes=8,
        eval_modes=("greedy",),
        warm_start_steps=0,
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    said: list[str] = []
    run_pipeline(cfg, announce=said.append)
    lines = [line for line in said if "a goal of its held-out goal set" in line]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["explore/held_out_reported_env_steps"] for r in records if "explore/held_out_reported_env_steps" in r]
    assert any(r.get("train/episodes", 0) >= 20 for r in records)  # reports came: "Reach three" is 1 turn away
    from sacglam.report import write_report

    report = write_report(tmp_path / "run").read_text()
    if not said_once:
        assert not lines and not steps and "held-out goal was reported" not in report, said
        return
    assert len(lines) == 1 and "'Reach three'" in lines[0], said
    step = int(re.search(r"by env step (\d+)", lines[0]).group(1))
    assert steps == [step] and f"A held-out goal was reported in training by env step {step}" in report


@pytest.mark.parametrize("algo", ["sac", "sac-her"])
def test_a_run_with_a_signal_never_says_it_has_none(algo, tmp_path):
    """Random play on Pantry puts something in a container within 6 steps: a reward for SAC-GLAM,
    and partner reports too for SAC-GLAM+HER."""
    sac = (
        SACConfig.with_her(batch_size=16, random_steps=64)
        if algo == "sac-her"
        else SACConfig(batch_size=16, random_steps=64)
    )
    # 512 env steps: past 10% of it and 50 episodes, where a run without a signal would be told
    said = quiet_sac_run(tmp_path, "tests.foreign_envs:Pantry", 512, algo=algo, sac=sac)
    assert not [line for line in said if "without a rewarded step" in line or "none was reported" in line]
    last = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["train/episodes"] >= 50  # the check had its chance
    assert "explore/no_signal_env_steps" not in (tmp_path / "run" / "metrics.jsonl").read_text()


def test_a_newcomer_names_the_environment_and_nothing_else(tmp_path):
    """`sacglam train --env.name module:Class` from the folder holding the module (the `sacglam`
    command does not put it on sys.path): the goal set becomes the environment's own (the default
    run's `simple-train` is Playground-Text's), the LoRA rank the random model's (0), and the run
    trains; a module that is not there fails in one line."""
    flags = ["--total-env-steps", "64", "--eval-episodes", "0", "--warm-start-steps", "20", "--no-progress"]
    command = [str(Path(sys.executable).parent / "sacglam"), "train", "--env.name", "tests.foreign_envs:Pantry"]
    done = subprocess.run(
        [*command, *flags, "--output-dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["env"]["goals"] == "train" and saved["agent"]["lora_r"] == 0 and saved["agent"]["end_of_action"]
    warm = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    said = [line for line in done.stdout.splitlines() if line.startswith(("warm start:", "warning: after"))]
    assert len(said) == 1, done.stdout  # the measure on the console, whichever way it ended
    assert f"{int(warm['warm_start/steps'])} " in said[0] and f"{warm['warm_start/kl_to_uniform']:.3g} nats" in said[0]
    missing = subprocess.run(
        [*command[:-1], "no_such_module:Env", *flags], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "cannot import module" in missing.stderr


def test_untrained_policy_probability_of_the_short_action_before_and_after():
    """The bias the warm start removes, on Pantry's states: `Wait` (1 word) against `Put the <object>
    in the <container>` (6 words) before; after the default warm start no candidate above twice
    uniform on any of 64 states."""
    cfg, agent = default_agent("tests.foreign_envs:Pantry")
    env = cfg.env.make()
    rng, observations, candidates = random.Random(3), [], []
    obs, info = env.reset(seed=3)
    for _ in range(64):
        observations.append(obs)
        candidates.append(info["candidates"])
        obs, _, terminated, truncated, info = env.step(rng.choice(info["candidates"]))
        if terminated or truncated:
            obs, info = env.reset(seed=rng.randrange(1000))
    with torch.no_grad():
        before = agent(agent.encode(observations, candidates), with_critic=False).probs
    language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps or 0, target_kl=cfg.warm_start_target_kl)
    with torch.no_grad():
        after = agent(agent.encode(observations, candidates), with_critic=False)
    wait = [c.index("Wait") for c in candidates]
    assert min(before[i, w] for i, w in enumerate(wait)) > 0.9
    k = after.mask.sum(-1, keepdim=True)
    assert (after.probs * k).max() < 2.0


def newcomer_run(seed: int, output_dir: Path, budget: int = NEWCOMER_BUDGET, stop_at_gain: float | None = None) -> dict:
    """Train on Pantry with every default but the budget and the evaluation's size and cadence;
    returns the curve [(env steps, sampled, greedy)], uniform-random play's success on the same
    episodes, the untrained policy's sampled success over random's, and the best later greedy
    success minus random's. With `stop_at_gain`, the run ends at the first later evaluation whose
    greedy success is that far above random's (the gain is decided there)."""
    from sacglam.evaluation import EVAL_SEED_OFFSET, episode_specs, run_episodes
    from sacglam.policies import RandomPolicy

    cfg = TrainConfig(
        env=EnvConfig(name=NEWCOMER_ENV, goals="train"),
        seed=seed,
        total_env_steps=budget,
        eval_every=1024,
        eval_episodes=NEWCOMER_EPISODES,
        output_dir=str(output_dir),
        progress=False,
    )
    specs = episode_specs(cfg.env, NEWCOMER_EPISODES, seed + EVAL_SEED_OFFSET)
    random_success = sum(r.success for r in run_episodes(RandomPolicy(seed), cfg.env, specs)) / len(specs)
    greedy = "eval/train/greedy/all"

    def past_random(evaluation: dict[str, float]) -> bool:
        assert stop_at_gain is not None
        return evaluation["env_steps"] > 0 and evaluation[greedy] - random_success >= stop_at_gain

    run_pipeline(cfg, announce=lambda _: None, stop_when=None if stop_at_gain is None else past_random)
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(r["env_steps"], r["eval/train/sampled/all"], r[greedy]) for r in records if greedy in r]
    return {
        "curve": curve,
        "random": random_success,
        "untrained_ratio": curve[0][1] / random_success,
        "gain": max(greedy for _, _, greedy in curve[1:]) - random_success,
    }


def test_a_checkpoint_from_before_the_signal_count_is_not_taken_for_a_run_without_signal():
    from dataclasses import asdict

    from sacglam.pipeline.driver import Counters, counters_from_json

    old = asdict(Counters(env_steps=5000, episodes=700, successes=0))
    del old["learning_signals"], old["no_signal_at"], old["reported_goals"], old["no_report_at"]
    assert counters_from_json(old).learning_signals == 1 and counters_from_json(old).no_signal_at is None
    assert counters_from_json(old).reported_goals == 1 and counters_from_json(old).no_report_at is None
    assert counters_from_json(asdict(Counters(learning_signals=0))).learning_signals == 0  # a new one as saved


@pytest.mark.slow
def test_a_new_environment_with_every_default_explores_and_learns_past_random(tmp_path, torch_threads):
    """The acceptance of a newcomer's first run (Pantry, the tiny model, every default): the
    untrained policy, after the default warm start, succeeds at least 80% as often as uniform
    random play on the same 256 episodes, and training takes greedy success past random's within
    the budget (the run stops at the first evaluation past it). Seed 0; the margins over seeds
    and kernel sets are in docs/development/testing.md."""
    torch_threads(1)
    run = newcomer_run(seed=0, output_dir=tmp_path / "run", stop_at_gain=NEWCOMER_MIN_GAIN)
    assert run["untrained_ratio"] >= NEWCOMER_MIN_UNTRAINED_RATIO, run
    assert run["gain"] >= NEWCOMER_MIN_GAIN, run
