import sys

from evalbot.service.server import main

sys.exit(main())
