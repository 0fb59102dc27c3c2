"""`python -m rlx_verifier`: the verifier server, as the console script `rlx-verifier`.

Services are started this way: the package's `__init__` imports `rlx_verifier.server`, so
`python -m rlx_verifier.server` would load that module a second time as `__main__` (runpy warns).
"""

import sys

from rlx_verifier.server import main

if __name__ == "__main__":
    sys.exit(main())
