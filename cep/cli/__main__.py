"""``python -m cep.cli ...``: the ``cep`` command."""

import sys

from cep.cli.command import main

sys.exit(main())
