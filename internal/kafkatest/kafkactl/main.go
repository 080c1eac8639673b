// Command kafkactl is the shell face of the real-Kafka test harness
// (scripts/kafka.sh calls it): it starts named clusters that outlive it, stops
// them, and runs Kafka's Java tools on the harness classpath.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kmirror/kmirror/internal/kafkatest"
)

const usage = `usage: scripts/kafka.sh COMMAND
  start NAME [--brokers N] [--version V] [--zookeeper] [--sasl]
                             start real Apache Kafka cluster NAME (KRaft, loopback); prints its bootstrap
                             address on the last line. --version: the Apache Kafka release (default
                             ` + kafkatest.KafkaVersion + `; 2.8 and newer; jars from Maven Central, cached
                             per version). --zookeeper: ZooKeeper mode (2.8–3.9) with a ZooKeeper server
                             the harness starts beside the brokers. --sasl: the client listener is SASL_PLAINTEXT
                             (SCRAM-SHA-512, PLAIN) with the StandardAuthorizer; super users admin and
                             kmirror, alice with topics, groups and transactional ids but nothing on
                             CLUSTER (password USER-secret, e.g. alice-secret);
                             writes admin.properties, kmirror.properties, alice.properties (SCRAM-SHA-512)
                             and USER-plain.properties (PLAIN) into the cluster's directory
  stop NAME                  stop cluster NAME and remove its directory
  bootstrap NAME             print the bootstrap address of running cluster NAME
  dir NAME                   print the directory of cluster NAME (properties files, broker logs)
  tools CLASS [ARGS...]      run a Kafka tool class, e.g. org.apache.kafka.tools.ConsoleProducer
  jars                       resolve the Kafka jars into the cache and print where they are
Clusters live in $KMIRROR_KAFKA_STATE (default $TMPDIR/kmirror-kafka-clusters).`

// errUsage asks main to print the usage and exit 2.
var errUsage = errors.New("usage")

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	cancel()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "kafka.sh:", err)
		os.Exit(1)
	}
}

func stateDir(name string) (string, error) {
	if name == "" || filepath.Base(name) != name || name[0] == '.' {
		return "", fmt.Errorf("invalid cluster name %q: use a plain name such as source", name)
	}
	root := os.Getenv("KMIRROR_KAFKA_STATE")
	if root == "" {
		root = filepath.Join(os.TempDir(), "kmirror-kafka-clusters")
	}
	return filepath.Join(root, name), nil
}

// commands are kafkactl's commands; each gets the arguments after its name.
var commands = map[string]func(ctx context.Context, args []string, stdout io.Writer) error{
	"start":     start,
	"stop":      stop,
	"bootstrap": bootstrap,
	"dir":       dir,
	"tools":     tools,
	"jars":      jars,
}

// run carries out one command; what it prints for scripts goes to stdout.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown command %q\n", args[0])
		return errUsage
	}
	return cmd(ctx, args[1:], stdout)
}

// clusterDir is the directory of the cluster named by the only argument.
func clusterDir(args []string) (name, dir string, err error) {
	if len(args) != 1 {
		return "", "", errUsage
	}
	dir, err = stateDir(args[0])
	return args[0], dir, err
}

func start(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("start", flag.ContinueOnError)
	brokers := fs.Int("brokers", 1, "number of brokers")
	sasl := fs.Bool("sasl", false, "SASL_PLAINTEXT client listener with the StandardAuthorizer and the harness users")
	version := fs.String("version", kafkatest.KafkaVersion, "Apache Kafka release")
	zk := fs.Bool("zookeeper", false, "ZooKeeper mode (2.8–3.9)")
	if len(args) == 0 {
		return errUsage
	}
	name := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	dir, err := stateDir(name)
	if err != nil {
		return err
	}
	if bs, err := kafkatest.ReadBootstrap(dir); err == nil {
		return fmt.Errorf("cluster %s is already running at %s (stop it first)", name, bs)
	}
	c, err := kafkatest.StartReal(ctx, kafkatest.RealConfig{Brokers: *brokers, Dir: dir, Detach: true, SASL: *sasl,
		Version: *version, ZooKeeper: *zk})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, strings.Join(c.Bootstrap(), ","))
	if *sasl {
		fmt.Fprintf(os.Stderr, "cluster %s: SASL_PLAINTEXT; client properties %s\n", name,
			strings.Join([]string{c.PropertiesFile(kafkatest.AdminUser), c.PropertiesFile(kafkatest.KmirrorUser), c.PropertiesFile(kafkatest.AliceUser)}, " "))
	}
	fmt.Fprintf(os.Stderr, "cluster %s: Apache Kafka %s (%s), %d broker(s), logs in %s\n", name, c.Version(), c.Mode(), *brokers, dir)
	return nil
}

func stop(_ context.Context, args []string, _ io.Writer) error {
	_, dir, err := clusterDir(args)
	if err != nil {
		return err
	}
	if err := kafkatest.StopDetached(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func bootstrap(_ context.Context, args []string, stdout io.Writer) error {
	_, dir, err := clusterDir(args)
	if err != nil {
		return err
	}
	bs, err := kafkatest.ReadBootstrap(dir)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, bs)
	return nil
}

func dir(_ context.Context, args []string, stdout io.Writer) error {
	name, dir, err := clusterDir(args)
	if err != nil {
		return err
	}
	if _, err := kafkatest.ReadBootstrap(dir); err != nil {
		return fmt.Errorf("cluster %s is not running: %w", name, err)
	}
	fmt.Fprintln(stdout, dir)
	return nil
}

func tools(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	c, err := kafkatest.ToolCommand(ctx, args[0], args[1:]...)
	if err != nil {
		return err
	}
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, os.Stderr
	return c.Run()
}

func jars(ctx context.Context, _ []string, stdout io.Writer) error {
	libs, err := kafkatest.Jars(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, libs)
	return nil
}
