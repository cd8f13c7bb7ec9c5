"""LoRA on the top blocks only (`agent.lora_layers`), and the frozen trunk below them run once.

With LoRA on the top k of a model's L transformer blocks, blocks 0..L-k-1 (the trunk) hold no
trainable weight. Two savings follow:

- **No autograd through the trunk.** Nothing below block L-k requires a gradient, so autograd
  records nothing there: no activation is kept and no backward runs through the trunk. This needs
  no code, only LoRA's placement (`top_block_modules`).
- **One trunk for several forwards of the same states.** The trunk's output on a batch depends on
  the batch alone, not on any trained weight: the SAC learner forwards its next states twice (the
  target weights for Q, the online weights for log pi), and both share one trunk pass.
  `DecoderSplit` runs a causal decoder in two halves (embeddings and the trunk's blocks; the top
  blocks and the final norm) by calling its blocks the way the decoder's own forward does.

The split is only used where it was checked to equal the decoder's own forward (`decoder_split`
runs both on a few tokens when the agent is built): a decoder laid out differently (a scaled
embedding, another block signature) falls back to plain forwards, which still get the first
saving. An encoder-decoder gets LoRA on its decoder's top blocks (the encoder and the decoder's
lower blocks frozen, no graph below) and plain forwards.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer


def block_stacks(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """The model's stacks of transformer blocks as (module name, blocks in order): one for a
    decoder-only model, the encoder's and the decoder's for T5. transformers marks every block
    as a `GradientCheckpointingLayer`."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList)
        and len(module) > 0
        and all(isinstance(block, GradientCheckpointingLayer) for block in module)
    ]


def top_block_modules(model: nn.Module, targets: tuple[str, ...], layers: int) -> list[str]:
    """Full names of the modules named in `targets` (e.g. q_proj) inside the top `layers` blocks:
    what LoRA adapts when `agent.lora_layers` is set. A decoder-only model's top blocks; an
    encoder-decoder's are its decoder's (the encoder feeds every decoder block through
    cross-attention, so an adapted encoder block would make the whole decoder record a graph).
    Raises ValueError (one line) when the stack has fewer blocks or no target sits in them."""
    is_encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    stacks = [(n, b) for n, b in block_stacks(model) if not is_encoder_decoder or n.split(".")[0] == "decoder"]
    if not stacks:
        raise ValueError(
            f"agent.lora_layers needs a model with transformer blocks; {type(model).__name__} has none that "
            "transformers marks (GradientCheckpointingLayer): unset agent.lora_layers"
        )
    names = []
    for stack_name, blocks in stacks:
        if layers > len(blocks):
            raise ValueError(
                f"agent.lora_layers={layers} but this model's {stack_name} has {len(blocks)} transformer blocks: "
                f"choose 1..{len(blocks)}, or unset it for LoRA on every block"
            )
        for index in range(len(blocks) - layers, len(blocks)):
            prefix = f"{stack_name}.{index}"
            names += [
                f"{prefix}.{name}" for name, _ in blocks[index].named_modules() if name.rpartition(".")[2] in targets
            ]
    if not names:
        raise ValueError(
            f"agent.lora_layers={layers}: none of the LoRA target modules {list(targets)} is inside the top "
            f"{layers} transformer blocks; name modules inside the blocks in agent.lora_target_modules"
        )
    return names


@dataclass(frozen=True)
class FrozenTrunk:
    """The hidden states after the trunk's blocks for one batch, and what the top blocks reuse."""

    hidden: torch.Tensor  # (B, T, H), in the base's dtype; no gradient, except from `DecoderSplit.below`
    attention_mask: torch.Tensor  # (B, 1, T, T): as handed to the decoder
    position_ids: torch.Tensor  # (B, T) long
    position_embeddings: tuple[torch.Tensor, torch.Tensor]  # rotary (cos, sin), each (B, T, head dim)


def _run_blocks(blocks, hidden, attention_mask, position_ids, position_embeddings) -> torch.Tensor:
    for block in blocks:
        out = block(
            hidden,
            attention_mask=attention_mask,
            position_ids=position_ids,
            position_embeddings=position_embeddings,
            use_cache=False,
        )
        hidden = out[0] if isinstance(out, tuple) else out  # transformers 4 returned a tuple
    return hidden


class DecoderSplit:
    """A Llama-family decoder (embed_tokens, rotary_emb, layers, norm) run as trunk + top.

    `trunk(...)` = embeddings and blocks [0, split); `top(trunk)` = blocks [split, L) and the final
    norm; `top(trunk(x))` is the decoder's `last_hidden_state` on x."""

    def __init__(self, decoder: Any, split: int):  # Any: the layout is checked by `decoder_split`
        self.decoder, self.split = decoder, split

    @property
    def _layers(self) -> nn.ModuleList:
        return self.decoder.layers

    @torch.no_grad()
    def trunk(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> FrozenTrunk:
        """Embeddings and the frozen blocks, without autograd. Shapes as in `FrozenTrunk`."""
        return self.below(input_ids, attention_mask, position_ids)

    def below(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> FrozenTrunk:
        """Embeddings and the blocks below the split, with autograd where their weights train (the
        hidden states then carry a graph: a trunk in name only). Shapes as in `FrozenTrunk`."""
        d = self.decoder
        hidden = d.embed_tokens(input_ids)
        position_embeddings = d.rotary_emb(hidden, position_ids=position_ids)
        hidden = _run_blocks(self._layers[: self.split], hidden, attention_mask, position_ids, position_embeddings)
        return FrozenTrunk(hidden, attention_mask, position_ids, position_embeddings)

    @property
    def top_blocks(self) -> list[nn.Module]:
        """The blocks above the split, in order."""
        return list(self._layers[self.split :])

    def top(self, trunk: FrozenTrunk) -> torch.Tensor:
        """The top blocks (with LoRA; gradients flow when enabled) and the final norm -> (B, T, H)."""
        hidden = _run_blocks(
            self._layers[self.split :],
            trunk.hidden,
            trunk.attention_mask,
            trunk.position_ids,
            trunk.position_embeddings,
        )
        return self.decoder.norm(hidden)


class CriticTower(nn.Module):
    """The critic's own copy of a decoder's top blocks and final norm (`agent.critic_weights:
    own`): it reads the hidden states below them, detached, so the critic loss trains this copy
    (and the head) and nothing the policy uses, and the policy loss never reaches it. The copy
    keeps each weight's `requires_grad`: every weight of a fully fine-tuned model, the LoRA
    weights of a LoRA block (its own adapter on a copy of the frozen base weights)."""

    def __init__(self, blocks: list[nn.Module], norm: nn.Module):
        super().__init__()
        self.blocks = nn.ModuleList(copy.deepcopy(block) for block in blocks)
        self.norm = copy.deepcopy(norm)

    def forward(self, below: FrozenTrunk) -> torch.Tensor:
        """The hidden states below the top blocks -> the critic's last hidden states (B, T, H)."""
        hidden = _run_blocks(
            self.blocks, below.hidden.detach(), below.attention_mask, below.position_ids, below.position_embeddings
        )
        return self.norm(hidden)


LLAMA_LAYOUT = ("embed_tokens", "rotary_emb", "layers", "norm")


@torch.no_grad()
def decoder_split(decoder: Any, split: int, attention_mask_for) -> DecoderSplit | None:
    """A `DecoderSplit` at block `split` if the decoder has the Llama layout and its two halves give
    the decoder's own output on a short probe (8 tokens, one packed-style row), twice from one
    trunk; else None.

    `attention_mask_for((B, T, T) bool) -> the mask the decoder takes` (as the scorer builds it)."""
    if split < 0 or not all(hasattr(decoder, name) for name in LLAMA_LAYOUT):
        return None
    if not all(isinstance(block, GradientCheckpointingLayer) for block in decoder.layers):
        return None
    device = decoder.embed_tokens.weight.device
    T = 8
    ids = (torch.arange(T, device=device) * 7 + 3)[None] % decoder.embed_tokens.num_embeddings
    positions = torch.arange(T, device=device)[None]
    mask = attention_mask_for(torch.ones(T, T, dtype=torch.bool, device=device).tril()[None])
    split_decoder = DecoderSplit(decoder, split)
    try:
        trunk = split_decoder.trunk(ids, mask, positions)
        halves = split_decoder.top(trunk)
        again = split_decoder.top(trunk)  # a trunk is reused: the top must leave it as it was
    except TypeError:  # a block with another signature
        return None
    if not torch.equal(halves, again):
        return None
    whole = decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).last_hidden_state
    if halves.shape != whole.shape or not torch.allclose(halves.float(), whole.float(), rtol=1e-4, atol=1e-5):
        return None
    return split_decoder
