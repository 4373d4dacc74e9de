package deploy_test

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// There is no container engine on Herald's machines, so the Dockerfile is
// checked without one: its instructions are parsed here, the build stage's
// RUN commands are run for real (with /bin/sh -c, as the engine runs them)
// in a clone of the repository at a release tag, and what the runtime
// stage copies and starts is checked against what they built. Not checked:
// that the engine accepts the file's syntax beyond what this parser reads,
// that the base images exist and behave (distroless's nonroot user, its CA
// certificates), and a .dockerignore of the user's that would leave .git
// out (the build then refuses, as the last case shows).
const dockerfilePath = "Dockerfile"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// stage is one FROM and what follows it.
type stage struct {
	image, name string
	body        []instruction
}

func parseDockerfile(t *testing.T, file string) (args map[string]string, stages []*stage) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var lines []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") { // a comment inside a continued instruction
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		cmd, rest, _ := strings.Cut(cur.String(), " ")
		lines = append(lines, instruction{strings.ToUpper(cmd), strings.TrimSpace(rest)})
		cur.Reset()
	}
	require.NoError(t, sc.Err())
	require.Zero(t, cur.Len(), "the last instruction ends with a backslash")

	args = map[string]string{}
	for _, in := range lines {
		switch {
		case in.cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case in.cmd == "FROM":
			fields := strings.Fields(os.Expand(in.args, func(k string) string { return args[k] }))
			st := &stage{image: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			} else {
				require.Len(t, fields, 1, "FROM %s", in.args)
			}
			stages = append(stages, st)
		default:
			require.NotEmpty(t, stages, "%s before the first FROM", in.cmd)
			require.Contains(t, []string{"ARG", "WORKDIR", "COPY", "RUN", "ENV", "USER", "EXPOSE", "ENTRYPOINT", "CMD"}, in.cmd)
			stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		}
	}
	return args, stages
}

// parseEnv reads ENV's KEY=VALUE pairs (unquoted values only).
func parseEnv(t *testing.T, s string) map[string]string {
	t.Helper()
	require.NotContains(t, s, `"`, "ENV %s: quoted values are not read by this test", s)
	env := map[string]string{}
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		require.True(t, ok, "ENV %s: KEY=VALUE pairs only", s)
		env[k] = v
	}
	return env
}

func jsonArray(t *testing.T, s string) []string {
	t.Helper()
	var a []string
	require.NoError(t, json.Unmarshal([]byte(s), &a), "exec form (a JSON array) expected: %s", s)
	return a
}

// goDirective is the major.minor of the go line of Herald's go.mod.
func goDirective(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(b)
	require.NotNil(t, m)
	return string(m[1])
}

// imageSpec is what the Dockerfile says about the image, read once.
type imageSpec struct {
	build, runtime *stage
	workdir        string
	buildRuns      []instruction // the build stage's RUN and ENV, in order
	output         string        // the -o of the go build, relative to workdir
	copyFrom       string        // what the runtime stage copies from the build
	copyTo         string
	user           string
	entrypoint     []string
	cmd            []string
	expose         string
}

func readImageSpec(t *testing.T) imageSpec {
	t.Helper()
	args, stages := parseDockerfile(t, dockerfilePath)
	require.Len(t, stages, 2, "a build stage and a runtime stage")
	spec := imageSpec{build: stages[0], runtime: stages[1]}
	require.Equal(t, "build", spec.build.name)
	require.Equal(t, goDirective(t), args["GO_VERSION"], "the Go of the build image is go.mod's")
	require.Equal(t, "golang:"+args["GO_VERSION"]+"-bookworm", spec.build.image)

	// The commands' module is cmd/ (go -C cmd), its output given from there.
	goBuild := regexp.MustCompile(`^go -C cmd build .*-o \.\./(\S+) \./herald$`)
	for _, in := range spec.build.body {
		switch in.cmd {
		case "WORKDIR":
			spec.workdir = in.args
		case "RUN", "ENV":
			spec.buildRuns = append(spec.buildRuns, in)
			if m := goBuild.FindStringSubmatch(in.args); in.cmd == "RUN" && m != nil {
				require.Empty(t, spec.output, "one go build")
				spec.output = m[1]
			}
		}
	}
	require.True(t, path.IsAbs(spec.workdir), "WORKDIR %q", spec.workdir)
	require.NotEmpty(t, spec.output, "the build stage runs go -C cmd build -o ../PATH ./herald")
	require.False(t, path.IsAbs(spec.output), "the binary is built under WORKDIR, where the test can find it")

	for _, in := range spec.runtime.body {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			require.Len(t, f, 3, "COPY --from=build SRC DST: %s", in.args)
			require.Equal(t, "--from="+spec.build.name, f[0])
			spec.copyFrom, spec.copyTo = f[1], f[2]
		case "USER":
			spec.user = in.args
		case "ENTRYPOINT":
			spec.entrypoint = jsonArray(t, in.args)
		case "CMD":
			spec.cmd = jsonArray(t, in.args)
		case "EXPOSE":
			spec.expose = in.args
		case "RUN":
			t.Fatalf("the runtime stage has no shell to RUN with: %s", in.args)
		}
	}
	return spec
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	spec := readImageSpec(t)

	t.Run("TheRuntimeIsDistrolessStaticAsNonRoot", func(t *testing.T) {
		require.Equal(t, "gcr.io/distroless/static-debian12:nonroot", spec.runtime.image)
		uid, gid, ok := strings.Cut(spec.user, ":")
		require.True(t, ok, "USER uid:gid, numeric, so that Kubernetes' runAsNonRoot can verify it")
		require.Regexp(t, `^[1-9]\d*$`, uid)
		require.Regexp(t, `^[1-9]\d*$`, gid)
		require.Equal(t, "65532", uid, "distroless's nonroot user, which the Kubernetes manifests run as")
	})

	t.Run("TheImageStartsTheBinaryTheBuildMade", func(t *testing.T) {
		require.Equal(t, path.Join(spec.workdir, spec.output), spec.copyFrom)
		require.Equal(t, []string{spec.copyTo}, spec.entrypoint)
		require.Equal(t, []string{"relay"}, spec.cmd)
		require.Equal(t, "9464", spec.expose, "the port of --admin-addr in the Kubernetes manifests")
	})

	t.Run("TheBuildIsStaticAndOfTheRootModuleAlone", func(t *testing.T) {
		env := map[string]string{}
		for _, in := range spec.buildRuns {
			if in.cmd == "ENV" {
				for k, v := range parseEnv(t, in.args) {
					env[k] = v
				}
			}
		}
		require.Equal(t, "0", env["CGO_ENABLED"])
		require.Equal(t, "off", env["GOWORK"])
		require.Equal(t, "-buildvcs=true", env["GOFLAGS"], "the version comes from git")
	})
}

// TestDockerfileBuildRuns runs the build stage's commands in a clone of
// the repository tagged as a release, and checks the binary the runtime
// stage copies: static, and stamped with the tag.
func TestDockerfileBuildRuns(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds herald (about a minute on a cold cache)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Unavailable(t, "git is not on PATH (apt-get install git)")
	}
	spec := readImageSpec(t)
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err)

	const tag = "v0.0.0-dockerfile-test"
	clone := filepath.Join(t.TempDir(), "src")
	gitRun(t, "", "clone", "--quiet", "--no-hardlinks", "--no-tags", strings.TrimSpace(string(root)), clone)
	for _, name := range []string{tag, "cmd/" + tag} { // a release tags the root module and the commands'
		gitRun(t, clone, "-c", "user.name=test", "-c", "user.email=test@127.0.0.1", "tag", "-a", name, "-m", name)
	}

	t.Run("TheBinaryIsStaticAndNamesTheTag", func(t *testing.T) {
		out, err := runBuildStage(t, spec, clone)
		require.NoError(t, err, out)
		bin := filepath.Join(clone, filepath.FromSlash(spec.output))
		requireStatic(t, bin)
		version, err := exec.Command(bin, "version").Output()
		require.NoError(t, err)
		require.Regexp(t, `^herald `+regexp.QuoteMeta(tag)+` \([0-9a-f]{40}\), go`, string(version))
	})

	t.Run("ATreeWithoutGitIsRefused", func(t *testing.T) {
		bare := filepath.Join(t.TempDir(), "src")
		require.NoError(t, os.MkdirAll(bare, 0o755))
		archive := exec.Command("sh", "-c", `git archive HEAD | tar -x -C "$0"`, bare)
		archive.Dir = clone
		out, err := archive.CombinedOutput()
		require.NoError(t, err, string(out))
		out2, err := runBuildStage(t, spec, bare)
		require.Error(t, err)
		require.Contains(t, out2, "no version: build from a git clone, .git included")
	})
}

func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

// runBuildStage runs the build stage's RUN commands in dir, which stands
// for WORKDIR, with the stage's ENV set where the Dockerfile sets it.
func runBuildStage(t *testing.T, spec imageSpec, dir string) (string, error) {
	t.Helper()
	env := os.Environ()
	var all strings.Builder
	for _, in := range spec.buildRuns {
		if in.cmd == "ENV" {
			for k, v := range parseEnv(t, in.args) {
				env = append(env, k+"="+v)
			}
			continue
		}
		cmd := exec.Command("/bin/sh", "-c", in.args)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		all.Write(out)
		if err != nil {
			return all.String(), err
		}
	}
	return all.String(), nil
}

// requireStatic fails unless bin is an ELF executable that needs no
// dynamic loader or shared library, as distroless static requires.
func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "%s asks for a dynamic loader", bin)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs)
}
