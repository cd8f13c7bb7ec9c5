"""What every trainer does the same way: start a run (seed, output directory, config, logger,
agent, warm start) and evaluate on schedule."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL, evaluation_bar, run_evaluation, training_evaluation
from sacglam.models.agent import GLAMAgent
from sacglam.models.loading import check_model
from sacglam.models.policy import run_agent_part
from sacglam.run_directory import create_run_directory, write_run_config
from sacglam.pipeline.metrics import MetricsLogger
from sacglam.models.warm_start import language_warm_start


def start_run(cfg: TrainConfig) -> tuple[MetricsLogger, GLAMAgent]:
    """Seed, write `config.json`, open the metrics logger, build the agent, warm-start it if asked."""
    torch.manual_seed(cfg.seed)
    check_model(cfg.agent.model)
    create_run_directory(cfg.output_dir)
    write_run_config(cfg)
    logger = MetricsLogger(cfg.output_dir)
    # Dropout off for the whole run: the log-probs that act, that PPO stores as pi_old and that
    # the updates recompute must come from the same function.
    agent = GLAMAgent(cfg.agent).eval()
    if cfg.warm_start_steps:
        logger.log(0, language_warm_start(agent, cfg.env, steps=cfg.warm_start_steps, seed=cfg.seed))
    return logger, agent


def evaluate_agent(agent: GLAMAgent, cfg: TrainConfig, progress: tqdm | None = None) -> dict[str, float]:
    """`eval/<goal set>/<sampled|greedy>/<goal type>` success rates of the agent on the run's
    evaluation (`training_evaluation`); `progress` advances by one per finished episode."""
    return run_evaluation(training_evaluation(cfg), lambda part: run_agent_part(agent, part), progress)


class EvaluationSchedule:
    """Evaluates at step 0, every `cfg.eval_every` env steps, and at the end of the budget."""

    def __init__(self, agent: GLAMAgent, cfg: TrainConfig, logger: MetricsLogger, bar: tqdm):
        self.agent, self.cfg, self.logger, self.bar = agent, cfg, logger, bar
        self.next = 0
        self.latest: dict[str, float] = {}

    def __call__(self, env_steps: int, train_seconds: float, extra: dict[str, float] | None = None) -> None:
        if not self.cfg.eval_episodes or (env_steps < self.next and env_steps < self.cfg.total_env_steps):
            return
        with evaluation_bar(training_evaluation(self.cfg), self.cfg.progress) as bar:
            self.latest = evaluate_agent(self.agent, self.cfg, progress=bar)
        self.logger.log(env_steps, self.latest | {"time/train_seconds": train_seconds})
        self.next += self.cfg.eval_every
        postfix = {"success": f"{self.latest[f'eval/{self.cfg.env.goals}/sampled/{OVERALL}']:.2f}"} | (extra or {})
        self.bar.set_postfix(postfix)
