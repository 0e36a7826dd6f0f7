// Package deploy holds rollfleet's deployment files: the compose example
// (compose/), the Kubernetes example (kubernetes/) and the systemd units
// (systemd/), with the repository's Dockerfile. It has no code; its tests
// check those files against the binaries they run, without a container
// engine: the YAML parses, every command line parses with the binaries'
// own flag parser, the NATS configuration parses with nats-server's parser
// and matches examples/nats/auth.conf, the three examples agree with each
// other, and the compose fleet runs end to end as local processes. See
// docs/deployment.md.
package deploy
