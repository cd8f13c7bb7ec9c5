"""The GLAM agent: an LLM policy over candidate actions and a Q-critic on the same LLM.

One shared-prefix forward returns, for every candidate of every state, log pi(a|s) (paper eq. 1-2)
and Q(s, a) (appendix B). LoRA adapts the attention projections of the (optionally 4-bit) base,
in every transformer block or in the top `lora_layers` only (`trunk`: the frozen blocks below run
without autograd, and a learner can run them once for several forwards of the same states); the
trainable state (LoRA + heads, or every weight when lora_r = 0) is a small state dict, which is
what a learner ships to inference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import cast

import torch
from torch import nn

from sacglam.config import AgentConfig
from sacglam.errors import UserInputError
from sacglam.models.critic import ActionCritic, ObservationCritic, ValueHead
from sacglam.models.encoding import (
    CandidateTokenCache,
    EncodedBatch,
    PackedCausalBatch,
    encode_packed_causal,
    encode_seq2seq,
    to_device,
)
from sacglam.models.loading import LanguageModel, load_language_model
from sacglam.models.scoring import (
    CandidateScores,
    packed_attention_mask,
    packed_hidden,
    score_seq2seq,
    scores_from_hidden,
)
from sacglam.models.trunk import (
    CriticTower,
    DecoderSplit,
    FrozenTrunk,
    block_stacks,
    decoder_split,
    top_block_modules,
)
from sacglam.types import AgentOutput

ATTENTION_PROJECTIONS = {
    "causal": ("q_proj", "k_proj", "v_proj", "o_proj"),  # Llama, SmolLM, Qwen, Mistral
    "seq2seq": ("q", "k", "v", "o"),  # T5, Flan-T5
}


def candidate_prompt(observation: str, candidates: Sequence[str]) -> str:
    """The observation with a `Possible actions: a, b, c` line before its final cue line.

    The cue is the observation's last line when that line ends in a colon (`Action:` in
    Playground-Text, BabyAI-Text and the sanity environments, or an environment's own, such as
    `Your move:`); the list goes just above it. An observation without one (TextWorld's, a single
    line, one ending in a question) is kept whole, and the list and `Action:` follow it: no text
    the environment wrote is dropped. Trailing whitespace is dropped, so the prompt ends in the cue.
    """
    text = observation.rstrip()
    head, newline, last = text.rpartition("\n")
    actions = f"Possible actions: {', '.join(candidates)}"
    if newline and last.endswith(":"):
        return f"{head}\n{actions}\n{last}"
    return f"{text}\n{actions}\nAction:"


class TrainableStateMismatch(UserInputError, ValueError):
    """Saved weights (a checkpoint's, a learner's) whose names or shapes are not this agent's: the
    model, LoRA or critic settings differ from those they were trained with."""


class GLAMAgent(nn.Module):
    """LLM policy + critic. `forward(batch)` takes the output of `encode(observations, candidates)`."""

    @classmethod
    def from_export(cls, directory: str, **agent_changes: object) -> GLAMAgent:
        """The agent a `sacglam export` folder holds, in eval mode, on CPU in float32 unless
        `agent_changes` say otherwise (`device="cuda"`): `sacglam.models.exported`."""
        from sacglam.models.exported import exported_agent_parts, load_export_weights

        config, language_model, settings = exported_agent_parts(directory, **agent_changes)
        agent = cls(config, language_model=language_model)
        load_export_weights(agent, directory, settings)
        return agent.eval()

    def __init__(self, config: AgentConfig, language_model: LanguageModel | None = None):
        super().__init__()
        self.config = config
        base_dtype = getattr(torch, config.resolved_dtype)
        lm = language_model or load_language_model(
            config.model,
            load_in_4bit=config.load_in_4bit,
            device=config.resolved_device,
            dtype=base_dtype,
            vocabulary=config.tiny_vocabulary,
        )
        if not config.load_in_4bit and lm.model.dtype != base_dtype:
            lm.model.to(base_dtype)  # a model passed in: the config decides the base's dtype
        self.kind, self.tokenizer = lm.kind, lm.tokenizer
        if config.lora_rank > 0:
            # peft (with transformers' generation code and bitsandbytes) costs each process about
            # 3 s of import: only a LoRA agent pays it (every Ray actor holding a model imports this).
            from peft import LoraConfig, get_peft_model

            for p in lm.model.parameters():
                p.requires_grad_(False)
            targets = tuple(config.lora_target_modules or ATTENTION_PROJECTIONS[lm.kind])
            if config.lora_layers is not None:  # full module names inside the top blocks of each stack
                targets = tuple(top_block_modules(lm.model, targets, config.lora_layers))
            lora = LoraConfig(
                r=config.lora_rank,
                lora_alpha=config.lora_alpha,
                lora_dropout=0.0,
                target_modules=list(targets),
            )
            # LoRA weights in float32 on a bfloat16 base (peft casts the adapter's input to them).
            self.llm: nn.Module = get_peft_model(lm.model, lora, autocast_adapter_dtype=True)
        else:
            self.llm = lm.model
            for p in self.llm.parameters():
                p.requires_grad_(True)
        embeddings = cast(nn.Embedding, lm.model.get_input_embeddings())
        hidden, device = embeddings.embedding_dim, embeddings.weight.device
        # The critic's own top blocks split the decoder where they start; the policy's forward then
        # runs below that split once for both (no frozen trunk is shared across forwards).
        self._tower_split = self._critic_tower_split(lm)  # before compiling, as the next
        self._split = self._decoder_split(lm) if self._tower_split is None else None  # the check runs the blocks once
        if config.compile:
            from sacglam.models.compilation import compile_transformer_blocks  # torch._dynamo: 2 s of import

            compile_transformer_blocks(self.llm, device)
        standardise = config.standardises_critic_input
        if config.critic == "action":
            self.critic: nn.Module | None = ActionCritic(
                hidden, config.critic_width, config.n_critics, standardise=standardise
            ).to(device)
        elif config.critic == "observation":
            self.critic = ObservationCritic(
                hidden, config.max_actions, config.critic_width, config.n_critics, standardise=standardise
            ).to(device)
        elif config.critic == "value":
            self.critic = ValueHead(
                hidden, config.critic_width, config.value_head_activation, standardise=standardise
            ).to(device)
        else:
            self.critic = None
        if self._tower_split is not None:
            assert isinstance(self.critic, (ActionCritic, ObservationCritic))
            self.critic.tower = CriticTower(self._tower_split.top_blocks, self.base_model.get_decoder().norm)
        self.end_token_id: int | None = None
        """The token scored after every action (`AgentConfig.end_of_action`), or None."""
        if config.scores_end_of_action:
            self.end_token_id = self.tokenizer.eos_token_id
            if self.end_token_id is None:
                raise ValueError(
                    f"agent.end_of_action scores an end-of-sequence token after each action, but {config.model}'s "
                    "tokenizer has none: set agent.end_of_action false"
                )
        self._candidate_tokens = CandidateTokenCache(
            self.tokenizer, leading_space=self.kind == "causal", end_id=self.end_token_id
        )
        self._decoder_start: int = getattr(lm.model.config, "decoder_start_token_id", None) or 0

    def _decoder_split(self, lm: LanguageModel) -> DecoderSplit | None:
        """Trunk + top halves of the decoder when LoRA leaves blocks frozen below it (`trunk`)."""
        if self.config.lora_layers is None or lm.kind != "causal":
            return None
        (_, blocks), *_ = block_stacks(self.base_model)
        if self.config.lora_layers >= len(blocks):  # LoRA on every block: no frozen block to share
            return None
        model = self.base_model
        (_, blocks), *_ = block_stacks(model)
        return decoder_split(
            model.get_decoder(), len(blocks) - self.config.lora_layers, lambda a: packed_attention_mask(model, a)
        )

    def _critic_tower_split(self, lm: LanguageModel) -> DecoderSplit | None:
        """Where the critic's own blocks start (`AgentConfig.critic_weights: own`), else None."""
        blocks_wanted = self.config.critic_tower_blocks
        if not blocks_wanted:
            return None
        model = lm.model
        stacks = block_stacks(model)
        fix = "use agent.critic_weights shared"
        if lm.kind != "causal" or not stacks:
            raise UserInputError(
                f"agent.critic_weights=own copies the top blocks of a causal decoder; {self.config.model} is "
                f"{'an encoder-decoder' if lm.kind != 'causal' else 'not one with transformer blocks'}: {fix}"
            )
        (_, blocks), *_ = stacks
        if blocks_wanted > len(blocks):
            raise UserInputError(
                f"agent.critic_blocks={blocks_wanted} but {self.config.model} has {len(blocks)} transformer blocks: "
                f"choose 1..{len(blocks)}"
            )
        split = decoder_split(
            model.get_decoder(), len(blocks) - blocks_wanted, lambda a: packed_attention_mask(model, a)
        )
        if split is None:
            raise UserInputError(
                f"agent.critic_weights=own runs the critic's blocks on the decoder's hidden states, which needs the "
                f"Llama layout (embed_tokens, rotary_emb, layers, norm); {self.config.model}'s decoder is another: {fix}"
            )
        return split

    def reset_critic_tower(self) -> None:
        """With the critic's own blocks (`critic_weights: own`): copy the policy's top blocks and
        final norm into them again, so that the critic starts from what the policy has become (the
        language warm start trains the policy after the agent is built). Nothing without them."""
        if self._tower_split is None:
            return
        tower = self.critic.tower if self.critic is not None else None
        assert isinstance(tower, CriticTower)
        with torch.no_grad():
            for copy, block in zip(tower.blocks, self._tower_split.top_blocks, strict=True):
                copy.load_state_dict(block.state_dict())
            tower.norm.load_state_dict(self.base_model.get_decoder().norm.state_dict())

    @property
    def has_own_critic_weights(self) -> bool:
        """Whether the critic reads its own copy of the top blocks (`critic_weights: own`)."""
        return self._tower_split is not None

    @property
    def shares_frozen_trunk(self) -> bool:
        """Whether `frozen_trunk` gives a trunk (LoRA on the top blocks of a decoder it can split)."""
        return self._split is not None

    @property
    def device(self) -> torch.device:
        return self.base_model.get_input_embeddings().weight.device

    @property
    def base_model(self):
        """The transformers model (with LoRA layers injected when LoRA is on)."""
        return self.llm.get_base_model() if hasattr(self.llm, "get_base_model") else self.llm

    # ------------------------------------------------------------------ inputs

    def prompts(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[str]:
        if self.config.prompt_template == "candidates":
            return [candidate_prompt(o, c) for o, c in zip(observations, candidates, strict=True)]
        return list(observations)

    def encode(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> EncodedBatch:
        """Tokenize a batch of states into shared-prefix inputs (CPU tensors; see `encoding`)."""
        prompts = self.prompts(observations, candidates)
        if self.kind == "causal":
            return encode_packed_causal(self.tokenizer, prompts, candidates, self._candidate_tokens)
        return encode_seq2seq(self.tokenizer, prompts, candidates, self._candidate_tokens, self._decoder_start)

    # ------------------------------------------------------------------ forward

    def frozen_trunk(self, batch: EncodedBatch) -> FrozenTrunk | None:
        """The batch's hidden states after the frozen blocks below LoRA, without autograd; None when
        there is no trunk to share (LoRA on every block, an encoder-decoder, a decoder `trunk`
        cannot split). Hand it to `forward`, `candidate_scores` or `q_values` for the same batch:
        they then run the top blocks only, whatever weights the top holds at that moment."""
        if self._split is None:
            return None
        batch = to_device(batch, self.device)
        assert isinstance(batch, PackedCausalBatch)
        mask = packed_attention_mask(self.base_model, batch.attention_allowed)
        return self._split.trunk(batch.input_ids, mask, batch.position_ids)

    def candidate_scores(
        self,
        batch: EncodedBatch,
        trunk: FrozenTrunk | None = None,
        with_log_likelihood: bool = True,
        with_critic_features: bool = True,
    ) -> CandidateScores:
        """Per-candidate scores; `trunk`: this batch's `frozen_trunk` (the top blocks run on it);
        without `with_log_likelihood` a causal model skips its LM head (log-likelihoods are 0).
        With the critic's own blocks, `with_log_likelihood=False` also skips the policy's top
        blocks and `with_critic_features=False` the critic's (the features are then the policy's)."""
        batch = to_device(batch, self.device)
        if isinstance(batch, PackedCausalBatch) and self._tower_split is not None:
            return self._scores_with_own_critic(batch, with_log_likelihood, with_critic_features)
        if isinstance(batch, PackedCausalBatch):
            model = self.base_model
            if trunk is not None:
                assert self._split is not None
                hidden = self._split.top(trunk)
            else:
                hidden = packed_hidden(model, batch)
            return scores_from_hidden(model, batch, hidden, with_log_likelihood, self.config.critic_input)
        return score_seq2seq(self.base_model, batch, self.config.critic_input)

    def _scores_with_own_critic(
        self, batch: PackedCausalBatch, with_log_likelihood: bool, with_critic_features: bool
    ) -> CandidateScores:
        """The policy's scores from its own top blocks and the critic's features from the critic's
        copy of them, both on one pass of the blocks below (`critic_weights: own`)."""
        assert self._tower_split is not None and self.critic is not None
        model, critic_input = self.base_model, self.config.critic_input
        below = self._tower_split.below(
            batch.input_ids, packed_attention_mask(model, batch.attention_allowed), batch.position_ids
        )
        policy = None
        if with_log_likelihood or not with_critic_features:
            policy = scores_from_hidden(model, batch, self._tower_split.top(below), with_log_likelihood, critic_input)
        if not with_critic_features:
            assert policy is not None
            return policy
        tower = self.critic.tower
        assert isinstance(tower, CriticTower)
        critic = scores_from_hidden(model, batch, tower(below), False, critic_input)
        log_likelihood = policy.log_likelihood if policy is not None else critic.log_likelihood
        return CandidateScores(log_likelihood, critic.candidate_features, critic.prompt_features)

    def forward(self, batch: EncodedBatch, with_critic: bool = True, trunk: FrozenTrunk | None = None) -> AgentOutput:
        """Policy (and critic) outputs for an encoded batch; `trunk` as in `candidate_scores`."""
        scores = self.candidate_scores(batch, trunk, with_critic_features=with_critic)
        return self.outputs_from_scores(batch, scores, with_critic)

    def q_values(self, batch: EncodedBatch, trunk: FrozenTrunk | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q (B, C), the minimum over twin critics and 0 at padding; mask (B, C)) without the
        policy: a causal model's LM head does not run (what a target-critic forward needs)."""
        scores = self.candidate_scores(batch, trunk, with_log_likelihood=False)
        index = batch.index
        device = scores.candidate_features.device
        mask = index.mask().to(device)
        q = self._q_values(scores, index.state.to(device), index.slot.to(device), mask)
        return q.min(0).values, mask

    def outputs_from_scores(
        self, batch: EncodedBatch, scores: CandidateScores, with_critic: bool = True
    ) -> AgentOutput:
        """Lay per-candidate scores out as (B, C) tensors: the policy's softmax and the critic."""
        index = batch.index
        device = scores.log_likelihood.device
        B, C = len(index.counts), index.max_candidates
        state, slot = index.state.to(device), index.slot.to(device)
        mask = index.mask().to(device)
        ll = scores.log_likelihood
        if self.config.scoring == "mean":
            ll = ll / index.lengths.to(device)
        action_ll = torch.zeros(B, C, dtype=torch.float32, device=device).index_put((state, slot), ll)
        log_pi = action_ll.masked_fill(~mask, float("-inf")).log_softmax(-1)
        q = q_critics = value = None
        if with_critic and isinstance(self.critic, ValueHead):
            features = scores.prompt_features.detach() if self.config.critic_detach else scores.prompt_features
            value = self.critic(features.float())
        elif with_critic and self.critic is not None:
            q_critics = self._q_values(scores, state, slot, mask)
            q = q_critics.min(0).values
        return AgentOutput(
            log_pi=log_pi, action_log_likelihood=action_ll, q=q, mask=mask, value=value, q_critics=q_critics
        )

    def _q_values(self, scores: CandidateScores, state, slot, mask) -> torch.Tensor:
        """(n_critics, B, C), 0 at padding."""
        detach = self.config.critic_detach
        n = self.config.n_critics
        if isinstance(self.critic, ActionCritic):
            features = scores.candidate_features.detach() if detach else scores.candidate_features
            per_candidate = self.critic(features.float())  # (n, N)
            q = torch.zeros((n, *mask.shape), dtype=torch.float32, device=mask.device)
            return q.index_put((torch.arange(n, device=mask.device)[:, None], state[None], slot[None]), per_candidate)
        features = scores.prompt_features.detach() if detach else scores.prompt_features
        assert isinstance(self.critic, ObservationCritic)
        C = mask.shape[1]
        if C > self.critic.max_actions:
            raise ValueError(
                f"a state has {C} candidates but the observation critic has max_actions={self.critic.max_actions}; "
                "raise AgentConfig.max_actions"
            )
        return self.critic(features.float())[:, :, :C].masked_fill(~mask, 0.0)

    def _unprimed_critic_statistics(self):
        """The critic's input statistics while they have seen no batch; None once they have, or
        when the critic reads raw features."""
        norm = getattr(self.critic, "input_norm", None)
        return norm if norm is not None and float(norm.count) == 0 else None

    def critic_statistics_unprimed(self) -> bool:
        """True while the critic standardises its input and its statistics have seen no batch (what
        `prime_critic_statistics` fills): a caller can skip encoding a batch for it otherwise."""
        return self._unprimed_critic_statistics() is not None

    def prime_critic_statistics(self, batch: EncodedBatch) -> None:
        """Give the critic's input statistics a batch's features when they have none yet (a
        learner's first update, before it computes any target), so that no forward ever reads the
        raw features of a head that will read standardised ones. One extra forward, once per run."""
        norm = self._unprimed_critic_statistics()
        if norm is None:
            return
        with torch.no_grad():
            scores = self.candidate_scores(batch, with_log_likelihood=False)
        features = scores.candidate_features if isinstance(self.critic, ActionCritic) else scores.prompt_features
        norm.update(features.float())

    @contextmanager
    def learning_critic_statistics(self) -> Iterator[None]:
        """Within it, forwards with gradients add their critic-input features to the critic's input
        statistics (`sacglam.models.standardise`; nothing happens without standardisation). A
        learner wraps its update's forward of the current states in it, and nothing else."""
        norm = getattr(self.critic, "input_norm", None)
        if norm is None:
            yield
            return
        norm.learning = True
        try:
            yield
        finally:
            norm.learning = False

    # ------------------------------------------------------------------ trainable state

    def _trained_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor training changes: the parameters with gradients, and the critic's input
        statistics (buffers a learner's updates accumulate: `sacglam.models.standardise`)."""
        tensors: dict[str, torch.Tensor] = {name: p for name, p in self.named_parameters() if p.requires_grad}
        if self.critic is not None:
            tensors.update(
                (f"critic.{name}", b) for name, b in self.critic.named_buffers() if name.startswith("input_norm.")
            )
        return tensors

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights that training changes (LoRA + heads, or all when lora_r = 0) and the
        critic's input statistics, as CPU copies: what a learner ships and a checkpoint keeps."""
        return {name: t.detach().to("cpu", copy=True) for name, t in self._trained_tensors().items()}

    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Load what `trainable_state_dict` gave (e.g. from a learner); raises on a key or shape mismatch."""
        params = self._trained_tensors()
        missing, unexpected = sorted(set(params) - set(state)), sorted(set(state) - set(params))
        if missing or unexpected:
            norm = any(".input_norm." in k for k in missing + unexpected)
            raise TrainableStateMismatch(
                f"trainable state does not fit this agent (same model, LoRA and critic settings needed): "
                f"missing {missing[:5]}, unexpected {unexpected[:5]}"
                + (
                    "; the critic's input statistics differ: set agent.critic_input_norm as the state was trained "
                    "(none for states from before the setting existed)"
                    if norm
                    else ""
                )
            )
        for name, p in params.items():  # check everything before changing anything
            if p.shape != state[name].shape:
                raise TrainableStateMismatch(
                    f"trainable state does not fit this agent: {name!r} has shape {tuple(state[name].shape)}, "
                    f"expected {tuple(p.shape)}"
                )
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(state[name])
