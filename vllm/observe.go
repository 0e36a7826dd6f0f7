package vllm

import "time"

// Observer receives the duration of each completion and tokenize call of one
// Client, failed calls included, with the error they ended with. Its
// methods must be cheap and safe for concurrent use.
type Observer interface {
	Completed(d time.Duration, err error)
	Tokenized(d time.Duration, err error)
}
