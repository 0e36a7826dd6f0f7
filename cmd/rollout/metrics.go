package main

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/metrics"
)

// watchNATS makes m's readiness follow nc and the streams of subj, and adds
// the streams' metrics (nothing for a nil m).
func watchNATS(m *metrics.Metrics, nc *nats.Conn, subj messages.Subjects) error {
	if m == nil {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	m.WatchNATS(nc, js, subj)
	return nil
}
