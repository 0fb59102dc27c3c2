"""`rlx up --provider gcp-tpu` end to end against the fake Cloud TPU v2 API and the fake Compute
Engine API (the verifier pool is a machine type: a VM): provisioning, the nodes' startup scripts,
a preemption, `rlx resume` re-provisioning, `rlx provision delete`.

This machine plays the TPU VMs and the CPU VM: when a node of the TPU fake turns READY, or an
instance of the Compute fake RUNNING, its startup script (the one the provider put in its
metadata) runs here under bash, with its home in a temporary
directory, `gcloud` a stand-in that answers only the `secrets versions access` call the script
makes (Secret Manager cannot run here), and rlx already installed (so the script skips pip). When
a node is preempted (a VM: stopped), its processes get SIGTERM, as on a VM. The run directory is in
gcp-storage-emulator, as gs://. The final params must equal a local run's of the same config.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from up_helpers import CLI, STEPS, small_sets, steps_done

from rlx_core.config import to_toml
from rlx_core.rpc.auth import create_token_file
from rlx_core.storage import open_storage
from rlx_data import DEMO_TASK, base_model_dir, demo_config, write_addition_jsonl
from rlx_testing.fake_compute import FakeComputeApi
from rlx_testing.fake_tpu import FakeTpuApi

# the --set values of test_up_resume's (1, 1) case, whose clean run this test compares with:
# lag 1, so the preempted trainer comes back from a gs:// checkpoint with the past version π_old
# of its first batch needs
RESUME_CASE = (
    "staleness.reload=1",
    "staleness.accept=1",
    "staleness.lag=1",
    "dynamic_sampling.enabled=false",
)
SECRET = "rlx-test-token"
PROJECT = "test-project"


def _free_base_port(n: int = 8) -> int:
    """A port p with p .. p+n-1 all free on 127.0.0.1."""
    for base in range(41000, 60000, 97):
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")


class Nodes:
    """Boots the fakes' READY nodes and RUNNING instances here by running their startup scripts;
    SIGTERMs the processes of those that are preempted, stopped or deleted."""

    def __init__(
        self, api: FakeTpuApi, compute: FakeComputeApi, root: Path, env: dict[str, str]
    ) -> None:
        self.api, self.compute, self.root, self.env = api, compute, root, env
        self.procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self.boots: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            live: dict[tuple[str, int], str] = {}  # (name, id) -> startup script
            for node in self.api.nodes():
                if node.state.name == "READY":
                    live[(node.name, node.id)] = node.metadata["startup-script"]
            for vm in self.compute.instances():
                if vm.status == "RUNNING":
                    (script,) = [i.value for i in vm.metadata.items if i.key == "startup-script"]
                    live[(vm.name, vm.id)] = script
            for key, script in live.items():
                if key not in self.procs:
                    self._boot(key[0].rsplit("/", 1)[-1], script)
                    self.procs[key] = self._last
            for key, proc in list(self.procs.items()):
                if key not in live and proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)  # the VM is going away

    def _boot(self, node_id: str, text: str) -> None:
        home = self.root / f"{node_id}-{len(self.boots)}"
        home.mkdir(parents=True)
        script = home / "startup-script"
        script.write_text(text)
        env = {
            **self.env,
            "RLX_HOME": str(home),
            "RLX_PYTHON": sys.executable,
            "RLX_WORKER": "0",
            "RLX_BIND": "127.0.0.1",
            "RLX_COORDINATOR": "",  # one trainer process (no Cloud TPU for JAX to detect)
        }
        self._last = subprocess.Popen(
            ["bash", str(script)], env=env, start_new_session=True, stdin=subprocess.DEVNULL
        )
        self.boots.append(node_id)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def logs(self) -> str:
        out = []
        for path in sorted(self.root.rglob("*.log")):
            out.append(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)


def _gcloud(bin_dir: Path, token: Path) -> None:
    """A `gcloud` that answers the one call of the startup script: the token from the secret."""
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    expected = f"secrets versions access latest --secret={SECRET} --project={PROJECT}"
    gcloud.write_text(
        "#!/bin/bash\n"
        f'if [ "$*" != "{expected}" ]; then echo "unexpected gcloud $*" >&2; exit 2; fi\n'
        f"cat {token}\n"
    )
    gcloud.chmod(0o755)


def _config(tmp_path: Path, run_dir: str, token: Path) -> Path:
    data = tmp_path / "data"
    write_addition_jsonl(data, DEMO_TASK)
    text = to_toml(demo_config(run_dir, data, base_model_dir()), comments=False)
    text += f"""
[provision]
project = "{PROJECT}"
zone = "us-east5-a"
token_secret = "{SECRET}"
token_file = "{token}"
base_port = {_free_base_port()}
poll_s = 0.5
# not the defaults (0 and fsdp 0), so the test sees them written; the same one device here
inference_tensor_parallel = 1
trainer_mesh = [1, 1, 1]

[provision.trainer]
accelerator_type = "v5p-8"

[provision.inference]
accelerator_type = "v5p-8"
capacity = "spot"

[provision.verifier]
machine_type = "e2-standard-4"
capacity = "spot"
"""
    path = tmp_path / "tpu.toml"
    path.write_text(text)
    return path


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_up_on_tpu_preempted_resumed_and_deleted(
    tmp_path: Path,
    new_root: Any,
    gcs_env: str,
    clean_run: Callable[[tuple[str, ...]], Path],
) -> None:
    token = tmp_path / "token"
    create_token_file(token)
    _gcloud(tmp_path / "bin", token)
    run = new_root("gcs", "runs/tpu")
    config = _config(tmp_path, run, token)
    work = tmp_path / "work"

    # the reference: the demo run with every service a local process, at (1, 1) lag 1 without
    # dynamic sampling, as test_up_resume's first case (which shares it)
    clean = clean_run(RESUME_CASE)
    reference = json.loads((clean / "summary.json").read_text())

    with FakeTpuApi(activate_after=2) as api, FakeComputeApi(running_after=2) as compute:
        env = {
            **os.environ,
            "RLX_TPU_API_ENDPOINT": api.address,
            "RLX_COMPUTE_API_ENDPOINT": compute.endpoint,
            "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
            # the trainer's Orbax checkpoints go through TensorStore's gcs driver (DESIGN §10)
            "TENSORSTORE_GCS_HTTP_URL": gcs_env,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "x",
        }
        nodes = Nodes(api, compute, tmp_path / "nodes", env)
        try:
            up = subprocess.Popen(
                [
                    *CLI,
                    *("up", str(config), "--provider", "gcp-tpu", "--work-dir", str(work)),
                    *small_sets(),
                    *(x for s in RESUME_CASE for x in ("--set", s)),
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 300
            while steps_done(work) < 2:
                assert up.poll() is None, up.communicate()[0].decode() + nodes.logs()
                assert time.monotonic() < deadline, nodes.logs()
                time.sleep(0.05)
            status = subprocess.run(
                [*CLI, "status", run, "--work-dir", str(work), "--json"],
                env=env,
                capture_output=True,
                timeout=60,
                check=True,
            )
            services = json.loads(status.stdout)["services"]
            assert sorted(services) == ["inference-0", "paramserver-0", "trainer", "verifier-0"]
            assert all(
                s["alive"] and s["address"].startswith("127.0.0.1:") for s in services.values()
            )
            # the inference slice's hosts form one mesh: its tensor axis and the trainer's mesh
            # as [provision] says
            written = json.loads(open_storage(run).get("nodes/inference-0.json"))
            assert tomllib.loads(written["config"])["engine"]["tensor_parallel"] == 1
            written = json.loads(open_storage(run).get("nodes/trainer.json"))
            mesh = tomllib.loads(written["config"])["mesh"]
            assert mesh == {"data": 1, "fsdp": 1, "tensor": 1}
            creates = api.requests("CreateQueuedResource")
            assert [c.queued_resource_id.rsplit("-", 2)[-2:] for c in creates] == [
                ["trainer", "0"],
                ["inference", "0"],
            ]
            inference = creates[1].queued_resource_id
            (insert,) = compute.requests("instances.insert")
            assert insert.body is not None
            verifier = insert.body.name
            assert verifier.endswith("-verifier-0")
            assert insert.body.scheduling.provisioning_model == "SPOT"
            # the spot inference node and the spot verifier VM are preempted: the controller
            # snapshots and stops
            api.set_state(inference, "SUSPENDED")
            compute.set_status(verifier, "TERMINATED")
            out = up.communicate(timeout=300)[0].decode(errors="replace")
            assert up.returncode == 0, out + nodes.logs()
            stopped = re.search(r"rlx: stopped at step (\d+)", out)
            assert stopped is not None and int(stopped.group(1)) < STEPS, out
            assert f"continue with: rlx resume {run}" in out
            assert "preempted" in (work / "controller.log").read_text()

            # resume: the preempted nodes are deleted and created again; the trainer's is kept
            resumed = subprocess.run(
                [*CLI, "resume", run, "--work-dir", str(work)],
                env=env,
                capture_output=True,
                timeout=400,
                check=False,
            )
            text = resumed.stdout.decode(errors="replace")
            assert resumed.returncode == 0, text + resumed.stderr.decode() + nodes.logs()
            assert f"finished at step {STEPS}" in text
            assert "TPU nodes          still up" in text
            deletes = [d.name.rsplit("/", 1)[-1] for d in api.requests("DeleteQueuedResource")]
            assert deletes == [inference]
            assert len(api.requests("CreateQueuedResource")) == 3
            assert [c.name for c in compute.requests("instances.delete")] == [verifier]
            assert len(compute.requests("instances.insert")) == 2
            assert nodes.boots.count(inference) == 2 and nodes.boots.count(verifier) == 2
            assert len(nodes.boots) == 5
            summary = json.loads(open_storage(run).get("summary.json"))
            assert summary["params_hash"] == reference["params_hash"]
            # the nodes never had the token in their metadata: they read it from the secret
            for c in api.requests("CreateQueuedResource"):
                script = c.queued_resource.tpu.node_spec[0].node.metadata["startup-script"]
                assert token.read_text().strip() not in script
            for i in compute.requests("instances.insert"):
                assert i.body is not None
                assert token.read_text().strip() not in i.body.metadata.items[0].value

            gone = subprocess.run(
                [*CLI, "provision", "delete", run, "--yes"],
                env=env,
                capture_output=True,
                timeout=120,
                check=False,
            )
            assert gone.returncode == 0 and gone.stdout.count(b": deleted") == 3, gone
            assert api.queued_resources() == [] and compute.instances() == []
        finally:
            nodes.stop()
