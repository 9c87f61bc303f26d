"""The gRPC front end (grpc.aio): thin servicers over the shared core."""
