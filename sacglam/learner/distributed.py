"""Data-parallel learners: gradient averaging over a torch.distributed process group (gloo on
CPU, NCCL on GPU). Every learner computes the same graph on its share of the batch, so the set of
parameters with a gradient is the same on every rank."""

from __future__ import annotations

import socket
from collections.abc import Sequence

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_address() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # not in a Ray worker
        return "127.0.0.1"


def init_process_group(
    address: str, port: int, rank: int, world_size: int, device: torch.device, shared_cards: bool = False
) -> None:
    """NCCL for learners on GPUs of their own; gloo on the CPU, and for learners sharing a card
    (NCCL refuses two ranks on one device; gloo reduces CUDA tensors through host memory)."""
    backend = "nccl" if device.type == "cuda" and not shared_cards else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)


def broadcast_parameters(parameters: list[torch.Tensor]) -> None:
    """Rank 0's values everywhere (one flat buffer, one collective)."""
    flat = torch.cat([p.detach().reshape(-1) for p in parameters])
    dist.broadcast(flat, src=0)
    with torch.no_grad():
        offset = 0
        for p in parameters:
            p.copy_(flat[offset : offset + p.numel()].view_as(p))
            offset += p.numel()


def average_gradients(parameters: Sequence[torch.Tensor], finite: bool) -> bool:
    """Replace each parameter's gradient by its mean over the ranks (parameters without a gradient
    are skipped); returns whether every rank's losses were finite, and averages nothing when one
    was not. Two all-reduces: the finite flags first, because a rank whose loss broke ran no
    backward, and the gradient all-reduce needs the same tensors on every rank."""
    flag = torch.tensor([0.0 if finite else 1.0], device=parameters[0].device)
    dist.all_reduce(flag)
    if bool(flag[0] > 0):
        return False
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return True
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
    return True
