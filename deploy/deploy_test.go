package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// allProcesses returns every command line of the three examples.
func allProcesses(t *testing.T) []process {
	t.Helper()
	ps := composeProcesses(t)
	ps = append(ps, k8sProcesses(t)...)
	return append(ps, systemdProcesses(t)...)
}

func TestYAMLFilesParse(t *testing.T) {
	services, doc := composeServices(t)
	if len(services) == 0 {
		t.Fatalf("%s: no services", composeFile)
	}
	for _, key := range []string{"volumes", "configs"} {
		if doc[key] == nil {
			t.Errorf("%s: no top-level %s", composeFile, key)
		}
	}
	var resources []string
	files := map[string]bool{}
	for _, o := range k8sObjects(t) {
		files[filepath.Base(o.file)] = true
		if o.kind() == "Kustomization" {
			resources = strs(o.doc["resources"])
			continue
		}
		if str(o.doc["apiVersion"]) == "" || o.kind() == "" || o.name() == "" {
			t.Errorf("%s: an object without apiVersion, kind or metadata.name: %v", o.file, o.doc)
		}
	}
	delete(files, "kustomization.yaml")
	slices.Sort(resources)
	if want := sortedKeys(files); !slices.Equal(resources, want) {
		t.Errorf("%s/kustomization.yaml resources %v, want every other file of the folder %v", kubernetesDir, resources, want)
	}
}

// TestCommandLinesParse checks every command line of compose.yaml, the
// Kubernetes files and the systemd units against the binaries: each flag is
// in the binary's --help, and the binary's own flag parser accepts the whole
// line (run with --help appended, which parses every flag and value but
// starts nothing).
func TestCommandLinesParse(t *testing.T) {
	bin := binaries(t)
	unitVars := systemdSampleVars(t)
	subcommands := flagRE.ReplaceAllString(help(t, "rollout", ""), "")
	confPath, err := filepath.Abs(natsConf)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range allProcesses(t) {
		name := p.binary()
		if _, ok := binaryPackages[name]; !ok {
			t.Errorf("%s: runs %q, which the image does not hold (want one of %v)", p.where, p.argv[0], sortedKeys(binaryPackages))
			continue
		}
		if strings.HasPrefix(p.where, systemdDir) && p.argv[0] != binaryInstDir+name {
			t.Errorf("%s: runs %s, want %s%s", p.where, p.argv[0], binaryInstDir, name)
		}
		sub := p.sub()
		if name == "rollout" && !regexp.MustCompile(`(?m)^\s+`+regexp.QuoteMeta(sub)+`\b`).MatchString(subcommands) {
			t.Errorf("%s: rollout has no subcommand %q", p.where, sub)
			continue
		}
		known := map[string]bool{}
		for _, f := range flagRE.FindAllString(help(t, name, sub), -1) {
			known[f] = true
		}
		for _, f := range p.flags() {
			if !known[f] {
				t.Errorf("%s: %s has no flag %s", p.where, strings.TrimSpace(name+" "+sub), f)
			}
		}
		argv := expandUnitVars(p.argv, unitVars)
		for i, a := range argv {
			// Kubernetes's $(VAR): the pod's name, a password.
			argv[i] = strings.ReplaceAll(a, "$(POD_NAME)", "rollfleet-nats-0")
			argv[i] = k8sVarRE.ReplaceAllString(argv[i], "sample")
			if a == "/etc/rollfleet/nats.conf" { // --config wants an existing file
				argv[i] = confPath
			}
		}
		cmd := exec.Command(filepath.Join(bin, name), append(argv[1:], "--help")...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %s does not parse %q: %v\n%s", p.where, name, argv[1:], err, lastLines(string(out), 3))
		}
	}
}

var k8sVarRE = regexp.MustCompile(`\$\([A-Z_][A-Z0-9_]*\)`)

// TestEnvironmentIsRead checks that every RF_ variable a deployment file
// gives a process is one it reads: a fleet process's flag (its --help
// names the variable) or, for a NATS server, a variable of nats.conf.
func TestEnvironmentIsRead(t *testing.T) {
	conf := readFile(t, natsConf)
	check := func(where string, p process, vars []string) {
		for _, v := range vars {
			if !strings.HasPrefix(v, "RF_") {
				continue
			}
			if p.sub() == "server" {
				if !strings.Contains(conf, "$"+v) {
					t.Errorf("%s: %s is given to the NATS server but %s does not use it", where, v, natsConf)
				}
				continue
			}
			if !slices.Contains(envHelpVars(t, p), v) {
				t.Errorf("%s: %s is given to %s %s, which does not read it (it reads %v)", where, v, p.binary(), p.sub(), envHelpVars(t, p))
			}
		}
	}
	for _, p := range append(composeProcesses(t), k8sProcesses(t)...) {
		if !p.probe {
			check(p.where, p, sortedKeys(p.env))
		}
	}
	// Kubernetes: the NATS servers take every Secret key through envFrom.
	objs := k8sObjects(t)
	secret := k8sFind(t, objs, "Secret", "rollfleet-credentials")
	for _, p := range k8sProcesses(t) {
		if p.sub() == "server" && !p.probe {
			check(p.where+" envFrom", p, sortedKeys(m(secret.doc["stringData"])))
		}
	}
	// systemd: the variables of the example environment files.
	for _, u := range systemdUnits(t) {
		argv := execStart(u)
		if len(argv) == 0 {
			continue
		}
		p := process{where: u.path, argv: argv}
		for _, f := range u.get("Service", "EnvironmentFile") {
			if example := filepath.Join(systemdDir, filepath.Base(f)+".example"); fileExists(example) {
				vars, optional := envFile(t, example)
				check(u.path+" "+example, p, append(sortedKeys(vars), sortedKeys(optional)...))
			}
		}
	}
}

// envHelpVars lists the RF_ variables a binary reads, from its --help.
func envHelpVars(t *testing.T, p process) []string {
	var vars []string
	for _, g := range envHelpRE.FindAllStringSubmatch(help(t, p.binary(), p.sub()), -1) {
		vars = append(vars, g[1])
	}
	return vars
}

// systemdSampleVars returns values for the variables the units refer to:
// their Environment= defaults and the example environment files.
func systemdSampleVars(t *testing.T) map[string]string {
	vars := map[string]string{}
	files, _ := filepath.Glob(filepath.Join(systemdDir, "*.env.example"))
	for _, f := range files {
		v, opt := envFile(t, f)
		for k, x := range opt {
			vars[k] = x
		}
		for k, x := range v {
			vars[k] = x
		}
	}
	for _, u := range systemdUnits(t) {
		for _, line := range u.get("Service", "Environment") {
			for _, kv := range strings.Fields(line) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					vars[k] = v
				}
			}
		}
	}
	return vars
}

// TestSystemdVariablesDefined checks that each ${VAR} of a unit's command
// line is set by the unit (Environment=) or by the example of an
// environment file it reads.
func TestSystemdVariablesDefined(t *testing.T) {
	ref := regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	units := systemdUnits(t)
	server := parseUnit(t, filepath.Join(systemdDir, "rollfleet-server@.service"))
	for _, u := range units {
		defined := map[string]bool{}
		envFiles := u.get("Service", "EnvironmentFile")
		envLines := u.get("Service", "Environment")
		if strings.HasSuffix(u.path, ".conf") { // a drop-in of the server unit
			envFiles = server.get("Service", "EnvironmentFile")
			envLines = server.get("Service", "Environment")
		}
		for _, line := range envLines {
			for _, kv := range strings.Fields(line) {
				k, _, _ := strings.Cut(kv, "=")
				defined[k] = true
			}
		}
		for _, f := range envFiles {
			if example := filepath.Join(systemdDir, filepath.Base(f)+".example"); fileExists(example) {
				vars, optional := envFile(t, example)
				for k := range vars {
					defined[k] = true
				}
				for k := range optional {
					defined[k] = true
				}
			}
		}
		for _, g := range ref.FindAllStringSubmatch(strings.Join(execStart(u), " "), -1) {
			if !defined[g[1]] {
				t.Errorf("%s: ExecStart uses $%s, which neither Environment= nor an example environment file (%v) sets", u.path, g[1], envFiles)
			}
		}
	}
}

// passwordRE is what a password must look like so that NATS, which parses a
// variable's value as configuration, reads it back as the same string.
var passwordRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]*$`)

// loadNATSConf parses nats.conf with nats-server's own parser, the
// passwords taken from .env.example.
func loadNATSConf(t *testing.T) (*server.Options, map[string]string) {
	t.Helper()
	vars, _ := envFile(t, composeEnv)
	for k, v := range vars {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(natsConf)
	if err != nil {
		t.Fatalf("%s: %v", natsConf, err)
	}
	return opts, vars
}

// TestNATSConf parses nats.conf as the server does and checks that it
// carries examples/nats/auth.conf's users and permissions, takes every
// password from the environment, and leaves the per-node settings to the
// flags.
func TestNATSConf(t *testing.T) {
	opts, vars := loadNATSConf(t)
	example, err := server.ProcessConfigFile(authExample)
	if err != nil {
		t.Fatalf("%s: %v", authExample, err)
	}
	users := func(o *server.Options) map[string]*server.User {
		mm := map[string]*server.User{}
		for _, u := range o.Users {
			mm[u.Username] = u
		}
		return mm
	}
	got, want := users(opts), users(example)
	if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
		t.Fatalf("users %v, want those of %s: %v", sortedKeys(got), authExample, sortedKeys(want))
	}
	for name, w := range want {
		g := got[name]
		if !reflect.DeepEqual(g.Permissions, w.Permissions) {
			t.Errorf("user %s: permissions differ from %s:\n got %+v\nwant %+v", name, authExample, g.Permissions, w.Permissions)
		}
		if g.Account == nil || w.Account == nil || g.Account.Name != w.Account.Name {
			t.Errorf("user %s: account differs from %s", name, authExample)
		}
		key := "RF_" + strings.ToUpper(name) + "_PASSWORD"
		if pw, ok := vars[key]; !ok || g.Password != pw {
			t.Errorf("user %s: password %q, want $%s from the environment (%q)", name, g.Password, key, pw)
		}
	}
	if opts.MaxPayload != example.MaxPayload {
		t.Errorf("max_payload %d, want %s's %d", opts.MaxPayload, authExample, example.MaxPayload)
	}
	if opts.HTTPPort != 8222 {
		t.Errorf("monitoring port %d, want 8222 (the healthchecks and probes use it)", opts.HTTPPort)
	}
	if opts.Cluster.Username != "route" || opts.Cluster.Password != vars["RF_ROUTE_PASSWORD"] {
		t.Errorf("cluster authorization %q/%q, want user route with $RF_ROUTE_PASSWORD", opts.Cluster.Username, opts.Cluster.Password)
	}
	// Per node or per deployment: the flags set these.
	if opts.ServerName != "" || opts.Port != 0 || opts.StoreDir != "" || opts.Cluster.Port != 0 || len(opts.Routes) != 0 {
		t.Errorf("server_name %q, port %d, store_dir %q, cluster port %d, routes %v: leave them to the flags", opts.ServerName, opts.Port, opts.StoreDir, opts.Cluster.Port, opts.Routes)
	}

	// A password the server cannot find stops it at start.
	t.Setenv("RF_GATEWAY_PASSWORD", "")
	os.Unsetenv("RF_GATEWAY_PASSWORD")
	if _, err := server.ProcessConfigFile(natsConf); err == nil {
		t.Error("without RF_GATEWAY_PASSWORD in the environment the configuration still parses")
	}
}

// TestPasswordsSurviveTheParser checks the rule the examples give for
// passwords: NATS parses a variable's value as configuration, so a value
// of the documented shape must come back unchanged.
func TestPasswordsSurviveTheParser(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "p.conf")
	if err := os.WriteFile(conf, []byte("authorization { user: u, password: $RF_TEST_PASSWORD }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	samples := []string{"rf0123456789abcdef0123456789abcdef0123456789abcdef", "rf1e10", "rf-true", "CHANGE-ME-admin", "a_b-C9"}
	for _, pw := range samples {
		if !passwordRE.MatchString(pw) {
			t.Fatalf("sample %q does not follow the rule", pw)
		}
		t.Setenv("RF_TEST_PASSWORD", pw)
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Errorf("password %q: %v", pw, err)
			continue
		}
		if opts.Password != pw {
			t.Errorf("password %q came back as %q", pw, opts.Password)
		}
	}
	// Values outside the rule that NATS does not read back as strings.
	for _, pw := range []string{"123456", "pw with space"} {
		t.Setenv("RF_TEST_PASSWORD", pw)
		if opts, err := server.ProcessConfigFile(conf); err == nil && opts.Password == pw {
			t.Errorf("password %q survives the parser: the rule could be looser", pw)
		}
	}
}

// TestCredentialsAgree checks that the compose env file, the compose NATS
// services, the Kubernetes Secret and the systemd server environment carry
// exactly the passwords nats.conf reads, each of the documented shape.
func TestCredentialsAgree(t *testing.T) {
	ref := regexp.MustCompile(`\$(RF_[A-Z0-9_]+)`)
	var want []string
	for _, g := range ref.FindAllStringSubmatch(readFile(t, natsConf), -1) {
		if !slices.Contains(want, g[1]) {
			want = append(want, g[1])
		}
	}
	slices.Sort(want)
	if len(want) != 7 {
		t.Fatalf("%s reads %v, want the six users' and the routes' passwords", natsConf, want)
	}
	passwords := func(vars map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range vars {
			if strings.HasSuffix(k, "_PASSWORD") {
				out[k] = v
			}
		}
		return out
	}
	check := func(where string, vars map[string]string, shape bool) {
		if got := sortedKeys(vars); !slices.Equal(got, want) {
			t.Errorf("%s: passwords %v, want %v", where, got, want)
		}
		for k, v := range vars {
			if shape && !passwordRE.MatchString(v) {
				t.Errorf("%s: %s=%q: use letters, digits, - and _, starting with a letter", where, k, v)
			}
		}
	}
	envVars, _ := envFile(t, composeEnv)
	check(composeEnv, passwords(envVars), true)
	serverVars, _ := envFile(t, filepath.Join(systemdDir, "server.env.example"))
	check(systemdDir+"/server.env.example", passwords(serverVars), true)
	routes := strings.Split(serverVars["NATS_ROUTES"], ",")
	for _, r := range routes {
		if !strings.HasPrefix(r, "nats-route://route:"+serverVars["RF_ROUTE_PASSWORD"]+"@") {
			t.Errorf("%s/server.env.example: route %q: want nats-route://route:$RF_ROUTE_PASSWORD@host:port", systemdDir, r)
		}
	}
	if len(routes) != natsClusterLen {
		t.Errorf("%s/server.env.example: NATS_ROUTES lists %d routes, want %d", systemdDir, len(routes), natsClusterLen)
	}
	secret := k8sFind(t, k8sObjects(t), "Secret", "rollfleet-credentials")
	sv := map[string]string{}
	for k, v := range m(secret.doc["stringData"]) {
		sv[k] = str(v)
	}
	check(secret.file, sv, true)

	services, _ := composeServices(t)
	for _, name := range sortedKeys(services) {
		s := services[name]
		raw := m(s.raw["environment"])
		for k, v := range raw {
			if strings.Contains(k, "PASSWORD") && !strings.HasPrefix(str(v), "${") {
				t.Errorf("%s: service %s: %s is written in the file; take it from .env (${...})", composeFile, name, k)
			}
		}
		if len(s.command) > 1 && s.command[0] == "rollout" && s.command[1] == "server" {
			got := map[string]string{}
			for k, v := range raw {
				got[k] = str(v)
				if !strings.HasPrefix(str(v), "${"+k+":?") {
					t.Errorf("%s: service %s: %s=%v, want ${%s:?...}", composeFile, name, k, v, k)
				}
			}
			check(composeFile+" service "+name, got, false)
		}
	}
}

// TestComposeFile checks the compose example's shape: the cluster, the
// streams job, the roles and their credentials, healthchecks, restart
// policies and volumes.
func TestComposeFile(t *testing.T) {
	services, doc := composeServices(t)
	vars, optional := envFile(t, composeEnv)
	// Every variable compose.yaml uses is in .env.example, and back.
	text := readFile(t, composeFile)
	used := map[string]bool{}
	for _, g := range interpRE.FindAllStringSubmatch(text, -1) {
		used[g[1]] = true
		_, set := vars[g[1]]
		_, opt := optional[g[1]]
		if !set && !opt {
			t.Errorf("%s uses ${%s}, which %s does not list", composeFile, g[1], composeEnv)
		}
		if g[2] == "" && !set {
			t.Errorf("%s: ${%s} has neither a default nor a required-message", composeFile, g[1])
		}
	}
	for k := range vars {
		if !used[k] {
			t.Errorf("%s sets %s, which %s does not use", composeEnv, k, composeFile)
		}
	}
	for k := range optional {
		if !used[k] {
			t.Errorf("%s mentions %s, which %s does not use", composeEnv, k, composeFile)
		}
	}

	declared := m(doc["volumes"])
	var natsURLs, routes []string
	for i := 1; i <= natsClusterLen; i++ {
		natsURLs = append(natsURLs, "nats://nats-"+strconv.Itoa(i)+":4222")
		routes = append(routes, "nats-route://route:"+vars["RF_ROUTE_PASSWORD"]+"@nats-"+strconv.Itoa(i)+":6222")
	}
	serverNames := map[string]bool{}
	for i := 1; i <= natsClusterLen; i++ {
		name := "nats-" + strconv.Itoa(i)
		s, ok := services[name]
		if !ok {
			t.Fatalf("%s: no service %s", composeFile, name)
		}
		p := process{argv: s.command}
		if p.sub() != "server" {
			t.Fatalf("%s: service %s runs %v, want rollout server", composeFile, name, s.command)
		}
		if sn := p.value("--server-name"); sn == "" || serverNames[sn] {
			t.Errorf("%s: service %s: --server-name %q: want one unique in the cluster", composeFile, name, sn)
		} else {
			serverNames[sn] = true
		}
		if got := p.value("--routes"); got != strings.Join(routes, ",") {
			t.Errorf("%s: service %s: --routes %q, want %q", composeFile, name, got, strings.Join(routes, ","))
		}
		if p.value("--listen") != "0.0.0.0:4222" || p.value("--cluster") != "0.0.0.0:6222" || p.value("--cluster-name") == "" {
			t.Errorf("%s: service %s: want --listen 0.0.0.0:4222, --cluster 0.0.0.0:6222 and --cluster-name", composeFile, name)
		}
		dataDir := p.value("--data-dir")
		mounted := false
		for _, v := range strs(s.raw["volumes"]) {
			src, dst, _ := strings.Cut(v, ":")
			if dst == dataDir {
				mounted = true
				if declared[src] == nil && !hasKey(declared, src) {
					t.Errorf("%s: service %s: volume %s is not a named volume of the file", composeFile, name, src)
				}
			}
		}
		if !mounted {
			t.Errorf("%s: service %s: --data-dir %s is not on a volume", composeFile, name, dataDir)
		}
		if p.value("--config") != "/etc/rollfleet/nats.conf" {
			t.Errorf("%s: service %s: --config %q, want /etc/rollfleet/nats.conf", composeFile, name, p.value("--config"))
		}
	}
	if src := str(dig(doc, "configs", "nats-conf", "file")); filepath.Clean(filepath.Join(filepath.Dir(composeFile), src)) != filepath.Clean(natsConf) {
		t.Errorf("%s: config nats-conf is %q, want ./nats.conf", composeFile, src)
	}

	wantReplicas := map[string]int{"llmworker": 2, "envworker": 3, "collector": 2}
	for name, role := range roles {
		s, ok := services[name]
		if !ok {
			t.Errorf("%s: no service %s", composeFile, name)
			continue
		}
		p := process{argv: s.command, env: s.env}
		if got := s.env["RF_NATS_USER"]; got != role {
			t.Errorf("%s: service %s logs in as %q, want %q", composeFile, name, got, role)
		}
		if got, want := str(m(s.raw["environment"])["RF_NATS_PASSWORD"]), "${RF_"+strings.ToUpper(role)+"_PASSWORD"; !strings.HasPrefix(got, want) {
			t.Errorf("%s: service %s: RF_NATS_PASSWORD %q, want %s...}", composeFile, name, got, want)
		}
		urls := s.env["RF_NATS"]
		if p.sub() == "run" {
			urls = p.value("--nats")
		}
		if urls != strings.Join(natsURLs, ",") {
			t.Errorf("%s: service %s: NATS URLs %q, want all three nodes %q", composeFile, name, urls, strings.Join(natsURLs, ","))
		}
		if p.sub() != "run" && p.value("--replicas") != "3" {
			t.Errorf("%s: service %s: want --replicas 3 on a 3-node cluster", composeFile, name)
		}
		if n, ok := wantReplicas[name]; ok {
			if got := str(dig(s.raw, "deploy", "replicas")); got != strconv.Itoa(n) {
				t.Errorf("%s: service %s: deploy.replicas %s, want %d", composeFile, name, got, n)
			}
		}
	}
	init := process{argv: services["init-streams"].command}
	if init.binary() != "collector" || !init.has("--init-streams") {
		t.Errorf("%s: init-streams runs %v, want collector --init-streams --replicas 3", composeFile, init.argv)
	}
	for _, name := range sortedKeys(services) {
		s := services[name]
		oneShot := name == "init-streams" || s.raw["profiles"] != nil
		if policy := str(s.raw["restart"]); policy == "" || (!oneShot && policy == "no") {
			t.Errorf("%s: service %s: restart policy %q", composeFile, name, policy)
		}
		if !oneShot && len(s.health) == 0 {
			t.Errorf("%s: service %s: no healthcheck", composeFile, name)
		}
		if !oneShot && name != "toyllm" && !strings.HasPrefix(name, "nats-") {
			deps := m(s.raw["depends_on"])
			if str(dig(deps, "init-streams", "condition")) != "service_completed_successfully" {
				t.Errorf("%s: service %s does not wait for init-streams", composeFile, name)
			}
		}
		if str(s.raw["image"]) == "" || dig(s.raw, "build", "context") == nil {
			t.Errorf("%s: service %s: want the image built from the repository's Dockerfile", composeFile, name)
		}
	}
	for i := 1; i <= natsClusterLen; i++ {
		if str(dig(services["init-streams"].raw, "depends_on", "nats-"+strconv.Itoa(i), "condition")) != "service_healthy" {
			t.Errorf("%s: init-streams does not wait for nats-%d to be healthy", composeFile, i)
		}
	}
}

func hasKey(mm map[string]any, k string) bool {
	_, ok := mm[k]
	return ok
}

// TestKubernetesMatchesCompose checks the Kubernetes example: the NATS
// StatefulSet and its headless Service, the configuration (the same as
// compose's), the Secret, and workers that run what compose runs.
func TestKubernetesMatchesCompose(t *testing.T) {
	objs := k8sObjects(t)
	cm := k8sFind(t, objs, "ConfigMap", "rollfleet-nats-config")
	if str(dig(cm.doc, "data", "nats.conf")) != readFile(t, natsConf) {
		t.Errorf("%s: nats.conf differs from %s: copy it again", cm.file, natsConf)
	}
	sts := k8sFind(t, objs, "StatefulSet", "rollfleet-nats")
	svcName := str(dig(sts.doc, "spec", "serviceName"))
	svc := k8sFind(t, objs, "Service", svcName)
	if str(dig(svc.doc, "spec", "clusterIP")) != "None" || dig(svc.doc, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("%s: Service %s: want headless (clusterIP: None) with publishNotReadyAddresses", svc.file, svcName)
	}
	if dig(sts.doc, "spec", "replicas") != natsClusterLen || str(dig(sts.doc, "spec", "podManagementPolicy")) != "Parallel" {
		t.Errorf("%s: want 3 replicas started in parallel (a node is ready only once a majority runs)", sts.file)
	}
	if len(list(dig(sts.doc, "spec", "volumeClaimTemplates"))) == 0 {
		t.Errorf("%s: no volumeClaimTemplates", sts.file)
	}
	var routes, urls []string
	for i := 0; i < natsClusterLen; i++ {
		host := sts.name() + "-" + strconv.Itoa(i) + "." + svcName
		routes = append(routes, "nats-route://route:$(RF_ROUTE_PASSWORD)@"+host+":6222")
		urls = append(urls, "nats://"+host+":4222")
	}
	secret := k8sFind(t, objs, "Secret", "rollfleet-credentials")
	compose, _ := composeServices(t)
	toK8s := strings.NewReplacer("http://toyllm:8000", "http://rollfleet-toyllm:8000")
	byName := map[string]process{}
	for _, p := range k8sProcesses(t) {
		if strings.Contains(p.where, "Probe") {
			continue
		}
		for _, o := range objs {
			if strings.Contains(p.where, " "+o.kind()+" "+o.name()+" ") {
				byName[strings.TrimPrefix(o.name(), "rollfleet-")] = p
			}
		}
		for k, v := range p.env {
			if key, ok := strings.CutPrefix(v, "secret:"); ok && m(secret.doc["stringData"])[key] == nil {
				t.Errorf("%s: %s from Secret key %s, which the Secret lacks", p.where, k, key)
			}
		}
	}
	nats := byName["nats"]
	if nats.value("--routes") != strings.Join(routes, ",") || nats.value("--server-name") != "$(POD_NAME)" {
		t.Errorf("%s: want --server-name $(POD_NAME) and --routes %s", nats.where, strings.Join(routes, ","))
	}
	if nats.env["RF_ROUTE_PASSWORD"] != "secret:RF_ROUTE_PASSWORD" {
		t.Errorf("%s: --routes uses $(RF_ROUTE_PASSWORD): set it in env from the Secret", nats.where)
	}
	for name, role := range roles {
		if name == "trainer" {
			continue
		}
		p, ok := byName[name]
		if !ok {
			t.Errorf("%s: nothing runs %s", kubernetesDir, name)
			continue
		}
		cp := compose[name]
		want := strings.Fields(toK8s.Replace(strings.Join(cp.command, " ")))
		if !slices.Equal(p.argv, want) {
			t.Errorf("%s: runs %v, compose runs %v", p.where, p.argv, want)
		}
		if p.env["RF_NATS"] != strings.Join(urls, ",") {
			t.Errorf("%s: RF_NATS %q, want the three nodes %q", p.where, p.env["RF_NATS"], strings.Join(urls, ","))
		}
		if p.env["RF_NATS_USER"] != role || p.env["RF_NATS_PASSWORD"] != "secret:RF_"+strings.ToUpper(role)+"_PASSWORD" {
			t.Errorf("%s: want user %s with its password from the Secret, got %q/%q", p.where, role, p.env["RF_NATS_USER"], p.env["RF_NATS_PASSWORD"])
		}
	}
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		name := strings.TrimPrefix(o.name(), "rollfleet-")
		if n := dig(compose[name].raw, "deploy", "replicas"); n != nil && dig(o.doc, "spec", "replicas") != n {
			t.Errorf("%s: Deployment %s: %v replicas, compose has %v", o.file, o.name(), dig(o.doc, "spec", "replicas"), n)
		}
	}
	for _, o := range objs {
		spec := o.podSpec()
		if spec == nil {
			continue
		}
		if dig(spec, "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: %s %s: want securityContext.runAsNonRoot", o.file, o.kind(), o.name())
		}
		for _, c := range list(spec["containers"]) {
			if dig(c, "securityContext", "allowPrivilegeEscalation") != false || dig(c, "securityContext", "readOnlyRootFilesystem") != true {
				t.Errorf("%s: %s %s: want allowPrivilegeEscalation false and readOnlyRootFilesystem", o.file, o.kind(), o.name())
			}
		}
	}
}

// TestSystemdUnits checks the units' restart policy, limits and hardening,
// and that they run what compose runs.
func TestSystemdUnits(t *testing.T) {
	compose, _ := composeServices(t)
	for _, u := range systemdUnits(t) {
		if strings.HasSuffix(u.path, ".conf") {
			continue // a drop-in: its command line is checked with the others
		}
		oneShot := u.last("Service", "Type") == "oneshot"
		want := map[string]string{
			"ProtectSystem":   "strict",
			"NoNewPrivileges": "yes",
			"ProtectHome":     "yes",
			"PrivateTmp":      "yes",
			"LimitNOFILE":     "65536",
			"Restart":         "always",
		}
		if oneShot {
			want["Restart"] = "on-failure"
		}
		for k, v := range want {
			if got := u.last("Service", k); got != v {
				t.Errorf("%s: %s=%q, want %q", u.path, k, got, v)
			}
		}
		if u.last("Service", "DynamicUser") != "yes" && u.last("Service", "User") == "" {
			t.Errorf("%s: runs as root: want DynamicUser=yes or User=", u.path)
		}
		if !oneShot && len(u.get("Install", "WantedBy")) == 0 {
			t.Errorf("%s: no [Install] WantedBy=", u.path)
		}
		p := process{argv: execStart(u)}
		if p.sub() == "server" {
			state := u.last("Service", "StateDirectory")
			if state == "" || p.value("--data-dir") != "%S/"+state {
				t.Errorf("%s: --data-dir %q, want %%S/ and the StateDirectory= (%q)", u.path, p.value("--data-dir"), state)
			}
			if p.value("--server-name") != "%i" {
				t.Errorf("%s: --server-name %q, want the instance name %%i", u.path, p.value("--server-name"))
			}
			continue
		}
		name := p.binary()
		if p.has("--init-streams") {
			name = "init-streams"
		}
		cp, ok := compose[name]
		if !ok {
			t.Errorf("%s: runs %v, which compose does not", u.path, p.argv)
			continue
		}
		var want2 []string
		for _, f := range (process{argv: cp.command}).flags() {
			if f != "--concurrency" && f != "--max-in-flight" { // tuned per machine
				want2 = append(want2, f)
			}
		}
		for _, f := range want2 {
			if !p.has(f) {
				t.Errorf("%s: lacks %s, which compose's %s passes", u.path, f, name)
			}
		}
	}
}

// TestDockerfile checks the Dockerfile's build and final stage, and that
// .dockerignore keeps everything the build needs.
func TestDockerfile(t *testing.T) {
	text := readFile(t, dockerfile)
	var froms []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.EqualFold(f[0], "FROM") {
			for _, w := range f[1:] {
				if !strings.HasPrefix(w, "--") {
					froms = append(froms, w)
					break
				}
			}
		}
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(readFile(t, "../go.mod"))
	if len(froms) < 2 || goVersion == nil || froms[0] != "golang:"+goVersion[1] {
		t.Errorf("Dockerfile stages %v: want a golang:%v build stage first and a final stage", froms, goVersion)
	}
	if final := froms[len(froms)-1]; !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
		t.Errorf("Dockerfile: final stage %s: want distroless static or scratch", final)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`, "VOLUME", "/data"} {
		if !strings.Contains(text, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	for name, pkg := range binaryPackages {
		if !strings.Contains(text, pkg) {
			t.Errorf("Dockerfile does not build %s (%s)", name, pkg)
		}
	}
	user := regexp.MustCompile(`(?m)^USER\s+(\d+)(:\d+)?\s*$`).FindStringSubmatch(text)
	if user == nil || user[1] == "0" {
		t.Errorf("Dockerfile: want a numeric non-root USER, got %v", user)
	}
	expose := regexp.MustCompile(`(?m)^EXPOSE\s+(.*)$`).FindStringSubmatch(text)
	for _, port := range []string{"4222", "6222", "8222"} {
		if expose == nil || !slices.Contains(strings.Fields(expose[1]), port) {
			t.Errorf("Dockerfile does not EXPOSE %s", port)
		}
	}

	// .dockerignore must keep go.mod, go.sum and every package the binaries
	// are built from.
	var patterns []string
	for _, line := range strings.Split(readFile(t, dockerignore), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are beyond this test's matcher", line)
		}
		patterns = append(patterns, strings.Trim(line, "/"))
	}
	args := []string{"list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}"}
	for _, name := range sortedKeys(binaryPackages) {
		args = append(args, binaryPackages[name])
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum"}
	for _, dir := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
			needed = append(needed, filepath.ToSlash(rel))
		}
	}
	if len(needed) < 3 {
		t.Fatalf("go list found no package of the module: %q", out)
	}
	for _, path := range needed {
		if p := ignoredBy(patterns, path); p != "" {
			t.Errorf(".dockerignore: %s leaves %s out of the build context", p, path)
		}
	}
}

// ignoredBy returns the pattern that excludes path (or a folder above it),
// for patterns without exceptions.
func ignoredBy(patterns []string, path string) string {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		for i := 1; i <= len(parts); i++ {
			prefix := strings.Join(parts[:i], "/")
			if ok, _ := filepath.Match(p, prefix); ok {
				return p
			}
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				if ok, _ := filepath.Match(rest, parts[i-1]); ok {
					return p
				}
			}
		}
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
