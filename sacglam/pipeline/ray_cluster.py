"""Running the pipeline's components as Ray actors.

- `connect`: join `--address` (or, in a job submitted with `ray job submit`, the job's cluster),
  or start a local Ray of the run's own, never the last cluster started on the machine (token authentication stays as Ray sets it:
  on by default for local clusters since Ray 2.59; the token is in `~/.ray/auth_token`, shown by
  `ray get-auth-token`, and the dashboard asks for it).
- `plan`: one placement-group bundle per actor; GPUs for inference and learners when the cluster
  has them: a whole one each when there are enough, else shares of the cards (`gpu_shares`: an
  inference actor and a learner on one GPU take 0.5 each, and each bounds its memory to its
  share), said in the run's first lines. A request the cluster cannot hold fails before anything
  starts, naming what is short.
- `build_ray`: the actors. Rollout workers, inference actors and the replay actor are restarted
  by Ray when they die (calls to them are retried; the replay actor restores its newest
  checkpoint); a learner that dies stops the run, which `--resume` continues from its checkpoint.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sacglam.config import TrainConfig
from sacglam.errors import UserInputError
from sacglam.pipeline.components import (
    Components,
    envs_per_worker,
    storage_component,
    uses_goal_sampler,
    worker_seed,
)
from sacglam.runtime.handles import Component, RayHandle, resolve_all
from sacglam.runtime.storage import StoragePath

TOKEN_FILE = Path.home() / ".ray" / "auth_token"


class ClusterTooSmallError(UserInputError, RuntimeError):
    """The run asks for more resources than the Ray cluster has (or can free in time)."""


class ClusterUnreachableError(UserInputError, ConnectionError):
    """`--address` names a Ray cluster this machine cannot join."""


@dataclass(frozen=True)
class Bundle:
    role: str  # `learner-0`, `rollout-worker-3`, `replay`, ...
    cpus: float
    gpus: float
    custom: tuple[tuple[str, float], ...] = ()  # `pipeline.resources.node_resources` of its role

    def resources(self) -> dict[str, float]:
        # A placement-group bundle cannot be empty: an actor asking for nothing still gets a sliver.
        out = {"CPU": self.cpus or 0.01}
        if self.gpus:
            out["GPU"] = self.gpus
        return out | dict(self.custom)


OVERSUBSCRIBE_AT_MOST = 2.0  # a local Ray counts at most this many CPUs per core the machine has


def local_cpus(asked: float, detected: int) -> int | None:
    """The logical CPUs a local Ray of the run's own is started with: None (Ray's own count, the
    machine's `detected` cores) when the run's actors fit in them, or when they ask for more than
    `OVERSUBSCRIBE_AT_MOST` per core (a cluster's config: it fails with what is short); else the
    CPUs they ask for, rounded up, so that they share the cores. A laptop with 2 cores runs a
    config written for four whole-CPU actors as it is, and their torch threads (their CPUs, rounded
    down, unless `*_threads` are set: `ResourcesConfig`) take turns on the cores."""
    needed = math.ceil(asked - 1e-9)
    return needed if detected < needed <= OVERSUBSCRIBE_AT_MOST * detected else None


def _detected_cpus() -> int:
    """The CPUs a local Ray would count on this machine (its own count, which reads cgroup limits)."""
    try:
        from ray._private.utils import get_num_cpus

        return int(get_num_cpus(override_docker_cpu_warning=True))  # Ray warns once, when it starts
    except Exception:  # a private helper of Ray's: the cores this process may run on
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_HOST_PORT = re.compile(r"^(?:ray://)?\[?([^\[\]/]+?)\]?:(\d+)$")  # host:port, ray://host:port, [v6]:port
CONNECT_TIMEOUT_S = 5.0


def _refuse_unreachable(address: str | None) -> None:
    """An address `host:port` where nothing answers fails here, in seconds: Ray itself retries
    the connection for minutes, printing only its own retry warnings."""
    match = _HOST_PORT.match(address or "")
    if match is None:  # "auto", "local", a RAY_ADDRESS left to Ray
        return
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ClusterUnreachableError(
            f"cannot join the Ray cluster at {address!r}: nothing answers at {host}:{port} ({reason} within "
            f"{CONNECT_TIMEOUT_S:g} s); check the address (`ray status` on the head node prints it) and that the "
            "head node is running, or leave --address out to start a local Ray"
        ) from error


def connect(address: str | None, cpus_asked: float | None = None) -> str | None:
    """Join or start Ray; returns the dashboard URL (None when there is no dashboard).
    `cpus_asked`: the CPUs the run's actors ask for, which a local Ray of the run's own counts
    at least (`local_cpus`); a cluster joined is taken as it is."""
    import ray

    context: Any
    if not ray.is_initialized():
        options: dict[str, Any] = {}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            # Left to itself, Ray joins the cluster last started on this machine (its address is
            # kept in /tmp/ray/ray_current_cluster), even one that belongs to another user's run
            # or a test; no --address means a local Ray of this run's own. (A job submitted with
            # `ray job submit` has RAY_ADDRESS set, and joins its cluster.)
            address = "local"
            running = _last_cluster_started_here()
            if running:
                print(
                    f"note: a Ray cluster runs on this machine ({running}); this run starts its own. "
                    "Pass --address auto to run on that one instead"
                )
            detected = _detected_cpus() if cpus_asked is not None else 0
            if cpus_asked is not None and (counted := local_cpus(cpus_asked, detected)) is not None:
                options["num_cpus"] = counted
                print(
                    f"note: the run's actors ask for {cpus_asked:g} CPUs and this machine has {detected}: "
                    f"its local Ray counts {counted}, so the actors share the cores (fractions in "
                    "pipeline.resources.*_cpus say how to share them: docs/explanation/pipeline.md#resources)"
                )
        _refuse_unreachable(address)
        try:
            context = ray.init(
                address=address,
                log_to_driver=True,
                configure_logging=True,
                logging_level=logging.WARNING,
                **options,
            )
        except ConnectionError as error:
            raise ClusterUnreachableError(
                f"cannot join the Ray cluster at {address!r} ({error}): check the address (`ray status` on the head "
                "node prints it), or leave --address out to start a local Ray"
            ) from error
    else:
        context = ray.get_runtime_context()
    url = getattr(context, "dashboard_url", None)
    return f"http://{url}" if url and not url.startswith("http") else url


def _last_cluster_started_here() -> str | None:
    """The address of the Ray cluster last started on this machine with `ray start`, if any."""
    try:
        from ray._private.utils import read_ray_address

        return read_ray_address() or None
    except Exception:  # a private helper of Ray's: without it there is nothing to say
        return None


def auth_note() -> str:
    if os.environ.get("RAY_AUTH_MODE", "token") == "disabled":
        return "Ray token authentication is disabled (RAY_AUTH_MODE=disabled)"
    return f"the dashboard asks for the Ray token: `ray get-auth-token` prints it (stored in {TOKEN_FILE})"


@dataclass(frozen=True)
class GPUShares:
    """The GPUs each inference actor and each learner asks for, and whether the roles left at
    their default (`*_gpus: None`) share cards because the cluster has fewer than they are."""

    inference: float
    learner: float
    defaults: int  # GPU roles left at their default
    free: float  # GPUs the cluster has beyond the ones set explicitly
    split: bool  # the default roles got a fraction of a card each, not a whole one


def gpu_shares(cfg: TrainConfig, cluster_gpus: float) -> GPUShares:
    """Whole GPUs for the roles left at their default when the cluster has one for each (after
    the explicit settings); else they share: on `w` whole free GPUs, `ceil(n / w)` roles per card,
    each asking 1 / that (0.5 for an inference actor and a learner on one GPU), which Ray places
    whole on a card; with less than one GPU free, an equal part of it each. No GPU: none."""
    res, p = cfg.pipeline.resources, cfg.pipeline
    explicit = (res.inference_gpus or 0.0) * p.inference_actors + (res.learner_gpus or 0.0) * p.learners
    defaults = (p.inference_actors if res.inference_gpus is None else 0) + (
        p.learners if res.learner_gpus is None else 0
    )
    free = max(cluster_gpus - explicit, 0.0)
    if defaults == 0 or free <= 1e-9:
        share, split = 0.0, False
    elif free + 1e-9 >= defaults:
        share, split = 1.0, False
    elif free >= 1.0:
        share, split = math.floor(1e4 / math.ceil(defaults / math.floor(free + 1e-9))) / 1e4, True
    else:
        share, split = math.floor(1e4 * free / defaults) / 1e4, True
    inference = share if res.inference_gpus is None else res.inference_gpus
    learner = share if res.learner_gpus is None else res.learner_gpus
    return GPUShares(inference, learner, defaults, free, split)


def gpu_memory_fraction(cfg: TrainConfig, gpus: float) -> float | None:
    """The share of its GPU's memory an actor asking for `gpus` may use: `gpu_memory_fraction`
    when set, else its share of the card when that is a fraction (None: no bound)."""
    setting = cfg.pipeline.resources.gpu_memory_fraction
    if gpus <= 0:
        return None
    if setting is not None:
        return setting
    return gpus if gpus < 1.0 else None


def sharing_note(cfg: TrainConfig, cluster_gpus: float) -> str | None:
    """The line a run prints when its GPU roles share cards (None when they do not)."""
    shares = gpu_shares(cfg, cluster_gpus)
    if not shares.split:
        return None
    p, res = cfg.pipeline, cfg.pipeline.resources
    roles = [f"{p.inference_actors} inference actor{'s' * (p.inference_actors > 1)}"] * (res.inference_gpus is None)
    roles += [f"{p.learners} learner{'s' * (p.learners > 1)}"] * (res.learner_gpus is None)
    share = shares.inference if res.inference_gpus is None else shares.learner
    memory = gpu_memory_fraction(cfg, share)
    bound = f"each process may use at most {memory:.0%} of its card's memory" if memory else "no memory bound"
    return (
        f"note: the cluster has {cluster_gpus:g} GPU{'s' * (cluster_gpus != 1)} for {shares.defaults} GPU roles "
        f"({' and '.join(roles)}): they share, {share:g} GPU each, {bound} (pipeline.resources.inference-gpus, "
        "learner-gpus and gpu-memory-fraction set them)"
    )


def plan(cfg: TrainConfig, cluster: dict[str, float]) -> list[Bundle]:
    res, p = cfg.pipeline.resources, cfg.pipeline
    shares = gpu_shares(cfg, cluster.get("GPU", 0.0))

    def custom(role: str) -> tuple[tuple[str, float], ...]:
        return tuple(sorted(res.node_resources.get(role, {}).items()))

    storage = "replay" if cfg.algo != "ppo" else "rollout-storage"
    bundles = [Bundle(storage, res.replay_cpus, 0.0, custom(storage))]
    bundles += [
        Bundle(f"inference-{i}", res.inference_cpus, shares.inference, custom("inference"))
        for i in range(p.inference_actors)
    ]
    bundles += [Bundle(f"learner-{i}", res.learner_cpus, shares.learner, custom("learner")) for i in range(p.learners)]
    bundles += [
        Bundle(f"rollout-worker-{i}", res.worker_cpus, 0.0, custom("rollout-worker")) for i in range(p.rollout_workers)
    ]
    if uses_goal_sampler(cfg):
        bundles.append(Bundle("goal-sampler", res.goal_sampler_cpus, 0.0, custom("goal-sampler")))
    return bundles


def share_a_card(cards: list[list[str]]) -> bool:
    """Whether two of the learners hold the same card: `cards[i]` lists learner i's GPUs as
    `<node id>:<gpu id>` (`LearnerService.gpu_ids`)."""
    held = [card for ids in cards for card in ids]
    return len(set(held)) < len(held)


def gpu_packing_problem(bundles: list[Bundle], cluster_gpus: float) -> str | None:
    """Why the bundles' GPU asks cannot be placed on the cluster's whole cards, or None: Ray puts
    each fraction of a GPU whole on one card (two 0.75s do not fit one card, nor leave room for a
    0.5 on two), which a sum over the cluster does not see. First fit, largest asks first, on
    `floor(cluster_gpus)` cards; a cluster of less than one GPU is left to the sum."""
    cards = int(math.floor(cluster_gpus + 1e-9))
    if cards < 1:
        return None
    free = [1.0] * cards
    for bundle in sorted(bundles, key=lambda b: -b.gpus):
        whole, part = divmod(bundle.gpus, 1.0)
        for _ in range(int(whole)):
            if 1.0 not in free:
                return f"{bundle.role} asks for {bundle.gpus:g} GPU and no whole card is left"
            free.remove(1.0)
        if part > 1e-9:
            card = next((i for i, room in enumerate(free) if room + 1e-9 >= part), None)
            if card is None:
                left = ", ".join(f"{room:g}" for room in free)
                return (
                    f"{bundle.role}'s {part:g} GPU does not fit on one card (room left: {left}): Ray places a "
                    "share of a GPU whole on one card"
                )
            free[card] -= part
    return None


def cpus_asked(bundles: list[Bundle]) -> float:
    """The CPUs the bundles ask a cluster for (an actor asking for none still takes a sliver)."""
    return sum(bundle.resources()["CPU"] for bundle in bundles)


def check_fits(bundles: list[Bundle], cluster: dict[str, float]) -> None:
    asked: dict[str, float] = {}
    for bundle in bundles:
        for name, amount in ({"GPU": 0.0} | bundle.resources()).items():
            asked[name] = asked.get(name, 0.0) + amount
    short = {k: v for k, v in asked.items() if v > cluster.get(k, 0.0) + 1e-9}
    packing = None if short else gpu_packing_problem(bundles, cluster.get("GPU", 0.0))
    if packing is not None:
        raise ClusterTooSmallError(
            f"the run's GPU shares do not pack onto the cluster's {cluster.get('GPU', 0):g} cards: {packing}. Lower "
            f"{' and '.join(_flags_to_lower(bundles, {'GPU'}))} (shares that add up to whole cards), or join a bigger "
            "cluster with --address"
        )
    if short:
        detail = ", ".join(f"{v:g} {k} (the cluster has {cluster.get(k, 0):g})" for k, v in short.items())
        lower = _flags_to_lower(bundles, set(short))
        if lower:
            lower = [f"{', '.join(lower)} (fractions are allowed; in a config, pipeline.resources.*)"]
        if set(short) - {"CPU", "GPU"}:
            lower.append("the amounts of pipeline.resources.node_resources (in the config)")
        raise ClusterTooSmallError(
            f"the run asks for {detail}: {len(bundles)} actors "
            f"({', '.join(f'{b.role}: {b.cpus:g} CPU {b.gpus:g} GPU' for b in bundles)}). "
            f"Lower {' and '.join(lower)} or the actor counts, or join a bigger cluster with --address."
        )


# The command-line name of each role's resources: --pipeline.resources.<name>-cpus (and -gpus).
_FLAG_NAMES = {
    "rollout-worker": "worker",
    "replay": "replay",
    "rollout-storage": "replay",  # PPO's rollout storage sits where SAC's replay actor does
    "inference": "inference",
    "learner": "learner",
    "goal-sampler": "goal-sampler",
}


def _flags_to_lower(bundles: list[Bundle], short: set[str]) -> list[str]:
    """The command-line settings that ask for the resources a cluster is short of: each role's
    CPUs when CPUs are short, the GPUs of the roles that ask for any when GPUs are (custom
    resources are set in config files only)."""
    flags = set()
    for bundle in bundles:
        role = bundle.role.rsplit("-", 1)[0] if bundle.role[-1].isdigit() else bundle.role
        name = _FLAG_NAMES.get(role)
        if name is None:  # a role without settings of its own
            continue
        if "CPU" in short and bundle.cpus > 0:
            flags.add(f"--pipeline.resources.{name}-cpus")
        if "GPU" in short and bundle.gpus > 0:
            flags.add(f"--pipeline.resources.{name}-gpus")
    return sorted(flags)


def check_request(cfg: TrainConfig) -> None:
    """Start or join Ray (`connect`) and compare the run's request with the cluster (`check_fits`),
    so that a run the cluster cannot hold fails before its run directory is written. Inside a Tune
    trial the trial's placement group already holds the actors' bundles: nothing to compare."""
    import ray
    from ray.util.placement_group import get_current_placement_group

    connect(cfg.address, cpus_asked=cpus_asked(plan(cfg, {})))
    cluster = ray.cluster_resources()
    if get_current_placement_group() is None:
        check_fits(plan(cfg, cluster), cluster)
    note = sharing_note(cfg, cluster.get("GPU", 0.0))
    if note is not None:
        print(note)


def build_ray(cfg: TrainConfig, checkpoints: StoragePath, resuming: bool = False) -> Components:
    """The run's actors in a placement group, on the Ray session `check_request` started or joined
    and compared the request with (`run_pipeline` calls it before writing the run directory)."""
    import ray
    from ray.util.placement_group import get_current_placement_group, placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from sacglam.inference.actor import InferenceActor
    from sacglam.learner.service import LearnerService
    from sacglam.pipeline.dashboard import RayDashboardMetrics
    from sacglam.rollout_workers.service import RolloutService

    url = connect(cfg.address)  # the session `check_request` started: its dashboard URL
    bundles = plan(cfg, ray.cluster_resources())
    # Inside a Ray Tune trial, the trial's placement group already holds one bundle per actor
    # after the trial's own (`sacglam.experiments.tune_runner.trial_bundles`).
    pg, offset, own_group = get_current_placement_group(), 1, False
    if pg is None:
        pg, offset, own_group = (
            placement_group([b.resources() for b in bundles], strategy=cfg.pipeline.resources.placement_strategy),
            0,
            True,
        )
    try:
        ray.get(pg.ready(), timeout=cfg.pipeline.resources.placement_timeout_s)
    except ray.exceptions.GetTimeoutError:
        if own_group:
            remove_placement_group(pg)
        raise ClusterTooSmallError(
            f"the placement group ({len(bundles)} bundles) was not placed within "
            f"{cfg.pipeline.resources.placement_timeout_s:g} s: the resources exist but are busy or spread "
            "too thin for the placement strategy (`ray status` shows them); free them or raise "
            "pipeline.resources.placement_timeout_s"
        ) from None

    run_id = uuid.uuid4().hex[:8]
    next_bundle = iter(range(len(bundles)))

    def spawn(cls: type, restart: bool, *args: Any) -> RayHandle:
        """Start `cls(*args)` as an actor in the next bundle of the group (bundles are in the order
        the actors are spawned), named so a restarted actor can find it; `restart`: Ray restarts it
        and retries its calls when it dies."""
        index = next(next_bundle)
        bundle = bundles[index]
        name = f"sacglam-{run_id}-{bundle.role}"
        actor: Any = (
            ray.remote(cls)
            .options(
                name=name,
                num_cpus=bundle.resources()["CPU"],
                num_gpus=bundle.gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index + offset),
                max_restarts=-1 if restart else 0,
                max_task_retries=-1 if restart else 0,
            )
            .remote(*args)
        )
        return RayHandle(actor, name=name)

    def threads(cpus: float, asked: int | None = None) -> int:
        return asked or max(1, int(cpus))

    res, p = cfg.pipeline.resources, cfg.pipeline
    storage_class, args = storage_component(cfg)
    storage = spawn(storage_class, True, *args, *([checkpoints] if args else []))
    shares = gpu_shares(cfg, ray.cluster_resources().get("GPU", 0.0))
    inference = [
        spawn(
            InferenceActor,
            True,
            cfg.agent,
            p.inference_max_batch,
            p.inference_max_wait_ms,
            threads(res.inference_cpus, res.inference_threads),
            gpu_memory_fraction(cfg, shares.inference),
        )
        for _ in range(p.inference_actors)
    ]
    learners = [
        spawn(
            LearnerService,
            False,
            cfg,
            storage,
            rank,
            p.learners,
            threads(res.learner_cpus, res.learner_threads),
            not resuming,
            gpu_memory_fraction(cfg, shares.learner),
        )
        for rank in range(p.learners)
    ]
    workers = [
        spawn(
            RolloutService,
            True,
            cfg.env,
            envs_per_worker(cfg),
            worker_seed(cfg, i),
            inference[i % len(inference)],
            storage,
            threads(res.worker_cpus),
        )
        for i in range(p.rollout_workers)
    ]
    goal_sampler = None
    if uses_goal_sampler(cfg):
        from sacglam.goal_sampler.service import GoalSamplerService

        goal_sampler = spawn(GoalSamplerService, True, cfg.goal_sampler, cfg.env, cfg.seed, checkpoints, 1)
    others = [goal_sampler] if goal_sampler is not None else []
    resolve_all(
        [h.call(Component.ping) for h in [storage, *inference, *learners, *workers, *others]]
    )  # constructors done
    if len(learners) > 1:
        address, port = ray.get(learners[0].call(LearnerService.rendezvous))
        # NCCL refuses two ranks on one card; learners that share one average their gradients
        # over gloo (which takes CUDA tensors through host memory) instead.
        cards = resolve_all([learner.call(LearnerService.gpu_ids) for learner in learners])
        shared = share_a_card(cards)
        resolve_all([learner.call(LearnerService.join, address, port, shared) for learner in learners])

    def close() -> None:
        for handle in [*workers, *learners, *inference, storage, *others]:
            ray.kill(handle.actor, no_restart=True)
        if own_group:
            remove_placement_group(pg)

    return Components(
        storage=storage,
        inference=inference,
        workers=workers,
        learners=learners,
        goal_sampler=goal_sampler,
        dashboard=RayDashboardMetrics(StoragePath(cfg.output_dir).name),
        dashboard_url=url,
        close=close,
    )
