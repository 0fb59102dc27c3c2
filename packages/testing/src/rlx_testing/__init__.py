"""Fixtures and test doubles for rlx's tests (never imported by runtime code)."""

from rlx_testing._version import __version__

__all__ = ["__version__"]
