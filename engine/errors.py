"""User-facing errors: the CLIs print `error: <message>` and exit non-zero, never a traceback."""


class EngineError(Exception):
    """A problem the user can fix (bad path, corrupt file, bad argument)."""


class ModelLoadError(EngineError):
    pass


class ContextOverflowError(EngineError):
    pass
