"""`python -m evalbot ...` is the `evalbot` console script."""

import sys

from evalbot.cli import main

sys.exit(main())
