// Package kubernetes_test checks Herald's Kubernetes manifests offline.
// Every manifest is decoded strictly (an unknown or duplicate field fails)
// into the Kubernetes API's own Go types and the Prometheus Operator's
// ServiceMonitor type; the references between them (labels and selectors,
// port names, probe paths, the Secret's files, the image's user) are
// checked; the environment variables must be the daemon's (the Flags
// table of docs/daemon.md); and the relay is run for real with the Deployment's
// arguments and environment, to show that herald accepts them and answers
// the probes where the manifests look.
//
// It is a module of its own so that the Kubernetes packages are not
// requirements of Herald's module.
package kubernetes_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	// The manual's pages on the daemon (its Flags table) and on operations
	// (its Deploying section).
	daemonDocPath     = "../../docs/daemon.md"
	operationsDocPath = "../../docs/operations.md"
	dockerfilePath    = "../Dockerfile"
	// The image's user (deploy/Dockerfile: distroless's nonroot).
	imageUser = 65532
	// The relay's default --max-in-flight-bytes (docs/daemon.md, Flags).
	defaultMaxInFlightBytes = 64 << 20
)

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoding strictly refuses any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

// manifests is every object of the directory, decoded.
type manifests struct {
	kustomization kustomization
	deployment    appsv1.Deployment
	pdb           policyv1.PodDisruptionBudget
	service       corev1.Service
	monitor       monitoringv1.ServiceMonitor
	raw           map[string][]byte // file name -> contents
}

// decodeStrict decodes YAML into v, refusing unknown and duplicate fields.
func decodeStrict(t *testing.T, name string, data []byte, v any) {
	t.Helper()
	require.NoError(t, yaml.UnmarshalStrict(data, v), "%s", name)
}

func readManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{raw: map[string][]byte{}}
	files, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	want := map[string]any{
		"apps/v1 Deployment":                            &m.deployment,
		"policy/v1 PodDisruptionBudget":                 &m.pdb,
		"v1 Service":                                    &m.service,
		"monitoring.coreos.com/v1 ServiceMonitor":       &m.monitor,
		"kustomize.config.k8s.io/v1beta1 Kustomization": &m.kustomization,
	}
	seen := map[string]string{}
	for _, name := range files {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		require.NotRegexp(t, `(?m)^---`, string(data), "%s: one object per file", name)
		m.raw[name] = data
		var tm metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal(data, &tm), name)
		kind := strings.TrimSpace(tm.APIVersion + " " + tm.Kind)
		target, ok := want[kind]
		require.True(t, ok, "%s: %q is not a kind these manifests have", name, kind)
		require.NotContains(t, seen, kind, "%s: a second %s (first in %s)", name, kind, seen[kind])
		seen[kind] = name
		decodeStrict(t, name, data, target)
	}
	require.Len(t, seen, len(want), "every kind has its file: %v", seen)
	return m
}

func TestManifests(t *testing.T) {
	t.Parallel()
	m := readManifests(t)
	d := &m.deployment
	pod := &d.Spec.Template.Spec
	relay := container(t, pod.Containers, "relay")
	podLabels := labels.Set(d.Spec.Template.Labels)

	t.Run("KustomizationListsEveryManifest", func(t *testing.T) {
		var files []string
		for name := range m.raw {
			if name != "kustomization.yaml" {
				files = append(files, name)
			}
		}
		require.ElementsMatch(t, files, m.kustomization.Resources)
	})

	t.Run("SelectorsMatchThePods", func(t *testing.T) {
		require.NotEmpty(t, podLabels)
		require.Len(t, pod.TopologySpreadConstraints, 1)
		for what, sel := range map[string]*metav1.LabelSelector{
			"Deployment":          d.Spec.Selector,
			"PodDisruptionBudget": m.pdb.Spec.Selector,
			"topology spread":     pod.TopologySpreadConstraints[0].LabelSelector,
		} {
			s, err := metav1.LabelSelectorAsSelector(sel)
			require.NoError(t, err, what)
			require.False(t, s.Empty(), what)
			require.True(t, s.Matches(podLabels), "%s's selector %s does not select the pods (%s)", what, s, podLabels)
		}
		require.True(t, labels.SelectorFromSet(m.service.Spec.Selector).Matches(podLabels), "the Service selects the pods")
		s, err := metav1.LabelSelectorAsSelector(&m.monitor.Spec.Selector)
		require.NoError(t, err)
		require.True(t, s.Matches(labels.Set(m.service.Labels)), "the ServiceMonitor selects the Service")
	})

	t.Run("ThePDBLeavesARelayWhenThereAreSeveral", func(t *testing.T) {
		require.NotNil(t, d.Spec.Replicas)
		require.GreaterOrEqual(t, *d.Spec.Replicas, int32(2))
		require.NotNil(t, m.pdb.Spec.MinAvailable)
		require.Equal(t, intstr.FromInt32(1), *m.pdb.Spec.MinAvailable)
		require.Nil(t, m.pdb.Spec.MaxUnavailable)
	})

	t.Run("ProbesAndMetricsUseTheAdminServer", func(t *testing.T) {
		port := relay.Ports[0]
		require.Len(t, relay.Ports, 1)
		require.Equal(t, "admin", port.Name)
		require.Equal(t, corev1.ProtocolTCP, port.Protocol)
		_, addrPort := adminAddr(t, relay)
		require.Equal(t, strconv.Itoa(int(port.ContainerPort)), addrPort, "HERALD_ADMIN_ADDR listens on the container port")
		require.Contains(t, dockerfileLines(t), "EXPOSE "+addrPort)

		for probe, path := range map[*corev1.Probe]string{relay.ReadinessProbe: "/readyz", relay.LivenessProbe: "/healthz"} {
			require.NotNil(t, probe)
			require.NotNil(t, probe.HTTPGet)
			require.Equal(t, path, probe.HTTPGet.Path)
			require.Equal(t, intstr.FromString(port.Name), probe.HTTPGet.Port)
		}
		require.Len(t, m.service.Spec.Ports, 1)
		sp := m.service.Spec.Ports[0]
		require.Equal(t, intstr.FromString(port.Name), sp.TargetPort)
		require.Len(t, m.monitor.Spec.Endpoints, 1)
		ep := m.monitor.Spec.Endpoints[0]
		require.Equal(t, sp.Name, ep.Port, "the ServiceMonitor scrapes the Service's port")
		require.Equal(t, "/metrics", ep.Path)
	})

	t.Run("EveryVariableIsTheDaemons", func(t *testing.T) {
		documented := flagsTableVariables(t)
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			for _, e := range c.Env {
				require.Nil(t, e.ValueFrom, "%s: %s: values come from the manifest or, through _FILE, from a file", c.Name, e.Name)
				base := strings.TrimSuffix(e.Name, "_FILE")
				require.Contains(t, documented, base, "%s: %s is not a variable of the Flags table of %s", c.Name, e.Name, daemonDocPath)
			}
		}
	})

	t.Run("SecretsComeFromFilesOfTheMountedSecret", func(t *testing.T) {
		require.Len(t, pod.Volumes, 1)
		vol := pod.Volumes[0]
		require.NotNil(t, vol.Secret)
		require.NotNil(t, vol.Secret.DefaultMode)
		require.Zero(t, *vol.Secret.DefaultMode&0o007, "the secret's files are not world-readable")
		require.NotNil(t, pod.SecurityContext.FSGroup, "the nonroot user reads the files through the pod's group")
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			for _, name := range []string{"HERALD_DB", "HERALD_PUBLISHER"} {
				require.Empty(t, envValue(c, name), "%s: %s in the environment; use %s_FILE", c.Name, name, name)
			}
			file := envValue(c, "HERALD_DB_FILE")
			require.NotEmpty(t, file, "%s reads the DSN from a file", c.Name)
			for _, e := range c.Env {
				if !strings.HasSuffix(e.Name, "_FILE") {
					continue
				}
				mount := mountOf(t, c, vol.Name)
				require.Equal(t, mount.MountPath, path.Dir(e.Value), "%s: %s names a file of the secret", c.Name, e.Name)
				require.True(t, mount.ReadOnly)
				key := path.Base(e.Value)
				require.Contains(t, string(m.raw["deployment.yaml"]), "--from-file="+key+"=",
					"the kubectl create secret line of deployment.yaml makes the key %s", key)
				require.True(t, strings.Contains(doc(t, operationsDocPath), "--from-file="+key+"="), "the Deploying section of %s says how to make the key %s", operationsDocPath, key)
			}
		}
		require.NotEmpty(t, envValue(*relay, "HERALD_PUBLISHER_FILE"))
	})

	t.Run("PodsRunAsTheImagesNonRootUserOnAReadOnlyRoot", func(t *testing.T) {
		psc := pod.SecurityContext
		require.NotNil(t, psc)
		require.Equal(t, new(true), psc.RunAsNonRoot)
		require.Equal(t, new(int64(imageUser)), psc.RunAsUser)
		require.Equal(t, new(int64(imageUser)), psc.RunAsGroup)
		require.Contains(t, dockerfileLines(t), fmt.Sprintf("USER %d:%d", imageUser, imageUser))
		require.NotNil(t, psc.SeccompProfile)
		require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, psc.SeccompProfile.Type)
		require.Equal(t, new(false), pod.AutomountServiceAccountToken)
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			sc := c.SecurityContext
			require.NotNil(t, sc, c.Name)
			require.Equal(t, new(true), sc.ReadOnlyRootFilesystem, c.Name)
			require.Equal(t, new(false), sc.AllowPrivilegeEscalation, c.Name)
			require.NotNil(t, sc.Capabilities, c.Name)
			require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, c.Name)
			require.Empty(t, sc.Capabilities.Add, c.Name)
		}
	})

	t.Run("EveryContainerHasResourcesAndTheReleasedImage", func(t *testing.T) {
		require.Len(t, m.kustomization.Images, 1)
		img := m.kustomization.Images[0]
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				require.Contains(t, c.Resources.Requests, r, c.Name)
				require.Contains(t, c.Resources.Limits, r, c.Name)
				require.LessOrEqual(t, c.Resources.Requests.Name(r, "").Cmp(c.Resources.Limits[r]), 0, "%s: %s request over its limit", c.Name, r)
			}
			require.Equal(t, img.Name+":"+img.NewTag, c.Image, "%s runs the image the kustomization sets", c.Name)
		}
		require.Regexp(t, `^v\d+\.\d+\.\d+$`, img.NewTag, "a release tag, not latest")
		mem := relay.Resources.Limits[corev1.ResourceMemory]
		require.GreaterOrEqual(t, mem.Value(), int64(4*defaultMaxInFlightBytes),
			"the relay's memory limit leaves room beyond the claimed payloads it may hold")
		require.Equal(t, []string{"migrate"}, container(t, pod.InitContainers, "migrate").Args)
		require.Equal(t, []string{"relay"}, relay.Args)
	})

	t.Run("TheGracePeriodOutlastsTheRelaysDrain", func(t *testing.T) {
		drain, err := time.ParseDuration(envValue(*relay, "HERALD_SHUTDOWN_TIMEOUT"))
		require.NoError(t, err, "HERALD_SHUTDOWN_TIMEOUT is set, so that the grace period can be checked against it")
		require.NotNil(t, pod.TerminationGracePeriodSeconds)
		grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
		require.GreaterOrEqual(t, grace, drain+10*time.Second)
	})
}

// TestTheRelayRunsWithTheDeploymentsSettings builds herald and runs the
// init container and the relay container with the Deployment's arguments
// and environment; the Secret's files are a temporary directory holding a
// SQLite DSN and an unreachable broker. Two differences, for the test:
// the admin server listens on a free port of 127.0.0.1 rather than
// 0.0.0.0:9464, and the files live where the test put them.
func TestTheRelayRunsWithTheDeploymentsSettings(t *testing.T) {
	t.Parallel()
	m := readManifests(t)
	pod := &m.deployment.Spec.Template.Spec
	relay := container(t, pod.Containers, "relay")
	migrate := container(t, pod.InitContainers, "migrate")

	dir := t.TempDir()
	herald := filepath.Join(dir, "herald")
	build := exec.Command("go", "build", "-o", herald, "./cmd/herald")
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.Mkdir(secret, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(secret, "db"), []byte("sqlite:"+filepath.Join(dir, "outbox.db")+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(secret, "publisher"), []byte("nats://127.0.0.1:1\n"), 0o600))
	mountPath := mountOf(t, *relay, pod.Volumes[0].Name).MountPath
	environ := func(c corev1.Container) []string {
		var env []string
		for _, e := range c.Env {
			v := e.Value
			switch {
			case strings.HasSuffix(e.Name, "_FILE"):
				v = filepath.Join(secret, strings.TrimPrefix(v, mountPath+"/"))
			case e.Name == "HERALD_ADMIN_ADDR":
				v = "127.0.0.1:0"
			}
			env = append(env, e.Name+"="+v)
		}
		return env
	}

	init := exec.Command(herald, migrate.Args...)
	init.Env = environ(*migrate)
	out, err = init.CombinedOutput()
	require.NoError(t, err, "the init container: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, herald, relay.Args...)
	cmd.Env = environ(*relay)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()

	// The relay logs JSON (HERALD_LOG_FORMAT); its admin server says
	// where it listens. The logs are read until the pipe closes (the
	// relay exited), before Wait, which closes it.
	var logs syncBuffer
	addr := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(io.TeeReader(stderr, &logs))
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "admin server listening" {
				addr <- line.Addr
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-ctx.Done():
		t.Fatalf("the relay's admin server did not start: %s", logs.String())
	}

	get := func(p string) (int, string) {
		resp, err := http.Get(base + p)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get(relay.LivenessProbe.HTTPGet.Path)
	require.Equal(t, http.StatusOK, code, "liveness: %s", body)
	// Not ready while the broker is down, and, once the first try of the
	// broker has failed, it says why.
	require.Eventually(t, func() bool {
		code, body = get(relay.ReadinessProbe.HTTPGet.Path)
		require.Equal(t, http.StatusServiceUnavailable, code, "not ready while the broker is down: %s", body)
		return strings.Contains(body, `"destination_error":"cannot reach destination default`)
	}, 30*time.Second, 20*time.Millisecond, "/readyz says what it waits for")
	code, body = get(m.monitor.Spec.Endpoints[0].Path)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "herald_build_info")

	// The kubelet stops a pod with SIGTERM, then waits the grace period.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() {
		<-scanned
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "logs: %s", logs.String())
	case <-time.After(time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second):
		t.Fatal("the relay outlived the grace period")
	}
}

func container(t *testing.T, cs []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func mountOf(t *testing.T, c corev1.Container, volume string) corev1.VolumeMount {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		if vm.Name == volume {
			return vm
		}
	}
	t.Fatalf("%s does not mount %s", c.Name, volume)
	return corev1.VolumeMount{}
}

// adminAddr is the relay's HERALD_ADMIN_ADDR, split; it must listen
// beyond loopback for the kubelet and Prometheus to reach it.
func adminAddr(t *testing.T, c *corev1.Container) (host, port string) {
	t.Helper()
	v := envValue(*c, "HERALD_ADMIN_ADDR")
	host, port, ok := strings.Cut(v, ":")
	require.True(t, ok, "HERALD_ADMIN_ADDR %q", v)
	require.Equal(t, "0.0.0.0", host, "a bare :port listens on loopback only")
	return host, port
}

func doc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// flagsTableVariables are the HERALD_* variables of the Flags table of
// docs/daemon.md: the daemon's settings.
func flagsTableVariables(t *testing.T) []string {
	t.Helper()
	s := doc(t, daemonDocPath)
	start := strings.Index(s, "\n## Flags\n")
	require.Positive(t, start, "%s has a Flags section", daemonDocPath)
	section := s[start+1:]
	if end := strings.Index(section, "\n#"); end > 0 {
		section = section[:end]
	}
	var vars []string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		vars = append(vars, regexp.MustCompile(`HERALD_[A-Z0-9_]+`).FindAllString(cells[2], -1)...)
	}
	require.Contains(t, vars, "HERALD_DB", "the env column of the Flags table was read")
	return vars
}

func dockerfileLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		lines = append(lines, strings.TrimSpace(l))
	}
	return lines
}

// syncBuffer is a bytes.Buffer that one goroutine writes while another
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
