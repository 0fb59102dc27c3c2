"""`[provision]`, the plan of a gcp-tpu run, its startup scripts, and TpuApi against the fake
Cloud TPU v2 API (a real gRPC server on 127.0.0.1, driven through google-cloud-tpu)."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlx_controller.node import exit_key
from rlx_controller.providers.fake_tpu import FakeTpuApi
from rlx_controller.providers.gcp_tpu import ProvisionFailed, TpuApi
from rlx_controller.provision import make_plan, startup_script
from rlx_controller.run_config import RunConfig, config_hash, loads_run_config
from rlx_controller.rundir import RunPaths
from rlx_controller.tpu_services import TpuRunServices
from rlx_core.errors import Cancelled, ConfigError, DeadlineExceeded

BASE = """
run_dir = "gs://bucket/runs/Math_Qwen"
[[datasets]]
name = "d"
path = "d.jsonl"
[services]
provider = "gcp-tpu"
inference_workers = 3
paramserver_replicas = 2
verifier_workers = 2
[provision]
project = "proj"
zone = "us-east5-a"
token_secret = "rlx-token"
runtime_version = "v2-alpha-tpuv5"
labels = {team = "rl"}
[provision.trainer]
accelerator_type = "v5p-32"
[provision.inference]
accelerator_type = "v5p-8"
capacity = "spot"
"""


def _cfg(extra: str = "", overrides: tuple[str, ...] = ()) -> RunConfig:
    return loads_run_config(BASE + extra, overrides=overrides)


def test_plan_names_pools_ports_and_colocation() -> None:
    plan = make_plan(_cfg())
    name = plan.name
    assert name.startswith("math-qwen-") and len(name) == len("math-qwen-") + 4
    ids = [n.node_id for n in plan.nodes]
    assert ids == [f"{name}-trainer-0"] + [f"{name}-inference-{i}" for i in range(3)]
    by_id = {n.node_id: n for n in plan.nodes}
    assert by_id[ids[0]].accelerator_type == "v5p-32" and by_id[ids[0]].capacity == "on-demand"
    assert by_id[ids[1]].capacity == "spot"
    # paramserver and verifier replicas colocate on the inference nodes, i mod n
    on_first = [s.name for s in by_id[ids[1]].services]
    assert on_first == ["inference-0", "paramserver-0", "verifier-0"]
    assert [s.name for s in by_id[ids[3]].services] == ["inference-2"]
    ports = [s.port for n in plan.nodes for s in n.services]
    assert len(set(ports)) == len(ports) == 8 and min(ports) == 50100
    assert by_id[ids[2]].labels == {
        "team": "rl",
        "rlx-run": name,
        "rlx-pool": "inference",
        "rlx-index": "1",
    }
    # the same run, the same names (apply twice finds the first one's resources)
    assert make_plan(_cfg()).nodes == plan.nodes
    assert make_plan(_cfg(overrides=("provision.name=exp1",))).nodes[0].node_id == "exp1-trainer-0"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("provision.inference.machine_type=n2-standard-8", "machine_type"),
        ('provision.verifier.colocate="paramserver"', "colocate"),
        ("provision.inference.count=2", "provision.inference.count"),
        ("provision.trainer.count=2", "trainer.count"),
        ('provision.inference.capacity="reserved"', "reservation"),
        ('provision.name="Bad_Name"', "name"),
        ('provision.inference.accelerator_type="tpu"', "accelerator_type"),
        ('run_dir="/local/run"', "run_dir"),
    ],
)
def test_bad_provision_fields_are_named(override: str, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        _cfg(overrides=(override,))
    assert field in str(e.value)


def test_gcp_tpu_needs_a_provision_table_and_the_hash_ignores_it() -> None:
    bare = BASE.split("[provision]", maxsplit=1)[0]
    with pytest.raises(ConfigError, match="provision"):
        loads_run_config(bare)
    local = loads_run_config(bare, overrides=("services.provider=local",))
    assert local.provision is None
    # where the machines are (zone, capacity) may change between preemption and resume
    assert config_hash(_cfg()) == config_hash(_cfg(overrides=("provision.zone=us-central2-b",)))


def test_startup_script_reads_the_token_from_the_secret_and_parses() -> None:
    plan = make_plan(_cfg())
    node = plan.nodes[1]
    script = startup_script(plan, node)
    assert "gcloud secrets versions access latest --secret=rlx-token --project=proj" in script
    assert "rlx-controller==" in script and "pip install" in script
    assert f"--node {node.node_id}" in script and "--run-dir gs://bucket/runs/Math_Qwen" in script
    for s in node.services:
        assert f"--service {s.name}:{s.kind}:{s.port}" in script
    assert "RLX_COORDINATOR" not in script  # only the trainer's hosts form one mesh
    assert 'RLX_COORDINATOR="${RLX_COORDINATOR-auto}"' in startup_script(plan, plan.nodes[0])
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


@pytest.fixture
def fake() -> Iterator[FakeTpuApi]:
    with FakeTpuApi(activate_after=1) as api:
        yield api


def _api(fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch) -> TpuApi:
    monkeypatch.setenv("RLX_TPU_API_ENDPOINT", fake.address)
    return TpuApi.connect("proj", "us-east5-a")


def test_apply_creates_waits_and_a_second_apply_creates_nothing(
    fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(_cfg())
    api = _api(fake, monkeypatch)
    seen: list[set[str]] = []
    done = api.apply(
        plan,
        on_progress=lambda states, _t: seen.append({s.state for s in states.values()}),
        poll_s=0.01,
    )
    assert set(done.values()) == {"created"}
    assert seen[0] == {"WAITING_FOR_RESOURCES"} and seen[-1] == {"ACTIVE"}
    creates = fake.requests("CreateQueuedResource")
    assert [r.queued_resource_id for r in creates] == [n.node_id for n in plan.nodes]
    first, spot = creates[0].queued_resource, creates[1].queued_resource
    node = first.tpu.node_spec[0].node
    assert node.accelerator_type == "v5p-32" and node.runtime_version == "v2-alpha-tpuv5"
    assert node.labels["rlx-pool"] == "trainer" and node.labels["team"] == "rl"
    assert "gcloud secrets versions access" in node.metadata["startup-script"]
    assert not first.spot and not node.scheduling_config.spot
    assert "spot" in spot and spot.tpu.node_spec[0].node.scheduling_config.spot
    assert api.hosts(plan.nodes[0]) == ["127.0.0.1"]

    again = api.apply(plan, poll_s=0.01)
    assert set(again.values()) == {"exists"}
    assert len(fake.requests("CreateQueuedResource")) == len(plan.nodes)
    listed = api.list_run(plan.name)
    assert [s.node_id for s in listed] == sorted(n.node_id for n in plan.nodes)
    assert {s.state for s in listed} == {"ACTIVE"}
    assert api.list_run("another-run") == []


def test_a_failed_node_is_reported_with_the_reason_and_recreated(
    fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(_cfg())
    api = _api(fake, monkeypatch)
    fake.activate_after = None  # stays waiting until the test moves it
    api.apply(plan, wait=False)
    victim = plan.nodes[2].node_id
    fake.set_state(victim, "FAILED", error="no v5p capacity in us-east5-a")
    with pytest.raises(ProvisionFailed, match=f"{victim} FAILED: no v5p capacity"):
        api.wait_active(plan, poll_s=0.01)
    with pytest.raises(DeadlineExceeded, match="not ACTIVE after"):
        api.apply(plan, poll_s=0.01, timeout_s=0.05)
    # the failed one was deleted and created again, the others left alone
    deletes = fake.requests("DeleteQueuedResource")
    assert [d.name.rsplit("/", 1)[-1] for d in deletes] == [victim]
    assert deletes[0].force


def test_a_suspended_node_is_recreated_by_apply(
    fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(_cfg())
    api = _api(fake, monkeypatch)
    api.apply(plan, poll_s=0.01)
    victim = plan.nodes[1].node_id
    fake.set_state(victim, "SUSPENDED")
    st = api.get(victim)
    assert (st.state, st.reason) == ("SUSPENDED", "(preempted)")
    with pytest.raises(ProvisionFailed, match=f"{victim} is SUSPENDED"):
        api.wait_active(plan, poll_s=0.01)
    done = api.apply(plan, poll_s=0.01)
    assert done[victim] == "re-created (SUSPENDED)"
    assert {v for k, v in done.items() if k != victim} == {"exists"}
    assert api.get(victim).state == "ACTIVE"


def test_delete_removes_every_node_and_says_which_existed(
    fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(_cfg())
    api = _api(fake, monkeypatch)
    api.apply(plan, poll_s=0.01)
    ids = [n.node_id for n in plan.nodes]
    assert api.delete(ids) == ids
    assert fake.queued_resources() == [] and fake.nodes() == []
    assert api.delete(ids) == []
    assert {s.state for s in api.states(plan).values()} == {"MISSING"}


def test_a_cancelled_wait_stops_and_leaves_the_queue(
    fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan(_cfg())
    api = _api(fake, monkeypatch)
    fake.activate_after = None
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(Cancelled, match="their queued resources stay"):
        api.apply(plan, poll_s=60, cancel=cancel)
    assert len(fake.queued_resources()) == len(plan.nodes)


def test_the_controller_shows_why_a_remote_service_does_not_answer(
    fake: FakeTpuApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, new_root: Any, gcs_env: str
) -> None:
    run = new_root("gcs", "runs/r1")
    cfg = _cfg(overrides=(f"run_dir={run}",))
    said: list[str] = []
    services = TpuRunServices(
        cfg,
        RunPaths.of(run, tmp_path / "work"),
        tmp_path / "token",
        log=said.append,
        api=_api(fake, monkeypatch),
    )
    services._show_exit("trainer")  # no report: nothing to say
    report = {"node": "n-trainer-0", "code": 1, "starts": 2, "tail": "ValueError: bad", "unix": 1.0}
    services.paths.storage.put(exit_key("trainer"), json.dumps(report).encode())
    services._show_exit("trainer")
    services._show_exit("trainer")  # the same report once
    assert len(said) == 1 and "trainer on node n-trainer-0 exited with code 1 (start 2" in said[0]
    assert said[0].endswith("ValueError: bad")
