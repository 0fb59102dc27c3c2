"""`python -m rlx_controller`: the controller server, as the console script `rlx-controller`.

Services are started this way: the package's `__init__` imports `rlx_controller.server`, so
`python -m rlx_controller.server` would load that module a second time as `__main__` (runpy warns).
"""

import sys

from rlx_controller.server import main

if __name__ == "__main__":
    sys.exit(main())
