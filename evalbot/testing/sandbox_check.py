"""Whether the sandbox can run here, for tests that need it (one answer for every test module)."""

from __future__ import annotations

import os


def sandbox_unavailable() -> str | None:
    """Why bubblewrap cannot run here, or None. Where CI demands the sandbox (DSPARK_REQUIRE_SANDBOX=1),
    a sandbox that cannot run is an error instead of a reason to skip."""
    from evalbot.measure.sandbox import SandboxUnavailable, check_sandbox
    from evalbot.settings import SandboxSettings

    try:
        check_sandbox(SandboxSettings())
        return None
    except SandboxUnavailable as e:
        if os.environ.get("DSPARK_REQUIRE_SANDBOX") == "1":
            raise RuntimeError(f"DSPARK_REQUIRE_SANDBOX=1 but the sandbox cannot run here: {e}") from None
        return str(e)
