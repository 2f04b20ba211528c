"""Fixtures for the command-line tests: an S3 server on 127.0.0.1 (`tests/s3_server.py`)."""

from __future__ import annotations

from tests.s3_server import aws_env, s3, s3_endpoint

__all__ = ["aws_env", "s3", "s3_endpoint"]
