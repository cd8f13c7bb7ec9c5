"""One calling convention for the pipeline's components, in one process or as Ray actors.

The driver, the rollout workers and the learners talk to each other only through handles:
`handle.call("method", *args)` returns a future and `resolve(future)` its value. A `LocalHandle`
runs the call at once in this process (the `local` runner: the same code path, no Ray, easy to
debug); a `RayHandle` sends it to a Ray actor. Futures may be passed as arguments to other calls:
Ray resolves a top-level `ObjectRef` argument to its value in the receiving process (one transfer
through the object store), and `LocalHandle` does the same for local futures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Handle(Protocol):
    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...


class LocalFuture:
    """The outcome of a call that already ran: its value, or the exception it raised."""

    __slots__ = ("_value", "_error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self._value, self._error = value, error

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class LocalHandle:
    """Calls the wrapped object's methods directly."""

    def __init__(self, target: Any):
        self.target = target

    def call(self, method: str, *args: Any, **kwargs: Any) -> LocalFuture:
        args = tuple(a.result() if isinstance(a, LocalFuture) else a for a in args)
        kwargs = {k: v.result() if isinstance(v, LocalFuture) else v for k, v in kwargs.items()}
        try:
            return LocalFuture(getattr(self.target, method)(*args, **kwargs))
        except Exception as error:  # delivered at resolve(), as Ray delivers a remote error at ray.get()
            return LocalFuture(error=error)


class RayHandle:
    """Sends calls to a Ray actor: `call("m", x)` is `actor.m.remote(x)`.

    A handle to a named actor travels by name (pickled without the actor handle, looked up again
    on first use): an actor whose constructor receives it keeps no constructor argument in the
    object store, so Ray can restart that actor at any time.
    """

    def __init__(self, actor: Any, name: str | None = None):
        self.actor, self.name = actor, name

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.actor is None:
            import ray

            self.actor = ray.get_actor(self.name)
        return getattr(self.actor, method).remote(*args, **kwargs)

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
