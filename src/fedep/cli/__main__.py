"""``python -m fedep.cli``: the ``fedep`` command."""

import sys

from fedep.cli import main

sys.exit(main())
