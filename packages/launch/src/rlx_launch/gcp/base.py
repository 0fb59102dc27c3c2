"""What the Cloud TPU side (`gcp_tpu.TpuApi`, queued resources) and the Compute Engine side
(`gcp_compute.ComputeApi`, VM instances) of the gcp-tpu provider share: the node states both
report, `apply` / `wait_active` / `states` / `delete` over a plan in terms of the few calls each
makes (`get`, `create`, `delete_one`, `hosts`, `list_run`), the progress lines, and the wrapping
of the APIs' errors.

State names are the Cloud TPU queued resources' (`QueuedResourceState.State`), which Compute
Engine statuses are mapped onto: ACTIVE is up; FAILED, SUSPENDING and SUSPENDED (preempted,
stopped) make `apply` delete and re-create the node; MISSING is no node at all; anything else is
on its way.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from rlx_core.errors import Cancelled, DeadlineExceeded, PermissionDenied, RlxError

if TYPE_CHECKING:
    from rlx_launch.provision import NodePlan, Plan

__all__ = [
    "GONE_STATES",
    "MISSING",
    "NodeApi",
    "NodeState",
    "ProvisionFailed",
    "calling",
    "no_credentials",
    "state_lines",
]

# states of a node that is gone or going: `apply` deletes and re-creates them
GONE_STATES = ("FAILED", "SUSPENDED", "SUSPENDING")
MISSING = "MISSING"

Progress = Callable[[dict[str, "NodeState"], float], None]


class ProvisionFailed(RlxError):
    """A node ended FAILED (the API's reason in the message)."""


@dataclass(frozen=True)
class NodeState:
    """What the API says of one node (a queued resource, or a VM instance)."""

    node_id: str
    state: str  # a QueuedResourceState.State name (a VM's status mapped onto one), or MISSING
    reason: str = ""  # FAILED: the API's error message; SUSPENDED: who suspended it, or why
    labels: Mapping[str, str] | None = None
    accelerator_type: str = ""  # a TPU slice's type
    machine_type: str = ""  # a VM's machine type


class NodeApi(abc.ABC):
    """The nodes of a plan through one API (or several: `gcp.GcpApi`). A context manager that
    closes its clients."""

    # what its nodes are called in messages ("their queued resources stay")
    noun = "queued resources"

    # --- what each API implements ------------------------------------------------------------
    @abc.abstractmethod
    def get(self, node_id: str) -> NodeState:
        """The node's state (MISSING when it does not exist)."""

    @abc.abstractmethod
    def create(self, node: NodePlan, startup: str, service_account: str) -> None:
        """Ask for `node`, with `startup` as its startup script (returns once it is accepted)."""

    @abc.abstractmethod
    def delete_one(self, node_id: str) -> bool:
        """Delete the node and wait until it is gone; False when it did not exist."""

    @abc.abstractmethod
    def hosts(self, node: NodePlan | str) -> builtins.list[str]:
        """The IPs of a node's hosts, worker 0 first."""

    @abc.abstractmethod
    def list_run(self, run: str = "") -> builtins.list[NodeState]:
        """The nodes rlx made in this zone (label rlx-run), of one run if named, by id."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the whole plan ----------------------------------------------------------------------
    def states(self, plan: Plan) -> dict[str, NodeState]:
        """Every planned node's state (MISSING when it does not exist)."""
        return {n.node_id: self.get(n.node_id) for n in plan.nodes}

    def delete(self, node_ids: builtins.list[str]) -> builtins.list[str]:
        """Delete these nodes; return those that existed."""
        return [n for n in node_ids if self.delete_one(n)]

    def apply(
        self,
        plan: Plan,
        *,
        on_progress: Progress | None = None,
        poll_s: float = 10.0,
        timeout_s: float | None = None,
        wait: bool = True,
        cancel: threading.Event | None = None,
    ) -> dict[str, str]:
        """Make the plan's nodes exist and wait until all are ACTIVE.

        Creates the missing ones; deletes and re-creates those FAILED or suspended (preempted);
        leaves the rest. Returns node id -> what was done ("created", "re-created (SUSPENDED)",
        "exists"). ProvisionFailed names a node that ends FAILED while waiting, with the API's
        reason; DeadlineExceeded after `timeout_s`; Cancelled when `cancel` is set. Each node
        gets its startup script (`provision.startup_script`)."""
        from rlx_launch.provision import startup_script

        done: dict[str, str] = {}
        sa = plan.provision.service_account
        for node in plan.nodes:
            st = self.get(node.node_id)
            if st.state == MISSING:
                self.create(node, startup_script(plan, node), sa)
                done[node.node_id] = "created"
            elif st.state in GONE_STATES:
                self.delete_one(node.node_id)
                self.create(node, startup_script(plan, node), sa)
                done[node.node_id] = f"re-created ({st.state})"
            else:
                done[node.node_id] = "exists"
        if wait:
            self.wait_active(
                plan, on_progress=on_progress, poll_s=poll_s, timeout_s=timeout_s, cancel=cancel
            )
        return done

    def wait_active(
        self,
        plan: Plan,
        *,
        on_progress: Progress | None = None,
        poll_s: float = 10.0,
        timeout_s: float | None = None,
        cancel: threading.Event | None = None,
    ) -> dict[str, NodeState]:
        start = time.monotonic()
        cancel = cancel or threading.Event()
        while True:
            states = self.states(plan)
            elapsed = time.monotonic() - start
            if on_progress is not None:
                on_progress(states, elapsed)
            failed = [s for s in states.values() if s.state == "FAILED"]
            if failed:
                raise ProvisionFailed(
                    "; ".join(
                        f"{s.node_id} FAILED: {s.reason or 'no reason given'}" for s in failed
                    )
                )
            gone = [s for s in states.values() if s.state in (*GONE_STATES, MISSING, "DELETING")]
            if gone:
                raise ProvisionFailed(
                    "; ".join(f"{s.node_id} is {s.state} {s.reason}".rstrip() for s in gone)
                    + ": run `rlx provision apply` again"
                )
            if all(s.state == "ACTIVE" for s in states.values()):
                return states
            if timeout_s is not None and elapsed > timeout_s:
                waiting = sorted(f"{s.node_id} {s.state}" for s in states.values())
                raise DeadlineExceeded(
                    f"not ACTIVE after {timeout_s:.0f} s: {', '.join(waiting)}; the {self.noun} "
                    "stay (`rlx provision list`, `rlx provision delete`)"
                )
            if cancel.wait(poll_s):
                raise Cancelled(
                    f"stopped waiting for the nodes; their {self.noun} stay (`rlx provision "
                    "list`, `rlx provision delete`)"
                )


def state_lines(log: Callable[[str], None]) -> Progress:
    """An `on_progress` for `apply` / `wait_active`: one line to `log` per change of the nodes'
    states, and one a minute while nothing changes."""
    last_text = [""]
    last_at = [-60.0]

    def on_progress(states: dict[str, NodeState], elapsed: float) -> None:
        text = ", ".join(
            f"{s.node_id} {s.state}{' ' + s.reason if s.reason else ''}" for s in states.values()
        )
        if text != last_text[0] or elapsed - last_at[0] >= 60:
            last_text[0], last_at[0] = text, elapsed
            log(f"[{elapsed:5.0f} s] {text}")

    return on_progress


@contextlib.contextmanager
def calling(what: str) -> Iterator[None]:
    """An error of the API or of its credentials as an RlxError that says what was being done
    (PermissionDenied pointing at the roles the README lists); a caller's own handling of, say,
    NotFound goes inside."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as gauth

    try:
        yield
    except (gexc.PermissionDenied, gexc.Forbidden) as e:  # gRPC's code, REST's HTTP 403
        raise PermissionDenied(
            f"{what}: {e.message or e} (the roles needed: README, Running on TPUs, Permissions)"
        ) from e
    except (gexc.GoogleAPICallError, gexc.RetryError, gauth.GoogleAuthError) as e:
        raise RlxError(f"{what}: {getattr(e, 'message', None) or e}") from e


def no_credentials(api: str, e: Exception) -> RlxError:
    """The error of a client that cannot start (no Application Default Credentials, mostly)."""
    return RlxError(
        f"cannot reach the {api}: {e}; run `gcloud auth application-default login` (or set "
        "GOOGLE_APPLICATION_CREDENTIALS)"
    )
