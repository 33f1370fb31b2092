"""Fake score: a teacher-forced log-prob dump (argmax and its log-prob per position) to --out."""

import json

from harness import _common, settings

args = _common.parse()
from engine import fake as engine  # noqa: E402

engine.before("score")
dump = engine.logprobs(settings.SCORE_POSITIONS)
with open(args.out, "w") as f:
    json.dump(dump, f)
_common.emit({"kind": "score", "positions": settings.SCORE_POSITIONS, "file": args.out})
