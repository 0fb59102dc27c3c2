"""`python -m rlx_paramserver`: the paramserver server, as the console script `rlx-paramserver`.

Services are started this way: the package's `__init__` imports `rlx_paramserver.server`, so
`python -m rlx_paramserver.server` would load that module a second time as `__main__` (runpy warns).
"""

import sys

from rlx_paramserver.server import main

if __name__ == "__main__":
    sys.exit(main())
