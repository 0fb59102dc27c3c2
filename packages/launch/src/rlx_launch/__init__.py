"""The services of a run: local processes, or GCP TPU / Compute nodes (no JAX)."""

from rlx_launch._version import __version__

__all__ = ["__version__"]
