package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollfleet/rollfleet/vllm"
)

// Model check errors, matched with errors.Is.
var (
	// ErrNoModelServer: none of the model servers answered before the run.
	ErrNoModelServer = errors.New("fleet: no model server answers")
	// ErrModelNotServed: a model server answers but does not serve the
	// model the run asks for.
	ErrModelNotServed = errors.New("fleet: model not served")
)

// defaultModelCheckTimeout bounds each model server's check.
const defaultModelCheckTimeout = 10 * time.Second

// CheckModels asks every model server, at once, for its models (GET
// /v1/models); a server without that endpoint passes if GET /health answers
// and model names the model (its name cannot be checked then). It returns
// nil when at least one server answers and none serves other models than
// model (empty: any), logging the servers that do not answer. Otherwise the
// error wraps ErrNoModelServer or ErrModelNotServed and names each URL and
// what went wrong with it. Each check is bounded by timeout (0: 10s).
func CheckModels(ctx context.Context, urls []string, model string, timeout time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if timeout <= 0 {
		timeout = defaultModelCheckTimeout
	}
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			errs[i] = checkModel(cctx, u, model)
		})
	}
	wg.Wait()
	var down, wrong []string
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrModelNotServed):
			wrong = append(wrong, err.Error())
		default:
			down = append(down, err.Error())
		}
	}
	switch {
	case len(wrong) > 0:
		return fmt.Errorf("%w: %s", ErrModelNotServed, strings.Join(wrong, "; "))
	case len(down) == len(urls):
		return fmt.Errorf("%w (%d checked): %s", ErrNoModelServer, len(urls), strings.Join(down, "; "))
	}
	for _, d := range down {
		log.Warn("model server does not answer; the run goes on with the others", "server", d)
	}
	return nil
}

// checkModel checks one server: nil, an error wrapping ErrModelNotServed,
// or why it does not answer; each error names url.
func checkModel(ctx context.Context, url, model string) error {
	c, err := vllm.New(url, vllm.Options{Model: model})
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	models, err := c.Models(ctx)
	if err == nil {
		ids := make([]string, len(models))
		for i, m := range models {
			ids[i] = m.ID
		}
		switch {
		case len(ids) == 0:
			return fmt.Errorf("%s lists no models", url)
		case model != "" && !slices.Contains(ids, model):
			return fmt.Errorf("%w: %s serves %s, not %q", ErrModelNotServed, url, strings.Join(ids, ", "), model)
		}
		return nil
	}
	if errors.Is(err, vllm.ErrUnavailable) && ctx.Err() != nil {
		return err // out of time: no point asking again
	}
	herr := c.Health(ctx)
	switch {
	case herr != nil:
		return err
	case model == "":
		return fmt.Errorf("%s answers /health, but %w: give the model name to use it", url, err)
	}
	return nil
}
