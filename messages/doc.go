// Package messages defines rollfleet's NATS wire types, the subjects they travel on, their
// validation and their codec.
//
// Every message is msgpack-encoded with short, stable field tags and carries a version byte V
// (always [Version] when built by this package's users). Unknown fields are ignored on decode, so
// a field can be added without a version bump; V changes only when a field changes meaning.
// Token ids and log-probabilities travel as one packed little-endian bin value per slice rather
// than as msgpack arrays: this is both smaller and an order of magnitude faster to encode and decode.
//
// Producers build a message, optionally call Validate, and publish [Marshal]'s bytes; consumers
// call [Decode], which bounds the input, checks that it is well-formed msgpack, decodes it and
// validates it, so a handler only ever sees messages that satisfy the rules documented on each
// Validate method.
//
// [Trajectory] is also the JSONL record for trainers: its JSON field names and shapes are
// OpenRLHF's (observation_tokens, action_ranges as [start, end] pairs, rollout_log_probs, reward,
// scores, extra_logs, truncated).
package messages
