"""Fixtures shared by the fault-injection tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip fsync in this process, for tests about file contents rather than durability
    (every shutdown fsyncs several checkpoint files and their directory, which dominates
    the runtime of a table of small tests). Writer subprocesses are not affected."""
    monkeypatch.setattr(os, "fsync", lambda _fd: None)
