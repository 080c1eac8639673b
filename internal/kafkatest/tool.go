package kafkatest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// toolLog4j sends tool logging to stderr at WARN so tool output stays readable.
const toolLog4j = `rootLogger.level=WARN
rootLogger.appenderRef.err.ref=err
appender.err.type=Console
appender.err.name=err
appender.err.target=SYSTEM_ERR
appender.err.layout.type=PatternLayout
appender.err.layout.pattern=[%d] %p %m (%c)%n
`

// ToolCommand runs a Kafka tool class (for example
// org.apache.kafka.tools.ConsoleProducer or org.apache.kafka.tools.TopicCommand)
// from the kafka-tools jars; stdin, stdout and stderr are the caller's to set.
func ToolCommand(ctx context.Context, class string, args ...string) (*exec.Cmd, error) {
	libs, err := Jars(ctx)
	if err != nil {
		return nil, err
	}
	log4j := filepath.Join(filepath.Dir(libs), "tools-log4j2.properties")
	if _, err := os.Stat(log4j); err != nil {
		// Write and rename: tests in other packages may read it meanwhile.
		tmp := fmt.Sprintf("%s.%d", log4j, os.Getpid())
		if err := os.WriteFile(tmp, []byte(toolLog4j), 0o644); err != nil {
			return nil, fmt.Errorf("kafkatest: write tool log4j config: %w", err)
		}
		if err := os.Rename(tmp, log4j); err != nil {
			return nil, fmt.Errorf("kafkatest: install tool log4j config: %w", err)
		}
	}
	return javaCommand(ctx, libs, log4j, class, args...), nil
}

// RunToolInput is RunTool with stdin.
func RunToolInput(t testing.TB, ctx context.Context, stdin, class string, args ...string) (string, error) {
	t.Helper()
	RequireReal(t)
	cmd, err := ToolCommand(ctx, class, args...)
	if err != nil {
		return "", err
	}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kafkatest: %s %v: %w\n%s", class, args, err, out)
	}
	return string(out), nil
}

// RunTool runs a Kafka tool class to completion and returns its combined
// output; a non-zero exit is an error that carries the output.
func RunTool(t testing.TB, ctx context.Context, class string, args ...string) (string, error) {
	t.Helper()
	return RunToolInput(t, ctx, "", class, args...)
}
