"""`python -m rlx_inference`: the inference server, as the console script `rlx-inference`.

Services are started this way: the package's `__init__` imports `rlx_inference.server`, so
`python -m rlx_inference.server` would load that module a second time as `__main__` (runpy warns).
"""

import sys

from rlx_inference.server import main

if __name__ == "__main__":
    sys.exit(main())
