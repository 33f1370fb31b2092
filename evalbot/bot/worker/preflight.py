"""`evalbot worker` checks everything it will need before it takes a job: one line per problem, all of
them at once, and the process exits 2. A worker that starts is a worker that can score and publish;
nothing it could have known at start fails an hour into a scoring."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from evalbot.errors import ConfigError, EvalbotError
from evalbot.settings import Settings, env_name

DEFAULT_SCORER = "evalbot.bot.worker.scoring:pipeline_scorer"


def _redacted(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


def check_app_key(path: str) -> str | None:
    """None when `path` holds the RSA private key of a GitHub App; otherwise why not."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

    var = env_name("github_app_private_key_path")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"{var}: cannot read {path!r}: {exc.strerror}"
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        return f"{var}: {path!r} is not an unencrypted PEM private key ({str(exc).splitlines()[0][:120]})"
    if not isinstance(key, RSAPrivateKey):
        kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "")
        return (f"{var}: {path!r} is an {kind} key; a GitHub App's private key is RSA "
                "(the .pem file GitHub generated for the App)")
    return None


def _credentials(settings: Settings) -> list[str]:
    if not settings.github_app_id:
        if settings.github_token:
            return []
        return ["set EVALBOT_GITHUB_TOKEN, or EVALBOT_GITHUB_APP_ID with EVALBOT_GITHUB_APP_PRIVATE_KEY_PATH "
                "and EVALBOT_GITHUB_INSTALLATION_ID"]
    problems = []
    if not settings.github_app_id.strip().isdigit():
        problems.append(f"{env_name('github_app_id')} must be the App's numeric id, got {settings.github_app_id!r}")
    if not settings.github_installation_id:
        problems.append(f"{env_name('github_installation_id')} is missing: the number at the end of the installation's "
                        "URL (Settings → Integrations → GitHub Apps → Configure)")
    elif not settings.github_installation_id.strip().isdigit():
        problems.append(f"{env_name('github_installation_id')} must be a number, got {settings.github_installation_id!r}")
    if not settings.github_app_private_key_path:
        problems.append(f"{env_name('github_app_private_key_path')} is missing: the App's private key file")
    else:
        problem = check_app_key(settings.github_app_private_key_path)
        if problem:
            problems.append(problem)
    return problems


def _redis(settings: Settings) -> list[str]:
    if not settings.redis_url:
        return []
    import redis

    try:
        client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=5)
        client.ping()
        client.close()
    except (redis.RedisError, ValueError, OSError) as exc:
        return [f"{env_name('redis_url')}: cannot reach {_redacted(settings.redis_url)}: {str(exc).splitlines()[0][:200]}"]
    return []


def _state_dir(settings: Settings) -> list[str]:
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        probe = settings.state_dir / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return [f"{env_name('state_dir')}: cannot write {str(settings.state_dir)!r}: {exc.strerror}"]
    return []


def _checkout(settings: Settings) -> list[str]:
    if settings.scorer != DEFAULT_SCORER:
        return []  # another scorer brings its own checkout (or none)
    var, path = env_name("checkout_dir"), settings.checkout_dir
    if not path.is_dir():
        return [f"{var}: {str(path)!r} is not a directory (this box's clone of {settings.repo or 'the repository'})"]
    done = subprocess.run(["git", "-C", str(path), "remote", "get-url", settings.remote], capture_output=True, text=True)
    if done.returncode != 0:
        return [f"{var}: {str(path)!r} is not a git clone with a remote {settings.remote!r} ({env_name('remote')}): "
                f"{done.stderr.strip()[:160]}"]
    return []


def _scoring(settings: Settings) -> list[str]:
    from evalbot.bot.worker.scoring import load_callable
    from evalbot.pipeline import load_signing_key

    problems = []
    for name in ("scorer", "publisher"):
        try:
            load_callable(getattr(settings, name))
        except ConfigError as exc:
            problems.append(f"{env_name(name)}: {exc}")
    try:
        load_signing_key(settings)
    except EvalbotError as exc:
        problems.append(f"{env_name('signing_key')}: {exc}")
    if settings.profile is not None:
        try:
            settings.profile_settings(settings.profile)
        except ConfigError as exc:
            problems.append(f"{env_name('profile')}: {exc}")
    if settings.templates_dir is not None and not settings.templates_dir.is_dir():
        problems.append(f"{env_name('templates_dir')}: {str(settings.templates_dir)!r} is not a directory")
    return problems


def _corpora(settings: Settings) -> list[str]:
    """Private corpora, where configured: every profile's corpus text is there to read."""
    if settings.corpora_dir is None:
        return []
    where = settings.corpora_dir.expanduser()
    names = sorted({n for name in settings.profiles for n in settings.profile_settings(name).corpora})
    missing = [f"{n}.txt" for n in names if not (where / f"{n}.txt").is_file()]
    return [f"{env_name('corpora_dir')}: {str(where)!r} lacks {', '.join(missing)}"] if missing else []


def worker_problems(settings: Settings) -> list[str]:
    """Every reason this worker could not do its job, one line each; empty when it can."""
    problems = [] if settings.repo else [f"missing setting(s): {env_name('repo')}"]
    for check in (_credentials, _redis, _state_dir, _checkout, _scoring, _corpora):
        problems += check(settings)
    return problems


def worker_warnings(settings: Settings) -> list[str]:
    """What the worker can do but its maintainers should know, one line each."""
    if settings.corpora_dir is None:
        return [f"{env_name('corpora_dir')} is unset: windows are cut from main's public harness corpora, which "
                "contributors can read and tune a drafter on (docs/deploy.md, Trust model)"]
    return []
