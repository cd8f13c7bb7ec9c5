"""What every trainer does the same way: start a run (seed, output directory, config, logger,
agent, warm start) and evaluate on schedule."""

from __future__ import annotations

import json
from dataclasses import asdict

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL, episode_specs, run_episodes, success_by_goal_type
from sacglam.models.agent import GLAMAgent
from sacglam.models.policy import LLMPolicy
from sacglam.training.metrics import MetricsLogger
from sacglam.training.warm_start import language_warm_start


def start_run(cfg: TrainConfig) -> tuple[MetricsLogger, GLAMAgent]:
    """Seed, write `config.json`, open the metrics logger, build the agent, warm-start it if asked."""
    torch.manual_seed(cfg.seed)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    (cfg.output_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
    logger = MetricsLogger(cfg.output_dir)
    # Dropout off for the whole run: the log-probs that act, that PPO stores as pi_old and that
    # the updates recompute must come from the same function.
    agent = GLAMAgent(cfg.agent).eval()
    if cfg.warm_start_steps:
        logger.log(0, language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps, seed=cfg.seed))
    return logger, agent


def evaluate_agent(agent: GLAMAgent, cfg: TrainConfig, seed: int) -> dict[str, float]:
    """`eval/<goal set>/<sampled|greedy>/<goal type>` success rates on the train and held-out goals."""
    results = {}
    for env_cfg in (cfg.env, cfg.env.held_out):
        specs = episode_specs(env_cfg.goals, cfg.eval_episodes, seed)
        for mode in ("sampled", "greedy"):
            policy = LLMPolicy(agent, greedy=mode == "greedy", seed=seed)
            table = success_by_goal_type(run_episodes(policy, env_cfg, specs, cfg.num_envs), env_cfg.goals)
            for goal_type, row in table.items():
                results[f"eval/{env_cfg.goals}/{mode}/{goal_type}"] = row["success"]
    return results


class EvaluationSchedule:
    """Evaluates at step 0, every `cfg.eval_every` env steps, and at the end of the budget; the
    same fixed episode set every time (seed + 10,000), so curves compare like with like."""

    def __init__(self, agent: GLAMAgent, cfg: TrainConfig, logger: MetricsLogger, bar: tqdm):
        self.agent, self.cfg, self.logger, self.bar = agent, cfg, logger, bar
        self.next = 0
        self.latest: dict[str, float] = {}

    def __call__(self, env_steps: int, train_seconds: float, extra: dict[str, float] | None = None) -> None:
        if env_steps < self.next and env_steps < self.cfg.total_env_steps:
            return
        self.latest = evaluate_agent(self.agent, self.cfg, seed=self.cfg.seed + 10_000)
        self.logger.log(env_steps, self.latest | {"time/train_seconds": train_seconds})
        self.next += self.cfg.eval_every
        postfix = {"success": f"{self.latest[f'eval/{self.cfg.env.goals}/sampled/{OVERALL}']:.2f}"} | (extra or {})
        self.bar.set_postfix(postfix)
