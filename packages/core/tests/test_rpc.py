"""gRPC plumbing through a real server on 127.0.0.1: auth, error mapping, deadlines, retries and
chunked tensor transfer."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import ml_dtypes
import numpy as np
import pytest

from rlx_core import errors
from rlx_core.clients import LifecycleClient
from rlx_core.lifecycle import Lifecycle, State
from rlx_core.proto.common.v1.tensor_pb2 import TensorChunk
from rlx_core.rpc import (
    RetryPolicy,
    build_server,
    call,
    call_stream,
    chunks_to_tensors,
    connect,
    resolve_token,
    tensor_to_chunks,
    tensors_to_chunks,
)
from rlx_core.rpc.auth import create_token_file
from rlx_core.serving import LifecycleServicer
from rlx_testing import TOKEN, WRONG_TOKEN

SERVICE = "rlx.test.v1.Test"


class Handlers:
    """A test service built from generic handlers, so it needs no .proto of its own."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.arrays: dict[str, np.ndarray] = {}

    def count(self, name: str) -> int:
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            return self.calls[name]

    def echo(self, requests: Iterator[TensorChunk], context: grpc.ServicerContext):
        self.count("echo")
        for name, array in chunks_to_tensors(requests):
            yield from tensor_to_chunks(name, array, chunk_bytes=256 << 10)

    def send(self, request: TensorChunk, context: grpc.ServicerContext):
        self.count("send")
        for i, chunk in enumerate(tensor_to_chunks(request.name, self.arrays[request.name])):
            if request.dtype == "corrupt" and i == 1:
                chunk.data = bytes([chunk.data[0] ^ 0xFF]) + chunk.data[1:]
            if request.dtype == "truncate" and i == 1:
                return
            yield chunk

    def fail(self, request: TensorChunk, context: grpc.ServicerContext) -> TensorChunk:
        self.count("fail")
        if request.name == "ValueError":
            raise ValueError("boom")
        cls = getattr(errors, request.name)
        if cls is errors.ConfigError:
            raise errors.ConfigError("must be > 0", field="trainer.optim.lr", value=-1)
        raise cls(f"{request.name} raised on purpose")

    def flaky(self, request: TensorChunk, context: grpc.ServicerContext) -> TensorChunk:
        n = self.count("flaky:" + request.name)
        if n <= int(request.offset):
            raise errors.Unavailable(f"flaky attempt {n}")
        return TensorChunk(name=request.name, offset=n)

    def slow(self, request: TensorChunk, context: grpc.ServicerContext) -> TensorChunk:
        self.count("slow")
        time.sleep(request.offset / 1000)
        return request

    def register(self, server: grpc.Server) -> None:
        ser, de = TensorChunk.SerializeToString, TensorChunk.FromString
        kw = {"request_deserializer": de, "response_serializer": ser}
        handlers = {
            "Echo": grpc.stream_stream_rpc_method_handler(self.echo, **kw),
            "Send": grpc.unary_stream_rpc_method_handler(self.send, **kw),
            "Fail": grpc.unary_unary_rpc_method_handler(self.fail, **kw),
            "Flaky": grpc.unary_unary_rpc_method_handler(self.flaky, **kw),
            "Slow": grpc.unary_unary_rpc_method_handler(self.slow, **kw),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Handlers, Lifecycle]]:
    handlers = Handlers()
    lifecycle = Lifecycle("test", "0.0.1")
    server, address = build_server(
        [LifecycleServicer(lifecycle).register, handlers.register], token=TOKEN
    )
    server.start()
    lifecycle.set(State.READY)
    yield address, handlers, lifecycle
    server.stop(0).wait()


def method(channel: grpc.Channel, name: str, kind: str = "unary_unary"):
    factory = getattr(channel, kind)
    return factory(
        f"/{SERVICE}/{name}",
        request_serializer=TensorChunk.SerializeToString,
        response_deserializer=TensorChunk.FromString,
    )


def test_server_binds_loopback_by_default(served) -> None:
    address, _, _ = served
    assert address.startswith("127.0.0.1:") and int(address.rsplit(":", 1)[1]) > 0


# --- auth -------------------------------------------------------------------------------------


def test_call_without_token_is_rejected_before_the_handler_runs(served) -> None:
    address, handlers, _ = served
    before = handlers.calls.get("fail", 0)
    with grpc.insecure_channel(address) as raw, pytest.raises(grpc.RpcError) as info:
        method(raw, "Fail")(TensorChunk(name="NotFound"), timeout=5)
    assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "missing bearer token" in info.value.details()
    assert handlers.calls.get("fail", 0) == before


def test_call_with_wrong_token_is_rejected_before_the_handler_runs(served) -> None:
    address, handlers, _ = served
    before = dict(handlers.calls)
    channel = connect(address, token=WRONG_TOKEN)
    with pytest.raises(errors.Unauthenticated, match="wrong bearer token"):
        call(method(channel, "Fail"), TensorChunk(name="NotFound"), timeout=5)
    # streaming methods are guarded the same way
    with pytest.raises(errors.Unauthenticated):
        list(call_stream(method(channel, "Send", "unary_stream"), TensorChunk(name="x")))
    assert handlers.calls == before
    channel.close()


def test_right_token_reaches_lifecycle(served) -> None:
    address, _, lifecycle = served
    with LifecycleClient(address, token=TOKEN) as client:
        status = client.status()
    assert status.state is State.READY
    assert (status.service, status.version) == ("test", "0.0.1")
    assert status.instance_id == lifecycle.instance_id and status.pid == os.getpid()


# --- error mapping ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["NotFound", "AlreadyExists", "FailedPrecondition", "ResourceExhausted", "Corrupt", "Internal"],
)
def test_service_errors_arrive_as_the_same_class(served, name: str) -> None:
    address, _, _ = served
    with connect(address, token=TOKEN) as channel:
        with pytest.raises(getattr(errors, name), match=f"{name} raised on purpose"):
            call(method(channel, "Fail"), TensorChunk(name=name), timeout=5)


def test_config_error_keeps_its_class_and_field_path(served) -> None:
    address, _, _ = served
    with connect(address, token=TOKEN) as channel:
        with pytest.raises(errors.ConfigError, match=r"trainer\.optim\.lr: must be > 0"):
            call(method(channel, "Fail"), TensorChunk(name="ConfigError"), timeout=5)


def test_unexpected_exception_becomes_internal_with_its_message(served) -> None:
    address, _, _ = served
    with connect(address, token=TOKEN) as channel:
        with pytest.raises(errors.Internal, match="ValueError: boom"):
            call(method(channel, "Fail"), TensorChunk(name="ValueError"), timeout=5)


# --- deadlines and retries --------------------------------------------------------------------


def test_idempotent_call_retries_unavailable(served) -> None:
    address, handlers, _ = served
    fast = RetryPolicy(attempts=5, initial_backoff_s=0.01)
    with connect(address, token=TOKEN) as channel:
        reply = call(
            method(channel, "Flaky"),
            TensorChunk(name="idem", offset=2),
            idempotent=True,
            retry=fast,
            timeout=10,
        )
    assert reply.offset == 3  # failed twice, succeeded on the third attempt
    assert handlers.calls["flaky:idem"] == 3


def test_non_idempotent_call_is_not_retried(served) -> None:
    address, handlers, _ = served
    with connect(address, token=TOKEN) as channel:
        with pytest.raises(errors.Unavailable, match="flaky attempt 1"):
            call(method(channel, "Flaky"), TensorChunk(name="once", offset=2), timeout=10)
    assert handlers.calls["flaky:once"] == 1


def test_retries_give_up_after_the_policy(served) -> None:
    address, handlers, _ = served
    policy = RetryPolicy(attempts=3, initial_backoff_s=0.01)
    with connect(address, token=TOKEN) as channel:
        with pytest.raises(errors.Unavailable, match="flaky attempt 3"):
            call(
                method(channel, "Flaky"),
                TensorChunk(name="never", offset=100),
                idempotent=True,
                retry=policy,
                timeout=10,
            )
    assert handlers.calls["flaky:never"] == 3


def test_deadline_is_enforced(served) -> None:
    address, _, _ = served
    with connect(address, token=TOKEN) as channel, pytest.raises(errors.DeadlineExceeded):
        call(method(channel, "Slow"), TensorChunk(offset=3000), timeout=0.2)


def test_unreachable_server_is_unavailable_naming_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    address = f"127.0.0.1:{port}"
    with connect(address, token=TOKEN) as channel:
        with pytest.raises(errors.Unavailable, match=address):
            call(
                method(channel, "Fail"),
                TensorChunk(name="NotFound"),
                idempotent=True,
                retry=RetryPolicy(attempts=2, initial_backoff_s=0.01),
                timeout=5,
                target=address,
            )


# --- tensors ----------------------------------------------------------------------------------

ARRAYS = {
    "f32": np.random.default_rng(0).standard_normal((37, 129)).astype(np.float32),
    "bf16": np.random.default_rng(1).standard_normal((3, 5, 7)).astype(ml_dtypes.bfloat16),
    "f16_big": np.random.default_rng(2).standard_normal((1000, 1500)).astype(np.float16),
    "fp8": np.linspace(-4, 4, 33).astype(ml_dtypes.float8_e4m3fn),
    "i8": np.arange(-128, 128, dtype=np.int8).reshape(16, 16),
    "i64": np.array([2**62, -(2**62), 0, 7], dtype=np.int64),
    "bool": np.array([[True, False, True]]),
    "scalar": np.array(3.5, dtype=np.float64),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "nan": np.array([np.nan, np.inf, -0.0], dtype=np.float32),
    "strided": np.arange(200, dtype=np.int32).reshape(10, 20)[:, ::3],
}


def assert_bit_equal(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.ascontiguousarray(a).tobytes() == b.tobytes()


def test_tensors_round_trip_through_a_real_stream(served) -> None:
    address, _, _ = served
    with connect(address, token=TOKEN) as channel:
        echo = method(channel, "Echo", "stream_stream")
        back = dict(chunks_to_tensors(call_stream(echo, tensors_to_chunks(ARRAYS), timeout=30)))
    assert list(back) == list(ARRAYS)
    for name, array in ARRAYS.items():
        assert_bit_equal(array, back[name])


def test_chunks_are_at_most_chunk_bytes_and_cover_the_tensor() -> None:
    array = ARRAYS["f16_big"]  # 3,000,000 bytes
    chunks = list(tensor_to_chunks("w", array, chunk_bytes=1 << 20))
    assert [len(c.data) for c in chunks] == [1 << 20, 1 << 20, 3_000_000 - 2 * (1 << 20)]
    assert [c.offset for c in chunks] == [0, 1 << 20, 2 << 20]
    assert chunks[0].dtype == "float16" and list(chunks[0].shape) == [1000, 1500]
    assert chunks[1].dtype == "" and chunks[0].total_bytes == 3_000_000


def test_corrupted_chunk_from_server_raises_corrupt(served) -> None:
    address, handlers, _ = served
    handlers.arrays["w"] = ARRAYS["f16_big"]
    with connect(address, token=TOKEN) as channel:
        send = method(channel, "Send", "unary_stream")
        good = dict(chunks_to_tensors(call_stream(send, TensorChunk(name="w"))))
        assert_bit_equal(ARRAYS["f16_big"], good["w"])
        with pytest.raises(errors.Corrupt, match=r"'w': checksum mismatch .* byte 1048576"):
            list(chunks_to_tensors(call_stream(send, TensorChunk(name="w", dtype="corrupt"))))
        with pytest.raises(errors.Corrupt, match="stream ended inside tensor 'w'"):
            list(chunks_to_tensors(call_stream(send, TensorChunk(name="w", dtype="truncate"))))


def test_lost_or_reordered_chunk_raises_corrupt() -> None:
    chunks = list(tensor_to_chunks("w", ARRAYS["f16_big"], chunk_bytes=1 << 20))
    with pytest.raises(errors.Corrupt, match="lost or reordered"):
        list(chunks_to_tensors([chunks[0], chunks[2], chunks[1]]))
    mixed = [*tensor_to_chunks("a", ARRAYS["f16_big"]), *tensor_to_chunks("b", ARRAYS["f32"])]
    with pytest.raises(errors.Corrupt, match="next chunk belongs to 'b'"):
        list(chunks_to_tensors([mixed[0], *mixed[3:]]))


def test_header_disagreeing_with_shape_raises_corrupt() -> None:
    (chunk,) = tensor_to_chunks("x", ARRAYS["i64"])
    chunk.shape[:] = [5]
    with pytest.raises(errors.Corrupt, match="needs 40"):
        list(chunks_to_tensors([chunk]))


def test_object_arrays_are_refused() -> None:
    with pytest.raises(errors.InvalidArgument, match="cannot be sent"):
        list(tensor_to_chunks("o", np.array(["a", "b"], dtype=object)))


# --- tokens -----------------------------------------------------------------------------------


def test_token_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLX_TOKEN", raising=False)
    monkeypatch.delenv("RLX_TOKEN_FILE", raising=False)
    with pytest.raises(errors.Unauthenticated, match="no rlx token"):
        resolve_token()
    created = resolve_token(create=True)
    path = tmp_path / "home" / "token"
    assert path.read_text().strip() == created and len(created) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert resolve_token() == created  # clients find the server's token
    file = tmp_path / "t"
    file.write_text("from-a-file-0123456789\n")
    monkeypatch.setenv("RLX_TOKEN_FILE", str(file))
    assert resolve_token() == "from-a-file-0123456789"
    monkeypatch.setenv("RLX_TOKEN", "from-the-env-0123456789")
    assert resolve_token() == "from-the-env-0123456789"
    assert resolve_token(token_file=file) == "from-a-file-0123456789"
    assert resolve_token("explicit") == "explicit"


def test_short_or_missing_token_file_is_a_config_error(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc")
    with pytest.raises(errors.ConfigError, match="at least 16"):
        resolve_token(token_file=short)
    with pytest.raises(errors.ConfigError, match="does not exist"):
        resolve_token(token_file=tmp_path / "nope")


@pytest.mark.parametrize("value", ["x", "12345678", "fifteen-chars-1"])
def test_short_rlx_token_is_a_config_error_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLX_TOKEN", value)
    with pytest.raises(errors.ConfigError, match=rf"RLX_TOKEN.* {len(value)} characters.*16"):
        resolve_token()
    monkeypatch.setenv("RLX_TOKEN", "sixteen-chars-01")
    assert resolve_token() == "sixteen-chars-01"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660], ids=lambda m: f"{m:04o}")
def test_token_file_readable_by_others_warns_once_naming_path_and_mode(
    mode: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text("a-token-of-enough-length\n")
    path.chmod(mode)
    with caplog.at_level("WARNING", logger="rlx_core.rpc.auth"):
        assert resolve_token(token_file=path) == "a-token-of-enough-length"
        resolve_token(token_file=path)  # once per file and mode, not on every read
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0] and f"{mode:04o}" in warnings[0]
    assert f"chmod 600 {path}" in warnings[0]


def test_private_and_generated_token_files_do_not_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RLX_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RLX_TOKEN", raising=False)
    monkeypatch.delenv("RLX_TOKEN_FILE", raising=False)
    old = os.umask(0o022)  # the usual umask: rlx's own files must be 0600 regardless
    try:
        with caplog.at_level("WARNING", logger="rlx_core.rpc.auth"):
            resolve_token(create=True)
            create_token_file(tmp_path / "work" / "token")
            private = tmp_path / "private"
            private.write_text("a-token-of-enough-length\n")
            private.chmod(0o600)
            resolve_token(token_file=private)
            resolve_token(token_file=tmp_path / "work" / "token")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "work" / "token").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "home" / "token").stat().st_mode) == 0o600
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
