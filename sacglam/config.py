"""Configuration: frozen, validated dataclasses, one per component.

Field docstrings become the `--help` text of the `sacglam` command (tyro). Validation happens at
construction and names the rule that broke and how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import gymnasium
import tyro
from gymnasium.vector import VectorEnv

from sacglam.envs.spec import BabyAISpec, EnvironmentSpec, GymnasiumSpec, PlaygroundSpec, TextWorldSpec
from sacglam.errors import SacglamWarning

Variant = Literal["full", "simple", "babyai-goto", "babyai-pickup", "babyai-mixed"]
DEFAULT_EVAL_VARIANTS: tuple[Variant, ...] = ("simple", "full")

_BABYAI_VARIANTS = {"babyai-goto": "GoToLocal", "babyai-pickup": "PickupLocal", "babyai-mixed": "MixedLocal"}


# The EnvConfig fields each kind of environment reads (`name` and `goals` for all): what a person
# is shown of a run's environment (a model card), without the settings it never received.
_ENV_FIELDS_READ = {
    "playground-text": ("n_objects", "max_steps", "step_latency_ms"),
    "babyai-text": ("level", "n_objects", "room_size", "max_steps"),
    "textworld": ("tw_challenge", "tw_levels", "tw_games", "tw_game_path", "tw_held_out_game_path", "max_steps"),
}
_PROTOCOL_FIELDS_READ = ("kwargs", "held_out_kwargs")


def env_settings_read_by(name: str) -> tuple[str, ...]:
    """The EnvConfig fields the environment `name` reads (a protocol environment: its name, goal
    set, `kwargs` and `held_out_kwargs`)."""
    return ("name", "goals", *_ENV_FIELDS_READ.get(name, _PROTOCOL_FIELDS_READ))


def env_is_built_in(name: str) -> bool:
    """Whether `name` is one of the environments this project ships its own settings for
    (Playground-Text, BabyAI-Text, TextWorld), rather than a protocol environment."""
    return name in _ENV_FIELDS_READ


def unread_env_setting(env: dict[str, Any]) -> str | None:
    """A one-line reason when the mapping `env` (a config file's `env` block) sets, to other than
    its default, a setting the environment it names never reads (`max_steps: 10` for a
    `module:Class` one, `level` for Playground-Text): it would change nothing, silently. None when
    every setting it gives is read (a run's config.json holds the unread ones at their defaults)."""
    name = str(env.get("name", "playground-text"))
    read = set(env_settings_read_by(name))
    defaults = json_values(dataclasses.asdict(EnvConfig()))  # as a file or config.json writes them (lists, not tuples)
    for key, value in env.items():
        if key in read or key not in defaults or json_values(value) == defaults[key]:
            continue
        return f"env.{key} {not_read_because(name, key, 'env.kwargs')}"
    return None


def not_read_because(name: str, key: str, kwargs_place: str) -> str:
    """Why the EnvConfig setting `key` changes nothing for the environment `name` (which does not
    read it): "is a setting of <the kinds that read it>, which env.name <name> does not read:
    <where its own settings go, `kwargs_place`, or that it has none>"."""
    readers = [kind for kind in _ENV_FIELDS_READ if key in env_settings_read_by(kind)]
    readers += ["protocol environments (module:Class, gymnasium ids)"] if key in _PROTOCOL_FIELDS_READ else []
    read = env_settings_read_by(name)
    fix = (
        f"pass the environment's own settings in {kwargs_place} (docs/guides/own-environment.md)"
        if "kwargs" in read
        else "it has no such setting"
    )
    return f"is a setting of {', '.join(readers)}, which env.name {name!r} does not read: {fix}"


def json_values(value: Any) -> Any:
    """`value` as JSON reads it back (tuples as lists), so that a file's values compare with defaults."""
    return json.loads(json.dumps(value, default=str))


def env_settings_read(env: dict[str, Any]) -> dict[str, Any]:
    """`env` (an EnvConfig as a dict, e.g. from a run's config.json) cut to the settings its kind
    of environment reads; a protocol environment's empty `kwargs` and absent twin are left out too."""
    name = env.get("name", "playground-text")
    fields = env_settings_read_by(name)
    return {k: env[k] for k in fields if k in env and (env[k] not in ({}, None) or env_is_built_in(name))}


@dataclass(frozen=True)
class EnvConfig:
    """The environment (`docs/guides/own-environment.md`): Playground-Text by default, BabyAI-Text,
    TextWorld games, or any protocol environment by gymnasium id or `module:Class`."""

    name: str = "playground-text"
    """`playground-text`, `babyai-text`, `textworld`, or a gymnasium id / `module:Class` of a
    protocol environment."""
    n_objects: int = 6
    """Objects per scene or room (Playground-Text: 6 in the paper's task, 3 in the simplified
    variant; BabyAI-Text: keys, balls and boxes in the room)."""
    goals: str = "train"
    """Goal set episodes draw from: Playground-Text train, test, simple-train or simple-test;
    BabyAI-Text, TextWorld and other environments train or test (its held-out twin)."""
    max_steps: int = 30
    """Steps before an episode is truncated (Playground-Text: 30 in the paper's task, 8 in the
    simplified variant; BabyAI-Text and TextWorld: also; other environments set their own)."""
    step_latency_ms: float = 0.0
    """Wall time added to every environment step of the vector form (a sleep), standing in for a
    slow engine in latency-hiding benchmarks; 0 in every real run."""
    level: str = "MixedLocal"
    """BabyAI-Text level: GoToLocal, PickupLocal or MixedLocal."""
    room_size: int = 8
    """BabyAI-Text room side in cells, walls included."""
    tw_challenge: str = "coin_collector"
    """TextWorld: the challenge family games are built from (coin_collector, treasure_hunter)."""
    tw_levels: tuple[int, ...] = (2, 3)
    """TextWorld: the family's difficulty levels (coin collector 1-300, treasure hunter 1-30)."""
    tw_games: int = 10
    """TextWorld: games per level, for training and again (other seeds) held out."""
    tw_game_path: str = ""
    """TextWorld: a game file or folder of games to play instead of built ones (ALFWorld's
    `.tw-pddl` games, your own `.z8`)."""
    tw_held_out_game_path: str = ""
    """TextWorld: the held-out games to `tw_game_path`'s (evaluation on goals=test)."""
    # Mappings are set in run configs (YAML), not on the command line (tyro cannot parse them).
    kwargs: Annotated[dict[str, Any], tyro.conf.Suppress] = field(default_factory=dict, hash=False)
    """Keyword arguments of a gymnasium id / `module:Class` environment."""
    held_out_kwargs: Annotated[dict[str, Any] | None, tyro.conf.Suppress] = field(default=None, hash=False)
    """For a gymnasium id / `module:Class` environment: the keyword arguments, on top of `kwargs`,
    that make its held-out twin (None: it has none)."""

    def __post_init__(self) -> None:
        for name in ("tw_game_path", "tw_held_out_game_path"):  # absolute: workers may run elsewhere
            if getattr(self, name):
                object.__setattr__(self, name, str(Path(getattr(self, name)).expanduser().absolute()))
        if not self.step_latency_ms >= 0:
            raise ValueError(
                f"env.step_latency_ms must be >= 0 (milliseconds per env step), got {self.step_latency_ms}"
            )
        self.spec()  # validates the environment's own arguments, with its own messages

    @classmethod
    def variant(cls, name: Variant) -> EnvConfig:
        """The paper's task (`full`: 6 objects, 8,470 goals, 30 steps), the simplified one of its
        appendix B (`simple`: 3 objects, 182 single goals, 8 steps), or a BabyAI-Text level
        (`babyai-goto`, `babyai-pickup`, `babyai-mixed`: 4 objects, 40 steps)."""
        if name == "full":
            return cls(n_objects=6, goals="train", max_steps=30)
        if name == "simple":
            return cls(n_objects=3, goals="simple-train", max_steps=8)
        if name in _BABYAI_VARIANTS:
            return cls(name="babyai-text", level=_BABYAI_VARIANTS[name], n_objects=4, max_steps=40)
        raise ValueError(f"unknown variant {name!r}; choose one of {', '.join(get_args(Variant))}")

    def with_goals(self, goals: str) -> EnvConfig:
        return replace(self, goals=goals)

    def spec(self) -> EnvironmentSpec:
        """What the pipeline reads the environment through (`sacglam.envs.spec`)."""
        if self.name == "playground-text":
            return PlaygroundSpec(self.n_objects, self.goals, self.max_steps, self.step_latency_ms)
        if self.name == "babyai-text":
            return BabyAISpec(self.level, self.goals, self.n_objects, self.room_size, self.max_steps)
        if self.name == "textworld":
            return TextWorldSpec(
                self.tw_challenge,
                tuple(self.tw_levels),
                self.tw_games,
                self.tw_game_path,
                self.tw_held_out_game_path,
                self.goals,
                self.max_steps,
            )
        if ":" not in self.name and self.name not in gymnasium.registry:
            close = difflib.get_close_matches(self.name, list(_ENV_FIELDS_READ), n=1, cutoff=0.75)
            if close:  # a misspelt built-in name, not someone's gymnasium id
                raise ValueError(
                    f"env.name {self.name!r} is not an environment here: did you mean {close[0]!r}? (built in: "
                    f"{', '.join(_ENV_FIELDS_READ)}; your own: module:Class or a registered gymnasium id)"
                )
        return GymnasiumSpec(self.name, dict(self.kwargs), self.goals, self.held_out_kwargs)

    @property
    def held_out(self) -> EnvConfig:
        """The same environment on its held-out goals."""
        spec = self.spec()
        twin = spec.held_out()
        if twin is None:
            raise ValueError(
                f"env {self.name!r} with goals={self.goals!r} has no held-out goal set"
                + (" (set env.held_out_kwargs)" if isinstance(spec, GymnasiumSpec) else "")
            )
        return self.with_goals(twin.goal_set)

    @property
    def has_held_out(self) -> bool:
        return self.spec().held_out() is not None

    def make(self) -> gymnasium.Env:
        return self.spec().make()

    def make_vector(self, num_envs: int) -> VectorEnv:
        return self.spec().make_vector(num_envs)


DEFAULT_LORA_RANK = 16  # what a pre-trained model gets unless lora_r says otherwise


@dataclass(frozen=True)
class AgentConfig:
    """The LLM agent: GLAM action scoring (paper eq. 1-2) and a Q-critic on the same LLM."""

    model: str = "smollm2-135m"
    """smollm2-135m (embedded), tiny-causal, tiny-seq2seq, a local HF model directory, or a hub id."""
    critic: Literal["action", "observation", "value", "none"] = "action"
    """`action`: one Q per (prompt, action) pair (the paper's best); `observation`: |A| outputs on the
    prompt; `value`: V(s) on the prompt (PPO-GLAM); `none`: no head."""
    critic_input: Literal["last", "mean"] = "last"
    """What the action critic reads of the LLM for a (prompt, action) pair: the hidden state at the
    action's last token (the paper's; with `end_of_action` the end token), or the `mean` of the
    hidden states over its tokens (docs/explanation/agent.md)."""
    critic_detach: bool = False
    """Train the critic head only: its gradient does not reach the shared LLM."""
    critic_weights: Literal["shared", "own"] = "shared"
    """`shared` (the paper's): the Q head reads the policy's LLM, and the critic loss trains the
    LLM weights the policy uses, at the actor's learning rate. `own`: the critic has its own copy
    of the top `critic_blocks` transformer blocks (with LoRA, its own adapter on them) and reads
    the policy's hidden states below them without training them; the actor's and critic's weights
    are then separate, and so are their learning rates (`sac.actor_lr`, `sac.critic_lr`). A causal
    (Llama-layout) model with a Q critic only."""
    critic_blocks: int | None = None
    """With `critic_weights: own`: how many top transformer blocks the critic copies. None: the
    LoRA blocks with `lora_layers` (the critic's adapter then sits on the frozen trunk), else 1."""
    critic_input_norm: Literal["auto", "standardise", "none"] = "auto"
    """What the critic head (Q or value) does to the LLM features before its MLP: `standardise`
    each dimension by running statistics of the features it is trained on (checkpointed and
    broadcast with the weights), or `none` (the paper's: the raw hidden state). `auto`:
    standardise on a pre-trained model, whose features share a large constant component that
    hides the goal (docs/explanation/critic-input.md), none on a random-initialised one.
    `standardises_critic_input` is the value in effect."""
    critic_width: int = 1024
    """Units in each of the critic MLP's two hidden layers."""
    value_head_activation: Literal["relu", "sigmoid"] = "relu"
    """Activation of the value head's hidden layers (`critic: value`, PPO-GLAM), as the Q-critics'
    (the paper's critic); `sigmoid` is lamorel's, which learned worse here (docs/results/ppo-lamorel.md)."""
    n_critics: int = 1
    """Independent Q heads (2: twin critics, the minimum is used for the policy and the target)."""
    max_actions: int = 8
    """Outputs of the observation critic (candidates per state; 8 with 6 objects)."""
    lora_r: int | None = None
    """LoRA rank on the attention projections; 0 fine-tunes every LLM weight instead. None (the
    default): 16 on a pre-trained model, 0 on a random-initialised one (`tiny-*`), whose frozen
    random weights LoRA could barely reshape: its warm start stalled far from a uniform policy
    (docs/explanation/agent.md). `lora_rank` is the value in effect; a run records it in config.json."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    lora_target_modules: tuple[str, ...] | None = None
    """Module names LoRA adapts; None: the attention projections of the architecture."""
    lora_layers: int | None = None
    """LoRA on the top k transformer blocks only (an encoder-decoder's: its decoder's); the blocks
    below are frozen and run without autograd, and the SAC learner runs them once for both
    next-state forwards, PPO once per rollout (docs/explanation/agent.md). None: every block (the paper's)."""
    load_in_4bit: bool = False
    """Quantize the frozen base to bitsandbytes NF4 (needs lora_r > 0)."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Dtype of the frozen base LLM (its compute dtype with `load_in_4bit`). `auto`: bfloat16 on
    CUDA when LoRA freezes the base, float32 otherwise. LoRA weights, heads, log-probs, losses and
    optimizer state stay float32 whatever this says."""
    end_of_action: bool | None = None
    """Score the tokenizer's end-of-sequence token after every action, so an action's probability
    is that of the whole string. Without it an action that is a prefix of another (`Look`, `Look
    at the bench`) scores at least as high as every continuation, and no policy over such
    candidates can be uniform (docs/explanation/agent.md). The action critic reads the hidden state at it.
    None (the default): on for a random-initialised model, off for a pre-trained one, whose
    zero-shot prior was measured without it. `scores_end_of_action` is the value in effect."""
    scoring: Literal["sum", "mean"] = "sum"
    """`sum` of the action's token log-probs (paper eq. 1), or their `mean` (length-normalised)."""
    prompt_template: Literal["plain", "candidates"] = "plain"
    """`plain`: the observation text; `candidates`: adds a line listing the candidate actions
    before `Action:` (what gives SmolLM2 a useful zero-shot prior: docs/explanation/deviations.md)."""
    device: str = "auto"
    """`auto` (CUDA when available, else CPU), `cpu`, `cuda`, `cuda:1`, ..."""
    compile: bool = False
    """Compile each transformer block with `torch.compile` (fuses the element-wise work around
    the matrix multiplies). Each process compiles on its first forwards (tens of seconds on CPU;
    needs a C++ compiler there). Same losses up to float rounding: docs/results/speed-learner.md."""
    tiny_vocabulary: tuple[str, ...] = ()
    """Words of a tiny model's tokenizer (empty: Playground-Text's). A run fills it in from its
    environment; set it only to build a tiny agent outside a run."""

    @property
    def random_initialised(self) -> bool:
        """A tiny test model (random weights), not a pre-trained LLM."""
        return self.model.startswith("tiny-")

    @property
    def lora_rank(self) -> int:
        """The LoRA rank in effect: `lora_r`, or its default for the model (0 random, 16 pre-trained)."""
        if self.lora_r is not None:
            return self.lora_r
        return 0 if self.random_initialised else DEFAULT_LORA_RANK

    @property
    def scores_end_of_action(self) -> bool:
        """`end_of_action` in effect: as set, or on for a random-initialised model only."""
        return self.random_initialised if self.end_of_action is None else self.end_of_action

    @property
    def critic_tower_blocks(self) -> int:
        """The top blocks the critic copies with `critic_weights: own` (0: it shares the LLM)."""
        if self.critic_weights != "own":
            return 0
        if self.critic_blocks is not None:
            return self.critic_blocks
        return self.lora_layers if self.lora_layers is not None else 1

    @property
    def standardises_critic_input(self) -> bool:
        """`critic_input_norm` in effect: as set, or `auto`'s choice (on for a pre-trained model)."""
        if self.critic_input_norm == "auto":
            return not self.random_initialised
        return self.critic_input_norm == "standardise"

    def resolved(self) -> AgentConfig:
        """This config with the defaults that depend on the model written in (what a run records)."""
        return replace(
            self,
            lora_r=self.lora_rank,
            end_of_action=self.scores_end_of_action,
            critic_input_norm="standardise" if self.standardises_critic_input else "none",
        )

    def __post_init__(self) -> None:
        if self.lora_r is not None and self.lora_r < 0:
            raise ValueError(
                f"lora_r must be >= 0 (0: fine-tune every weight; unset: the model's default), got {self.lora_r}"
            )
        if self.load_in_4bit and self.lora_rank == 0:
            raise ValueError("load_in_4bit=True needs LoRA (lora_r > 0): a 4-bit base cannot be fine-tuned directly")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"agent.dtype={self.dtype!r}: choose auto, float32 or bfloat16")
        if self.dtype == "bfloat16" and self.lora_rank == 0:
            unset = " (unset, it is 0 on a random-initialised model)" if self.lora_r is None else ""
            raise ValueError(
                f"agent.dtype=bfloat16 keeps the frozen base in bfloat16, but lora_r=0{unset} trains every LLM weight, "
                "which must stay float32: use LoRA (lora_r > 0) or dtype=float32"
            )
        if self.lora_layers is not None and (self.lora_layers < 1 or self.lora_rank == 0):
            raise ValueError(
                f"agent.lora_layers={self.lora_layers} puts LoRA on the top blocks: it must be >= 1 and needs "
                "lora_r > 0 (unset it to adapt every block, or to fine-tune every weight with lora_r=0)"
            )
        if self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha must be > 0, got {self.lora_alpha}")
        if self.critic_input != "last" and self.critic != "action":
            raise ValueError(
                f"agent.critic_input={self.critic_input!r} is what the action critic reads; agent.critic={self.critic!r} "
                "reads the prompt: leave critic_input at 'last' or use critic 'action'"
            )
        if self.critic_weights not in ("shared", "own"):
            raise ValueError(f"agent.critic_weights={self.critic_weights!r}: choose shared or own")
        if self.critic_weights == "own":
            if self.critic not in ("action", "observation"):
                raise ValueError(
                    f"agent.critic_weights=own gives a Q critic its own blocks; agent.critic={self.critic!r} is not one: "
                    "use critic action or observation, or critic_weights shared"
                )
            if self.critic_detach:
                raise ValueError(
                    "agent.critic_weights=own already keeps the critic's gradient off the policy's weights, and "
                    "critic_detach would freeze the critic's own blocks: unset critic_detach"
                )
            if self.load_in_4bit:
                raise ValueError(
                    "agent.critic_weights=own copies the top blocks, which a 4-bit base cannot: set load_in_4bit "
                    "false, or critic_weights shared"
                )
        if self.critic_blocks is not None and (self.critic_blocks < 1 or self.critic_weights != "own"):
            raise ValueError(
                f"agent.critic_blocks={self.critic_blocks} is how many top blocks the critic's own weights copy: it "
                "must be >= 1 and needs critic_weights own"
            )
        if self.critic_input_norm not in ("auto", "standardise", "none"):
            raise ValueError(f"agent.critic_input_norm={self.critic_input_norm!r}: choose auto, standardise or none")
        if self.critic_width < 1 or self.max_actions < 1 or self.n_critics < 1:
            raise ValueError("critic_width, max_actions and n_critics must be positive")

    @property
    def resolved_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device

    @property
    def resolved_dtype(self) -> str:
        """`float32` or `bfloat16`: what `dtype` means on the resolved device."""
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.resolved_device.startswith("cuda") and self.lora_rank > 0 else "float32"


@dataclass(frozen=True)
class SACConfig:
    """SAC-GLAM's learner and replay settings. Defaults: the paper's table 2 (SAC-GLAM); use
    `SACConfig.with_her()` for table 3's entropy settings."""

    gamma: float = 0.99
    """Discount factor."""
    n_step: int = 3
    """Steps summed before bootstrapping (paper eq. 3)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    update_every: int = 32
    """Environment steps between two updates."""
    gradient_steps: int = 2
    """Gradient steps (batches) per update."""
    actor_lr: float = 1e-4
    """Adam learning rate of the LLM's trainable weights (LoRA)."""
    critic_lr: float = 1e-4
    """Adam learning rate of the critic head."""
    alpha_lr: float = 2e-3
    """Adam learning rate of log(alpha), the entropy coefficient."""
    alpha_init: float = 0.005
    """Initial entropy coefficient (0.05 with HER in the paper)."""
    target_entropy: float = 0.0
    """Entropy target in nats (0.01 with HER in the paper)."""
    target_entropy_ratio: float | None = None
    """When set, each state's entropy target is this fraction of its maximum entropy,
    log(number of candidates), instead of `target_entropy` (states differ in their candidate
    counts: 3 to 9 on the full task)."""
    target_entropy_ratio_final: float | None = None
    """When set (with `target_entropy_ratio`), the ratio moves linearly from `target_entropy_ratio`
    at the first gradient step to this value after `target_entropy_anneal_updates` steps, and
    stays there: exploration early, a less random behaviour policy late (docs/results/full-task-schedules.md, "An
    entropy-target schedule at 64k")."""
    target_entropy_anneal_updates: int = 0
    """Gradient steps over which `target_entropy_ratio` moves to `target_entropy_ratio_final`
    (updates, not env steps: env steps / update_every * gradient_steps; the critic warm-up's
    updates count)."""
    alpha_min: float = 0.0
    """Floor of the entropy coefficient (0: none); an early prototype saw alpha decay to 5e-4 (docs/results/stability.md)."""
    tau: float = 0.01
    """Polyak rate of the target critic (the paper does not give it)."""
    actor_loss: Literal["reverse_kl", "forward_kl"] = "reverse_kl"
    """The policy's loss. `reverse_kl` (SAC's, the paper's): E_s sum_a pi (alpha log pi - Q), whose
    gradient on an action is scaled by its probability, so an action pi has nearly dropped cannot
    come back. `forward_kl`: the cross-entropy towards softmax(Q/alpha), which pulls the actions
    the critic ranks high up whatever pi gives them (docs/explanation/algorithms.md)."""
    critic_entropy: bool = True
    """The entropy bonus in the critic's target, V(s') = sum_a pi (Q - alpha log pi) (SAC's, the
    paper's). False decouples actor and critic: V(s') = sum_a pi Q, and alpha acts on the actor's
    loss only, as in "Dissecting Discrete Soft Actor-Critic" (Asad et al., 2025)."""
    critic_warmup_updates: int = 0
    """Gradient steps at the start that train the critic only (no policy or alpha update)."""
    warmup_head_only: bool = False
    """True: during the critic warm-up the critic loss trains the critic head only; no gradient
    reaches the LLM / LoRA weights the policy shares with it, so pi stays exactly the pre-trained
    (or warm-started) policy until the warm-up ends (paper section 2.2). False (default): the
    critic's gradient also trains the shared weights during the warm-up (unless
    `agent.critic_detach`), which moves pi but, measured on both CPU tasks, learns a little
    better (docs/results/critic-warmup.md). After the warm-up, `agent.critic_detach` alone decides.
    With `agent.critic_weights: own` the critic's own blocks train in the warm-up either way (the
    critic loss never reaches the policy's weights there)."""
    next_policy: Literal["online", "target"] = "online"
    """Policy of the next-state expectation in the target (eq. 3). `online`: the current weights,
    as in SAC; one extra LLM forward of the next states per update. `target`: log pi from the
    target network's forward that already gives Q_target (a lagged policy, as DDPG and TD3 use a
    target actor); one forward less per update (about 20% of an update's time)."""
    max_grad_norm: float | None = 1.0
    """Clip the global gradient norm of each step (None: no clipping)."""
    grad_diagnostics_every: int = 16
    """Every this many gradient steps, measure each loss's gradient norm on its own and on the
    weights the actor and critic share (`grad_norm/critic_shared`, ...): one extra backward of the
    critic loss on those steps (2% of a tiny model's update time at 16); 0: never."""
    her: bool = False
    """Relabel episodes with the social partner's goals."""
    her_max_goals: int | None = None
    """At most this many relabels per episode (None: every reported goal)."""
    sampling: Literal["uniform", "ratio", "prior"] = "uniform"
    """Batch sampling: `ratio` puts `relabeled_fraction` relabeled transitions in every batch."""
    relabeled_fraction: float = 0.5
    """Share of relabeled transitions per batch in `ratio` mode."""
    relabel_mix: Literal["partner", "own", "balanced"] = "partner"
    """Goal types of a `ratio` batch's relabeled share. `partner` (the paper's): relabeled
    transitions drawn uniformly, so each goal type comes as often as the social partner reports it
    (on the simplified task over 90% Grasp goals); `own`: types in the shares of the goals the
    stored episodes were given (what the agent was asked; no knowledge of the environment's goal
    distribution needed, unlike `sampling: prior`); `balanced`: equal shares of the types reported."""
    buffer_capacity: int = 100_000
    """Replay capacity in environment transitions (an episode's relabels go with it)."""
    random_steps: int = 0
    """Environment steps with uniform-random actions before learning starts."""

    def __post_init__(self) -> None:
        checks = [
            (0.0 <= self.gamma <= 1.0, f"gamma must be in [0, 1], got {self.gamma}"),
            (self.n_step >= 1, f"n_step must be >= 1, got {self.n_step}"),
            (
                self.batch_size >= 1 and self.update_every >= 1 and self.gradient_steps >= 1,
                "batch_size, update_every and gradient_steps must be >= 1",
            ),
            (
                min(self.actor_lr, self.critic_lr, self.alpha_lr) >= 0,
                f"actor_lr, critic_lr and alpha_lr must be >= 0 (0 freezes what it trains), got {self.actor_lr:g}, "
                f"{self.critic_lr:g} and {self.alpha_lr:g}",
            ),
            (
                self.max_grad_norm is None or self.max_grad_norm > 0,
                f"max_grad_norm must be > 0 (or null: no clipping), got {self.max_grad_norm}",
            ),
            (self.buffer_capacity >= 1, f"buffer_capacity must be >= 1 transition, got {self.buffer_capacity}"),
            (
                self.batch_size <= self.buffer_capacity,
                f"batch_size={self.batch_size} is more than buffer_capacity={self.buffer_capacity}: learning starts "
                "once the buffer holds a batch, so this run would never train; lower batch_size or raise buffer_capacity",
            ),
            (self.random_steps >= 0, f"random_steps must be >= 0, got {self.random_steps}"),
            (
                self.grad_diagnostics_every >= 0,
                f"grad_diagnostics_every must be >= 0 (0: never), got {self.grad_diagnostics_every}",
            ),
            (self.critic_warmup_updates >= 0, f"critic_warmup_updates must be >= 0, got {self.critic_warmup_updates}"),
            (self.alpha_init > 0, f"alpha_init must be > 0, got {self.alpha_init}"),
            (
                0.0 <= self.alpha_min <= self.alpha_init,
                f"alpha_min must be in [0, alpha_init={self.alpha_init}], got {self.alpha_min}",
            ),
            (
                self.target_entropy_ratio is None or 0.0 <= self.target_entropy_ratio <= 1.0,
                f"target_entropy_ratio must be in [0, 1] (a fraction of log(#candidates)), got {self.target_entropy_ratio}",
            ),
            (
                self.target_entropy_ratio_final is None or self.target_entropy_ratio is not None,
                "target_entropy_ratio_final needs target_entropy_ratio, the ratio the schedule starts from",
            ),
            (
                self.target_entropy_ratio_final is None or 0.0 <= self.target_entropy_ratio_final <= 1.0,
                f"target_entropy_ratio_final must be in [0, 1] (a fraction of log(#candidates)), got "
                f"{self.target_entropy_ratio_final}",
            ),
            (
                self.target_entropy_anneal_updates >= 0,
                f"target_entropy_anneal_updates must be >= 0, got {self.target_entropy_anneal_updates}",
            ),
            (
                (self.target_entropy_ratio_final is None) == (self.target_entropy_anneal_updates == 0),
                "target_entropy_ratio_final and target_entropy_anneal_updates go together: set both (a schedule "
                f"over >= 1 gradient steps) or neither; got {self.target_entropy_ratio_final} and "
                f"{self.target_entropy_anneal_updates}",
            ),
            (0.0 < self.tau <= 1.0, f"tau must be in (0, 1], got {self.tau}"),
            (
                0.0 <= self.relabeled_fraction <= 1.0,
                f"relabeled_fraction must be in [0, 1], got {self.relabeled_fraction}",
            ),
            (
                self.sampling == "uniform" or self.her,
                f"sampling={self.sampling!r} needs her=True (it balances relabeled transitions)",
            ),
            (
                self.relabel_mix == "partner" or self.sampling == "ratio",
                f"relabel_mix={self.relabel_mix!r} re-weights the relabeled share of a batch, which only "
                f"sampling='ratio' has: set sac.sampling ratio (with her), or relabel_mix partner",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @classmethod
    def with_her(cls, **overrides) -> SACConfig:
        """SAC-GLAM+HER (paper table 3): HER, 50/50 batches, alpha 0.05, target entropy 0.01."""
        values: dict[str, Any] = {"her": True, "sampling": "ratio", "alpha_init": 0.05, "target_entropy": 0.01}
        return cls(**(values | overrides))


@dataclass(frozen=True)
class PPOConfig:
    """PPO-GLAM (paper table 1)."""

    rollout_steps: int = 2048
    """Transitions collected between two updates (over all environments)."""
    epochs: int = 16
    """Passes over each rollout."""
    minibatch_size: int = 256
    """Transitions per gradient step."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.99
    """GAE lambda."""
    clip: float = 0.2
    """Clipping range of the probability ratio."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Weight of the value loss, the mean squared error (no extra 1/2, as in lamorel's PPO)."""
    lr: float = 1e-4
    """Adam learning rate (LLM weights and value head)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clipping."""
    advantage_normalization: Literal["rollout", "minibatch", "none"] = "rollout"
    """Advantages scaled to mean 0 and std 1 over the whole rollout (lamorel's PPO, the paper's
    baseline code), over each minibatch, or not at all."""
    clip_value: bool = False
    """Clip the value head's change to `clip` around the value it had when the rollout was
    collected, and take the larger of the clipped and unclipped squared errors (lamorel's PPO; off
    by default: it learned worse here, docs/results/ppo-lamorel.md)."""
    reuse_frozen_trunk: bool = True
    """With `agent.lora_layers` (LoRA on the top blocks only): keep each minibatch's encoding and
    frozen-trunk output for every epoch, so the blocks below LoRA run once per rollout instead of
    once per epoch. Memory: the rollout's tokens x hidden size, in the base's dtype."""
    value_target: Literal["reward_to_go", "gae"] = "reward_to_go"
    """What the value head regresses on: the discounted reward-to-go, bootstrapped from V where a
    segment does not terminate (lamorel's), or GAE's return, advantage + V(s)."""
    loss: Literal["clip", "kl"] = "clip"
    """Policy loss: the clipped surrogate (paper eq. 4) or the KL-penalised one (eq. 5)."""
    kl_coef: float = 0.1
    """beta of the KL loss: KL(pi_old(.|s, g) || pi(.|s, g')) (the paper does not give its value)."""
    her: bool = False
    """PPO with HER (appendix G): each rollout is also relabeled with the social partner's goals;
    relabeled transitions keep the behaviour policy's probabilities for the original goal."""
    her_aligned: bool = False
    """Relabel only with sub-goals of the episode's goal (`sacglam.envs.goals.is_subgoal`)."""
    her_centered: bool = False
    """Clip around each relabeled transition's first-epoch ratio instead of 1 (clip loss only)."""
    her_ratio: float = 1.0
    """At most this many relabeled transitions per environment transition in an update."""

    @staticmethod
    def upgrade(data: dict[str, Any]) -> dict[str, Any]:
        """The settings of a config written before the lamorel-style PPO (it has the key
        `normalize_advantages`: an earlier run's config.json), translated to the same losses:
        per-minibatch (or no) normalisation, GAE's return as the value target, and the same
        value-loss weight (the loss was 0.5 x vf_coef x MSE then). Minibatches are drawn once per
        rollout now, whatever the config says. A notice says so; mixing the old key with the new
        ones is refused."""
        if "normalize_advantages" not in data:
            return data
        mixed = sorted({"advantage_normalization", "value_target", "clip_value"} & set(data))
        if mixed:
            raise ValueError(
                f"ppo: normalize_advantages (an earlier setting) together with {', '.join(mixed)}: replace "
                "normalize_advantages by advantage_normalization (minibatch, rollout or none)"
            )
        import warnings

        warnings.warn(
            "ppo.normalize_advantages is an earlier setting: read as advantage_normalization minibatch/none, "
            "value_target gae and half the vf_coef (the same losses); see docs/explanation/algorithms.md#ppo-glam",
            category=SacglamWarning,
            stacklevel=2,
        )
        data = dict(data)
        data["advantage_normalization"] = "minibatch" if data.pop("normalize_advantages") else "none"
        data.setdefault("value_target", "gae")
        data["vf_coef"] = 0.5 * data.get("vf_coef", 0.5)
        return data

    def __post_init__(self) -> None:
        if (self.her_aligned or self.her_centered) and not self.her:
            raise ValueError("her_aligned and her_centered are options of PPO with HER: set her=True")
        if self.her_centered and self.loss != "clip":
            raise ValueError("her_centered moves the clipping range: it needs loss='clip'")
        if self.kl_coef < 0 or self.her_ratio < 0:
            raise ValueError("kl_coef and her_ratio must be >= 0")
        if min(self.rollout_steps, self.epochs, self.minibatch_size) < 1:
            raise ValueError("rollout_steps, epochs and minibatch_size must be >= 1")
        if not (0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1 and self.clip > 0):
            raise ValueError("gamma and gae_lambda must be in [0, 1] and clip > 0")
        if self.lr < 0 or not self.max_grad_norm > 0:
            raise ValueError(
                f"lr must be >= 0 and max_grad_norm > 0, got lr={self.lr:g} and max_grad_norm={self.max_grad_norm:g}"
            )
        if min(self.ent_coef, self.vf_coef) < 0:
            raise ValueError(f"ent_coef and vf_coef must be >= 0, got {self.ent_coef:g} and {self.vf_coef:g}")


DEFAULT_EVAL_OUTPUT = Path("runs/evaluation.json")  # `sacglam evaluate`'s JSON, unless --output or --run says


@dataclass(frozen=True)
class EvalConfig:
    """Evaluate policies (the environment's expert, uniform-random, the LLM agent zero-shot) on
    Playground-Text's variants, BabyAI-Text or any protocol environment (`--env.name module:Class`,
    or the `env` of a run config given with `--config`): success rate per goal type, on the train
    goals and, when the environment has them, on its held-out goals."""

    variants: tuple[Variant, ...] = ()
    """Environment variants to evaluate on (default: simple and full, unless `--env.*` or a run
    config's `env` names the environment)."""
    env: EnvConfig = EnvConfig()
    """An environment to evaluate on, set as in `sacglam train` (`--env.name module:Class`, ...)."""
    env_given: Annotated[bool, tyro.conf.Suppress] = False
    """Whether `env` was given (an `--env.*` flag or a run config): set by the command line."""
    policies: tuple[Literal["expert", "random", "llm-sampled", "llm-greedy"], ...] = ()
    """Policies to evaluate: the environment's expert, uniform-random, and the LLM agent
    (`--agent.*`) sampling from its policy or taking its most probable action (default: expert and
    random, the expert only where the environment has one)."""
    episodes: int = 400
    """Episodes per policy, variant and goal set, split equally over the goal types."""
    num_envs: int = 32
    """Environments stepped together (policies act on a batch of states)."""
    seed: int = 0
    """Seed of the episodes (goals and scenes) and of the random policy."""
    output: Path | None = DEFAULT_EVAL_OUTPUT
    """Where to write the results as JSON, replacing any file there (`--output None`: nowhere);
    with `--run`, by default `evaluation.json` in the run's (or export's) folder when it is local."""
    progress: bool = True
    """Show a progress bar."""
    agent: AgentConfig = AgentConfig(critic="none")
    """The LLM agent of the llm-* policies (zero-shot: no critic needed)."""
    run: str | None = None
    """A run directory (path or URI) written by `sacglam train`, or a folder written by `sacglam
    export`: evaluate its trained agent (the newest intact checkpoint), sampled and greedy, on the run's own evaluation episodes (its
    seed + 10,000 and its `eval_episodes`, unless `--episodes` or `--env.*` say otherwise), next
    to random play and the expert on the same episodes."""
    run_episodes: Annotated[int | None, tyro.conf.Suppress] = None
    """`--episodes` when given explicitly with `--run` (set by the command line)."""
    output_given: Annotated[bool, tyro.conf.Suppress] = False
    """Whether `--output` was given (set by the command line): with `--run`, the default goes
    into the run's folder instead."""

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {self.num_envs}")

    def environments(self) -> list[tuple[str, EnvConfig]]:
        """(label, train-goal environment) pairs to evaluate, in order."""
        named: list[tuple[str, EnvConfig]] = [(variant, EnvConfig.variant(variant)) for variant in self.variants]
        if self.env_given or self.env != EnvConfig():  # the default environment is the `full` variant's
            named.append((self.env.name, self.env))
        return named or [(variant, EnvConfig.variant(variant)) for variant in DEFAULT_EVAL_VARIANTS]


@dataclass(frozen=True)
class GoalSamplerConfig:
    """Who chooses the goal of each training episode (docs/explanation/goal-sampler.md). Evaluation always
    uses the environment's own goal distributions."""

    mode: Literal["environment", "progress", "generalising"] = "environment"
    """environment: the environment draws every goal (the paper's setting); progress: the agent
    samples among the goals the social partner has reported, by absolute learning progress from
    per-goal outcome windows; generalising: by learning progress predicted for any goal text by a
    competence head on the agent's LLM features of the goal."""
    epsilon: float = 0.2
    """Share of the uniform floor over the discovered goals (the rest follows learning progress)."""
    window: int = 10
    """Outcomes per half of a goal's history: progress = |mean of the newer W - mean of the older W|."""
    optimistic_progress: float = 1.0
    """The progress of a goal without an estimate yet (fewer than 2 outcomes; generalising mode:
    before its features arrive or the head's first snapshot): the largest possible, so new goals
    are tried soon."""
    environment_share: float = 0.0
    """Fraction of episodes left to the environment's own goal draw (0: the sampler chooses all
    once it knows a goal)."""
    refresh: float = 0.125
    """The distribution is rebuilt once the outcomes and discoveries since the last build reach
    this fraction of the discovered goals (O(1) amortised per outcome; at least one)."""
    mastered: float = 0.9
    """Competence (mean of the newest `window` outcomes, a full window) at which a goal counts as
    mastered in the metrics."""
    estimator_hidden: int = 64
    """generalising: hidden units of the competence head."""
    estimator_lr: float = 3e-3
    """generalising: Adam step size of the competence head."""
    estimator_horizon: int = 256
    """generalising: outcomes between the head's current and past predictions whose difference is
    the learning progress."""
    estimator_memory: int = 256
    """generalising: the newest outcomes the head trains on (it tracks the competence of about
    the last `estimator_memory` outcomes: more smooths, less follows faster)."""

    def __post_init__(self) -> None:
        if not (0 <= self.epsilon <= 1 and 0 <= self.environment_share <= 1 and 0 < self.mastered <= 1):
            raise ValueError(
                f"goal_sampler: epsilon ({self.epsilon}) and environment_share ({self.environment_share}) must be in "
                f"[0, 1] and mastered ({self.mastered}) in (0, 1]"
            )
        if self.optimistic_progress <= 0 or self.refresh <= 0:
            raise ValueError("goal_sampler: optimistic_progress and refresh must be > 0")
        if min(self.window, self.estimator_hidden, self.estimator_horizon, self.estimator_memory) < 1:
            raise ValueError("goal_sampler: window and the estimator_* sizes must be >= 1")
        if self.estimator_lr <= 0:
            raise ValueError("goal_sampler: estimator_lr must be > 0")


ACTOR_ROLES = ("rollout-worker", "replay", "rollout-storage", "inference", "learner", "goal-sampler")


@dataclass(frozen=True)
class ResourcesConfig:
    """Ray resources of each actor (logical units: fractions let several actors share a core).
    GPU fields left at None take one GPU each when the cluster has one for each, share the cards
    when it has fewer (an inference actor and a learner on one GPU: 0.5 each), and take none on a
    cluster without GPUs."""

    worker_cpus: float = 1.0
    """CPUs of each rollout worker."""
    inference_cpus: float = 1.0
    """CPUs of each inference actor (also its torch thread count, rounded down, at least 1)."""
    inference_gpus: float | None = None
    """GPUs of each inference actor (None: 1 when the cluster has a GPU for each GPU role, a
    share of one when it has fewer, 0 without GPUs)."""
    learner_cpus: float = 1.0
    """CPUs of each learner actor (also its torch thread count, rounded down, at least 1)."""
    learner_gpus: float | None = None
    """GPUs of each learner actor (None: as `inference_gpus`)."""
    gpu_memory_fraction: float | None = None
    """The share of its GPU's memory each inference actor and learner may use (torch's
    per-process bound). None: an actor given a fraction f < 1 of a GPU is bounded to f (two actors
    sharing a card leave each other room), one given whole GPUs is not bounded."""
    replay_cpus: float = 1.0
    """CPUs of the replay actor."""
    goal_sampler_cpus: float = 0.1
    """CPUs of the goal-sampler actor (goal_sampler.mode other than 'environment'; it is light)."""
    inference_threads: int | None = None
    """torch threads of each inference actor (None: its CPUs rounded down, at least 1)."""
    learner_threads: int | None = None
    """torch threads of each learner actor (None: its CPUs rounded down, at least 1). More threads
    than CPUs oversubscribes the cores, which pays when the other actors are mostly idle. The
    local runner, one process that learns and acts, runs on this many when set (else on the
    process's count: torch's default, one per core, or a Tune trial's) and restores the count
    when the run ends."""
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    """Ray placement-group strategy for the run's actors."""
    placement_timeout_s: float = 60.0
    """Seconds to wait for the placement group before failing with what could not be placed."""
    node_resources: Annotated[dict[str, dict[str, float]], tyro.conf.Suppress] = field(default_factory=dict, hash=False)
    """Custom Ray resources each actor of a role asks for, which places it on the nodes that
    advertise them (`ray start --resources='{"env_node": 8}'`): {role: {resource: amount}}, roles
    `rollout-worker`, `replay` (PPO: `rollout-storage`), `inference`, `learner`, `goal-sampler`.
    For example, rollout workers and the replay actor on CPU nodes, away from the GPU nodes.
    (Config files only.)"""

    def __post_init__(self) -> None:
        values = [self.worker_cpus, self.inference_cpus, self.learner_cpus, self.replay_cpus, self.goal_sampler_cpus]
        values += [g for g in (self.inference_gpus, self.learner_gpus) if g is not None]
        if min(values) < 0 or self.placement_timeout_s <= 0:
            raise ValueError("resources must be >= 0 and placement_timeout_s > 0")
        if self.gpu_memory_fraction is not None and not 0 < self.gpu_memory_fraction <= 1:
            raise ValueError(
                f"gpu_memory_fraction must be in (0, 1] (a share of the card's memory), got {self.gpu_memory_fraction}"
            )
        for role, asked in self.node_resources.items():
            if role not in ACTOR_ROLES:
                raise ValueError(f"node_resources: unknown role {role!r}; the roles are {', '.join(ACTOR_ROLES)}")
            if not isinstance(asked, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and v > 0 for k, v in asked.items()
            ):
                raise ValueError(f"node_resources[{role!r}]: expected {{resource name: amount > 0}}, got {asked!r}")
            if {"CPU", "GPU", "memory"} & set(asked):
                raise ValueError(f"node_resources[{role!r}]: CPUs and GPUs are set by the *_cpus and *_gpus fields")


@dataclass(frozen=True)
class PipelineConfig:
    """The actor-learner pipeline (used by both runners: `ray` and the one-process `local`)."""

    rollout_workers: int = 1
    """Rollout workers; the run's `num_envs` environments are split evenly between them."""
    inference_actors: int = 1
    """Inference actors (one per GPU on a cluster); workers are assigned round-robin."""
    learners: int = 1
    """Learner actors; more than one trains data-parallel (torch.distributed: gloo on CPU, NCCL
    on GPU), each on batch_size / learners transitions."""
    chunk_steps: int = 1
    """Vector steps a rollout worker takes per call (one call = chunk_steps x its env count)."""
    max_steps_ahead: int = 64
    """How many env steps collection may run ahead of the updates the paper's schedule asks for
    (bounds the data/update ratio and every queue)."""
    inference_max_batch: int = 64
    """Most states one inference forward scores (dynamic micro-batching)."""
    inference_max_wait_ms: float = 5.0
    """Longest wait for more requests once one is queued."""
    weight_sync_every: int = 2
    """Learner updates between two weight broadcasts to inference."""
    checkpoint_every: int = 10_000
    """Env steps between checkpoints (0: only at the end of the run). The default bounds what a
    killed run loses to 10,000 env steps; with `keep_checkpoints: 2` a damaged newest checkpoint
    leaves the one before to resume from."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk."""
    resources: ResourcesConfig = ResourcesConfig()
    """Ray resources of each actor."""

    def __post_init__(self) -> None:
        counts = [
            self.rollout_workers,
            self.inference_actors,
            self.learners,
            self.chunk_steps,
            self.inference_max_batch,
            self.weight_sync_every,
            self.keep_checkpoints,
        ]
        if min(counts) < 1:
            raise ValueError(
                "rollout_workers, inference_actors, learners, chunk_steps, inference_max_batch, "
                "weight_sync_every and keep_checkpoints must be >= 1"
            )
        if self.max_steps_ahead < 0 or self.checkpoint_every < 0 or self.inference_max_wait_ms < 0:
            raise ValueError("max_steps_ahead, checkpoint_every and inference_max_wait_ms must be >= 0")


@functools.lru_cache(maxsize=8)
def _vocabulary(spec: EnvironmentSpec) -> tuple[str, ...]:
    """An environment's words, collected once per process: random play in a TextWorld or user
    environment takes seconds, and a config is rebuilt several times on the way to a run
    (command-line flags, `resolved_again`)."""
    return spec.vocabulary()


DEFAULT_WARM_START_STEPS = 500  # the cap a random-initialised model gets unless warm_start_steps says otherwise
DEFAULT_WARM_START_TARGET_KL = 0.02  # nats: where the default warm start stops (docs/explanation/algorithms.md)


@dataclass(frozen=True)
class TrainConfig:
    """Training SAC-GLAM, SAC-GLAM+HER (through the actor-learner pipeline) or PPO-GLAM."""

    algo: Literal["sac", "sac-her", "ppo"] = "sac-her"
    """sac: SAC-GLAM; sac-her: SAC-GLAM with hindsight relabeling and 50/50 batches; ppo: PPO-GLAM.
    Naming one gives its own defaults: sac the paper's SAC-GLAM settings (sac.her False), ppo a
    value head (agent.critic='value')."""
    env: EnvConfig = EnvConfig(n_objects=3, goals="simple-train", max_steps=8)
    """The training environment (its held-out goal set is evaluated too)."""
    agent: AgentConfig = AgentConfig(model="tiny-causal", critic_width=256)
    """The LLM agent."""
    sac: SACConfig = SACConfig.with_her()
    """SAC settings (default: the paper's SAC-GLAM+HER, table 3; `her` must match `algo`)."""
    ppo: PPOConfig = PPOConfig()
    """PPO settings (algo='ppo'; default: the paper's table 1)."""
    num_envs: int = 32
    """Environments stepped together."""
    total_env_steps: int = 25_000
    """Training budget in environment steps."""
    time_limit_s: float | None = None
    """Wall-clock seconds of training (counted once the models are loaded) after which the run
    ends early, as at its budget: the calls in flight finish (PPO also finishes the rollout it
    is collecting and its update), then the final evaluation and a checkpoint, and `--resume`
    continues to `total_env_steps` (with the limit again, unless a flag changes it). For a job
    of fixed length (a batch-system slot, a reserved GPU). None: no limit."""
    eval_every: int = 5_000
    """Environment steps between evaluations (also at the start and the end)."""
    eval_at_start: bool = True
    """Evaluate before any update (the zero-shot point). False skips it: for a run whose initial
    policy another run has already evaluated on the same episodes (the same model, seed and
    LoRA, whose adapters start at zero, under another algorithm)."""
    eval_episodes: int = 64
    """Episodes per evaluation and goal set (stratified by goal type); 0: no evaluation."""
    eval_modes: tuple[Literal["sampled", "greedy"], ...] = ("sampled", "greedy")
    """How the policy acts in evaluations: sampling from it, taking its most probable action, or
    both. Each mode's episodes and sampling seeds are the same whichever others run."""
    eval_held_out: bool = True
    """Evaluate on the held-out goal set too (when the environment has one)."""
    report_transcripts: int = 3
    """`sacglam train` records this many of the final evaluation's episodes (the first ones, train
    goals, greedy) as transcripts in <output_dir>/transcripts/ and links them from report.md, as
    `sacglam watch` would; 0: none."""
    log_every: int = 1_024
    """Environment steps between two training-metric records."""
    warm_start_steps: int | None = None
    """The most language warm-start steps before training (docs/explanation/algorithms.md): None (the default)
    gives a random-initialised model (`tiny-*`) up to 500 and a pre-trained one none; 0 turns it off."""
    warm_start_target_kl: float | None = DEFAULT_WARM_START_TARGET_KL
    """The warm start stops once its policy is this close to uniform over the candidates: the mean
    KL(uniform || pi) over 256 states of its random-play transcript, in nats, measured every 10
    steps. None: it runs all `warm_start_steps`. A run whose warm start ends above it warns."""
    warm_start_objective: Literal["uniform", "likelihood"] = "uniform"
    """`uniform`: cross-entropy from the uniform policy over each state's candidates; `likelihood`:
    next-token likelihood of random actions (what the results before issue 32 used; it leaves the
    critic unable to read the goal: docs/results/sanity.md)."""
    seed: int = 0
    """Seed of the model's head init, the environments, the buffer and the policy's sampling."""
    output_dir: str = "runs/train"
    """Where metrics (JSONL, CSV, TensorBoard), the config and the checkpoints go: a local path, or
    a URI every node of a cluster reaches (`s3://bucket/run`, `gs://bucket/run`; options such as
    `?endpoint_override=host:port` in the query string), read and written through pyarrow.fs."""
    progress: bool = True
    """Show a progress bar."""
    runner: Literal["local", "ray"] = "local"
    """Every algorithm runs through the actor-learner pipeline: `ray` (actors on a Ray cluster)
    or `local` (the same pipeline in one process, no Ray: for debugging and small runs)."""
    address: str | None = None
    """Ray cluster to join (`auto`, `ray://host:10001`, `host:6379`); None starts a local one."""
    resume: str | None = None
    """A run directory (path or URI) to continue from its newest checkpoint (its config.json is used)."""
    pipeline: PipelineConfig = PipelineConfig()
    """Actors, batching, weight sync and checkpoints of the pipeline."""
    goal_sampler: GoalSamplerConfig = GoalSamplerConfig()
    """Who chooses the training episodes' goals: the environment (default) or the agent itself."""

    @classmethod
    def nested_defaults(cls, data: dict[str, Any], defaults: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The defaults a run config's nested blocks are filled in over, for the method and the
        environment it names (`config_io.from_dict`): `algo: sac` gets the paper's SAC-GLAM
        settings (`SACConfig()`: no relabeling, uniform batches, its own entropy settings) and
        `algo: ppo` a value head, where the default run (SAC-GLAM+HER) has the paper's
        SAC-GLAM+HER settings and a Q-critic; an environment other than Playground-Text is filled
        in over `EnvConfig()` (the goal set every environment has, `train`, and `EnvConfig`'s own
        `n_objects` and `max_steps`), not over the simplified task. The command line's `--algo` and
        `--env.name` get the same (`cli.resolve`)."""
        out: dict[str, Any] = {}
        algo = data.get("algo", cls.algo)
        if algo == "sac":
            out["sac"] = SACConfig()
        if algo == "ppo":
            out["agent"] = defaults["agent"] | {"critic": "value"}
        env = data.get("env")
        named = env.get("name", "playground-text") if isinstance(env, dict) else "playground-text"
        if named != "playground-text" and str(defaults["env"]["goals"]).startswith("simple-"):
            # not the simplified task's 3 objects and 8 steps: BabyAI-Text and TextWorld read them
            out["env"] = EnvConfig()
        return out

    @staticmethod
    def upgrade(data: dict[str, Any]) -> dict[str, Any]:
        """A run's config.json (a full dump: every other field present) written before a field
        existed is read with what that run used, so a resumed run goes on as it began: before
        `warm_start_objective`, the likelihood warm start; before `warm_start_target_kl`, a fixed
        number of warm-start steps; before `agent.end_of_action`, no end-of-action token; before
        `agent.critic_input_norm`, the raw features; before `time_limit_s`, no limit; before
        `report_transcripts`, no transcripts."""
        import dataclasses

        data = dict(data)
        added_later = {"warm_start_objective", "warm_start_target_kl", "time_limit_s", "report_transcripts"}
        others = {f.name for f in dataclasses.fields(TrainConfig)} - added_later
        if others <= set(data):  # a full dump: fields it lacks did not exist when it was written
            data.setdefault("warm_start_objective", "likelihood")
            data.setdefault("warm_start_target_kl", None)  # a fixed number of steps
            data.setdefault("report_transcripts", 0)
            if isinstance(data.get("agent"), dict):
                data["agent"] = {"end_of_action": False, "lora_r": 16, "critic_input_norm": "none"} | data["agent"]
        return data

    def resolved_again(
        self,
        warm_start_steps: bool = True,
        vocabulary: bool = True,
        lora_r: bool = True,
        end_of_action: bool = True,
        critic_input_norm: bool = True,
    ) -> TrainConfig:
        """This config with the defaults that depend on the model and the environment worked out
        again for its current ones (after a command-line flag or a `replace` changed either): the
        warm-start steps (`warm_start_steps`), a tiny model's words (`vocabulary`), the LoRA rank
        (`lora_r`), the end-of-action token (`end_of_action`) and the critic's input
        standardisation (`critic_input_norm`); False keeps that value."""
        agent = replace(
            self.agent,
            tiny_vocabulary=() if vocabulary else self.agent.tiny_vocabulary,
            lora_r=None if lora_r else self.agent.lora_r,
            end_of_action=None if end_of_action else self.agent.end_of_action,
            critic_input_norm="auto" if critic_input_norm else self.agent.critic_input_norm,
        )
        return replace(self, warm_start_steps=None if warm_start_steps else self.warm_start_steps, agent=agent)

    def __post_init__(self) -> None:
        # Both defaults that depend on the model and the environment are resolved once, here (the
        # config is frozen), so config.json records what the run used; `resolved_again` redoes it.
        if self.warm_start_steps is None:
            steps = DEFAULT_WARM_START_STEPS if self.agent.random_initialised else 0
            object.__setattr__(self, "warm_start_steps", steps)
        elif self.warm_start_steps < 0:
            raise ValueError(f"warm_start_steps must be >= 0 (0: no warm start), got {self.warm_start_steps}")
        if self.report_transcripts < 0:
            raise ValueError(f"report_transcripts must be >= 0 (0: none), got {self.report_transcripts}")
        if self.warm_start_target_kl is not None and not self.warm_start_target_kl > 0:
            raise ValueError(
                f"warm_start_target_kl must be > 0 nats (or null for a fixed number of steps), got {self.warm_start_target_kl}"
            )
        agent = self.agent
        if agent.lora_r is None or agent.end_of_action is None or agent.critic_input_norm == "auto":  # recorded as used
            object.__setattr__(self, "agent", self.agent.resolved())
        if self.agent.random_initialised and not self.agent.tiny_vocabulary and self.env.name != "playground-text":
            words = _vocabulary(self.env.spec())
            if not words:
                raise ValueError(
                    f"env {self.env.name!r} gives no vocabulary for the tiny model's word-level tokenizer (it has no "
                    "`vocabulary` attribute and random play collected no words): use a pretrained model "
                    "(agent.model), or set agent.tiny_vocabulary"
                )
            object.__setattr__(self, "agent", replace(self.agent, tiny_vocabulary=words))
        if self.num_envs % self.pipeline.rollout_workers:
            raise ValueError(
                f"num_envs={self.num_envs} must split evenly over pipeline.rollout_workers={self.pipeline.rollout_workers}"
            )
        if self.algo != "ppo" and self.sac.batch_size % self.pipeline.learners:
            raise ValueError(
                f"sac.batch_size={self.sac.batch_size} must split evenly over pipeline.learners={self.pipeline.learners}"
            )
        if self.algo == "ppo" and self.ppo.minibatch_size % self.pipeline.learners:
            raise ValueError(
                f"ppo.minibatch_size={self.ppo.minibatch_size} must split evenly over pipeline.learners={self.pipeline.learners}"
            )
        if self.algo == "ppo":
            if self.agent.critic != "value":
                raise ValueError("algo='ppo' needs a value head: set agent.critic='value'")
            if self.ppo.rollout_steps % self.num_envs:
                raise ValueError(
                    f"ppo.rollout_steps={self.ppo.rollout_steps} must be a multiple of num_envs={self.num_envs}"
                )
        elif self.sac.her != (self.algo == "sac-her"):
            raise ValueError(
                f"algo={self.algo!r} but sac.her={self.sac.her}: use algo='sac-her' with sac.her=True, or algo='sac' "
                "with sac.her=False (and sac.sampling='uniform')"
            )
        if self.algo != "ppo" and self.agent.critic not in ("action", "observation"):
            raise ValueError("SAC needs a Q-critic: set agent.critic to 'action' (the paper's) or 'observation'")
        if self.algo == "ppo" and self.ppo.her_aligned and self.env.name != "playground-text":
            raise ValueError(
                "ppo.her_aligned relabels with sub-goals of Playground-Text's goal grammar; "
                f"env {self.env.name!r} has none: set ppo.her_aligned=False"
            )
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s must be > 0 seconds (or unset for no limit), got {self.time_limit_s}")
        below = [
            f"{name}={getattr(self, name)}"
            for name in ("num_envs", "total_env_steps", "eval_every", "log_every")
            if getattr(self, name) < 1
        ]
        if below:
            raise ValueError(f"{', '.join(below)}: num_envs, total_env_steps, eval_every and log_every must be >= 1")
        if self.eval_episodes < 0:
            raise ValueError(f"eval_episodes must be >= 0 (0: no evaluation), got {self.eval_episodes}")
        if not self.eval_modes or len(set(self.eval_modes)) != len(self.eval_modes):
            raise ValueError(f"eval_modes must name sampled, greedy or both, once each; got {list(self.eval_modes)}")
