package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("GET /down", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "JetStream not current", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	if err := probeAll(ctx, srv.Client(), []string{srv.URL + "/ok", srv.URL + "/ok"}, time.Second); err != nil {
		t.Fatalf("healthy endpoints: %v", err)
	}
	err := probeAll(ctx, srv.Client(), []string{srv.URL + "/ok", srv.URL + "/down"}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "JetStream not current") {
		t.Fatalf("503 endpoint: want an error with status and body, got %v", err)
	}
	if err := probe(ctx, srv.Client(), srv.URL+"/slow", 50*time.Millisecond); err == nil {
		t.Fatal("slow endpoint: want a timeout")
	}
	if err := probe(ctx, srv.Client(), "http://127.0.0.1:1/none", time.Second); err == nil {
		t.Fatal("closed port: want an error")
	}
}
