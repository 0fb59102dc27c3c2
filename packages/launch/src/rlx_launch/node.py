"""The node agent: what a TPU VM's startup script hands over to (rlx_launch.provision).

    python -m rlx_launch.node --run-dir gs://bucket/run --node NODE_ID --token-file F \\
        --home /var/lib/rlx [--worker N] --service NAME:KIND:PORT [--service ...]

For each service of the node it waits for `nodes/NAME.json` in the run directory, which the
controller writes once every address of the run is known (`{"config": TOML text, "args": [...]}`),
then starts `python -m rlx_KIND --host BIND --port PORT --config ...` with the run token
(RLX_TOKEN_FILE), its output in HOME/logs/NAME.log. It restarts a service that exits, and one
whose config the controller rewrites (a resumed run whose re-provisioned nodes have new
addresses). On SIGTERM (the VM is preempted or under maintenance) it writes
`events/NODE-wN.json` into the run directory, which tells the controller to snapshot and stop,
then stops the services.

Services run on worker 0 of a slice only, except the trainer and inference, which run on every
worker: their processes form one JAX mesh over the slice's hosts (RLX_COORDINATOR, see
rlx_core.distributed and rlx_model.distributed). Colocated paramservers and verifiers stay on
worker 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rlx_core.errors import NotFound, RlxError
from rlx_core.storage import Storage, open_storage
from rlx_launch.local import KINDS, service_command
from rlx_launch.provision import MESH_POOLS

__all__ = [
    "CONFIG_PREFIX",
    "EVENTS_PREFIX",
    "EXITS_PREFIX",
    "config_key",
    "event_key",
    "exit_key",
    "main",
]

CONFIG_PREFIX = "nodes/"  # the controller's configs of the services, one JSON file each
EVENTS_PREFIX = "events/"  # what the agents report (a SIGTERM), one JSON file each
EXITS_PREFIX = "exits/"  # a service's last unexpected exit (code, the end of its log)
RESTART_DELAY_S = 5.0


def config_key(service: str) -> str:
    return f"{CONFIG_PREFIX}{service}.json"


def event_key(node: str, worker: int) -> str:
    return f"{EVENTS_PREFIX}{node}-w{worker}.json"


def exit_key(service: str) -> str:
    return f"{EXITS_PREFIX}{service}.json"


@dataclass
class _Service:
    name: str
    kind: str
    port: int
    config: bytes | None = None  # the JSON of nodes/NAME.json it runs with
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    starts: int = 0
    exited_at: float = 0.0


class Agent:
    def __init__(
        self,
        storage: Storage,
        node: str,
        worker: int,
        token_file: str,
        home: Path,
        services: list[_Service],
        *,
        bind: str,
        poll_s: float,
        python: str = sys.executable,
    ) -> None:
        self.storage = storage
        self.node = node
        self.worker = worker
        self.token_file = token_file
        self.home = home
        self.services = services
        self.bind = bind
        self.poll_s = poll_s
        self.python = python
        # set by the signal handler: a plain flag (an Event's lock could be held by the very
        # frame the handler interrupts)
        self.stopping = False
        self.reason = ""
        (home / "logs").mkdir(parents=True, exist_ok=True)
        (home / "services").mkdir(parents=True, exist_ok=True)

    def say(self, message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} rlx node {self.node} w{self.worker}: {message}")
        sys.stdout.flush()

    def _start(self, s: _Service, config: bytes) -> None:
        spec = json.loads(config)
        conf_path = self.home / "services" / f"{s.name}.toml"
        args = [str(a) for a in spec.get("args", [])]
        if spec.get("config"):
            conf_path.write_text(spec["config"])
            args = ["--config", str(conf_path), *args]
        log = open(self.home / "logs" / f"{s.name}.log", "ab")  # noqa: SIM115 - the child's
        log.write(f"\n=== start {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n".encode())
        log.flush()
        cmd = service_command(self.python, s.kind, s.port, self.token_file, args, host=self.bind)
        env = {**os.environ, "RLX_TOKEN_FILE": self.token_file, "PYTHONUNBUFFERED": "1"}
        s.proc = subprocess.Popen(
            cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        s.log, s.config = log, config
        s.starts += 1
        self.say(f"started {s.name} on {self.bind}:{s.port} (pid {s.proc.pid}, start {s.starts})")

    def _stop_one(self, s: _Service, grace_s: float = 20.0) -> None:
        if s.proc is not None and s.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(s.proc.pid, signal.SIGTERM)
            try:
                s.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait()
        if s.log is not None:
            s.log.close()
        s.proc, s.log = None, None

    def _read_config(self, s: _Service) -> bytes | None:
        try:  # one GET per service and poll (no exists() first: it would be a second request)
            return self.storage.get(config_key(s.name))
        except NotFound:
            return None  # not written yet
        except RlxError as e:
            self.say(f"cannot read {config_key(s.name)}: {e}")
            return None

    def run(self) -> int:
        try:
            self._loop()
        finally:  # whatever ends the loop, no service outlives its agent
            if self.reason == "SIGTERM":
                self._report_sigterm()
            self.say(f"stopping ({self.reason or 'error'})")
            for s in self.services:
                self._stop_one(s)
        return 0

    def _loop(self) -> None:
        waiting_since = time.monotonic()
        said = 0.0
        while not self.stopping:
            for s in self.services:
                config = self._read_config(s)
                if config is None:
                    continue
                if s.proc is not None and config != s.config:
                    self.say(f"the controller changed the config of {s.name}: restarting it")
                    self._stop_one(s)
                if s.proc is not None and s.proc.poll() is not None:
                    code = s.proc.returncode
                    self._stop_one(s)
                    s.exited_at = time.monotonic()
                    self._report_exit(s, code)
                    self.say(f"{s.name} exited with code {code}; restarting it")
                if s.proc is None and time.monotonic() - s.exited_at >= RESTART_DELAY_S:
                    self._start(s, config)
            missing = [s.name for s in self.services if s.proc is None and s.config is None]
            now = time.monotonic()
            if missing and now - said >= 30:
                said = now
                self.say(
                    f"waiting for the controller's configs of {', '.join(missing)} "
                    f"({now - waiting_since:.0f} s)"
                )
            end = time.monotonic() + self.poll_s
            while not self.stopping and time.monotonic() < end:
                time.sleep(min(0.1, self.poll_s))

    def _report_exit(self, s: _Service, code: int) -> None:
        """Tell the controller why a service is not answering (it shows it while it waits)."""
        try:  # the log's end only: it grows with every restart
            with open(self.home / "logs" / f"{s.name}.log", "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
                lines = f.read().decode(errors="replace")
        except OSError:
            lines = ""
        report = {
            "node": self.node,
            "service": s.name,
            "code": code,
            "starts": s.starts,
            "tail": "\n".join(lines.strip().splitlines()[-15:]),
            "unix": time.time(),
        }
        try:
            self.storage.put(exit_key(s.name), json.dumps(report).encode())
        except RlxError as e:
            self.say(f"could not report the exit of {s.name}: {e}")

    def on_sigterm(self) -> None:
        """The VM is going away (a signal handler: it only sets flags; the loop, once out,
        tells the controller, then stops the services)."""
        self.reason = "SIGTERM"
        self.stopping = True

    def _report_sigterm(self) -> None:
        event = {
            "node": self.node,
            "worker": self.worker,
            "host": socket.gethostname(),
            "signal": "SIGTERM",
            "unix": time.time(),
        }
        try:
            self.storage.put(event_key(self.node, self.worker), json.dumps(event).encode())
        except RlxError as e:
            self.say(f"could not report the SIGTERM to the controller: {e}")


def _service(text: str) -> _Service:
    try:
        name, kind, port = text.split(":")
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        return _Service(name, kind, int(port))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--service {text!r}: NAME:KIND:PORT ({e})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlx_launch.node", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--run-dir", required=True, help="the run directory (gs://, s3://, path)")
    parser.add_argument("--node", required=True, help="this node's id")
    parser.add_argument("--worker", type=int, default=0, help="this host's worker number")
    parser.add_argument("--token-file", required=True, help="the run token")
    parser.add_argument("--home", type=Path, required=True, help="logs and configs go here")
    parser.add_argument("--bind", default="0.0.0.0", help="address the services listen on")
    parser.add_argument("--poll", type=float, default=10.0, help="seconds between config checks")
    parser.add_argument(
        "--service", type=_service, action="append", default=[], help="NAME:KIND:PORT"
    )
    args = parser.parse_args(argv)
    services = args.service
    if args.worker > 0:
        services = [s for s in services if s.kind in MESH_POOLS]
    agent = Agent(
        open_storage(args.run_dir),
        args.node,
        args.worker,
        args.token_file,
        args.home,
        services,
        bind=args.bind,
        poll_s=args.poll,
    )
    signal.signal(signal.SIGTERM, lambda _s, _f: agent.on_sigterm())
    signal.signal(signal.SIGINT, lambda _s, _f: agent.on_sigterm())
    agent.say(f"services: {', '.join(f'{s.name}:{s.port}' for s in services) or 'none'}")
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
