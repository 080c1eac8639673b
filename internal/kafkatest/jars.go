package kafkatest

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// KafkaVersion is the Apache Kafka release the harness runs unless a test asks for
// another (WithVersion): the newest served. Keep it equal to kafka.version in pom.xml and
// (TestPomPinsKafkaVersion checks). The Java tools always run at this version, whatever the
// brokers run.
const KafkaVersion = "4.4.0"

// MirrorMakerVersion is the MirrorMaker 2 release the benchmarks run, kafka.version in
// mm2-pom.xml: connect-mirror 4.4.0 is not served by the Maven mirror this project reaches
// (checked 2026-12-02), 4.3.0 is; MirrorMaker 2 talks to any broker release over the wire.
const MirrorMakerVersion = "4.3.0"

//go:embed pom.xml
var pomXML []byte

// CacheDir is where resolved jars live between runs: $KMIRROR_CACHE, else the
// user cache directory (~/.cache/kmirror).
func CacheDir() (string, error) {
	if d := os.Getenv("KMIRROR_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kafkatest: no cache directory (set KMIRROR_CACHE): %w", err)
	}
	return filepath.Join(d, "kmirror"), nil
}

// Prerequisites reports what is missing to run real Kafka, phrased as what to
// install. It returns nil when java 17+ and mvn are on PATH.
func Prerequisites() error {
	var missing []string
	javaOut, err := exec.Command("java", "-version").CombinedOutput()
	if err != nil {
		missing = append(missing, "Java 17+ (Debian: apt-get install openjdk-17-jre-headless)")
	} else if major := javaMajor(javaOut); major < 17 {
		missing = append(missing, fmt.Sprintf("Java 17+ (found Java %d; Debian: apt-get install openjdk-17-jre-headless)", major))
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		missing = append(missing, "Maven (Debian: apt-get install maven)")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("real Apache Kafka tests need %v", missing)
}

var javaVersionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

func javaMajor(out []byte) int {
	m := javaVersionRE.FindSubmatch(out)
	if m == nil {
		return 0
	}
	major, _ := strconv.Atoi(string(m[1]))
	if major == 1 && len(m[2]) > 0 { // "1.8" style
		major, _ = strconv.Atoi(string(m[2]))
	}
	return major
}

// Jars resolves the Kafka broker and tool jars into the cache (once; later
// calls and later runs reuse them) and returns the directory that holds them.
// A file lock serialises concurrent test binaries, which `go test ./...` runs
// in parallel, so only one of them downloads.
func Jars(ctx context.Context) (string, error) {
	return resolve(ctx, "kafka-"+KafkaVersion, "Apache Kafka "+KafkaVersion, pomXML)
}

//go:embed mm2-pom.xml
var mm2PomXML []byte

// MirrorMakerJars resolves MirrorMaker 2 (connect-mirror, connect-runtime,
// connect-mirror-client and their dependencies) into a cache directory of its
// own, the same way as Jars, and returns the directory that holds the jars.
func MirrorMakerJars(ctx context.Context) (string, error) {
	return resolve(ctx, "mirrormaker2-"+MirrorMakerVersion, "MirrorMaker 2 "+MirrorMakerVersion, mm2PomXML)
}

// resolve copies the dependencies of pom into <cache>/<name>/libs unless a
// previous run already did so for the same pom bytes.
func resolve(ctx context.Context, name, what string, pomBytes []byte) (string, error) {
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, name)
	libs := filepath.Join(dir, "libs")
	done := filepath.Join(dir, "resolved")
	if b, err := os.ReadFile(done); err == nil && bytes.Equal(b, pomBytes) {
		return libs, nil
	}
	if err := Prerequisites(); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: create jar cache: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	// Another process may have finished while we waited for the lock.
	if b, err := os.ReadFile(done); err == nil && bytes.Equal(b, pomBytes) {
		return libs, nil
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, pomBytes, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: write pom: %w", err)
	}
	_ = os.RemoveAll(libs)
	fmt.Fprintf(os.Stderr, "kafkatest: resolving %s jars from Maven Central into %s\n", what, libs)
	cmd := exec.CommandContext(ctx, "mvn", "-B", "-q", "-f", pom,
		"dependency:copy-dependencies", "-DoutputDirectory="+libs)
	stop := reportDownload(what)
	out, err := cmd.CombinedOutput()
	stop()
	if err != nil {
		return "", fmt.Errorf("kafkatest: mvn could not resolve %s jars: %w\n%s", what, err, out)
	}
	if err := os.WriteFile(done, pomBytes, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: mark jars resolved: %w", err)
	}
	return libs, nil
}

// reportDownload prints, every 10 s until the returned stop is called, how
// much Maven's local repository (where mvn downloads to) has grown: a first
// make test fetches ~100 MB and would otherwise be silent for minutes.
func reportDownload(what string) (stop func()) {
	home, _ := os.UserHomeDir()
	repo := filepath.Join(home, ".m2", "repository")
	start := dirBytes(repo)
	began := time.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "kafkatest: resolving %s jars: %.1f MB downloaded into %s after %s\n",
					what, float64(dirBytes(repo)-start)/(1<<20), repo, time.Since(began).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// dirBytes is the size of the files under dir (0 if it does not exist).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: open lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("kafkatest: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
