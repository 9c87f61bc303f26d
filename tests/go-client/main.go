// Command kg-client is a small Go client of the kube-gateway gRPC API: it lists pods and
// follows a watch through the gateway, printing one line per pod and per event.  With
// -resource group/version/resource it does the same for any served resource through the
// generic ResourceService (objects as JSON), printing OBJECT lines instead of POD lines.
//
//	kg-client -addr 127.0.0.1:50051 -token admin-token -namespace demo -events 3
//	kg-client -resource coordination.k8s.io/v1/leases -namespace demo
//	kg-client -resource /v1/configmaps -namespace demo
//
// Output (stable, for tests and people):
//
//	POD <name> <phase>
//	OBJECT <name>
//	LISTED <count> <resourceVersion>
//	EVENT <type> <name> <resourceVersion>
//	DONE <events>
//
// Errors go to stderr as "ERROR <grpc code> <message>" with exit status 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	kgv1 "kube-gateway.local/tests/go-client/gen/kubegatewayv1"
)

func fail(err error) {
	st, _ := status.FromError(err)
	fmt.Fprintf(os.Stderr, "ERROR %s %s\n", st.Code(), st.Message())
	os.Exit(1)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "the gateway's gRPC address")
	token := flag.String("token", os.Getenv("KUBE_GATEWAY_TOKEN"), "bearer token (default $KUBE_GATEWAY_TOKEN)")
	namespace := flag.String("namespace", "default", "namespace to list and watch")
	labels := flag.String("selector", "", "label selector")
	events := flag.Int("events", 0, "follow the watch until this many change events (0: list only)")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline of the whole run")
	resource := flag.String("resource", "", "group/version/resource: use the generic ResourceService")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	if *resource != "" {
		generic(ctx, conn, *resource, *namespace, *labels, *events)
		return
	}
	pods := kgv1.NewPodServiceClient(conn)

	list, err := pods.List(ctx, &kgv1.ListPodsRequest{Namespace: *namespace, LabelSelector: *labels})
	if err != nil {
		fail(err)
	}
	for _, p := range list.GetItems() {
		fmt.Printf("POD %s %s\n", p.GetMetadata().GetName(), p.GetStatus().GetPhase())
	}
	rv := list.GetMetadata().GetResourceVersion()
	fmt.Printf("LISTED %d %s\n", len(list.GetItems()), rv)
	if *events <= 0 {
		return
	}

	// Resume from the list's resourceVersion: every change after the list, none before.
	stream, err := pods.Watch(ctx, &kgv1.WatchPodsRequest{
		Namespace: *namespace, LabelSelector: *labels, ResourceVersion: rv,
	})
	if err != nil {
		fail(err)
	}
	seen := 0
	for seen < *events {
		ev, err := stream.Recv()
		if err != nil {
			fail(err)
		}
		switch ev.GetType() {
		case kgv1.WatchEvent_ADDED, kgv1.WatchEvent_MODIFIED, kgv1.WatchEvent_DELETED:
			seen++
		}
		fmt.Printf("EVENT %s %s %s\n", ev.GetType(), ev.GetPod().GetMetadata().GetName(), ev.GetResourceVersion())
	}
	fmt.Printf("DONE %d\n", seen)
}

// name is metadata.name of a JSON object.
func name(object *kgv1.ResourceObject) string {
	var o struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(object.GetJson(), &o); err != nil {
		fmt.Fprintf(os.Stderr, "ERROR Internal %s\n", err)
		os.Exit(1)
	}
	return o.Metadata.Name
}

// generic lists and watches any resource through kubegateway.v1.ResourceService.
func generic(ctx context.Context, conn *grpc.ClientConn, gvr, namespace, labels string, events int) {
	parts := strings.Split(gvr, "/")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "ERROR InvalidArgument -resource is group/version/resource\n")
		os.Exit(1)
	}
	group, version, plural := parts[0], parts[1], parts[2]
	resources := kgv1.NewResourceServiceClient(conn)
	list, err := resources.List(ctx, &kgv1.ListResourcesRequest{
		Group: group, Version: version, Resource: plural, Namespace: namespace, LabelSelector: labels,
	})
	if err != nil {
		fail(err)
	}
	for _, item := range list.GetItems() {
		fmt.Printf("OBJECT %s\n", name(item))
	}
	rv := list.GetMetadata().GetResourceVersion()
	fmt.Printf("LISTED %d %s\n", len(list.GetItems()), rv)
	if events <= 0 {
		return
	}
	stream, err := resources.Watch(ctx, &kgv1.WatchResourcesRequest{
		Group: group, Version: version, Resource: plural, Namespace: namespace,
		LabelSelector: labels, ResourceVersion: rv,
	})
	if err != nil {
		fail(err)
	}
	seen := 0
	for seen < events {
		ev, err := stream.Recv()
		if err != nil {
			fail(err)
		}
		switch ev.GetType() {
		case kgv1.WatchEvent_ADDED, kgv1.WatchEvent_MODIFIED, kgv1.WatchEvent_DELETED:
			seen++
		}
		fmt.Printf("EVENT %s %s %s\n", ev.GetType(), name(ev.GetObject()), ev.GetResourceVersion())
	}
	fmt.Printf("DONE %d\n", seen)
}
