package cli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// withPGPassword puts password into a PostgreSQL URL or keyword connection string.
func withPGPassword(dsn, password string) (string, error) {
	if password == "" {
		return dsn, nil
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return withURLPassword(dsn, password)
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password)
	return dsn + " password='" + quoted + "'", nil
}

// withURLPassword sets the password of a URL's userinfo.
func withURLPassword(raw, password string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("not a valid URL")
	}
	if u.User == nil || u.User.Username() == "" {
		return "", fmt.Errorf("a password is set, but the URL names no user")
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String(), nil
}

// amqpTLS builds the TLS configuration for amqps from PEM files. A CA bundle verifies the broker,
// else the system roots do; a client certificate is optional. Host names are always verified.
func amqpTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("a client certificate needs both a certificate and a key file")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
