"""User-facing errors: the CLI prints `error: <message>` and exits non-zero, never a traceback.

Anything raised as an `EvalbotError` is a problem the user (or the box) can fix: a bad ref, a
missing harness manifest, a broken key file. Harness crashes during a scoring run are *not*
raised: they become an "infrastructure error" verdict (see `evalbot.decide.verdict`).
"""


class EvalbotError(Exception):
    """A problem the user can fix; the message is printed as is."""


class ConfigError(EvalbotError):
    pass


class GitError(EvalbotError):
    pass


class HarnessPinError(EvalbotError):
    """The harness could not be taken from the base branch tip: never measure with another ruler."""


class ContractViolation(EvalbotError):
    """A harness program printed something the contract (docs/harness.md) does not allow."""


class ReceiptError(EvalbotError):
    pass


class ForgeError(EvalbotError):
    pass
