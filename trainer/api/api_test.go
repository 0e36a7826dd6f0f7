package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/trainer"
	"github.com/rollfleet/rollfleet/trainer/api"
)

// startAPI serves the API of a standing fleet over real HTTP.
func startAPI(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	f, err := fleet.StartStanding(ctx, fleet.Options{DataDir: filepath.Join(t.TempDir(), "nats"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	nc, err := f.Connect("trainer-api")
	if err != nil {
		t.Fatal(err)
	}
	c, err := trainer.New(nc, trainer.Options{PollInterval: 200 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(c, api.Options{MaxBodyBytes: 1 << 16, Logger: log}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: content type %q, body %s", method, url, ct, data)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, url, err, data)
	}
	return resp.StatusCode, v
}

// stream reads a result stream's lines.
func stream(t *testing.T, url string) []map[string]json.RawMessage {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, data)
	}
	var lines []map[string]json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var line map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// Submit a batch, stream its groups, acknowledge them: the next stream has
// nothing but the end.
func TestSubmitStreamAck(t *testing.T) {
	url := startAPI(t)
	status, sub := do(t, "POST", url+"/v1/batches", `{"env": "game:GuessTheNumber-v0-easy", "episodes": 8, "n": 4, "seed": 1, "sampling": {"temperature": 1, "max_tokens": 64}}`)
	if status != http.StatusCreated || sub["episodes"] != 8.0 || sub["groups"] != 2.0 || sub["submit_version"] != 0.0 {
		t.Fatalf("submit: %d %v", status, sub)
	}
	id := sub["batch_id"].(string)
	lines := stream(t, url+"/v1/batches/"+id+"/groups")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 2 groups and the end: %v", len(lines), lines)
	}
	var acks []string
	for _, line := range lines[:2] {
		var ack string
		var g struct {
			GroupID      string            `json:"group_id"`
			Env          string            `json:"env"`
			MeanScore    *float64          `json:"mean_score"`
			Trajectories []json.RawMessage `json:"trajectories"`
		}
		if err := json.Unmarshal(line["ack"], &ack); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(line["group"], &g); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(ack, "$JS.ACK.") || !strings.HasPrefix(g.GroupID, id) || g.MeanScore == nil || len(g.Trajectories) != 4 {
			t.Fatalf("line %v", line)
		}
		var tr map[string]json.RawMessage
		if err := json.Unmarshal(g.Trajectories[0], &tr); err != nil {
			t.Fatal(err)
		}
		for _, field := range []string{"observation_tokens", "action_ranges", "rollout_log_probs", "reward"} {
			if _, ok := tr[field]; !ok {
				t.Errorf("trajectory without %s", field)
			}
		}
		acks = append(acks, ack)
	}
	var end trainer.Progress
	if err := json.Unmarshal(mustJSON(t, lines[2]), &end); err != nil {
		t.Fatal(err)
	}
	if !end.Done || end.Decided != 8 || end.GroupsDelivered != 2 || end.Delivered != 2 {
		t.Fatalf("end line %+v", end)
	}
	body, _ := json.Marshal(api.AckRequest{Acks: acks})
	if status, v := do(t, "POST", url+"/v1/batches/"+id+"/ack", string(body)); status != http.StatusOK || v["acked"] != 2.0 {
		t.Fatalf("ack: %d %v", status, v)
	}
	again := stream(t, url+"/v1/batches/"+id+"/groups?wait=10s")
	if len(again) != 1 || string(again[0]["done"]) != "true" {
		t.Fatalf("after the acks: %v", again)
	}
	// A poll that ends before the batch is complete says so.
	status, sub = do(t, "POST", url+"/v1/batches", `{"env": "game:GuessTheNumber-v0-easy", "episodes": 2, "seed": 2}`)
	if status != http.StatusCreated {
		t.Fatalf("submit: %d %v", status, sub)
	}
	polled := stream(t, url+"/v1/batches/"+sub["batch_id"].(string)+"/trajectories?max=1")
	if len(polled) != 2 || polled[0]["trajectory"] == nil || string(polled[1]["done"]) != "false" {
		t.Fatalf("poll of one: %v", polled)
	}
	status, st := do(t, "GET", url+"/v1/status", "")
	if status != http.StatusOK || len(st["batches"].([]any)) != 2 || len(st["workers"].([]any)) < 2 {
		t.Fatalf("status: %d %v", status, st)
	}
	if status, v := do(t, "DELETE", url+"/v1/batches/"+id, ""); status != http.StatusOK {
		t.Fatalf("close: %d %v", status, v)
	}
	if status, v := do(t, "GET", url+"/v1/batches/"+id+"/groups", ""); status != http.StatusNotFound || !strings.Contains(v["error"].(string), id) {
		t.Fatalf("stream of a closed batch: %d %v", status, v)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Pause (returning once drained) and resume under a new version; a version
// going backwards is refused.
func TestPauseResume(t *testing.T) {
	url := startAPI(t)
	status, st := do(t, "POST", url+"/v1/pause", `{"on_pause": "finish"}`)
	if status != http.StatusOK || st["paused"] != true || st["on_pause"] != "finish" {
		t.Fatalf("pause: %d %v", status, st)
	}
	if status, st = do(t, "GET", url+"/v1/state", ""); status != http.StatusOK || st["paused"] != true {
		t.Fatalf("state: %d %v", status, st)
	}
	if status, st = do(t, "POST", url+"/v1/resume", `{"version": 3}`); status != http.StatusOK || st["paused"] != false || st["version"] != 3.0 {
		t.Fatalf("resume: %d %v", status, st)
	}
	if status, st = do(t, "POST", url+"/v1/resume", `{"version": 2}`); status != http.StatusConflict || !strings.Contains(st["error"].(string), "older") {
		t.Fatalf("resume backwards: %d %v", status, st)
	}
	// Episodes submitted now carry the version.
	status, sub := do(t, "POST", url+"/v1/batches", `{"env": "game:GuessTheNumber-v0-easy", "episodes": 1}`)
	if status != http.StatusCreated || sub["submit_version"] != 3.0 {
		t.Fatalf("submit: %d %v", status, sub)
	}
	if status, v := do(t, "GET", url+"/healthz", ""); status != http.StatusOK || v["ok"] != true {
		t.Fatalf("healthz: %d %v", status, v)
	}
}

// Bad input is a 4xx with a JSON error naming what is wrong.
func TestBadInput(t *testing.T) {
	url := startAPI(t)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"not JSON", "POST", "/v1/batches", `{"env": `, 400, "bad request body"},
		{"unknown field", "POST", "/v1/batches", `{"env": "game:GuessTheNumber-v0", "episodes": 4, "sampels": 4}`, 400, "sampels"},
		{"two objects", "POST", "/v1/batches", `{"episodes": 4} {}`, 400, "after the JSON object"},
		{"unknown env", "POST", "/v1/batches", `{"env": "game:NoSuch-v0", "episodes": 4}`, 400, "game:NoSuch-v0"},
		{"not a multiple", "POST", "/v1/batches", `{"env": "game:GuessTheNumber-v0", "episodes": 6, "n": 4}`, 400, "episodes 6 is not a multiple of n 4"},
		{"bad row", "POST", "/v1/batches", `{"env": "math", "rows": [{"question": "1+1?", "expected_answer": "2"}, {"question": "2+2?"}]}`, 400, "rows[1]"},
		{"row env", "POST", "/v1/batches", `{"rows": [{"prompt": "p", "env": "game:Nope"}]}`, 400, "rows[0].env"},
		{"stale policy", "POST", "/v1/batches", `{"env": "game:GuessTheNumber-v0", "episodes": 1, "stale_policy": "sometimes"}`, 400, "stale_policy"},
		{"bad id", "POST", "/v1/batches", `{"id": "a b", "env": "game:GuessTheNumber-v0", "episodes": 1}`, 400, "id"},
		{"too large", "POST", "/v1/batches", `{"env": "` + strings.Repeat("x", 1<<17) + `"}`, 413, "larger than"},
		{"unknown batch", "GET", "/v1/batches/nosuch/groups", "", 404, "nosuch"},
		{"bad wait", "GET", "/v1/batches/nosuch/groups?wait=soon", "", 400, "wait"},
		{"bad max", "GET", "/v1/batches/nosuch/failures?max=-1", "", 400, "max"},
		{"bad token", "POST", "/v1/batches/nosuch/ack", `{"acks": ["$JS.ACK.RF_GROUPS.other-consumer.1.2.3.4.5"]}`, 400, "acks[0]"},
		{"on_pause", "POST", "/v1/pause", `{"on_pause": "later"}`, 400, "on_pause"},
		{"resume without a version", "POST", "/v1/resume", `{}`, 400, "version"},
		{"no endpoint", "GET", "/v2/things", "", 404, "no endpoint"},
		{"wrong method", "GET", "/v1/pause", "", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, v := do(t, tc.method, url+tc.path, tc.body)
			msg, _ := v["error"].(string)
			if tc.name == "wrong method" {
				if status < 400 || msg == "" {
					t.Fatalf("%d %v", status, v)
				}
				return
			}
			if status != tc.status || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %q, want %d naming %q", status, msg, tc.status, tc.want)
			}
		})
	}
}
