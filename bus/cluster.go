package bus

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultClusterName is the name of the cluster a server joins when
// ServerOptions name none.
const DefaultClusterName = "rollfleet"

// ErrClusterOptions means ServerOptions ask for a cluster that cannot work,
// such as routes without a route listener or a node without a name.
var ErrClusterOptions = errors.New("bus: bad cluster options")

// clusterOptions sets up the cluster part of sopts, which holds the
// configuration file's settings (if any) and opts' other fields already.
// The fields of opts override the file's cluster block where they are set.
func (opts ServerOptions) clusterOptions(sopts *server.Options) error {
	if opts.ClusterPort != 0 {
		sopts.Cluster.Port = opts.ClusterPort
	}
	if opts.ClusterHost != "" {
		sopts.Cluster.Host = opts.ClusterHost
	}
	if len(opts.Routes) > 0 {
		routes, err := parseRoutes(opts.Routes)
		if err != nil {
			return err
		}
		sopts.Routes = routes
	}
	if opts.ClusterName != "" {
		sopts.Cluster.Name = opts.ClusterName
	}
	if sopts.Cluster.Port == 0 {
		if opts.ClusterName != "" || opts.ClusterHost != "" || len(opts.Routes) > 0 {
			return fmt.Errorf("%w: cluster name, host or routes without a cluster port", ErrClusterOptions)
		}
		return nil
	}
	if sopts.Cluster.Host == "" {
		sopts.Cluster.Host = sopts.Host
	}
	if sopts.Cluster.Name == "" {
		sopts.Cluster.Name = DefaultClusterName
	}
	if sopts.ServerName == "" {
		// NATS would name it after its random id, a new one at each start:
		// JetStream would take the restarted node for a stranger.
		return fmt.Errorf("%w: a cluster node needs a server name, unique in the cluster and kept across restarts", ErrClusterOptions)
	}
	if len(sopts.Routes) == 0 {
		return fmt.Errorf("%w: a cluster node needs the route URLs of the cluster's nodes (JetStream needs configured routes)", ErrClusterOptions)
	}
	return nil
}

// parseRoutes checks route URLs (nats-route://host:port, or nats://) and
// turns them into the server's form.
func parseRoutes(routes []string) ([]*url.URL, error) {
	var clean []string
	for _, r := range routes {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		u, err := url.Parse(r)
		if err != nil {
			return nil, fmt.Errorf("%w: route %q: %v", ErrClusterOptions, r, err)
		}
		if u.Scheme != "nats-route" && u.Scheme != "nats" {
			return nil, fmt.Errorf("%w: route %q: want nats-route://host:port", ErrClusterOptions, r)
		}
		if u.Hostname() == "" || u.Port() == "" {
			return nil, fmt.Errorf("%w: route %q: want nats-route://host:port", ErrClusterOptions, r)
		}
		clean = append(clean, r)
	}
	if len(clean) == 0 {
		return nil, nil
	}
	return server.RoutesFromStr(strings.Join(clean, ",")), nil
}
