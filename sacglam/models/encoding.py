"""Tokenize a batch of (prompt, candidate actions) into the tensors of one shared-prefix forward.

Causal models, packed: one sequence per state, `[prompt | candidate 1 | candidate 2 | ...]`, with
a block attention mask (each candidate token sees the prompt and the earlier tokens of its own
candidate, never another candidate) and position ids that restart after the prompt for every
candidate, so each candidate is scored exactly as if it followed the prompt alone.

Seq2seq models: the prompts are encoded once (`encoder_ids`), and every candidate is a decoder
sequence `[start, a_1, ..., a_L]` decoded against its state's encoder output: position j-1
predicts `a_j` (the policy's log-probs), and position L, whose input is the action's last token,
has seen the whole action (the action critic's feature; a decoder that stopped at `a_{L-1}` would
give actions that differ only in their last token the same Q).

Notation: B states, N candidates over the whole batch, T packed length, P prompt length, L
candidate length, K scored tokens. Index tensors address rows of a flattened `(B*T, ...)` view.
Candidates are tokenized as continuations of the prompt: causal tokenizers get `" " + action`
(the prompt ends with `Action:`), seq2seq decoders get the action text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class CandidateIndex:
    """Where each candidate sits in the `(B, C_max)` layout of the policy's outputs."""

    state: torch.Tensor  # (N,) long: which state the candidate belongs to
    slot: torch.Tensor  # (N,) long: its position among that state's candidates
    lengths: torch.Tensor  # (N,) long: its number of tokens
    counts: torch.Tensor  # (B,) long: candidates per state

    @property
    def max_candidates(self) -> int:
        return int(self.counts.max())

    def mask(self) -> torch.Tensor:
        """(B, C_max) bool: True where a state has a candidate."""
        return torch.arange(self.max_candidates)[None, :] < self.counts[:, None]


@dataclass(frozen=True)
class PackedCausalBatch:
    """Shared-prefix inputs of a causal LM: one packed row per state."""

    input_ids: torch.Tensor  # (B, T) long, right-padded
    position_ids: torch.Tensor  # (B, T) long
    attention_allowed: torch.Tensor  # (B, T, T) bool: [b, i, j] True when token i may attend to j
    logit_rows: torch.Tensor  # (R,) long: flat (b*T + t) positions whose next-token distribution is needed
    target_row: torch.Tensor  # (K,) long: index into logit_rows predicting each scored token
    target_ids: torch.Tensor  # (K,) long: the scored token ids
    target_candidate: torch.Tensor  # (K,) long: the candidate each scored token belongs to
    candidate_last: torch.Tensor  # (N,) long: flat position of each candidate's last token
    prompt_last: torch.Tensor  # (B,) long: flat position of each prompt's last token
    index: CandidateIndex


@dataclass(frozen=True)
class Seq2SeqBatch:
    """Encode-once inputs of an encoder-decoder LM."""

    encoder_ids: torch.Tensor  # (B, P) long, right-padded
    encoder_mask: torch.Tensor  # (B, P) long
    decoder_ids: torch.Tensor  # (N, L+1) long: decoder start token, then all the candidate's tokens
    decoder_mask: torch.Tensor  # (N, L+1) long: 1 on the start token and the candidate's tokens
    target_ids: torch.Tensor  # (N, L+1) long: at position j, the token position j predicts (a_{j+1}); pad elsewhere
    target_mask: torch.Tensor  # (N, L+1) long: 1 where target_ids holds one of the candidate's tokens
    index: CandidateIndex


EncodedBatch = PackedCausalBatch | Seq2SeqBatch


def to_device(batch: EncodedBatch, device: torch.device | str) -> EncodedBatch:
    """A copy of `batch` with every tensor on `device` (the index stays on the CPU)."""
    moved = {f.name: getattr(batch, f.name) for f in fields(batch)}
    for name, value in moved.items():
        if isinstance(value, torch.Tensor):
            moved[name] = value.to(device, non_blocking=True)
    return type(batch)(**moved)


def token_ids(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], add_special_tokens: bool = True
) -> list[list[int]]:
    """`tokenizer(texts, add_special_tokens=...)["input_ids"]`, straight from the Rust backend when
    that gives the same ids: a fast tokenizer with no truncation, padding or special-token
    splitting set on its backend (the state the transformers call leaves it in for a plain call).
    The backend's `encode_batch_fast` skips the offsets and the Python wrapping: 0.78 against
    1.57 ms for 16 full-task prompts, paid twice per SAC update. Any other tokenizer takes the
    transformers call."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if tokenizer.is_fast else None
    if (
        backend is None
        or backend.truncation is not None
        or backend.padding is not None
        or getattr(backend, "encode_special_tokens", False)
    ):
        return tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]
    return [encoding.ids for encoding in backend.encode_batch_fast(list(texts), add_special_tokens=add_special_tokens)]


class CandidateTokenCache:
    """Token ids of action strings; actions repeat across steps, so each is tokenized once."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, leading_space: bool, limit: int = 200_000):
        self.tokenizer, self.leading_space, self.limit = tokenizer, leading_space, limit
        self._ids: dict[str, list[int]] = {}

    def __call__(self, actions: Sequence[str]) -> list[list[int]]:
        missing = [a for a in dict.fromkeys(actions) if a not in self._ids]
        if missing:
            if len(self._ids) + len(missing) > self.limit:
                self._ids.clear()
            texts = [(" " + a) if self.leading_space else a for a in missing]
            for action, ids in zip(missing, token_ids(self.tokenizer, texts, add_special_tokens=False)):
                if not ids:
                    raise ValueError(f"action {action!r} tokenizes to no token; it cannot be scored")
                self._ids[action] = ids
        return [self._ids[a] for a in actions]


def _long(values: list) -> torch.Tensor:
    """A (nested, rectangular) list of ints as a long tensor; through numpy, several times faster
    than `torch.tensor` on Python lists."""
    return torch.from_numpy(np.asarray(values, dtype=np.int64))


def _candidate_index(candidates: Sequence[Sequence[str]], lengths: list[int]) -> CandidateIndex:
    counts = [len(c) for c in candidates]
    if min(counts, default=0) < 1:
        raise ValueError("every state needs at least one candidate action")
    counts_array = np.asarray(counts, dtype=np.int64)
    state = np.repeat(np.arange(len(counts)), counts_array)
    slot = np.arange(len(state)) - np.repeat(np.cumsum(counts_array) - counts_array, counts_array)
    return CandidateIndex(
        state=torch.from_numpy(state),
        slot=torch.from_numpy(slot),
        lengths=_long(lengths),
        counts=torch.from_numpy(counts_array),
    )


def _prompt_ids(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> list[list[int]]:
    ids = token_ids(tokenizer, prompts)
    if any(len(p) == 0 for p in ids):
        raise ValueError("a prompt tokenizes to no token")
    return ids


def encode_packed_causal(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    candidates: Sequence[Sequence[str]],
    candidate_tokens: CandidateTokenCache,
) -> PackedCausalBatch:
    """Pack each state's prompt and all its candidates into one row (see the module docstring)."""
    if len(prompts) != len(candidates):
        raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists")
    prompt_ids = _prompt_ids(tokenizer, prompts)
    cand_ids = [candidate_tokens(c) for c in candidates]
    lengths = [len(p) + sum(len(a) for a in cs) for p, cs in zip(prompt_ids, cand_ids)]
    T = max(lengths)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    # Rows are built as Python lists and turned into tensors once: per-slice tensor writes cost
    # more than the forward pass itself for small models.
    # segment 0: prompt, k+1: candidate k, -1: padding
    id_rows: list[list[int]] = []
    position_rows: list[list[int]] = []
    segment_rows: list[list[int]] = []
    logit_rows: list[int] = []
    target_row: list[int] = []
    target_ids: list[int] = []
    target_candidate: list[int] = []
    candidate_last: list[int] = []
    prompt_last: list[int] = []
    n = 0  # running candidate number over the batch
    for b, (p_ids, cs) in enumerate(zip(prompt_ids, cand_ids)):
        P = len(p_ids)
        ids, positions, segments = list(p_ids), list(range(P)), [0] * P
        base = b * T
        shared_row = len(logit_rows)  # the prompt's last position predicts every first action token
        logit_rows.append(base + P - 1)
        prompt_last.append(base + P - 1)
        for k, a_ids in enumerate(cs):
            start, L = len(ids), len(a_ids)
            ids += a_ids
            positions += range(P, P + L)
            segments += [k + 1] * L
            # token j > 0 is predicted at the candidate's position j - 1; token 0 at the prompt's end
            target_row.append(shared_row)
            target_row += range(len(logit_rows), len(logit_rows) + L - 1)
            logit_rows += range(base + start, base + start + L - 1)
            target_ids += a_ids
            target_candidate += [n] * L
            candidate_last.append(base + start + L - 1)
            n += 1
        padding = T - len(ids)
        id_rows.append(ids + [pad] * padding)
        position_rows.append(positions + [0] * padding)
        segment_rows.append(segments + [-1] * padding)
    input_ids, position_ids, segment = _long(id_rows), _long(position_rows), _long(segment_rows)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    same_block = segment[:, :, None] == segment[:, None, :]
    prompt_key = (segment == 0)[:, None, :]
    allowed = causal & (same_block | prompt_key) & (segment != -1)[:, None, :]
    allowed |= torch.eye(T, dtype=torch.bool) & (segment == -1)[:, :, None]  # padding sees itself only
    return PackedCausalBatch(
        input_ids=input_ids,
        position_ids=position_ids,
        attention_allowed=allowed,
        logit_rows=_long(logit_rows),
        target_row=_long(target_row),
        target_ids=_long(target_ids),
        target_candidate=_long(target_candidate),
        candidate_last=_long(candidate_last),
        prompt_last=_long(prompt_last),
        index=_candidate_index(candidates, [len(a) for cs in cand_ids for a in cs]),
    )


def encode_seq2seq(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    candidates: Sequence[Sequence[str]],
    candidate_tokens: CandidateTokenCache,
    decoder_start_id: int,
) -> Seq2SeqBatch:
    """Prompts for the encoder (once per state); one decoder row per candidate."""
    if len(prompts) != len(candidates):
        raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists")
    prompt_ids = _prompt_ids(tokenizer, prompts)
    flat = [ids for cs in candidates for ids in candidate_tokens(cs)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    P, L = max(len(p) for p in prompt_ids), max(len(a) for a in flat)
    encoder_ids = torch.full((len(prompts), P), pad, dtype=torch.long)
    encoder_mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for b, p in enumerate(prompt_ids):
        encoder_ids[b, : len(p)] = torch.tensor(p)
        encoder_mask[b, : len(p)] = 1
    # One column more than the longest action: the start token, then every action token.
    decoder_ids = torch.full((len(flat), L + 1), pad, dtype=torch.long)
    decoder_mask = torch.zeros((len(flat), L + 1), dtype=torch.long)
    target_ids = torch.full((len(flat), L + 1), pad, dtype=torch.long)
    target_mask = torch.zeros((len(flat), L + 1), dtype=torch.long)
    for n, a in enumerate(flat):
        decoder_ids[n, : len(a) + 1] = torch.tensor([decoder_start_id] + a)
        decoder_mask[n, : len(a) + 1] = 1
        target_ids[n, : len(a)] = torch.tensor(a)
        target_mask[n, : len(a)] = 1
    return Seq2SeqBatch(
        encoder_ids=encoder_ids,
        encoder_mask=encoder_mask,
        decoder_ids=decoder_ids,
        decoder_mask=decoder_mask,
        target_ids=target_ids,
        target_mask=target_mask,
        index=_candidate_index(candidates, [len(a) for a in flat]),
    )
