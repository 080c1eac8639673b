package kafkatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// MirrorMaker2Config describes one MirrorMaker 2 process in dedicated mode
// (org.apache.kafka.connect.mirror.MirrorMaker) replicating Source to Target
// under the cluster aliases "source" and "target".
type MirrorMaker2Config struct {
	Source, Target string   // bootstrap servers of each cluster
	Topics         []string // source topic names (exact; quoted into MM2's regex list)
	// Props are mm2.properties entries added to, or replacing, the defaults of
	// MirrorMaker2Properties: client tuning such as target.producer.batch.size.
	Props map[string]string
	Dir   string // working directory: mm2.properties, mm2.log, stdout.log (required)
}

// MirrorMaker2Properties is the mm2.properties StartMirrorMaker2 writes for
// cfg: one flow source->target with the default replication policy (target
// topics are named "source.<topic>"), every internal topic at replication
// factor 1 (the harness clusters may have one broker), and nothing but the
// topic data replicated: no heartbeats, checkpoints, group offset or ACL
// sync. cfg.Props win over these defaults.
func MirrorMaker2Properties(cfg MirrorMaker2Config) map[string]string {
	quoted := make([]string, len(cfg.Topics))
	for i, t := range cfg.Topics {
		quoted[i] = regexp.QuoteMeta(t)
	}
	props := map[string]string{
		"clusters":                              "source,target",
		"source.bootstrap.servers":              cfg.Source,
		"target.bootstrap.servers":              cfg.Target,
		"source->target.enabled":                "true",
		"target->source.enabled":                "false",
		"source->target.topics":                 strings.Join(quoted, ","),
		"replication.factor":                    "1",
		"offset-syncs.topic.replication.factor": "1",
		"heartbeats.topic.replication.factor":   "1",
		"checkpoints.topic.replication.factor":  "1",
		"config.storage.replication.factor":     "1",
		"offset.storage.replication.factor":     "1",
		"status.storage.replication.factor":     "1",
		"emit.heartbeats.enabled":               "false",
		// MirrorCheckpointConnector then refuses to start and logs one ERROR
		// saying so; that is expected.
		"emit.checkpoints.enabled":   "false",
		"sync.group.offsets.enabled": "false",
		// The harness brokers run without an authorizer.
		"sync.topic.acls.enabled": "false",
		// Scanning the classpath for plugins costs several seconds at start.
		"plugin.discovery": "service_load",
	}
	for k, v := range cfg.Props {
		props[k] = v
	}
	return props
}

// MirrorMaker2 is a running MirrorMaker 2 JVM.
type MirrorMaker2 struct {
	dir    string
	pid    int
	proc   *os.Process
	exited chan struct{}
}

const mm2Log4j = `rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName=%s
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%%d] %%p %%m (%%c)%%n
`

// StartMirrorMaker2 resolves MirrorMaker 2 from Maven Central (cached) and
// starts it in dedicated mode. It returns once the JVM runs; replication
// starts some seconds later (Connect group, connector and task start-up), so
// callers poll the target for what they expect. The JVM dies with this
// process; its logs stay in cfg.Dir.
func StartMirrorMaker2(ctx context.Context, cfg MirrorMaker2Config) (*MirrorMaker2, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("kafkatest: MirrorMaker2Config.Dir is required")
	}
	libs, err := MirrorMakerJars(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafkatest: create MirrorMaker 2 dir: %w", err)
	}
	propsFile := filepath.Join(cfg.Dir, "mm2.properties")
	if err := os.WriteFile(propsFile, []byte(propertiesText(MirrorMaker2Properties(cfg))), 0o644); err != nil {
		return nil, fmt.Errorf("kafkatest: write mm2.properties: %w", err)
	}
	log4j := filepath.Join(cfg.Dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(fmt.Sprintf(mm2Log4j, filepath.Join(cfg.Dir, "mm2.log"))), 0o644); err != nil {
		return nil, fmt.Errorf("kafkatest: write MirrorMaker 2 log4j config: %w", err)
	}
	// Not the caller's ctx: the process lives until Stop, not for one call.
	cmd := javaCommand(context.Background(), libs, log4j, "org.apache.kafka.connect.mirror.MirrorMaker", propsFile)
	out, err := os.Create(filepath.Join(cfg.Dir, "stdout.log"))
	if err != nil {
		return nil, fmt.Errorf("kafkatest: open MirrorMaker 2 stdout log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A test binary that dies must not leave the JVM behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("kafkatest: start MirrorMaker 2: %w", err)
	}
	m := &MirrorMaker2{dir: cfg.Dir, pid: cmd.Process.Pid, proc: cmd.Process, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(m.exited)
	}()
	return m, nil
}

// Pid is the JVM's process id (for /proc/<pid>/stat and status).
func (m *MirrorMaker2) Pid() int { return m.pid }

// Dir is the working directory with mm2.properties and the logs.
func (m *MirrorMaker2) Dir() string { return m.dir }

// Exited is closed when the JVM has exited.
func (m *MirrorMaker2) Exited() <-chan struct{} { return m.exited }

// LogTail is the end of the JVM's stdout and log4j logs, for error messages.
func (m *MirrorMaker2) LogTail() string {
	return tailFile(filepath.Join(m.dir, "stdout.log"), 2048) + tailFile(filepath.Join(m.dir, "mm2.log"), 4096)
}

// Stop asks the JVM to shut down (SIGTERM) and kills it when that takes
// longer than stopTimeout. Stopping a stopped process does nothing.
func (m *MirrorMaker2) Stop() error {
	select {
	case <-m.exited:
		return nil
	default:
	}
	_ = m.proc.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = m.proc.Kill()
	<-m.exited
	return fmt.Errorf("kafkatest: MirrorMaker 2 (pid %d) did not stop within %s and was killed", m.pid, stopTimeout)
}

// StartMM2 is StartMirrorMaker2 for a test: cfg.Dir defaults to a fresh
// directory, the process is stopped when the test ends, and its directory is
// removed after a passing test and kept, with its path logged, after a
// failing one.
func StartMM2(t testing.TB, cfg MirrorMaker2Config) *MirrorMaker2 {
	t.Helper()
	RequireReal(t)
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "kmirror-mm2-")
		if err != nil {
			t.Fatalf("kafkatest: temp dir: %v", err)
		}
		cfg.Dir = dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := StartMirrorMaker2(ctx, cfg)
	if err != nil {
		t.Fatalf("%v (files in %s)", err, cfg.Dir)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Logf("%v", err)
		}
		if t.Failed() || os.Getenv("KMIRROR_KEEP_KAFKA_LOGS") != "" {
			t.Logf("kafkatest: MirrorMaker 2 logs kept in %s (mm2.log, stdout.log, mm2.properties)", cfg.Dir)
			return
		}
		_ = os.RemoveAll(cfg.Dir)
	})
	return m
}
