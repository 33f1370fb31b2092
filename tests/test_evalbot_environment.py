"""What a harness server may see of the bot's environment: the allow-list, minus every secret."""

from evalbot.measure.environment import scrub_env
from evalbot.settings import EnvPolicy

SECRETS = {
    "GITHUB_TOKEN": "ghp_x", "GH_TOKEN": "x", "EVALBOT_SIGNING_KEY": "/k", "EVALBOT_WEBHOOK_SECRET": "s",
    "AWS_SECRET_ACCESS_KEY": "a", "AWS_PROFILE": "p", "HF_TOKEN": "h", "OPENAI_API_KEY": "o", "DB_PASSWORD": "d",
    "SSH_AUTH_SOCK": "/tmp/s", "REDIS_URL": "redis://:pw@h", "DSPARK_API_TOKEN": "t", "MY_SECRET": "m",
}
SAFE = {"PATH": "/usr/bin", "HOME": "/home/bot", "LANG": "C.UTF-8", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
        "TRITON_INTERPRET": "1", "DSPARK_MODEL_DIR": "/models"}


def test_scrub_keeps_the_allow_list_and_drops_every_secret():
    env = scrub_env({**SECRETS, **SAFE, "RANDOM_THING": "x", "PYTHONPATH": "/evil"}, EnvPolicy())
    assert env == SAFE


def test_deny_wins_over_allow():
    policy = EnvPolicy(allow=["*"], deny=["*TOKEN*"])
    assert scrub_env({"A_TOKEN": "x", "B": "y"}, policy) == {"B": "y"}
