"""One calling convention for the pipeline's components, in one process or as Ray actors.

The driver, the rollout workers and the learners talk to each other only through handles:
`handle.call(LearnerService.train, 2)` returns a future and `resolve(future)` its value. The
method is named by reference, never by a string: a renamed or missing method fails where the
call is written (and in the type checker), not when an actor first receives it. A `LocalHandle`
runs the call at once in this process (the `local` runner: the same code path, no Ray, easy to
debug); a `RayHandle` sends it to a Ray actor (`actor.<name>.remote(...)`). Futures may be passed
as arguments to other calls: Ray resolves a top-level `ObjectRef` argument to its value in the
receiving process (one transfer through the object store), and `LocalHandle` does the same for
local futures.

Components that call one another across the layer of components (a rollout worker asking for
pi, handing episodes to the storage; a learner pulling batches or rollouts) name the methods of
the small protocols below, so neither side imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from sacglam.types import Episode, TransitionBatch

R = TypeVar("R")


class PolicySource(Protocol):
    """What a rollout worker asks of an inference actor."""

    def distributions(self, observations: Sequence[str], candidates: Sequence[Sequence[str]]) -> tuple[np.ndarray, int]:
        """pi(.|s) per state, (B, C) with 0 at padding, and the weights version that computed it."""
        ...


class EpisodeSink(Protocol):
    """Where a rollout worker hands its episodes: the replay actor, or PPO's rollout storage."""

    def add_episodes(self, episodes: Sequence[Episode]) -> int: ...


class BatchSource(Protocol):
    """What a SAC learner pulls from the replay actor."""

    def sample(self, batch_size: int) -> TransitionBatch: ...


class RolloutSource(Protocol):
    """What a PPO learner reads from the rollout storage."""

    def rollout(self) -> list[Episode]: ...


class Component(Protocol):
    def ping(self) -> bool:
        """True once the constructor is done (Ray answers only then)."""
        ...


class ExperienceStore(EpisodeSink, Component, Protocol):
    """What the pipeline asks of either storage (the replay actor, PPO's rollout storage)."""

    def size(self) -> int:
        """Transitions held."""
        ...

    def stats(self) -> dict[str, float]: ...

    def save(self, directory: Any) -> None:
        """Write the storage's part of a checkpoint into `directory` (a `StoragePath`)."""
        ...


class LocalFuture(Generic[R]):
    """The outcome of a call that already ran: its value, or the exception it raised."""

    __slots__ = ("_value", "_error")

    def __init__(self, value: R | None = None, error: BaseException | None = None):
        self._value, self._error = value, error

    def result(self) -> R:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def method_name(method: Callable[..., Any]) -> str:
    """The name a call sends: `LearnerService.train` -> "train"."""
    name = getattr(method, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"handle.call() takes a method (e.g. LearnerService.train), got {method!r}")
    return name


class Handle(Protocol):
    def call(self, method: Callable[..., R], /, *args: Any, **kwargs: Any) -> Any:
        """Start `method(target, *args, **kwargs)` on the component; returns a future of its result."""
        ...


class LocalHandle:
    """Calls the wrapped object's methods directly."""

    def __init__(self, target: Any):
        self.target = target

    def call(self, method: Callable[..., R], /, *args: Any, **kwargs: Any) -> LocalFuture[R]:
        args = tuple(a.result() if isinstance(a, LocalFuture) else a for a in args)
        kwargs = {k: v.result() if isinstance(v, LocalFuture) else v for k, v in kwargs.items()}
        try:
            return LocalFuture(getattr(self.target, method_name(method))(*args, **kwargs))
        except Exception as error:  # delivered at resolve(), as Ray delivers a remote error at ray.get()
            return LocalFuture(error=error)


class RayHandle:
    """Sends calls to a Ray actor: `call(Cls.m, x)` is `actor.m.remote(x)`.

    A handle to a named actor travels by name (pickled without the actor handle, looked up again
    on first use): an actor whose constructor receives it keeps no constructor argument in the
    object store, so Ray can restart that actor at any time.
    """

    def __init__(self, actor: Any, name: str | None = None):
        self.actor, self.name = actor, name

    def call(self, method: Callable[..., R], /, *args: Any, **kwargs: Any) -> Any:
        if self.actor is None:
            import ray

            assert self.name is not None  # a handle pickled without its actor always has a name
            self.actor = ray.get_actor(self.name)
        return getattr(self.actor, method_name(method)).remote(*args, **kwargs)

    def __getstate__(self) -> dict:
        return {"actor": None if self.name else self.actor, "name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.actor, self.name = state["actor"], state["name"]


def resolve(future: Any) -> Any:
    """The value of a future (raises what the call raised)."""
    if isinstance(future, LocalFuture):
        return future.result()
    import ray

    return ray.get(future)


def resolve_all(futures: Sequence[Any]) -> list[Any]:
    if all(isinstance(f, LocalFuture) for f in futures):
        return [f.result() for f in futures]
    import ray

    return ray.get(list(futures))


def wait_any(futures: Sequence[Any], timeout: float | None = None) -> tuple[list[Any], list[Any]]:
    """(finished, pending): at least one finished unless `timeout` passes first. Local futures
    are always finished."""
    if all(isinstance(f, LocalFuture) for f in futures):
        return list(futures), []
    import ray

    return ray.wait(list(futures), num_returns=1, timeout=timeout)
