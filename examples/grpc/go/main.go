// Command client is a Go client of the kube-gateway gRPC API, built on the code `buf generate`
// writes from the buf module (../../../protos) into ./gen, the Go package the protos name in
// their go_package option (kube-gateway.local/gen/go/kubegateway/v1, mapped to ./gen by the
// replace directive of go.mod).
//
// It lists the pods of a namespace, gets the first one by name, then watches the same pods:
// a watch without a resource version opens with an ADDED event for every pod there is, and
// the client stops once it has seen one for every listed pod.  It exits 0 only when all three
// answers agree.
//
//	buf generate && go build -o client .
//	KUBE_GATEWAY_TOKEN=admin-token ./client -namespace demo -selector app=web
//
// Prints "POD <name> <phase>" per listed pod, "GOT <name> <phase>", "WATCHED <count>"; a
// failed call prints "ERROR <code> <message>" to stderr and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	kubegatewayv1 "kube-gateway.local/gen/go/kubegateway/v1"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "the gateway's gRPC address")
	token := flag.String("token", os.Getenv("KUBE_GATEWAY_TOKEN"), "bearer token (default $KUBE_GATEWAY_TOKEN)")
	namespace := flag.String("namespace", "default", "namespace of the pods")
	selector := flag.String("selector", "", "label selector, e.g. app=web")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of the whole run")
	flag.Parse()

	options := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if *token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer(*token)))
	}
	conn, err := grpc.NewClient(*addr, options...)
	if err != nil {
		exit(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, kubegatewayv1.NewPodServiceClient(conn), *namespace, *selector); err != nil {
		exit(err)
	}
}

// bearer is the caller's own credential, sent as the authorization metadata of every call on
// the connection: the gateway forwards it to the Kubernetes API as the caller's identity.
type bearer string

func (t bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that the recipe reaches a plaintext gateway on this
// machine; across a network, dial with TLS credentials and answer true (a token must not
// travel in clear).
func (bearer) RequireTransportSecurity() bool { return false }

func run(ctx context.Context, pods kubegatewayv1.PodServiceClient, namespace, selector string) error {
	listed, err := pods.List(ctx, &kubegatewayv1.ListPodsRequest{Namespace: namespace, LabelSelector: selector})
	if err != nil {
		return err
	}
	for _, pod := range listed.GetItems() {
		fmt.Printf("POD %s %s\n", pod.GetMetadata().GetName(), pod.GetStatus().GetPhase())
	}
	if len(listed.GetItems()) == 0 {
		return fmt.Errorf("no pods in %q match %q", namespace, selector)
	}

	first := listed.GetItems()[0].GetMetadata().GetName()
	got, err := pods.Get(ctx, &kubegatewayv1.GetPodRequest{Namespace: namespace, Name: first})
	if err != nil {
		return err
	}
	fmt.Printf("GOT %s %s\n", got.GetMetadata().GetName(), got.GetStatus().GetPhase())
	if got.GetMetadata().GetName() != first {
		return fmt.Errorf("asked for %s, got %s", first, got.GetMetadata().GetName())
	}

	// No ResourceVersion: the stream opens with the current state, one ADDED per pod.
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := pods.Watch(watchCtx, &kubegatewayv1.WatchPodsRequest{Namespace: namespace, LabelSelector: selector})
	if err != nil {
		return err
	}
	missing := map[string]bool{}
	for _, pod := range listed.GetItems() {
		missing[pod.GetMetadata().GetName()] = true
	}
	for len(missing) > 0 {
		event, err := stream.Recv()
		if err != nil {
			return err
		}
		if event.GetType() == kubegatewayv1.WatchEvent_ADDED {
			delete(missing, event.GetPod().GetMetadata().GetName())
		}
	}
	fmt.Printf("WATCHED %d\n", len(listed.GetItems()))
	return nil // seen every listed pod: done (a real client would keep receiving)
}

// exit reports a failed call (its gRPC code, or Unknown for the client's own checks) and exits 1.
func exit(err error) {
	st, _ := status.FromError(err)
	fmt.Fprintf(os.Stderr, "ERROR %s %s\n", st.Code(), st.Message())
	os.Exit(1)
}
