"""``python -m fedep``: the ``fedep`` command (as ``python -m fedep.cli``)."""

import sys

from fedep.cli import main

sys.exit(main())
