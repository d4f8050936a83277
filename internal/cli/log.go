package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/walbox/walbox/internal/redact"
)

// The daemon's log level and format unless told otherwise (see newLogger).
const (
	defaultLogLevel  = "info"
	defaultLogFormat = "auto"
)

// newLogger builds the daemon's logger: JSON unless the output is a terminal or format says
// otherwise. Every message and attribute passes through the redactor.
func newLogger(w io.Writer, level, format string, secrets []string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	switch strings.ToLower(format) {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "auto", "":
		if f, ok := w.(*os.File); ok && isTerminal(f) {
			h = slog.NewTextHandler(w, opts)
		} else {
			h = slog.NewJSONHandler(w, opts)
		}
	default:
		return nil, fmt.Errorf("log format %q: want auto, json or text", format)
	}
	return slog.New(redactHandler{h, secrets}), nil
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// redactHandler masks passwords in log messages and attributes, and writes durations as text
// (3.6s) in every format.
type redactHandler struct {
	next    slog.Handler
	secrets []string
}

func (h redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, redact.Text(r.Message, h.secrets...), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redact.Text(v.String(), h.secrets...))
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, redact.Text(err.Error(), h.secrets...))
		}
		return slog.String(a.Key, redact.Text(fmt.Sprint(v.Any()), h.secrets...))
	case slog.KindDuration:
		// slog's JSON handler writes a duration as nanoseconds; an operator reads 3.6s.
		return slog.String(a.Key, v.Duration().String())
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]any, len(attrs))
		for i, g := range attrs {
			out[i] = h.attr(g)
		}
		return slog.Group(a.Key, out...)
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h redactHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = h.attr(a)
	}
	return redactHandler{h.next.WithAttrs(out), h.secrets}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.next.WithGroup(name), h.secrets}
}
