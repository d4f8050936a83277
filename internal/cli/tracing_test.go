package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A walbox built without tracing refuses an OTLP endpoint at start, in one line that says how to
// get one that traces, rather than running without the spans the operator asked for.
func TestOTLPEndpointWithoutTracingFailsAtStart(t *testing.T) {
	for _, setting := range []struct{ name, arg, env string }{
		{"flag", "--otlp-endpoint=http://collector:4318", ""},
		{"environment", "", "http://collector:4318"},
	} {
		t.Run(setting.name, func(t *testing.T) {
			t.Setenv("WALBOX_OTLP_ENDPOINT", setting.env)
			args := []string{"run", "--database-url=postgres://walbox@db.invalid/app",
				"--amqp-url=amqp://walbox@mq.invalid/", "--listen=off"}
			if setting.arg != "" {
				args = append(args, setting.arg)
			}
			var stdout, stderr bytes.Buffer
			code := mainWithExit(context.Background(), args, &stdout, &stderr)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr.String())
			}
			got := stderr.String()
			if strings.Count(got, "\n") != 1 {
				t.Errorf("stderr is not one line:\n%s", got)
			}
			for _, want := range []string{"--otlp-endpoint (WALBOX_OTLP_ENDPOINT)", "built without tracing", "TAGS=otel"} {
				if !strings.Contains(got, want) {
					t.Errorf("stderr %q does not say %q", got, want)
				}
			}
		})
	}
}
