package doctor

import (
	"strings"
	"testing"
)

func TestBrokerFixReadsTheError(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{`Exception (403) Reason: "username or password not allowed"`, "user and password"},
		{`Exception (530) Reason: "NOT_ALLOWED - vhost nope not found"`, "vhost"},
		{"tls: failed to verify certificate: x509: certificate signed by unknown authority", "--amqp-ca-file"},
		// A port with 403 in it is no refusal of the credentials.
		{"dial tcp 127.0.0.1:34039: connect: connection refused", "host and port"},
	} {
		if got := brokerFix(tc.msg); !strings.Contains(got, tc.want) {
			t.Errorf("brokerFix(%q) = %q, want a fix about %q", tc.msg, got, tc.want)
		}
	}
}
