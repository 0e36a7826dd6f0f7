package bus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrAuthFailed means the server refused the connection's credentials. No
// retry can mend that, so Connect reports it instead of retrying. The error
// names the identity that was refused and wraps the client's own error
// (nats.ErrAuthorization for a wrong user or password).
var ErrAuthFailed = errors.New("authorization failed")

// ErrTLSFailed means the TLS handshake with the server failed: an unknown
// certificate authority, a name mismatch, a client certificate the server
// rejected or missing TLS on one side. Connect reports it instead of
// retrying.
var ErrTLSFailed = errors.New("TLS failed")

// ErrConnectOptions means ConnectOptions are inconsistent: two ways to
// authenticate at once, a password without a user, a client certificate
// without its key, or more than one ConnectOptions given to Connect.
var ErrConnectOptions = errors.New("bus: invalid connect options")

// ConnectOptions adds credentials and TLS to Connect. The zero value adds
// neither: the connection authenticates with what its URL carries, if
// anything (nats://user:password@host or nats://token@host), and uses TLS
// only for tls:// URLs or a server that requires it.
//
// At most one way to authenticate may be set: User and Password, Token,
// NKeyFile or CredsFile.
type ConnectOptions struct {
	// User and Password authenticate with a user name and password; each
	// needs the other.
	User, Password string
	// Token authenticates with a token.
	Token string
	// NKeyFile names a file holding an nkey user seed ("SU..."); the client
	// signs the server's challenge with it, so no secret travels.
	NKeyFile string
	// CredsFile names a credentials file (a user JWT and its nkey seed) for
	// a server in operator (JWT) mode.
	CredsFile string
	// TLS configures the client side of TLS.
	TLS TLSOptions
}

// TLSOptions configures the client side of TLS. Setting any field makes the
// connection use TLS.
type TLSOptions struct {
	// CAFile names a PEM file of the certificate authorities that verify the
	// server, instead of the system's.
	CAFile string
	// CertFile and KeyFile name the PEM client certificate and its key, for
	// a server that verifies clients (mutual TLS); each needs the other.
	CertFile, KeyFile string
	// Insecure skips verifying the server's certificate. It defeats TLS's
	// protection against impostors: for tests only.
	Insecure bool
}

// Method names the way o authenticates: "user", "token", "nkey", "creds",
// or "" when it sets no credentials.
func (o ConnectOptions) Method() string {
	switch {
	case o.User != "" || o.Password != "":
		return "user"
	case o.Token != "":
		return "token"
	case o.NKeyFile != "":
		return "nkey"
	case o.CredsFile != "":
		return "creds"
	}
	return ""
}

// validate checks that o names at most one way to authenticate, completely.
func (o ConnectOptions) validate() error {
	var methods []string
	if o.User != "" || o.Password != "" {
		methods = append(methods, "user and password")
	}
	if o.Token != "" {
		methods = append(methods, "token")
	}
	if o.NKeyFile != "" {
		methods = append(methods, "nkey seed file")
	}
	if o.CredsFile != "" {
		methods = append(methods, "credentials file")
	}
	switch {
	case len(methods) > 1:
		return fmt.Errorf("%w: give one way to authenticate, not %s", ErrConnectOptions, strings.Join(methods, " and "))
	case o.User != "" && o.Password == "":
		return fmt.Errorf("%w: user %q without a password", ErrConnectOptions, o.User)
	case o.User == "" && o.Password != "":
		return fmt.Errorf("%w: a password without a user", ErrConnectOptions)
	}
	return nil
}

// credentials returns the nats.go options that authenticate as o says.
func (o ConnectOptions) credentials() ([]nats.Option, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	switch {
	case o.User != "":
		return []nats.Option{nats.UserInfo(o.User, o.Password)}, nil
	case o.Token != "":
		return []nats.Option{nats.Token(o.Token)}, nil
	case o.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("bus: nkey seed file %q: %w", o.NKeyFile, err)
		}
		return []nats.Option{opt}, nil
	case o.CredsFile != "":
		// nats.go reads the file at every connect; read it once here so a
		// wrong path is reported now rather than as a failed connect.
		if _, err := os.ReadFile(o.CredsFile); err != nil {
			return nil, fmt.Errorf("bus: credentials file: %w", err)
		}
		return []nats.Option{nats.UserCredentials(o.CredsFile)}, nil
	}
	return nil, nil
}

// natsOptions returns the nats.go options for o's credentials and TLS.
func (o ConnectOptions) natsOptions() ([]nats.Option, error) {
	opts, err := o.credentials()
	if err != nil {
		return nil, err
	}
	cfg, err := o.TLS.config()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, nats.Secure(cfg))
	}
	return opts, nil
}

// config builds the client TLS configuration, or nil when t sets nothing.
func (t TLSOptions) config() (*tls.Config, error) {
	if t == (TLSOptions{}) {
		return nil, nil
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%w: a TLS client certificate and its key go together", ErrConnectOptions)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.Insecure}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("bus: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bus: TLS CA file %q: no PEM certificate in it", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("bus: TLS client certificate %q and key %q: %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Explain wraps a connect error, or the last error of a connection that
// closed, from a connection to urls made with o: an authorization failure
// becomes ErrAuthFailed naming the identity the server refused, a TLS
// failure ErrTLSFailed. Passwords in urls are masked.
func (o ConnectOptions) Explain(urls string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrAuthFailed), errors.Is(err, ErrTLSFailed):
		return err
	case isAuthError(err):
		return fmt.Errorf("bus: connect %s: %w for %s: %w", redactURLs(urls), ErrAuthFailed, o.identity(urls), err)
	case isTLSError(err):
		return fmt.Errorf("bus: connect %s: %w: %w", redactURLs(urls), ErrTLSFailed, err)
	}
	return fmt.Errorf("bus: connect %s: %w", redactURLs(urls), err)
}

// identity describes whom the server was asked to let in.
func (o ConnectOptions) identity(urls string) string {
	switch o.Method() {
	case "user":
		return fmt.Sprintf("user %q", o.User)
	case "token":
		return "the token given"
	case "nkey":
		return fmt.Sprintf("the nkey in %q", o.NKeyFile)
	case "creds":
		return fmt.Sprintf("the credentials in %q", o.CredsFile)
	}
	for u := range strings.SplitSeq(urls, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil || pu.User == nil {
			continue
		}
		if _, ok := pu.User.Password(); ok {
			return fmt.Sprintf("user %q (from the URL)", pu.User.Username())
		}
		return "the token in the URL"
	}
	return "a client without credentials (the server requires them)"
}

// isAuthError reports whether err is the server refusing a client's
// credentials: a wrong user, password, token or key, or expired or revoked
// credentials.
func isAuthError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authorization violation") || strings.Contains(msg, "authentication expired") ||
		strings.Contains(msg, "authentication revoked")
}

// isTLSError reports whether err is a TLS failure that retrying cannot mend:
// a certificate that does not verify, an alert from the server (such as a
// rejected or missing client certificate), or TLS wanted on one side only.
func isTLSError(err error) bool {
	if err == nil {
		return false
	}
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		op        *net.OpError
	)
	switch {
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.Is(err, nats.ErrTLS), // the server hung up right after the handshake
		errors.As(err, &verify), errors.As(err, &authority), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &record):
		return true
	case errors.As(err, &op) && op.Op == "remote error":
		return true // a TLS alert from the server
	}
	return false
}

// permanent reports whether a failed connect cannot succeed by retrying.
func permanent(err error) bool { return isAuthError(err) || isTLSError(err) }

// redactURLs masks the passwords in a comma-separated list of URLs, for
// logs and error messages.
func redactURLs(urls string) string {
	return rewriteUserinfo(urls, func(pu *url.URL) string {
		if _, ok := pu.User.Password(); ok {
			return pu.Redacted()
		}
		// A user part without a password is a token.
		pu.User = url.User("xxxxx")
		return pu.String()
	})
}

// StripUserinfo drops the user and password (or token) from each of a
// comma-separated list of NATS URLs: for what is written down, such as a
// run's manifest, which is no place for secrets.
func StripUserinfo(urls string) string {
	return rewriteUserinfo(urls, func(pu *url.URL) string {
		pu.User = nil
		return pu.String()
	})
}

// rewriteUserinfo replaces each URL of a comma-separated list that has a
// user part by what rewrite makes of it.
func rewriteUserinfo(urls string, rewrite func(*url.URL) string) string {
	if !strings.Contains(urls, "@") {
		return urls
	}
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		if pu, err := url.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			parts[i] = rewrite(pu)
		}
	}
	return strings.Join(parts, ",")
}
