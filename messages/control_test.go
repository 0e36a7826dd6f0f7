package messages

import (
	"errors"
	"strings"
	"testing"
)

func TestControlMessagesValidate(t *testing.T) {
	okState := PolicyState{V: Version, Epoch: 2, Version: 3, Paused: true, OnPause: OnPauseAbort}
	okStatus := WorkerStatus{V: Version, Kind: WorkerLLM, ID: "llm-1", Endpoints: []EndpointStatus{{URL: "http://m:8000", Healthy: true, Max: 64}}}
	for _, tc := range []struct {
		name  string
		v     interface{ Validate() error }
		field string // "" for a valid message
	}{
		{"valid state", &okState, ""},
		{"valid status", &okStatus, ""},
		{"negative version", &PolicyState{V: Version, Version: -1}, "version"},
		{"on_pause without a pause", &PolicyState{V: Version, OnPause: OnPauseFinish}, "on_pause"},
		{"unknown on_pause", &PolicyState{V: Version, Paused: true, OnPause: "later"}, "on_pause"},
		{"unknown kind", &WorkerStatus{V: Version, Kind: "gpu", ID: "x"}, "kind"},
		{"no id", &WorkerStatus{V: Version, Kind: WorkerEnv}, "id"},
		{"negative in flight", &WorkerStatus{V: Version, Kind: WorkerEnv, ID: "e", InFlight: -1}, "in_flight"},
		{"endpoint without url", &WorkerStatus{V: Version, Kind: WorkerLLM, ID: "l", Endpoints: []EndpointStatus{{Max: 1}}}, "endpoints[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.v.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !strings.Contains(err.Error(), "."+tc.field) {
				t.Fatalf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
}
