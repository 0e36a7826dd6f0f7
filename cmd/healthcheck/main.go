// Command healthcheck probes HTTP health endpoints and exits 0 when every
// one answers with a 2xx status. The container image ships no shell, curl or
// wget, so container healthchecks run this instead: for instance against a
// NATS server's monitoring port (http://127.0.0.1:8222/healthz) or the
// stand-in model (http://127.0.0.1:8000/health). See docs/deployment.md.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/alecthomas/kong"
)

type cli struct {
	Timeout time.Duration `default:"3s" help:"Give up on each URL after this long."`
	URLs    []string      `arg:"" name:"url" help:"HTTP URL(s) to GET; each must answer 2xx."`
}

func main() {
	var c cli
	kong.Parse(&c, kong.Description("rollfleet health probe for container healthchecks"))
	if err := probeAll(context.Background(), http.DefaultClient, c.URLs, c.Timeout); err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		os.Exit(1)
	}
}

// probeAll GETs each URL in turn and returns the first failure.
func probeAll(ctx context.Context, client *http.Client, urls []string, timeout time.Duration) error {
	for _, u := range urls {
		if err := probe(ctx, client, u, timeout); err != nil {
			return err
		}
	}
	return nil
}

// probe GETs url and wants a 2xx status within timeout.
func probe(ctx context.Context, client *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}
