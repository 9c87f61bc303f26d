// Command kg-fanout is the load client of the fan-out benchmark (tests/bench/bench_fanout.py):
// it opens N subscriptions to the same Lease watch and records each event's delivery latency,
// so that the gateway, not the client, is what the benchmark measures.
//
//	kg-fanout --transport ws     --target ws://127.0.0.1:8080/graphql --subscribers 1000
//	kg-fanout --transport grpc   --target 127.0.0.1:50051             --subscribers 1000
//	kg-fanout --transport direct --target http://127.0.0.1:41234      --subscribers 1000
//
// Transports:
//
//   - ws: one graphql-transport-ws connection per subscriber (connection_init with
//     {"Authorization": "Bearer TOKEN"}, connection_ack, one subscribe to watchLeases with
//     sendInitialEvents: false); pings are answered with pongs.  --compression offers
//     permessage-deflate, as browsers do.
//   - grpc: one kubegateway.v1.LeaseService/Watch server stream per subscriber, spread over
//     ceil(N / --streams-per-conn) HTTP/2 connections (one grpc.ClientConn each).
//   - direct: one plain HTTP watch per subscriber straight to the upstream API server
//     (?watch=1&labelSelector=...&resourceVersion=<current>), reading JSON lines: the same
//     events without the gateway.
//
// With --view (ws and grpc), live views instead of lease watches: ws subscribes with the
// GraphQL document --query and the variables --variables (a JSON array of objects:
// subscriber i takes element i mod its length); grpc opens
// kubegateway.v1.ResourceService/WatchView with --view-requests (a JSON array of
// WatchViewRequest messages, each its binary encoding in base64; protojson cannot carry
// the read mask's field names: subscriber i takes element i mod its length).  An update
// is a whole page: its latency is that of the newest bench/sent it carries (a label or an
// annotation of an object the page shows), recorded only when newer than the last one that
// subscriber recorded (a page sent again for another change repeats an older stamp; it is
// not a sample); "updates" in the summary counts every page that carried a stamp.
//
// Every event's object carries the annotation bench/sent = the writer's wall clock in Unix
// nanoseconds; latency = receive time - sent.  A value that is not an integer (e.g. "warm-3")
// marks a warm-up write: it makes a subscription ready but is never recorded.
//
// Protocol on stdout (stable, for the driver):
//
//	READY                      every subscription is established (--ready-on event: and has
//	                           delivered its first event; the driver writes warm-up events
//	                           until it sees this line)
//	RECEIVED <n>               progress every --progress (0: never), recorded events so far
//	{"transport": ...}         one JSON summary line, after --duration or when stdin closes
//
// Errors go to stderr as "ERROR <message>" with exit status 1.
//
// Efficiency: one goroutine per subscription reads its connection into a reused buffer; an
// event is never decoded: the annotation is found by a byte search (JSON for ws and direct,
// the protobuf map entry for grpc, whose frames are taken raw by a pass-through codec).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	kgv1 "kube-gateway.local/tests/go-client/gen/kubegatewayv1"
)

const query = `subscription($ns: String, $labels: String) { watchLeases(namespace: $ns, ` +
	`labelSelector: $labels, sendInitialEvents: false) { type resourceVersion object { ` +
	`metadata { name resourceVersion labels annotations } } } }`

// The annotation as it appears in JSON (a quoted key: never matches "f:bench/sent" of
// managedFields) and in protobuf (a map entry: field 1, length 10, the key, then field 2).
var (
	jsonKey  = []byte(`"bench/sent"`)
	protoKey = []byte("\x0a\x0abench/sent\x12")
)

// -- recording ---------------------------------------------------------------------------------

type subscriber struct {
	mu      sync.Mutex
	count   int64
	lat     []int64 // nanoseconds
	sent    []int64 // bench/sent of each recorded event (only with --latencies-out)
	firstNs int64
	lastNs  int64
	newest  int64 // --view: the newest bench/sent recorded
	ready   atomic.Bool
}

type run struct {
	transport    string
	subs         []subscriber
	readyOnEvent bool
	keepSent     bool
	newestOnly   bool
	compression  bool
	updates      atomic.Int64 // --view: every message carrying a bench/sent while recording
	recording    atomic.Bool
	stopping     atomic.Bool
	nready       atomic.Int64
	readyCh      chan struct{}
	received     atomic.Int64
	setupErr     chan error

	errMu    sync.Mutex
	errCount int
	firstErr string

	closeMu sync.Mutex
	closers []func()
}

func newRun(transport string, n int, readyOnEvent bool) *run {
	return &run{
		transport:    transport,
		subs:         make([]subscriber, n),
		readyOnEvent: readyOnEvent,
		readyCh:      make(chan struct{}),
		setupErr:     make(chan error, n),
	}
}

func (r *run) markReady(i int) {
	if r.subs[i].ready.CompareAndSwap(false, true) && r.nready.Add(1) == int64(len(r.subs)) {
		close(r.readyCh)
	}
}

// deliver records one event of subscriber i whose bench/sent annotation is value.
func (r *run) deliver(i int, value []byte) {
	now := time.Now().UnixNano()
	if r.readyOnEvent {
		r.markReady(i)
	}
	sent, ok := parseInt(value)
	if !ok || !r.recording.Load() {
		return
	}
	s := &r.subs[i]
	s.mu.Lock()
	if r.newestOnly {
		r.updates.Add(1)
		if sent <= s.newest {
			s.mu.Unlock()
			return
		}
		s.newest = sent
	}
	if r.recording.Load() {
		if s.count == 0 {
			s.firstNs = now
		}
		s.count++
		s.lastNs = now
		s.lat = append(s.lat, now-sent)
		if r.keepSent {
			s.sent = append(s.sent, sent)
		}
		r.received.Add(1)
	}
	s.mu.Unlock()
}

// fail records a subscription that broke; during setup it aborts the run.
func (r *run) fail(i int, err error) {
	if r.stopping.Load() {
		return
	}
	if !r.recording.Load() && r.nready.Load() < int64(len(r.subs)) {
		r.setupErr <- fmt.Errorf("subscriber %d: %w", i, err) // buffered: one per subscriber
		return
	}
	r.errMu.Lock()
	r.errCount++
	if r.firstErr == "" {
		r.firstErr = fmt.Sprintf("subscriber %d: %v", i, err)
	}
	r.errMu.Unlock()
}

func (r *run) onClose(f func()) {
	r.closeMu.Lock()
	r.closers = append(r.closers, f)
	r.closeMu.Unlock()
}

func (r *run) closeAll() {
	r.stopping.Store(true)
	r.closeMu.Lock()
	closers := r.closers
	r.closers = nil
	r.closeMu.Unlock()
	for _, f := range closers {
		f()
	}
}

func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// jsonAnnotation finds the string value of "bench/sent" in a JSON document.
func jsonAnnotation(msg []byte) ([]byte, bool) {
	value, _, ok := jsonNext(msg)
	return value, ok
}

// jsonNext is jsonAnnotation that also says where the value ends.
func jsonNext(msg []byte) ([]byte, int, bool) {
	for from := 0; ; {
		at := bytes.Index(msg[from:], jsonKey)
		if at < 0 {
			return nil, 0, false
		}
		j := from + at + len(jsonKey)
		from = j
		for j < len(msg) && (msg[j] == ' ' || msg[j] == '\t') {
			j++
		}
		if j >= len(msg) || msg[j] != ':' {
			continue
		}
		j++
		for j < len(msg) && (msg[j] == ' ' || msg[j] == '\t') {
			j++
		}
		if j >= len(msg) || msg[j] != '"' {
			continue
		}
		end := bytes.IndexByte(msg[j+1:], '"')
		if end < 0 {
			return nil, 0, false
		}
		return msg[j+1 : j+1+end], j + 2 + end, true
	}
}

// newestOf is find applied to every occurrence in msg: the largest integer value found (the
// newest stamp of a page), else the first value found (a warm-up mark), else none.
func newestOf(msg []byte, find func([]byte) ([]byte, int, bool)) ([]byte, bool) {
	var best, first []byte
	var bestV int64 = -1
	found := false
	for from := 0; from < len(msg); {
		value, next, ok := find(msg[from:])
		if !ok {
			break
		}
		if !found {
			first, found = value, true
		}
		if v, isInt := parseInt(value); isInt && v > bestV {
			best, bestV = value, v
		}
		from += next
	}
	if bestV >= 0 {
		return best, true
	}
	return first, found
}

// protoAnnotation finds the value of the bench/sent entry of a protobuf map<string,string>.
func protoAnnotation(msg []byte) ([]byte, bool) {
	value, _, ok := protoNext(msg)
	return value, ok
}

// protoNext is protoAnnotation that also says where the value ends.
func protoNext(msg []byte) ([]byte, int, bool) {
	at := bytes.Index(msg, protoKey)
	if at < 0 {
		return nil, 0, false
	}
	start := at + len(protoKey)
	rest := msg[start:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || uint64(len(rest)-w) < n {
		return nil, 0, false
	}
	return rest[w : w+int(n)], start + w + int(n), true
}

// -- ws: graphql-transport-ws ---------------------------------------------------------------------

type wsMessage struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func (r *run) wsSubscriber(ctx context.Context, i int, target, token string, payload map[string]any, sem chan struct{}) {
	c, err := func() (*websocket.Conn, error) {
		sem <- struct{}{}
		defer func() { <-sem }()
		dialer := websocket.Dialer{
			Subprotocols:     []string{"graphql-transport-ws"},
			HandshakeTimeout: 30 * time.Second,
			ReadBufferSize:   8192,
			WriteBufferSize:  4096,
			// permessage-deflate (no context takeover), as browsers offer it
			EnableCompression: r.compression,
		}
		c, _, err := dialer.DialContext(ctx, target, nil)
		if err != nil {
			return nil, err
		}
		r.onClose(func() { c.Close() })
		init, _ := json.Marshal(map[string]any{
			"type": "connection_init", "payload": map[string]string{"Authorization": "Bearer " + token},
		})
		if err := c.WriteMessage(websocket.TextMessage, init); err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			var m wsMessage
			if err := c.ReadJSON(&m); err != nil {
				return nil, fmt.Errorf("waiting for connection_ack: %w", err)
			}
			if m.Type == "connection_ack" {
				break
			}
			if m.Type == "ping" {
				_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"pong"}`))
				continue
			}
			return nil, fmt.Errorf("expected connection_ack, got %s", m.Type)
		}
		_ = c.SetReadDeadline(time.Time{})
		sub, _ := json.Marshal(map[string]any{
			"id": "1", "type": "subscribe",
			"payload": payload,
		})
		return c, c.WriteMessage(websocket.TextMessage, sub)
	}()
	if err != nil {
		r.fail(i, err)
		return
	}
	if !r.readyOnEvent {
		r.markReady(i)
	}
	var buf bytes.Buffer
	buf.Grow(4096)
	for {
		_, rd, err := c.NextReader()
		if err != nil {
			r.fail(i, err)
			return
		}
		buf.Reset()
		if _, err := buf.ReadFrom(rd); err != nil {
			r.fail(i, err)
			return
		}
		msg := buf.Bytes()
		find := jsonAnnotation
		if r.newestOnly {
			find = func(m []byte) ([]byte, bool) { return newestOf(m, jsonNext) }
		}
		if value, ok := find(msg); ok {
			r.deliver(i, value)
			continue
		}
		var m wsMessage // rare: pings, errors, completion
		if err := json.Unmarshal(msg, &m); err != nil {
			r.fail(i, fmt.Errorf("bad message %.200q", msg))
			return
		}
		switch m.Type {
		case "ping":
			if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"pong"}`)); err != nil {
				r.fail(i, err)
				return
			}
		case "pong":
		case "next":
			if bytes.Contains(m.Payload, []byte(`"errors"`)) {
				r.fail(i, fmt.Errorf("next with errors: %.300s", m.Payload))
				return
			}
			if r.readyOnEvent {
				r.markReady(i) // an event without the annotation (e.g. a lease written by others)
			}
		default:
			r.fail(i, fmt.Errorf("%s: %.300s", m.Type, m.Payload))
			return
		}
	}
}

// -- grpc: LeaseService/Watch with a pass-through codec -------------------------------------------

type frame struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f := v.(*frame)
	f.b = f.b[:0]
	for _, b := range data {
		f.b = append(f.b, b.ReadOnlyData()...)
	}
	return nil
}

var watchDesc = &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true}

const (
	leaseWatch = "/kubegateway.v1.LeaseService/Watch"
	watchView  = "/kubegateway.v1.ResourceService/WatchView"
)

func (r *run) grpcSubscriber(ctx context.Context, i int, conn *grpc.ClientConn, method string, req proto.Message, sem chan struct{}) {
	stream, err := func() (grpc.ClientStream, error) {
		sem <- struct{}{}
		defer func() { <-sem }()
		stream, err := conn.NewStream(ctx, watchDesc, method,
			grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			return nil, err
		}
		if err := stream.SendMsg(req); err != nil {
			return nil, err
		}
		return stream, stream.CloseSend()
	}()
	if err != nil {
		r.fail(i, err)
		return
	}
	if !r.readyOnEvent {
		r.markReady(i)
	}
	f := &frame{b: make([]byte, 0, 4096)}
	for {
		if err := stream.RecvMsg(f); err != nil {
			if err == io.EOF {
				err = errors.New("stream ended")
			}
			r.fail(i, err)
			return
		}
		find := protoAnnotation
		if r.newestOnly {
			// a ResourceView's objects are JSON (the default representation) or messages
			find = func(m []byte) ([]byte, bool) {
				if value, ok := newestOf(m, jsonNext); ok {
					return value, true
				}
				return newestOf(m, protoNext)
			}
		}
		if value, ok := find(f.b); ok {
			r.deliver(i, value)
		} else if r.readyOnEvent {
			r.markReady(i)
		}
	}
}

// -- direct: HTTP watches on the upstream ---------------------------------------------------------

func currentResourceVersion(ctx context.Context, client *http.Client, listURL, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, listURL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("list: %s: %.300s", resp.Status, body)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", err
	}
	return list.Metadata.ResourceVersion, nil
}

func (r *run) directWatcher(ctx context.Context, i int, client *http.Client, watchURL, token string, sem chan struct{}) {
	resp, err := func() (*http.Response, error) {
		sem <- struct{}{}
		defer func() { <-sem }()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, watchURL, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			return nil, fmt.Errorf("watch: %s: %s", resp.Status, body)
		}
		r.onClose(func() { resp.Body.Close() })
		return resp, nil
	}()
	if err != nil {
		r.fail(i, err)
		return
	}
	if !r.readyOnEvent {
		r.markReady(i)
	}
	br := bufio.NewReaderSize(resp.Body, 16384)
	var long []byte // a line longer than the buffer (never for a lease)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, line...)
			continue
		}
		if err != nil {
			if err == io.EOF {
				err = errors.New("watch ended")
			}
			r.fail(i, err)
			return
		}
		if long != nil {
			line = append(long, line...)
			long = long[:0]
		}
		if value, ok := jsonAnnotation(line); ok {
			r.deliver(i, value)
		} else if bytes.Contains(line, []byte(`"type":"ERROR"`)) {
			r.fail(i, fmt.Errorf("watch error: %.300s", line))
			return
		} else if r.readyOnEvent {
			r.markReady(i)
		}
	}
}

// -- main -----------------------------------------------------------------------------------------

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func percentile(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(float64(len(sorted))*p+0.999999) - 1
	k = max(0, min(k, len(sorted)-1))
	return float64(sorted[k]) / 1e6
}

func writeLatencies(path string, subs []subscriber) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := range subs {
		for k, lat := range subs[i].lat {
			fmt.Fprintf(w, "%d %d %d\n", i, subs[i].sent[k], lat)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var stdoutMu sync.Mutex

func say(format string, args ...any) {
	stdoutMu.Lock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
	stdoutMu.Unlock()
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ERROR "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	transport := flag.String("transport", "ws", "ws, grpc or direct")
	target := flag.String("target", "", "ws: ws://HOST:PORT/graphql; grpc: HOST:PORT; direct: http://HOST:PORT of the upstream")
	token := flag.String("token", "admin-token", "bearer token")
	ns := flag.String("namespace", "bench", "namespace of the leases")
	labels := flag.String("selector", "bench=fanout", "label selector")
	n := flag.Int("subscribers", 100, "subscriptions to open")
	duration := flag.Duration("duration", 60*time.Second, "record this long after READY (stdin closing ends it sooner)")
	connectTimeout := flag.Duration("connect-timeout", 120*time.Second, "deadline for every subscription to become ready")
	perConn := flag.Int("streams-per-conn", 100, "grpc: streams per HTTP/2 connection")
	dialConcurrency := flag.Int("dial-concurrency", 64, "subscriptions being set up at once")
	readyOn := flag.String("ready-on", "event", "event: a subscription is ready once it delivered an event; connect: once it is set up")
	resourceVersion := flag.String("resource-version", "", "direct: watch from here (default: the current list's)")
	progress := flag.Duration("progress", 0, "print RECEIVED <n> this often while recording (0: never)")
	stdinStop := flag.Bool("stdin-stop", true, "stop recording when stdin reaches EOF")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the recording window to this file")
	view := flag.Bool("view", false, "live views: ws subscribes with --query and --variables, grpc opens WatchView with --view-requests")
	viewQuery := flag.String("query", "", "--view, ws: the GraphQL subscription document")
	viewVariables := flag.String("variables", "[{}]", "--view, ws: a JSON array of variable objects (subscriber i takes element i mod its length)")
	viewRequests := flag.String("view-requests", "", "--view, grpc: a JSON array of WatchViewRequest, each base64 of its binary encoding (subscriber i takes element i mod its length)")
	compression := flag.Bool("compression", false, "ws: offer permessage-deflate (as browsers do)")
	latenciesOut := flag.String("latencies-out", "", "also write every recorded event as \"subscriber sent_unix_ns latency_ns\" lines to this file")
	flag.Parse()

	if *n <= 0 || *target == "" {
		die("need --target and --subscribers > 0")
	}
	if *readyOn != "event" && *readyOn != "connect" {
		die("--ready-on must be event or connect")
	}
	r := newRun(*transport, *n, *readyOn == "event")
	r.keepSent = *latenciesOut != ""
	r.newestOnly = *view
	r.compression = *compression
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := make(chan struct{}, max(1, *dialConcurrency))

	stop := make(chan string, 4)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() { s := <-signals; stop <- "signal " + s.String() }()
	if *stdinStop {
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop <- "stdin closed" }()
	}

	connections := 0
	switch *transport {
	case "ws":
		connections = *n
		payloads := []map[string]any{{"query": query, "variables": map[string]string{"ns": *ns, "labels": *labels}}}
		if *view {
			var vars []map[string]any
			if err := json.Unmarshal([]byte(*viewVariables), &vars); err != nil || len(vars) == 0 || *viewQuery == "" {
				die("--view needs --query and --variables, a non-empty JSON array of objects (%v)", err)
			}
			payloads = payloads[:0]
			for _, v := range vars {
				payloads = append(payloads, map[string]any{"query": *viewQuery, "variables": v})
			}
		}
		for i := range *n {
			go r.wsSubscriber(ctx, i, *target, *token, payloads[i%len(payloads)], sem)
		}
	case "grpc":
		per := max(1, *perConn)
		connections = (*n + per - 1) / per
		method := leaseWatch
		reqs := []proto.Message{&kgv1.WatchLeasesRequest{
			Namespace: *ns, LabelSelector: *labels,
			SendInitialEvents: proto.Bool(false), ResourceVersionMatch: "NotOlderThan",
		}}
		if *view {
			var raws [][]byte // base64 strings in JSON
			if err := json.Unmarshal([]byte(*viewRequests), &raws); err != nil || len(raws) == 0 {
				die("--view over grpc needs --view-requests, a non-empty JSON array (%v)", err)
			}
			method, reqs = watchView, reqs[:0]
			for _, raw := range raws {
				req := &kgv1.WatchViewRequest{}
				if err := proto.Unmarshal(raw, req); err != nil {
					die("--view-requests: %v", err)
				}
				reqs = append(reqs, req)
			}
		}
		sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
		conns := make([]*grpc.ClientConn, connections)
		for c := range conns {
			conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				die("grpc client: %v", err)
			}
			conns[c] = conn
			r.onClose(func() { conn.Close() })
		}
		for i := range *n {
			go r.grpcSubscriber(sctx, i, conns[i/per], method, reqs[i%len(reqs)], sem)
		}
	case "direct":
		connections = *n
		base := strings.TrimRight(*target, "/")
		client := &http.Client{Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   *n + 8,
			DisableCompression:    true,
			ResponseHeaderTimeout: 60 * time.Second,
		}}
		path := base + "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(*ns) + "/leases"
		rv := *resourceVersion
		if rv == "" {
			var err error
			lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
			rv, err = currentResourceVersion(lctx, client, path+"?labelSelector="+url.QueryEscape(*labels), *token)
			lcancel()
			if err != nil {
				die("%v", err)
			}
		}
		q := url.Values{
			"watch": {"1"}, "labelSelector": {*labels}, "resourceVersion": {rv},
			"timeoutSeconds": {"3600"},
		}
		watchURL := path + "?" + q.Encode()
		for i := range *n {
			go r.directWatcher(ctx, i, client, watchURL, *token, sem)
		}
	default:
		die("unknown --transport %q (ws, grpc or direct)", *transport)
	}

	deadline := time.NewTimer(*connectTimeout)
	select {
	case <-r.readyCh:
	case err := <-r.setupErr:
		r.closeAll()
		die("%v (%d of %d ready)", err, r.nready.Load(), *n)
	case <-deadline.C:
		r.closeAll()
		die("only %d of %d subscriptions ready after %s", r.nready.Load(), *n, *connectTimeout)
	case why := <-stop:
		r.closeAll()
		die("%s before every subscription was ready (%d of %d)", why, r.nready.Load(), *n)
	}
	deadline.Stop()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			die("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			die("%v", err)
		}
	}
	cpu0, t0 := cpuSeconds(), time.Now()
	r.recording.Store(true)
	say("READY")
	if *progress > 0 {
		go func() {
			for range time.Tick(*progress) {
				say("RECEIVED %d", r.received.Load())
			}
		}()
	}
	reason := "duration"
	select {
	case <-time.After(*duration):
	case reason = <-stop:
	}
	r.recording.Store(false)
	cpu1, t1 := cpuSeconds(), time.Now()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}

	counts := make([]int64, *n)
	var all []int64
	var firstNs, lastNs int64
	for i := range r.subs {
		s := &r.subs[i]
		s.mu.Lock()
		counts[i] = s.count
		all = append(all, s.lat...)
		if s.count > 0 {
			if firstNs == 0 || s.firstNs < firstNs {
				firstNs = s.firstNs
			}
			lastNs = max(lastNs, s.lastNs)
		}
		s.mu.Unlock()
	}
	r.closeAll()
	cancel()
	if *latenciesOut != "" {
		if err := writeLatencies(*latenciesOut, r.subs); err != nil {
			die("%v", err)
		}
	}
	slices.Sort(all)
	r.errMu.Lock()
	errCount, firstErr := r.errCount, r.firstErr
	r.errMu.Unlock()

	var maxMs float64
	if len(all) > 0 {
		maxMs = float64(all[len(all)-1]) / 1e6
	}
	summary := map[string]any{
		"transport":                *transport,
		"subscribers":              *n,
		"connections":              connections,
		"received":                 len(all),
		"updates":                  r.updates.Load(),
		"per_subscriber_min":       slices.Min(counts),
		"per_subscriber_max":       slices.Max(counts),
		"p50_ms":                   percentile(all, 0.50),
		"p99_ms":                   percentile(all, 0.99),
		"max_ms":                   maxMs,
		"client_cpu_seconds":       cpu1 - cpu0,
		"client_cpu_total_seconds": cpu1,
		"window_seconds":           t1.Sub(t0).Seconds(),
		"first_recv_unix_ns":       firstNs,
		"last_recv_unix_ns":        lastNs,
		"errors":                   errCount,
		"first_error":              firstErr,
		"stopped_by":               reason,
		"gomaxprocs":               runtime.GOMAXPROCS(0),
	}
	out, _ := json.Marshal(summary)
	say("%s", out)
}
