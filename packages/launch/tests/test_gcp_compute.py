"""The machine_type pools of a gcp-tpu run: ComputeApi against the fake Compute Engine API (a real
HTTP server on 127.0.0.1, driven through google-cloud-compute's REST transport), and GcpApi, which
sends a plan's TPU slices to the fake Cloud TPU API and its VMs there."""

from __future__ import annotations

from collections.abc import Iterator

import google.auth
import pytest

from rlx_core.configs.run import loads_run_config
from rlx_core.errors import PermissionDenied
from rlx_launch.gcp import GcpApi
from rlx_launch.gcp.base import ProvisionFailed, state_lines
from rlx_launch.gcp.compute import ComputeApi
from rlx_launch.provision import Plan, make_plan, startup_script
from rlx_testing.fake_compute import FakeComputeApi
from rlx_testing.fake_tpu import FakeTpuApi

# a run of VMs only would have no trainer: the tests of ComputeApi alone take the plan's VMs
CONFIG = """
run_dir = "gs://bucket/runs/cpu"
[model]
path = "/models/qwen"
[[datasets]]
name = "d"
path = "d.jsonl"
[services]
provider = "gcp-tpu"
inference_workers = 2
paramserver_replicas = 1
verifier_workers = 2
[provision]
project = "proj"
zone = "us-east5-a"
token_secret = "rlx-token"
labels = {team = "rl"}
service_account = "rlx-nodes@proj.iam.gserviceaccount.com"
[provision.trainer]
accelerator_type = "v5p-8"
[provision.inference]
accelerator_type = "v5p-8"
[provision.paramserver]
colocate = "verifier"
[provision.verifier]
machine_type = "n2-standard-8"
"""


def _plan(*overrides: str) -> Plan:
    return make_plan(loads_run_config(CONFIG, overrides=overrides))


def _vms(plan: Plan) -> Plan:
    """The plan with its VMs only (what ComputeApi alone is given)."""
    return Plan(
        name=plan.name,
        project=plan.project,
        zone=plan.zone,
        run_dir=plan.run_dir,
        provision=plan.provision,
        nodes=tuple(n for n in plan.nodes if n.is_vm),
    )


def _forbid_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_credentials(*args: object, **kwargs: object) -> None:
        raise AssertionError("the client looked up Google credentials")

    monkeypatch.setattr(google.auth, "default", no_credentials)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeComputeApi]:
    """The fake (RUNNING after one get), with RLX_COMPUTE_API_ENDPOINT on it; any lookup of
    Google credentials fails the test."""
    _forbid_credentials(monkeypatch)
    with FakeComputeApi(running_after=1) as api:
        monkeypatch.setenv("RLX_COMPUTE_API_ENDPOINT", api.endpoint)
        yield api


@pytest.fixture
def compute(fake: FakeComputeApi) -> Iterator[ComputeApi]:
    with ComputeApi.connect("proj", "us-east5-a") as api:
        yield api


def test_apply_creates_vms_waits_until_running_and_a_second_apply_creates_nothing(
    fake: FakeComputeApi, compute: ComputeApi
) -> None:
    plan = _vms(_plan())
    lines: list[str] = []
    done = compute.apply(plan, on_progress=state_lines(lines.append), poll_s=0.01)
    ids = [n.node_id for n in plan.nodes]
    assert done == dict.fromkeys(ids, "created")
    assert ids == [f"{plan.name}-verifier-0", f"{plan.name}-verifier-1"]
    # PROVISIONING, STAGING, RUNNING as the API reports them: CREATING, then ACTIVE
    assert f"{ids[0]} CREATING (staging)" in lines[0] and f"{ids[0]} ACTIVE" in lines[-1]

    inserts = fake.requests("instances.insert")
    assert [(c.project, c.zone) for c in inserts] == [("proj", "us-east5-a")] * 2
    vm = inserts[1].body
    assert vm is not None
    assert vm.name == ids[1] and vm.machine_type == "zones/us-east5-a/machineTypes/n2-standard-8"
    assert vm.labels == {
        "team": "rl",
        "rlx-run": plan.name,
        "rlx-pool": "verifier",
        "rlx-index": "1",
    }
    (disk,) = vm.disks
    assert disk.boot and disk.auto_delete
    assert disk.initialize_params.source_image == (
        "projects/debian-cloud/global/images/family/debian-12"
    )
    assert disk.initialize_params.disk_size_gb == 100
    assert disk.initialize_params.disk_type == "zones/us-east5-a/diskTypes/pd-balanced"
    (nic,) = vm.network_interfaces
    assert nic.network == "projects/proj/global/networks/default" and not nic.subnetwork
    assert [a.type_ for a in nic.access_configs] == ["ONE_TO_ONE_NAT"]
    (item,) = vm.metadata.items
    assert (item.key, item.value) == ("startup-script", startup_script(plan, plan.nodes[1]))
    (sa,) = vm.service_accounts
    assert sa.email == "rlx-nodes@proj.iam.gserviceaccount.com"
    assert list(sa.scopes) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert vm.scheduling.provisioning_model == "STANDARD"
    assert "reservation_affinity" not in vm
    assert compute.hosts(plan.nodes[0]) == ["127.0.0.1"]

    again = compute.apply(plan, poll_s=0.01)
    assert again == dict.fromkeys(ids, "exists")
    assert len(fake.requests("instances.insert")) == 2


@pytest.mark.parametrize(
    ("overrides", "scheduling", "reservation"),
    [
        ((), {"provisioning_model": "STANDARD"}, None),
        (
            ('provision.verifier.capacity="spot"',),
            {
                "provisioning_model": "SPOT",
                "instance_termination_action": "STOP",
                "automatic_restart": False,
                "on_host_maintenance": "TERMINATE",
            },
            None,
        ),
        (
            (
                'provision.verifier.capacity="reserved"',
                'provision.verifier.reservation="projects/proj/zones/us-east5-a/reservations/cpu"',
            ),
            {"provisioning_model": "STANDARD"},
            "cpu",
        ),
        (
            (
                'provision.verifier.capacity="reserved"',
                'provision.verifier.reservation="projects/host/reservations/shared"',
            ),
            {"provisioning_model": "STANDARD"},
            "projects/host/reservations/shared",
        ),
    ],
)
def test_capacity_is_the_vms_provisioning_model_or_reservation(
    fake: FakeComputeApi,
    compute: ComputeApi,
    overrides: tuple[str, ...],
    scheduling: dict[str, object],
    reservation: str | None,
) -> None:
    plan = _vms(
        _plan(
            *overrides,
            "provision.verifier.disk_gb=30",
            'provision.subnetwork="sub"',
            'provision.service_account=""',
            "provision.verifier.machine_type=c4-standard-8",
        )
    )
    compute.apply(plan, wait=False)
    vm = fake.requests("instances.insert")[0].body
    assert vm is not None
    for key, value in scheduling.items():
        assert getattr(vm.scheduling, key) == value, key
    if reservation is None:
        assert "reservation_affinity" not in vm
    else:
        affinity = vm.reservation_affinity
        assert affinity.consume_reservation_type == "SPECIFIC_RESERVATION"
        assert affinity.key == "compute.googleapis.com/reservation-name"
        assert list(affinity.values) == [reservation]
    assert vm.disks[0].initialize_params.disk_size_gb == 30
    assert vm.disks[0].initialize_params.disk_type.endswith("/diskTypes/hyperdisk-balanced")
    # no service account in the config: the project's default (the API attaches none by itself)
    assert [(a.email, list(a.scopes)) for a in vm.service_accounts] == [
        ("default", ["https://www.googleapis.com/auth/cloud-platform"])
    ]
    subnet = vm.network_interfaces[0].subnetwork
    assert subnet == "projects/proj/regions/us-east5/subnetworks/sub"


def test_a_preempted_vm_stops_the_wait_and_apply_creates_it_again(
    fake: FakeComputeApi, compute: ComputeApi
) -> None:
    plan = _vms(_plan('provision.verifier.capacity="spot"'))
    compute.apply(plan, poll_s=0.01)
    victim = plan.nodes[1].node_id
    first_id = fake.instances()[1].id
    fake.set_status(victim, "TERMINATED")  # a spot VM preempted: stopped
    st = compute.get(victim)
    assert (st.state, st.reason, st.machine_type) == ("SUSPENDED", "(terminated)", "n2-standard-8")
    with pytest.raises(ProvisionFailed, match=f"{victim} is SUSPENDED \\(terminated\\)"):
        compute.wait_active(plan, poll_s=0.01)
    done = compute.apply(plan, poll_s=0.01)
    assert done == {plan.nodes[0].node_id: "exists", victim: "re-created (SUSPENDED)"}
    assert [c.name for c in fake.requests("instances.delete")] == [victim]
    assert compute.get(victim).state == "ACTIVE" and fake.instances()[1].id != first_id


def test_an_insert_that_fails_in_its_operation_is_failed_with_the_reason(
    fake: FakeComputeApi, compute: ComputeApi
) -> None:
    plan = _vms(_plan())
    fake.fail_next_insert("the zone does not have enough resources (n2-standard-8)")
    with pytest.raises(ProvisionFailed) as e:
        compute.apply(plan, poll_s=0.01)
    first = plan.nodes[0].node_id
    assert str(e.value) == (
        f"{first} FAILED: the zone does not have enough resources (n2-standard-8)"
    )
    # a later apply (this process knows the failure; another would see no instance) tries again
    done = compute.apply(plan, poll_s=0.01)
    assert done[first] == "re-created (FAILED)" and len(fake.instances()) == 2


def test_delete_and_list_cover_the_runs_vms(fake: FakeComputeApi, compute: ComputeApi) -> None:
    plan = _vms(_plan())
    other = _vms(_plan("provision.name=other"))
    compute.apply(plan, poll_s=0.01)
    compute.apply(other, wait=False)
    listed = compute.list_run(plan.name)
    assert [s.node_id for s in listed] == [n.node_id for n in plan.nodes]
    assert {(s.state, s.machine_type, s.labels["rlx-pool"]) for s in listed} == {
        ("ACTIVE", "n2-standard-8", "verifier")
    }
    assert len(compute.list_run()) == 4 and compute.list_run("nope") == []
    ids = [n.node_id for n in plan.nodes]
    assert compute.delete(ids) == ids
    assert [vm.name for vm in fake.instances()] == [n.node_id for n in other.nodes]
    assert compute.delete(ids) == []
    assert {s.state for s in compute.states(plan).values()} == {"MISSING"}


def test_an_api_error_is_one_line_naming_what_was_being_done(
    fake: FakeComputeApi, compute: ComputeApi
) -> None:
    fake.fail_next("instances.list", 403, "Required 'compute.instances.list' permission")
    with pytest.raises(PermissionDenied) as e:
        compute.list_run()
    text = str(e.value)
    assert text.startswith("listing the instances of projects/proj/zones/us-east5-a: ")
    assert "compute.instances.list" in text and "Running on TPUs, Permissions" in text
    assert "\n" not in text


@pytest.fixture
def tpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTpuApi]:
    with FakeTpuApi(activate_after=1) as api:
        monkeypatch.setenv("RLX_TPU_API_ENDPOINT", api.address)
        yield api


def test_a_mixed_plan_goes_to_both_apis(tpu: FakeTpuApi, fake: FakeComputeApi) -> None:
    plan = _plan('provision.verifier.capacity="spot"')
    ids = [n.node_id for n in plan.nodes]
    name = plan.name
    assert ids == [f"{name}-{p}" for p in ("trainer-0", "inference-0", "inference-1")] + [
        f"{name}-verifier-{i}" for i in range(2)
    ]
    with GcpApi.connect(plan) as api:
        assert api.apply(plan, poll_s=0.01) == dict.fromkeys(ids, "created")
        assert [r.queued_resource_id for r in tpu.requests("CreateQueuedResource")] == ids[:3]
        assert [c.body.name for c in fake.requests("instances.insert") if c.body] == ids[3:]
        assert [api.hosts(n) for n in ids] == [["127.0.0.1"]] * 5
        listed = api.list_run(name)
        assert [(s.node_id, s.accelerator_type or s.machine_type) for s in listed] == sorted(
            zip(ids, ["v5p-8"] * 3 + ["n2-standard-8"] * 2, strict=True)
        )
        fake.set_status(ids[4], "TERMINATED")
        tpu.set_state(ids[1], "SUSPENDED")
        states = api.states(plan)
        assert [states[i].state for i in ids] == [
            "ACTIVE",
            "SUSPENDED",
            "ACTIVE",
            "ACTIVE",
            "SUSPENDED",
        ]
        done = api.apply(plan, poll_s=0.01)
        assert [done[i] for i in ids] == [
            "exists",
            "re-created (SUSPENDED)",
            "exists",
            "exists",
            "re-created (SUSPENDED)",
        ]
        assert api.delete(ids) == ids
    assert tpu.queued_resources() == [] and fake.instances() == []


def test_a_plan_of_tpu_slices_never_calls_compute_engine(
    tpu: FakeTpuApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _forbid_credentials(monkeypatch)  # as a Compute Engine client would look them up
    monkeypatch.delenv("RLX_COMPUTE_API_ENDPOINT", raising=False)
    plan = _plan(
        "provision.verifier.machine_type=",
        'provision.verifier.colocate="inference"',
        'provision.paramserver.colocate="inference"',
    )
    assert not any(n.is_vm for n in plan.nodes)
    with GcpApi.connect(plan) as api:
        assert api.compute is None and api.noun == "queued resources"
        api.apply(plan, poll_s=0.01)
        assert [s.node_id for s in api.list_run(plan.name)] == sorted(n.node_id for n in plan.nodes)
