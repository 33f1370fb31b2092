"""Test fixtures for the bot: a throwaway git repository with a fake harness and a fake engine.

`make_fake_repo(tmp_path)` builds it; `FakeRepo.branch(...)` makes a "PR" whose engine is faster,
slower, lossy, crashing, hanging, forging or remembering (knobs in knobs.json, see
fake_repo/engine/fake.py). The harness in it is the real server (harness/serve.py: the real protocol,
docs/harness.md) over the fake engine, so everything the bot does with a harness can be tested in
seconds and without a model.
"""

from evalbot.testing.fakerepo import FAKE_PROFILE, FakeRepo, fake_config_toml, make_fake_repo

__all__ = ["FAKE_PROFILE", "FakeRepo", "fake_config_toml", "make_fake_repo"]
