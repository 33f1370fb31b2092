import hashlib
from types import SimpleNamespace

from engine.fake import KNOBS


def attach_drafter(engine, path=None):
    files = SimpleNamespace(sha256=hashlib.sha256(KNOBS["drafter"].encode()).hexdigest(),
                            config=SimpleNamespace(block_size=7))
    engine.drafter = files
    return files
