"""The RlxError <-> gRPC status table."""

import grpc
import pytest

from rlx_core import errors
from rlx_core.errors import ConfigError, RlxError, error_class_for
from rlx_core.rpc.status import status_code_of

ALL = [
    cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, RlxError) and cls is not RlxError
]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_error_round_trips_through_its_status_code(cls: type[RlxError]) -> None:
    code = status_code_of(cls("x"))
    assert isinstance(code, grpc.StatusCode)
    assert error_class_for(code.name, cls.__name__) is cls


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("NOT_FOUND", errors.NotFound),
        ("UNAVAILABLE", errors.Unavailable),
        ("UNAUTHENTICATED", errors.Unauthenticated),
        ("DATA_LOSS", errors.Corrupt),
        ("INVALID_ARGUMENT", errors.InvalidArgument),
        ("UNKNOWN", errors.Internal),
        ("SOMETHING_NEW", errors.Internal),
    ],
)
def test_status_without_rlx_trailer_maps_to_canonical_class(code: str, expected: type) -> None:
    assert error_class_for(code) is expected


def test_trailer_naming_a_class_of_another_code_is_ignored() -> None:
    # a peer claiming NOT_FOUND is a ConfigError must not turn NOT_FOUND into INVALID_ARGUMENT
    assert error_class_for("NOT_FOUND", "ConfigError") is errors.NotFound


def test_config_error_names_field_value_and_allowed() -> None:
    e = ConfigError("must be > 0", field="trainer.optim.lr", value=-1.0, allowed="> 0")
    assert str(e) == "trainer.optim.lr: must be > 0"
    assert (e.field, e.value, e.allowed) == ("trainer.optim.lr", -1.0, "> 0")
    assert isinstance(e, errors.InvalidArgument)
    assert status_code_of(e) is grpc.StatusCode.INVALID_ARGUMENT
