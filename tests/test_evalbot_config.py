"""Settings: defaults, files, environment, and loud errors on typos."""

import json

import pytest

from evalbot.settings import HarnessServer, Settings, load_settings
from evalbot.errors import ConfigError


def test_defaults_match_the_issue():
    s = Settings()
    th = s.thresholds
    assert (th.top1_min, th.kl_max, th.ar_ratio_min) == (0.9, 0.1, 0.98)
    assert (th.guard_decode_ratio_min, th.guard_prefill_ratio_min, th.min_verified_streams) == (0.98, 0.98, 3)
    assert [(b.name, b.min_pct) for b in s.tiers.bands] == [("XS", 2), ("S", 3.5), ("M", 6), ("L", 10), ("XL", 18)]
    gpu = s.profiles["gpu"]
    assert (gpu.contexts, gpu.new_tokens, gpu.processes, gpu.budget_s) == ([1024, 4096, 7936], 256, 3, 600.0)
    assert gpu.rounds_floor == 9  # one round per pairing of processes
    assert s.tiers.label_prefixes == ("eval-dspark:", "eval:")


def test_toml_file_in_the_repo_state_dir(tmp_path):
    (tmp_path / ".evalbot").mkdir()
    (tmp_path / ".evalbot" / "config.toml").write_text(
        "[thresholds]\nar_ratio_min = 0.97\n[profiles.gpu]\nbudget_s = 300\nrequest_timeout_s = 60\n"
    )
    s = load_settings(tmp_path, environ={})
    assert s.thresholds.ar_ratio_min == 0.97
    assert s.profiles["gpu"].budget_s == 300 and s.profiles["gpu"].request_timeout_s == 60
    assert s.profiles["gpu"].contexts == Settings().profiles["gpu"].contexts
    assert s.profiles["cpu"] == Settings().profiles["cpu"]  # untouched profiles keep their defaults


def test_json_file_and_env_overrides(tmp_path):
    cfg = tmp_path / "bot.json"
    cfg.write_text(json.dumps({"stats": {"bootstrap_seed": 1}}))
    env = {
        "EVALBOT_CONFIG": str(cfg),
        "EVALBOT_STATS__BOOTSTRAP_RESAMPLES": "500",
        "EVALBOT_PROFILES__CPU__PROCESSES": "4",
        "EVALBOT_SIGNING_KEY": "/keys/bot.pem",
        "EVALBOT_BOX": "h200-a",
    }
    s = load_settings(None, environ=env)
    assert s.stats.bootstrap_seed == 1 and s.stats.bootstrap_resamples == 500
    assert s.profiles["cpu"].processes == 4
    assert str(s.signing_key) == "/keys/bot.pem"
    assert s.box_name() == "h200-a"


@pytest.mark.parametrize(
    "text, where",
    [
        ("[thresholds]\nar_ratio_mn = 0.97\n", "thresholds.ar_ratio_mn"),
        ("[profiles.gpu]\nprocesses = 0\n", "profiles.gpu.processes"),
        ("[tiers]\nbands = [{name = 'A', min_pct = 5.0}, {name = 'B', min_pct = 1.0}]\n", "tiers.bands"),
        ("thresholds = [\n", "does not parse"),
    ],
)
def test_bad_config_is_a_one_line_error(tmp_path, text, where):
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        load_settings(None, cfg, environ={})


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(None, tmp_path / "nope.toml", environ={})


def test_unknown_profile_is_an_error():
    with pytest.raises(ConfigError, match="unknown profile 'tpu'"):
        Settings().profile_settings("tpu")


def test_harness_server_command_in_one_place():
    h = HarnessServer()
    assert h.command("/py", "/work/model/m.gguf") == ["/py", "-m", "harness.serve", "--model", "/work/model/m.gguf"]
    assert HarnessServer(argv=["-m", "harness.serve"]).command("/py", "x") == ["/py", "-m", "harness.serve"]


# -- one settings tree for the CLI and the bot --------------------------------------------------------


@pytest.mark.parametrize(
    "env, message",
    [
        ({"EVALBOT_THRESHOLDS__AR_RATIO_MN": "1"}, "EVALBOT_THRESHOLDS__AR_RATIO_MN is not a known setting"),
        ({"EVALBOT_THRESHOLD__AR_RATIO_MIN": "1"}, "EVALBOT_THRESHOLD__AR_RATIO_MIN: there is no setting 'threshold'"),
        ({"EVALBOT__STATS__CONFIDENCE": "0.9"}, "one underscore after EVALBOT"),
        ({"EVALBOT_BOX_ID": "h200-a"}, "EVALBOT_BOX_ID is EVALBOT_BOX now"),
        ({"EVALBOT_PROFILES__GPU__PROCESSES": "many"}, "EVALBOT_PROFILES__GPU__PROCESSES must be a number, got 'many'"),
        ({"EVALBOT_PROFILES__GPU__CONTEXTS": "1024"}, "EVALBOT_PROFILES__GPU__CONTEXTS is invalid"),
        ({"EVALBOT_PROFILE": "tpu"}, "EVALBOT_PROFILE must name a profile (cpu, gpu), got 'tpu'"),
        ({"EVALBOT_AUTOMERGE_MIN_TIER": "none"}, "EVALBOT_AUTOMERGE_MIN_TIER must be one of XS, S, M, L, XL"),
        ({"EVALBOT_STALE_AFTER_SECONDS": "5"}, "EVALBOT_STALE_AFTER_SECONDS must exceed heartbeat_seconds"),
    ],
)
def test_environment_errors_name_the_variable(env, message):
    with pytest.raises(ConfigError) as caught:
        load_settings(None, environ=env)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_file_errors_name_the_key_and_old_names_say_the_new_one(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('default_profile = "gpu"\n')
    with pytest.raises(ConfigError, match=r"default_profile in .*c\.toml is not a known setting \(it is `profile` now\)"):
        load_settings(None, cfg, environ={})


def test_the_bot_reads_the_same_tree_from_its_checkout(tmp_path):
    (tmp_path / ".evalbot").mkdir()
    (tmp_path / ".evalbot" / "config.toml").write_text('repo = "octo/dspark"\nbox = "h200-b"\nclose_on = ["REJECT"]\n'
                                                      "[stats]\ndefault_noise_floor = 0.05\n")
    env = {"EVALBOT_CHECKOUT_DIR": str(tmp_path), "EVALBOT_CLOSE_ON": "REJECT,none", "EVALBOT_AUTOMERGE": "on"}
    s = load_settings(environ=env)
    assert (s.repo, s.box_name(), s.stats.default_noise_floor, s.automerge) == ("octo/dspark", "h200-b", 0.05, True)
    assert s.close_on == {"REJECT", "none"}  # the environment wins over the file
    assert s.box_lock_path == s.state_dir / "box-h200-b.lock"
    assert "repo" not in s.scoring_dump() and "thresholds" in s.scoring_dump()  # receipts record the scoring part


def test_secrets_come_from_a_secrets_dir_and_never_reach_a_dump(tmp_path):
    (tmp_path / "EVALBOT_WEBHOOK_SECRET").write_text("from-the-dir")
    s = load_settings(None, environ={"EVALBOT_SECRETS_DIR": str(tmp_path), "EVALBOT_GITHUB_TOKEN": "ghp_x"})
    assert s.webhook_secret == "from-the-dir" and s.github_token == "ghp_x"
    dumped = json.dumps(s.model_dump(mode="json"))
    assert "from-the-dir" not in dumped and "ghp_x" not in dumped and "ghp_x" not in repr(s)


def test_plain_construction_reads_nothing_from_outside(monkeypatch):
    monkeypatch.setenv("EVALBOT_THRESHOLDS__AR_RATIO_MIN", "0.5")
    assert Settings().thresholds.ar_ratio_min == 0.98
    assert load_settings(None).thresholds.ar_ratio_min == 0.5
