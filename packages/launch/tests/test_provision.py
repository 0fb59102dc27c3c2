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

from rlx_controller.rundir import RunPaths
from rlx_core import DISTRIBUTIONS
from rlx_core.configs.run import RunConfig, config_hash, loads_run_config
from rlx_core.errors import Cancelled, ConfigError, DeadlineExceeded
from rlx_launch.gcp.tpu import ProvisionFailed, TpuApi
from rlx_launch.node import exit_key
from rlx_launch.provision import make_plan, startup_script
from rlx_launch.tpu_services import TpuRunServices
from rlx_testing.fake_tpu import FakeTpuApi

BASE = """
run_dir = "gs://bucket/runs/Math_Qwen"
[model]
path = "/models/qwen"
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


# the verifier pool on VMs of its own instead of the inference hosts (a [provision.verifier]
# table with a machine_type: its colocate is "", not the default table's "inference")
VM_VERIFIER = ("provision.verifier.machine_type=n2-standard-8",)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (("provision.inference.machine_type=n2-standard-8",), "inference.machine_type"),
        (('provision.verifier.colocate=""',), "verifier.accelerator_type"),
        (('provision.verifier.colocate="paramserver"',), "verifier.colocate"),
        (('provision.verifier.colocate="inferenc"',), "did you mean 'inference'"),
        (("provision.inference.count=2",), "provision.inference.count"),
        ((*VM_VERIFIER, "provision.verifier.count=3"), "provision.verifier.count"),
        (("provision.trainer.count=2",), "trainer.count"),
        (('provision.inference.capacity="reserved"',), "reservation"),
        (('provision.name="Bad_Name"',), "name"),
        (('provision.inference.accelerator_type="tpu"',), "accelerator_type"),
        (("provision.verifier.machine_type=v5p-8",), "verifier.machine_type"),
        ((*VM_VERIFIER, 'provision.verifier.runtime_version="x"'), "verifier.runtime_version"),
        (("provision.inference.disk_gb=200",), "inference.disk_gb"),
        (('provision.paramserver.image="projects/p/global/images/i"',), "paramserver.image"),
        ((*VM_VERIFIER, "provision.verifier.disk_gb=5"), "verifier.disk_gb"),
        (
            (
                'provision.trainer.accelerator_type=""',
                "provision.trainer.machine_type=n2-standard-8",
            ),
            "trainer.machine_type",
        ),
        (('run_dir="/local/run"',), "run_dir"),
    ],
)
def test_bad_provision_fields_are_named(overrides: tuple[str, ...], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        _cfg(overrides=overrides)
    assert field in str(e.value)


def test_machine_type_pools_are_vms_and_may_host_other_pools() -> None:
    plan = make_plan(
        _cfg(
            overrides=(
                *VM_VERIFIER,
                'provision.verifier.capacity="spot"',
                "provision.verifier.disk_gb=50",
                'provision.paramserver.colocate="verifier"',
            )
        )
    )
    name = plan.name
    ids = [n.node_id for n in plan.nodes]
    assert ids == [f"{name}-trainer-0"] + [f"{name}-inference-{i}" for i in range(3)] + [
        f"{name}-verifier-{i}" for i in range(2)
    ]
    vm = plan.node(f"{name}-verifier-1")
    assert vm.is_vm and not plan.nodes[0].is_vm
    assert (vm.machine_type, vm.accelerator_type, vm.runtime_version) == ("n2-standard-8", "", "")
    assert (vm.image, vm.disk_gb) == ("projects/debian-cloud/global/images/family/debian-12", 50)
    assert (vm.capacity, vm.network) == ("spot", "default")
    assert vm.labels == {"team": "rl", "rlx-run": name, "rlx-pool": "verifier", "rlx-index": "1"}
    # the paramservers run on the verifiers' VMs, replica i on VM i
    assert [s.name for s in vm.services] == ["verifier-1", "paramserver-1"]
    assert [s.name for s in plan.nodes[1].services] == ["inference-0"]
    tpu = plan.nodes[1]
    assert (tpu.machine_type, tpu.image, tpu.disk_gb) == ("", "", 0)
    ports = [s.port for n in plan.nodes for s in n.services]
    assert len(set(ports)) == len(ports) == 8
    # the defaults: 100 GB of Debian 12
    assert make_plan(_cfg(overrides=VM_VERIFIER)).nodes[-1].disk_gb == 100


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
    # every host of a trainer or inference slice is one process of one mesh; not on a CPU VM
    mesh = 'RLX_COORDINATOR="${RLX_COORDINATOR-auto}"'
    assert mesh in script and mesh in startup_script(plan, plan.nodes[0])
    vm_plan = make_plan(_cfg(overrides=VM_VERIFIER))
    vm = next(n for n in vm_plan.nodes if n.is_vm)
    assert "RLX_COORDINATOR" not in startup_script(vm_plan, vm)
    assert "agent-worker-number" in script  # a slice's hosts ask the metadata server
    assert "venv" not in script and "apt-get" not in script  # a TPU VM image has pip
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def test_a_vms_startup_script_makes_a_venv_installs_what_debian_lacks_and_starts_the_agent(
    tmp_path: Path,
) -> None:
    """The script of a verifier VM, run under bash with Debian's tools as stubs that log their
    arguments: `python3 -m venv` fails until python3-venv is installed (as on a plain Debian),
    bwrap is missing, and the venv's python installs rlx and plays the agent."""
    plan = make_plan(_cfg(overrides=VM_VERIFIER))
    node = plan.nodes[-1]
    script = startup_script(plan, node)
    assert f"VM n2-standard-8, {node.image}" in script and "agent-worker-number" not in script
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)

    log, home, bin_dir = tmp_path / "calls.log", tmp_path / "home", tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("mkdir", "chmod", "date", "mv", "cat", "touch"):  # no bwrap on this PATH
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    venv_python = f'echo "venv-python $*" >>{log}\n[ "$1" != -c ]  # rlx is not installed'
    _stub(
        bin_dir / "python3",
        f'echo "python3 $*" >>{log}\n'
        f"[ -f {tmp_path}/venv-ok ] || exit 1  # ensurepip is not available\n"
        'dir="${@: -1}"; mkdir -p "$dir/bin"\n'
        f"cat >\"$dir/bin/python\" <<'EOF'\n#!/bin/bash\n{venv_python}\nEOF\n"
        'chmod +x "$dir/bin/python"; touch "$dir/bin/pip"; chmod +x "$dir/bin/pip"',
    )
    _stub(
        bin_dir / "apt-get",
        f'echo "apt-get $*" >>{log}\n[[ "$*" != *python3-venv* ]] || touch {tmp_path}/venv-ok',
    )
    _stub(bin_dir / "gcloud", f'echo "gcloud $*" >>{log}\necho the-token')
    env = {"PATH": str(bin_dir), "RLX_HOME": str(home)}
    bash = subprocess.check_output(["which", "bash"], text=True).strip()
    subprocess.run([bash, "-c", script], env=env, check=True)
    calls = log.read_text().splitlines()
    port = node.services[0].port
    assert calls == [
        f"python3 -m venv --clear {home}/venv",  # fails: no python3-venv
        "apt-get -o DPkg::Lock::Timeout=600 update -qq",
        "apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv",
        f"python3 -m venv --clear {home}/venv",
        calls[4],  # the check of rlx's version: not installed (no apt for bubblewrap: a wheel)
        "venv-python -m pip install --quiet " + " ".join(f"{d}==0.1.0" for d in DISTRIBUTIONS),
        "gcloud secrets versions access latest --secret=rlx-token --project=proj",
        f"venv-python -m rlx_launch.node --run-dir gs://bucket/runs/Math_Qwen --node "
        f"{node.node_id} --worker 0 --token-file {home}/token --home {home} --bind 0.0.0.0 "
        f"--service verifier-1:verifier:{port}",
    ]
    assert calls[4].startswith("venv-python -c import importlib.metadata")
    assert (home / "token").read_text() == "the-token\n"
    # a restart keeps the venv: no second one, no python3-venv
    log.unlink()
    subprocess.run([bash, "-c", script], env=env, check=True)
    assert not [c for c in log.read_text().splitlines() if "venv" in c and "python" not in c]
    assert not [c for c in log.read_text().splitlines() if c.startswith("python3")]


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
