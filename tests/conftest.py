"""Shared test settings: hypothesis runs without per-example deadlines (CI machines vary in speed)
and with a fixed derandomized profile in CI, so a red run is reproducible; torch runs every test on
a fixed number of threads, so a test computes the same numbers on any machine of a given CPU
(the default is one thread per core, and reductions split by thread count round differently)."""

import os

import pytest
import torch
from hypothesis import settings

TEST_THREADS = 2

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(autouse=True)
def fixed_torch_threads():
    """Every test starts on TEST_THREADS torch threads, whatever the machine, and leaves the
    setting as it found it."""
    before = torch.get_num_threads()
    torch.set_num_threads(TEST_THREADS)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def torch_threads():
    """`torch_threads(n)`: run the rest of the test on n threads (restored by `fixed_torch_threads`)."""
    return torch.set_num_threads
