"""Optional kernel fusion for the LLM: every transformer block compiled by `torch.compile`.

Why blocks and not the whole model: the blocks are where the time goes (matrix multiplies plus the
memory-bound element-wise work around them: RMSNorm, rotary embeddings, SiLU, LoRA's scaling,
which a compiler fuses into few kernels), they are identical (one compiled graph serves them all),
and the code around them (packed masks, the sparse LM head, index arithmetic) stays eager and
simple. `Module.compile` compiles in place, so parameter names, state dicts and checkpoints are
the same with and without compilation. Shapes are dynamic (packed batches change length every
call). What still makes a new graph: each grad mode (training, `no_grad` for targets,
`inference_mode` for acting), the first block of a training forward (its input needs no
gradient), a batch of one, and for T5 the block kinds (first or later, encoder or decoder).

Two process-wide settings matter. transformers runs every block through one wrapper function, so
all graphs of all blocks count against Dynamo's single recompile limit (8 by default: a causal
model uses about that many, T5 more, and past the limit blocks silently run eager); we raise it.
And Inductor's `freezing` would bake the weights into no-grad graphs as constants, so the target
critic's swapped weights and the weights a learner sends would be ignored; we refuse it. A third
is changed: AOTAutograd's donated buffers (a compiled backward reusing its saved tensors' memory)
forbid a second backward through the same graph, and the SAC learner's per-loss gradient norms
take the critic loss's gradient with `retain_graph` before the full backward; we turn them off.
"""

from __future__ import annotations

import torch
import torch._dynamo.config
import torch._functorch.config
import torch._inductor.config
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

RECOMPILE_LIMIT = 64


class CompilationUnavailableError(RuntimeError):
    """`agent.compile` was asked for where torch cannot compile."""


def check_compiler(device: torch.device) -> None:
    """Raise a one-line error when Inductor has no C++ compiler for CPU code (GPU kernels use Triton)."""
    if device.type != "cpu":
        return
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # Inductor raises its own InvalidCxxCompiler; any failure means the same here
        raise CompilationUnavailableError(
            f"agent.compile needs a C++ compiler for CPU kernels and found none ({type(error).__name__}): "
            "install g++ (or set CXX to one), or set agent.compile false"
        ) from error


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated transformer blocks (decoder layers; T5's encoder and decoder blocks).

    transformers marks them as `GradientCheckpointingLayer`s, in every architecture it ships."""
    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def compile_transformer_blocks(model: nn.Module, device: torch.device) -> int:
    """Compile every transformer block of `model` in place (dynamic shapes); returns how many.

    Nothing runs until the first forward, which then compiles (tens of seconds on CPU; Inductor
    caches the generated code on disk, so a second process on the same machine starts faster)."""
    check_compiler(device)
    if torch._inductor.config.freezing:
        raise CompilationUnavailableError(
            "agent.compile cannot run with Inductor's freezing on (TORCHINDUCTOR_FREEZING=1): it bakes weights into "
            "the compiled code, so target-critic swaps and weight updates would be ignored; unset it"
        )
    # One budget for every block's graphs (see the module docstring): room for both model kinds.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    # The gradient diagnostics backpropagate twice through one graph (see the module docstring).
    torch._functorch.config.donated_buffer = False
    blocks = transformer_blocks(model)
    if not blocks:
        raise CompilationUnavailableError(
            f"agent.compile found no transformer blocks in {type(model).__name__} (no GradientCheckpointingLayer "
            "modules): set agent.compile false for this model"
        )
    for block in blocks:
        block.compile(dynamic=True)
    return len(blocks)
