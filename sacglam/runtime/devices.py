"""Nothing on a device crosses an actor: what a component returns (weights, checkpoint state,
batches) holds CPU tensors only.

A CUDA tensor that reaches Ray's object store is rebuilt on a CUDA device by whoever receives it,
which fails in a process without a GPU (the driver, a rollout worker) and, where it does not,
ties a copy to a card nobody meant to use. `to_host` copies a nested value's tensors to the CPU;
`check_on_host` raises, naming the place, when one is left on a device: the components call it on
what they return, so a path that forgot its copy fails at once, on the machine that has the GPU,
with a sentence instead of a deserialisation error elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch


class DeviceCrossingError(RuntimeError):
    """A component was about to return a tensor that is not on the CPU."""


def _is_host(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cpu"


def to_host(value: Any) -> Any:
    """`value` with every tensor inside it (dicts, lists and tuples, nested) on the CPU: a CPU
    tensor is kept as it is, any other is copied."""
    if isinstance(value, torch.Tensor):
        return value if _is_host(value) else value.detach().to("cpu")
    if isinstance(value, dict):
        return {key: to_host(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_host(item) for item in value)
    return value


def off_host(value: Any, where: str = "") -> list[str]:
    """The places (`where` plus keys and indices) of the tensors in `value` not on the CPU."""
    if isinstance(value, torch.Tensor):
        return [] if _is_host(value) else [f"{where or 'the value'} ({value.device})"]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in off_host(item, f"{where}[{key!r}]")]
    if isinstance(value, (list, tuple)):
        return [p for i, item in enumerate(value) for p in off_host(item, f"{where}[{i}]")]
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return [p for name in fields for p in off_host(getattr(value, name), f"{where}.{name}")]
    return []


def check_on_host(value: Any, what: str) -> Any:
    """`value` itself when every tensor in it is on the CPU; else `DeviceCrossingError` naming
    `what` and the first places."""
    places = off_host(value, what)
    if places:
        raise DeviceCrossingError(
            f"{what} would leave its actor holding tensors on a device: {', '.join(places[:3])}"
            f"{f' and {len(places) - 3} more' if len(places) > 3 else ''}; copy them to the CPU first "
            "(sacglam.runtime.devices.to_host)"
        )
    return value
