"""Configuration: frozen, validated dataclasses, one per component.

Field docstrings become the `--help` text of the `sacglam` command (tyro). Validation happens at
construction and names the rule that broke and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from sacglam.envs.playground_text import PlaygroundText, validate_env_args
from sacglam.envs.vector import PlaygroundTextVector

Variant = Literal["full", "simple"]

HELD_OUT_GOALS = {"train": "test", "simple-train": "simple-test"}
"""The held-out goal set that matches each training goal set."""


@dataclass(frozen=True)
class EnvConfig:
    """Playground-Text settings (`shared/docs/playground-text.md`)."""

    n_objects: int = 6
    """Objects per scene (6 in the paper's task, 3 in the simplified variant)."""
    goals: str = "train"
    """Goal set episodes draw from: train, test, simple-train or simple-test."""
    max_steps: int = 30
    """Steps before an episode is truncated (30 in the paper's task, 8 in the simplified variant)."""

    def __post_init__(self) -> None:
        validate_env_args(self.n_objects, self.goals, self.max_steps)

    @classmethod
    def variant(cls, name: Variant) -> EnvConfig:
        """The paper's task (`full`: 6 objects, 8,470 goals, 30 steps) or the simplified one of its
        appendix B (`simple`: 3 objects, 182 single goals, 8 steps)."""
        if name == "full":
            return cls(n_objects=6, goals="train", max_steps=30)
        if name == "simple":
            return cls(n_objects=3, goals="simple-train", max_steps=8)
        raise ValueError(f"unknown variant {name!r}; choose 'full' or 'simple'")

    def with_goals(self, goals: str) -> EnvConfig:
        return replace(self, goals=goals)

    @property
    def held_out(self) -> EnvConfig:
        """The same environment on the held-out test goals."""
        if self.goals not in HELD_OUT_GOALS:
            raise ValueError(f"goals={self.goals!r} is already a held-out set")
        return self.with_goals(HELD_OUT_GOALS[self.goals])

    def make(self) -> PlaygroundText:
        return PlaygroundText(n_objects=self.n_objects, goals=self.goals, max_steps=self.max_steps)

    def make_vector(self, num_envs: int) -> PlaygroundTextVector:
        return PlaygroundTextVector(num_envs, n_objects=self.n_objects, goals=self.goals, max_steps=self.max_steps)


@dataclass(frozen=True)
class AgentConfig:
    """The LLM agent: GLAM action scoring (paper eq. 1-2) and a Q-critic on the same LLM."""

    model: str = "smollm2-135m"
    """smollm2-135m (embedded), tiny-causal, tiny-seq2seq, a local HF model directory, or a hub id."""
    critic: Literal["action", "observation", "none"] = "action"
    """`action`: one Q per (prompt, action) pair (the paper's best); `observation`: |A| outputs on the
    prompt; `none`: no critic."""
    critic_detach: bool = False
    """Train the critic head only: its gradient does not reach the shared LLM."""
    critic_width: int = 1024
    """Units in each of the critic MLP's two hidden layers."""
    max_actions: int = 8
    """Outputs of the observation critic (candidates per state; 8 with 6 objects)."""
    lora_r: int = 16
    """LoRA rank on the attention projections; 0 fine-tunes every LLM weight instead."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_target_modules: tuple[str, ...] | None = None
    """Module names LoRA adapts; None: the attention projections of the architecture."""
    load_in_4bit: bool = False
    """Quantize the frozen base to bitsandbytes NF4 (needs lora_r > 0)."""
    scoring: Literal["sum", "mean"] = "sum"
    """`sum` of the action's token log-probs (paper eq. 1), or their `mean` (length-normalised)."""
    prompt_template: Literal["plain", "candidates"] = "plain"
    """`plain`: the observation text; `candidates`: adds a line listing the candidate actions
    before `Action:` (what gives SmolLM2 a useful zero-shot prior, learning notes section 5)."""
    device: str = "auto"
    """`auto` (CUDA when available, else CPU), `cpu`, `cuda`, `cuda:1`, ..."""

    def __post_init__(self) -> None:
        if self.load_in_4bit and self.lora_r == 0:
            raise ValueError("load_in_4bit=True needs LoRA (lora_r > 0): a 4-bit base cannot be fine-tuned directly")
        if self.lora_r < 0 or self.lora_alpha <= 0:
            raise ValueError(f"lora_r must be >= 0 and lora_alpha > 0, got r={self.lora_r}, alpha={self.lora_alpha}")
        if self.critic_width < 1 or self.max_actions < 1:
            raise ValueError("critic_width and max_actions must be positive")

    @property
    def resolved_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device


@dataclass(frozen=True)
class EvalConfig:
    """Evaluate policies on Playground-Text (the scripted expert, uniform-random, the LLM agent
    zero-shot): success rate per goal type, on the train goals and on the held-out test goals."""

    variants: tuple[Variant, ...] = ("simple", "full")
    """Environment variants to evaluate on."""
    policies: tuple[Literal["expert", "random", "llm-sampled", "llm-greedy"], ...] = ("expert", "random")
    """Policies to evaluate: the scripted expert, uniform-random, and the LLM agent (`--agent.*`)
    sampling from its policy or taking its most probable action."""
    episodes: int = 400
    """Episodes per policy, variant and goal set, split equally over the goal types."""
    num_envs: int = 32
    """Environments stepped together (policies act on a batch of states)."""
    seed: int = 0
    """Seed of the episodes (goals and scenes) and of the random policy."""
    output: Path | None = Path("runs/evaluation.json")
    """Where to write the results as JSON (none when omitted)."""
    progress: bool = True
    """Show a progress bar."""
    agent: AgentConfig = AgentConfig(critic="none")
    """The LLM agent of the llm-* policies (zero-shot: no critic needed)."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")
        if not self.variants or not self.policies:
            raise ValueError("give at least one variant and one policy")
