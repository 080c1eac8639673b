package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kmirror/kmirror/mirrorcli"
)

// mirrorName is the soak's one mirror.
const mirrorName = "soak"

// cli runs `kmirror mirrors` (the operator's CLI, the real binary) against
// the first instance that answers, skipping the one a fault holds down:
// pause, resume, --alter, --remove and describe go the way an operator's do.
func (w *world) cli(ctx context.Context, args ...string) (string, error) {
	var errs []string
	for attempt := range 3 * len(w.inst) {
		p := w.inst[(attempt+w.busyInstance())%len(w.inst)]
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		full := append([]string{"mirrors", "--bootstrap-server", p.addr, "--timeout", "60s"}, args...)
		out, err := exec.CommandContext(cctx, w.bin, full...).CombinedOutput()
		cancel()
		if err == nil {
			return string(out), nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v: %s", p.name, err, strings.TrimSpace(string(out))))
		if ctx.Err() != nil {
			break
		}
	}
	return "", fmt.Errorf("kmirror mirrors %s: %s", strings.Join(args, " "), strings.Join(errs, "; "))
}

// busyInstance is the index after the instance a fault holds (0 when none):
// where the CLI starts trying.
func (w *world) busyInstance() int {
	w.busyMu.Lock()
	defer w.busyMu.Unlock()
	return (w.busy + 1) % len(w.inst)
}

func (w *world) createMirror(ctx context.Context, dir string) error {
	cfg := filepath.Join(dir, "mirror.properties")
	body := "bootstrap.servers=" + strings.Join(w.front.Addrs(), ",") + "\n" +
		"metadata.refresh.interval.ms=2000\n" + "fetch.max.bytes=65536\n" +
		"failed.retry.initial.backoff.ms=200\n" + "failed.retry.max.backoff.ms=2000\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		return err
	}
	_, err := w.cli(ctx, "--create", "--mirror", mirrorName, "--mirror-config", cfg)
	return err
}

// describe is `--describe --json` of the soak's mirror.
func (w *world) describe(ctx context.Context) (*mirrorcli.MirrorJSON, error) {
	out, err := w.cli(ctx, "--describe", "--mirror", mirrorName, "--json")
	if err != nil {
		return nil, err
	}
	var d mirrorcli.DescribeJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return nil, fmt.Errorf("describe --json: %w: %s", err, out)
	}
	if len(d.Mirrors) != 1 {
		return nil, fmt.Errorf("describe --json lists %d mirrors: %s", len(d.Mirrors), out)
	}
	return &d.Mirrors[0], nil
}
