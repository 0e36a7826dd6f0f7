package vllmapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestErrors(t *testing.T) {
	inner := errors.New("inner")
	err := BadRequest("field %q: %w", "x", inner)
	var e *Error
	if !errors.As(error(err), &e) || e.Status != http.StatusBadRequest || !errors.Is(err, inner) || err.Error() != `field "x": inner` {
		t.Errorf("BadRequest: %#v", err)
	}
	if e := StatusError(http.StatusNotFound, "gone"); e.Status != http.StatusNotFound || e.Error() != "gone" {
		t.Errorf("StatusError: %#v", e)
	}
}

func TestWriteBody(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteBody(rec, http.StatusTeapot, []byte(`{"a":1}`))
	if rec.Code != http.StatusTeapot || rec.Body.String() != `{"a":1}` ||
		rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Content-Length") != "7" {
		t.Errorf("got %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
}

func TestReadBody(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString("stale")
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("12345"))
	if err := ReadBody(httptest.NewRecorder(), r, 5, &buf); err != nil || buf.String() != "12345" {
		t.Errorf("within the limit: %v, %q", err, buf.String())
	}
	r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader("123456"))
	var e *Error
	if err := ReadBody(httptest.NewRecorder(), r, 5, &buf); !errors.As(err, &e) || e.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("over the limit: %v", err)
	}
}

// TestStartStop: a started server answers, and stop lets an in-flight request finish, then
// returns Serve's nil error, however often it is called.
func TestStartStop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(50 * time.Millisecond)
		if r.Context().Err() != nil {
			t.Error("request context cancelled during the grace period")
		}
		WriteBody(w, http.StatusOK, []byte(`{}`))
	})
	log := slog.New(slog.DiscardHandler)
	url, stop := Start(context.Background(), ln, func(ctx context.Context, ln net.Listener) error {
		return Serve(ctx, ln, h, 5*time.Second, log)
	})
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get(url + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	<-entered
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if b := <-got; b != `{}` {
		t.Errorf("in-flight request got %q", b)
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if _, err := http.Get(url + "/"); err == nil {
		t.Error("server still answers after stop")
	}
}
