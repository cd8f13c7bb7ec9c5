"""Columns that grow at the end and shrink at the front, both in amortised O(1): the storage of
a FIFO replay buffer, addressed by absolute position (a position stays valid until dropped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class Column:
    """A numpy column of one dtype, addressed by absolute position since its creation. With
    `width`, each position holds a row of `width` values (fields read together sit together)."""

    __slots__ = ("_data", "_start", "_end", "_offset")

    def __init__(self, dtype: Any = np.int64, width: int | None = None) -> None:
        self._data = np.empty(256 if width is None else (256, width), dtype=dtype)
        self._start = 0  # index in _data of the oldest live value
        self._end = 0
        self._offset = 0  # absolute position of _data[0]

    def _make_room(self, extra: int) -> None:
        live = self._end - self._start
        if self._end + extra <= len(self._data):
            return
        # Drop the dropped front, and grow only when the live part would fill more than half.
        size = len(self._data) if 2 * (live + extra) <= len(self._data) else 2 * (live + extra)
        data = np.empty((size, *self._data.shape[1:]), dtype=self._data.dtype)
        data[:live] = self._data[self._start : self._end]
        self._offset += self._start
        self._data, self._start, self._end = data, 0, live

    def append(self, value: Any) -> None:
        self._make_room(1)
        self._data[self._end] = value
        self._end += 1

    def extend(self, values: Sequence[Any] | np.ndarray) -> None:
        self._make_room(len(values))
        self._data[self._end : self._end + len(values)] = values
        self._end += len(values)

    def drop_front(self, count: int) -> None:
        self._start += count

    @property
    def first(self) -> int:
        """Absolute position of the oldest live value (= the values ever dropped)."""
        return self._offset + self._start

    @property
    def view(self) -> np.ndarray:
        """The live values, oldest first (a view: do not keep it across an append)."""
        return self._data[self._start : self._end]

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Values at absolute `positions` (live ones)."""
        return self._data[positions - self._offset]

    def __len__(self) -> int:
        return self._end - self._start


class ObjectColumn:
    """A column of Python objects (texts, tuples), addressed like `Column`."""

    __slots__ = ("_items", "_start", "_offset")

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._start = 0
        self._offset = 0

    def extend(self, values: Sequence[Any]) -> None:
        self._items.extend(values)

    def drop_front(self, count: int) -> None:
        self._start += count
        for i in range(self._start - count, self._start):
            self._items[i] = None  # release the objects now, not at the next compaction
        if self._start > len(self._items) // 2:  # compact: O(live) every time half is dead
            del self._items[: self._start]
            self._offset += self._start
            self._start = 0

    def __getitem__(self, position: int) -> Any:
        return self._items[position - self._offset]

    def slice(self, start: int, stop: int) -> list[Any]:
        """Values at absolute positions [start, stop)."""
        return self._items[start - self._offset : stop - self._offset]

    def __len__(self) -> int:
        return len(self._items) - self._start
