"""``python -m freshet_model_export``: see ``cli``."""

import sys

from .cli import main

sys.exit(main())
