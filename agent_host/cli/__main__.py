"""`python -m agent_host.cli`: the same as `dex-agent`."""

import sys

from .main import main

sys.exit(main())
