"""The kubelet plugin APIs a DRA driver serves, generated from the .proto files beside this
file (written from the published definitions): ``dra_v1`` and ``dra_v1beta1``
(``DRAPlugin``), ``health_v1`` (``DRAResourceHealth``) and ``registration_v1``
(``pluginregistration.Registration``). Regenerate with ``regenerate.sh``; nothing else is
exported here."""
