"""The workspace's shared pytest fixtures (real object storage on 127.0.0.1, a token file):
rlx_testing.plugin."""

pytest_plugins = ["rlx_testing.plugin"]
