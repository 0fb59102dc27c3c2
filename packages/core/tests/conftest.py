"""The storage suite's object-storage servers and roots (moto's S3 server, gcp-storage-emulator on
127.0.0.1) are the workspace fixtures of rlx_testing.plugin, loaded by the root conftest.py."""
