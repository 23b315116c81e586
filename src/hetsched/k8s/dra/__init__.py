"""The hetsched DRA driver: Dynamic Resource Allocation (resource.k8s.io/v1) for this
node's devices.

- :mod:`.devices`: devices as ResourceSlice devices, slices, allocation results (pure);
- :mod:`.slices`: keeping the node's ResourceSlices in step, with pool generations;
- :mod:`.book`: the devices and their health, as the watcher last saw them;
- :mod:`.prepare`: NodePrepareResources / NodeUnprepareResources, whatever the version;
- :mod:`.cdi`, :mod:`.checkpoint`: CDI specs and the prepared claims, on disk;
- :mod:`.service`: the gRPC services (DRAPlugin v1 and v1beta1, DRAResourceHealth v1,
  pluginregistration.Registration); :mod:`.api` holds their generated modules;
- :mod:`.driver`: serve, register, watch, start again; :mod:`.config`: its YAML file.

``hetsched k8s dra-driver`` runs it; docs/kubernetes.md explains the design.
"""

from hetsched.k8s.dra.driver import DraDriver, DriverAPI, DriverSettings

__all__ = ["DraDriver", "DriverAPI", "DriverSettings"]
