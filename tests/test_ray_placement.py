"""Where a run's actors go, without starting Ray: custom node resources per role in the placement
bundles, a cluster that lacks one named in one line, and no --address meaning a Ray of the run's
own (never the cluster last started on the machine)."""

from dataclasses import replace

import pytest

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
