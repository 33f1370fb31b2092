"""Test-only helpers: a fake GitHub REST server, fake scorers and shared pytest fixtures."""

from fakegithub.server import APP_LOGIN, FakeGitHub, fake_sha  # noqa: F401
