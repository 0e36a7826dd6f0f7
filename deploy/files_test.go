package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"
)

// Paths of the files under test, relative to this package's directory.
const (
	repoRoot       = ".."
	composeFile    = "compose/compose.yaml"
	composeEnv     = "compose/.env.example"
	natsConf       = "compose/nats.conf"
	authExample    = "../examples/nats/auth.conf"
	kubernetesDir  = "kubernetes"
	systemdDir     = "systemd"
	dockerfile     = "../Dockerfile"
	dockerignore   = "../.dockerignore"
	binaryInstDir  = "/usr/local/bin/" // where the units expect the binaries
	natsClusterLen = 3
)

// binaryPackages are the commands the image holds, by binary name.
var binaryPackages = map[string]string{
	"rollout":     "./cmd/rollout",
	"envworker":   "./cmd/envworker",
	"llmworker":   "./cmd/llmworker",
	"collector":   "./cmd/collector",
	"healthcheck": "./cmd/healthcheck",
}

// roles maps each fleet service to its NATS user.
var roles = map[string]string{
	"init-streams": "admin",
	"llmworker":    "llmworker",
	"envworker":    "envworker",
	"collector":    "collector",
	"trainer":      "trainer",
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds the image's binaries once and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds every binary (without -short)")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "rollfleet-deploy-bin-")
		if binErr != nil {
			return
		}
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		for _, name := range sortedKeys(binaryPackages) {
			args = append(args, binaryPackages[name])
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

var (
	helpMu    sync.Mutex
	helpTexts = map[string]string{}
)

// help returns "bin [sub] --help".
func help(t *testing.T, bin, sub string) string {
	t.Helper()
	key := bin + " " + sub
	helpMu.Lock()
	defer helpMu.Unlock()
	if h, ok := helpTexts[key]; ok {
		return h
	}
	args := []string{"--help"}
	if sub != "" {
		args = []string{sub, "--help"}
	}
	out, err := exec.Command(filepath.Join(binaries(t), bin), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	helpTexts[key] = string(out)
	return string(out)
}

var (
	flagRE    = regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	envHelpRE = regexp.MustCompile(`\(\$(RF_[A-Z0-9_]+)\)`)
)

// process is one command line of a deployment file: a process it starts or
// a healthcheck or probe it runs.
type process struct {
	where string            // file and service, for messages
	argv  []string          // binary (name or path) and arguments
	env   map[string]string // its environment's RF_ variables, when known
	probe bool              // a healthcheck or probe run in the process's container
}

func (p process) binary() string { return filepath.Base(p.argv[0]) }

// sub is rollout's subcommand, or "".
func (p process) sub() string {
	if p.binary() == "rollout" && len(p.argv) > 1 {
		return p.argv[1]
	}
	return ""
}

// flags returns the --names in argv.
func (p process) flags() []string {
	var names []string
	for _, a := range p.argv[1:] {
		if strings.HasPrefix(a, "--") {
			name, _, _ := strings.Cut(a, "=")
			names = append(names, name)
		}
	}
	return names
}

// value returns the value following flag, or "".
func (p process) value(flag string) string {
	for i, a := range p.argv {
		if a == flag && i+1 < len(p.argv) {
			return p.argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func (p process) has(flag string) bool {
	for _, f := range p.flags() {
		if f == flag {
			return true
		}
	}
	return false
}

// ---- YAML -------------------------------------------------------------

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs
}

func m(v any) map[string]any {
	mm, _ := v.(map[string]any)
	return mm
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func strs(v any) []string {
	var out []string
	for _, x := range list(v) {
		out = append(out, str(x))
	}
	return out
}

// dig follows keys through nested maps.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		v = m(v)[k]
	}
	return v
}

// ---- compose ------------------------------------------------------------

var interpRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}`)

// interpolate resolves compose's ${VAR}, ${VAR:-default} and ${VAR:?error}
// with vars.
func interpolate(s string, vars map[string]string) (string, error) {
	var err error
	out := interpRE.ReplaceAllStringFunc(s, func(ref string) string {
		g := interpRE.FindStringSubmatch(ref)
		v, ok := vars[g[1]]
		switch g[2] {
		case ":-", "-":
			if !ok || (v == "" && g[2] == ":-") {
				return g[3]
			}
		case ":?", "?":
			if !ok || (v == "" && g[2] == ":?") {
				err = fmt.Errorf("%s is required: %s", g[1], g[3])
			}
		}
		return v
	})
	return out, err
}

// envFile reads KEY=VALUE lines; commented-out assignments ("#KEY=VALUE")
// are returned in optional.
func envFile(t *testing.T, path string) (vars, optional map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars, optional = map[string]string{}, map[string]string{}
	assign := regexp.MustCompile(`^(#?)([A-Z_][A-Z0-9_]*)=(.*)$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		g := assign.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		if g[1] == "#" {
			optional[g[2]] = g[3]
		} else {
			vars[g[2]] = g[3]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vars, optional
}

type composeService struct {
	name    string
	raw     map[string]any
	command []string
	env     map[string]string // interpolated with .env.example
	health  []string          // healthcheck command, without CMD
}

// composeServices loads compose.yaml with the values of .env.example.
func composeServices(t *testing.T) (map[string]composeService, map[string]any) {
	t.Helper()
	docs := yamlDocs(t, composeFile)
	if len(docs) != 1 {
		t.Fatalf("%s: want one YAML document, got %d", composeFile, len(docs))
	}
	doc := docs[0]
	vars, _ := envFile(t, composeEnv)
	services := map[string]composeService{}
	for name, raw := range m(doc["services"]) {
		s := composeService{name: name, raw: m(raw), env: map[string]string{}}
		switch c := s.raw["command"].(type) {
		case []any:
			s.command = strs(c)
		case string:
			s.command = strings.Fields(c)
		}
		for i, a := range s.command {
			val, err := interpolate(a, vars)
			if err != nil {
				t.Errorf("%s: service %s: command: %v", composeFile, name, err)
			}
			s.command[i] = val
		}
		for k, v := range m(s.raw["environment"]) {
			val, err := interpolate(str(v), vars)
			if err != nil {
				t.Errorf("%s: service %s: %s: %v", composeFile, name, k, err)
			}
			s.env[k] = val
		}
		if test := strs(dig(s.raw, "healthcheck", "test")); len(test) > 0 {
			if test[0] != "CMD" {
				t.Errorf("%s: service %s: healthcheck %v: want the exec form [\"CMD\", ...] (the image has no shell)", composeFile, name, test)
			} else {
				s.health = test[1:]
			}
		}
		services[name] = s
	}
	return services, doc
}

func composeProcesses(t *testing.T) []process {
	t.Helper()
	services, _ := composeServices(t)
	var ps []process
	for _, name := range sortedKeys(services) {
		s := services[name]
		if len(s.command) > 0 {
			ps = append(ps, process{where: composeFile + " service " + name, argv: s.command, env: s.env})
		}
		if len(s.health) > 0 {
			ps = append(ps, process{where: composeFile + " service " + name + " healthcheck", argv: s.health, env: s.env, probe: true})
		}
	}
	return ps
}

// ---- Kubernetes -----------------------------------------------------------

type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return str(o.doc["kind"]) }
func (o k8sObject) name() string { return str(dig(o.doc, "metadata", "name")) }

// podSpec returns the pod template's spec of a workload, or nil.
func (o k8sObject) podSpec() map[string]any {
	return m(dig(o.doc, "spec", "template", "spec"))
}

func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kubernetes files in %s (%v)", kubernetesDir, err)
	}
	var objs []k8sObject
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			objs = append(objs, k8sObject{file: f, doc: d})
		}
	}
	return objs
}

func k8sFind(t *testing.T, objs []k8sObject, kind, name string) k8sObject {
	t.Helper()
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o
		}
	}
	t.Fatalf("%s: no %s %s", kubernetesDir, kind, name)
	return k8sObject{}
}

// k8sEnv returns a container's environment: literal values, and
// "secret:KEY" for a value from a Secret.
func k8sEnv(c map[string]any) map[string]string {
	env := map[string]string{}
	for _, e := range list(c["env"]) {
		e := m(e)
		if ref := dig(e, "valueFrom", "secretKeyRef"); ref != nil {
			env[str(e["name"])] = "secret:" + str(m(ref)["key"])
			continue
		}
		env[str(e["name"])] = str(e["value"])
	}
	return env
}

func k8sProcesses(t *testing.T) []process {
	t.Helper()
	var ps []process
	for _, o := range k8sObjects(t) {
		spec := o.podSpec()
		if spec == nil {
			continue
		}
		for _, c := range list(spec["containers"]) {
			c := m(c)
			where := fmt.Sprintf("%s %s %s container %s", o.file, o.kind(), o.name(), str(c["name"]))
			argv := append(strs(c["command"]), strs(c["args"])...)
			env := k8sEnv(c)
			if len(argv) == 0 {
				t.Errorf("%s: no command: the image has no entrypoint", where)
				continue
			}
			ps = append(ps, process{where: where, argv: argv, env: env})
			for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
				if cmd := strs(dig(c, probe, "exec", "command")); len(cmd) > 0 {
					ps = append(ps, process{where: where + " " + probe, argv: cmd, env: env, probe: true})
				}
			}
		}
	}
	return ps
}

// ---- systemd ------------------------------------------------------------

// unitFile is a parsed unit file or drop-in: section → key → values in
// order (a key may repeat).
type unitFile struct {
	path     string
	sections map[string]map[string][]string
}

func (u unitFile) get(section, key string) []string { return u.sections[section][key] }

func (u unitFile) last(section, key string) string {
	v := u.get(section, key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{path: path, sections: map[string]map[string][]string{}}
	section := ""
	var cont strings.Builder
	for i, line := range strings.Split(string(data), "\n") {
		if cont.Len() > 0 {
			line = cont.String() + " " + strings.TrimSpace(line)
			cont.Reset()
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, ";") {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cont.WriteString(strings.TrimSuffix(trimmed, `\`))
			continue
		}
		if strings.HasPrefix(trimmed, "[") && strings.HasSuffix(trimmed, "]") {
			section = trimmed[1 : len(trimmed)-1]
			if u.sections[section] == nil {
				u.sections[section] = map[string][]string{}
			}
			continue
		}
		key, val, ok := strings.Cut(trimmed, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not a key=value line in a section: %q", path, i+1, line)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		u.sections[section][key] = append(u.sections[section][key], val)
	}
	return u
}

// systemdUnits returns the units (*.service) and drop-ins (*.conf).
func systemdUnits(t *testing.T) []unitFile {
	t.Helper()
	var units []unitFile
	for _, pattern := range []string{"*.service", "*.conf"} {
		files, err := filepath.Glob(filepath.Join(systemdDir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			units = append(units, parseUnit(t, f))
		}
	}
	if len(units) == 0 {
		t.Fatalf("no units in %s", systemdDir)
	}
	return units
}

// execStart returns the unit's effective ExecStart command line split into
// words (systemd's prefixes removed), or nil.
func execStart(u unitFile) []string {
	var cmd string
	for _, v := range u.get("Service", "ExecStart") {
		cmd = v // an empty assignment resets the list (drop-ins)
	}
	cmd = strings.TrimLeft(cmd, "-@:+!")
	return strings.Fields(cmd)
}

func systemdProcesses(t *testing.T) []process {
	t.Helper()
	var ps []process
	for _, u := range systemdUnits(t) {
		if argv := execStart(u); len(argv) > 0 {
			ps = append(ps, process{where: u.path, argv: argv})
		}
	}
	return ps
}

// expandUnitVars fills systemd's specifiers and ${VAR} references with
// sample values so that the binaries can parse the command line.
func expandUnitVars(argv []string, vars map[string]string) []string {
	ref := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	spec := strings.NewReplacer("%i", "nats-1", "%I", "nats-1", "%S", "/var/lib", "%N", "unit", "%n", "unit.service", "%%", "%")
	out := make([]string, len(argv))
	for i, a := range argv {
		a = ref.ReplaceAllStringFunc(a, func(r string) string {
			g := ref.FindStringSubmatch(r)
			name := g[1] + g[2]
			if v, ok := vars[name]; ok {
				return v
			}
			return r
		})
		out[i] = spec.Replace(a)
	}
	return out
}

// ---- misc -----------------------------------------------------------------

func sortedKeys[V any](mm map[string]V) []string {
	keys := make([]string, 0, len(mm))
	for k := range mm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
