"""Dynamic micro-batching (asyncio): concurrent requests are gathered into one call of a batch
function, up to `max_items` items or `max_wait_s` after the first request arrived."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any


class MicroBatcher:
    """`await submit(request, size)` returns `run_batch([...])[i]` for that request.

    `run_batch(requests) -> results` (same order) is a blocking function; it runs in a worker
    thread so that new requests keep arriving while a batch computes. A request is never split:
    one larger than `max_items` forms a batch on its own. Batches run one at a time.
    """

    def __init__(self, run_batch: Callable[[Sequence[Any]], Sequence[Any]], max_items: int, max_wait_s: float):
        self.run_batch, self.max_items, self.max_wait_s = run_batch, max_items, max_wait_s
        self._queue: list[tuple[Any, int, asyncio.Future]] = []
        self._arrived: asyncio.Event | None = None
        self._loop_task: asyncio.Task | None = None
        self.batches = 0
        self.items = 0

    async def submit(self, request: Any, size: int) -> Any:
        if self._loop_task is None or self._arrived is None:
            self._arrived = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._serve(self._arrived))
        future = asyncio.get_running_loop().create_future()
        self._queue.append((request, size, future))
        self._arrived.set()
        return await future

    async def _serve(self, arrived: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await arrived.wait()
            deadline = loop.time() + self.max_wait_s
            while sum(s for _, s, _ in self._queue) < self.max_items and loop.time() < deadline:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), timeout=max(deadline - loop.time(), 0))
                except TimeoutError:
                    break
            batch: list[tuple[Any, int, asyncio.Future]] = []
            total = 0
            while self._queue and (not batch or total + self._queue[0][1] <= self.max_items):
                item = self._queue.pop(0)
                batch.append(item)
                total += item[1]
            if not self._queue:
                arrived.clear()
            try:
                results = await loop.run_in_executor(None, self.run_batch, [r for r, _, _ in batch])
            except Exception as error:  # every caller of the batch gets the error
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            self.batches += 1
            self.items += total
            for (_, _, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
