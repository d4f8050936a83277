// Package redact removes passwords from text before it reaches a log, an error message or a
// terminal.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

const mask = "xxxxx"

var (
	urlUserinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]*@`)
	keyword     = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)`)
)

// Secrets returns the passwords found in connection strings (URLs with userinfo or a password query
// parameter, and key=value strings), for Text to remove wherever they appear.
func Secrets(conns ...string) []string {
	var out []string
	for _, c := range conns {
		if u, err := url.Parse(c); err == nil && u.Scheme != "" {
			if p, ok := u.User.Password(); ok && p != "" {
				out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
			}
			for k, vs := range u.Query() {
				if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
					out = append(out, vs...)
				}
			}
		}
		for _, m := range keyword.FindAllStringSubmatch(c, -1) {
			out = append(out, strings.Trim(m[2], "'"))
		}
	}
	return out
}

// Text masks URL userinfo passwords, password=... keywords and parameters, and every given secret.
func Text(s string, secrets ...string) string {
	s = urlUserinfo.ReplaceAllString(s, "${1}"+mask+"@")
	s = keyword.ReplaceAllString(s, "${1}"+mask)
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, mask)
		}
	}
	return s
}
