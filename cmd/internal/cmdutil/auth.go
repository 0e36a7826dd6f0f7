package cmdutil

import (
	"errors"
	"fmt"

	"github.com/rollfleet/rollfleet/bus"
)

// NATSAuth holds the credential and TLS flags of every command that connects
// to a NATS server. Give at most one way to authenticate. Secrets are better
// passed in the environment (RF_NATS_PASSWORD, RF_NATS_TOKEN) or in files
// than as arguments, which other users of the machine can see.
type NATSAuth struct {
	NATSUser     string `name:"nats-user" env:"RF_NATS_USER" group:"NATS security" help:"NATS user name (with --nats-password)."`
	NATSPassword string `name:"nats-password" env:"RF_NATS_PASSWORD" group:"NATS security" help:"NATS password (prefer the environment variable)."`
	NATSToken    string `name:"nats-token" env:"RF_NATS_TOKEN" group:"NATS security" help:"NATS authentication token (prefer the environment variable)."`
	NATSNKey     string `name:"nats-nkey" env:"RF_NATS_NKEY" type:"path" placeholder:"FILE" group:"NATS security" help:"File holding an nkey user seed (SU...)."`
	NATSCreds    string `name:"nats-creds" env:"RF_NATS_CREDS" type:"path" placeholder:"FILE" group:"NATS security" help:"NATS credentials file (user JWT and seed) for a server in operator mode."`
	TLSCA        string `name:"tls-ca" env:"RF_TLS_CA" type:"path" placeholder:"FILE" group:"NATS security" help:"PEM file of the CA(s) that verify the NATS server (default: the system's)."`
	TLSCert      string `name:"tls-cert" env:"RF_TLS_CERT" type:"path" placeholder:"FILE" group:"NATS security" help:"PEM client certificate for mutual TLS (with --tls-key)."`
	TLSKey       string `name:"tls-key" env:"RF_TLS_KEY" type:"path" placeholder:"FILE" group:"NATS security" help:"PEM key of --tls-cert."`
	TLSInsecure  bool   `name:"tls-insecure" env:"RF_TLS_INSECURE" group:"NATS security" help:"Do not verify the NATS server's certificate (tests only)."`
}

// ConnectOptions returns the flags as bus connect options.
func (a NATSAuth) ConnectOptions() bus.ConnectOptions {
	return bus.ConnectOptions{
		User: a.NATSUser, Password: a.NATSPassword, Token: a.NATSToken,
		NKeyFile: a.NATSNKey, CredsFile: a.NATSCreds,
		TLS: bus.TLSOptions{CAFile: a.TLSCA, CertFile: a.TLSCert, KeyFile: a.TLSKey, Insecure: a.TLSInsecure},
	}
}

// Explain adds to a connect error the flags that would mend it.
func (a NATSAuth) Explain(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bus.ErrAuthFailed):
		return fmt.Errorf("%w (check %s)", err, a.credentialFlags())
	case errors.Is(err, bus.ErrTLSFailed):
		return fmt.Errorf("%w (check --tls-ca, --tls-cert and --tls-key, and that the URL's host matches the server's certificate)", err)
	case errors.Is(err, bus.ErrConnectOptions):
		return fmt.Errorf("%w (check --nats-user/--nats-password, --nats-token, --nats-nkey, --nats-creds, --tls-cert/--tls-key)", err)
	}
	return err
}

// credentialFlags names the flags of the credentials given, or all of them
// when none was.
func (a NATSAuth) credentialFlags() string {
	switch a.ConnectOptions().Method() {
	case "user":
		return "--nats-user/--nats-password or RF_NATS_USER/RF_NATS_PASSWORD"
	case "token":
		return "--nats-token or RF_NATS_TOKEN"
	case "nkey":
		return "--nats-nkey"
	case "creds":
		return "--nats-creds"
	}
	return "the credentials: the server wants --nats-user/--nats-password, --nats-token, --nats-nkey or --nats-creds"
}
