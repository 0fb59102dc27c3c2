"""`rlx provision plan / apply / list / delete` against the fake Cloud TPU v2 API (a real gRPC
server on 127.0.0.1, driven through google-cloud-tpu; RLX_TPU_API_ENDPOINT points it there) and,
for machine-type pools, the fake Compute Engine API (HTTP on 127.0.0.1, google-cloud-compute;
RLX_COMPUTE_API_ENDPOINT)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlx_cli.main import app
from rlx_testing.fake_compute import FakeComputeApi
from rlx_testing.fake_tpu import FakeTpuApi

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_example() -> str:
    """The first TOML block of the README's "Running on TPUs" section."""
    section = README.read_text().split("## Running on TPUs", 1)[1]
    match = re.search(r"```toml\n(.*?)```", section, flags=re.S)
    assert match is not None
    return match.group(1)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tpu.toml"
    path.write_text(_readme_example())
    return path


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTpuApi]:
    with FakeTpuApi(activate_after=1) as api:
        monkeypatch.setenv("RLX_TPU_API_ENDPOINT", api.address)
        yield api


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_plan_on_the_readme_example_prints_the_table(config: Path) -> None:
    code, out = _run("provision", "plan", str(config))
    assert code == 0, out
    name = re.search(r"rlx provision: run (math-qwen-[0-9a-f]{4}) in my-project/us-east5-a", out)
    assert name is not None, out
    run = name.group(1)
    for node in ["trainer-0", *(f"inference-{i}" for i in range(4))]:
        assert f"{run}-{node}" in out
    assert "v5p-32" in out and "spot" in out and "5 queued resources" in out
    code, out = _run("provision", "plan", str(config), "--script", f"{run}-inference-1")
    assert code == 0 and "--secret=rlx-run-token --project=my-project" in out
    code, out = _run("provision", "plan", str(config), "--script", "nope")
    assert code == 1 and "no node 'nope' in the plan" in out


def test_plan_names_a_bad_field(config: Path) -> None:
    code, out = _run("provision", "plan", str(config), "--set", "provision.zone=")
    assert code == 1 and "zone: is empty" in out


def test_apply_twice_list_and_delete(config: Path, fake: FakeTpuApi) -> None:
    code, out = _run("provision", "apply", str(config), "--poll", "0.01")
    assert code == 0, out
    assert out.count(": created") == 5 and "5 nodes of run" in out and "ACTIVE" in out
    code, out = _run("provision", "apply", str(config), "--poll", "0.01")
    assert code == 0 and out.count(": exists") == 5, out
    assert len(fake.requests("CreateQueuedResource")) == 5

    fake.set_state(fake.queued_resources()[2].name, "SUSPENDED")
    code, out = _run("provision", "list", str(config))
    assert code == 0 and "SUSPENDED (preempted)" in out and out.count("ACTIVE") == 4, out

    code, out = _run("provision", "delete", str(config))
    assert code == 1 and "pass --yes" in out  # no terminal to ask on: nothing deleted
    assert len(fake.queued_resources()) == 5
    code, out = _run("provision", "delete", str(config), "--yes")
    assert code == 0 and out.count(": deleted") == 5, out
    assert fake.queued_resources() == []
    code, out = _run("provision", "list", str(config))
    assert code == 0 and "rlx: none" in out


def test_apply_stops_on_a_failed_node_with_the_reason(config: Path, fake: FakeTpuApi) -> None:
    fake.activate_after = None  # the nodes wait until the test moves them

    def fail_the_first() -> None:
        deadline = time.monotonic() + 30
        while not fake.queued_resources() and time.monotonic() < deadline:
            time.sleep(0.01)
        fake.set_state(fake.queued_resources()[0].name, "FAILED", error="quota exceeded")

    t = threading.Thread(target=fail_the_first)
    t.start()
    code, out = _run("provision", "apply", str(config), "--poll", "0.05")
    t.join()
    assert code == 1
    assert re.search(r"ProvisionFailed: math-qwen-\w+-trainer-0 FAILED: quota exceeded", out), out

    code, out = _run("provision", "apply", str(config), "--poll", "0.01", "--timeout", "0.1")
    assert code == 1 and "not ACTIVE after" in out, out
    assert "re-created" not in out  # a failed apply prints no summary; the fake saw the delete
    assert len(fake.requests("DeleteQueuedResource")) == 1


def test_an_api_error_is_one_line_naming_what_failed(config: Path, fake: FakeTpuApi) -> None:
    import grpc

    fake.fail_next("ListQueuedResources", grpc.StatusCode.PERMISSION_DENIED, "tpu.list denied")
    code, out = _run("provision", "list", str(config))
    assert code == 1 and "Traceback" not in out
    assert "PermissionDenied: listing the queued resources of projects/my-project" in out
    assert "tpu.list denied" in out and "Running on TPUs" in out
    fake.fail_next("CreateQueuedResource", grpc.StatusCode.RESOURCE_EXHAUSTED, "quota: 0 chips")
    code, out = _run("provision", "apply", str(config), "--poll", "0.01")
    assert code == 1 and re.search(r"creating math-qwen-\w+-trainer-0: quota: 0 chips", out), out


def _readme_vm_example() -> str:
    """The README's first TOML block with its second, the machine-type pools, added."""
    section = README.read_text().split("## Running on TPUs", 1)[1]
    blocks = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    return blocks[0] + blocks[1]


@pytest.fixture
def vm_config(tmp_path: Path) -> Path:
    path = tmp_path / "tpu-vm.toml"
    path.write_text(_readme_vm_example())
    return path


@pytest.fixture
def fake_compute(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeComputeApi]:
    with FakeComputeApi(running_after=1) as api:
        monkeypatch.setenv("RLX_COMPUTE_API_ENDPOINT", api.endpoint)
        yield api


def test_plan_shows_the_vms_of_a_machine_type_pool(vm_config: Path) -> None:
    code, out = _run("provision", "plan", str(vm_config))
    assert code == 0, out
    name = re.search(r"rlx provision: run (math-qwen-[0-9a-f]{4})", out)
    assert name is not None, out
    run = name.group(1)
    assert "5 queued resources and 2 instances" in out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if f"│ {run}-" in line}
    assert sorted(rows) == sorted(
        [f"{run}-trainer-0", *(f"{run}-inference-{i}" for i in range(4))]
        + [f"{run}-verifier-{i}" for i in range(2)]
    )
    vm = rows[f"{run}-verifier-1"]
    assert "n2-standard-16 (VM)" in vm and "spot" in vm and "debian-12, 50 GB" in vm
    assert "verifier-1 (" in vm
    # paramserver replica 1 is colocated on verifier VM 1: the next line of that row
    lines = out.splitlines()
    assert "paramserver-1 (" in lines[lines.index(vm) + 1]
    assert "v5p-8" in rows[f"{run}-inference-1"] and "(VM)" not in rows[f"{run}-inference-1"]
    code, out = _run("provision", "plan", str(vm_config), "--script", f"{run}-verifier-0")
    # a verifier VM makes its venv; its bubblewrap comes with rlx-verifier (a wheel), not apt
    assert code == 0 and "python3 -m venv" in out and "bubblewrap" not in out


def test_apply_list_and_delete_cover_the_vms(
    vm_config: Path, fake: FakeTpuApi, fake_compute: FakeComputeApi
) -> None:
    code, out = _run("provision", "apply", str(vm_config), "--poll", "0.01")
    assert code == 0, out
    assert out.count(": created") == 7 and "7 nodes of run" in out, out
    assert len(fake.requests("CreateQueuedResource")) == 5
    inserts = fake_compute.requests("instances.insert")
    assert [c.body.scheduling.provisioning_model for c in inserts if c.body] == ["SPOT"] * 2
    code, out = _run("provision", "apply", str(vm_config), "--poll", "0.01")
    assert code == 0 and out.count(": exists") == 7, out

    fake_compute.set_status(fake_compute.instances()[0].name, "TERMINATED")
    code, out = _run("provision", "list", str(vm_config))
    assert code == 0 and "SUSPENDED (terminated)" in out and out.count("ACTIVE") == 6, out
    assert out.count("n2-standard-16 (VM)") == 2

    code, out = _run("provision", "delete", str(vm_config), "--yes")
    assert code == 0 and out.count(": deleted") == 7, out
    assert fake.queued_resources() == [] and fake_compute.instances() == []


def test_a_vm_api_error_is_one_line_naming_what_failed(
    vm_config: Path, fake: FakeTpuApi, fake_compute: FakeComputeApi
) -> None:
    fake_compute.fail_next("instances.insert", 403, "Required 'compute.instances.create'")
    code, out = _run("provision", "apply", str(vm_config), "--poll", "0.01")
    assert code == 1 and "Traceback" not in out
    assert re.search(r"PermissionDenied: creating math-qwen-\w+-verifier-0: ", out), out
    assert "compute.instances.create" in out and "Running on TPUs" in out
