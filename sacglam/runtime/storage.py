"""A run's storage: a local directory or a URI, read and written through `pyarrow.fs`.

`StoragePath(location)` names a directory or file on local disk (`runs/train`, `/mnt/nfs/run`)
or behind a URI that `pyarrow.fs.FileSystem.from_uri` understands: `s3://bucket/run` (options in
the query string, e.g. `?endpoint_override=http://127.0.0.1:9000&region=us-east-1`, credentials
from the usual AWS variables or files), `gs://bucket/run`, `hdfs://...`, `file:///abs/path`.
Every component that writes a part of a run (the driver, the replay actor, the goal sampler)
writes it there itself, on whichever node it runs, so no node's local disk matters as long as
every node reaches the storage.

A `StoragePath` is a small frozen value (the location string and the parts below it): it pickles
to Ray actors, each of which opens the filesystem itself (one per process and location).

What object stores lack, and how it is worked around:
- no directory rename: `move_dir` moves file by file, the files named `last` at the end (a
  checkpoint's seal: a checkpoint whose move was cut short has no seal and is not read);
- no append: files that grow (metrics, TensorBoard) are written in a local staging directory
  (`staging_dir`) and uploaded whole at each checkpoint and at the end (`upload_dir`).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from sacglam.errors import UserInputError

_CHUNK = 1 << 20


def is_uri(location: str | os.PathLike) -> bool:
    return "://" in str(location)


@functools.lru_cache(maxsize=32)
def _filesystem(location: str) -> tuple[Any, str]:
    """(filesystem, its path of `location`), opened once per process and location."""
    if not is_uri(location):
        return pafs.LocalFileSystem(), os.path.abspath(location)
    try:
        fs, path = pafs.FileSystem.from_uri(location)
    except (ValueError, OSError, pa.ArrowException) as error:
        raise StorageError(
            f"cannot open the storage {location!r} ({' '.join(str(error).split())}): check the URI's scheme "
            "(a local path, s3://, gs://, hdfs://, file://) and its options"
        ) from error
    return fs, path.rstrip("/")


class StorageError(UserInputError, OSError):
    """A location that cannot be opened (a bad scheme or option)."""


STORAGE_ERRORS = (OSError, pa.ArrowException)  # what reaching a storage may raise


@dataclass(frozen=True)
class StoragePath:
    """A path below a storage location. `location`: as the user gave it (a local path, relative or
    not, or a URI with its query string); `parts`: the names below it."""

    location: str
    parts: tuple[str, ...] = ()

    def __init__(self, location: str | os.PathLike | StoragePath, parts: tuple[str, ...] = ()):
        if isinstance(location, StoragePath):
            parts, location = location.parts + tuple(parts), location.location
        location = str(location)
        if not is_uri(location):  # absolute: a Ray actor's working directory is not the driver's
            location = os.path.abspath(location)
        object.__setattr__(self, "location", location)
        object.__setattr__(self, "parts", tuple(parts))

    # ------------------------------------------------------------------ names

    def __truediv__(self, name: str) -> StoragePath:
        return StoragePath(self.location, self.parts + tuple(p for p in str(name).split("/") if p))

    @property
    def name(self) -> str:
        return self.parts[-1] if self.parts else self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def fs(self) -> Any:
        return _filesystem(self.location)[0]

    @property
    def path(self) -> str:
        """The path the filesystem knows it by (local: absolute; S3: `bucket/key`)."""
        base = _filesystem(self.location)[1]
        return "/".join([base, *self.parts]) if self.parts else base

    def local(self) -> Path:
        """The local path (only for local storage)."""
        if not self.is_local:
            raise ValueError(f"{self} is not on local disk")
        return Path(self.path)

    def as_location(self) -> str:
        """A location string naming this path (a URI keeps its query string): `StoragePath` of it
        names the same path, and a config may hold it."""
        if not self.parts:
            return self.location
        if not is_uri(self.location):
            return os.path.join(self.location, *self.parts)
        path, _, query = self.location.partition("?")
        return "/".join([path.rstrip("/"), *self.parts]) + (f"?{query}" if query else "")

    def __str__(self) -> str:
        if self.is_local:
            return self.path
        scheme = self.location.split("://", 1)[0]
        return f"{scheme}://{self.path}"

    def __fspath__(self) -> str:  # so that local storage paths work where a path is expected
        return str(self.local())

    # ------------------------------------------------------------------ queries

    def _info(self) -> Any:
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return self._info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        return self._info().type == pafs.FileType.Directory

    def size(self) -> int:
        return int(self._info().size)

    def children(self, prefix: str = "") -> list[StoragePath]:
        """Direct children whose names start with `prefix`, sorted by name ([] when not a directory)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        except (NotADirectoryError, FileNotFoundError):
            return []
        names = sorted(i.base_name for i in infos if i.base_name.startswith(prefix))
        return [self / n for n in names]

    def files(self) -> list[tuple[str, int, int]]:
        """(path relative to this directory, bytes, modification time in ns) of every file below it, sorted."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True, allow_not_found=True))
        base = self.path.rstrip("/") + "/"
        return sorted(
            (i.path[len(base) :], int(i.size), int(i.mtime_ns or 0)) for i in infos if i.type == pafs.FileType.File
        )

    # ------------------------------------------------------------------ reading and writing

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes) -> None:
        self.parent_mkdir()
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode())

    def replace_text(self, text: str) -> None:
        """Write a small file so that a reader sees the old or the new content, never a part
        (local: a temporary file renamed over it; an object store writes an object whole)."""
        if self.is_local:
            tmp = self.local().with_name(self.name + ".tmp")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            os.replace(tmp, self.local())
        else:
            self.write_text(text)

    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.fs.open_input_stream(self.path) as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def unlink(self) -> None:
        """Delete this file."""
        self.fs.delete_file(self.path)

    def parent_mkdir(self) -> None:
        if self.is_local:
            self.local().parent.mkdir(parents=True, exist_ok=True)

    def mkdir(self) -> None:
        self.fs.create_dir(self.path, recursive=True)

    def rmtree(self) -> None:
        """Delete this directory and everything below it (nothing when it does not exist)."""
        if self.is_local:
            shutil.rmtree(self.local(), ignore_errors=True)
        elif self.is_dir():
            self.fs.delete_dir(self.path)

    def move_dir(self, target: StoragePath, last: tuple[str, ...] = ()) -> None:
        """Rename this directory to `target` (which must not exist). Local: one rename. Object
        stores: file by file, the files named in `last` (relative paths) moved at the end."""
        if self.is_local and target.is_local:
            os.rename(self.local(), target.local())
            return
        names = [name for name, _, _ in self.files()]
        for name in sorted(names, key=lambda n: n in last):
            self.fs.move(f"{self.path}/{name}", f"{target.path}/{name}")
        self.rmtree()

    # ------------------------------------------------------------------ local views

    @contextmanager
    def writing_locally(self) -> Iterator[Path]:
        """A local directory to write this directory's files into: the directory itself on local
        storage; otherwise a temporary one, uploaded when the block ends without an error."""
        if self.is_local:
            self.local().mkdir(parents=True, exist_ok=True)
            yield self.local()
            return
        with tempfile.TemporaryDirectory(prefix="sacglam-upload-") as tmp:
            yield Path(tmp)
            upload_dir(Path(tmp), self)

    @contextmanager
    def reading_locally(self) -> Iterator[Path]:
        """This directory on local disk for the block: itself, or a temporary download."""
        if self.is_local:
            yield self.local()
            return
        with tempfile.TemporaryDirectory(prefix="sacglam-download-") as tmp:
            download_dir(self, Path(tmp))
            yield Path(tmp)


def upload_dir(source: Path, target: StoragePath) -> None:
    """Copy every file under the local directory `source` to `target` (files already there with
    the same name are replaced; others are left)."""
    if target.is_local and source.resolve() == target.local().resolve():
        return
    if any(p.is_file() for p in source.rglob("*")):  # (copy_files streams: no file is held in memory)
        pafs.copy_files(str(source), target.path, pafs.LocalFileSystem(), target.fs)


def download_dir(source: StoragePath, target: Path) -> None:
    """Copy every file under `source` into the local directory `target`."""
    target.mkdir(parents=True, exist_ok=True)
    if source.files():
        pafs.copy_files(source.path, str(target), source.fs, pafs.LocalFileSystem())


def staging_dir(run: StoragePath) -> Path:
    """Where the files of `run` that grow by appending (metrics, TensorBoard) are written on this
    machine: the run directory itself on local storage, otherwise a directory of the system's
    temporary space named after the location (the same one for a resume on the same machine)."""
    if run.is_local:
        return run.local()
    key = hashlib.sha256(run.as_location().encode()).hexdigest()[:12]  # the endpoint too
    return Path(tempfile.gettempdir()) / "sacglam-staging" / f"{run.name}-{key}"


def write_torch(path: StoragePath, obj: Any) -> None:
    """`torch.save(obj)` into `path`, wherever it is."""
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    path.write_bytes(buffer.getvalue())


def read_torch(path: StoragePath) -> Any:
    """What `write_torch` wrote (only for our own files: `weights_only=False`, since a learner's
    state holds a TransitionBatch and a goal sampler's numpy arrays)."""
    import torch

    return torch.load(io.BytesIO(path.read_bytes()), weights_only=False)
