"""Shared test settings: hypothesis runs without per-example deadlines (CI machines vary in speed)
and with a fixed derandomized profile in CI, so a red run is reproducible; torch runs every test on
a fixed number of threads, so a test computes the same numbers on any machine of a given CPU
(the default is one thread per core, and reductions split by thread count round differently);
the tests of a file stay on one xdist worker, and Ray's on one worker between them."""

import os

import pytest
import torch
from hypothesis import settings

# `make test` runs the suite on pytest-xdist workers (`-n 2`, one per core of this project's
# machines): each worker then runs its tests on one torch thread, so threads never outnumber cores.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
TEST_THREADS = max(1, 2 // WORKERS)
# Ray starts its worker processes at niceness 15 (its `worker_niceness`): beside the other xdist
# worker's tests, at niceness 0, its actors got the cores' leftovers and the Ray tests ran about 3.5x
# slower than alone (a fresh clone's suite: 27.6 min of pytest, 25 of them the Ray group). Workers
# at 0 share the cores evenly. Set before any test starts Ray; subprocesses inherit it.
os.environ.setdefault("RAY_worker_niceness", "0")
# Inductor compiles a graph's kernels in a pool of one subprocess per core by default; the other
# core is busy with the other xdist worker, so the pool only adds its start-up (test_compilation.py
# alone, empty Inductor cache: 172 core-seconds with the pool, 153 without, the same wall time).
# Set before torch._inductor reads it; it changes no compiled kernel.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# Files whose tests start Ray (or the S3 server the multi-node tests share): one group, run one
# after another on one worker, never two Ray clusters at once on two cores.
RAY_FILES = {
    "test_ray_pipeline.py",
    "test_multinode.py",
    "test_tune.py",
    "test_storage.py",
    "test_ray_placement.py",
    "test_ray_gpu_script.py",
}
# Seconds each group took in the suite on a 2-core AVX-512 machine (pytest --durations of e767e1b
# in a warm checkout, 2026-11-28, the learning test's on its seed 2: an ordering hint, not a
# measurement to quote), longest first, so the scheduler hands out the long ones first and the
# workers finish together; unlisted groups (each under 10 s): 0.
GROUP_SECONDS = {"ray": 425, "test_sanity.py": 330, "test_compilation.py": 125, "test_exploration.py": 125,
                 "test_sac_training.py": 80, "test_pipeline.py": 80, "test_smollm2_gpu.py": 65, "test_docs.py": 35,
                 "test_ppo_learner.py": 30, "test_embedded_model.py": 30, "test_export.py": 30, "test_expert.py": 27,
                 "test_gpu_check.py": 20, "test_metrics_registry.py": 18, "test_textworld.py": 17,
                 "test_goal_sampler.py": 13, "test_config_io.py": 13, "test_llm_policy.py": 12,
                 "test_smollm2_study.py": 11}  # fmt: skip


def test_group(path: str) -> str:
    """The group a test file's tests run in: the file's own, or `ray` for the files that start Ray."""
    name = path.rsplit("/", 1)[-1]
    return "ray" if name in RAY_FILES else name


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduling with `test_group` as the scope: every test of a group on one
    worker, so a module fixture runs once and two Ray clusters never run at once. (xdist's own
    `--dist loadgroup` markers did not group anything under pytest 9.2 and xdist 3.8.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return test_group(nodeid.split("::", 1)[0])

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest groups first (`GROUP_SECONDS`): the scheduler hands groups out in this order."""
    items.sort(key=lambda item: -GROUP_SECONDS.get(test_group(item.nodeid.split("::", 1)[0]), 0))  # stable


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


_LOCAL_RAY: dict = {}  # the shared single-node cluster's address and metrics port, while it runs


@pytest.fixture
def ray_local():
    """A single-node Ray cluster (4 CPUs, Prometheus metrics on a port of its own, no dashboard)
    that the Ray tests needing no more share: started by the first test that asks, kept running
    for the next, stopped at the end of the session. A cluster start is a GCS, a raylet, its
    agents and prestarted workers (about 15 core-seconds here); the multi-node tests start their
    own cluster after stopping this one, and the next test that asks starts it again.
    Returns {"address", "metrics_port"}."""
    import ray

    from sacglam.learner.distributed import free_port

    if not (ray.is_initialized() and _LOCAL_RAY.get("address") == ray.get_runtime_context().gcs_address):
        if ray.is_initialized():
            ray.shutdown()
        port = free_port()
        ray.init(
            address="local", num_cpus=4, include_dashboard=False, _metrics_export_port=port, logging_level="WARNING"
        )
        _LOCAL_RAY.update(address=ray.get_runtime_context().gcs_address, metrics_port=port)
    return dict(_LOCAL_RAY)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _LOCAL_RAY:
        import ray

        ray.shutdown()


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server (moto's server mode) on 127.0.0.1 for the session;
    `s3_server(name)` makes a fresh bucket and returns the URI of a path in it, with the endpoint
    in its query string. Credentials (moto takes any) are set in the environment before any Ray
    cluster of a test starts, so Ray's worker processes inherit them. Outside CI, skips (saying
    why) when moto is missing or its server does not start; in CI (`CI` set), where `make test`
    installs it (the dev extra), that fails instead, so the storage tests never pass by skipping."""

    def unavailable(reason: str):
        if os.environ.get("CI"):
            pytest.fail(f"{reason}: CI must run the storage tests")
        pytest.skip(reason)

    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    try:
        import moto.server  # noqa: F401
    except ImportError:
        unavailable("moto[server] is not installed (pip install -e '.[dev]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                unavailable(f"moto's S3 server did not start on {endpoint}")
            time.sleep(0.2)
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_EC2_METADATA_DISABLED="true")
    buckets = iter(range(1_000_000))

    def bucket_uri(path: str = "run") -> str:
        import pyarrow.fs as pafs

        bucket = f"sacglam-test-{next(buckets)}"
        query = f"endpoint_override={endpoint}&region=us-east-1"
        fs, _ = pafs.FileSystem.from_uri(f"s3://{bucket}?{query}&allow_bucket_creation=true")
        fs.create_dir(bucket)
        return f"s3://{bucket}/{path}?{query}"

    yield bucket_uri
    server.terminate()
    server.wait(timeout=10)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
