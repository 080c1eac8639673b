package mirrorcli

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kmirror/kmirror/protocol"
)

// client sends mirror RPCs to a kmirror proxy.
type client struct {
	bootstrap string
	timeout   time.Duration
	cl        *kgo.Client

	probeMu sync.Mutex
	probed  bool // the server advertised this build's mirror keys (probe)
}

func newClient(bootstrap string, timeout time.Duration, extra []kgo.Opt) (*client, error) {
	var seeds []string
	for _, s := range strings.Split(bootstrap, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, usagef("--bootstrap-server %q names no address; give HOST:PORT of the kmirror proxy", bootstrap)
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("kmirror-mirrors"),
		// kgo sends only keys its max-versions table lists; add the mirror keys.
		kgo.MaxVersions(protocol.KgoMaxVersions(nil)),
		kgo.DialTimeout(10 * time.Second),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, usagef("cannot build a client for --bootstrap-server %s: %v", bootstrap, err)
	}
	return &client{bootstrap: bootstrap, timeout: timeout, cl: cl}, nil
}

func (c *client) close() { c.cl.Close() }

// probe checks once that the server advertises the mirror RPCs at the keys
// this build sends: a Kafka broker, or a kmirror of another version whose
// keys differ, gets a clear message instead of a request it would misread.
func (c *client) probe(ctx context.Context) error {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	if c.probed {
		return nil
	}
	err := protocol.ProbeMirrorAPIs(ctx, c.cl)
	if errors.Is(err, protocol.ErrNotMirrorServer) {
		return fmt.Errorf("--bootstrap-server %s: %w; it must be a kmirror proxy of this version, not a Kafka broker", c.bootstrap, err)
	}
	if err != nil {
		return c.explain("ApiVersions", err)
	}
	c.probed = true
	return nil
}

// request sends one mirror RPC; a failure to get any answer is explained in
// terms of what the operator can check.
func (c *client) request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	if err := c.probe(ctx); err != nil {
		return nil, err
	}
	resp, err := c.cl.Request(ctx, req)
	if err == nil {
		return resp, nil
	}
	return nil, c.explain(protocol.APIName(req.Key()), err)
}

// explain turns a failure to get an answer to request name into what the
// operator can check.
func (c *client) explain(name string, err error) error {
	switch {
	case strings.Contains(err.Error(), "broker is too old"), strings.Contains(err.Error(), "request key is unknown"):
		// The probe passed, so a broker behind the bootstrap one lacks the keys.
		return fmt.Errorf("%s: a server behind %s does not serve kmirror's mirror RPCs at keys %s (%v); "+
			"--bootstrap-server must be a kmirror proxy of this version, not a Kafka broker", name, c.bootstrap, protocol.MirrorKeyRange(), err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: no answer from %s within %s (%v); check that --bootstrap-server names a running kmirror proxy, or raise --timeout",
			name, c.bootstrap, c.timeout, err)
	}
	return fmt.Errorf("%s: talking to %s: %w; check --bootstrap-server and --command-config", name, c.bootstrap, err)
}

// send sends a mirror RPC once and returns its response, or the response's
// top-level error.
func send[R kmsg.Response](ctx context.Context, c *client, req kmsg.Request) (R, error) {
	resp, err := c.request(ctx, req)
	return checked[R](resp, err)
}

// read is send for a read-only RPC, retried while the proxy answers with a
// retriable error (e.g. COORDINATOR_NOT_AVAILABLE right after start).
func read[R kmsg.Response](ctx context.Context, c *client, req kmsg.Request) (R, error) {
	resp, err := c.retryReads(ctx, req)
	return checked[R](resp, err)
}

// sendAgain is send for a mirror RPC that has the same effect sent twice (a
// failover, pause or resume of a topic that already has it is answered as
// done), retried as read is. A failover asked while a destination broker
// restarts (a state topic partition without its leader) is answered
// COORDINATOR_NOT_AVAILABLE, "retry shortly": the command retries it within
// --timeout, as Kafka's own tools retry retriable errors, rather than leave
// the operator to (the soak's failover, asked in such an outage, failed at
// its nine attempts within two seconds).
func sendAgain[R kmsg.Response](ctx context.Context, c *client, req kmsg.Request) (R, error) {
	return read[R](ctx, c, req)
}

func checked[R kmsg.Response](resp kmsg.Response, err error) (R, error) {
	var zero R
	if err != nil {
		return zero, err
	}
	if err := protocol.ResponseError(topError(resp)); err != nil {
		return zero, err
	}
	return resp.(R), nil
}

// topError is a mirror RPC response's top-level error code and message:
// every mirror RPC response has ErrorCode and ErrorMessage fields
// (TestTopError checks each), read by name so that one line serves them all.
func topError(resp kmsg.Response) (int16, *string) {
	v := reflect.ValueOf(resp).Elem()
	code, msg := v.FieldByName("ErrorCode"), v.FieldByName("ErrorMessage")
	if !code.IsValid() || !msg.IsValid() {
		return 0, nil
	}
	return int16(code.Int()), msg.Interface().(*string)
}

// retryReads sends a request that may be sent again (a read, or sendAgain's),
// retrying while the proxy answers with a retriable top-level error.
func (c *client) retryReads(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	wait := 200 * time.Millisecond
	for {
		resp, err := c.request(ctx, req)
		if err != nil {
			return nil, err
		}
		ec, msg := topError(resp)
		perr := protocol.ErrorForCode(ec)
		if perr == nil || !perr.Retriable {
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: still failing after retries until --timeout %s: %w", protocol.APIName(req.Key()), c.timeout, protocol.ResponseError(ec, msg))
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
