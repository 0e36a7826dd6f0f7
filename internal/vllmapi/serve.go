package vllmapi

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Serve serves h on ln until ctx is cancelled, then shuts down: it stops
// accepting, lets in-flight requests finish for grace, and aborts the ones
// still running after it. It closes ln. Requests get a context of their own,
// cancelled only when the grace period is over, so that a shutdown does not
// cut short the answers it waits for. The HTTP server's own complaints (a
// client's malformed request, say) go to log at debug level. It returns nil
// after a shutdown, and the listener's error when serving failed.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration, log *slog.Logger) error {
	reqCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		// The listener failed; drop the connections it had accepted.
		abort()
		_ = srv.Close()
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		abort()
		if err := srv.Close(); err != nil {
			log.Warn("closing the HTTP server", "err", err)
		}
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Start runs serve on ln in the background. It returns the server's base URL,
// such as "http://127.0.0.1:41234", and stop, which cancels serve's context,
// waits for serve to return and returns its error; stop may be called more
// than once. Cancelling ctx also ends serve.
func Start(ctx context.Context, ln net.Listener, serve func(context.Context, net.Listener) error) (url string, stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var serveErr error
	go func() {
		defer close(done)
		serveErr = serve(ctx, ln)
	}()
	stop = sync.OnceValue(func() error {
		cancel()
		<-done
		return serveErr
	})
	return "http://" + ln.Addr().String(), stop
}
