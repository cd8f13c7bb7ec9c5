"""Where a run's actors go, without starting Ray: custom node resources per role in the placement
bundles, a cluster that lacks one named in one line, and no --address meaning a Ray of the run's
own (never the cluster last started on the machine)."""

import os
import warnings
from dataclasses import replace

import pytest
import torch

ray = pytest.importorskip("ray")

from sacglam.config import PipelineConfig, ResourcesConfig, TrainConfig  # noqa: E402
from sacglam.pipeline import ray_cluster  # noqa: E402
from sacglam.pipeline.ray_cluster import ClusterTooSmallError, check_fits, plan  # noqa: E402

ON_NODES = {"rollout-worker": {"env_node": 1}, "replay": {"env_node": 0.5}, "learner": {"gpu_node": 1}}


def _cfg(**resources) -> TrainConfig:
    return TrainConfig(
        agent=TrainConfig().agent,
        runner="ray",
        num_envs=4,
        pipeline=PipelineConfig(rollout_workers=2, resources=ResourcesConfig(**resources)),
    )


def test_node_resources_go_into_the_bundles_of_their_role_only():
    bundles = {b.role: b.resources() for b in plan(_cfg(node_resources=ON_NODES), {"CPU": 8})}
    assert bundles["rollout-worker-0"] == bundles["rollout-worker-1"] == {"CPU": 1.0, "env_node": 1}
    assert bundles["replay"] == {"CPU": 1.0, "env_node": 0.5} and bundles["learner-0"] == {"CPU": 1.0, "gpu_node": 1}
    assert bundles["inference-0"] == {"CPU": 1.0}


def test_a_cluster_without_the_named_resource_is_refused_naming_it():
    bundles = plan(_cfg(node_resources=ON_NODES), {"CPU": 8})
    check_fits(bundles, {"CPU": 8, "env_node": 4, "gpu_node": 1})  # fits
    with pytest.raises(ClusterTooSmallError, match=r"2\.5 env_node \(the cluster has 2\)") as error:
        check_fits(bundles, {"CPU": 8, "env_node": 2, "gpu_node": 1})
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "node_resources, message",
    [
        ({"workers": {"env_node": 1}}, "unknown role 'workers'; the roles are rollout-worker, replay"),
        ({"learner": {"CPU": 1}}, "CPUs and GPUs are set by the"),
        ({"learner": {"gpu_node": 0}}, r"expected \{resource name: amount > 0\}"),
    ],
)
def test_node_resources_are_validated_naming_the_role(node_resources, message):
    with pytest.raises(ValueError, match=message):
        ResourcesConfig(node_resources=node_resources)


@pytest.mark.parametrize("ray_address, expected", [(None, "local"), ("10.0.0.1:6379", None)])
def test_no_address_starts_a_ray_of_the_runs_own_unless_a_job_names_its_cluster(monkeypatch, ray_address, expected):
    """Ray's own default would join the cluster last started on this machine (a test's, another
    run's); inside `ray job submit` RAY_ADDRESS names the job's cluster, which Ray then joins."""
    asked = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda address=None, **_: asked.append(address))
    if ray_address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", ray_address)
    ray_cluster.connect(None)
    ray_cluster.connect("auto")
    assert asked == [expected, "auto"]


def test_a_cpu_shortage_names_the_command_line_settings_to_lower():
    """The README's `--runner ray` PPO config asks for 4 whole CPUs; on a cluster of 2 the error
    names the settings a user types (`rollout-storage` is the replay actor's place), and a GPU
    shortage names only the roles that ask for GPUs."""
    ppo = TrainConfig(agent=replace(TrainConfig().agent, critic="value"), algo="ppo", runner="ray", num_envs=4)
    with pytest.raises(ClusterTooSmallError) as error:
        check_fits(plan(ppo, {"CPU": 2}), {"CPU": 2})
    message = str(error.value)
    assert "4 CPU (the cluster has 2)" in message and "rollout-storage: 1 CPU" in message
    for flag in ("worker-cpus", "replay-cpus", "inference-cpus", "learner-cpus"):
        assert f"--pipeline.resources.{flag}" in message
    assert "-gpus" not in message
    with pytest.raises(ClusterTooSmallError) as error:
        check_fits(plan(_cfg(learner_gpus=1.0), {"CPU": 8}), {"CPU": 8})
    assert "--pipeline.resources.learner-gpus" in str(error.value)
    assert "-cpus" not in str(error.value) and "inference-gpus" not in str(error.value)


@pytest.mark.parametrize(
    "asked, detected, counted",
    [(4, 2, 4), (2.5, 2, 3), (2, 2, None), (1.75, 2, None), (4, 16, None), (5, 2, None), (15, 2, None)],
)
def test_a_local_ray_counts_at_least_the_cpus_the_actors_ask_for_up_to_twice_the_cores(asked, detected, counted):
    """Four whole-CPU actors on 2 cores share them; a cluster's config (15 CPUs) fails with what is short."""
    assert ray_cluster.local_cpus(asked, detected) == counted


def test_the_cpus_asked_count_the_sliver_of_an_actor_asking_for_none():
    """Two rollout workers at 0 CPUs still take 0.01 each from the cluster: a local Ray counting
    3 for 3.02 would refuse the run it was started for."""
    bundles = plan(_cfg(worker_cpus=0.0), {"CPU": 2})
    assert ray_cluster.cpus_asked(bundles) == pytest.approx(3.02)
    assert ray_cluster.local_cpus(ray_cluster.cpus_asked(bundles), 2) == 4
    with pytest.raises(ClusterTooSmallError) as error:
        check_fits(bundles, {"CPU": 2})
    assert "worker-cpus" not in str(error.value)  # it asks for none: lowering it changes nothing


def test_a_run_asking_more_cpus_than_the_machine_has_starts_its_local_ray_with_them_and_says_so(monkeypatch, capsys):
    """A 2-core laptop runs a config written for whole-CPU actors as it is (the actors share the
    cores); a cluster joined with --address is taken as it is."""
    options = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: options.append(kwargs))
    monkeypatch.setattr(ray_cluster, "_detected_cpus", lambda: 2)
    monkeypatch.setattr(ray_cluster, "_last_cluster_started_here", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray_cluster.connect(None, cpus_asked=4.0)
    ray_cluster.connect(None, cpus_asked=1.5)
    ray_cluster.connect("auto", cpus_asked=4.0)
    assert [o.get("num_cpus") for o in options] == [4, None, None]
    printed = capsys.readouterr().out
    assert printed.count("note:") == 1 and "ask for 4 CPUs and this machine has 2: its local Ray counts 4" in printed


# ------------------------------------------------------------------ GPUs


def _gpu_cfg(learners: int = 1, **resources) -> TrainConfig:
    return TrainConfig(
        agent=TrainConfig().agent,
        runner="ray",
        num_envs=4,
        pipeline=PipelineConfig(rollout_workers=1, learners=learners, resources=ResourcesConfig(**resources)),
    )


def _gpus(cfg: TrainConfig, cluster_gpus: float) -> dict[str, float]:
    return {b.role: b.gpus for b in plan(cfg, {"CPU": 8, "GPU": cluster_gpus})}


@pytest.mark.parametrize(
    "cluster_gpus, learners, share",
    [(1, 1, 0.5), (1, 2, 0.3333), (2, 1, 1.0), (2, 2, 0.5), (3, 2, 1.0), (3, 4, 0.5), (0, 2, 0.0), (0.5, 1, 0.25)],
)
def test_gpu_roles_share_the_cards_when_the_cluster_has_fewer_than_they_are(cluster_gpus, learners, share):
    cfg = _gpu_cfg(learners)
    gpus = _gpus(cfg, cluster_gpus)
    assert gpus["inference-0"] == share and all(gpus[f"learner-{i}"] == share for i in range(learners))
    assert gpus["replay"] == gpus["rollout-worker-0"] == 0.0
    check_fits(plan(cfg, {"CPU": 8, "GPU": cluster_gpus}), {"CPU": 8, "GPU": cluster_gpus})  # no refusal
    # Ray places a fractional share whole on one card: the shares must pack into the whole cards
    if 0 < share < 1:
        per_card = int(1 / share + 1e-6)
        assert -(-(learners + 1) // per_card) <= max(1, int(cluster_gpus))


def test_explicit_gpu_settings_win_and_the_rest_is_shared():
    assert _gpus(_gpu_cfg(inference_gpus=0.25), 1) == _gpus(_gpu_cfg(inference_gpus=0.25), 1) | {
        "inference-0": 0.25,
        "learner-0": 0.75,
    }
    assert _gpus(_gpu_cfg(inference_gpus=0.0, learner_gpus=1.0), 1)["inference-0"] == 0.0
    with pytest.raises(ClusterTooSmallError, match="--pipeline.resources.learner-gpus"):
        check_fits(plan(_gpu_cfg(learner_gpus=2.0), {"CPU": 8, "GPU": 1}), {"CPU": 8, "GPU": 1})


def test_shares_that_do_not_pack_onto_whole_cards_are_refused_in_one_line():
    """Two explicit 0.75 learners and a default inference actor on 2 GPUs add up to 2, but each
    card keeps 0.25 free and Ray places the actor's 0.5 whole on one card: it would never start."""
    cfg = _gpu_cfg(learners=2, learner_gpus=0.75)
    bundles = plan(cfg, {"CPU": 8, "GPU": 2})
    assert {b.role: b.gpus for b in bundles}["inference-0"] == 0.5
    with pytest.raises(ClusterTooSmallError, match=r"inference-0's 0\.5 GPU does not fit on one card") as error:
        check_fits(bundles, {"CPU": 8, "GPU": 2})
    assert "\n" not in str(error.value) and "--pipeline.resources.learner-gpus" in str(error.value)
    check_fits(plan(_gpu_cfg(learners=2, learner_gpus=0.5), {"CPU": 8, "GPU": 2}), {"CPU": 8, "GPU": 2})


def test_learners_share_a_card_only_on_the_same_node():
    assert ray_cluster.share_a_card([["n1:0"], ["n1:0"]])
    assert not ray_cluster.share_a_card([["n1:0"], ["n2:0"]])  # GPU 0 of two nodes: two cards
    assert not ray_cluster.share_a_card([[], []])


def test_a_shared_card_bounds_each_processs_memory_unless_set():
    assert ray_cluster.gpu_memory_fraction(_gpu_cfg(), 0.5) == 0.5
    assert ray_cluster.gpu_memory_fraction(_gpu_cfg(), 1.0) is None
    assert ray_cluster.gpu_memory_fraction(_gpu_cfg(gpu_memory_fraction=0.4), 0.5) == 0.4
    assert ray_cluster.gpu_memory_fraction(_gpu_cfg(gpu_memory_fraction=0.4), 0.0) is None
    with pytest.raises(ValueError, match=r"gpu_memory_fraction must be in \(0, 1\]"):
        ResourcesConfig(gpu_memory_fraction=1.5)


def test_sharing_is_said_in_one_line_and_whole_cards_are_not_mentioned():
    note = ray_cluster.sharing_note(_gpu_cfg(), 1)
    assert note is not None and "\n" not in note
    assert "1 GPU for 2 GPU roles (1 inference actor and 1 learner): they share, 0.5 GPU each" in note
    assert "at most 50% of its card's memory" in note
    assert ray_cluster.sharing_note(_gpu_cfg(), 2) is None and ray_cluster.sharing_note(_gpu_cfg(), 0) is None


def test_an_actor_given_a_gpu_torch_cannot_see_says_it_runs_on_the_cpu(monkeypatch):
    from sacglam.errors import SacglamWarning
    from sacglam.runtime import accelerator

    monkeypatch.setattr(accelerator, "ray_gpu_ids", lambda: ["0"])
    with pytest.warns(SacglamWarning, match="learner 0 was given GPU 0 by Ray .* it runs on the CPU"):
        assert accelerator.settle_on_device("learner 0", torch.device("cpu"), 0.5) is None
    monkeypatch.setattr(accelerator, "ray_gpu_ids", lambda: [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accelerator.settle_on_device("learner 0", torch.device("cpu"), 0.5)  # nothing given: nothing said


@pytest.fixture(scope="module")
def declared_gpus(request):
    """A local Ray that declares GPUs this machine does not have (Ray takes `num_gpus` as said):
    what a GPU cluster's placement looks like, on a CPU."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, num_gpus=request.param, include_dashboard=False, logging_level="WARNING")
    yield request.param
    ray.shutdown()  # the next test that needs the shared cluster starts it again (tests/conftest.py)


def _tiny_ray_cfg(tmp_path, learners: int, **changes) -> TrainConfig:
    from sacglam.config import AgentConfig, SACConfig

    base = TrainConfig(
        algo="sac-her",
        agent=AgentConfig(model="tiny-causal", lora_r=0, critic_width=16),
        sac=SACConfig.with_her(batch_size=16, random_steps=64),
        num_envs=4,
        total_env_steps=256,
        eval_every=10_000,
        eval_episodes=2,
        log_every=128,
        warm_start_steps=2,
        output_dir=tmp_path / "run",
        progress=False,
        runner="ray",
        pipeline=PipelineConfig(
            rollout_workers=1,
            learners=learners,
            resources=ResourcesConfig(worker_cpus=0.25, inference_cpus=0.25, learner_cpus=0.5, replay_cpus=0.25),
        ),
    )
    return replace(base, **changes)


@pytest.mark.slow
@pytest.mark.ray
# Three roles on one card (shares of 1/3), and two roles on two cards (a card each).
@pytest.mark.parametrize(
    "declared_gpus, learners", [(1, 2), (2, 1)], indirect=["declared_gpus"], ids=["1 GPU-2", "2 GPUs-1"]
)
def test_each_actor_sees_the_cards_of_its_share(tmp_path, declared_gpus, learners):
    """Every GPU role gets a card (CUDA_VISIBLE_DEVICES, Ray's accelerator ids), no card holds more
    than one GPU of shares, and the CPU roles see none."""
    from sacglam.pipeline.ray_cluster import build_ray
    from sacglam.runtime.storage import StoragePath

    cfg = _tiny_ray_cfg(tmp_path, learners)
    parts = build_ray(cfg, StoragePath(str(tmp_path / "checkpoints")))
    try:

        def seen(handle):
            return ray.get(
                handle.actor.__ray_call__.remote(
                    lambda _: (
                        os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                        ray.get_runtime_context().get_accelerator_ids().get("GPU", []),
                    )
                )
            )

        shares = {b.role: b.gpus for b in plan(cfg, ray.cluster_resources())}
        load: dict[str, float] = {}
        for role, handle in [("inference-0", parts.inference[0])] + [
            (f"learner-{i}", h) for i, h in enumerate(parts.learners)
        ]:
            visible, ids = seen(handle)
            assert len(ids) == 1 and visible == ids[0], role
            load[ids[0]] = load.get(ids[0], 0.0) + shares[role]
        assert all(total <= 1.0 + 1e-9 for total in load.values())
        if declared_gpus >= learners + 1:
            assert len(load) == learners + 1  # a card each
        for handle in [parts.storage, *parts.workers]:
            assert seen(handle)[1] == []
    finally:
        parts.close()


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.parametrize("declared_gpus", [1], indirect=True, ids=["1 GPU"])
def test_a_run_on_one_declared_gpu_with_default_settings_starts_and_finishes(tmp_path, declared_gpus, capsys):
    from sacglam.pipeline.run import run_pipeline

    cfg = _tiny_ray_cfg(tmp_path, 1, address=ray.get_runtime_context().gcs_address)
    final = run_pipeline(cfg, announce=lambda _: None)
    assert 0.0 <= final["eval/simple-train/sampled/all"] <= 1.0
    assert "they share, 0.5 GPU each" in capsys.readouterr().out
