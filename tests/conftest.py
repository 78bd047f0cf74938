"""Shared test settings."""
import pytest


@pytest.fixture(autouse=True)
def _whole_lines(monkeypatch):
    """Text output fits COLUMNS when it is set (accounting.safe_io.terminal_width); the tests
    parse whole lines, as a file or a pipe gets them, whatever the shell exports."""
    monkeypatch.delenv("COLUMNS", raising=False)
