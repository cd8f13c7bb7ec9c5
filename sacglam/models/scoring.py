"""Forward passes that score candidate actions: the shared-prefix fast path and its naive twin.

Both return, per candidate, the sum of its tokens' log-probabilities given the prompt (paper eq. 1)
and the LM's last hidden state on (prompt, candidate) — the critic's input — plus a per-state
hidden state that depends on the prompt only (input of the observation-only critic). The naive
paths run one sequence per candidate and tokenize the actions themselves; tests check the fast
paths equal them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.modeling_outputs import BaseModelOutput

from sacglam.models.encoding import PackedCausalBatch, Seq2SeqBatch


@dataclass(frozen=True)
class CandidateScores:
    log_likelihood: torch.Tensor  # (N,) float32: sum of the candidate's token log-probs
    candidate_features: torch.Tensor  # (N, H): last hidden state at the candidate's last token
    prompt_features: torch.Tensor  # (B, H): a hidden state that sees the prompt only


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T, T) bool -> (B, 1, T, T) additive mask: 0 where allowed, the dtype's minimum elsewhere
    (finite, so a row never turns into NaN). Eager attention adds it; SDPA accepts it too."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min
    )[:, None]


def model_device(model: PreTrainedModel) -> torch.device:
    """Where the model's input embeddings live (the device its inputs go to)."""
    return cast(nn.Embedding, model.get_input_embeddings()).weight.device


def _float_dtype(model: PreTrainedModel) -> torch.dtype:
    dtype = cast(nn.Embedding, model.get_input_embeddings()).weight.dtype
    return dtype if dtype.is_floating_point else torch.float32


def packed_attention_mask(model: PreTrainedModel, allowed: torch.Tensor) -> torch.Tensor:
    """The (B, 1, T, T) mask handed to the decoder for `allowed` (B, T, T, bool).

    SDPA takes the boolean mask as is, and its CPU kernel runs faster on it than on an additive
    float mask (about 20% on the tiny model's packed batches, forward and backward); transformers'
    own SDPA masks are boolean too. Other attention implementations (eager adds the mask to the
    scores) get the additive form."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        return allowed[:, None]
    return additive_mask(allowed, _float_dtype(model))


def packed_hidden(model: PreTrainedModel, batch: PackedCausalBatch) -> torch.Tensor:
    """The decoder's last hidden states (after the final norm) on the packed rows -> (B, T, H)."""
    return model.get_decoder()(
        input_ids=batch.input_ids,
        attention_mask=packed_attention_mask(model, batch.attention_allowed),
        position_ids=batch.position_ids,
        use_cache=False,
    ).last_hidden_state


CriticInput = Literal["last", "mean"]


def scores_from_hidden(
    model: PreTrainedModel,
    batch: PackedCausalBatch,
    hidden: torch.Tensor,
    with_log_likelihood: bool = True,
    critic_input: CriticInput = "last",
) -> CandidateScores:
    """Per-candidate scores from the packed rows' last hidden states `hidden` (B, T, H): the LM head
    runs only at the rows that predict a scored token (the prompt's last position once, then inside
    each candidate). Without `with_log_likelihood` (a forward that needs the critic's features
    only) the LM head does not run and `log_likelihood` is zeros. `critic_input`: the candidate
    feature is the hidden state at its last token (`last`) or the mean over its tokens (`mean`)."""
    flat = hidden.reshape(-1, hidden.shape[-1])  # (B*T, H)
    log_likelihood = torch.zeros(len(batch.candidate_last), dtype=torch.float32, device=flat.device)
    if with_log_likelihood:
        log_probs = model.get_output_embeddings()(flat[batch.logit_rows]).float().log_softmax(-1)  # (R, V)
        token_log_probs = log_probs[batch.target_row, batch.target_ids]  # (K,)
        log_likelihood = _per_candidate_grid(token_log_probs, batch).sum(1)
    if critic_input == "mean":
        lengths = batch.index.lengths.to(flat.device, non_blocking=True)
        # summed in float32 (a bfloat16 base's states would round on the way)
        features = _per_candidate_grid(flat[batch.candidate_tokens].float(), batch).sum(1) / lengths[:, None]
    else:
        features = flat[batch.candidate_last]
    return CandidateScores(log_likelihood, features, flat[batch.prompt_last])


def _per_candidate_grid(values: torch.Tensor, batch: PackedCausalBatch) -> torch.Tensor:
    """(K, ...) values of the candidate tokens, candidate after candidate -> (N, longest candidate,
    ...), zero after each candidate's tokens; a sum along dim 1 then adds in a fixed order.

    A scatter-add (`index_add`) would be shorter, but on CUDA it adds with atomics in whatever order
    the threads arrive: the same batch scored twice differed by 2 float32 ulps (7.6e-6 at a
    log-likelihood of -50 on an H200), enough to make PPO's first ratio differ from 1."""
    lengths = batch.index.lengths  # (N,), on the CPU (the index stays there)
    # Every candidate token is scored, candidate after candidate: the CPU twin of target_candidate.
    candidate = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    place = (
        torch.arange(len(candidate)) - (torch.cumsum(lengths, 0) - lengths)[candidate]
    )  # (K,) place in its candidate
    grid = values.new_zeros(len(lengths), int(lengths.max()), *values.shape[1:])
    return grid.index_put((batch.target_candidate, place.to(grid.device, non_blocking=True)), values)


def score_packed_causal(
    model: PreTrainedModel, batch: PackedCausalBatch, critic_input: CriticInput = "last"
) -> CandidateScores:
    """One forward per state over `[prompt | all candidates]`, then `scores_from_hidden`."""
    return scores_from_hidden(model, batch, packed_hidden(model, batch), critic_input=critic_input)


def score_seq2seq(model: PreTrainedModel, batch: Seq2SeqBatch, critic_input: CriticInput = "last") -> CandidateScores:
    """Encode each prompt once, then decode all candidates against it (no prompt recomputation:
    the encoder output is indexed per candidate). Decoder rows are `[start, a_1, ..., a_L]`:
    position j-1 scores a_j, and the candidate feature is read at position L, after the action's
    last token, so Q(s, a) sees the whole action (`last`), or is the mean over positions 1..L,
    whose inputs are the action's tokens (`mean`)."""
    encoder_hidden = model.get_encoder()(
        input_ids=batch.encoder_ids, attention_mask=batch.encoder_mask
    ).last_hidden_state
    state = batch.index.state.to(encoder_hidden.device)
    out = model(
        encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden[state]),
        attention_mask=batch.encoder_mask[state],
        decoder_input_ids=batch.decoder_ids,
        decoder_attention_mask=batch.decoder_mask,
        output_hidden_states=True,
        use_cache=False,
    )
    token_log_probs = out.logits.float().log_softmax(-1).gather(-1, batch.target_ids[..., None]).squeeze(-1)  # (N, L+1)
    log_likelihood = torch.where(batch.target_mask.bool(), token_log_probs, 0.0).sum(-1)
    decoder_hidden = out.decoder_hidden_states[-1]  # (N, L+1, H), after the final norm
    rows = torch.arange(len(decoder_hidden), device=decoder_hidden.device)
    lengths = batch.index.lengths.to(decoder_hidden.device)  # position L: input a_L, the whole action seen
    if critic_input == "mean":
        actions = decoder_hidden[:, 1:].float() * batch.decoder_mask[:, 1:, None]  # float32 sum, as the causal one
        features = actions.sum(1) / lengths[:, None]
    else:
        features = decoder_hidden[rows, lengths]
    first_of_state = (torch.cumsum(batch.index.counts, 0) - batch.index.counts).to(rows.device)
    # Position 0 holds the decoder start token: it attends to the prompt only.
    return CandidateScores(log_likelihood, features, decoder_hidden[first_of_state, 0])


# ---------------------------------------------------------------------------- naive twins


def _right_padded(rows: list[list[int]], pad: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention mask), both (len(rows), longest row), padding on the right."""
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (T - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows], device=device)
    return ids, mask


def _naive_action_ids(
    tokenizer: PreTrainedTokenizerBase, action: str, leading_space: bool, end_id: int | None
) -> list[int]:
    ids = tokenizer((" " + action) if leading_space else action, add_special_tokens=False)["input_ids"]
    return ids + ([] if end_id is None else [end_id])


def naive_score_causal(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    candidates: Sequence[Sequence[str]],
    end_id: int | None = None,
    critic_input: str = "last",
) -> CandidateScores:
    """One right-padded sequence `prompt + candidate` per candidate, full LM head everywhere;
    `end_id` is appended to every candidate (and scored) when given; the candidate feature is the
    hidden state at its last token, or (`critic_input="mean"`) the mean over its tokens."""
    prompt_ids = tokenizer(list(prompts))["input_ids"]
    rows, spans = [], []
    for p, cs in zip(prompt_ids, candidates):
        for action in cs:
            a = _naive_action_ids(tokenizer, action, leading_space=True, end_id=end_id)
            rows.append(p + a)
            spans.append((len(p), len(a)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids, mask = _right_padded(rows, pad, model_device(model))
    hidden = model.get_decoder()(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    log_probs = model.get_output_embeddings()(hidden).float().log_softmax(-1)
    ll, features, prompt_features = [], [], []
    first = 0
    for n, (P, L) in enumerate(spans):
        targets = ids[n, P : P + L]
        ll.append(log_probs[n, P - 1 : P + L - 1].gather(-1, targets[:, None]).sum())
        features.append(hidden[n, P : P + L].mean(0) if critic_input == "mean" else hidden[n, P + L - 1])
    for cs in candidates:
        prompt_features.append(hidden[first, spans[first][0] - 1])
        first += len(cs)
    return CandidateScores(torch.stack(ll), torch.stack(features), torch.stack(prompt_features))


def naive_score_seq2seq(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    candidates: Sequence[Sequence[str]],
    end_id: int | None = None,
    critic_input: str = "last",
) -> CandidateScores:
    """One row per candidate: the prompt, re-encoded for every candidate, in the encoder and
    `[start] + action` in the decoder (both right-padded), full LM head everywhere. Logits at
    positions 0..L-1 score the action's tokens; the feature is the decoder's last hidden state at
    position L (after the action's last token); the prompt feature is position 0 (the start token)."""
    device = model_device(model)
    start = model.config.decoder_start_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prompt_ids = tokenizer(list(prompts))["input_ids"]
    encoder_rows: list[list[int]] = []
    decoder_rows: list[list[int]] = []
    firsts: list[int] = []
    for p, cs in zip(prompt_ids, candidates):
        firsts.append(len(decoder_rows))
        for action in cs:
            encoder_rows.append(p)
            decoder_rows.append([start] + _naive_action_ids(tokenizer, action, leading_space=False, end_id=end_id))
    encoder_ids, encoder_mask = _right_padded(encoder_rows, pad, device)
    decoder_ids, decoder_mask = _right_padded(decoder_rows, pad, device)
    out = model(
        input_ids=encoder_ids,
        attention_mask=encoder_mask,
        decoder_input_ids=decoder_ids,
        decoder_attention_mask=decoder_mask,
        output_hidden_states=True,
        use_cache=False,
    )
    log_probs = out.logits.float().log_softmax(-1)
    hidden = out.decoder_hidden_states[-1]
    ll, features = [], []
    for n, row in enumerate(decoder_rows):
        L = len(row) - 1  # action tokens
        ll.append(log_probs[n, :L].gather(-1, decoder_ids[n, 1 : L + 1, None]).sum())
        features.append(hidden[n, 1 : L + 1].mean(0) if critic_input == "mean" else hidden[n, L])
    return CandidateScores(torch.stack(ll), torch.stack(features), hidden[firsts, 0])


def naive_score(
    kind: str,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    candidates: Sequence[Sequence[str]],
    end_id: int | None = None,
    critic_input: str = "last",
) -> CandidateScores:
    """The naive twin for a model of `kind` ("causal" or "seq2seq"); `end_id`: the token scored
    after every action (`GLAMAgent.end_token_id`); `critic_input`: `AgentConfig.critic_input`."""
    naive = naive_score_causal if kind == "causal" else naive_score_seq2seq
    return naive(model, tokenizer, prompts, candidates, end_id, critic_input)
