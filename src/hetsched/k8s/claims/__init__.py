"""Dynamic Resource Allocation by the hetsched scheduler: ResourceClaims of the pods it
schedules, allocated from ResourceSlices with the core's decisions.

- :mod:`.inventory`: the slices' devices as devices of the core's nodes (pure);
- :mod:`.requests`: claims as the core's device requests, the core's choice as an
  allocation (pure);
- :mod:`.writes`: allocate, reserve, release claims through the API server;
- :mod:`.book`: the scheduler's view of slices, classes, claims and its pods' claims;
- :mod:`.side`: the glue in the scheduler's loop.

docs/kubernetes.md ("DRA allocation by the hetsched scheduler") explains the design.
"""

from hetsched.k8s.claims.book import ClaimBook, PodClaims
from hetsched.k8s.claims.requests import ClaimError
from hetsched.k8s.claims.side import ClaimSide

__all__ = ["ClaimBook", "ClaimError", "ClaimSide", "PodClaims"]
