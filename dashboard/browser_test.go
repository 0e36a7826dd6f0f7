package dashboard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"

	"github.com/rollfleet/rollfleet/dashboard"
	"github.com/rollfleet/rollfleet/fleet"
	"github.com/rollfleet/rollfleet/toyllm"
)

// findChromium returns the headless browser to test with: $ROLLFLEET_CHROMIUM,
// or the first of Debian's chromium and its usual other names on the PATH.
// The test is skipped without one.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ROLLFLEET_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium binary found (install Debian's chromium package, or set ROLLFLEET_CHROMIUM): the browser test is skipped")
	return ""
}

// cdp is a minimal client of the Chrome DevTools Protocol over one page's
// websocket: commands in order, events ignored.
type cdp struct {
	ws *websocket.Conn
	mu sync.Mutex
	id int64
}

// call sends method with params and decodes the result into result (nil:
// discard).
func (c *cdp) call(ctx context.Context, method string, params, result any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id++
	msg, err := json.Marshal(map[string]any{"id": c.id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		return fmt.Errorf("cdp %s: %w", method, err)
	}
	for {
		_, data, err := c.ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("cdp %s: %w", method, err)
		}
		var reply struct {
			ID     int64           `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &reply); err != nil {
			return fmt.Errorf("cdp %s: %w", method, err)
		}
		if reply.ID != c.id {
			continue // an event, or the reply of an abandoned call
		}
		if reply.Error != nil {
			return fmt.Errorf("cdp %s: %s", method, reply.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(reply.Result, result)
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value.
func (c *cdp) eval(ctx context.Context, expr string, v any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := c.call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("evaluate %s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	return json.Unmarshal(r.Result.Value, v)
}

// screenshot saves the whole page, 1280 pixels wide, as a PNG file.
func (c *cdp) screenshot(ctx context.Context, path string) error {
	var height int
	if err := c.eval(ctx, "document.documentElement.scrollHeight", &height); err != nil {
		return err
	}
	height = max(height, 900)
	if err := c.call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		return err
	}
	var shot struct {
		Data string `json:"data"`
	}
	if err := c.call(ctx, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1}}, &shot); err != nil {
		return err
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		return err
	}
	return os.WriteFile(path, png, 0o644)
}

// startBrowser starts headless Chromium with the DevTools protocol on a
// free port, opens url and returns a client of its page. The browser is
// stopped when the test ends.
func startBrowser(t *testing.T, ctx context.Context, chromium, url string) *cdp {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.Command(chromium, "--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
		"--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--user-data-dir="+profile,
		"--window-size=1280,900", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	// The browser writes its port to DevToolsActivePort once it listens.
	var port string
	waitFor(t, ctx, "the browser's DevTools port", func() (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("%s exited: %s", chromium, stderr.String())
		default:
		}
		b, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if err != nil {
			return false, nil
		}
		port, _, _ = strings.Cut(string(b), "\n")
		return port != "", nil
	})
	var wsURL string
	waitFor(t, ctx, "the page target", func() (bool, error) {
		resp, err := http.Get("http://127.0.0.1:" + port + "/json/list")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		if err := json.NewDecoder(resp.Body).Decode(&targets); err != nil {
			return false, nil
		}
		for _, tg := range targets {
			if tg.Type == "page" && strings.HasPrefix(tg.URL, url) {
				wsURL = tg.WebSocketDebuggerURL
			}
		}
		return wsURL != "", nil
	})
	ws, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("devtools websocket: %v", err)
	}
	ws.SetReadLimit(64 << 20) // screenshots
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &cdp{ws: ws}
}

// waitFor calls cond until it reports true, failing the test when it
// returns an error or ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// pageFigures are the figures the page shows, as text.
type pageFigures struct {
	Updates      string `json:"updates"`
	Episodes     string `json:"episodes"`
	Trajectories string `json:"trajectories"`
	Failures     string `json:"failures"`
	SuccessRate  string `json:"success_rate"`
	MeanReward   string `json:"mean_reward"`
	Turns        string `json:"turns"`
	Tokens       string `json:"tokens"`
	Workers      int    `json:"workers"`
	WorkersOK    int    `json:"workers_ok"`
	EndpointsOK  int    `json:"endpoints_ok"`
	Streams      int    `json:"streams"`
	FailureKinds string `json:"failure_kinds"`
	Envs         int    `json:"envs"`
}

const readFigures = `(() => {
  if (document.readyState !== 'complete' || !document.getElementById('episodes')) return null;
  const text = (id) => document.getElementById(id).textContent;
  const rows = (id) => document.querySelectorAll('#' + id + ' tr:not(:has(td.note))');
  return {
    updates: document.body.dataset.updates || '0',
    episodes: text('episodes'), trajectories: text('trajectories'), failures: text('failures'),
    success_rate: text('success-rate'), mean_reward: text('mean-reward'), turns: text('turns'), tokens: text('tokens'),
    workers: rows('workers').length,
    workers_ok: document.querySelectorAll('#workers td.health-ok').length,
    endpoints_ok: document.querySelectorAll('#endpoints td.health-ok').length,
    streams: rows('streams').length,
    failure_kinds: [...rows('failure-kinds')].map((r) => r.cells[0].textContent + '=' + r.cells[1].textContent).join(' '),
    envs: rows('envs').length,
  };
})()`

// read reads the page's figures into fig, reporting false while the page
// is still loading.
func (c *cdp) read(ctx context.Context, fig *pageFigures) (bool, error) {
	var f *pageFigures
	if err := c.eval(ctx, readFigures, &f); err != nil || f == nil {
		return false, err
	}
	*fig = *f
	return true, nil
}

// count parses a count as the page shows it ("1,234").
func count(s string) int {
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		return -1
	}
	return n
}

// TestBrowser runs a job with the dashboard attached as rollout run
// --dashboard attaches it, opens the page in headless Chromium, waits until
// the page shows the whole run (live, over its event stream) with the
// fleet's workers and streams, checks the page's figures against the run's
// own summary and the snapshot, and saves a screenshot: in the test's
// artifact directory (go test -artifacts), or at
// $ROLLFLEET_DASHBOARD_SCREENSHOT.
func TestBrowser(t *testing.T) {
	chromium := findChromium(t)
	if testing.Short() {
		t.Skip("a browser and a fleet: not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	d := dashboard.New(dashboard.Options{Step: 250 * time.Millisecond, Push: 250 * time.Millisecond, Poll: 250 * time.Millisecond})
	srv, err := dashboard.Listen(d, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	}()
	page := startBrowser(t, ctx, chromium, srv.URL())

	// Three envs: GuessTheNumber and Mastermind play; Minesweeper's first
	// prompt does not fit the 1024-token budget, so its episodes fail
	// (prompt_too_long).
	const episodes = 90
	seed := uint64(3)
	// The run holds its end (its actors still up) until the page has been
	// checked, so the workers answer the dashboard's status requests.
	allDone, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	type result struct {
		sum fleet.Summary
		err error
	}
	ran := make(chan result, 1)
	dataDir := t.TempDir()
	go func() {
		sum, err := fleet.Run(ctx, fleet.Options{
			Env: "game:GuessTheNumber-v0,game:Mastermind-v0-easy,game:Minesweeper-v0-easy", Episodes: episodes, Seed: &seed,
			MaxLength: 1024, MaxTokens: 64, Concurrency: 8, DataDir: dataDir,
			ToyLLM: toyllm.Options{TokenLatency: 200 * time.Microsecond},
			Attach: func(connect func(string) (*nats.Conn, error)) (func(), error) {
				nc, err := connect("dashboard")
				if err != nil {
					return nil, err
				}
				return d.Watch(nc)
			},
			Progress: func(done, total int) {
				if done == total {
					once.Do(func() { close(allDone) })
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
			},
		})
		ran <- result{sum, err}
	}()
	// On a failure, the run ends with ctx before the test returns.
	finished := false
	defer func() {
		if !finished {
			cancel()
			<-ran
		}
	}()

	// Live data while the run goes on: the first episodes appear.
	var fig pageFigures
	waitFor(t, ctx, "the first episodes on the page", func() (bool, error) {
		ok, err := page.read(ctx, &fig)
		return ok && count(fig.Episodes) > 0, err
	})
	t.Logf("live: %s episodes shown after %s updates", fig.Episodes, fig.Updates)

	select {
	case <-allDone:
	case r := <-ran:
		finished = true
		t.Fatalf("the run ended before its last episode: %v", r.err)
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	// The whole run, the workers that answered, the model endpoint and the
	// streams.
	waitFor(t, ctx, "the whole run on the page", func() (bool, error) {
		ok, err := page.read(ctx, &fig)
		return ok && count(fig.Episodes) == episodes && fig.WorkersOK >= 2 && fig.EndpointsOK >= 1 && fig.Streams >= 5 && fig.Envs == 3, err
	})
	// The page keeps updating: a few more snapshots arrive.
	before := count(fig.Updates)
	waitFor(t, ctx, "further updates", func() (bool, error) {
		ok, err := page.read(ctx, &fig)
		return ok && count(fig.Updates) >= before+2, err
	})
	path := filepath.Join(t.ArtifactDir(), "dashboard.png")
	if p := os.Getenv("ROLLFLEET_DASHBOARD_SCREENSHOT"); p != "" {
		path = p
	}
	if err := page.screenshot(ctx, path); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	t.Logf("screenshot: %s", path)
	snap := getSnapshot(t, srv.URL())

	close(release)
	r := <-ran
	finished = true
	if r.err != nil {
		t.Fatalf("run: %v", r.err)
	}
	sum := r.sum
	t.Logf("run: %s", sum)

	// The page's figures are the run's own.
	want := pageFigures{
		Episodes:     strconv.Itoa(sum.Trajectories + sum.Failures),
		Trajectories: strconv.Itoa(sum.Trajectories),
		Failures:     strconv.Itoa(sum.Failures),
		SuccessRate:  fmt.Sprintf("%.3f", sum.SuccessRate()),
		MeanReward:   fmt.Sprintf("%.4f", sum.MeanReward()),
		Turns:        fmt.Sprintf("%d", sum.Turns),
		Tokens:       fmt.Sprintf("%d", sum.Tokens),
	}
	got := pageFigures{
		Episodes: strconv.Itoa(count(fig.Episodes)), Trajectories: strconv.Itoa(count(fig.Trajectories)),
		Failures: strconv.Itoa(count(fig.Failures)), SuccessRate: fig.SuccessRate, MeanReward: fig.MeanReward,
		Turns: strconv.Itoa(count(fig.Turns)), Tokens: strconv.Itoa(count(fig.Tokens)),
	}
	if got != want {
		t.Fatalf("the page shows %+v, the run counted %+v", got, want)
	}
	if sum.Failures == 0 || sum.Trajectories == 0 {
		t.Fatalf("the run should have trajectories and failures: %s", sum)
	}
	if wantKinds := fmt.Sprintf("prompt_too_long=%d", sum.FailureKinds["prompt_too_long"]); fig.FailureKinds != wantKinds {
		t.Fatalf("failure kinds on the page %q, want %q", fig.FailureKinds, wantKinds)
	}
	// And the snapshot's.
	if snap.Totals.Trajectories != int64(sum.Trajectories) || snap.Totals.Failures != int64(sum.Failures) ||
		snap.Totals.Turns != int64(sum.Turns) || snap.Totals.Tokens != int64(sum.Tokens) || snap.Totals.ActionTokens != int64(sum.ActionTokens) {
		t.Fatalf("snapshot totals %+v, run %s", snap.Totals, sum)
	}
	for _, e := range snap.Envs {
		es := sum.PerEnv[e.Env]
		if es == nil || e.Trajectories != int64(es.Trajectories) || e.Failures != int64(es.Failures) || e.Successes != int64(es.Successes) {
			t.Fatalf("env %s: snapshot %+v, run %+v", e.Env, e.Totals, es)
		}
	}
}

func getSnapshot(t *testing.T, base string) dashboard.Snapshot {
	t.Helper()
	resp, err := http.Get(base + "api/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s dashboard.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("decode snapshot: %v", err)
	}
	return s
}
