// Command kg-burst is the load client of the views benchmark's bursts (tests/bench/bench_views.py):
// concurrent GraphQL POSTs, each with its own variables, all started at once, so that the
// gateway, not the client, is what the burst measures.
//
//	kg-burst URL TOKEN QUERY NAMESPACE WARM_JSON VALUES_JSON
//
// WARM_JSON and VALUES_JSON are JSON arrays of strings; each value v is one request
// {"query": QUERY, "variables": {"ns": NAMESPACE, "v": v}} to URL/graphql with
// "Authorization: Bearer TOKEN".
//
// Protocol on stdout (the driver's):
//
//	ready            the WARM_JSON requests were answered, all at once (their connections
//	                 stay open for the burst)
//	[ms, ms, ...]    after a line on stdin: the VALUES_JSON requests, all at once; each one's
//	                 latency in milliseconds, in the order of VALUES_JSON
//
// An answer that is not 200 or carries "errors" is reported on stderr ("ERROR ...") with exit
// status 1.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

type request struct {
	Query     string            `json:"query"`
	Variables map[string]string `json:"variables"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ERROR "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 7 {
		fail("usage: kg-burst URL TOKEN QUERY NAMESPACE WARM_JSON VALUES_JSON")
	}
	url, token, query, ns := os.Args[1]+"/graphql", os.Args[2], os.Args[3], os.Args[4]
	var warm, values []string
	if err := json.Unmarshal([]byte(os.Args[5]), &warm); err != nil {
		fail("WARM_JSON: %v", err)
	}
	if err := json.Unmarshal([]byte(os.Args[6]), &values); err != nil {
		fail("VALUES_JSON: %v", err)
	}
	most := max(len(warm), len(values))
	client := &http.Client{
		Timeout: 10 * time.Minute,
		Transport: &http.Transport{
			MaxIdleConns:        most,
			MaxIdleConnsPerHost: most,
			MaxConnsPerHost:     most,
			IdleConnTimeout:     10 * time.Minute,
		},
	}
	bodies := func(vs []string) [][]byte {
		out := make([][]byte, len(vs))
		for i, v := range vs {
			b, err := json.Marshal(request{query, map[string]string{"ns": ns, "v": v}})
			if err != nil {
				fail("encode: %v", err)
			}
			out[i] = b
		}
		return out
	}
	ask := func(body []byte) float64 {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			fail("request: %v", err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		started := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			fail("post: %v", err)
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := float64(time.Since(started).Microseconds()) / 1000
		if err != nil {
			fail("read: %v", err)
		}
		if resp.StatusCode != http.StatusOK || bytes.Contains(answer, []byte(`"errors"`)) {
			fail("status %d: %.300s", resp.StatusCode, answer)
		}
		return took
	}
	burst := func(all [][]byte) []float64 {
		times := make([]float64, len(all))
		var start, done sync.WaitGroup
		start.Add(1)
		for i, body := range all {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				times[i] = ask(body)
			}()
		}
		start.Done()
		done.Wait()
		return times
	}
	warmBodies, valueBodies := bodies(warm), bodies(values)
	burst(warmBodies)
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail("stdin: %v", err)
	}
	out, err := json.Marshal(burst(valueBodies))
	if err != nil {
		fail("encode: %v", err)
	}
	fmt.Println(string(out))
}
