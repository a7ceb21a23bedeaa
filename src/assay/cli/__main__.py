"""``python -m assay.cli``: the ``assay`` command (torchrun starts ranks this way)."""

import sys

from assay.cli import main

sys.exit(main())
