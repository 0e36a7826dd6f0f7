package cmdutil

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/bus/bustest"
)

// TestCommandsRefuseOldServer runs each command that connects to a fleet
// against a real nats-server older than the fleet supports: each exits at
// once, non-zero, naming the server's version and the minimum, rather than
// reporting ready and failing later on a feature the server lacks.
func TestCommandsRefuseOldServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	url, version := bustest.RunOldServer(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "../../collector", "../../envworker", "../../llmworker", "../../rollout")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"collector", "--nats", url},
		{"envworker", "--nats", url},
		{"llmworker", "--nats", url, "--vllm", "http://127.0.0.1:9"},
		{"rollout", "run", "--nats", url, "--env", "game:GuessTheNumber-v0", "--episodes", "1"},
		{"rollout", "consume", "--nats", url, "--kind", "groups", "--out", "-"},
		{"rollout", "status", "--nats", url},
	} {
		name := args[0]
		if name == "rollout" {
			name += "_" + args[1]
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Far longer than a refusal takes, far shorter than a run's wait.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, args[0]), args[1:]...)
			cmd.Dir = t.TempDir() // rollout run's default --out is relative
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("still running after 20 s against nats-server %s:\n%s", version, out)
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("exit: %v, want a non-zero exit\n%s", err, out)
			}
			for _, want := range []string{"too old", version, bus.MinServerVersion} {
				if !strings.Contains(string(out), want) {
					t.Errorf("output does not name %q:\n%s", want, out)
				}
			}
		})
	}
}
