"""The workspace's shared pytest fixtures (real object storage on 127.0.0.1): rlx_core.testing."""

pytest_plugins = ["rlx_core.testing"]
