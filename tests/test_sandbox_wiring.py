"""The sandbox's settings, the `--no-sandbox` flag, `./dspark` installing bubblewrap, and `evalbot serve`
hardened like the worker (non-dumpable, the webhook secret from a file, none left in os.environ)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from evalbot import cli
from evalbot.errors import ConfigError
from evalbot.measure import sandbox
from evalbot.settings import SandboxSettings, load_settings
from evalbot.testing import make_fake_repo
from fakegithub.helpers import free_port

REPO = Path(__file__).resolve().parents[1]


def test_the_sandbox_section_defaults_and_names(tmp_path):
    s = SandboxSettings()
    assert (s.enabled, s.uid, s.gid, s.tmp_size_mb, s.memory_max_mb, s.pids_max, s.gpu, s.extra_ro_binds) == \
        (True, None, None, 1024, None, 512, "auto", [])
    env = {"EVALBOT_SANDBOX__TMP_SIZE_MB": "256", "EVALBOT_SANDBOX__GPU": "off", "EVALBOT_SANDBOX__PIDS_MAX": "64",
           "EVALBOT_SANDBOX__EXTRA_RO_BINDS": '["/opt/cuda", "/srv/x:/opt/x"]', "EVALBOT_SANDBOX__MEMORY_MAX_MB": "8192"}
    loaded = load_settings(tmp_path, environ=env).sandbox
    assert (loaded.tmp_size_mb, loaded.gpu, loaded.pids_max, loaded.memory_max_mb) == (256, "off", 64, 8192)
    assert loaded.extra_ro_binds == ["/opt/cuda", "/srv/x:/opt/x"]
    config = tmp_path / "c.toml"
    config.write_text("[sandbox]\nenabled = false\nuid = 1234\n")
    assert load_settings(tmp_path, config, environ={}).sandbox.model_dump(include={"enabled", "uid"}) == {"enabled": False, "uid": 1234}
    assert "sandbox" in load_settings(tmp_path, environ={}).scoring_dump()  # the receipt records it


@pytest.mark.parametrize("env, message", [
    ({"EVALBOT_SANDBOX__GPU": "maybe"}, "EVALBOT_SANDBOX__GPU"),
    ({"EVALBOT_SANDBOX__TMP_SIZE_MB": "0"}, "EVALBOT_SANDBOX__TMP_SIZE_MB must be at least 1"),
    ({"EVALBOT_SANDBOX__EXTRA_RO_BINDS": '["relative"]'}, "must be absolute paths"),
    ({"EVALBOT_SANDBOX__USER": "nobody"}, "EVALBOT_SANDBOX__USER is not a known setting"),
])
def test_bad_sandbox_settings_are_one_line(tmp_path, env, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(tmp_path, environ=env)


def test_the_old_sandbox_user_key_is_an_error(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[sandbox]\nuser = "evalbot-harness"\nno_network = true\n')
    with pytest.raises(ConfigError, match="sandbox.user in .* is not a known setting"):
        load_settings(tmp_path, config, environ={})


def test_ids_inside(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert sandbox.sandbox_ids(SandboxSettings()) == (65534, 65534)
    assert sandbox.sandbox_ids(SandboxSettings(uid=2000, gid=3000)) == (2000, 3000)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getegid", lambda: 1001)
    assert sandbox.sandbox_ids(SandboxSettings()) == (1000, 1001)


def test_gpu_for(monkeypatch):
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/dev/nvidia0")
    assert sandbox.gpu_for(SandboxSettings()) and sandbox.gpu_for(SandboxSettings(gpu="on"))
    assert not sandbox.gpu_for(SandboxSettings(gpu="off"))
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    assert not sandbox.gpu_for(SandboxSettings()) and sandbox.gpu_for(SandboxSettings(gpu="on"))


@pytest.mark.parametrize("command", ["score", "calibrate", "demo"])
def test_no_sandbox_flag(tmp_path, command):
    repo = make_fake_repo(tmp_path / "repo")
    parser = cli.build_parser()
    assert cli._settings(parser.parse_args([command, "--no-sandbox"]), repo.path).sandbox.enabled is False
    assert cli._settings(parser.parse_args([command]), repo.path).sandbox.enabled is True


def test_dspark_installs_bubblewrap_for_test_and_demo():
    script = (REPO / "dspark").read_text()
    assert "apt-get install -y -qq bubblewrap" in script
    body = script.split('case "$cmd" in', 1)[1]
    demo, test = body.split("  demo)", 1)[1].split(";;")[0], body.split("  test)", 1)[1].split(";;")[0]
    assert "ensure_bubblewrap" in demo and "ensure_bubblewrap" in test
    assert subprocess.run(["bash", "-n", str(REPO / "dspark")]).returncode == 0
    assert "DSPARK_REQUIRE_SANDBOX=1" in (REPO / ".ci" / "run").read_text()


# ---------------------------------------------------------------------------------------------
# evalbot serve


@pytest.fixture
def serve(monkeypatch, tmp_path):
    """server.run with uvicorn and prctl stubbed: what happened, in order."""
    import uvicorn

    from evalbot.bot.webhook import server

    events: list = []
    real_load = server.load_settings
    monkeypatch.setattr(server, "make_undumpable", lambda: events.append("undumpable") or True)
    monkeypatch.setattr(server, "load_settings", lambda: events.append("settings") or real_load())

    class Server:  # serves nothing: records the app it was given
        def __init__(self, config):
            self.config, self.started = config, False

        def run(self, sockets):
            events.append(("served", self.config.app))
            self.started = True

    monkeypatch.setattr(uvicorn, "Server", Server)
    for name in list(os.environ):
        if name.startswith("EVALBOT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("EVALBOT_REPO", "owner/repo")
    monkeypatch.setenv("EVALBOT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("EVALBOT_CHECKOUT_DIR", str(tmp_path))
    return server, events


def _answers_pings_signed_with(app, secret: str) -> bool:
    from starlette.testclient import TestClient

    from fakegithub.helpers import webhook_headers

    body = b'{"zen": "hi", "hook_id": 1}'
    with TestClient(app) as client:
        return client.post("/webhook", content=body, headers=webhook_headers(body, "ping", secret=secret)).status_code == 200


def test_serve_is_undumpable_before_it_reads_a_secret_from_a_file(serve, tmp_path, monkeypatch):
    server, events = serve
    secret = tmp_path / "webhook-secret"
    secret.write_text("s3cret-from-file\n")
    monkeypatch.setenv("EVALBOT_WEBHOOK_SECRET_FILE", str(secret))
    assert server.main(["--port", str(free_port())]) == 0
    assert events[:2] == ["undumpable", "settings"] and events[2][0] == "served"
    assert not any("s3cret-from-file" in v for v in os.environ.values())
    app = events[2][1]
    assert _answers_pings_signed_with(app, "s3cret-from-file") and not _answers_pings_signed_with(app, "other")


def test_serve_takes_the_secret_out_of_its_environment(serve, monkeypatch, capsys):
    server, events = serve
    monkeypatch.setenv("EVALBOT_WEBHOOK_SECRET", "s3cret-in-env")
    monkeypatch.setenv("GITHUB_TOKEN", "tok")
    assert server.main(["--port", str(free_port())]) == 0
    assert "EVALBOT_WEBHOOK_SECRET" not in os.environ and "GITHUB_TOKEN" not in os.environ
    err = capsys.readouterr().err  # the JSON log (evalbot.bot.logs) on stderr
    assert "EVALBOT_WEBHOOK_SECRET_FILE" in err and "s3cret-in-env" not in err


def test_serve_without_a_secret_still_refuses(serve):
    server, events = serve
    assert server.main(["--port", str(free_port())]) == 2
    assert events == ["undumpable", "settings"]
