package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/rollfleet/rollfleet/actors/llm"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/gateway"
	"github.com/rollfleet/rollfleet/toyllm"
)

// Example runs the whole path in one process — an embedded NATS server, the stand-in model
// server, an LLM worker and the gateway — then holds a two-turn chat as an agent would, with
// plain JSON over HTTP, and finishes the session with a reward.
func Example() {
	quiet := slog.New(slog.DiscardHandler)
	dir, _ := os.MkdirTemp("", "gateway-example")
	defer os.RemoveAll(dir)
	srv, err := bus.StartServer(bus.ServerOptions{DontListen: true, DataDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer bus.Shutdown(srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	modelURL, stopModel, _ := toyllm.New(toyllm.Options{Logger: quiet}).Start(ctx, "127.0.0.1:0")
	defer stopModel()
	workerConn, _ := bus.ConnectInProcess(srv, "llm")
	defer workerConn.Close()
	worker, _ := llm.New(workerConn, llm.Options{Endpoints: []string{modelURL}, Logger: quiet})
	workerDone := make(chan error, 1)
	go func() { workerDone <- worker.Run(ctx) }()
	defer func() { cancel(); <-workerDone }()

	gwConn, _ := bus.ConnectInProcess(srv, "gateway")
	defer gwConn.Close()
	gw, _ := gateway.New(gwConn, gateway.Options{Logger: quiet})
	url, stop, err := gw.Start(ctx, "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	post := func(path string, body any) map[string]any {
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(data))
		req.Header.Set(gateway.HeaderSessionID, "episode-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return map[string]any{"error": err.Error()}
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return out
	}

	history := []map[string]string{{"role": "user", "content": "Guess the number between 1 and 20 in \\boxed{}."}}
	for turn := range 2 {
		out := post("/v1/chat/completions", map[string]any{
			"messages": history, "max_tokens": 64, "seed": turn, "logprobs": true,
			"return_tokens_as_token_ids": true, "return_token_ids": true,
		})
		if out["choices"] == nil {
			fmt.Println(out)
			return
		}
		msg := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		history = append(history,
			map[string]string{"role": "assistant", "content": msg["content"].(string)},
			map[string]string{"role": "user", "content": "Higher."})
	}
	fin := post("/v1/sessions/episode-1/finish", map[string]any{"reward": 1})
	seg := fin["segments"].([]any)[0].(map[string]any)
	fmt.Println(fin["status"], fin["subject"], seg["episode_id"], seg["turns"], seg["drift"])
	// Output: finished rf.trajectories.gateway.gateway episode-1 2 false
}
