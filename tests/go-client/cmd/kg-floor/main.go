// kg-floor: a Go gRPC server that answers every unary call with the same bytes, the
// transport-and-client floor of tests/bench/bench_grpc_floor.py (its `go` variant): what a
// call costs ghz against a server that is not Python's grpc.aio, on the same loopback.
//
//	kg-floor -listen 127.0.0.1:PORT -answer pod.bin [-meta]
//
// Any method is served (an unknown-service handler with a codec of raw bytes: no stubs), the
// request read and dropped; -meta sends an x-request-id initial metadata first, as the
// gateway does. It prints "serving" once it listens.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
)

// raw is a codec that passes bytes through: the answer is the pod's encoded message.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (raw) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append((*(v.(*[]byte)))[:0], data...)
	return nil
}
func (raw) Name() string { return "proto" }

var _ encoding.Codec = raw{}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	answer := flag.String("answer", "", "file of the answer's bytes")
	meta := flag.Bool("meta", false, "send an x-request-id initial metadata first")
	flag.Parse()
	data, err := os.ReadFile(*answer)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	handler := func(_ any, stream grpc.ServerStream) error {
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		if *meta {
			if err := stream.SendHeader(metadata.Pairs("x-request-id", "0123456789abcdef")); err != nil {
				return err
			}
		}
		out := data
		return stream.SendMsg(&out)
	}
	server := grpc.NewServer(grpc.ForceServerCodec(raw{}), grpc.UnknownServiceHandler(handler))
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("serving")
	if err := server.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
