"""What every trainer does the same way: start a run (seed, output directory, config, logger,
agent, warm start) and evaluate on schedule."""

from __future__ import annotations

import json
from dataclasses import asdict

import torch
from tqdm.auto import tqdm

from sacglam.config import TrainConfig
from sacglam.evaluation import OVERALL, EvaluationPart, evaluation_parts, run_episodes, summarize_evaluation
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


EVAL_SEED_OFFSET = 10_000  # evaluation episodes never share seeds with training episodes


def training_evaluation_parts(cfg: TrainConfig) -> list[EvaluationPart]:
    """The run's evaluation, in parts of `num_envs` episodes: the same fixed episodes every time
    (seed + 10,000), so curves compare like with like."""
    return evaluation_parts(cfg.env, cfg.eval_episodes, cfg.seed + EVAL_SEED_OFFSET, part_size=cfg.num_envs)


def run_evaluation_part(agent: GLAMAgent, cfg: TrainConfig, part: EvaluationPart) -> list:
    """The part's episodes with the agent (its own seeded sampler), `cfg.num_envs` at a time."""
    policy = LLMPolicy(agent, greedy=part.mode == "greedy", seed=part.seed)
    return run_episodes(policy, part.env(cfg.env), part.specs, cfg.num_envs)


def evaluate_agent(agent: GLAMAgent, cfg: TrainConfig, progress: tqdm | None = None) -> dict[str, float]:
    """`eval/<goal set>/<sampled|greedy>/<goal type>` success rates on the train and held-out goals;
    `progress`, when given, advances by one per finished episode."""
    parts = training_evaluation_parts(cfg)
    results = []
    for part in parts:
        results.append(run_evaluation_part(agent, cfg, part))
        if progress is not None:
            progress.update(len(part.specs))
    return summarize_evaluation(cfg.env, parts, results)


def evaluation_bar(cfg: TrainConfig) -> tqdm:
    """The per-episode bar shown while an evaluation runs (it disappears when done)."""
    total = 4 * cfg.eval_episodes  # train and held-out goals, sampled and greedy
    return tqdm(total=total, desc="evaluating", unit="episode", leave=False, disable=not cfg.progress)


class EvaluationSchedule:
    """Evaluates at step 0, every `cfg.eval_every` env steps, and at the end of the budget."""

    def __init__(self, agent: GLAMAgent, cfg: TrainConfig, logger: MetricsLogger, bar: tqdm):
        self.agent, self.cfg, self.logger, self.bar = agent, cfg, logger, bar
        self.next = 0
        self.latest: dict[str, float] = {}

    def __call__(self, env_steps: int, train_seconds: float, extra: dict[str, float] | None = None) -> None:
        if not self.cfg.eval_episodes or (env_steps < self.next and env_steps < self.cfg.total_env_steps):
            return
        with evaluation_bar(self.cfg) as bar:
            self.latest = evaluate_agent(self.agent, self.cfg, progress=bar)
        self.logger.log(env_steps, self.latest | {"time/train_seconds": train_seconds})
        self.next += self.cfg.eval_every
        postfix = {"success": f"{self.latest[f'eval/{self.cfg.env.goals}/sampled/{OVERALL}']:.2f}"} | (extra or {})
        self.bar.set_postfix(postfix)
