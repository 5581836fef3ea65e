"""``python -m docnmt.cli``: the ``docnmt`` command without its console script."""
import sys

from . import main

sys.exit(main())
