package local.kubegateway.example;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import local.kubegateway.v1.GetPodRequest;
import local.kubegateway.v1.ListPodsRequest;
import local.kubegateway.v1.Pod;
import local.kubegateway.v1.PodList;
import local.kubegateway.v1.PodServiceGrpc;
import local.kubegateway.v1.WatchEvent;
import local.kubegateway.v1.WatchPodsRequest;

/**
 * A Java client of the kube-gateway gRPC API, on the classes protoc and the grpc-java plugin
 * generate from the buf module (package {@code local.kubegateway.v1}, the protos'
 * java_package; one class per message, from java_multiple_files).
 *
 * <p>It lists the pods of a namespace, gets the first one by name, then watches the same pods:
 * a watch without a resource version opens with an ADDED event for every pod there is, and the
 * client stops once it has seen one for every listed pod. It exits 0 only when all three
 * answers agree.
 *
 * <pre>
 * mvn package
 * KUBE_GATEWAY_TOKEN=admin-token java -cp 'target/classes:target/dependency/*' \
 *     local.kubegateway.example.Client --namespace demo --selector app=web
 * </pre>
 *
 * <p>Options: {@code --addr} (default 127.0.0.1:50051), {@code --token} (default
 * $KUBE_GATEWAY_TOKEN), {@code --namespace}, {@code --selector}, {@code --timeout} (seconds).
 *
 * <p>Prints {@code POD <name> <phase>} per listed pod, {@code GOT <name> <phase>}, {@code
 * WATCHED <count>}; a failed call prints {@code ERROR <code> <message>} to stderr and exits 1.
 */
public final class Client {
  private Client() {}

  public static void main(String[] args) throws InterruptedException {
    String addr = "127.0.0.1:50051";
    String token = System.getenv().getOrDefault("KUBE_GATEWAY_TOKEN", "");
    String namespace = "default";
    String selector = "";
    long timeoutSeconds = 30;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--addr" -> addr = args[i + 1];
        case "--token" -> token = args[i + 1];
        case "--namespace" -> namespace = args[i + 1];
        case "--selector" -> selector = args[i + 1];
        case "--timeout" -> timeoutSeconds = Long.parseLong(args[i + 1]);
        default -> throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }

    ManagedChannel channel = ManagedChannelBuilder.forTarget(addr).usePlaintext().build();
    int status = 1;
    try {
      // The caller's own credential: the gateway forwards it to the Kubernetes API.
      Metadata headers = new Metadata();
      if (!token.isEmpty()) {
        headers.put(
            Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER), "Bearer " + token);
      }
      PodServiceGrpc.PodServiceBlockingStub pods =
          PodServiceGrpc.newBlockingStub(channel)
              .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers))
              .withDeadlineAfter(timeoutSeconds, TimeUnit.SECONDS);
      status = run(pods, namespace, selector);
    } catch (StatusRuntimeException e) {
      System.err.println("ERROR " + e.getStatus().getCode() + " " + e.getStatus().getDescription());
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    System.exit(status);
  }

  private static int run(PodServiceGrpc.PodServiceBlockingStub pods, String namespace, String selector) {
    PodList listed =
        pods.list(
            ListPodsRequest.newBuilder().setNamespace(namespace).setLabelSelector(selector).build());
    List<Pod> items = listed.getItemsList();
    for (Pod pod : items) {
      System.out.println("POD " + pod.getMetadata().getName() + " " + pod.getStatus().getPhase());
    }
    if (items.isEmpty()) {
      System.err.println("ERROR NO_PODS none in '" + namespace + "' match '" + selector + "'");
      return 1;
    }

    String first = items.get(0).getMetadata().getName();
    Pod got = pods.get(GetPodRequest.newBuilder().setNamespace(namespace).setName(first).build());
    System.out.println("GOT " + got.getMetadata().getName() + " " + got.getStatus().getPhase());
    if (!got.getMetadata().getName().equals(first)) {
      System.err.println("ERROR MISMATCH asked for " + first + ", got " + got.getMetadata().getName());
      return 1;
    }

    // No resource version: the stream opens with the current state, one ADDED per pod.
    Set<String> missing = new HashSet<>();
    for (Pod pod : items) {
      missing.add(pod.getMetadata().getName());
    }
    Iterator<WatchEvent> stream =
        pods.watch(
            WatchPodsRequest.newBuilder().setNamespace(namespace).setLabelSelector(selector).build());
    while (!missing.isEmpty() && stream.hasNext()) {
      WatchEvent event = stream.next();
      if (event.getType() == WatchEvent.Type.ADDED) {
        missing.remove(event.getPod().getMetadata().getName());
      }
    }
    if (!missing.isEmpty()) {
      System.err.println("ERROR INCOMPLETE the watch ended before ADDED for " + missing);
      return 1;
    }
    System.out.println("WATCHED " + items.size());
    return 0; // the channel's shutdown cancels the stream (a real client would keep reading)
  }
}
