"""`python -m portal.cli`: the `kiln` command without its console script (a checkout, `kiln init`'s steps)."""

import sys

from portal.cli.main import main

sys.exit(main())
