"""``python -m lazyrt.cli``: the ``lazyrt`` command."""
import sys

from . import main

sys.exit(main())
