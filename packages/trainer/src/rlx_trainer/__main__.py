"""`python -m rlx_trainer`: the trainer server, as the console script `rlx-trainer`.

Services are started this way: the package's `__init__` imports `rlx_trainer.server`, so
`python -m rlx_trainer.server` would load that module a second time as `__main__` (runpy warns).
"""

import sys

from rlx_trainer.server import main

if __name__ == "__main__":
    sys.exit(main())
