"""python3 -m hsring.prepare: what `hsring data prepare` runs (hsring/prepare/cli.py)."""

import sys

from .cli import main

sys.exit(main())
