"""What an actor does with the GPU share Ray gave it: bound its process's use of the GPU's memory
to its share (two actors sharing one card must not starve each other), and say so when it was
given a GPU that torch cannot see (a cluster that declares GPUs on a machine without one: the
actor runs on the CPU)."""

from __future__ import annotations

import os
import sys
import warnings

import torch

from sacglam.errors import SacglamWarning


def ray_gpu_ids() -> list[str]:
    """The GPUs Ray assigned to this process (empty outside a Ray actor, or without GPUs)."""
    ray = sys.modules.get("ray")  # a Ray worker has imported it; a local run never pays its import
    if ray is None or not ray.is_initialized():
        return []
    try:
        return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    except Exception:  # not in a Ray worker: nothing was assigned
        return []


def settle_on_device(role: str, device: torch.device, memory_fraction: float | None) -> float | None:
    """Bound this process's CUDA memory on `device` to `memory_fraction` of the card (None: no
    bound; a CPU device: nothing to bound). Warns once, naming `role`, when Ray assigned GPUs but
    the agent runs on the CPU. Returns the fraction set, or None."""
    assigned = ray_gpu_ids()
    if device.type != "cuda":
        if assigned:
            warnings.warn(
                f"{role} was given GPU {', '.join(assigned)} by Ray (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')!r}) but torch finds no CUDA device here: it runs on the "
                "CPU (agent.device auto); install a CUDA build of torch, or set pipeline.resources.*-gpus 0",
                SacglamWarning,
                stacklevel=2,
            )
        return None
    if memory_fraction is None or memory_fraction >= 1.0:
        return None
    torch.cuda.set_per_process_memory_fraction(memory_fraction, device)
    return memory_fraction
