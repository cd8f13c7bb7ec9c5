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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from itertools import chain

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
    candidate_tokens: (
        torch.Tensor
    )  # (K,) long: flat position of every candidate token, candidate after candidate (target_candidate's order)
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
    """Token ids of action strings; actions repeat across steps, so each is tokenized once.
    `end_id`: a token appended to every action (the end-of-action token the policy scores:
    `AgentConfig.end_of_action`), None for none."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, leading_space: bool, limit: int = 200_000, end_id: int | None = None
    ):
        self.tokenizer, self.leading_space, self.limit, self.end_id = tokenizer, leading_space, limit, end_id
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
                self._ids[action] = ids if self.end_id is None else [*ids, self.end_id]
        return [self._ids[a] for a in actions]


def _candidate_counts(candidates: Sequence[Sequence[str]]) -> np.ndarray:
    """(B,) int64 candidates per state. Raises when a state has none (or the batch is empty):
    there is nothing to score, and the encoders' row arithmetic assumes one candidate per state."""
    counts = np.fromiter(map(len, candidates), np.int64, len(candidates))
    if counts.size == 0 or counts.min() < 1:
        raise ValueError("every state needs at least one candidate action")
    return counts


def _candidate_index(counts: np.ndarray, lengths: np.ndarray) -> CandidateIndex:
    """The index of `counts` (B,) candidates per state with `lengths` (N,) tokens each."""
    state = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    slot = np.arange(len(state), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return CandidateIndex(
        state=torch.from_numpy(state),
        slot=torch.from_numpy(slot),
        lengths=torch.from_numpy(lengths),
        counts=torch.from_numpy(counts),
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
    """Pack each state's prompt and all its candidates into one row (see the module docstring).

    Built with array operations over the batch's tokens rather than a Python loop over states and
    candidates: 10.7-12.4 against 14.2-15.7 ms for 256 full-task states with the tiny model's
    tokenizer, 0.8-0.9 against 1.0-1.1 ms for 16 (`benchmarks/speed/encoding.py`, docs/results/speed-learner.md).
    A test checks every field against a loop that writes the rows token by token."""
    if len(prompts) != len(candidates):
        raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists")
    counts = _candidate_counts(candidates)
    prompt_ids = _prompt_ids(tokenizer, prompts)
    cand_ids = [candidate_tokens(c) for c in candidates]
    B, N = len(prompt_ids), int(counts.sum())
    pieces = np.arange(B + N, dtype=np.int64)
    prompt_len = np.fromiter(map(len, prompt_ids), np.int64, B)
    cand_len = np.fromiter((len(a) for cs in cand_ids for a in cs), np.int64, N)
    # A row is a sequence of pieces: the state's prompt, then each of its candidates. Piece
    # numbers run over the batch; state b's prompt is piece b + (candidates of earlier states).
    first_cand = np.cumsum(counts) - counts  # (B,) number of each state's first candidate
    prompt_piece = np.arange(B, dtype=np.int64) + first_cand  # (B,)
    piece_state = np.repeat(np.arange(B, dtype=np.int64), counts + 1)  # (B+N,)
    piece_segment = pieces - prompt_piece[piece_state]  # 0: prompt, k+1: candidate k
    is_prompt_piece = piece_segment == 0
    piece_len = np.empty(B + N, np.int64)
    piece_len[is_prompt_piece], piece_len[~is_prompt_piece] = prompt_len, cand_len
    piece_start = np.cumsum(piece_len) - piece_len  # (B+N,) first token number of each piece
    row_len = prompt_len + np.add.reduceat(cand_len, first_cand)  # (B,) every state has a candidate
    T, K = int(row_len.max()), int(row_len.sum())
    # Per token, in row order: state by state, its prompt then its candidates.
    tokens = np.fromiter(chain.from_iterable(chain(p, *cs) for p, cs in zip(prompt_ids, cand_ids)), np.int64, K)
    token_piece = np.repeat(pieces, piece_len)  # (K,)
    token_state = piece_state[token_piece]
    offset = np.arange(K, dtype=np.int64) - piece_start[token_piece]  # place inside its piece
    segment = piece_segment[token_piece]
    in_candidate = segment > 0
    piece_last = offset == piece_len[token_piece] - 1
    column = np.arange(K, dtype=np.int64) - (np.cumsum(row_len) - row_len)[token_state]
    flat = token_state * T + column  # (K,) position in the flattened (B*T) layout
    # Candidate positions restart after the prompt: token j of a candidate sits at P + j.
    position = offset + np.where(in_candidate, prompt_len[token_state], 0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids, position_ids = np.full(B * T, pad, np.int64), np.zeros(B * T, np.int64)
    segment_ids = np.full(B * T, -1, np.int64)  # -1: padding
    input_ids[flat], position_ids[flat], segment_ids[flat] = tokens, position, segment
    # Rows whose next-token distribution is needed: the prompt's last token (it predicts every
    # candidate's first token) and each candidate token but the last (it predicts the next one).
    logit_token = np.where(in_candidate, ~piece_last, piece_last)
    logit_number = np.cumsum(logit_token) - 1  # (K,) a logit token's place in logit_rows
    prompt_last_token = piece_start[prompt_piece] + prompt_len - 1  # (B,)
    scored = np.flatnonzero(in_candidate)  # (K_scored,) every candidate token is scored
    target_row = np.where(
        offset[scored] == 0, logit_number[prompt_last_token][token_state[scored]], logit_number[scored - 1]
    )
    segment_t = torch.from_numpy(segment_ids.reshape(B, T))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    same_block = segment_t[:, :, None] == segment_t[:, None, :]
    prompt_key = (segment_t == 0)[:, None, :]
    allowed = causal & (same_block | prompt_key) & (segment_t != -1)[:, None, :]
    # A padding query sees the prompt and itself (never an all-masked row); no output reads it.
    allowed |= torch.eye(T, dtype=torch.bool) & (segment_t == -1)[:, :, None]
    return PackedCausalBatch(
        input_ids=torch.from_numpy(input_ids.reshape(B, T)),
        position_ids=torch.from_numpy(position_ids.reshape(B, T)),
        attention_allowed=allowed,
        logit_rows=torch.from_numpy(flat[logit_token]),
        target_row=torch.from_numpy(target_row),
        target_ids=torch.from_numpy(tokens[scored]),
        target_candidate=torch.from_numpy(token_piece[scored] - token_state[scored] - 1),
        candidate_last=torch.from_numpy(flat[in_candidate & piece_last]),
        candidate_tokens=torch.from_numpy(flat[scored]),
        prompt_last=torch.from_numpy(np.arange(B, dtype=np.int64) * T + prompt_len - 1),
        index=_candidate_index(counts, cand_len),
    )


def _right_padded(
    rows: Iterable[Iterable[int]], lengths: np.ndarray, width: int, pad: int
) -> tuple[np.ndarray, np.ndarray]:
    """`rows` (row i holds `lengths[i]` ids) left-aligned in a (len(lengths), width) int64 array,
    `pad` after them, and its bool mask of real tokens. Filled through the mask in one assignment
    (row-major, so each row's ids land in order): per-row tensor writes took 48-51 ms for 256
    full-task states in `encode_seq2seq`, this 5 ms."""
    valid = np.arange(width) < lengths[:, None]
    ids = np.full(valid.shape, pad, np.int64)
    ids[valid] = np.fromiter(chain.from_iterable(rows), np.int64, int(lengths.sum()))
    return ids, valid


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
    counts = _candidate_counts(candidates)
    prompt_ids = _prompt_ids(tokenizer, prompts)
    flat = [ids for cs in candidates for ids in candidate_tokens(cs)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    prompt_len = np.fromiter(map(len, prompt_ids), np.int64, len(prompt_ids))
    action_len = np.fromiter(map(len, flat), np.int64, len(flat))
    P, L = int(prompt_len.max()), int(action_len.max())
    encoder_ids, encoder_valid = _right_padded(prompt_ids, prompt_len, P, pad)
    # One column more than the longest action: the start token, then every action token.
    decoder_ids, decoder_valid = _right_padded(((decoder_start_id, *a) for a in flat), action_len + 1, L + 1, pad)
    target_ids, target_valid = _right_padded(flat, action_len, L + 1, pad)  # position j predicts a_{j+1}
    return Seq2SeqBatch(
        encoder_ids=torch.from_numpy(encoder_ids),
        encoder_mask=torch.from_numpy(encoder_valid.astype(np.int64)),
        decoder_ids=torch.from_numpy(decoder_ids),
        decoder_mask=torch.from_numpy(decoder_valid.astype(np.int64)),
        target_ids=torch.from_numpy(target_ids),
        target_mask=torch.from_numpy(target_valid.astype(np.int64)),
        index=_candidate_index(counts, action_len),
    )
