"""A Python client of the kube-gateway gRPC API, from stubs generated out of the buf module.

Lists the pods of a namespace (optionally by label selector), gets the first one by name,
then watches the same pods: a watch without a resource version starts with an ADDED event
for every pod there is, and the client stops once it has seen one for every listed pod.
It exits 0 only when all three answers agree, so it doubles as a check of the gateway.

    python -m grpc_tools.protoc -I ../../../protos --python_out=gen --grpc_python_out=gen \\
        $(cd ../../../protos && find kubegateway -name '*.proto')
    KUBE_GATEWAY_TOKEN=admin-token python client.py --namespace demo --selector app=web

Prints ``POD <name> <phase>`` per listed pod, ``GOT <name> <phase>``, ``WATCHED <count>``;
a failed call prints ``ERROR <code> <message>`` to stderr and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import grpc

# The generated code imports `kubegateway.v1...` from the root it was generated into.
sys.path.insert(0, str(Path(__file__).resolve().parent / "gen"))

from kubegateway.v1 import common_pb2, pods_pb2, pods_pb2_grpc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", default="127.0.0.1:50051", help="the gateway's gRPC address")
    parser.add_argument("--token", default=os.environ.get("KUBE_GATEWAY_TOKEN", ""))
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--selector", default="", help="label selector, e.g. app=web")
    parser.add_argument("--timeout", type=float, default=30, help="seconds for the whole run")
    args = parser.parse_args()

    # The caller's own credential: the gateway forwards it to the Kubernetes API.
    metadata = [("authorization", f"Bearer {args.token}")] if args.token else []
    with grpc.insecure_channel(args.addr) as channel:
        pods = pods_pb2_grpc.PodServiceStub(channel)
        try:
            return run(pods, args, metadata)
        except grpc.RpcError as e:
            print(f"ERROR {e.code().name} {e.details()}", file=sys.stderr)
            return 1


def run(pods: pods_pb2_grpc.PodServiceStub, args: argparse.Namespace, metadata: list) -> int:
    listed = pods.List(
        pods_pb2.ListPodsRequest(namespace=args.namespace, label_selector=args.selector),
        metadata=metadata,
        timeout=args.timeout,
    )
    for pod in listed.items:
        print(f"POD {pod.metadata.name} {pod.status.phase}")
    if not listed.items:
        print(f"ERROR NO_PODS none in {args.namespace!r} match {args.selector!r}", file=sys.stderr)
        return 1

    first = listed.items[0].metadata.name
    got = pods.Get(
        pods_pb2.GetPodRequest(namespace=args.namespace, name=first),
        metadata=metadata,
        timeout=args.timeout,
    )
    print(f"GOT {got.metadata.name} {got.status.phase}")
    if got.metadata.name != first:
        print(f"ERROR MISMATCH asked for {first}, got {got.metadata.name}", file=sys.stderr)
        return 1

    # No resource_version: the stream opens with the current state, one ADDED per pod.
    stream = pods.Watch(
        pods_pb2.WatchPodsRequest(namespace=args.namespace, label_selector=args.selector),
        metadata=metadata,
        timeout=args.timeout,
    )
    missing = {pod.metadata.name for pod in listed.items}
    for event in stream:
        if event.type == common_pb2.WatchEvent.ADDED:
            missing.discard(event.pod.metadata.name)
        if not missing:
            stream.cancel()  # seen every listed pod: done (a real client would keep going)
            break
    print(f"WATCHED {len(listed.items)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
