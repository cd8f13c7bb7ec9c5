"""Converting a GGUF file with transformers without parsing it three times.

transformers reads a GGUF checkpoint through `gguf.GGUFReader` once per question it asks of it:
in a conversion, the tokenizer, the model's config and the weights (three readers, counted).
Each read parses the whole header in Python, and SmolLM2's header holds its 49k-token vocabulary
and merges: about 4.5 s of one core each on this project's CPU. Building the weights' name map
then calls `gguf.get_tensor_name_map(arch, blocks)` once per submodule of the model (397 times
for SmolLM2, 18 ms each), although the answer depends only on its two arguments.

`read_each_gguf_once()` makes both answers computed once inside its block: the conversion of the
embedded model (`sacglam.models.loading.install_embedded_model`) took 28 core-seconds without it
and takes 10-11 with it, its files byte-identical (docs/explanation/agent.md). Nothing changes in what is
read: the same reader object answers every later read of the same file (a reader only maps the
file and parses its header; transformers never writes to it), and the name map is a pure function
of its arguments.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal


@contextmanager
def read_each_gguf_once() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` returns one reader per (file, mode) and
    `gguf.get_tensor_name_map` one map per (arch, blocks); both are restored on exit, and the
    readers (each a memory map of its file) are dropped. transformers imports both names from the
    `gguf` module at each call, which is what makes the substitution reach it. The names are the
    module's, for the whole process, while the block runs: one block at a time (a lock), so that
    two threads converting at once never take each other's substitutes for the originals."""
    import gguf

    with _ONE_BLOCK_AT_A_TIME:
        original_reader, original_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, str], Any] = {}

        def shared_reader(path: os.PathLike[str] | str, mode: Literal["r", "r+", "c"] = "r") -> Any:
            key = (os.path.realpath(path), mode)
            if key not in readers:
                readers[key] = original_reader(path, mode)
            return readers[key]

        gguf.GGUFReader = shared_reader  # type: ignore[assignment,misc]
        gguf.get_tensor_name_map = functools.cache(original_name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map  # type: ignore[misc]
            readers.clear()


_ONE_BLOCK_AT_A_TIME = threading.Lock()
