"""Tiny random-initialised transformers for tests and CPU benchmarks, with a word-level tokenizer
built from an environment's vocabulary (Playground-Text's by default). Nothing is downloaded.

The weights come from a fixed seed, so every process that builds `tiny-causal` or `tiny-seq2seq`
holds the same base model (only the trainable state has to be shipped between Ray actors).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedModel, PreTrainedTokenizerFast

# Model classes from their own packages (the same objects `transformers` re-exports): mypy reads
# none of transformers' 400 model packages (pyproject.toml), so these are untyped to it.
from transformers.models.llama import LlamaConfig, LlamaForCausalLM
from transformers.models.t5 import T5Config, T5ForConditionalGeneration

from sacglam.envs.vocabulary import prompt_words

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")


def playground_vocabulary() -> list[str]:
    """Every word and punctuation mark of Playground-Text prompts and actions (plus specials)."""
    return tiny_vocabulary(())


def tiny_vocabulary(words: Sequence[str]) -> list[str]:
    """The special tokens, then `words` (Playground-Text's when empty), without repeats."""
    return list(dict.fromkeys(list(SPECIAL_TOKENS) + list(words or prompt_words())))


def word_level_tokenizer(words: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over `tiny_vocabulary(words)`: splits on white space and punctuation
    (`\\w+|[^\\w\\s]+`)."""
    vocab = {word: i for i, word in enumerate(tiny_vocabulary(words))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]"
    )


def tiny_causal_lm(vocab_size: int, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> PreTrainedModel:
    """A 2-layer Llama-architecture decoder (~0.1M parameters at the defaults)."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def tiny_seq2seq_lm(vocab_size: int, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> PreTrainedModel:
    """A 2+2-layer T5-architecture encoder-decoder."""
    config = T5Config(
        vocab_size=vocab_size,
        d_model=hidden_size,
        d_kv=hidden_size // 4,
        d_ff=2 * hidden_size,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=4,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=3,
        decoder_start_token_id=0,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return T5ForConditionalGeneration(config)
