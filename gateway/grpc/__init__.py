"""The gRPC front end (grpc.aio): thin servicers over the shared core.

Modules, by noun:

* :mod:`~gateway.grpc.contract`: messages, enums and services as data, built from the schema
  source and the registry (the one place the contract is defined);
* :mod:`~gateway.grpc.protogen` and :mod:`~gateway.grpc.numbering`: ``protos/`` rendered from
  the contract, field numbers locked; ``make protos`` also writes the stubs in ``gen/``;
* :mod:`~gateway.grpc.codec` (over :mod:`~gateway.core.lists.protowire`) and
  :mod:`~gateway.grpc.mask`: upstream JSON to wire bytes (and back), ``read_mask``;
* :mod:`~gateway.grpc.servicer`, :mod:`~gateway.grpc.calls`: one generic servicer per
  resource (``Watch`` joins the core's shared watch hub), credential and deadline of a call;
* :mod:`~gateway.grpc.status`: the one error table with ``google.rpc`` details;
* :mod:`~gateway.grpc.routing`: the cluster of a call (``x-kube-cluster``) on the fleet, the
  end of a removed cluster's streams;
* :mod:`~gateway.grpc.clusters`: the ``ClusterService`` (the served clusters);
* :mod:`~gateway.grpc.server`: ``start_grpc`` (health, reflection, keepalive, gzip, limits).
"""
