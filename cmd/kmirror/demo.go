package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/instance"
	"github.com/kmirror/kmirror/protocol"
	"github.com/kmirror/kmirror/proxy"
)

// `kmirror demo` (make run) shows the whole product on embedded clusters:
// a source and a destination (franz-go's kfake, in this process), kmirror in
// front of the destination, a mirror over a demo topic fed by a small
// producer, and a live status line. The same binary runs against real
// clusters with `kmirror proxy`.
func init() {
	register(command{name: "demo", summary: "mirror a demo topic between embedded clusters, with a live status line", run: runDemo})
}

// demo is one run of `kmirror demo`: its flags and what it started.
type demo struct {
	listen           string
	rate, partitions int
	src, dst         *kfake.Cluster
	auditLog         string
	in               *instance.Instance
	// routes and log are what --switch gives kmirror (demo_switch.go); the
	// plain demo has no route and a silent logger.
	routes []proxy.RouteConfig
	log    *slog.Logger
}

func runDemo(ctx context.Context, args []string) error { return runDemoTo(ctx, args, os.Stdout) }

// runDemoTo is runDemo printing to out, so that a test can run the demo in
// process and read what it printed.
func runDemoTo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("kmirror demo", flag.ContinueOnError)
	d := &demo{}
	fs.StringVar(&d.listen, "listen", "127.0.0.1:19092", "where kmirror listens for clients")
	fs.IntVar(&d.rate, "rate", 200, "records per second the demo producer (with --switch: the application) writes")
	fs.IntVar(&d.partitions, "partitions", 3, "partitions of the demo topic")
	duration := fs.Duration("duration", 0, "stop after this long (0: until Ctrl-C); with --switch, stop the application and check what it read")
	var sw switchFlags
	sw.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if sw.enabled {
		if err := sw.check(*duration); err != nil {
			return err
		}
		return d.runSwitch(ctx, out, sw, *duration)
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	stop, err := d.startClusters()
	if err != nil {
		return err
	}
	defer stop()
	runDone, err := d.startKmirror(ctx)
	if err != nil {
		return err
	}
	addr := d.in.Proxy.Addr()

	producer, err := kgo.NewClient(kgo.SeedBrokers(d.src.ListenAddrs()...), kgo.DefaultProduceTopic("demo"))
	if err != nil {
		return err
	}
	defer producer.Close()
	go feed(ctx, producer, d.rate)

	adminCl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(protocol.KgoMaxVersions(nil)))
	if err != nil {
		return err
	}
	defer adminCl.Close()
	if err := setUpMirror(ctx, adminCl, strings.Join(d.src.ListenAddrs(), ",")); err != nil {
		return err
	}
	d.banner(out)
	return showStatus(ctx, out, adminCl, runDone)
}

// startClusters starts the embedded source and destination, and makes the
// directory of the audit log; stop undoes all three.
func (d *demo) startClusters() (stop func(), err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if d.src, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(d.partitions), "demo")); err != nil {
		return nil, fmt.Errorf("embedded source cluster: %w", err)
	}
	undo = append(undo, d.src.Close)
	if d.dst, err = kfake.NewCluster(kfake.NumBrokers(1)); err != nil {
		return nil, fmt.Errorf("embedded destination cluster: %w", err)
	}
	undo = append(undo, d.dst.Close)
	// Audit lines go to a file: on the terminal the demo's own polling would print one a second.
	auditDir, err := os.MkdirTemp("", "kmirror-demo-")
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = os.RemoveAll(auditDir) })
	d.auditLog = filepath.Join(auditDir, "audit.log")
	return stop, nil
}

// startKmirror starts kmirror in front of the destination; runDone gets
// what its Run returns once ctx ends.
func (d *demo) startKmirror(ctx context.Context) (runDone chan error, err error) {
	log := d.log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d.in, err = instance.New(ctx, instance.Config{
		Proxy: proxy.Config{Upstream: d.dst.ListenAddrs(), Listen: d.listen, MetricsAddr: "127.0.0.1:0",
			AuditLog: d.auditLog, Routes: d.routes},
		Mirroring: true, StatePartitions: 5, SessionTimeout: 6 * time.Second, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if err := d.in.Start(ctx); err != nil {
		flags := "--listen"
		if len(d.routes) > 0 {
			flags = "--listen or --route-listen"
		}
		return nil, fmt.Errorf("kmirror listen on %s: %w (choose another with %s)", d.listen, err, flags)
	}
	runDone = make(chan error, 1)
	go func() { runDone <- d.in.Run(ctx) }()
	return runDone, nil
}

func (d *demo) banner(out io.Writer) {
	addr := d.in.Proxy.Addr()
	fmt.Fprintf(out, `kmirror demo
  source cluster (embedded):       %s   topic "demo", %d partitions, ~%d records/s
  destination cluster (embedded):  %s
  kmirror (in front of it):        %s   mirror "demo" copies topic "demo"
  metrics:                         http://%s/metrics
  status page:                     http://%[6]s/
  audit log (one line per mirror RPC and refusal, deleted at exit): %s

Try, in another terminal (make run built bin/kmirror):
  bin/kmirror mirrors --bootstrap-server %s --describe
  kcat -b %s -C -t demo -o beginning -c 100 -q | wc -l   (read 100 mirrored records through kmirror)
  kcat -b %s -P -t demo <<< "refused"                     (mirror topics are read-only)
  bin/kmirror mirrors --bootstrap-server %s --remove --mirror demo --topics demo --wait   (fail over)
  kcat -b %s -P -t demo <<< "after failover"              (produce again: now accepted)
  bin/kmirror mirrors --bootstrap-server %s --delete --mirror demo
The embedded clusters are franz-go's kfake (in memory, no JVM); everything else is the real kmirror.
Ctrl-C stops.

`, strings.Join(d.src.ListenAddrs(), ","), d.partitions, d.rate, strings.Join(d.dst.ListenAddrs(), ","), addr, d.in.Proxy.MetricsAddr(), d.auditLog, addr, addr, addr, addr, addr, addr)
}

// showStatus prints the status line every second until ctx ends, then
// waits for kmirror to stop.
func showStatus(ctx context.Context, out io.Writer, adminCl *kgo.Client, runDone <-chan error) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "\nstopping")
			err := <-runDone
			if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return err
		case <-tick.C:
			fmt.Fprintf(out, "\r%s", status(ctx, adminCl))
		}
	}
}

func feed(ctx context.Context, cl *kgo.Client, rate int) {
	t := time.NewTicker(time.Second / time.Duration(max(1, rate)))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("key-%d", i%100)), Value: []byte(fmt.Sprintf("demo record %d at %s", i, time.Now().Format(time.RFC3339Nano)))}, nil)
	}
}

func setUpMirror(ctx context.Context, cl *kgo.Client, source string) error {
	create := protocol.NewPtrCreateMirrorRequest()
	create.MirrorName = "demo"
	create.Configs = []protocol.CreateMirrorRequestConfig{
		{Name: "bootstrap.servers", Value: kmsg.StringPtr(source)},
		{Name: "metadata.refresh.interval.ms", Value: kmsg.StringPtr("5000")},
	}
	resp, err := cl.Request(ctx, create)
	if err != nil {
		return fmt.Errorf("create mirror: %w", err)
	}
	if err := protocol.ResponseError(resp.(*protocol.CreateMirrorResponse).ErrorCode, resp.(*protocol.CreateMirrorResponse).ErrorMessage); err != nil {
		return fmt.Errorf("create mirror: %w", err)
	}
	add := protocol.NewPtrAddTopicsToMirrorRequest()
	add.MirrorName = "demo"
	add.Topics = []protocol.AddTopicsToMirrorRequestTopic{{Name: "demo", NumPartitions: -1}}
	aresp, err := cl.Request(ctx, add)
	if err != nil {
		return fmt.Errorf("add topic: %w", err)
	}
	ar := aresp.(*protocol.AddTopicsToMirrorResponse)
	if err := protocol.ResponseError(ar.ErrorCode, ar.ErrorMessage); err != nil {
		return fmt.Errorf("add topic: %w", err)
	}
	for _, t := range ar.Topics {
		if err := protocol.ResponseError(t.ErrorCode, t.ErrorMessage); err != nil {
			return fmt.Errorf("add topic %s: %w", t.Name, err)
		}
	}
	return nil
}

// status is one line: records on each side, lag, partitions by state.
func status(ctx context.Context, cl *kgo.Client) string {
	req := protocol.NewPtrDescribeMirrorsRequest()
	req.MirrorNames = []string{"demo"}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		return statusLine(fmt.Sprintf("status unavailable: %v", err))
	}
	return statusLine(formatStatus(time.Now(), resp.(*protocol.DescribeMirrorsResponse)))
}

// statusWidth keeps the live line inside an 80-column terminal: it is
// redrawn with \r, and a line that wraps scrolls instead.
const statusWidth = 79

// statusLine pads (to blank out a longer previous line) or cuts s to
// statusWidth.
func statusLine(s string) string {
	if r := []rune(s); len(r) > statusWidth {
		return string(r[:statusWidth-1]) + "…"
	}
	return s + strings.Repeat(" ", statusWidth-len([]rune(s)))
}

func formatStatus(now time.Time, resp *protocol.DescribeMirrorsResponse) string {
	var srcHW, dstHW, lag int64
	states := map[string]int{}
	for _, m := range resp.Mirrors {
		if err := protocol.ResponseError(m.ErrorCode, m.ErrorMessage); err != nil {
			return fmt.Sprintf("%s  mirror demo: %v", now.Format("15:04:05"), err)
		}
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				srcHW += max(0, p.SourceHighWatermark)
				dstHW += max(0, p.DestinationHighWatermark)
				lag += max(0, p.Lag)
				states[p.State]++
			}
		}
	}
	line := fmt.Sprintf("%s  source %d, destination %d, lag %d", now.Format("15:04:05"), srcHW, dstHW, lag)
	if len(states) == 0 {
		return line + "; no partitions"
	}
	var st []string
	for _, s := range slices.Sorted(maps.Keys(states)) {
		st = append(st, fmt.Sprintf("%d %s", states[s], s))
	}
	return line + "; " + strings.Join(st, ", ")
}
