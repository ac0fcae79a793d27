"""``python -m nx_hal.cli``: the ``nx-hal`` command."""

import sys

from nx_hal.cli.app import main

sys.exit(main())
