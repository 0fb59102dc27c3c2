"""Several trainer processes forming one JAX mesh (DESIGN §9): the config and the provider's
variables come from `rlx_core.distributed`, joining the processes, global arrays and the
`Lockstep` that runs every served call on each from `rlx_model.distributed` (shared with the
inference worker). Re-exported here under the names the trainer has always used."""

from rlx_core.distributed import DistributedConfig
from rlx_model.distributed import Lockstep, initialize, put_global, to_host

__all__ = ["DistributedConfig", "Lockstep", "initialize", "put_global", "to_host"]
