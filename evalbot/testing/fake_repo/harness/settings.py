"""What the fake harness measures. Changing this file on main changes the ruler for every ref."""

CONTEXTS = {"cpu": [32, 64], "gpu": [1024, 4096]}
NEW_TOKENS = 24
BLOCK_SIZE = 7
GUARDS = [("qwen3-0.6b-shape", 256), ("llama-1b-shape", 256)]
GUARD_REPS = 3
SCORE_POSITIONS = 512
MODEL_SHA256 = "3f1e" * 16
