"""Fixtures for the ingest tests: an S3 server on 127.0.0.1 for the object-store tests
(`tests/s3_server.py`); the Phoenix server is the session's (tests/conftest.py)."""

from __future__ import annotations

from tests.s3_server import aws_env, s3, s3_endpoint

__all__ = ["aws_env", "s3", "s3_endpoint"]
