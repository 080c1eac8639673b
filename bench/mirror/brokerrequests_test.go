package mirrorbench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kmirror/kmirror/internal/freeport"
	"github.com/kmirror/kmirror/internal/kafkatest"
)

// The destination broker's own account of each copy's Produce requests (issue 18, §3: is a
// slow copy kmirror's or the broker's?): KMIRROR_BENCH_BROKER_REQUESTS=1 reads the broker's
// request metrics (kafka.network RequestMetrics for Produce, and its request handler threads'
// idle share) over JMX before and after each path's copy and logs the window's requests, how
// long each spent where on average, and how idle the handler threads were. The JMX agent is
// started in the running broker (jcmd ManagementAgent.start, loopback, no authentication: a
// benchmark's own broker) and read with Kafka's JmxTool, outside the timed window.
var brokerRequestsOn = os.Getenv("KMIRROR_BENCH_BROKER_REQUESTS") != ""

// produceStages are the RequestMetrics histograms a Produce's time splits into (Kafka's
// RequestChannel: queued for a handler, handled, waiting in purgatory for acks, queued for
// the network thread, sent), and its whole.
var produceStages = []string{"RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs", "ResponseSendTimeMs", "ThrottleTimeMs", "TotalTimeMs"}

const handlerIdle = "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent"

// brokerRequests reads one broker's metrics.
type brokerRequests struct {
	url string
}

// requestSnapshot is a reading: "ObjectName:Attribute" -> value, and when it was taken.
type requestSnapshot struct {
	at     time.Time
	values map[string]float64
}

// destinationRequests starts the JMX agent of the destination's (first) broker, once per
// run; nil when the variable is unset or the destination is not real Kafka.
func (e *env) destinationRequests(b *testing.B) *brokerRequests {
	if !brokerRequestsOn || e.dst.Real() == nil {
		return nil
	}
	if e.dstRequests != nil {
		return e.dstRequests
	}
	port, err := freeport.Ports(1)
	if err != nil {
		b.Fatal(err)
	}
	pid := e.dst.Real().PIDs()[0]
	p := strconv.Itoa(port[0])
	if out, err := exec.Command("jcmd", strconv.Itoa(pid), "ManagementAgent.start", "jmxremote.port="+p, "jmxremote.rmi.port="+p,
		"jmxremote.host=127.0.0.1", "jmxremote.authenticate=false", "jmxremote.ssl=false").CombinedOutput(); err != nil {
		b.Fatalf("jcmd ManagementAgent.start on the destination broker %d: %v: %s", pid, err, out)
	}
	e.dstRequests = &brokerRequests{url: "service:jmx:rmi:///jndi/rmi://127.0.0.1:" + p + "/jmxrmi"}
	return e.dstRequests
}

// snapshot reads the Produce stages' counts and means and the handlers' idle meter.
func (r *brokerRequests) snapshot(ctx context.Context, b *testing.B) requestSnapshot {
	if r == nil {
		return requestSnapshot{}
	}
	cmd, err := kafkatest.ToolCommand(ctx, "org.apache.kafka.tools.JmxTool", "--jmx-url", r.url, "--one-time", "true",
		"--report-format", "properties", "--attributes", "Count,Mean",
		"--object-name", "kafka.network:type=RequestMetrics,name=*TimeMs,request=Produce", "--object-name", handlerIdle)
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("JmxTool: %v: %s", err, out)
	}
	s := requestSnapshot{at: at, values: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		// ObjectName:Attribute=value, the object name holding '=' of its own.
		line := sc.Text()
		if i := strings.LastIndex(line, "="); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				s.values[line[:i]] = v
			}
		}
	}
	return s
}

// describe is what the broker did with Produce requests between two snapshots, for bytes
// of records: how many requests, their mean time in each stage, the handler threads' idle share.
func describeRequests(from, to requestSnapshot, bytes int64) string {
	if to.values == nil {
		return ""
	}
	stage := func(name string) (count, mean float64) {
		key := "kafka.network:type=RequestMetrics,name=" + name + ",request=Produce:"
		c1, c2 := from.values[key+"Count"], to.values[key+"Count"]
		if c2 <= c1 {
			return 0, 0
		}
		// The histograms' means are over every value since the broker started (sum/count).
		return c2 - c1, (c2*to.values[key+"Mean"] - c1*from.values[key+"Mean"]) / (c2 - c1)
	}
	n, _ := stage("TotalTimeMs")
	var parts []string
	for _, name := range produceStages {
		_, m := stage(name)
		parts = append(parts, fmt.Sprintf("%s %.1f", strings.TrimSuffix(name, "TimeMs"), m))
	}
	// The idle meter is marked with each handler's idle nanoseconds over the thread count.
	idle := (to.values[handlerIdle+":Count"] - from.values[handlerIdle+":Count"]) / float64(to.at.Sub(from.at).Nanoseconds())
	perReq := 0.0
	if n > 0 {
		perReq = float64(bytes) / n / 1e3
	}
	return fmt.Sprintf("destination broker: %.0f Produce requests (%.0f kB of records each), mean ms: %s; request handlers idle %.0f %%",
		n, perReq, strings.Join(parts, ", "), 100*idle)
}

// logRequests logs what the destination broker did with path's Produce requests, when asked.
func logRequests(b *testing.B, path string, from, to requestSnapshot, bytes int64) {
	if d := describeRequests(from, to, bytes); d != "" {
		b.Logf("%s: %s", path, d)
	}
}
