"""Transcripts: a trained agent's episodes as a person reads them (`sacglam watch RUN_DIR`).

Each step records the goal, the observation, every candidate with the policy's probability (and
Q, where the agent has a Q-critic; V for a value head), the action taken, the reward and the goals
the environment's social partner reported (`info["achieved_goals"]`, where it reports them). The
episodes are the run's own evaluation episodes (seed + 10,000), one by one, acting greedily or
sampling with a seeded generator. They are written as plain text and as one self-contained HTML
page (no server, no script, no external file) that a browser opens.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Step:
    observation: str
    candidates: list[str]
    probabilities: list[float]
    values: list[float] | None  # Q per candidate (a Q-critic), or None
    state_value: float | None  # V(s) (a value head), or None
    action: str
    reward: float
    reported_goals: list[str]


@dataclass
class Transcript:
    goal: str
    goal_type: str
    seed: int
    mode: str
    success: bool = False
    steps: list[Step] = field(default_factory=list)


def record_episodes(agent, env_config, specs, greedy: bool, seed: int) -> list[Transcript]:
    """Run each episode spec with the agent (one state at a time: the transcript is the point,
    not speed) and record every step."""
    import torch

    env_spec = env_config.spec()
    generator = torch.Generator().manual_seed(seed)
    transcripts = []
    env = env_spec.make()  # one environment, reset per episode and closed at the end
    for spec in specs:
        options = None if spec.goal is None else {"goal": spec.goal}
        observation, info = env.reset(seed=spec.seed, options=options)
        goal = info.get("goal", spec.goal or "")
        transcript = Transcript(goal, env_spec.goal_type(goal), spec.seed, "greedy" if greedy else "sampled")
        done = False
        while not done:
            candidates = list(info["candidates"])
            with torch.no_grad():
                out = agent(agent.encode([observation], [candidates]))
            probabilities = out.log_pi[0, : len(candidates)].float().exp().cpu()
            if greedy:
                choice = int(probabilities.argmax())
            else:
                choice = int(torch.multinomial(probabilities, 1, generator=generator))
            action = candidates[choice]
            next_observation, reward, terminated, truncated, info = env.step(action)
            transcript.steps.append(
                Step(
                    observation=observation,
                    candidates=candidates,
                    probabilities=[float(p) for p in probabilities],
                    values=None if out.q is None else [float(v) for v in out.q[0, : len(candidates)].cpu()],
                    state_value=None if out.value is None else float(out.value[0]),
                    action=action,
                    reward=float(reward),
                    reported_goals=list(info.get("achieved_goals", [])),
                )
            )
            observation, done = next_observation, terminated or truncated
            transcript.success = bool(terminated) and float(reward) > 0
        transcripts.append(transcript)
    env.close()
    return transcripts


def as_text(transcripts: list[Transcript], title: str) -> str:
    lines = [title, ""]
    for k, t in enumerate(transcripts, 1):
        lines.append(f"=== episode {k}: {t.goal} ({t.goal_type}), {t.mode}, {'success' if t.success else 'failure'}")
        for n, step in enumerate(t.steps, 1):
            lines.append(f"--- step {n}")
            lines.append(step.observation)
            for j, candidate in enumerate(step.candidates):
                q = "" if step.values is None else f"  Q {step.values[j]:+.3f}"
                mark = "->" if candidate == step.action else "  "
                lines.append(f"  {mark} {step.probabilities[j]:6.3f}{q}  {candidate}")
            if step.state_value is not None:
                lines.append(f"  V(s) {step.state_value:+.3f}")
            reported = f"; the partner reports: {', '.join(step.reported_goals)}" if step.reported_goals else ""
            lines.append(f"  action: {step.action}; reward {step.reward:g}{reported}")
        lines.append("")
    return "\n".join(lines)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 60em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
.success { color: #176317; } .failure { color: #9b1c1c; }
pre { background: #f5f5f5; padding: 0.6em; white-space: pre-wrap; margin: 0.3em 0; }
table { border-collapse: collapse; margin: 0.3em 0 0.8em; }
td, th { border-bottom: 1px solid #ddd; padding: 0.15em 0.6em; text-align: left; }
tr.taken { background: #e8f0fe; font-weight: 600; }
.bar { display: inline-block; height: 0.7em; background: #4a7bd0; }
.step { border-left: 3px solid #ccc; padding-left: 0.8em; margin-bottom: 1em; }
.partner { color: #6b4e00; }
"""


def as_html(transcripts: list[Transcript], title: str) -> str:
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for k, t in enumerate(transcripts, 1):
        outcome = "success" if t.success else "failure"
        parts.append(
            f"<h2 id='episode-{k}'>Episode {k}: {html.escape(t.goal)} <small>({html.escape(t.goal_type)}, "
            f"{t.mode})</small> <span class='{outcome}'>{outcome} in {len(t.steps)} steps</span></h2>"
        )
        for n, step in enumerate(t.steps, 1):
            parts.append(f"<div class='step'><b>Step {n}</b><pre>{html.escape(step.observation)}</pre>")
            head = "<tr><th>candidate</th><th>probability</th>" + ("<th>Q</th>" if step.values else "") + "</tr>"
            rows = []
            for j, candidate in enumerate(step.candidates):
                taken = " class='taken'" if candidate == step.action else ""
                bar = f"<span class='bar' style='width:{100 * step.probabilities[j]:.1f}px'></span>"
                q = f"<td>{step.values[j]:+.3f}</td>" if step.values else ""
                rows.append(
                    f"<tr{taken}><td>{html.escape(candidate)}</td><td>{step.probabilities[j]:.3f} {bar}</td>{q}</tr>"
                )
            parts.append(f"<table>{head}{''.join(rows)}</table>")
            value = f" V(s) {step.state_value:+.3f}." if step.state_value is not None else ""
            parts.append(f"<div>Action: <b>{html.escape(step.action)}</b>; reward {step.reward:g}.{value}</div>")
            if step.reported_goals:
                reported = ", ".join(html.escape(g) for g in step.reported_goals)
                parts.append(f"<div class='partner'>The partner reports: {reported}</div>")
            parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_transcripts(transcripts: list[Transcript], out: Path, title: str) -> dict[str, Any]:
    """transcripts.txt, transcripts.html and transcripts.json in `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"text": out / "transcripts.txt", "html": out / "transcripts.html", "json": out / "transcripts.json"}
    paths["text"].write_text(as_text(transcripts, title))
    paths["html"].write_text(as_html(transcripts, title))
    paths["json"].write_text(json.dumps([asdict(t) for t in transcripts], indent=2))
    return paths
