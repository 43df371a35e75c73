"""``python -m specviz.cli``: the ``specviz`` command."""

import sys

from . import main

sys.exit(main())
