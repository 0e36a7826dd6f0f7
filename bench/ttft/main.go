// Command ttft measures what streaming costs through a running gateway: the time to the first
// byte of streamed chat completions against the whole time of the same calls unstreamed,
// alternating, with their p50 and p99.
//
//	go run ./bench/ttft -url http://127.0.0.1:8080 -n 200 -max-tokens 64
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "gateway base URL")
	n := flag.Int("n", 200, "calls of each kind")
	maxTokens := flag.Int("max-tokens", 64, "tokens a call generates (ignore_eos)")
	logprobs := flag.Bool("logprobs", false, "ask for logprobs")
	flag.Parse()
	if err := run(*url, *n, *maxTokens, *logprobs); err != nil {
		fmt.Fprintln(os.Stderr, "ttft:", err)
		os.Exit(1)
	}
}

func run(url string, n, maxTokens int, logprobs bool) error {
	var plain, first, whole []time.Duration
	for i := range n {
		for _, stream := range []bool{false, true} {
			fb, total, err := call(url, i, maxTokens, logprobs, stream)
			if err != nil {
				return err
			}
			if stream {
				first, whole = append(first, fb), append(whole, total)
			} else {
				plain = append(plain, total)
			}
		}
	}
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"unstreamed total", plain}, {"streamed first byte", first}, {"streamed total", whole}} {
		fmt.Printf("%-20s p50 %8v  p99 %8v\n", r.name, quantile(r.d, 0.5), quantile(r.d, 0.99))
	}
	return nil
}

// call makes one chat completion and times its first byte and its whole answer.
func call(url string, i, maxTokens int, logprobs, stream bool) (first, total time.Duration, err error) {
	body, err := json.Marshal(map[string]any{"messages": []map[string]any{{"role": "user", "content": fmt.Sprintf("Paris %d", i)}},
		"max_tokens": maxTokens, "seed": i, "stream": stream, "logprobs": logprobs, "ignore_eos": true})
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return 0, 0, err
	}
	first = time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	total = time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %s%s", resp.StatusCode, b, rest)
	}
	return first, total, err
}

func quantile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Microsecond)
}
