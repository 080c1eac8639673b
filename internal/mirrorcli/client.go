package mirrorcli

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// request sends one mirror RPC; a failure to get any answer is explained in
// terms of what the operator can check.
func (c *client) request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	resp, err := c.cl.Request(ctx, req)
	if err == nil {
		return resp, nil
	}
	name := protocol.APIName(req.Key())
	switch {
	case strings.Contains(err.Error(), "broker is too old"), strings.Contains(err.Error(), "request key is unknown"):
		return nil, fmt.Errorf("%s: the server at %s does not serve mirror RPCs (it does not list API key %d in ApiVersions); "+
			"--bootstrap-server must be a kmirror proxy, not a Kafka broker", name, c.bootstrap, req.Key())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return nil, fmt.Errorf("%s: no answer from %s within %s (%v); check that --bootstrap-server names a running kmirror proxy, or raise --timeout",
			name, c.bootstrap, c.timeout, err)
	}
	return nil, fmt.Errorf("%s: talking to %s: %w; check --bootstrap-server and --command-config", name, c.bootstrap, err)
}

// retryReads sends a read-only request, retrying while the proxy answers
// with a retriable error (e.g. COORDINATOR_NOT_AVAILABLE right after start).
// code extracts the response's top-level error.
func (c *client) retryReads(ctx context.Context, req kmsg.Request, code func(kmsg.Response) (int16, *string)) (kmsg.Response, error) {
	wait := 200 * time.Millisecond
	for {
		resp, err := c.request(ctx, req)
		if err != nil {
			return nil, err
		}
		ec, msg := code(resp)
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
