"""The causal (packed) and seq2seq encodings, built with array operations, against references that
write each row token by token in a Python loop, as the layouts are described: every field equal,
on random batches."""

from dataclasses import fields

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sacglam.models.encoding import (
    CandidateTokenCache,
    PackedCausalBatch,
    Seq2SeqBatch,
    encode_packed_causal,
    encode_seq2seq,
)
from sacglam.models.tiny import playground_vocabulary, word_level_tokenizer

TOKENIZER = word_level_tokenizer()
WORDS = [w for w in playground_vocabulary() if w.isalpha()][:40]


def reference_packing(prompt_ids: list[list[int]], cand_ids: list[list[list[int]]], pad: int) -> dict:
    """Each state's row `[prompt | candidate 1 | ...]` written token by token; the mask from its
    definition: token i sees token j <= i of the prompt or of its own candidate; a padding token
    sees the prompt and itself."""
    T = max(len(p) + sum(len(a) for a in cs) for p, cs in zip(prompt_ids, cand_ids))
    B = len(prompt_ids)
    ids, positions = torch.full((B, T), pad), torch.zeros(B, T, dtype=torch.long)
    segments = torch.full((B, T), -1)
    logit_rows, target_row, target_ids, target_candidate, candidate_last, prompt_last = [], [], [], [], [], []
    candidate_tokens = []
    n = 0
    for b, (p, cs) in enumerate(zip(prompt_ids, cand_ids)):
        P = len(p)
        for t, token in enumerate(p):
            ids[b, t], positions[b, t], segments[b, t] = token, t, 0
        prompt_row = len(logit_rows)
        logit_rows.append(b * T + P - 1)
        prompt_last.append(b * T + P - 1)
        column = P
        for k, a in enumerate(cs):
            for j, token in enumerate(a):
                ids[b, column], positions[b, column], segments[b, column] = token, P + j, k + 1
                target_ids.append(token)
                target_candidate.append(n)
                candidate_tokens.append(b * T + column)
                target_row.append(prompt_row if j == 0 else len(logit_rows) - 1)
                if j < len(a) - 1:
                    logit_rows.append(b * T + column)
                column += 1
            candidate_last.append(b * T + column - 1)
            n += 1
    allowed = torch.zeros(B, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                si, sj = int(segments[b, i]), int(segments[b, j])
                if si == -1:
                    allowed[b, i, j] = i == j or sj == 0
                elif sj != -1 and j <= i and (sj == 0 or sj == si):
                    allowed[b, i, j] = True
    as_long = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
    return {
        "input_ids": ids,
        "position_ids": positions,
        "attention_allowed": allowed,
        "logit_rows": as_long(logit_rows),
        "target_row": as_long(target_row),
        "target_ids": as_long(target_ids),
        "target_candidate": as_long(target_candidate),
        "candidate_last": as_long(candidate_last),
        "candidate_tokens": as_long(candidate_tokens),
        "prompt_last": as_long(prompt_last),
    }


states = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),  # prompt words
        st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=5),  # actions
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60)
@given(states)
def test_packing_equals_the_token_by_token_reference(batch):
    prompts = [" ".join(words) for words, _ in batch]
    candidates = [[" ".join(action) for action in actions] for _, actions in batch]
    packed = encode_packed_causal(TOKENIZER, prompts, candidates, CandidateTokenCache(TOKENIZER, leading_space=True))
    prompt_ids = TOKENIZER(prompts)["input_ids"]
    cand_ids = [[TOKENIZER(" " + a, add_special_tokens=False)["input_ids"] for a in cs] for cs in candidates]
    expected = reference_packing(prompt_ids, cand_ids, TOKENIZER.pad_token_id)
    for field in fields(PackedCausalBatch):
        if field.name != "index":
            assert torch.equal(getattr(packed, field.name), expected[field.name]), field.name
            assert getattr(packed, field.name).dtype == expected[field.name].dtype, field.name
    assert packed.index.counts.tolist() == [len(c) for c in candidates]
    assert packed.index.lengths.tolist() == [len(ids) for cs in cand_ids for ids in cs]


def reference_seq2seq(prompt_ids: list[list[int]], action_ids: list[list[int]], pad: int, start: int) -> dict:
    """Encoder rows: the prompt, right-padded. Decoder rows: `[start, a_1, ..., a_L]`; targets:
    position j holds a_{j+1}; masks 1 on real entries."""
    P, L = max(map(len, prompt_ids)), max(map(len, action_ids))
    encoder_ids, encoder_mask = torch.full((len(prompt_ids), P), pad), torch.zeros(len(prompt_ids), P, dtype=torch.long)
    for b, p in enumerate(prompt_ids):
        for t, token in enumerate(p):
            encoder_ids[b, t], encoder_mask[b, t] = token, 1
    shape = (len(action_ids), L + 1)
    decoder_ids, decoder_mask = torch.full(shape, pad), torch.zeros(shape, dtype=torch.long)
    target_ids, target_mask = torch.full(shape, pad), torch.zeros(shape, dtype=torch.long)
    for n, a in enumerate(action_ids):
        decoder_ids[n, 0], decoder_mask[n, 0] = start, 1
        for j, token in enumerate(a):
            decoder_ids[n, j + 1], decoder_mask[n, j + 1] = token, 1
            target_ids[n, j], target_mask[n, j] = token, 1
    return {
        "encoder_ids": encoder_ids,
        "encoder_mask": encoder_mask,
        "decoder_ids": decoder_ids,
        "decoder_mask": decoder_mask,
        "target_ids": target_ids,
        "target_mask": target_mask,
    }


@settings(max_examples=60)
@given(states)
def test_seq2seq_encoding_equals_the_token_by_token_reference(batch):
    prompts = [" ".join(words) for words, _ in batch]
    candidates = [[" ".join(action) for action in actions] for _, actions in batch]
    start = 2
    encoded = encode_seq2seq(TOKENIZER, prompts, candidates, CandidateTokenCache(TOKENIZER, leading_space=False), start)
    prompt_ids = TOKENIZER(prompts)["input_ids"]
    action_ids = [TOKENIZER(a, add_special_tokens=False)["input_ids"] for cs in candidates for a in cs]
    expected = reference_seq2seq(prompt_ids, action_ids, TOKENIZER.pad_token_id, start)
    for field in fields(Seq2SeqBatch):
        if field.name != "index":
            assert torch.equal(getattr(encoded, field.name), expected[field.name]), field.name
            assert getattr(encoded, field.name).dtype == expected[field.name].dtype, field.name
    assert encoded.index.counts.tolist() == [len(c) for c in candidates]
    assert encoded.index.lengths.tolist() == [len(ids) for ids in action_ids]


def test_a_state_without_candidates_is_refused():
    for leading_space, encode in ((True, encode_packed_causal), (False, lambda *a: encode_seq2seq(*a, 2))):
        with pytest.raises(ValueError, match="at least one candidate"):
            encode(TOKENIZER, ["go", "go"], [["go"], []], CandidateTokenCache(TOKENIZER, leading_space=leading_space))
