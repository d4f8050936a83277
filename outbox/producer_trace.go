package outbox

import (
	"context"
	"strings"
)

// TraceparentHeader is the header that carries a W3C trace context.
const TraceparentHeader = "traceparent"

type traceparentKey struct{}

// WithTraceparent returns a context carrying tp, a W3C traceparent ("00-<trace id>-<parent id>-
// <flags>"). Write adds it to every message's Headers["traceparent"] unless the message sets one.
// An invalid tp is ignored, as the W3C specification requires, and ctx is returned unchanged.
// It is invalid when its format is wrong, or its trace or parent id is all zero.
//
// walbox does not depend on OpenTelemetry. An OpenTelemetry user bridges with one line:
//
//	sc := trace.SpanContextFromContext(ctx)
//	ctx = outbox.WithTraceparent(ctx, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
//
// Or the user goes through the configured propagator, with a propagation.MapCarrier c.
// After otel.GetTextMapPropagator().Inject(ctx, c), that is outbox.WithTraceparent(ctx, c["traceparent"]).
func WithTraceparent(ctx context.Context, tp string) context.Context {
	if !ValidTraceparent(tp) {
		return ctx
	}
	return context.WithValue(ctx, traceparentKey{}, tp)
}

// TraceparentFrom returns the traceparent ctx carries, or "" if none.
func TraceparentFrom(ctx context.Context) string {
	tp, _ := ctx.Value(traceparentKey{}).(string)
	return tp
}

// ValidTraceparent reports whether tp is a version 00 W3C traceparent:
//   - "00-";
//   - 32 lowercase hex digits, not all zero;
//   - "-", then 16 lowercase hex digits, not all zero;
//   - "-", then 2 lowercase hex digits.
func ValidTraceparent(tp string) bool {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	traceID, parentID, flags := tp[3:35], tp[36:52], tp[53:]
	return lowerHex(traceID) && lowerHex(parentID) && lowerHex(flags) &&
		strings.Trim(traceID, "0") != "" && strings.Trim(parentID, "0") != ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
